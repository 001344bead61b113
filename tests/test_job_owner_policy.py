"""Jobs that name a queued job as their owner (platform review, high): Kueue leaves such a child alone
(no queue label, no Workload; v0.19.2 jobframework/defaults.go, reconciler.go shouldSuspendChildJob) and the
job controller makes its pods, which the GPU pod policy trusts: a notebook user could run GPU Jobs Kueue
never counts by naming a running, admitted Job as their owner. The policy lets only the owner's own
controller create such children."""

from __future__ import annotations

from typing import Any, Optional

import celpy
import pytest

from gpu_platform.components.platform.common import TRAINER_NAMESPACE
from gpu_platform.components.platform.queue import (
    JOBSET_CONTROLLER_USER, KUEUE_ADMISSION_GATE, KUEUE_CONTROLLER_USER, TRAINER_CONTROLLER_USER,
    render_admission_gate_policy, render_job_owner_policy,
)
from tests.fit_support import need_charts, rendered

USER = "system:serviceaccount:jupyterhub:notebook-user"
OWNERS = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "TrainJob": "trainer.kubeflow.org/v1alpha1",
          "Trial": "kubeflow.org/v1beta1", "CronJob": "batch/v1"}


def refusal(kind: str, owner: Optional[str], user: str = USER) -> Optional[str]:
    spec = render_job_owner_policy()["spec"]
    meta: dict[str, Any] = {"name": "j", "namespace": "training"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": OWNERS[owner], "kind": owner, "name": "anchor", "uid": "u",
                                    "controller": True}]
    act = {"object": celpy.json_to_cel({"kind": kind, "metadata": meta}),
           "request": celpy.json_to_cel({"kind": {"kind": kind}, "userInfo": {"username": user}})}
    env = celpy.Environment()
    for v in spec["validations"]:
        if not env.program(env.compile(v["expression"])).evaluate(act):
            return v["message"]
    return None


@pytest.mark.parametrize("kind, owner", [("Job", "Job"), ("Job", "JobSet"), ("Job", "TrainJob"),
                                         ("JobSet", "JobSet"), ("JobSet", "TrainJob")])
def test_a_user_cannot_hang_a_job_under_a_queued_one(kind, owner):
    said = refusal(kind, owner)
    assert said and "may not name a Job, JobSet or TrainJob as its owner" in said


@pytest.mark.parametrize("kind, owner, user", [
    ("Job", "JobSet", JOBSET_CONTROLLER_USER),        # the Jobs of a JobSet
    ("JobSet", "TrainJob", TRAINER_CONTROLLER_USER),  # the JobSet of a TrainJob
    ("Job", None, USER),                              # a Job on its own: Kueue queues it
    ("Job", "Trial", USER),                           # Katib's trial Jobs (Kueue queues them)
    ("Job", "CronJob", USER),
])
def test_the_controllers_own_children_and_unowned_jobs_pass(kind, owner, user):
    assert refusal(kind, owner, user) is None


def test_a_controller_may_only_make_its_own_kind_of_child():
    assert refusal("JobSet", "JobSet", JOBSET_CONTROLLER_USER)  # JobSet does not make JobSets
    assert refusal("Job", "Job", TRAINER_CONTROLLER_USER)


def test_the_trusted_service_accounts_are_the_ones_the_pinned_trainer_chart_runs_its_controllers_as():
    need_charts()
    (trainer,) = [r for r in rendered("gcp-prod") if r.name == "kubeflow-trainer"]
    accounts = {f"system:serviceaccount:{o['metadata'].get('namespace', TRAINER_NAMESPACE)}:{o['metadata']['name']}"
                for o in trainer.objects if o["kind"] == "ServiceAccount"}
    used = {f"system:serviceaccount:{o['metadata'].get('namespace', TRAINER_NAMESPACE)}:"
            f"{o['spec']['template']['spec'].get('serviceAccountName')}"
            for o in trainer.objects if o["kind"] == "Deployment"}
    assert {JOBSET_CONTROLLER_USER, TRAINER_CONTROLLER_USER} <= accounts & used, (accounts, used)


# --- Kueue's admission gate: only Kueue removes it ----------------------------------------------------------------

def gate_refusal(old_gates: list, new_gates: list, user: str = USER) -> Optional[str]:
    """What admission-gate-removed-only-by-kueue says to a pod UPDATE, evaluated as the API server does
    (variables first, then each validation)."""
    spec = render_admission_gate_policy()["spec"]
    act: dict[str, Any] = {
        "oldObject": celpy.json_to_cel({"spec": {"schedulingGates": [{"name": g} for g in old_gates]} if old_gates else {}}),
        "object": celpy.json_to_cel({"spec": {"schedulingGates": [{"name": g} for g in new_gates]} if new_gates else {}}),
        "request": celpy.json_to_cel({"operation": "UPDATE", "userInfo": {"username": user}})}
    env = celpy.Environment()
    variables = {v["name"]: env.program(env.compile(v["expression"])).evaluate(act) for v in spec["variables"]}
    act["variables"] = celpy.json_to_cel({k: bool(v) for k, v in variables.items()})
    for v in spec["validations"]:
        if not env.program(env.compile(v["expression"])).evaluate(act):
            return v["message"]
    return None


def test_a_user_cannot_remove_kueues_admission_gate():
    said = gate_refusal([KUEUE_ADMISSION_GATE], [])
    assert said and "only Kueue removes the scheduling gate" in said
    # Removing it while keeping another gate is the same bypass.
    assert gate_refusal([KUEUE_ADMISSION_GATE, "example.com/other"], ["example.com/other"])


@pytest.mark.parametrize("old, new, user", [
    ([KUEUE_ADMISSION_GATE], [], KUEUE_CONTROLLER_USER),        # Kueue admits the pod
    ([KUEUE_ADMISSION_GATE], [KUEUE_ADMISSION_GATE], USER),     # a label or annotation change
    ([], [], USER),                                             # an ungated pod
    (["example.com/other"], [], USER),                          # someone else's gate
])
def test_kueue_ungates_and_other_updates_pass(old, new, user):
    assert gate_refusal(old, new, user) is None


def test_the_gate_policy_matches_pod_updates_in_the_queue_namespaces_only():
    spec = render_admission_gate_policy()["spec"]
    rules = spec["matchConstraints"]["resourceRules"]
    assert rules == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]
    assert spec["failurePolicy"] == "Fail"
