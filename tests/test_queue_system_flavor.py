"""CPU-only work in the queue goes to the system nodes, not to a GPU pool.

The rehearsal on a real API server found a bare CPU pod in `training` (queued by the `default`
LocalQueue) admitted to the first GPU flavor and bound to a GPU node: Kueue (v0.19.2
pkg/scheduler/flavorassigner) tries a resource group's flavors in order and only checks the resources
a pod asks for, so a pod without a GPU request fits any flavor with CPU/memory quota. The fix is a
`system` flavor (the system nodes' labels, GPU quota 0), the only flavor of its own ClusterQueue
`cpu-work` behind LocalQueue `cpu-queue` (a `system` flavor first in the GPU ClusterQueue let CPU work
overflow to a GPU flavor once its quota was used: tests/test_queue_routing.py). Its CPU/memory quota
is what the system nodes leave after the platform's own pods, and preflight's fit checks exactly that.
The real Kueue's choice is checked in the rehearsal (scenario cpu-job-placement).
"""

from __future__ import annotations

import copy

import pytest

from gpu_platform.components.capacity import MI, allocatable
from gpu_platform.components.cluster import SYSTEM_NODE_LABELS, SystemPoolSpec
from gpu_platform.components.platform.queue import (
    CPU_CLUSTER_QUEUE, GPU_RESOURCE, HEADROOM_PERCENT, PLATFORM_SYSTEM_REQUESTS, SYSTEM_FLAVOR, PoolCapacity,
    render_cpu_cluster_queue, render_system_flavor, system_quota,
)
from gpu_platform.preflight.fit.checks import check_fit
from tests.test_platform_validate import validate_cr
from tests.test_rehearsal import needs_components

STACKS = ["aws-prod", "gcp-prod", "linode-dev", "linode-ha"]


def _flavors(cq: dict) -> list[dict]:
    [group] = cq["spec"]["resourceGroups"]
    return group["flavors"]


def _quota(flavor: dict, resource: str):
    return next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == resource)


def test_the_cpu_queue_has_only_the_system_flavor_with_no_gpu_quota() -> None:
    system = system_quota("gcp", SystemPoolSpec("e2-standard-4", 1, 3))
    cq = render_cpu_cluster_queue(system)
    assert cq["metadata"]["name"] == CPU_CLUSTER_QUEUE
    assert [f["name"] for f in _flavors(cq)] == [SYSTEM_FLAVOR]
    first = _flavors(cq)[0]
    assert _quota(first, GPU_RESOURCE) == "0"
    assert _quota(first, "cpu") == system.cpu and _quota(first, "memory") == system.memory
    flavor = render_system_flavor(SystemPoolSpec("e2-standard-4", 1, 3))
    assert flavor["spec"]["nodeLabels"] == SYSTEM_NODE_LABELS
    assert not flavor["spec"].get("nodeTaints") and not flavor["spec"].get("tolerations")
    for obj in (cq, flavor):
        validate_cr(obj)  # against Kueue's CRD schema


def test_the_system_quota_is_what_the_pool_leaves_after_the_platform() -> None:
    pool = SystemPoolSpec("e2-standard-4", 1, 3)
    a = allocatable("gcp", "e2-standard-4")
    q = system_quota("gcp", pool)
    assert q.gpus == 0
    assert q.cpu_millis == (3 * a.cpu_millis - PLATFORM_SYSTEM_REQUESTS["cpu_millis"]) * (100 - HEADROOM_PERCENT) // 100
    assert q.memory_bytes <= (3 * a.memory_bytes - PLATFORM_SYSTEM_REQUESTS["memory_bytes"]) * (100 - HEADROOM_PERCENT) // 100
    assert q.cpu_millis < 3 * a.cpu_millis - PLATFORM_SYSTEM_REQUESTS["cpu_millis"]
    # A pool the platform fills hands jobs nothing (never a negative quantity Kueue would refuse).
    tiny = system_quota("aws", SystemPoolSpec("m6i.large", 1, 1))  # 2 vCPU: less than the platform's requests
    assert tiny.cpu_millis == 0 and tiny.cpu == "0m" and tiny.memory_bytes >= 0


@pytest.mark.parametrize("stack", STACKS)
def test_each_shipped_stack_queues_cpu_work_on_its_system_nodes(stack: str) -> None:
    """The plan's CPU ClusterQueue (behind LocalQueue cpu-queue) holds the system flavor alone, and that
    flavor selects exactly the node groups the stack's system nodes form (preflight's node model of the
    same plan); the GPU ClusterQueue's flavors all keep their GPU quota."""
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.runner import load_stack
    from tests.fit_support import stack_plan

    plan = stack_plan(stack)
    cqs = {r.inputs["metadata"]["name"]: r.inputs for r in plan.resources
           if r.type == "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"}
    [only] = _flavors(cqs[CPU_CLUSTER_QUEUE])
    assert only["name"] == SYSTEM_FLAVOR and float(_quota(only, GPU_RESOURCE)) == 0
    gpu = [f for name, cq in cqs.items() if name != CPU_CLUSTER_QUEUE for f in _flavors(cq)]
    assert gpu and all(float(_quota(f, GPU_RESOURCE)) > 0 for f in gpu), "GPU flavors keep their GPU quota"
    flavors = {r.inputs["metadata"]["name"]: r.inputs for r in plan.resources
               if r.type == "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"}
    labels = flavors[SYSTEM_FLAVOR]["spec"]["nodeLabels"]
    model = cluster_model(parse_config(load_stack(stack).raw, stack), plan)
    selected = {g.role for g in model.node_groups if all(g.labels.get(k) == v for k, v in labels.items())}
    assert selected == {"system"}, f"the system flavor selects node groups of roles {selected}"


