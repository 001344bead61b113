"""The job queue: Kueue, a ResourceFlavor per GPU pool, one ClusterQueue, LocalQueues for training
(and GPU notebooks).

Quotas come from what the pools' nodes can really hand to pods (gpu_platform.components.capacity.allocatable:
the catalog's size minus kubelet/system reservations, per cloud), less the platform's own GPU-node
daemons and a small headroom. So the queue never admits more CPU/memory than the pools can hold, and
jobs wait in the queue instead of as Pending pods. Kueue quotas are per flavor in aggregate: a single
pod larger than one node is caught by the training LimitRange's `max` (one node's share, see
training.py), which Kueue checks before admitting.

CPU-only work (a preprocessing Job, a Katib experiment's suggestion pod, a CPU notebook) has its own
ClusterQueue, CPU_CLUSTER_QUEUE, whose only flavor is `system`: the system nodes' labels, CPU and
memory quota of what those nodes have left after the platform's own pods. The GPU ClusterQueue lists
only the GPU pools' flavors. They are two queues, not one with `system` first, because Kueue (v0.19.2
pkg/scheduler/flavorassigner findFlavorForPodSets, shouldTryNextFlavor) moves a workload to the next
flavor whenever the current one has no unused quota (mode NoFit, or Preempt with no candidates): with
`system` first, the CPU job after the system quota filled up was admitted to a GPU flavor, got its
pool's nodeSelector and tolerations and scaled a GPU node up. No ClusterQueue setting stops that
search (flavorFungibility only chooses between borrowing, preempting and the next flavor), and a
ResourceFlavor cannot refuse a workload for what it does NOT ask for. The queues share no cohort:
neither may borrow the other's quota (a CPU job borrowing GPU-flavor quota is the same defect).

The GPU platform's main path needs no label (issue #22 item 1): LocalQueue `default` (what Kueue gives
a job without a queue name in `training`) and `gpu-queue` point at the GPU queue; CPU-only work names
LocalQueue `cpu-queue` (the CPU queue, in `training` and `jupyterhub`). QUEUE_ROUTING_POLICY refuses,
at submission, CPU-only work headed for `default` or `gpu-queue` and GPU work naming `cpu-queue`, each
with the queue to use.

Kueue's webhooks (many with failurePolicy Fail) are scoped to namespaces labelled
QUEUE_NAMESPACE_LABEL (managedJobsNamespaceSelector, which the chart uses as every job webhook's
namespaceSelector), so the other releases' hook Jobs never wait for Kueue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pulumi
import yaml

from gpu_platform.components.capacity import GI, MI, Allocatable, allocatable
from gpu_platform.components.cluster import (
    GPU_TAINT, POOL_LABEL, SCALE_DOWN_PROTECTION, TRAINING_NAMESPACE, ClusterHandle, GpuPodScope,
    GpuPoolSpec, SystemPoolSpec,
)
from gpu_platform.config.kubernetes import Autoscaler
from gpu_platform.data import platform_versions as versions
from gpu_platform.data.eks_addon_pods import system_node_requests
from gpu_platform.components.platform.common import (
    KUBEFLOW_NAMESPACE, KUEUE_NAMESPACE, MANAGED_BY, PLATFORM_PRIORITY_CLASS, TRAINER_NAMESPACE, apply_object, boot_minutes,
    helm_release, k8s_opts, render_namespace,
)

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import Catalog

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "gpu-training"
# CPU-only work: the system flavor alone (LocalQueue `default` in `training`).
CPU_CLUSTER_QUEUE = "cpu-work"
LOCAL_QUEUE = "gpu-queue"
# Kueue (v0.19: LocalQueue defaulting, always on) labels every job and pod that names no queue with
# `default` when a LocalQueue of that name exists in its namespace (and the namespace matches
# managedJobsNamespaceSelector): so an unlabelled TrainJob, Job or Katib trial in `training` is queued,
# not ignored, in the GPU queue; unlabelled CPU-only work is refused there by QUEUE_ROUTING_POLICY,
# saying to label it `cpu-queue`. Only `training` gets one: in `jupyterhub` it would queue the hub itself.
DEFAULT_LOCAL_QUEUE = "default"
# CPU-only work names this LocalQueue (of ClusterQueue CPU_CLUSTER_QUEUE), in `training` and in
# `jupyterhub` (CPU notebooks): Kueue counts it in the system flavor's quota and places it on the
# system nodes (platform reviews #3, #4).
CPU_LOCAL_QUEUE = "cpu-queue"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
# Namespaces whose workloads Kueue manages (and whose jobs its webhooks see) carry this label; the
# ClusterQueue admits from the same namespaces. Set on `training` (and `jupyterhub` for GPU notebooks).
QUEUE_NAMESPACE_LABEL = "gpu-platform.io/queue"
QUEUE_NAMESPACE_VALUE = "enabled"
QUEUE_NAMESPACE_SELECTOR = {"matchLabels": {QUEUE_NAMESPACE_LABEL: QUEUE_NAMESPACE_VALUE}}
# A namespace with the `default` LocalQueue carries this label: the GPU admission policy then trusts
# pods whose controller is a batch Job (Kueue decided that Job's admission; its pods carry no label).
DEFAULT_QUEUE_NAMESPACE_LABEL = "gpu-platform.io/default-queue"
GPU_ADMISSION_POLICY = "gpu-pods-through-the-queue"
# Workload kinds Kueue manages: plain batch Jobs, Kubeflow TrainJobs (and the JobSets Trainer makes),
# and plain Pods (GPU notebooks, which carry the queue-name label).
INTEGRATIONS = ("batch/job", "trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset", "pod")

# Requests of the platform's own DaemonSets on every GPU node (gpu.py: DCGM exporter and, where the
# cloud has none, the device plugin; monitoring.py: node-exporter), plus headroom for the cloud's
# node agents (CNI, kube-proxy, CSI node plugin, log agents) whose requests the program does not set.
# capacity.allocatable is an upper bound by a few percent (catalog size vs. MemTotal).
NODE_DAEMONS = {"cpu_millis": 100 + 50 + 50, "memory_bytes": (128 + 64 + 64) * MI}
HEADROOM_PERCENT = 5

# Resources Kueue leaves out of a workload's requests (Configuration resources.excludeResourcePrefixes,
# matched as prefixes: Kueue v0.19.2 pkg/workload/workload.go dropExcludedResources). Kueue refuses a
# workload asking for a resource that no resource group of its ClusterQueue covers ("resource ... unavailable
# in ClusterQueue", pkg/scheduler/flavorassigner), and ours cover only cpu, memory and nvidia.com/gpu.
# - ephemeral-storage: Katib v0.19.0 gives every suggestion container a 500Mi request (pkg/apis/config/
#   v1beta1/defaults.go setResourceRequirements), so an experiment's suggestion pod (cpu-queue) was never
#   admitted, nor any Job asking for scratch space. It is node-local disk, not a pool's scarce capacity:
#   the kubelet's eviction and the scheduler's allocatable check already bound it per node.
# hugepages-* stays gated on purpose: no node of the platform reserves huge pages (allocatable 0), so a
# job asking for them can never be scheduled; Kueue's refusal says so at once, where admitting it would
# hold quota for a pod that stays Pending until waitForPodsReady evicts it maxRequeues times.
KUEUE_EXCLUDED_RESOURCE_PREFIXES = ("ephemeral-storage",)

# The flavor of the system (CPU) nodes, the only flavor of CPU_CLUSTER_QUEUE.
SYSTEM_FLAVOR = "system"
# What the platform's own pods request on the system nodes with every part on (Kueue, Trainer, Katib,
# Pipelines, JupyterHub with one CPU notebook, monitoring, the cloud's add-ons charts), rounded up
# from preflight's cluster fit over the shipped stacks: about 3.3 CPU, and 7.5-7.9 GiB once fit counts
# the Prometheus and Alertmanager pods the operator makes (aws-prod 7.94 GiB, linode-dev 7.54 GiB).
# The system flavor hands jobs only the rest; preflight's fit checks the quota against what the
# rendered releases really leave free, so a platform that grows past this is caught there.
PLATFORM_SYSTEM_REQUESTS = {"cpu_millis": 3500, "memory_bytes": 17 * GI // 2}


@dataclass(frozen=True)
class PoolCapacity:
    """What the queue may hand out on one node of a pool (the smallest of its instance types)."""

    cpu_millis: int
    memory_bytes: int
    gpus: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_millis}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_bytes // MI}Mi"


def node_share(a: Allocatable) -> PoolCapacity:
    """One node's allocatable less the platform's GPU-node daemons and HEADROOM_PERCENT."""
    cpu = (a.cpu_millis - NODE_DAEMONS["cpu_millis"]) * (100 - HEADROOM_PERCENT) // 100
    mem = (a.memory_bytes - NODE_DAEMONS["memory_bytes"]) * (100 - HEADROOM_PERCENT) // 100
    if cpu <= 0 or mem <= 0:
        raise ValueError(f"a node with {a} leaves nothing for jobs after the node daemons")
    return PoolCapacity(cpu, mem // MI * MI, a.gpus)


def pool_capacities(cloud: str, pools: Sequence[GpuPoolSpec],
                    instance_types: Optional[Mapping[str, Sequence[str]]] = None,
                    catalog: Optional["Catalog"] = None) -> dict[str, PoolCapacity]:
    """Per pool, one node's share for jobs. `instance_types`: every type a node of the pool may be
    (EKS mixed-instances pools); the smallest decides, since a job may land on any of them. `catalog`: where the
    types are (the cluster handle's: a stack's own node types on cloud kubernetes; None: the price catalog)."""
    out: dict[str, PoolCapacity] = {}
    for p in pools:
        types = list((instance_types or {}).get(p.name) or [p.instance_type])
        try:
            shares = [node_share(allocatable(cloud, t, catalog)) for t in types]
        except ValueError as e:
            raise ValueError(f"GPU pool {p.name}: {e}") from None
        out[p.name] = PoolCapacity(min(s.cpu_millis for s in shares), min(s.memory_bytes for s in shares),
                                   min(s.gpus for s in shares))
    return out


def system_quota(cloud: str, pool: SystemPoolSpec, catalog: Optional["Catalog"] = None) -> PoolCapacity:
    """CPU and memory the system flavor may admit: the system pool's allocatable at its maximum size,
    less PLATFORM_SYSTEM_REQUESTS and HEADROOM_PERCENT; zero (never negative) where the platform fills
    the pool. No GPUs: it is the only flavor of the CPU ClusterQueue, where GPU work is never admitted."""
    a = allocatable(cloud, pool.instance_type, catalog, managed_node_group=cloud == "aws")
    # EKS's managed add-ons (CoreDNS, EBS CSI, kube-proxy, aws-node) run on the system nodes too
    # (data/eks_addon_pods.py): before issue 33 item 4 the quota counted their CPU as free for jobs.
    addon_cpu, addon_mem = system_node_requests(pool.max_nodes) if cloud == "aws" else (0, 0)
    cpu = (a.cpu_millis * pool.max_nodes - PLATFORM_SYSTEM_REQUESTS["cpu_millis"] - addon_cpu) * (100 - HEADROOM_PERCENT) // 100
    mem = (a.memory_bytes * pool.max_nodes - PLATFORM_SYSTEM_REQUESTS["memory_bytes"] - addon_mem) * (100 - HEADROOM_PERCENT) // 100
    return PoolCapacity(max(0, cpu), max(0, mem) // MI * MI, 0)


def gpu_quotas(pools: Sequence[GpuPoolSpec], overrides: Optional[Mapping[str, int]] = None) -> dict[str, int]:
    """GPUs the queue may admit per pool: the pool's max GPUs unless overridden."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - {p.name for p in pools})
    if unknown:
        raise ValueError(f"gpuQuota names unknown pools: {', '.join(unknown)}")
    return {p.name: int(overrides.get(p.name, p.max_gpus)) for p in pools}


