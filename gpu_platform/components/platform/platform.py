"""`MlPlatform`: the same ML platform on every cluster handle, each part switched by `platform:`.

Always: GPU enablement (device plugin where the cluster has none, DCGM exporter) and the training
namespace. Switchable: queue (Kueue), kubeflow (Trainer, Katib, Pipelines), notebooks (JupyterHub),
monitoring (kube-prometheus-stack, idle-GPU and spend alerts, dashboard).

Order: Kueue's job webhooks (failurePolicy Fail) only see the namespaces labelled for the queue
(`training`, and `jupyterhub` whose GPU notebooks are queued), so no other release waits for it; the
one release installed into such a namespace (JupyterHub) is ordered after Kueue, and Kueue after
Kubeflow Trainer, whose TrainJob/JobSet CRDs its integrations watch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import pulumi

from gpu_platform.components.cluster import ClusterHandle
from gpu_platform.components.platform.common import apply_object, boot_minutes, k8s_opts, render_priority_class
from gpu_platform.components.platform.gpu import GpuEnablement, GpuEnablementArgs
from gpu_platform.components.platform.kubeflow import Kubeflow, KubeflowArgs
from gpu_platform.components.platform.monitoring import Monitoring, MonitoringArgs
from gpu_platform.components.platform.notebooks import Notebooks, NotebooksArgs
from gpu_platform.components.platform.queue import (
    CLUSTER_QUEUE, LOCAL_QUEUE, JobQueue, JobQueueArgs, PoolCapacity, gpu_quotas, pods_ready_timeouts,
    pool_capacities, system_quota,
)
from gpu_platform.components.platform.training import TrainingNamespace, TrainingNamespaceArgs

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig


def pool_instance_types(cfg: "StackConfig") -> dict[str, list[str]]:
    """Every instance type a node of each pool may be: EKS pools may list alternatives (mixed
    instances), and the queue's per-node share must hold on the smallest of them."""
    if cfg.cloud != "aws":
        return {pool.name: [pool.instance_type] for pool in cfg.gpu_pools}
    from gpu_platform.config.derived import instance_types_of

    return {pool.name: instance_types_of(cfg, i) for i, pool in enumerate(cfg.gpu_pools)}


def training_quota(cluster: ClusterHandle, caps: dict[str, PoolCapacity], queued: bool) -> tuple[int, int]:
    """(CPU millicores, memory bytes) of the training namespace's ResourceQuota: everything the queues
    can admit into `training`. That is the GPU ClusterQueue's quota (its pools at maximum size) plus,
    with the queue on, the CPU ClusterQueue's (system_quota: LocalQueue cpu-queue lives in `training`
    too). A namespace quota below what Kueue admits refuses pods of a job Kueue already admitted
    ("exceeded quota: training-quota"): they never become Ready and waitForPodsReady evicts the job."""
    cpu = sum(caps[x.name].cpu_millis * x.max_nodes for x in cluster.gpu_pools)
    memory = sum(caps[x.name].memory_bytes * x.max_nodes for x in cluster.gpu_pools)
    if queued and cluster.system_pool is not None:
        system = system_quota(cluster.cloud, cluster.system_pool, cluster.catalog)
        cpu, memory = cpu + system.cpu_millis, memory + system.memory_bytes
    return cpu, memory


@dataclass
class PlatformArgs:
    cfg: "StackConfig"
    cluster: ClusterHandle


