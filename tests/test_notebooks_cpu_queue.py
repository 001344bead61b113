"""CPU notebooks are counted by the system flavor's quota (platform review #4).

Before: CPU notebooks carried no queue label (and `jupyterhub` has no `default` LocalQueue), so they
took the system nodes' CPU and memory while Kueue admitted CPU jobs against a `system` quota that
did not count them: the system nodes were over-admitted. Now the CPU profile's pod names LocalQueue
`cpu-queue` in `jupyterhub` (ClusterQueue `cpu-work`, the system flavor alone): Kueue holds a notebook
until the quota has room and places it on the system nodes."""

from __future__ import annotations

import pytest

from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE
from gpu_platform.components.platform.notebooks import cpu_profile, jupyterhub_values
from gpu_platform.components.platform.queue import (
    CPU_CLUSTER_QUEUE, CPU_LOCAL_QUEUE, LOCAL_QUEUE, QUEUE_NAME_LABEL, SYSTEM_FLAVOR,
)
from tests.test_queue_admission import pod
from tests.test_queue_routing import refusal
from tests.test_rehearsal import needs_components

POOLS = [GpuPoolSpec("a10g", "g5.xlarge", "A10G", 1, 0, 2, "spot", {POOL_LABEL: "a10g"})]


def _profiles(values: dict) -> dict[str, dict]:
    return {p["slug"]: p for p in values["singleuser"]["profileList"]}


def test_the_cpu_profile_names_the_cpu_queue_only_with_the_queue() -> None:
    queued = _profiles(jupyterhub_values(POOLS, "gp3", queue_name=LOCAL_QUEUE, cpu_queue_name=CPU_LOCAL_QUEUE))
    assert queued["cpu"]["kubespawner_override"]["extra_labels"] == {QUEUE_NAME_LABEL: CPU_LOCAL_QUEUE}
    assert queued["gpu-a10g"]["kubespawner_override"]["extra_labels"] == {QUEUE_NAME_LABEL: LOCAL_QUEUE}
    assert "extra_labels" not in cpu_profile()["kubespawner_override"]  # platform.queue off: nothing to name


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod", "gcp-prod"])
def test_each_stack_queues_cpu_notebooks_on_the_system_flavor(stack: str) -> None:
    from gpu_platform.preflight.fit.checks import check_fit
    from tests.fit_support import need_charts, stack_plan
    from tests.test_fit_stacks import _stack

    plan = stack_plan(stack)
    lqs = {(r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs["spec"]["clusterQueue"]
           for r in plan.resources if r.type == "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"}
    assert lqs[(JUPYTERHUB_NAMESPACE, CPU_LOCAL_QUEUE)] == CPU_CLUSTER_QUEUE
    [hub] = [r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release" and r.name.endswith("-jupyterhub")]
    cpu = _profiles(hub.inputs["values"])["cpu"]
    assert cpu["kubespawner_override"]["extra_labels"] == {QUEUE_NAME_LABEL: CPU_LOCAL_QUEUE}
    # fit's Kueue model admits the CPU notebook to the system flavor, and places it on the system nodes
    need_charts()
    model, releases = _stack(stack)
    report = check_fit(model, releases).to_json()
    [row] = [p for p in report["placements"] if p["object"].endswith("(profile cpu)")]
    assert row["group"] == "system"
    assert not [p for p in report["problems"] if "profile cpu" in p["object"]]


def test_the_routing_policy_keeps_gpu_notebooks_out_of_the_cpu_queue() -> None:
    cpu_nb = pod(JUPYTERHUB_NAMESPACE, gpus=None, labels={QUEUE_NAME_LABEL: CPU_LOCAL_QUEUE})
    assert refusal(cpu_nb) is None
    said = refusal(pod(JUPYTERHUB_NAMESPACE, labels={QUEUE_NAME_LABEL: CPU_LOCAL_QUEUE}))
    assert said and f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE}" in said


@needs_components
@pytest.mark.rehearsal(stack="linode-dev")
def test_rehearsal_kueue_admits_the_cpu_notebook_to_the_system_flavor(tmp_path) -> None:
    """The real Kueue and scheduler: the CPU profile's pod (as KubeSpawner makes it) is gated, admitted
    from cpu-queue on flavor system and bound to a system node."""
    from gpu_platform.rehearsal.scenarios import notebook_profiles
    from tests.test_rehearsal import _failures, _rehearse

    result = _rehearse("linode-dev", tmp_path, scenarios=(notebook_profiles,))
    [sc] = result.scenarios
    assert sc.status == "PASS", _failures(result)
    said = " ".join(sc.details)
    assert f"profile cpu: admitted by Kueue from LocalQueue {CPU_LOCAL_QUEUE} on flavor {SYSTEM_FLAVOR}" in said, said
    assert "profile cpu: pod bound to system-" in said, said