def render_resource_flavor(pool: GpuPoolSpec) -> dict[str, Any]:
    """A flavor per pool: admitted pods get the pool's node selector and tolerate its taints."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": pool.name, "labels": {**MANAGED_BY, "gpu-platform.io/capacity": pool.capacity}},
        "spec": {
            "nodeLabels": dict(pool.node_selector),
            "nodeTaints": [t.as_k8s() for t in pool.taints],
            "tolerations": pool.tolerations(),
        },
    }


def render_system_flavor(pool: SystemPoolSpec) -> dict[str, Any]:
    """The system nodes' flavor: admitted CPU-only pods get their labels as nodeSelector; no taints."""
    return {
        "apiVersion": KUEUE_API,
        "kind": "ResourceFlavor",
        "metadata": {"name": SYSTEM_FLAVOR, "labels": {**MANAGED_BY, "gpu-platform.io/capacity": "on-demand"}},
        "spec": {"nodeLabels": pool.node_labels},
    }


def render_cluster_queue(pools: Sequence[GpuPoolSpec], capacities: Mapping[str, PoolCapacity],
                         quotas: Mapping[str, int], queueing_strategy: str = "BestEffortFIFO") -> dict[str, Any]:
    """The GPU ClusterQueue: the GPU pools' flavors only, GPU quota per flavor, CPU/memory what the
    pool's nodes can hand to jobs at the pool's maximum size (allocatable, not nominal size). Admits
    from every namespace labelled QUEUE_NAMESPACE_LABEL.

    Preemption suits interruptible capacity: a higher-priority job may preempt a lower one in the
    queue; nothing is reclaimed across cohorts (there are none); when a flavor is full the next pool
    is tried before anything is preempted. No system flavor here (see the module docstring: Kueue
    would move CPU-only work on to a GPU flavor once the system quota is used up)."""
    _check_strategy(queueing_strategy)
    flavors = []
    for p in pools:
        cap = capacities[p.name]
        flavors.append({
            "name": p.name,
            "resources": [
                {"name": "cpu", "nominalQuota": f"{cap.cpu_millis * p.max_nodes}m"},
                {"name": "memory", "nominalQuota": f"{cap.memory_bytes * p.max_nodes // MI}Mi"},
                # A quantity as a string, as the API server returns it: an integer here reads back as "8", a
                # change on every `pulumi up --refresh` (seen under the engine, 2026-11-29).
                {"name": GPU_RESOURCE, "nominalQuota": str(quotas[p.name])},
            ],
        })
    return _cluster_queue(CLUSTER_QUEUE, flavors, queueing_strategy)


# The CPU queue's ordering, whatever platform.queueingStrategy says (that key orders the GPU queue): under
# StrictFIFO Kueue puts an inadmissible head straight back into the heap, at the head (v0.19.2
# pkg/cache/queue/cluster_queue.go RequeueIfNotPresent: immediate for StrictFIFO), so one CPU workload
# that cannot be admitted (a suggestion pod, a CPU notebook, a job larger than the system quota) would
# block every CPU workload behind it. CPU work is small and independent: a smaller one may go ahead.
CPU_QUEUEING_STRATEGY = "BestEffortFIFO"


def render_cpu_cluster_queue(system: PoolCapacity) -> dict[str, Any]:
    """The CPU ClusterQueue: the `system` flavor alone, with the system quota (system_quota) and GPU
    quota 0 (a GPU workload that got here anyway is reported inadmissible, never placed). When its
    quota is used up a CPU job waits here: there is no other flavor to move it to. Always
    CPU_QUEUEING_STRATEGY."""
    return _cluster_queue(CPU_CLUSTER_QUEUE, [{"name": SYSTEM_FLAVOR, "resources": [
        {"name": "cpu", "nominalQuota": system.cpu},
        {"name": "memory", "nominalQuota": system.memory},
        {"name": GPU_RESOURCE, "nominalQuota": "0"},  # a string, as the API server returns it (render_cluster_queue)
    ]}], CPU_QUEUEING_STRATEGY)


def _check_strategy(queueing_strategy: str) -> None:
    if queueing_strategy not in ("StrictFIFO", "BestEffortFIFO"):
        raise ValueError(f"queueingStrategy must be StrictFIFO or BestEffortFIFO, not {queueing_strategy!r}")


def _cluster_queue(name: str, flavors: list[dict[str, Any]], queueing_strategy: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "queueingStrategy": queueing_strategy,
            "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": flavors}],
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Never",
                "borrowWithinCohort": {"policy": "Never"},
            },
            "flavorFungibility": {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
            "stopPolicy": "None",
        },
    }


def render_local_queue(namespace: str = TRAINING_NAMESPACE, name: str = LOCAL_QUEUE,
                       cluster_queue: str = CLUSTER_QUEUE) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"clusterQueue": cluster_queue, "stopPolicy": "None"},
    }


# Minutes a replacement pod may additionally wait before it exists at all: the interrupted pod's own
# termination (up to GKE Spot's 120 s graceful shutdown or an AWS Spot notice's 2 min) comes first,
# since a Job with a podFailurePolicy creates the replacement only once the old pod has failed.
RECOVERY_EXTRA_MINUTES = 2


# Minutes by which a node that registers just inside a node group's join deadline can still lag Kueue's clock
# before a pod can be scheduled on it. Kueue counts from admission; cluster-autoscaler starts the scale-up's
# clock later: it leaves a GPU pod alone for its first 30 s (cluster-autoscaler 1.35.2 core/static_autoscaler.go
# allPodsAreNew, unschedulablePodWithGpuTimeBuffer), acts in its next loop (--scan-interval, 10 s), and
# registers the scale-up only when the provider's IncreaseSize has answered (clusterstate/clusterstate.go
# registerOrUpdateScaleUpNoLock; on Linode up to the 60 s grpc_timeout, components/linode/node_groups.py):
# 100 s. Then the registered node turns Ready and offers nvidia.com/gpu only once its CNI agent and the NVIDIA
# device plugin run on it (the rest of the 3 minutes).
NODE_JOIN_LAG_MINUTES = 3


