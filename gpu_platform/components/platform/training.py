"""The training namespace: where TrainJobs run, as a service account wired to the checkpoint bucket.

Always created (the cloud IAM bindings of GKE Workload Identity / EKS IRSA name this namespace and
service account). Its ResourceQuota caps what the namespace can request at what the queues can admit
there (the GPU pools' allocatable share and the CPU queue's system quota, see queue.py); its LimitRange
gives containers that state nothing a modest request, so the quota can count them, and refuses a
container larger than the largest node's share (no default *limits*: a multi-GPU pod that sets only
requests must stay valid).

Cloud metadata (169.254.169.254): on Linode it serves the node's user data (kubeadm join material),
on EKS the node role's credentials (IRSA needs STS, not the metadata service), so training pods may
not reach it there (NetworkPolicy, enforced by the cluster's CNI). On GKE with Workload Identity the
address is the GKE metadata server, which serves only the pod's own Kubernetes service account's
Google identity (the checkpoint bucket's credentials) and hides the node's: training must reach it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pulumi

from gpu_platform.components.capacity import MI
from gpu_platform.components.cluster import (
    CHECKPOINT_CA_CONFIGMAP, CHECKPOINT_CA_KEY, TRAINING_NAMESPACE, TRAINING_SERVICE_ACCOUNT, ClusterHandle,
)
from gpu_platform.components.images import PULL_SECRET
from gpu_platform.components.read_only import SECRET_CONTENT, keep_from_state
from gpu_platform.components.platform.common import (
    KATIB_METRICS_COLLECTOR_LABEL, MANAGED_BY, apply_object, k8s_opts, render_metadata_block_policy, render_namespace,
)
from gpu_platform.components.platform.queue import (
    DEFAULT_QUEUE_NAMESPACE_LABEL, QUEUE_NAMESPACE_LABEL, QUEUE_NAMESPACE_VALUE,
)

CHECKPOINT_CONFIGMAP = "checkpoint-store"
CHECKPOINT_SECRET = "checkpoint-credentials"
CHECKPOINT_URL_KEY = "CHECKPOINT_URL"
# A training pod's time between SIGTERM and SIGKILL to finish its step and write a checkpoint
# (the torch-checkpointed runtime, kubeflow.py). Within what GKE Spot pools give pods (105 s of a 120 s
# graceful shutdown, gcp/nodepool.py, where the minor allows; 15 s otherwise); a drain (scale-in, node
# repair, AWS Spot's 2 min) honours it in full.
CHECKPOINT_GRACE_SECONDS = 60


def render_training_namespace() -> dict[str, Any]:
    """baseline, not restricted: training images (PyTorch, DeepSpeed) commonly run as root. Labelled
    for the queue (Kueue manages jobs here) and for Katib's metrics collector injection (its
    webhook selects namespaces by that label); both labels are inert while the part is off."""
    return render_namespace(TRAINING_NAMESPACE, "baseline", {
        "gpu-platform.io/role": "training",
        QUEUE_NAMESPACE_LABEL: QUEUE_NAMESPACE_VALUE,
        DEFAULT_QUEUE_NAMESPACE_LABEL: "true",
        KATIB_METRICS_COLLECTOR_LABEL: "enabled",
    })


def render_training_service_account(annotations: Mapping[str, Any], pull_secret: Optional[str] = None) -> dict[str, Any]:
    """The identity training pods run as; cloud IAM (Workload Identity, IRSA) binds to it. No API
    token is mounted: training needs the bucket, not the Kubernetes API. `pull_secret`: an image pull
    Secret every pod of the account pulls with (the ServiceAccount admission plugin adds it to the pod),
    where the stack's training image sits in a registry the nodes cannot read on their own (Linode)."""
    doc = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": TRAINING_SERVICE_ACCOUNT, "namespace": TRAINING_NAMESPACE,
                     "labels": dict(MANAGED_BY), "annotations": dict(annotations)},
        "automountServiceAccountToken": False,
    }
    if pull_secret:
        doc["imagePullSecrets"] = [{"name": pull_secret}]
    return doc


def render_pull_secret(name: str) -> dict[str, Any]:
    """The image pull Secret of the training namespace; its .dockerconfigjson is the secret Output."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
            "metadata": {"name": name, "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)}}


def render_checkpoint_configmap(url: Any, env: Mapping[str, Any]) -> dict[str, Any]:
    """Plain settings pods need for the bucket: CHECKPOINT_URL plus the cluster's env (endpoint, region). No URL
    (a cluster without a checkpoint store): no CHECKPOINT_URL, so a job that needs one says so at its start."""
    if CHECKPOINT_URL_KEY in env:
        raise ValueError(f"checkpoint env must not set {CHECKPOINT_URL_KEY}; it comes from the bucket URL")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CHECKPOINT_CONFIGMAP, "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "data": {**({} if url is None else {CHECKPOINT_URL_KEY: url}), **dict(env)},
    }


def render_checkpoint_ca_configmap(pem: str) -> dict[str, Any]:
    """The certificates of the store's private CA (public: a ConfigMap), mounted by the torch-checkpointed runtime
    (kubeflow.render_checkpointed_runtime) where the store's AWS_CA_BUNDLE points."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CHECKPOINT_CA_CONFIGMAP, "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "data": {CHECKPOINT_CA_KEY: pem},
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