@pytest.mark.parametrize("stack", ["aws-prod", "linode-dev"])
def test_fit_checks_the_system_quota_against_what_the_platforms_pods_leave(stack: str) -> None:
    from tests.fit_support import need_charts
    from tests.test_fit_stacks import _objects, _problems, _stack

    need_charts()
    model, releases = _stack(stack)
    assert not _problems(check_fit(model, releases), "queue-fit", reason=f"flavor {SYSTEM_FLAVOR}:")
    # The system nodes' whole allocatable as quota: fits the nodes, not beside the platform's pods.
    whole = sum(g.allocatable.memory_bytes * g.max_nodes for g in model.node_groups if g.role == "system")
    [cq] = [q for q in _objects(releases, "ClusterQueue") if q["metadata"]["name"] == CPU_CLUSTER_QUEUE]
    for r in _flavors(cq)[0]["resources"]:
        if r["name"] == "memory":
            r["nominalQuota"] = f"{whole // MI}Mi"
    [problem] = _problems(check_fit(model, copy.deepcopy(releases)), "queue-fit", reason=f"flavor {SYSTEM_FLAVOR}:")
    assert "nominal quota memory" in problem.reason and "after the platform's own pods" in problem.reason
    assert "systemPool" in problem.fix


def _without_system_flavor(releases) -> None:
    """The queues before the system flavor: one ClusterQueue of GPU flavors behind every LocalQueue."""
    for rel in releases:
        rel.objects = [o for o in rel.objects if not (o.get("kind") == "ClusterQueue"
                                                       and o["metadata"]["name"] == CPU_CLUSTER_QUEUE)]
        for obj in rel.objects:
            if obj.get("kind") == "LocalQueue":
                obj["spec"]["clusterQueue"] = "gpu-training"


@needs_components
@pytest.mark.rehearsal(stack="linode-dev")
def test_rehearsal_admits_a_cpu_job_to_the_system_flavor_and_binds_it_to_a_system_node(tmp_path) -> None:
    """The real Kueue and scheduler: a CPU-only Job in training, queued by LocalQueue cpu-queue, lands on a
    system node; with the ClusterQueue of before (GPU flavors only) it lands on a GPU node,
    which the scenario reports (the defect the first rehearsal found: a CPU pod on node ada-0)."""
    from gpu_platform.rehearsal.scenarios import cpu_job_placement
    from tests.test_rehearsal import _failures, _rehearse

    result = _rehearse("linode-dev", tmp_path / "fixed", scenarios=(cpu_job_placement,))
    [sc] = result.scenarios
    assert sc.status == "PASS", _failures(result)
    said = " ".join(sc.details)
    assert "admitted to flavor(s) system" in said and "bound to system node" in said
    # the overflow (platform review #3): the system quota used up, the next CPU job waits
    assert "stays pending" in said and "insufficient unused quota" in said, said

    before = _rehearse("linode-dev", tmp_path / "before", mutate=_without_system_flavor, scenarios=(cpu_job_placement,))
    [sc] = before.scenarios
    assert sc.status == "FAIL"
    said = " ".join(sc.problems)
    assert "not to a flavor of system nodes" in said and "not a system node" in said, said


# One system node's share and the system flavor's quota (gcp-prod's sizes: e2-standard-4, up to 3 nodes).
SYSTEM_FIT = (PoolCapacity(3_700, 12 * 1024**3, 0), PoolCapacity(7_800, 31 * 1024**3, 0))


def _cpu_trainjob(cpu: str) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": "t", "namespace": "training"},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": cpu}}}}}


def test_the_fit_policy_refuses_queued_cpu_work_larger_than_a_system_node_within_the_flavor() -> None:
    """Kueue would admit a 6-CPU pod to the system flavor (7.8 CPU of quota) where no node (3.7 CPU)
    ever holds it: refused at submission, as GPU work larger than its pool's node is."""
    from tests.test_queue_admission import batch_job, fit_refusal, pod

    said = fit_refusal(batch_job("6", gpus=0), system=SYSTEM_FIT)
    assert said and "CPU-only pod" in said and "3.7 CPU" in said and "never schedules" in said
    assert fit_refusal(batch_job("6", gpus=0), system=None) is None  # before: admitted, Pending for ever
    assert fit_refusal(_cpu_trainjob("6"), system=SYSTEM_FIT)
    assert fit_refusal(batch_job("2", gpus=0), system=SYSTEM_FIT) is None  # fits a system node
    # Pinned to a GPU pool it still gets the system flavor (Kueue matches only the flavor's own label keys),
    # where no node has the pool's label: refused too (platform review), and the message no longer says to pin.
    pinned = fit_refusal(batch_job("6", gpus=0, pool="a10g"), system=SYSTEM_FIT)
    assert pinned and "does not move CPU-only work" in pinned
    # Beyond the flavor's whole quota: before, Kueue sent it on to a GPU flavor; now it would wait for ever
    # in the CPU queue, so it is refused too (platform review #3).
    assert fit_refusal(batch_job("20", gpus=0), system=SYSTEM_FIT)
    assert fit_refusal(batch_job("2", gpus=1), system=SYSTEM_FIT) is None  # GPU work: the pools' rules
    # An unqueued CPU pod (a CPU notebook in jupyterhub: no queue label, no default LocalQueue) is not Kueue's.
    big_notebook = pod("jupyterhub", gpus=None)
    big_notebook["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "6"}}
    assert fit_refusal(big_notebook, system=SYSTEM_FIT) is None
    big_notebook["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "gpu-queue"}  # queued: the system flavor's
    assert fit_refusal(big_notebook, system=SYSTEM_FIT)
