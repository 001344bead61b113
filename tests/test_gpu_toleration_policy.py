"""A CPU-only pod that tolerates the GPU nodes' taint (platform review, round 2, #2): a Kubeflow Pipelines step
with a toleration and a pool nodeSelector runs on a GPU node outside the queue, Kueue never counts it, and
where the NVIDIA runtime honours NVIDIA_VISIBLE_DEVICES for unprivileged containers (Linode's and EKS's
nodes; CUDA images set it to `all`) it sees every GPU of the node. `gpu-nodes-only-for-gpu-pods` refuses
such a pod in the queue's namespaces unless the job controller made it for a Job Kueue queued (Kueue adds
its flavor's tolerations to every pod set it admits on a GPU flavor, a TrainJob's CPU-only initializers
among them, and counts them). Evaluated as the API server does (tests/test_queue_admission.policy_refusal);
rehearsed on the real API server in `queue-bypass` (tests/test_queue_coverage.py)."""

from __future__ import annotations

import copy
from typing import Optional

import pytest

from gpu_platform.components.cluster import GPU_TAINT
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE, KUBEFLOW_NAMESPACE
from gpu_platform.components.platform.queue import GPU_TOLERATION_POLICY, render_gpu_toleration_policy
from tests.fit_support import need_charts, rendered
from tests.test_queue_admission import JOB_CONTROLLER, USER, pod, policy_refusal

GPU_TOLERATION = {"key": GPU_TAINT.key, "operator": "Exists", "effect": "NoSchedule"}


def refusal(obj: dict, user: str = USER) -> Optional[str]:
    return policy_refusal(render_gpu_toleration_policy()["spec"], obj, user)


def tolerating(obj: dict, *tolerations: dict) -> dict:
    obj = copy.deepcopy(obj)
    obj["spec"]["tolerations"] = list(tolerations)
    return obj


JOB_OWNER = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}


@pytest.mark.parametrize("toleration", [
    GPU_TOLERATION,
    {"key": GPU_TAINT.key, "operator": "Equal", "value": GPU_TAINT.value, "effect": "NoSchedule"},
    {"key": GPU_TAINT.key, "operator": "Exists"},  # every effect
    {"operator": "Exists"},                         # every taint
], ids=["exists", "equal", "any-effect", "everything"])
@pytest.mark.parametrize("namespace", [KUBEFLOW_NAMESPACE, JUPYTERHUB_NAMESPACE, "training"])
def test_a_cpu_pod_tolerating_the_gpu_taint_is_refused(namespace, toleration):
    said = refusal(tolerating(pod(namespace, gpus=None), toleration))
    assert said and "asks for no GPU but tolerates the GPU nodes' taint" in said and "cpu-queue" in said


def test_gpu_pods_other_taints_and_queued_job_pods_pass():
    # a GPU pod: the queue policies judge it (gpu-pods-through-the-queue)
    assert refusal(tolerating(pod(KUBEFLOW_NAMESPACE), GPU_TOLERATION)) is None
    # a zero GPU limit is no GPU ask
    assert refusal(tolerating(pod(KUBEFLOW_NAMESPACE, gpus="0"), GPU_TOLERATION))
    # other taints (z2jh's user-pod toleration), NoExecute-only tolerations, no tolerations
    assert refusal(tolerating(pod(JUPYTERHUB_NAMESPACE, gpus=None), {"key": "hub.jupyter.org/dedicated",
                                                                     "operator": "Equal", "value": "user",
                                                                     "effect": "NoSchedule"})) is None
    assert refusal(tolerating(pod(KUBEFLOW_NAMESPACE, gpus=None), {"key": "node.kubernetes.io/not-ready",
                                                                   "operator": "Exists", "effect": "NoExecute"})) is None
    assert refusal(pod(KUBEFLOW_NAMESPACE, gpus=None)) is None
    # a pod the job controller makes for a Job in `training` (every Job there is queued: Kueue placed it)
    job_pod = tolerating(pod("training", gpus=None, owner=JOB_OWNER), GPU_TOLERATION)
    assert refusal(job_pod, user=JOB_CONTROLLER) is None
    # ... but not where Jobs are not queued (kubeflow has no `default` LocalQueue), nor when a user writes it
    assert refusal(tolerating(pod(KUBEFLOW_NAMESPACE, gpus=None, owner=JOB_OWNER), GPU_TOLERATION), user=JOB_CONTROLLER)
    assert refusal(job_pod, user=USER)


@pytest.mark.parametrize("stack", ["aws-prod", "gcp-prod", "linode-dev", "linode-ha"])
def test_the_policy_is_installed_and_bound_to_deny(stack):
    need_charts()
    objects = [o for r in rendered(stack) for o in r.objects]
    policies = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {o["spec"]["policyName"]: o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert policies[GPU_TOLERATION_POLICY]["spec"]["failurePolicy"] == "Fail"
    assert bindings[GPU_TOLERATION_POLICY]["spec"]["validationActions"] == ["Deny"]