class MlPlatform(pulumi.ComponentResource):
    """Outputs: parts (which are installed), gpu_quota (per pool), local_queue (what TrainJobs name)."""

    def __init__(self, name: str, args: PlatformArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:platform:MlPlatform", name, None, opts)
        cfg, cluster, p = args.cfg, args.cluster, args.cfg.platform
        if not cluster.gpu_pools:
            raise ValueError("the ML platform needs a cluster with at least one GPU pool")
        child = pulumi.ResourceOptions(parent=self)

        quotas = gpu_quotas(cluster.gpu_pools, p.gpu_quota)
        types = pool_instance_types(cfg)
        caps = pool_capacities(cluster.cloud, cluster.gpu_pools, types, cluster.catalog)
        self.gpu = GpuEnablement(f"{name}-gpu", GpuEnablementArgs(cluster=cluster), child)
        # The priority of the platform's controllers (Kueue, monitoring): before the releases naming it.
        self.priority_class = apply_object(f"{name}-priority-class", render_priority_class(), k8s_opts(cluster, self))
        cpu_quota, memory_quota = training_quota(cluster, caps, p.queue)
        self.training = TrainingNamespace(f"{name}-training", TrainingNamespaceArgs(
            cluster=cluster,
            gpu_quota=sum(quotas.values()),
            cpu_quota_millis=cpu_quota,
            memory_quota_bytes=memory_quota,
            max_container_cpu_millis=max(c.cpu_millis for c in caps.values()),
            max_container_memory_bytes=max(c.memory_bytes for c in caps.values()),
        ), child)

        self.kubeflow: Optional[Kubeflow] = None
        if p.kubeflow:
            self.kubeflow = Kubeflow(f"{name}-kubeflow", KubeflowArgs(cluster=cluster, queued=p.queue,
                                                                           priority_class=self.priority_class), child)
        self.queue: Optional[JobQueue] = None
        if p.queue:
            self.queue = JobQueue(f"{name}-queue", JobQueueArgs(
                cluster=cluster, queueing_strategy=p.queueing_strategy, gpu_quota=p.gpu_quota,
                pods_ready_timeout_minutes=p.pods_ready_timeout_minutes, max_requeues=p.max_requeues,
                training_namespace=self.training.namespace, instance_types=types,
                pipelines_namespace=self.kubeflow.kubeflow_namespace if self.kubeflow else None,
                after=[self.priority_class, *([self.kubeflow.trainer] if self.kubeflow else [])]), child)
        if self.kubeflow:  # Pipelines and Katib live in a queue namespace: after Kueue serves
            self.kubeflow.install_apps([self.queue.kueue] if self.queue else [])
        self.notebooks: Optional[Notebooks] = None
        if p.notebooks:
            self.notebooks = Notebooks(f"{name}-notebooks", NotebooksArgs(
                cluster=cluster, storage_gib=p.notebook_storage_gib,
                idle_cull_minutes=p.notebook_idle_cull_minutes, admin_users=p.notebook_admin_users,
                queue=self.queue, training_namespace=self.training.namespace, priority_class=self.priority_class,
                start_timeout_seconds=60 * pods_ready_timeouts(boot_minutes(cluster), p.pods_ready_timeout_minutes,
                                                               cluster.node_join_deadline_minutes)[0]), child)
        self.monitoring: Optional[Monitoring] = None
        if p.monitoring:
            self.monitoring = Monitoring(f"{name}-monitoring", MonitoringArgs(
                cluster=cluster, alert_emails=cfg.alert_emails, alert_smtp=p.alert_smtp,
                monthly_budget_usd=cfg.monthly_budget_usd, idle_gpu_minutes=p.idle_gpu_minutes,
                idle_gpu_util_percent=p.idle_gpu_util_percent, retention_days=p.prometheus_retention_days,
                storage_gib=p.prometheus_storage_gib, price_overrides=cfg.catalog_overrides() or None,
                region=getattr(cfg.cloud_section, "region", None), after=[self.priority_class]), child)

        self.parts = {"gpu": True, "training": True, "queue": p.queue, "kubeflow": p.kubeflow,
                      "notebooks": p.notebooks, "monitoring": p.monitoring}
        self.gpu_quota = quotas
        self.local_queue = LOCAL_QUEUE if p.queue else None
        self.register_outputs({"parts": self.parts, "gpuQuota": quotas,
                               "clusterQueue": CLUSTER_QUEUE if p.queue else None,
                               "localQueue": self.local_queue})
