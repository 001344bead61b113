"""The job queue: Kueue, a ResourceFlavor per GPU pool, one ClusterQueue, LocalQueues for training
(and GPU notebooks).

Quotas come from what the pools' nodes can really hand to pods (gpu_platform.components.capacity.allocatable:
the catalog's size minus kubelet/system reservations, per cloud), less the platform's own GPU-node
daemons and a small headroom. So the queue never admits more CPU/memory than the pools can hold, and
jobs wait in the queue instead of as Pending pods. Kueue quotas are per flavor in aggregate: a single
pod larger than one node is caught by the training LimitRange's `max` (one node's share, see
training.py), which Kueue checks before admitting.

Kueue's webhooks (many with failurePolicy Fail) are scoped to namespaces labelled
QUEUE_NAMESPACE_LABEL (managedJobsNamespaceSelector, which the chart uses as every job webhook's
namespaceSelector), so the other releases' hook Jobs never wait for Kueue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
import yaml

from gpu_platform.components.capacity import MI, Allocatable, allocatable
from gpu_platform.components.cluster import TRAINING_NAMESPACE, ClusterHandle, GpuPoolSpec
from gpu_platform.components.platform import versions
from gpu_platform.components.platform.common import (
    KUEUE_NAMESPACE, MANAGED_BY, apply_object, helm_release, k8s_opts, render_namespace,
)

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "gpu-training"
LOCAL_QUEUE = "gpu-queue"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
# Namespaces whose workloads Kueue manages (and whose jobs its webhooks see) carry this label; the
# ClusterQueue admits from the same namespaces. Set on `training` (and `jupyterhub` for GPU notebooks).
QUEUE_NAMESPACE_LABEL = "gpu-platform.io/queue"
QUEUE_NAMESPACE_VALUE = "enabled"
QUEUE_NAMESPACE_SELECTOR = {"matchLabels": {QUEUE_NAMESPACE_LABEL: QUEUE_NAMESPACE_VALUE}}
# Workload kinds Kueue manages: plain batch Jobs, Kubeflow TrainJobs (and the JobSets Trainer makes),
# and plain Pods (GPU notebooks, which carry the queue-name label).
INTEGRATIONS = ("batch/job", "trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset", "pod")

# Requests of the platform's own DaemonSets on every GPU node (gpu.py: DCGM exporter and, where the
# cloud has none, the device plugin; monitoring.py: node-exporter), plus headroom for the cloud's
# node agents (CNI, kube-proxy, CSI node plugin, log agents) whose requests the program does not set.
# capacity.allocatable is an upper bound by a few percent (catalog size vs. MemTotal).
NODE_DAEMONS = {"cpu_millis": 100 + 50 + 50, "memory_bytes": (128 + 64 + 64) * MI}
HEADROOM_PERCENT = 5


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
                    instance_types: Optional[Mapping[str, Sequence[str]]] = None) -> dict[str, PoolCapacity]:
    """Per pool, one node's share for jobs. `instance_types`: every type a node of the pool may be
    (EKS mixed-instances pools); the smallest decides, since a job may land on any of them."""
    out: dict[str, PoolCapacity] = {}
    for p in pools:
        types = list((instance_types or {}).get(p.name) or [p.instance_type])
        try:
            shares = [node_share(allocatable(cloud, t)) for t in types]
        except ValueError as e:
            raise ValueError(f"GPU pool {p.name}: {e}") from None
        out[p.name] = PoolCapacity(min(s.cpu_millis for s in shares), min(s.memory_bytes for s in shares),
                                   min(s.gpus for s in shares))
    return out


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


def render_cluster_queue(pools: Sequence[GpuPoolSpec], capacities: Mapping[str, PoolCapacity],
                         quotas: Mapping[str, int], queueing_strategy: str = "BestEffortFIFO",
                         ) -> dict[str, Any]:
    """The one ClusterQueue: GPU quota per flavor, CPU/memory what the pool's nodes can hand to jobs
    at the pool's maximum size (allocatable, not nominal size). Admits from every namespace labelled
    QUEUE_NAMESPACE_LABEL.

    Preemption suits interruptible capacity: a higher-priority job may preempt a lower one in the
    queue; nothing is reclaimed across cohorts (there are none); when a flavor is full the next pool
    is tried before anything is preempted."""
    if queueing_strategy not in ("StrictFIFO", "BestEffortFIFO"):
        raise ValueError(f"queueingStrategy must be StrictFIFO or BestEffortFIFO, not {queueing_strategy!r}")
    flavors = []
    for p in pools:
        cap = capacities[p.name]
        flavors.append({
            "name": p.name,
            "resources": [
                {"name": "cpu", "nominalQuota": f"{cap.cpu_millis * p.max_nodes}m"},
                {"name": "memory", "nominalQuota": f"{cap.memory_bytes * p.max_nodes // MI}Mi"},
                {"name": GPU_RESOURCE, "nominalQuota": quotas[p.name]},
            ],
        })
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE, "labels": dict(MANAGED_BY)},
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


def render_local_queue(namespace: str = TRAINING_NAMESPACE) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_API,
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {"clusterQueue": CLUSTER_QUEUE, "stopPolicy": "None"},
    }


def kueue_manager_config(pods_ready_timeout_minutes: int = 10) -> dict[str, Any]:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2). waitForPodsReady evicts a workload
    whose pods are not all running in time (a spot node reclaimed mid-run) and requeues it without
    limit, with exponential backoff from 60 s up to an hour."""
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
            "timeout": f"{pods_ready_timeout_minutes}m",
            "recoveryTimeout": "3m",
            "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        # Only jobs that name a queue are managed; everything else schedules as usual.
        "manageJobsWithoutQueueName": False,
        # Kueue's job/pod webhooks and integrations only see the queue's namespaces: no other
        # release's (hook) Jobs depend on Kueue serving (the chart copies this selector into every
        # job webhook's namespaceSelector).
        "managedJobsNamespaceSelector": QUEUE_NAMESPACE_SELECTOR,
        "integrations": {"frameworks": list(INTEGRATIONS)},
    }


