"""The training namespace: where TrainJobs run, as a service account wired to the checkpoint bucket.

Always created (the cloud IAM bindings of GKE Workload Identity / EKS IRSA name this namespace and
service account). Its ResourceQuota caps what the namespace can request at what the GPU pools hold;
its LimitRange gives containers that state nothing a modest request, so the quota can count them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pulumi

from components.cluster import TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT, ClusterHandle
from components.platform.common import MANAGED_BY, apply_object, k8s_opts, render_namespace

CHECKPOINT_CONFIGMAP = "checkpoint-store"
CHECKPOINT_SECRET = "checkpoint-credentials"
CHECKPOINT_URL_KEY = "CHECKPOINT_URL"


def render_training_namespace() -> dict[str, Any]:
    # baseline, not restricted: training images (PyTorch, DeepSpeed) commonly run as root.
    return render_namespace(TRAINING_NAMESPACE, "baseline", {"gpu-platform.io/role": "training"})


def render_training_service_account(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """The identity training pods run as; cloud IAM (Workload Identity, IRSA) binds to it. No API
    token is mounted: training needs the bucket, not the Kubernetes API."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": TRAINING_SERVICE_ACCOUNT, "namespace": TRAINING_NAMESPACE,
                     "labels": dict(MANAGED_BY), "annotations": dict(annotations)},
        "automountServiceAccountToken": False,
    }


def render_checkpoint_configmap(url: Any, env: Mapping[str, Any]) -> dict[str, Any]:
    """Plain settings pods need for the bucket: CHECKPOINT_URL plus the cluster's env (endpoint, region)."""
    if CHECKPOINT_URL_KEY in env:
        raise ValueError(f"checkpoint env must not set {CHECKPOINT_URL_KEY}; it comes from the bucket URL")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CHECKPOINT_CONFIGMAP, "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "data": {CHECKPOINT_URL_KEY: url, **dict(env)},
    }


def render_checkpoint_secret(credentials: Any) -> dict[str, Any]:
    """Bucket keys where the cloud has no workload identity (Linode). `credentials` is the secret
    Output in the program, a plain mapping in tests."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": CHECKPOINT_SECRET, "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "stringData": credentials,
    }


def render_resource_quota(gpus: int, cpus: int, memory_gib: float) -> dict[str, Any]:
    """At most what the GPU pools can hold, so a runaway submitter cannot queue up the whole cloud."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "training-quota", "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"hard": {
            "requests.nvidia.com/gpu": str(gpus),
            "requests.cpu": str(cpus),
            "requests.memory": f"{math.ceil(memory_gib)}Gi",
            "pods": "200",
            "persistentvolumeclaims": "20",
            "services.loadbalancers": "0",
            "services.nodeports": "0",
        }},
    }


def render_limit_range() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "training-defaults", "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"limits": [{
            "type": "Container",
            "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
            "default": {"cpu": "4", "memory": "16Gi"},
        }]},
    }


@dataclass
class TrainingNamespaceArgs:
    cluster: ClusterHandle
    gpu_quota: int
    cpu_quota: int
    memory_quota_gib: float


class TrainingNamespace(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingNamespaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:TrainingNamespace", name, None, opts)
        cluster, store = args.cluster, args.cluster.checkpoint
        self.namespace = apply_object(f"{name}-namespace", render_training_namespace(), k8s_opts(cluster, self))
        in_ns = k8s_opts(cluster, self, [self.namespace])
        self.service_account = apply_object(
            f"{name}-service-account", render_training_service_account(store.service_account_annotations), in_ns)
        self.checkpoint_config = apply_object(
            f"{name}-checkpoint-config", render_checkpoint_configmap(store.url, store.env), in_ns)
        self.checkpoint_secret: Optional[pulumi.Resource] = None
        if store.credentials is not None:
            secret_data = pulumi.Output.secret(store.credentials)
            self.checkpoint_secret = apply_object(
                f"{name}-checkpoint-credentials", render_checkpoint_secret(None), in_ns, string_data=secret_data)
        self.quota = apply_object(f"{name}-quota",
                                  render_resource_quota(args.gpu_quota, args.cpu_quota, args.memory_quota_gib), in_ns)
        self.limits = apply_object(f"{name}-limits", render_limit_range(), in_ns)
        self.register_outputs({"namespace": TRAINING_NAMESPACE, "serviceAccount": TRAINING_SERVICE_ACCOUNT,
                               "checkpointConfigMap": CHECKPOINT_CONFIGMAP})
