"""Jobs that name a queued job as their owner (platform review, high): Kueue leaves such a child alone
(no queue label, no Workload; v0.19.2 jobframework/defaults.go, reconciler.go shouldSuspendChildJob) and the
job controller makes its pods, which the GPU pod policy trusts: a notebook user could run GPU Jobs Kueue
never counts by naming a running, admitted Job as their owner. The policy lets only the owner's own
controller create such children."""

from __future__ import annotations

from typing import Any, Optional

import celpy
import pytest

from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE, TRAINER_NAMESPACE
from gpu_platform.components.platform.notebooks import NOTEBOOK_SERVICE_ACCOUNT
from gpu_platform.components.platform.queue import (
    JOBSET_CONTROLLER_USER, KUEUE_ADMISSION_GATE, KUEUE_CONTROLLER_USER, QUEUE_NAMESPACE_SELECTOR, SUSPEND_POLICY,
    TRAINER_CONTROLLER_USER, render_admission_gate_policy, render_job_owner_policy, render_suspend_policy,
)
from tests.fit_support import need_charts, rendered
from tests.test_rehearsal import _failures, needs_components
from tests.rehearsal_support import rehearse as _rehearse

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


# --- Only Kueue starts a queued job (issue 34 item 3) ------------------------------------------------------------

