"""The job queue: Kueue, a ResourceFlavor per GPU pool, one ClusterQueue, a LocalQueue for training.

Quotas come from the pools (GPUs = maxNodes x GPUs per node, CPU and memory = what the pool's nodes
have, from the price catalog), so the queue never admits more than the pools can hold and jobs wait
in the queue instead of as Pending pods on a cluster that cannot grow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
import yaml

from components.cluster import TRAINING_NAMESPACE, ClusterHandle, GpuPoolSpec
from components.platform import versions
from components.platform.common import (
    KUEUE_NAMESPACE, MANAGED_BY, apply_object, helm_release, k8s_opts, render_namespace,
)

KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "gpu-training"
LOCAL_QUEUE = "gpu-queue"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
GPU_RESOURCE = "nvidia.com/gpu"
# Workload kinds Kueue manages: plain batch Jobs and Kubeflow TrainJobs (and the JobSets Trainer makes).
INTEGRATIONS = ("batch/job", "trainer.kubeflow.org/trainjob", "jobset.x-k8s.io/jobset")


@dataclass(frozen=True)
class PoolCapacity:
    """What one node of a pool has, for CPU and memory quotas (from the price catalog)."""

    vcpus: int
    memory_gib: float


def pool_capacities(cloud: str, pools: Sequence[GpuPoolSpec]) -> dict[str, PoolCapacity]:
    from costs.catalog import load_catalog

    catalog = load_catalog()
    out: dict[str, PoolCapacity] = {}
    for p in pools:
        itype = catalog.instance(cloud, p.instance_type)
        if itype is None:
            raise ValueError(f"GPU pool {p.name}: {cloud} instance type {p.instance_type} is not in the price catalog")
        out[p.name] = PoolCapacity(itype.vcpus, itype.memory_gib)
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
                         namespace: str = TRAINING_NAMESPACE) -> dict[str, Any]:
    """The one ClusterQueue: GPU quota per flavor, CPU/memory as much as the pool's nodes have.

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
                {"name": "cpu", "nominalQuota": cap.vcpus * p.max_nodes},
                {"name": "memory", "nominalQuota": f"{math.ceil(cap.memory_gib * p.max_nodes)}Gi"},
                {"name": GPU_RESOURCE, "nominalQuota": quotas[p.name]},
            ],
        })
    return {
        "apiVersion": KUEUE_API,
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE, "labels": dict(MANAGED_BY)},
        "spec": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
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
            "Job.batch": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
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


class JobQueue(pulumi.ComponentResource):
    def __init__(self, name: str, args: JobQueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:JobQueue", name, None, opts)
        cluster = args.cluster
        quotas = gpu_quotas(cluster.gpu_pools, args.gpu_quota)
        capacities = pool_capacities(cluster.cloud, cluster.gpu_pools)
        ns = apply_object(f"{name}-namespace", render_namespace(KUEUE_NAMESPACE, "restricted"), k8s_opts(cluster, self))
        self.kueue = helm_release(f"{name}-kueue", "kueue", versions.KUEUE, KUEUE_NAMESPACE,
                                  kueue_values(args.pods_ready_timeout_minutes), k8s_opts(cluster, self, [ns]))
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