def pods_ready_timeouts(boot_minutes: float, pods_ready_timeout_minutes: int,
                        join_deadline_minutes: Optional[float] = None) -> tuple[int, int]:
    """(timeout, recoveryTimeout) in minutes for Kueue's waitForPodsReady, from how long a GPU node from a pool
    at zero may take, plus `pods_ready_timeout_minutes` (platform.podsReadyTimeoutMinutes: image pull, start,
    checkpoint load once the node is up). A GPU pool scales from zero, and a preempted job's replacement needs
    a new node, so both must outlast a boot: a recoveryTimeout shorter than that evicts (and counts) every
    preemption, however soon the job would have run again.

    How long a node may take: the cloud's node boot time (gpu_platform/costs/node_boot.py, the cost simulator's
    figure) or, where the cluster's node groups have a join deadline (`join_deadline_minutes`: on Linode
    linode.nodeGroups.joinDeadlineMinutes, cluster-autoscaler's --max-node-provision-time), that deadline plus
    NODE_JOIN_LAG_MINUTES, whichever is longer. A node that registers within the deadline is a node the
    autoscaler keeps, so Kueue must not give up on its job first: with a timeout shorter than the deadline
    (26 minutes against 40 on linode-dev before 0.3.2) a slow node cost the job a requeue, and a node that
    never joined cost two (Kueue evicted the job again before the replacement, asked for after the
    deadline and the group's backoff, had booted), leaving one before the job is deactivated although
    the pool recovered. With it, a node that never joins costs at most one: the autoscaler gives it up and
    asks for the replacement before Kueue's timeout, and the replacement (backoff 5 minutes, a boot)
    joins well within the re-admitted job's own timeout. Config validation keeps the deadline above the
    pools' boot (config/checks/linode.py join_deadline_issues), so on such a cluster the deadline decides."""
    if pods_ready_timeout_minutes < 1:
        raise ValueError("pods_ready_timeout_minutes must be >= 1")
    wait = boot_minutes if join_deadline_minutes is None else max(boot_minutes,
                                                                   join_deadline_minutes + NODE_JOIN_LAG_MINUTES)
    timeout = int(-(-(wait + pods_ready_timeout_minutes) // 1))
    return timeout, timeout + RECOVERY_EXTRA_MINUTES


def kueue_manager_config(pods_ready_timeout_minutes: int = 10, max_requeues: int = 3,
                         boot_minutes: float = 8.0, join_deadline_minutes: Optional[float] = None) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2). What Kueue v0.19.2 does with waitForPodsReady
    (pkg/controller/core/workload_controller.go, reconcileNotReadyTimeout / triggerDeactivation /
    admittedNotReadyWorkload; pkg/controller/jobframework/reconciler.go generatePodsReadyCondition):
    - an admitted workload whose pods are not all Ready `timeout` after admission (WaitForPodsStart),
      or not Ready again `recoveryTimeout` after one failed (WaitForRecovery: a lost node), is evicted
      (reason PodsReadyTimeout) and requeued after 60 s, 120 s, 240 s ... (at most an hour);
    - ONLY those evictions increase status.requeueState.count (UpdateRequeueState is called nowhere
      else; a Kueue preemption does not count), and the count is never reset while the Workload
      exists, not when its pods become Ready again: only deactivation clears it;
    - when an eviction would make the count exceed backoffLimitCount (`max_requeues`) the workload is
      deactivated instead (spec.active false, Evicted/Deactivated, underlying cause
      RequeuingLimitExceeded), so a job that can never run stops scaling a GPU node up.
    Both timeouts therefore outlast the cloud's node boot and, where its node groups have one, their join
    deadline (pods_ready_timeouts): a preempted job whose
    replacement node comes up recovers within recoveryTimeout and is never counted; a job that cannot
    become Ready (an image that never pulls, capacity that never comes) is counted on each attempt
    and stops after `max_requeues` re-admissions."""
    if max_requeues < 0:
        raise ValueError("max_requeues must be >= 0")
    timeout, recovery = pods_ready_timeouts(boot_minutes, pods_ready_timeout_minutes, join_deadline_minutes)
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        "controller": {"groupKindConcurrency": {
            "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
            "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
        "clientConnection": {"qps": 50, "burst": 100},
        "waitForPodsReady": {
            "timeout": f"{timeout}m",
            "recoveryTimeout": f"{recovery}m",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": max_requeues,
                                  "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        # Jobs without a queue name are queued through the `default` LocalQueue of their namespace
        # (LocalQueue defaulting), not through this switch: with it on, Kueue's pod integration
        # would also gate every unlabelled pod of `jupyterhub` (the hub and its proxy) forever.
        "manageJobsWithoutQueueName": False,
        # Kueue's job/pod webhooks and integrations only see the queue's namespaces: no other
        # release's (hook) Jobs depend on Kueue serving (the chart copies this selector into every
        # job webhook's namespaceSelector).
        "managedJobsNamespaceSelector": QUEUE_NAMESPACE_SELECTOR,
        "integrations": {"frameworks": list(INTEGRATIONS)},
        # Requests no ClusterQueue covers and no quota should gate (KUEUE_EXCLUDED_RESOURCE_PREFIXES).
        "resources": {"excludeResourcePrefixes": list(KUEUE_EXCLUDED_RESOURCE_PREFIXES)},
    }


# Two controller replicas (one leader; the standby serves the webhooks too, and its LocalQueue cache,
# which `default` queue defaulting reads, is kept without leadership: v0.19.2
# pkg/controller/core/localqueue_controller.go NeedLeaderElection false) and a PDB keeping
# one through a node drain: Kueue's job and pod webhooks fail closed, so a single replica on a
# draining node stops every submission in the queue's namespaces (chart values controllerManager.*).
KUEUE_REPLICAS = 2


def kueue_values(pods_ready_timeout_minutes: int = 10, max_requeues: int = 3,
                 boot_minutes: float = 8.0, join_deadline_minutes: Optional[float] = None) -> dict[str, Any]:
    return {
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_manager_config(pods_ready_timeout_minutes, max_requeues, boot_minutes, join_deadline_minutes),
            sort_keys=False)},
        "enablePrometheus": False,
        "enableCertManager": False,
        "enableKueueViz": False,
        "controllerManager": {"replicas": KUEUE_REPLICAS,
                              "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
                              # its webhooks fail closed: user pods on the system nodes must not starve it
                              "manager": {"priorityClassName": PLATFORM_PRIORITY_CLASS}},
    }


def _requests_gpu(var: str) -> str:
    return (f"{var}.exists(c, has(c.resources) && ("
            f"(has(c.resources.limits) && '{GPU_RESOURCE}' in c.resources.limits) || "
            f"(has(c.resources.requests) && '{GPU_RESOURCE}' in c.resources.requests)))")


GPU_POD_CONDITION = (f"{_requests_gpu('object.spec.containers')} || "
                     f"(has(object.spec.initContainers) && {_requests_gpu('object.spec.initContainers')})")
IN_QUEUE_NAMESPACE = (f"has(namespaceObject.metadata.labels) && "
                      f"'{QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels && "
                      f"namespaceObject.metadata.labels['{QUEUE_NAMESPACE_LABEL}'] == '{QUEUE_NAMESPACE_VALUE}'")
# Who creates the pods of a batch Job: kube-controller-manager's job controller, under its own
# ServiceAccount (--use-service-account-credentials, kubeadm's, GKE's and EKS's default) or the
# controller-manager's identity. No user can act as either; a pod's ownerReferences anyone may write.
JOB_CONTROLLER_USERS = ("system:serviceaccount:kube-system:job-controller", "system:kube-controller-manager")
# The workload kinds Kueue's integrations manage (INTEGRATIONS): a pod whose controller is one of them
# is skipped by Kueue's pod webhook (v0.19.2 pod_webhook.go Default: FindAncestorJobManagedByKueue),
# so a pod naming one as owner is only trusted when the job controller created it.
KUEUE_OWNER_KINDS = (("batch", "Job"), ("jobset.x-k8s.io", "JobSet"), ("trainer.kubeflow.org", "TrainJob"))
CREATED_BY_JOB_CONTROLLER = ("request.userInfo.username in [" +
                             ", ".join(f"'{u}'" for u in JOB_CONTROLLER_USERS) + "]")
# An ownerReference `r` to one of those kinds.
_KUEUE_OWNER = " || ".join(f"(r.apiVersion.startsWith('{g}/') && r.kind == '{k}')" for g, k in KUEUE_OWNER_KINDS)
_OWNED_BY_A_KUEUE_KIND = f"has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(r, {_KUEUE_OWNER})"
# A pod of a batch Job in a namespace where Kueue queues every Job (its `default` LocalQueue): the job
# controller made it, from a Job Kueue admitted (Job, JobSet, TrainJob and Katib trial pods).
QUEUED_JOB_POD = (f"has(namespaceObject.metadata.labels) && '{DEFAULT_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels"
                  f" && {CREATED_BY_JOB_CONTROLLER}")
# A pod with the queue-name label and no owner of a kind Kueue manages: Kueue's pod webhook (mutating,
# so before this policy) gated it, and only Kueue admits it (GPU notebooks, pipeline steps).
# Who may create a job owned by a kind Kueue manages: Kueue leaves such a child alone (it skips the queue
# label, v0.19.2 jobframework/defaults.go; creates no Workload for it, reconciler.go shouldSuspendChildJob)
# and its pods are the job controller's, so a user who names a running Job as owner would run GPU pods
# Kueue never counts. Only the parent's own controller makes such children: JobSet makes the Jobs of a
# JobSet, Trainer the JobSet of a TrainJob (their ServiceAccounts in the pinned charts: kubeflow-trainer's
# `jobset-controller` and `kubeflow-trainer-controller-manager`, in TRAINER_NAMESPACE).
JOBSET_CONTROLLER_USER = f"system:serviceaccount:{TRAINER_NAMESPACE}:jobset-controller"
TRAINER_CONTROLLER_USER = f"system:serviceaccount:{TRAINER_NAMESPACE}:kubeflow-trainer-controller-manager"
JOB_OWNER_POLICY = "jobs-owned-only-by-their-controllers"
_LEGITIMATE_CHILD = (f"(r.kind == 'JobSet' && request.kind.kind == 'Job' && request.userInfo.username == '{JOBSET_CONTROLLER_USER}')"
                     f" || (r.kind == 'TrainJob' && request.kind.kind == 'JobSet' && "
                     f"request.userInfo.username == '{TRAINER_CONTROLLER_USER}')")
QUEUED_PLAIN_POD = f"has(object.metadata.labels) && '{QUEUE_NAME_LABEL}' in object.metadata.labels && !({_OWNED_BY_A_KUEUE_KIND})"
QUEUED_POD = f"({QUEUED_JOB_POD}) || ({QUEUED_PLAIN_POD})"
PIPELINE_HOW_TO = (f"a Kubeflow Pipelines step in namespace kubeflow asks for its GPU with the pod label "
                   f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE} (kfp.kubernetes.add_pod_label)")
HOW_TO_SUBMIT = (f"submit GPU work as a TrainJob, Job or Katib experiment in namespace {TRAINING_NAMESPACE} "
                 f"(no queue label needed: Kueue queues it in LocalQueue {DEFAULT_LOCAL_QUEUE}, or label it "
                 f"{QUEUE_NAME_LABEL}: {LOCAL_QUEUE}), "
                 f"{PIPELINE_HOW_TO}, or start a GPU notebook from JupyterHub; see docs/first-training-job.md section 6")


def render_gpu_admission_policy(scope: GpuPodScope) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) that
    refuses any pod asking for a GPU that Kueue did not queue: outside the queue's namespaces Kueue
    never sees it (it would take a GPU the ClusterQueue counts as free); inside them it must either
    carry the queue-name label and have no owner of a kind Kueue manages (so Kueue's pod webhook,
    which runs before validation, gated it), or be created by the job controller in a namespace
    whose every Job Kueue queues. An ownerReference alone proves nothing: anyone may write one.

    `scope` (components/cluster.py GpuPodScope): "cluster" judges every namespace's GPU pods (a cluster the
    stack creates); "queue-namespaces" only those of the namespaces labelled for the queue
    (QUEUE_NAMESPACE_SELECTOR), on a cluster other teams share (cloud kubernetes), whose GPU Deployments and
    GPU operator validator pods are not the platform's to refuse."""
    constraints: dict[str, Any] = {"resourceRules": [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]}
    if scope == "queue-namespaces":
        constraints = {"namespaceSelector": dict(QUEUE_NAMESPACE_SELECTOR), **constraints}
    elif scope != "cluster":
        raise ValueError(f"GPU pod policy scope {scope!r}: one of cluster, queue-namespaces")
    return render_admission_policy(GPU_ADMISSION_POLICY, {
        "matchConstraints": constraints,
        "matchConditions": [{"name": "requests-a-gpu", "expression": GPU_POD_CONDITION}],
        "validations": [
            {"expression": IN_QUEUE_NAMESPACE,
             "messageExpression": ('"GPU pods are only admitted through the Kueue queue, and namespace " + '
                                   f'namespaceObject.metadata.name + " is not queued: {HOW_TO_SUBMIT}"'),
             "reason": "Forbidden"},
            {"expression": f"!({IN_QUEUE_NAMESPACE}) || {QUEUED_POD}",
             "message": (f"this GPU pod is not queued by Kueue: a pod needs the label {QUEUE_NAME_LABEL} "
                         f"(e.g. {LOCAL_QUEUE}) and no Job, JobSet or TrainJob owner (only the job controller "
                         f"creates a Job's pods, in namespace {TRAINING_NAMESPACE}); {HOW_TO_SUBMIT}"),
             "reason": "Forbidden"},
        ],
    })


FIT_POLICY = "gpu-jobs-fit-their-pool"
_TJ_RES = "object.spec.trainer.resourcesPerNode"
_TRIAL = "object.spec.trialTemplate.trialSpec"
_TRIAL_TJ_RES = f"{_TRIAL}.spec.trainer.resourcesPerNode"
# An Experiment's trial template given inline (trialSpec; a ConfigMap-held one is checked per trial).
_TRIAL_IS = ("request.kind.kind == 'Experiment' && has(object.spec.trialTemplate) && "
             f"has({_TRIAL}) && has({_TRIAL}.kind) && has({_TRIAL}.spec) && {_TRIAL}.kind == ")
# The kinds the fit policy checks, with where their pod specs are: every kind Kueue manages here
# (INTEGRATIONS: Job, JobSet, TrainJob, plain pods), plus Katib Experiments (their trial template is a
# Job or a TrainJob, refused at submission instead of trial by trial).
FIT_RULES = (("batch", "v1", "jobs"), ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
             ("trainer.kubeflow.org", "v1alpha1", "trainjobs"), ("kubeflow.org", "v1beta1", "experiments"),
             ("", "v1", "pods"))
# What the fit and routing policies judge: the creation of each kind above in the queue's namespaces.
def _queued_work_created() -> dict[str, Any]:
    return {"namespaceSelector": dict(QUEUE_NAMESPACE_SELECTOR),
            "resourceRules": [{"apiGroups": [g], "apiVersions": [v], "operations": ["CREATE"], "resources": [r]}
                              for g, v, r in FIT_RULES]}
# The pod specs of the object, by kind (a list; empty for TrainJobs, checked by resourcesPerNode).
POD_SPECS = (
    "request.kind.kind == 'Job' ? [object.spec.template.spec] : "
    "request.kind.kind == 'JobSet' ? object.spec.replicatedJobs.map(r, r.template.spec.template.spec) : "
    "request.kind.kind == 'Pod' ? [object.spec] : "
    f"{_TRIAL_IS}'Job' && has({_TRIAL}.spec.template) && has({_TRIAL}.spec.template.spec) ? [{_TRIAL}.spec.template.spec] : []")
# The TrainJob resourcesPerNode the object asks for (a list of zero or one).
TRAINJOB_RES = (
    f"request.kind.kind == 'TrainJob' && has(object.spec.trainer) && has({_TJ_RES}) ? [{_TJ_RES}] : "
    f"{_TRIAL_IS}'TrainJob' && has({_TRIAL}.spec.trainer) && has({_TRIAL_TJ_RES}) ? [{_TRIAL_TJ_RES}] : []")
_CONTAINERS = ("s.containers", "(has(s.initContainers) ? s.initContainers : [])")


def _gpu_in(res: str) -> str:
    """CEL: the resources `res` ask for at least one GPU. `nvidia.com/gpu: 0` asks for none: taken for GPU
    work, such a container would be queued on a GPU flavor and get its toleration and hold a GPU node's
    CPU and memory while Kueue counts its GPUs free (before issue 34 item 4 it also saw every GPU of the
    node where the toolkit honoured NVIDIA_VISIBLE_DEVICES=all; the nodes now ignore the variable in
    unprivileged containers: components/cluster.py DEVICE_LIST_STRATEGY). A value that is no quantity (a Katib
    `${trialParameters.x}` placeholder) counts as a GPU ask; its trial's Job is judged when created."""
    def asks(field: str) -> str:
        value = f"{res}.{field}['{GPU_RESOURCE}']"
        return (f"(has({res}.{field}) && '{GPU_RESOURCE}' in {res}.{field} && (!isQuantity(string({value})) || "
                f"quantity(string({value})).compareTo(quantity('0')) > 0))")
    return f"({asks('limits')} || {asks('requests')})"


def _at_most(value: str, limit: str) -> str:
    """CEL: the quantity `value` (a string or a number) is at most `limit`; a value that is no quantity
    (a Katib `${trialParameters.x}` placeholder) is not judged here (its trial's Job is, when created)."""
    return (f"(!isQuantity(string({value})) || "
            f"quantity(string({value})).compareTo(quantity('{limit}')) <= 0)")


def _resources_fit(res: str, cap: PoolCapacity) -> str:
    """CEL: the resources `res` fit one node of the pool. CPU and memory count as Kubernetes schedules
    them: the request, or, where only a limit is given, the limit (Kubernetes defaults the request to
    it). GPUs, an extended resource, count in limits and requests alike: more than a node has can
    never be scheduled on it, yet Kueue's quota is the pool's total and would admit it (seen in the
    rehearsal: 2 GPUs on 1-GPU nodes, admitted)."""
    parts = []
    for name, limit in (("cpu", f"{cap.cpu_millis}m"), ("memory", str(cap.memory_bytes))):
        parts.append(f"(has({res}.requests) && '{name}' in {res}.requests ? {_at_most(f'{res}.requests[{name!r}]', limit)} : "
                     f"(!has({res}.limits) || !('{name}' in {res}.limits) || {_at_most(f'{res}.limits[{name!r}]', limit)}))")
    for part in ("limits", "requests"):
        parts.append(f"(!has({res}.{part}) || !('{GPU_RESOURCE}' in {res}.{part}) || "
                     f"{_at_most(f'{res}.{part}[{GPU_RESOURCE!r}]', str(cap.gpus))})")
    return " && ".join(parts)


def _spec_pinned(spec: str, pool: Optional[str] = None) -> str:
    """CEL: the pod spec selects a pool by its node label (`pool`, or any)."""
    head = f"has({spec}.nodeSelector) && '{POOL_LABEL}' in {spec}.nodeSelector"
    return f"({head} && {spec}.nodeSelector['{POOL_LABEL}'] == '{pool}')" if pool else f"({head})"


def _amount(value: str) -> str:
    """CEL double: the quantity `value` (a string or a number); a value that is no quantity (a Katib
    `${trialParameters.x}` placeholder) counts 0 here (its trial's Job is judged when created)."""
    return f"(isQuantity(string({value})) ? quantity(string({value})).asApproximateFloat() : 0.0)"


def _container_asks(c: str, name: str) -> str:
    """CEL double: what container `c` asks of resource `name` as the scheduler counts it: the request,
    or, where only a limit is given, the limit (Kubernetes defaults the request to it); for GPUs, an
    extended resource whose request must equal its limit, the limit, else the request."""
    r = f"{c}.resources"
    first, second = ("limits", "requests") if name == GPU_RESOURCE else ("requests", "limits")
    return (f"(has({r}) && has({r}.{first}) && '{name}' in {r}.{first} ? {_amount(f'{r}.{first}[{name!r}]')} : "
            f"has({r}) && has({r}.{second}) && '{name}' in {r}.{second} ? {_amount(f'{r}.{second}[{name!r}]')} : 0.0)")


def _pod_asks(s: str, name: str) -> str:
    """CEL double: what pod spec `s` asks of `name` as the scheduler counts a pod (Kubernetes'
    effective request, k8s.io/component-helpers resource.PodRequests): its containers summed, plus
    its sidecars (init containers with restartPolicy Always, which run beside them), or the largest
    ordinary init container plus the sidecars, whichever is more. (Kubernetes adds only the sidecars
    started before that init container: counting all of them can only over-count, and only where a
    sidecar follows a larger init container.) Kueue counts a pod set's requests the same way."""
    inits = f"(has({s}.initContainers) ? {s}.initContainers : [])"
    sidecars = f"{inits}.filter(c, has(c.restartPolicy) && c.restartPolicy == 'Always').map(c, {_container_asks('c', name)}).sum()"
    plain = f"{inits}.filter(c, !has(c.restartPolicy) || c.restartPolicy != 'Always').map(c, {_container_asks('c', name)})"
    return (f"[{s}.containers.map(c, {_container_asks('c', name)}).sum() + {sidecars}, "
            f"([0.0] + {plain}).max() + {sidecars}].max()")


def pod_asks(pools: Sequence[str]) -> str:
    """CEL: the pods of the object (variables.podSpecs), each as a map of doubles (the API server's CEL
    has homogeneous aggregate literals: k8s.io/apiserver/pkg/cel/environment/base.go): cpu (cores),
    memory (bytes), gpu, what the scheduler counts for the whole pod (_pod_asks); pinned, 1.0 when its
    nodeSelector names a pool; and pinned_<pool>, 1.0 when it names that pool."""
    named = f"has(s.nodeSelector) && '{POOL_LABEL}' in s.nodeSelector"
    flags = "".join(f", '{_pinned_key(p)}': {named} && s.nodeSelector['{POOL_LABEL}'] == '{p}' ? 1.0 : 0.0"
                    for p in sorted(pools))
    return (f"variables.podSpecs.map(s, {{'cpu': {_pod_asks('s', 'cpu')}, 'memory': {_pod_asks('s', 'memory')}, "
            f"'gpu': {_pod_asks('s', GPU_RESOURCE)}, 'pinned': {named} ? 1.0 : 0.0{flags}}})")


def _pinned_key(pool: str) -> str:
    return "pinned_" + pool


def _pod_fits(p: str, cap: PoolCapacity) -> str:
    """CEL, for an entry `p` of variables.pods: the whole pod fits one node of the pool. Half a
    millicore / half a byte of slack absorbs the rounding of summed decimal quantities (0.1 + 0.2)."""
    return (f"{p}['cpu'] * 1000.0 <= {cap.cpu_millis}.5 && {p}['memory'] <= {cap.memory_bytes}.5 && "
            f"{p}['gpu'] <= {cap.gpus}.0")


def _trainjob_pinned(tj: str, pool: Optional[str] = None) -> str:
    rj = "r.template.spec.template.spec"
    ps = "p.trainingRuntimeSpec.template.spec"
    return (f"(has({tj}.runtimePatches) && {tj}.runtimePatches.exists(p, has(p.trainingRuntimeSpec) && "
            f"has(p.trainingRuntimeSpec.template) && has({ps}) && has({ps}.replicatedJobs) && "
            f"{ps}.replicatedJobs.exists(r, has(r.template) && has(r.template.spec) && "
            f"has(r.template.spec.template) && has({rj}) && {_spec_pinned(rj, pool)})))")


def _gpu_pod_specs() -> str:
    return ("variables.podSpecs.exists(s, " + " || ".join(
        f"{lst}.exists(c, has(c.resources) && {_gpu_in('c.resources')})" for lst in _CONTAINERS) + ")")


# A request Kueue queues: it names a queue, or its namespace queues every job (LocalQueue `default`).
QUEUED_REQUEST = (f"(has(object.metadata.labels) && '{QUEUE_NAME_LABEL}' in object.metadata.labels) || "
                  f"(has(namespaceObject.metadata.labels) && '{DEFAULT_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels)")


def _cpu_work_validation(node: PoolCapacity, quota: PoolCapacity) -> dict[str, Any]:
    """CPU-only queued work goes to the system flavor, the only flavor of the CPU queue
    (QUEUE_ROUTING_POLICY refuses CPU-only work headed anywhere else): a container larger than one
    system node's share would never schedule there, one larger than the flavor's whole quota would wait
    for ever (Kueue has no other flavor to move it to). Refused, even when it names a GPU pool: Kueue
    matches a pod's node selector only against the keys of a flavor's own nodeLabels (flavorassigner.go,
    flavorLabelKeys), and the system flavor has no pool label, so a pinned CPU pod still gets the system
    flavor and then selects no node."""
    room = PoolCapacity(min(node.cpu_millis, quota.cpu_millis), min(node.memory_bytes, quota.memory_bytes), 0)
    specs_ok = f"variables.pods.all(p, {_pod_fits('p', room)})"
    tj_ok = f"variables.trainJobs.all(t, {_resources_fit('t', room)})"
    return {
        "expression": f"variables.asksForGpu || !({QUEUED_REQUEST}) || (({specs_ok}) && ({tj_ok}))",
        "message": (f"a CPU-only pod of this queued job asks for more CPU or memory than the system nodes hand to jobs "
                    f"({room.cpu_millis / 1000:g} CPU, {room.memory_bytes // MI / 1024:.1f} GiB a pod: one system node's "
                    f"share within the {SYSTEM_FLAVOR} flavor's quota), and CPU-only work is admitted only there, "
                    f"so it never schedules or waits for ever. Ask for less (split the work into pods that fit), or "
                    f"give the stack larger system nodes (systemPool.instanceType); a GPU pool's nodeSelector does not "
                    f"move CPU-only work off the system flavor"),
        "reason": "Invalid",
    }


def render_fit_policy(capacities: Mapping[str, PoolCapacity],
                      system: Optional[tuple[PoolCapacity, PoolCapacity]] = None) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy refusing, at submission, GPU work whose pod asks for more CPU, memory
    or GPUs than a node of some pool hands to jobs while it names no pool: Kueue's quotas are per
    flavor in aggregate, so it could admit the job to that pool's flavor, where the pod never
    schedules (e.g. 8 CPU + 1 GPU on aws-prod's a10g, about 3.5 CPU a node). The message lists each
    pool's per-pod room and how to pin one (nodeSelector gpu-platform.io/pool: Kueue then assigns
    only that pool's flavor). Every kind Kueue manages here: Jobs, JobSets (each replicated job's
    pod), TrainJobs (trainer.resourcesPerNode), plain pods Kueue queues (GPU notebooks, pipeline
    steps; not a Job's pods, checked with their job), and Katib Experiments' trial templates. Per
    pod, as the scheduler counts it (_pod_asks: containers summed, init containers by the largest;
    before issue 34 item 5 each container alone, so a pod of two 3-CPU containers was admitted to a
    pool whose nodes hand 3.5 CPU to jobs).

    `system`: (one system node's share, the system flavor's quota): queued CPU-only work the flavor
    would admit must fit a system node too (_cpu_work_validation)."""
    if not capacities:
        raise ValueError("no GPU pools")
    rooms = ", ".join(f"{n}: {c.cpu_millis / 1000:g} CPU, {c.memory_bytes // MI // 1024:g} GiB, {c.gpus} GPU"
                      for n, c in sorted(capacities.items()))
    validations = []
    for pool, cap in sorted(capacities.items()):
        specs_ok = (f"variables.pods.all(p, (p['pinned'] == 1.0 && p['{_pinned_key(pool)}'] == 0.0) || "
                    f"({_pod_fits('p', cap)}))")
        tj_ok = (f"variables.trainJobs.all(t, ({_trainjob_pinned('variables.trainJob')} && "
                 f"!{_trainjob_pinned('variables.trainJob', pool)}) || ({_resources_fit('t', cap)}))")
        validations.append({
            "expression": f"!variables.asksForGpu || (({specs_ok}) && ({tj_ok}))",
            "message": (f"a GPU pod of this job asks for more CPU, memory or GPUs than a node of pool {pool} hands to jobs "
                        f"(its containers summed, init containers by the largest; a limit without a request counts "
                        f"as the request), and the job names no pool, so Kueue may "
                        f"admit it to {pool} where it never schedules. Pin a pool it fits with nodeSelector "
                        f"{POOL_LABEL}: <pool> (TrainJob: in runtimePatches) or ask for less. Room per pod: {rooms}"),
            "reason": "Invalid",
        })
    if system is not None and (system[1].cpu_millis or system[1].memory_bytes):
        validations.append(_cpu_work_validation(*system))
    return render_admission_policy(FIT_POLICY, {
        "matchConstraints": _queued_work_created(),
        "variables": [
            {"name": "podSpecs", "expression": POD_SPECS},
            {"name": "pods", "expression": pod_asks(sorted(capacities))},
            {"name": "trainJobs", "expression": TRAINJOB_RES},
            # The TrainJob spec whose runtimePatches may pin a pool (the object's, or the trial template's).
            {"name": "trainJob", "expression": f"{_TRIAL_IS}'TrainJob' ? {_TRIAL}.spec : object.spec"},
            # Only GPU work is this policy's business (matchConditions cannot read variables).
            {"name": "asksForGpu", "expression": f"{_gpu_pod_specs()} || variables.trainJobs.exists(t, {_gpu_in('t')})"},
        ],
        # A Job's pods were checked with their Job (JobSet, TrainJob): after admission they carry the
        # flavor's node selector, so they are not checked again.
        "matchConditions": [{"name": "not-a-job-controller-pod",
                             "expression": f"request.kind.kind != 'Pod' || !({CREATED_BY_JOB_CONTROLLER})"}],
        "validations": validations,
    })


QUEUE_ROUTING_POLICY = "work-in-its-queue"
# The LocalQueue the object names: its queue-name label (a Katib Experiment: its trial template's), else ''.
_TRIAL_LABELS = f"{_TRIAL}.metadata.labels"
QUEUE_OF_OBJECT = (
    f"request.kind.kind == 'Experiment' ? (has(object.spec.trialTemplate) && has({_TRIAL}) && "
    f"has({_TRIAL}.metadata) && has({_TRIAL_LABELS}) && '{QUEUE_NAME_LABEL}' in {_TRIAL_LABELS} ? "
    f"string({_TRIAL_LABELS}['{QUEUE_NAME_LABEL}']) : '') : "
    f"(has(object.metadata.labels) && '{QUEUE_NAME_LABEL}' in object.metadata.labels ? "
    f"object.metadata.labels['{QUEUE_NAME_LABEL}'] : '')")
# The LocalQueue it lands in: the one it names, else `default` where its namespace has one (Kueue's
# LocalQueue defaulting, applied by Kueue's mutating webhook before this policy; an Experiment's trial
# Job gets it when Katib creates it).
LANDS_IN = (f"variables.queue != '' ? variables.queue : (has(namespaceObject.metadata.labels) && "
            f"'{DEFAULT_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels ? '{DEFAULT_LOCAL_QUEUE}' : '')")


def render_queue_routing_policy() -> dict[str, Any]:
    """A ValidatingAdmissionPolicy keeping each kind of work in its ClusterQueue (module docstring):
    - CPU-only work that lands in LocalQueue `default` (no queue label in `training`) or names
      `gpu-queue` is refused: those queues' flavors are GPU nodes, where Kueue would place it (and scale
      a GPU node up for it); the message says to label it `cpu-queue`;
    - GPU work naming `cpu-queue` is refused: that queue's only flavor is the system nodes (GPU quota 0),
      so Kueue would never admit it; the message says to drop the label or name `gpu-queue`;
    - a GPU job (not a plain pod) in a queue namespace where Kueue does not queue every Job (`kubeflow`,
      `jupyterhub`) is refused: its pods come from the job controller, which gpu-pods-through-the-queue
      trusts only where every Job is queued, so it would hold quota and never start.
    What the object's spec does not show (a TrainJob without trainer.resourcesPerNode takes its
    resources from the runtime; a Katib trial template held in a ConfigMap) is not judged: it is
    judged when its Job is created, or reported by Kueue (`insufficient quota for nvidia.com/gpu in
    flavor system`). Objects a Kueue-managed owner creates (a TrainJob's JobSet, a JobSet's Jobs, a
    Job's pods) follow their owner's queue and are not judged again."""
    cpu_wrong_queue = (f"this job asks for no GPU, and without a queue label (LocalQueue {DEFAULT_LOCAL_QUEUE}) or "
                       f"with LocalQueue {LOCAL_QUEUE} it goes to the GPU pools: Kueue would run it on a GPU node "
                       f"(and scale one up for it). CPU-only work goes through LocalQueue {CPU_LOCAL_QUEUE} "
                       f"(ClusterQueue {CPU_CLUSTER_QUEUE}, the system nodes): add the label "
                       f"{QUEUE_NAME_LABEL}: {CPU_LOCAL_QUEUE} to its metadata.labels (a Katib experiment's "
                       f"suggestion pod copies the Experiment's metadata.labels); a CPU-only pipeline step in "
                       f"namespace {KUBEFLOW_NAMESPACE} needs no queue")
    gpu_wrong_queue = (f"this job asks for a GPU but names LocalQueue {CPU_LOCAL_QUEUE}, whose only flavor is the "
                       f"system nodes (no GPUs), where Kueue never admits it. Drop the label {QUEUE_NAME_LABEL} "
                       f"(in {TRAINING_NAMESPACE} GPU work is queued in LocalQueue {DEFAULT_LOCAL_QUEUE}, the GPU "
                       f"pools) or name the GPU queue, {QUEUE_NAME_LABEL}: {LOCAL_QUEUE} (a Katib experiment: in "
                       f"trialTemplate.trialSpec.metadata.labels)")
    # A GPU job (not a plain pod) where Kueue does not queue every Job (kubeflow, jupyterhub): Kueue admits it
    # when it names gpu-queue, but its pods come from the job controller, which gpu-pods-through-the-queue
    # trusts only where every Job is queued (QUEUED_JOB_POD): no pod would ever start, and the Job would hold
    # its quota until waitForPodsReady evicts it, three times, then be deactivated. Refused at submission.
    gpu_job_where_pods_are_refused = (
        '"a GPU " + request.kind.kind + " in namespace " + namespaceObject.metadata.name + " would never start: '
        f'its pods are made by the job controller, whose GPU pods are admitted only where Kueue queues every Job '
        f'(namespace {TRAINING_NAMESPACE}), so Kueue would hold its GPU quota until waitForPodsReady evicts it. '
        f'{HOW_TO_SUBMIT}"')
    in_default_queue_namespace = (f"has(namespaceObject.metadata.labels) && "
                                  f"'{DEFAULT_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels")
    return render_admission_policy(QUEUE_ROUTING_POLICY, {
        "matchConstraints": _queued_work_created(),
        "variables": [
            {"name": "podSpecs", "expression": POD_SPECS},
            {"name": "trainJobs", "expression": TRAINJOB_RES},
            {"name": "asksForGpu", "expression": f"{_gpu_pod_specs()} || variables.trainJobs.exists(t, {_gpu_in('t')})"},
            # The spec shows every pod's resources (else the runtime or a ConfigMap holds them).
            {"name": "resourcesKnown", "expression": "variables.podSpecs.size() > 0 || variables.trainJobs.size() > 0"},
            {"name": "queue", "expression": QUEUE_OF_OBJECT},
            {"name": "landsIn", "expression": LANDS_IN},
        ],
        "matchConditions": [
            {"name": "not-a-job-controller-pod",
             "expression": f"request.kind.kind != 'Pod' || !({CREATED_BY_JOB_CONTROLLER})"},
            {"name": "not-made-by-a-queued-owner", "expression": f"!({_OWNED_BY_A_KUEUE_KIND})"},
        ],
        "validations": [
            {"expression": f"!variables.asksForGpu || variables.landsIn != '{CPU_LOCAL_QUEUE}'",
             "message": gpu_wrong_queue,
             "reason": "Invalid"},
            {"expression": f"request.kind.kind == 'Pod' || !variables.asksForGpu || ({in_default_queue_namespace})",
             "messageExpression": gpu_job_where_pods_are_refused,
             "reason": "Forbidden"},
            {"expression": (f"variables.asksForGpu || !variables.resourcesKnown || "
                            f"!(variables.landsIn in ['{DEFAULT_LOCAL_QUEUE}', '{LOCAL_QUEUE}'])"),
             "message": cpu_wrong_queue,
             "reason": "Invalid"},
            # Katib copies an Experiment's labels to its suggestion pod (v1beta1 createSuggestion), a CPU-only
            # Deployment pod: unlabelled, Kueue defaults it to `default` (the GPU pools) and the rule above
            # refuses it, so the experiment would make no trials. Refuse the Experiment itself, at submission.
            {"expression": (f"request.kind.kind != 'Experiment' || !(has(namespaceObject.metadata.labels) && "
                            f"'{DEFAULT_QUEUE_NAMESPACE_LABEL}' in namespaceObject.metadata.labels) || "
                            f"(has(object.metadata.labels) && '{QUEUE_NAME_LABEL}' in object.metadata.labels && "
                            f"object.metadata.labels['{QUEUE_NAME_LABEL}'] == '{CPU_LOCAL_QUEUE}')"),
             "message": (f"a Katib Experiment here needs the label {QUEUE_NAME_LABEL}: {CPU_LOCAL_QUEUE} in its own "
                         f"metadata.labels: Katib copies them to the experiment's suggestion pod (CPU only), which "
                         f"without it would be queued in LocalQueue {DEFAULT_LOCAL_QUEUE} (the GPU pools) and refused, "
                         f"so the experiment would make no trials. Its trials take their queue from "
                         f"trialTemplate.trialSpec.metadata.labels (none: {DEFAULT_LOCAL_QUEUE}, the GPU pools)"),
             "reason": "Invalid"},
        ],
    })


def render_admission_policy(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of the platform's (admissionregistration.k8s.io/v1, GA since Kubernetes
    1.30), failing closed: a CEL error refuses the object, it never lets it through."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "spec": {"failurePolicy": "Fail", **spec},
    }


def render_job_owner_policy() -> dict[str, Any]:
    """Refuses, in the queue's namespaces, a Job or JobSet that names a Job, JobSet or TrainJob as its owner
    unless that owner's own controller creates it (JOBSET_CONTROLLER_USER, TRAINER_CONTROLLER_USER)."""
    return render_admission_policy(JOB_OWNER_POLICY, {
        "matchConstraints": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "resourceRules": [{"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs"]},
                              {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["CREATE"],
                               "resources": ["jobsets"]}]},
        "validations": [{
            "expression": (f"!has(object.metadata.ownerReferences) || object.metadata.ownerReferences.all(r, "
                           f"!({_KUEUE_OWNER}) || {_LEGITIMATE_CHILD})"),
            "message": (f"a job in a queue namespace may not name a Job, JobSet or TrainJob as its owner: Kueue would "
                        f"neither queue nor count it (only JobSet and Trainer create such children). Submit it on its "
                        f"own, with the label {QUEUE_NAME_LABEL}: {LOCAL_QUEUE} or through the `default` LocalQueue"),
            "reason": "Forbidden"}],
    })