def render_resource_quota(gpus: int, cpu_millis: int, memory_bytes: int) -> dict[str, Any]:
    """At most what the queues can admit into the namespace (platform.training_quota: the GPU pools'
    share plus the CPU queue's system quota), so a runaway submitter cannot queue up the whole cloud
    and a job Kueue admitted is never refused by the namespace's quota."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "training-quota", "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"hard": {
            "requests.nvidia.com/gpu": str(gpus),
            "requests.cpu": f"{cpu_millis}m",
            "requests.memory": f"{memory_bytes // MI}Mi",
            "pods": "200",
            "persistentvolumeclaims": "20",
            "services.loadbalancers": "0",
            "services.nodeports": "0",
        }},
    }


def render_limit_range(max_cpu_millis: int, max_memory_bytes: int) -> dict[str, Any]:
    """A modest defaultRequest for containers that state nothing, and `max` = the largest node's
    share for jobs (queue.pool_capacities): a container that fits no node is refused (Kueue checks
    LimitRanges before admitting, so such a job is reported inadmissible instead of admitted and
    Pending). No `default` limits: the API server defaults them from `max` (requests up to a whole
    node stay valid), never from a small fixed value that would make a larger request invalid.
    No GPU entry: a GPU `max` would become every container's default GPU limit."""
    if max_cpu_millis < 500 or max_memory_bytes < 1024 * MI:
        raise ValueError("LimitRange max must be at least the default request (500m CPU, 1Gi memory)")
    return {
        "apiVersion": "v1",
        "kind": "LimitRange",
        "metadata": {"name": "training-defaults", "namespace": TRAINING_NAMESPACE, "labels": dict(MANAGED_BY)},
        "spec": {"limits": [{
            "type": "Container",
            "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
            "max": {"cpu": f"{max_cpu_millis}m", "memory": f"{max_memory_bytes // MI}Mi"},
        }]},
    }


def blocks_metadata(cloud: str) -> bool:
    """Whether training pods are kept from 169.254.169.254 (see the module docstring)."""
    return cloud != "gcp"


def render_network_policy(cloud: str) -> Optional[dict[str, Any]]:
    return render_metadata_block_policy(TRAINING_NAMESPACE, "training-egress") if blocks_metadata(cloud) else None


@dataclass
class TrainingNamespaceArgs:
    cluster: ClusterHandle
    gpu_quota: int
    cpu_quota_millis: int
    memory_quota_bytes: int
    max_container_cpu_millis: int  # the largest node's share for jobs
    max_container_memory_bytes: int


class TrainingNamespace(pulumi.ComponentResource):
    def __init__(self, name: str, args: TrainingNamespaceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:TrainingNamespace", name, None, opts)
        cluster, store = args.cluster, args.cluster.checkpoint
        self.namespace = apply_object(f"{name}-namespace", render_training_namespace(), k8s_opts(cluster, self))
        in_ns = k8s_opts(cluster, self, [self.namespace])
        pull: list[pulumi.Resource] = []
        if cluster.image_pull_config is not None:
            # A read-only run (drift.yml) holds no registry password: the state's stays (components/read_only.py).
            kept = pulumi.ResourceOptions(ignore_changes=keep_from_state(*SECRET_CONTENT))
            pull.append(apply_object(f"{name}-image-pull", render_pull_secret(PULL_SECRET),
                                     pulumi.ResourceOptions.merge(in_ns, kept),
                                     string_data={".dockerconfigjson": pulumi.Output.secret(cluster.image_pull_config)}))
        self.service_account = apply_object(
            f"{name}-service-account",
            render_training_service_account(store.service_account_annotations, PULL_SECRET if pull else None),
            k8s_opts(cluster, self, [self.namespace, *pull]))
        self.checkpoint_config = apply_object(
            f"{name}-checkpoint-config", render_checkpoint_configmap(store.url, store.env), in_ns)
        self.checkpoint_ca = (apply_object(f"{name}-checkpoint-ca", render_checkpoint_ca_configmap(store.ca_bundle), in_ns)
                              if store.ca_bundle else None)
        self.checkpoint_secret: Optional[pulumi.Resource] = None
        if store.credentials is not None:
            secret_data = pulumi.Output.secret(store.credentials)
            self.checkpoint_secret = apply_object(
                f"{name}-checkpoint-credentials", render_checkpoint_secret(None), in_ns, string_data=secret_data)
        self.quota = apply_object(f"{name}-quota", render_resource_quota(
            args.gpu_quota, args.cpu_quota_millis, args.memory_quota_bytes), in_ns)
        self.limits = apply_object(f"{name}-limits", render_limit_range(
            args.max_container_cpu_millis, args.max_container_memory_bytes), in_ns)
        policy = render_network_policy(cluster.cloud)
        self.network_policy = apply_object(f"{name}-egress", policy, in_ns) if policy else None
        self.register_outputs({"namespace": TRAINING_NAMESPACE, "serviceAccount": TRAINING_SERVICE_ACCOUNT,
                               "checkpointConfigMap": CHECKPOINT_CONFIGMAP})