def update_refusal(policy: dict, old: dict, new: dict, user: str = USER) -> Optional[str]:
    """What a ValidatingAdmissionPolicy says to an UPDATE from `old` to `new` by `user`, evaluated as the API
    server does: matchConstraints' resource rules, then the variables, then each validation in order (the
    Kubernetes quantity functions preflight's evaluator provides, in case an expression uses them)."""
    from gpu_platform.preflight.fit.admission_policy import cel_functions

    spec = policy["spec"]
    group, _, version = new["apiVersion"].rpartition("/")
    plural = {"Job": "jobs", "JobSet": "jobsets", "TrainJob": "trainjobs"}[new["kind"]]
    if not any(group in r["apiGroups"] and version in r["apiVersions"] and plural in r["resources"]
               and "UPDATE" in r["operations"] for r in spec["matchConstraints"]["resourceRules"]):
        return None
    act: dict[str, Any] = {"oldObject": celpy.json_to_cel(old), "object": celpy.json_to_cel(new),
                           "request": celpy.json_to_cel({"operation": "UPDATE", "kind": {"kind": new["kind"]},
                                                         "userInfo": {"username": user}})}
    env, fns = celpy.Environment(), cel_functions()
    variables: dict[str, Any] = {}
    for v in spec["variables"]:
        act["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): x for k, x in variables.items()})
        variables[v["name"]] = env.program(env.compile(v["expression"]), functions=fns).evaluate(act)
    act["variables"] = celpy.celtypes.MapType({celpy.celtypes.StringType(k): x for k, x in variables.items()})
    for v in spec["validations"]:
        if not env.program(env.compile(v["expression"]), functions=fns).evaluate(act):
            return v["message"]
    return None


API = {"Job": "batch/v1", "JobSet": "jobset.x-k8s.io/v1alpha2", "TrainJob": "trainer.kubeflow.org/v1alpha1"}


def job(kind: str, suspend: Optional[bool], parallelism: Optional[int] = None) -> dict:
    spec: dict[str, Any] = {}
    if suspend is not None:
        spec["suspend"] = suspend
    if parallelism is not None:
        spec["parallelism"] = parallelism
    return {"apiVersion": API[kind], "kind": kind, "metadata": {"name": "j", "namespace": "training"}, "spec": spec}


@pytest.mark.parametrize("kind", ["Job", "JobSet", "TrainJob"])
@pytest.mark.parametrize("new_suspend", [False, None])
def test_a_user_cannot_start_a_queued_job_by_unsuspending_it(kind, new_suspend):
    """Before: Kueue v0.19.2's job webhooks let a job-submitter (a notebook) patch suspend: false on a Job
    or TrainJob Kueue had not admitted, and it ran outside the quota."""
    said = update_refusal(render_suspend_policy(), job(kind, True), job(kind, new_suspend))
    assert said and "only Kueue starts a queued job" in said and "kubectl get workloads" in said


def test_a_user_cannot_raise_the_parallelism_of_a_running_job():
    said = update_refusal(render_suspend_policy(), job("Job", False, 2), job("Job", False, 8))
    assert said and "parallelism may not be raised" in said
    # Unset parallelism is 1 (the API server's default): raising it from there is the same.
    assert update_refusal(render_suspend_policy(), job("Job", None), job("Job", None, 4))


@pytest.mark.parametrize("kind, old, new, user", [
    ("Job", job("Job", True), job("Job", False), KUEUE_CONTROLLER_USER),             # Kueue admits
    ("TrainJob", job("TrainJob", True), job("TrainJob", False), KUEUE_CONTROLLER_USER),
    ("JobSet", job("JobSet", True), job("JobSet", False), TRAINER_CONTROLLER_USER),  # the Trainer passes it down
    ("Job", job("Job", True), job("Job", False), JOBSET_CONTROLLER_USER),            # JobSet passes it down
    ("Job", job("Job", False), job("Job", True), USER),                              # a user stops their job
    ("TrainJob", job("TrainJob", True), job("TrainJob", True), USER),                # a label/annotation edit
    ("Job", job("Job", False, 8), job("Job", False, 2), USER),                       # narrowing a running Job
    ("Job", job("Job", True, 2), job("Job", True, 8), USER),                         # widening while queued
    ("Job", job("Job", False, 2), job("Job", False, 8), KUEUE_CONTROLLER_USER),      # Kueue restores parallelism
])
def test_kueue_and_the_parent_controllers_start_jobs_and_users_may_stop_or_edit(kind, old, new, user):
    assert update_refusal(render_suspend_policy(), old, new, user) is None


def test_the_controllers_may_only_unsuspend_their_own_kind_of_child():
    assert update_refusal(render_suspend_policy(), job("TrainJob", True), job("TrainJob", False), TRAINER_CONTROLLER_USER)
    assert update_refusal(render_suspend_policy(), job("JobSet", True), job("JobSet", False), JOBSET_CONTROLLER_USER)


def test_the_suspend_policy_is_installed_and_bound_in_the_queue_namespaces():
    """It is among what every queued stack renders, bound with Deny, over the queue's namespaces only."""
    need_charts()
    objects = [o for r in rendered("gcp-prod") for o in r.objects]
    (policy,) = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy" and o["metadata"]["name"] == SUSPEND_POLICY]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["namespaceSelector"] == QUEUE_NAMESPACE_SELECTOR
    bindings = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding" and o["spec"]["policyName"] == SUSPEND_POLICY]
    assert bindings and bindings[0]["spec"]["validationActions"] == ["Deny"]


# --- on the rehearsal's real API server, job controller and Kueue (docs/rehearsal.md, `unsuspend-by-hand`) --------


def _without_suspend_policy(releases):
    """The program as it was before the policy: no jobs-started-only-by-kueue and no binding of it."""
    dropped = 0
    for rel in releases:
        kept = [o for o in rel.objects if not (o["kind"].startswith("ValidatingAdmissionPolicy") and (
            o["metadata"]["name"] == SUSPEND_POLICY or (o.get("spec") or {}).get("policyName") == SUSPEND_POLICY))]
        dropped += len(rel.objects) - len(kept)
        rel.objects = kept
    assert dropped == 2, dropped  # the policy and its binding


def test_the_rehearsal_submits_as_the_service_account_the_platform_binds_job_submitter_to():
    """The scenario acts as whom the rendered RoleBinding names in `training` (not a name of its own)."""
    from gpu_platform.rehearsal.scenarios import submitter_identity

    need_charts()
    assert submitter_identity(rendered("gcp-prod"), "training") == (JUPYTERHUB_NAMESPACE, NOTEBOOK_SERVICE_ACCOUNT)
    assert submitter_identity(rendered("gcp-prod"), "kubeflow") is None  # bound in training only


@needs_components
@pytest.mark.rehearsal(stack="gcp-prod")
def test_rehearsal_a_submitter_cannot_start_an_unadmitted_job_nor_widen_an_admitted_one(tmp_path):
    """The race on the real kube-apiserver, job controller and Kueue v0.19.2: the notebooks' ServiceAccount
    (bound to job-submitter as the platform binds it, with its own token) patches suspend: false on a Job
    Kueue holds; refused by the policy, no pod created, Kueue admits it once the ClusterQueue runs again;
    raising the admitted Job's parallelism is refused."""
    from gpu_platform.rehearsal.scenarios import unsuspend_by_hand

    result = _rehearse("gcp-prod", tmp_path, scenarios=(unsuspend_by_hand,))
    sc = result.scenarios[0]
    assert sc.status == "PASS", _failures(result)
    said = "\n".join(sc.details)
    user = "ServiceAccount jupyterhub/notebook-user"
    wanted = [
        f"as {user} (Role job-submitter): Job training/rehearsal-unsuspended-by-hand (1 GPU) created, suspended by Kueue",
        "ClusterQueue gpu-training is inactive",  # held: Kueue cannot admit it
        f"spec.suspend: false by {user} on the unadmitted Job: refused (HTTP 403",
        f"ValidatingAdmissionPolicy '{SUSPEND_POLICY}'", "only Kueue starts a queued job",
        "no pod created for the Job in the 6s after the patch", "spec.suspend still True",
        "ClusterQueue gpu-training running again: Kueue admitted Workload", "(group a100)",
        f"parallelism 1 -> 2 by {user} on the admitted Job: refused (HTTP 403", "parallelism may not be raised",
    ]
    assert [w for w in wanted if w not in said] == [], said


@needs_components
@pytest.mark.rehearsal(stack="gcp-prod")
def test_planted_without_the_suspend_policy_the_job_controller_starts_the_unadmitted_job(tmp_path):
    """Before the policy: the API server and Kueue's webhooks accept the user's suspend: false, and the job
    controller usually creates the Job's GPU pod before Kueue's reconciler suspends it again; and a wider
    admitted Job is accepted. Which controller acts first is a race: under CI's load Kueue has won it, so
    the pod is asserted only when the scenario saw one, else its report must say that none was created."""
    from gpu_platform.rehearsal.scenarios import unsuspend_by_hand

    result = _rehearse("gcp-prod", tmp_path, mutate=_without_suspend_policy, scenarios=(unsuspend_by_hand,))
    sc = result.scenarios[0]
    assert sc.status == "FAIL"
    failures = "\n".join(sc.problems)
    assert ("ServiceAccount jupyterhub/notebook-user lifted spec.suspend of Job training/rehearsal-unsuspended-by-hand, "
            "which Kueue had not admitted: the API server accepted it") in failures
    if "the job controller created pod(s) for the Job Kueue had not admitted" in failures:
        assert "rehearsal-unsuspended-by-hand-" in failures and "kube-controller-manager" in failures
    else:  # Kueue's reconciler suspended the Job again first this time; the accepted patch is the finding
        assert "no pod created for the Job in the 6s after the patch" in "\n".join(sc.details), failures
    assert "raised the parallelism of the admitted Job from 1 to 2: accepted" in failures
    # Kueue v0.19.2 still admits it afterwards: the planted run differs only by what the policy refuses.
    assert "Kueue admitted Workload" in "\n".join(sc.details), failures