# Kueue's pod integration holds a queued pod back with this scheduling gate until the pod is admitted, and
# only Kueue's controller removes it (v0.19.2 pkg/controller/jobs/pod/constants: SchedulingGateName; the
# ServiceAccount is the pinned chart's `<release>-controller-manager`, release `kueue`).
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"
KUEUE_CONTROLLER_USER = f"system:serviceaccount:{KUEUE_NAMESPACE}:kueue-controller-manager"
ADMISSION_GATE_POLICY = "admission-gate-removed-only-by-kueue"


def render_admission_gate_policy() -> dict[str, Any]:
    """Refuses, in the queue's namespaces, a pod update that removes Kueue's admission gate unless Kueue
    makes it. The API server lets anyone who may update a pod drop a scheduling gate (PodSchedulingReadiness),
    and the GPU pod policy trusts a pod with the queue label because Kueue gated it: a user who labels a
    GPU pod with a queue that never admits it and then removes the gate would run it unqueued."""
    gated = f"obj.spec.schedulingGates.exists(g, g.name == '{KUEUE_ADMISSION_GATE}')"
    return render_admission_policy(ADMISSION_GATE_POLICY, {
        "matchConstraints": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]}]},
        "variables": [
            {"name": "wasGated", "expression": "has(oldObject.spec.schedulingGates) && " + gated.replace("obj.", "oldObject.")},
            {"name": "isGated", "expression": "has(object.spec.schedulingGates) && " + gated.replace("obj.", "object.")}],
        "validations": [{
            "expression": f"!variables.wasGated || variables.isGated || request.userInfo.username == '{KUEUE_CONTROLLER_USER}'",
            "message": (f"only Kueue removes the scheduling gate {KUEUE_ADMISSION_GATE}: it does so when it admits the "
                        f"pod's Workload (see `kubectl get workloads` in this namespace for why it waits)"),
            "reason": "Forbidden"}],
    })


