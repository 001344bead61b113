"""A job Kueue deactivated can be resumed by the user who submitted it (issue 34 item 7).

Kueue v0.19.2 deactivates a Workload (spec.active: false) once its PodsReadyTimeout evictions exceed
waitForPodsReady.requeuingStrategy.backoffLimitCount, and the count only grows while the Workload
exists: a multi-day Spot job is deactivated after its fourth slow recovery. Setting spec.active back to
true resumes it with a fresh count (Kueue clears status.requeueState of an inactive Workload,
pkg/controller/core/workload_controller.go). Before: the notebook's job-submitter Role could only read
Workloads, so its user could not. Now it may patch one, and the ValidatingAdmissionPolicy
workloads-only-resumed-by-submitters limits that to resuming it."""

from __future__ import annotations

import copy
from typing import Any, Optional

import celpy
import pytest

from gpu_platform.components.cluster import TRAINING_NAMESPACE
from gpu_platform.components.platform.notebooks import (
    RESUME_COMMAND, WORKLOAD_REACTIVATION_POLICY, WORKLOAD_SPEC_FIELDS, render_workload_reactivation_policy,
    submitter_users,
)
from gpu_platform.components.platform.queue import KUEUE_CONTROLLER_USER
from gpu_platform.preflight.fit.admission_policy import cel_functions
from tests.fit_support import need_charts, rendered
from tests.test_notebook_submits import allowed

NOTEBOOK = "system:serviceaccount:jupyterhub:notebook-user"
DEACTIVATED = {
    "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
    "metadata": {"name": "trainjob-resnet-3f2a1", "namespace": TRAINING_NAMESPACE,
                 "labels": {"kueue.x-k8s.io/job-uid": "0b1c"}, "finalizers": ["kueue.x-k8s.io/resource-in-use"],
                 "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                      "name": "resnet", "uid": "0b1c", "controller": True}]},
    "spec": {"active": False, "queueName": "default", "priority": 0,
             "podSets": [{"name": "node", "count": 1, "template": {"spec": {"containers": [
                 {"name": "node", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}}}]},
}


def refusal(old: dict, new: dict, user: str = NOTEBOOK) -> Optional[str]:
    """The policy's answer to an UPDATE, evaluated as the API server does (matchConditions, variables, validations)."""
    spec = render_workload_reactivation_policy()["spec"]
    env, fns = celpy.Environment(), cel_functions()
    act: dict[str, Any] = {"oldObject": celpy.json_to_cel(old), "object": celpy.json_to_cel(new),
                           "request": celpy.json_to_cel({"operation": "UPDATE", "userInfo": {"username": user}})}

    def ev(expr: str):
        return env.program(env.compile(expr), functions=fns).evaluate(act)

    if not all(ev(c["expression"]) for c in spec["matchConditions"]):
        return None
    variables: dict = {}
    for v in spec["variables"]:
        act["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(v["name"])] = ev(v["expression"])
    act["variables"] = celpy.celtypes.MapType(variables)
    for v in spec["validations"]:
        if not ev(v["expression"]):
            return v["message"]
    return None


def edited(**spec: Any) -> dict:
    new = copy.deepcopy(DEACTIVATED)
    new["spec"].update(spec)
    return new


def test_a_notebook_user_may_resume_a_deactivated_workload():
    assert allowed("kueue.x-k8s.io", "workloads", "patch", TRAINING_NAMESPACE)
    assert refusal(DEACTIVATED, edited(active=True)) is None


@pytest.mark.parametrize("change", [
    {"active": True, "queueName": "gpu-queue"},           # another queue
    {"active": True, "priority": 1000},                   # jump the queue
    {"active": True, "maximumExecutionTimeSeconds": 60},
    {"active": False, "queueName": "gpu-queue"},          # anything but resuming
    {"active": False, "priority": 5},
])
def test_resuming_is_the_only_change_a_submitter_may_make(change):
    said = refusal(DEACTIVATED, edited(**change))
    assert said and "only to resume it" in said and RESUME_COMMAND in said


def test_labels_pod_sets_and_deactivation_are_not_theirs_either():
    relabelled = edited(active=True)
    relabelled["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] = "other"
    assert refusal(DEACTIVATED, relabelled)
    bigger = edited(active=True)
    bigger["spec"]["podSets"][0]["count"] = 8
    assert refusal(DEACTIVATED, bigger)
    running = edited(active=True)
    assert refusal(running, edited(active=False))  # deactivating a running job: delete the job instead
    unfinalized = edited(active=True)
    unfinalized["metadata"]["finalizers"] = []
    assert refusal(DEACTIVATED, unfinalized)


def test_kueue_and_administrators_are_not_matched():
    assert refusal(DEACTIVATED, edited(queueName="gpu-queue"), KUEUE_CONTROLLER_USER) is None
    assert refusal(DEACTIVATED, edited(priority=9), "admin@example.com") is None
    assert set(submitter_users()) == {NOTEBOOK, "system:serviceaccount:kubeflow:pipeline-runner"}


def test_the_policy_names_every_spec_field_of_the_pinned_workload_crd():
    """A spec field Kueue adds and the policy does not compare would be a submitter's to change."""
    need_charts()
    crds = [o for r in rendered("gcp-prod") for o in r.objects
            if o.get("kind") == "CustomResourceDefinition" and o["spec"]["names"]["plural"] == "workloads"]
    assert crds, "the Kueue chart renders the Workload CRD"
    (v1beta2,) = [v for v in crds[0]["spec"]["versions"] if v["name"] == "v1beta2"]
    fields = set(v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])
    assert fields - {"active"} == set(WORKLOAD_SPEC_FIELDS)
    objects = [o for r in rendered("gcp-prod") for o in r.objects]
    assert any(o["kind"] == "ValidatingAdmissionPolicyBinding" and o["spec"]["policyName"] == WORKLOAD_REACTIVATION_POLICY
               and o["spec"]["validationActions"] == ["Deny"] for o in objects)


@pytest.mark.parametrize("stack,where", [("gcp-prod", "GKE and EKS"), ("aws-prod", "GKE and EKS"), ("linode-ha", "Linode"),
                                         ("linode-dev", "Linode with an autoscaled pool")])
def test_the_documented_spawn_timeout_is_the_one_the_hub_gets(stack, where):
    """Issue 34 item 7: the docs said a GPU notebook spawn fails after 10 minutes; the hub's start timeout
    is a GPU node's boot (an autoscaled Linode pool's join deadline + 3) plus platform.podsReadyTimeoutMinutes
    (1,080 s on GKE and EKS)."""
    from pathlib import Path

    from tests.fit_support import stack_plan

    release = stack_plan(stack).one("kubernetes:helm.sh/v3:Release", "jupyterhub").inputs
    seconds = int(release["values"]["singleuser"]["startTimeout"])
    docs = Path(__file__).resolve().parents[1] / "docs"
    text = " ".join((docs / name).read_text().replace("\n", " ") for name in ("access.md", "platform.md"))
    assert f"{seconds:,} s on {where}" in text, (seconds, where)
    assert "longer than 10 minutes" not in text