def kueue_values(pods_ready_timeout_minutes: int = 10) -> dict[str, Any]:
    return {
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(
            kueue_manager_config(pods_ready_timeout_minutes), sort_keys=False)},
        "enablePrometheus": False,
        "enableCertManager": False,
        "enableKueueViz": False,
        "controllerManager": {"podDisruptionBudget": {"enabled": False}},
    }


@dataclass
class JobQueueArgs:
    cluster: ClusterHandle
    queueing_strategy: str = "BestEffortFIFO"
    gpu_quota: Mapping[str, int] | None = None
    pods_ready_timeout_minutes: int = 10
    training_namespace: Optional[pulumi.Resource] = None  # the LocalQueue waits for it
    # Every instance type a node of a pool may be (EKS mixed-instances pools); default: the pool's own.
    instance_types: Optional[Mapping[str, Sequence[str]]] = None
    # Releases Kueue starts after (Kubeflow Trainer: the TrainJob/JobSet CRDs its integrations watch).
    after: Sequence[pulumi.Resource] = ()


class JobQueue(pulumi.ComponentResource):
    def __init__(self, name: str, args: JobQueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:JobQueue", name, None, opts)
        cluster = args.cluster
        quotas = gpu_quotas(cluster.gpu_pools, args.gpu_quota)
        capacities = pool_capacities(cluster.cloud, cluster.gpu_pools, args.instance_types)
        ns = apply_object(f"{name}-namespace", render_namespace(KUEUE_NAMESPACE, "restricted"), k8s_opts(cluster, self))
        self.kueue = helm_release(f"{name}-kueue", "kueue", versions.KUEUE, KUEUE_NAMESPACE,
                                  kueue_values(args.pods_ready_timeout_minutes),
                                  k8s_opts(cluster, self, [ns, *args.after]))
        after_kueue = k8s_opts(cluster, self, [self.kueue])
        self.flavors = [apply_object(f"{name}-flavor-{p.name}", render_resource_flavor(p), after_kueue)
                        for p in cluster.gpu_pools]
        self.cluster_queue = apply_object(
            f"{name}-cluster-queue",
            render_cluster_queue(cluster.gpu_pools, capacities, quotas, args.queueing_strategy),
            k8s_opts(cluster, self, [self.kueue, *self.flavors]))
        lq_deps = [self.kueue, self.cluster_queue] + ([args.training_namespace] if args.training_namespace else [])
        self.local_queue = apply_object(f"{name}-local-queue", render_local_queue(), k8s_opts(cluster, self, lq_deps))
        self.gpu_quota = quotas
        self.register_outputs({"clusterQueue": CLUSTER_QUEUE, "localQueue": LOCAL_QUEUE, "gpuQuota": quotas,
                               "totalGpuQuota": sum(quotas.values())})