# Kueue holds a queued job back with spec.suspend: true and lifts it when it admits the job's Workload;
# its job webhooks do not refuse anyone else lifting it (v0.19.2 pkg/controller/jobframework/validation.go
# ValidateJobOnUpdate checks queue name, prebuilt workload, max execution time, priority class and
# workload slices, never suspend; pkg/controller/jobs/job/job_webhook.go validatePartialAdmissionUpdate
# guards parallelism only for Jobs with the partial-admission annotation). A notebook user's
# `job-submitter` Role may patch Jobs and TrainJobs: `kubectl patch --type merge -p
# '{"spec":{"suspend":false}}'` started an unadmitted job outside the quota, and raising the
# parallelism of an admitted Job ran more pods than Kueue counted.
SUSPEND_POLICY = "jobs-started-only-by-kueue"
# Besides Kueue, the controllers that pass a parent's admission down to the child they made: the
# Trainer resumes the JobSet of a TrainJob Kueue admitted, JobSet the Jobs of a JobSet.
_UNSUSPENDED_BY_ITS_PARENT = (f"(object.kind == 'JobSet' && request.userInfo.username == '{TRAINER_CONTROLLER_USER}') || "
                              f"(object.kind == 'Job' && request.userInfo.username == '{JOBSET_CONTROLLER_USER}')")


def render_suspend_policy() -> dict[str, Any]:
    """Refuses, in the queue's namespaces, an update of a Job, JobSet or TrainJob that lifts
    spec.suspend, unless Kueue makes it (or the Trainer/JobSet controller passing the admission of the
    parent it made the object for); and an update that raises the parallelism of a running (admitted)
    Job, unless Kueue makes it. Suspending, and every other update, is anyone's who may patch."""
    parallelism = "(has({o}.spec.parallelism) ? {o}.spec.parallelism : 1)"
    return render_admission_policy(SUSPEND_POLICY, {
        "matchConstraints": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "resourceRules": [
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["jobs"]},
                {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["UPDATE"],
                 "resources": ["jobsets"]},
                {"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"], "operations": ["UPDATE"],
                 "resources": ["trainjobs"]}]},
        "variables": [
            {"name": "wasSuspended", "expression": "has(oldObject.spec.suspend) && oldObject.spec.suspend == true"},
            {"name": "isSuspended", "expression": "has(object.spec.suspend) && object.spec.suspend == true"},
            {"name": "byKueue", "expression": f"request.userInfo.username == '{KUEUE_CONTROLLER_USER}'"},
            {"name": "parallelismRaised", "expression": (
                f"object.kind == 'Job' && {parallelism.format(o='object')} > {parallelism.format(o='oldObject')}")}],
        "validations": [
            {"expression": f"!variables.wasSuspended || variables.isSuspended || variables.byKueue || {_UNSUSPENDED_BY_ITS_PARENT}",
             "message": ("only Kueue starts a queued job (spec.suspend: false): it does so when it admits the job's "
                         "Workload. See why it waits with `kubectl get workloads` in this namespace (a deactivated "
                         "one: docs/first-training-job.md, 'Resume a deactivated job')"),
             "reason": "Forbidden"},
            {"expression": "variables.wasSuspended || variables.isSuspended || !variables.parallelismRaised || variables.byKueue",
             "message": ("a running Job's parallelism may not be raised: Kueue admitted and counts the pods it had. "
                         "Suspend the Job first (spec.suspend: true) and Kueue admits it again at the new size, or "
                         "submit a new Job"),
             "reason": "Forbidden"}],
    })


# A CPU-only pod that tolerates the GPU nodes' taint can be placed on one outside the queue (a pipeline step
# with a toleration and a pool nodeSelector): Kueue never counts it, it takes the node's CPU and memory from
# the jobs Kueue placed there and keeps the node up. (It no longer sees the node's GPUs: the GPU nodes ignore
# an unprivileged container's NVIDIA_VISIBLE_DEVICES, components/cluster.py DEVICE_LIST_STRATEGY; this
# policy is the second line.) Pods the job controller makes for a Job Kueue admitted are Kueue's to place:
# it adds the flavor's tolerations to every pod set of a workload it admits on a GPU flavor (a TrainJob's
# CPU-only initializers among them), and counts them.
GPU_TOLERATION_POLICY = "gpu-nodes-only-for-gpu-pods"
_TOLERATES_GPU_TAINT = ("has(object.spec.tolerations) && object.spec.tolerations.exists(t, "
                        f"(!has(t.key) || t.key == '' || t.key == '{GPU_TAINT.key}') && "
                        f"(!has(t.effect) || t.effect == '' || t.effect == '{GPU_TAINT.effect}'))")


def render_gpu_toleration_policy() -> dict[str, Any]:
    """Refuses, in the queue's namespaces, a pod that asks for no GPU but tolerates the GPU nodes' taint
    (`nvidia.com/gpu`, or every taint), unless the job controller makes it for a Job in a namespace whose
    every Job Kueue queues (Kueue chose its flavor and counts it)."""
    asks_for_gpu = " || ".join(
        f"{lst}.exists(c, has(c.resources) && {_gpu_in('c.resources')})"
        for lst in ("object.spec.containers", "(has(object.spec.initContainers) ? object.spec.initContainers : [])"))
    return render_admission_policy(GPU_TOLERATION_POLICY, {
        "matchConstraints": {
            "namespaceSelector": QUEUE_NAMESPACE_SELECTOR,
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
        "matchConditions": [{"name": "asks-for-no-gpu", "expression": f"!({asks_for_gpu})"}],
        "validations": [{
            "expression": f"({QUEUED_JOB_POD}) || !({_TOLERATES_GPU_TAINT})",
            "message": (f"this pod asks for no GPU but tolerates the GPU nodes' taint {GPU_TAINT.key}: on a GPU node "
                        f"outside the queue it would take the CPU and memory Kueue counts free for GPU jobs there. Drop the "
                        f"toleration (CPU work runs on the system nodes: label a job {QUEUE_NAME_LABEL}: "
                        f"{CPU_LOCAL_QUEUE}), or ask for the GPU with resources.limits {GPU_RESOURCE} and let Kueue "
                        f"place it ({HOW_TO_SUBMIT})"),
            "reason": "Forbidden"}],
    })


# Training pods stay on their nodes through scale-down (cluster.SCALE_DOWN_PROTECTION: the annotation the cluster's
# autoscaler honours): a job whose pod template the request shows must carry the annotation. Judged where users
# submit training work: the namespaces where Kueue queues every Job (`training`, DEFAULT_QUEUE_NAMESPACE_LABEL).
# Kubernetes 1.35, the shipped stacks' minor, serves no MutatingAdmissionPolicy by default (beta in 1.34 and 1.35,
# behind a feature gate and admissionregistration.k8s.io/v1beta1 runtime-config; GA in 1.36, KEP-3962), so the
# platform cannot add the annotation itself: it refuses the job and says what to add.
SCALE_DOWN_POLICY = "training-pods-survive-scale-down"
# TrainJobs take their pods from a runtime: the platform's runtime carries the annotation; a TrainJob on
# another runtime (the Trainer chart's defaults carry none) is admitted with a warning (a Warn binding).
TRAINJOB_SCALE_DOWN_POLICY = "trainjob-runtime-survives-scale-down"
ANNOTATED_RUNTIMES = ("torch-checkpointed",)  # kubeflow.CHECKPOINTED_RUNTIME (a test keeps them equal)
# The pod templates of the object, by kind: Job, CronJob, JobSet (each replicated job's), a Katib
# Experiment's inline Job trial template.
POD_TEMPLATES = (
    "request.kind.kind == 'Job' ? [object.spec.template] : "
    "request.kind.kind == 'CronJob' ? [object.spec.jobTemplate.spec.template] : "
    "request.kind.kind == 'JobSet' ? object.spec.replicatedJobs.map(r, r.template.spec.template) : "
    f"{_TRIAL_IS}'Job' && has({_TRIAL}.spec.template) ? [{_TRIAL}.spec.template] : []")
_TRAINING_NAMESPACES = {"matchExpressions": [{"key": DEFAULT_QUEUE_NAMESPACE_LABEL, "operator": "Exists"}]}
# What each autoscaler does to a node under a training pod without its annotation (cluster-autoscaler FAQ, "What
# types of pods can prevent CA from removing a node?"; karpenter.sh "Disruption", Consolidation and Pod-Level Controls).
_SCALE_DOWN_RISK = {
    "cluster-autoscaler": ("cluster-autoscaler may remove its node while the job runs (a node whose GPUs are less than "
                           "half in use counts as unneeded and is drained after the autoscaler's "
                           "scale-down-unneeded-time, its running pod evicted; admission cannot know which node the "
                           "job lands on, and a node whose GPU device plugin stopped counts none of its GPUs in use, "
                           "so even a job that fills its node's GPUs carries the annotation)"),
    "karpenter": ("Karpenter's consolidation may remove its node while the job runs (a node whose pods fit on other "
                  "nodes, or on a cheaper one, is drained and deleted, its running pod evicted)"),
}


def scale_down_protected(autoscaler: Autoscaler) -> bool:
    """Whether `autoscaler` removes nodes on its own, so that training pods need its annotation (none: no)."""
    return bool(SCALE_DOWN_PROTECTION[autoscaler])


def _protection(autoscaler: Autoscaler) -> tuple[str, str]:
    if not scale_down_protected(autoscaler):
        raise ValueError(f"autoscaler {autoscaler!r} removes no node: there is no scale-down policy to render")
    ((key, value),) = SCALE_DOWN_PROTECTION[autoscaler].items()
    return key, value


def scale_down_how_to(autoscaler: Autoscaler) -> str:
    key, value = _protection(autoscaler)
    return (f"Add the annotation {key}: \"{value}\" to the pod template's metadata.annotations (a Job: "
            f"spec.template.metadata; a JobSet: every replicatedJobs[].template.spec.template.metadata; a Katib "
            f"Experiment: trialTemplate.trialSpec.spec.template.metadata)")


def render_scale_down_policy(autoscaler: Autoscaler = "cluster-autoscaler") -> dict[str, Any]:
    """Refuses, in the namespaces where Kueue queues every Job, a Job, CronJob, JobSet or Katib Experiment
    (inline Job trial template) whose pod template lacks the annotation `autoscaler` honours
    (cluster.SCALE_DOWN_PROTECTION: cluster-autoscaler's safe-to-evict "false", EKS and Linode: the platform's
    chart; GKE: its own; Karpenter's karpenter.sh/do-not-disrupt "true", cloud kubernetes): without it the
    autoscaler may drain a node whose use is under its threshold (0.5: one GPU busy on a four-GPU node) or that
    it can consolidate, and evict the running trainer (the Job's pod is otherwise replicated, hence drainable).
    Children a parent's controller makes (a JobSet's Jobs, a TrainJob's JobSet) follow their parent and are not
    judged again."""
    key, value = _protection(autoscaler)
    not_evicted = (f"has(t.metadata) && has(t.metadata.annotations) && '{key}' in t.metadata.annotations && "
                   f"t.metadata.annotations['{key}'] == '{value}'")
    return render_admission_policy(SCALE_DOWN_POLICY, {
        "matchConstraints": {
            "namespaceSelector": _TRAINING_NAMESPACES,
            "resourceRules": [
                {"apiGroups": ["batch"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["jobs", "cronjobs"]},
                {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "operations": ["CREATE"],
                 "resources": ["jobsets"]},
                {"apiGroups": ["kubeflow.org"], "apiVersions": ["v1beta1"], "operations": ["CREATE"],
                 "resources": ["experiments"]}]},
        "matchConditions": [{
            "name": "not-made-by-its-parents-controller",
            "expression": f"!(request.userInfo.username in ['{JOBSET_CONTROLLER_USER}', '{TRAINER_CONTROLLER_USER}'])"}],
        "variables": [{"name": "templates", "expression": POD_TEMPLATES}],
        "validations": [{
            "expression": f"variables.templates.all(t, {not_evicted})",
            "message": (f"a training pod here must carry {key}: \"{value}\": without it {_SCALE_DOWN_RISK[autoscaler]}. "
                        f"{scale_down_how_to(autoscaler)}. A TrainJob on the platform's runtime "
                        f"({', '.join(ANNOTATED_RUNTIMES)}) has it already"),
            "reason": "Invalid"}],
    })


def render_trainjob_scale_down_policy(autoscaler: Autoscaler = "cluster-autoscaler") -> dict[str, Any]:
    """Warns (bound with validationActions Warn: `kubectl apply` prints it, the TrainJob is created) when a
    TrainJob in a training namespace names a runtime other than the platform's annotated ones: its pods
    carry the annotation `autoscaler` honours only if that runtime's pod template does (the Trainer chart's
    default runtimes do not), so the autoscaler's scale-down may evict them."""
    key, value = _protection(autoscaler)
    who = "Karpenter" if autoscaler == "karpenter" else "cluster-autoscaler"
    return render_admission_policy(TRAINJOB_SCALE_DOWN_POLICY, {
        "matchConstraints": {
            "namespaceSelector": _TRAINING_NAMESPACES,
            "resourceRules": [{"apiGroups": ["trainer.kubeflow.org"], "apiVersions": ["v1alpha1"],
                               "operations": ["CREATE"], "resources": ["trainjobs"]}]},
        "validations": [{
            "expression": ("has(object.spec.runtimeRef) && (!has(object.spec.runtimeRef.kind) || "
                           "object.spec.runtimeRef.kind == 'ClusterTrainingRuntime') && object.spec.runtimeRef.name in ["
                           + ", ".join(f"'{r}'" for r in ANNOTATED_RUNTIMES) + "]"),
            "messageExpression": (f'"runtime " + object.spec.runtimeRef.name + " is not the platform\'s '
                                  f'{", ".join(ANNOTATED_RUNTIMES)}: unless its pod template carries '
                                  f'{key}: \\"{value}\\" (the Trainer chart\'s '
                                  f'default runtimes do not), {who} may remove a node this job runs on and '
                                  f'evict it. Use runtimeRef {{kind: ClusterTrainingRuntime, name: {ANNOTATED_RUNTIMES[0]}}}"'),
            "reason": "Invalid"}],
    })


def render_warn_binding(policy: str) -> dict[str, Any]:
    """A binding whose refusals are warnings to the client (and audit annotations), not denials."""
    binding = render_policy_binding(policy)
    binding["spec"]["validationActions"] = ["Warn", "Audit"]
    return binding


def render_policy_binding(policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": policy, "labels": dict(MANAGED_BY)},
        "spec": {"policyName": policy, "validationActions": ["Deny"]},
    }


def render_gpu_admission_binding() -> dict[str, Any]:
    return render_policy_binding(GPU_ADMISSION_POLICY)


@dataclass
class JobQueueArgs:
    cluster: ClusterHandle
    queueing_strategy: str = "BestEffortFIFO"
    gpu_quota: Mapping[str, int] | None = None
    pods_ready_timeout_minutes: int = 10
    max_requeues: int = 3
    training_namespace: Optional[pulumi.Resource] = None  # the LocalQueue waits for it
    # Kubeflow Pipelines' namespace (when installed): its pipeline steps name the LocalQueue made there.
    pipelines_namespace: Optional[pulumi.Resource] = None
    # Every instance type a node of a pool may be (EKS mixed-instances pools); default: the pool's own.
    instance_types: Optional[Mapping[str, Sequence[str]]] = None
    # Releases Kueue starts after (Kubeflow Trainer: the TrainJob/JobSet CRDs its integrations watch).
    after: Sequence[pulumi.Resource] = ()


class JobQueue(pulumi.ComponentResource):
    def __init__(self, name: str, args: JobQueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:JobQueue", name, None, opts)
        cluster = args.cluster
        quotas = gpu_quotas(cluster.gpu_pools, args.gpu_quota)
        capacities = pool_capacities(cluster.cloud, cluster.gpu_pools, args.instance_types, cluster.catalog)
        ns = apply_object(f"{name}-namespace", render_namespace(KUEUE_NAMESPACE, "restricted"), k8s_opts(cluster, self))
        self.kueue = helm_release(f"{name}-kueue", "kueue", versions.KUEUE, KUEUE_NAMESPACE,
                                  kueue_values(args.pods_ready_timeout_minutes, args.max_requeues,
                                               boot_minutes(cluster), cluster.node_join_deadline_minutes),
                                  k8s_opts(cluster, self, [ns, *args.after]))
        after_kueue = k8s_opts(cluster, self, [self.kueue])
        gpu_flavors = [apply_object(f"{name}-flavor-{p.name}", render_resource_flavor(p), after_kueue)
                       for p in cluster.gpu_pools]
        self.flavors = list(gpu_flavors)
        system = system_fit = None
        self.cpu_cluster_queue = None
        if cluster.system_pool is not None:
            system = system_quota(cluster.cloud, cluster.system_pool, cluster.catalog)
            system_fit = (node_share(allocatable(cluster.cloud, cluster.system_pool.instance_type, cluster.catalog,
                                                 managed_node_group=cluster.cloud == "aws")), system)
            system_flavor = apply_object(f"{name}-flavor-{SYSTEM_FLAVOR}", render_system_flavor(cluster.system_pool),
                                         after_kueue)
            self.flavors.insert(0, system_flavor)
            self.cpu_cluster_queue = apply_object(
                f"{name}-cpu-cluster-queue", render_cpu_cluster_queue(system),
                k8s_opts(cluster, self, [self.kueue, system_flavor]))
        self.cluster_queue = apply_object(
            f"{name}-cluster-queue",
            render_cluster_queue(cluster.gpu_pools, capacities, quotas, args.queueing_strategy),
            k8s_opts(cluster, self, [self.kueue, *gpu_flavors]))
        ns_deps = [args.training_namespace] if args.training_namespace else []
        self.local_queue = apply_object(f"{name}-local-queue", render_local_queue(),
                                        k8s_opts(cluster, self, [self.kueue, self.cluster_queue, *ns_deps]))
        # `default` (jobs without a queue name) is the GPU queue, as `gpu-queue` is: the main path needs
        # no label. A LocalQueue's spec.clusterQueue is immutable (Kueue v0.19.2 localqueue_types.go, CEL
        # self == oldSelf): a stack whose `default` pointed at cpu-work (an earlier build of this
        # release) gets it deleted and created again on `pulumi up`; one from 1.x (gpu-training) keeps it.
        self.default_local_queue = apply_object(
            f"{name}-default-local-queue", render_local_queue(name=DEFAULT_LOCAL_QUEUE),
            pulumi.ResourceOptions.merge(k8s_opts(cluster, self, [self.kueue, self.cluster_queue, *ns_deps]),
                                         pulumi.ResourceOptions(replace_on_changes=["spec.clusterQueue"],
                                                                delete_before_replace=True)))
        # CPU-only work in `training` names `cpu-queue` (the system nodes).
        self.cpu_local_queue = None
        if self.cpu_cluster_queue is not None:
            self.cpu_local_queue = apply_object(
                f"{name}-cpu-local-queue",
                render_local_queue(name=CPU_LOCAL_QUEUE, cluster_queue=CPU_CLUSTER_QUEUE),
                k8s_opts(cluster, self, [self.kueue, self.cpu_cluster_queue, *ns_deps]))
        self.pipelines_local_queue = None
        if args.pipelines_namespace is not None:
            self.pipelines_local_queue = apply_object(
                f"{name}-pipelines-local-queue", render_local_queue(KUBEFLOW_NAMESPACE),
                k8s_opts(cluster, self, [self.kueue, self.cluster_queue, args.pipelines_namespace]))
        # Refuses GPU pods Kueue did not queue; after the queues exist, so queued work is never refused.
        policy_deps = k8s_opts(cluster, self, [self.local_queue, self.default_local_queue,
                                               *([self.cpu_local_queue] if self.cpu_local_queue else []),
                                               *([self.pipelines_local_queue] if self.pipelines_local_queue else [])])
        self.gpu_admission_policy = apply_object(f"{name}-gpu-admission-policy",
                                                 render_gpu_admission_policy(cluster.gpu_pod_scope), policy_deps)
        self.gpu_admission_binding = apply_object(
            f"{name}-gpu-admission-binding", render_gpu_admission_binding(),
            k8s_opts(cluster, self, [self.gpu_admission_policy]))
        # GPU work in the GPU queue, CPU-only work in the CPU queue (only with the two queues).
        self.routing_policy = self.routing_binding = None
        if self.cpu_cluster_queue is not None:
            self.routing_policy = apply_object(f"{name}-routing-policy", render_queue_routing_policy(),
                                               k8s_opts(cluster, self, [self.cpu_local_queue]))
            self.routing_binding = apply_object(f"{name}-routing-binding", render_policy_binding(QUEUE_ROUTING_POLICY),
                                                k8s_opts(cluster, self, [self.routing_policy]))
        # Refuses a GPU job whose pods fit only some pools unless it names one (per-flavor fit).
        self.fit_policy = apply_object(f"{name}-fit-policy", render_fit_policy(capacities, system_fit), k8s_opts(cluster, self))
        self.fit_binding = apply_object(f"{name}-fit-binding", render_policy_binding(FIT_POLICY),
                                        k8s_opts(cluster, self, [self.fit_policy]))
        # Refuses jobs that name a queued job as owner to slip past Kueue (render_job_owner_policy).
        self.job_owner_policy = apply_object(f"{name}-job-owner-policy", render_job_owner_policy(), k8s_opts(cluster, self))
        self.job_owner_binding = apply_object(f"{name}-job-owner-binding", render_policy_binding(JOB_OWNER_POLICY),
                                              k8s_opts(cluster, self, [self.job_owner_policy]))
        # Refuses a pod update that drops Kueue's admission gate, unless Kueue makes it (render_admission_gate_policy).
        self.admission_gate_policy = apply_object(f"{name}-admission-gate-policy", render_admission_gate_policy(),
                                                  k8s_opts(cluster, self))
        self.admission_gate_binding = apply_object(f"{name}-admission-gate-binding",
                                                   render_policy_binding(ADMISSION_GATE_POLICY),
                                                   k8s_opts(cluster, self, [self.admission_gate_policy]))
        # Refuses lifting a queued job's suspend, or widening a running Job, from anyone but Kueue (render_suspend_policy).
        self.suspend_policy = apply_object(f"{name}-suspend-policy", render_suspend_policy(), k8s_opts(cluster, self))
        self.suspend_binding = apply_object(f"{name}-suspend-binding", render_policy_binding(SUSPEND_POLICY),
                                            k8s_opts(cluster, self, [self.suspend_policy]))
        # Refuses a CPU-only pod tolerating the GPU nodes' taint outside Kueue's placement (render_gpu_toleration_policy).
        self.gpu_toleration_policy = apply_object(f"{name}-gpu-toleration-policy", render_gpu_toleration_policy(),
                                                  k8s_opts(cluster, self))
        self.gpu_toleration_binding = apply_object(f"{name}-gpu-toleration-binding",
                                                   render_policy_binding(GPU_TOLERATION_POLICY),
                                                   k8s_opts(cluster, self, [self.gpu_toleration_policy]))
        # Training pods stay on their nodes through scale-down (render_scale_down_policy), TrainJobs on
        # another runtime than the platform's get a warning (render_trainjob_scale_down_policy).
        self.scale_down_policy = self.scale_down_binding = None
        self.trainjob_scale_down_policy = self.trainjob_scale_down_binding = None
        if scale_down_protected(cluster.autoscaler):  # `none`: nothing removes a node under a job
            self.scale_down_policy = apply_object(f"{name}-scale-down-policy", render_scale_down_policy(cluster.autoscaler),
                                                  k8s_opts(cluster, self))
            self.scale_down_binding = apply_object(f"{name}-scale-down-binding", render_policy_binding(SCALE_DOWN_POLICY),
                                                   k8s_opts(cluster, self, [self.scale_down_policy]))
            self.trainjob_scale_down_policy = apply_object(f"{name}-trainjob-scale-down-policy",
                                                           render_trainjob_scale_down_policy(cluster.autoscaler),
                                                           k8s_opts(cluster, self))
            self.trainjob_scale_down_binding = apply_object(
                f"{name}-trainjob-scale-down-binding", render_warn_binding(TRAINJOB_SCALE_DOWN_POLICY),
                k8s_opts(cluster, self, [self.trainjob_scale_down_policy]))
        self.gpu_quota = quotas
        self.register_outputs({"clusterQueue": CLUSTER_QUEUE, "localQueue": LOCAL_QUEUE,
                               "cpuClusterQueue": CPU_CLUSTER_QUEUE if self.cpu_cluster_queue else None,
                               "defaultLocalQueue": DEFAULT_LOCAL_QUEUE,
                               "cpuLocalQueue": CPU_LOCAL_QUEUE if self.cpu_local_queue else None, "gpuQuota": quotas,
                               "totalGpuQuota": sum(quotas.values())})
