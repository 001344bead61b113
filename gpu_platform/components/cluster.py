"""The contract every cluster component fulfils, so the platform layer never asks which cloud it is on.

A cluster component (Linode kubeadm, GKE, EKS) returns a `ClusterHandle`: how to reach the cluster
(a secret kubeconfig and a Kubernetes provider built from it), its GPU pools as data (what pods need
to land on them), the default StorageClass, and the checkpoint store with what a pod needs to use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Mapping, Optional, Sequence

import pulumi

if TYPE_CHECKING:
    import pulumi_kubernetes as k8s

    # For annotations only: the node-group provider's image imports this module and carries no pydantic.
    from gpu_platform.config.kubernetes import Autoscaler

    from gpu_platform.config.model import StackConfig
    from gpu_platform.costs.catalog import Catalog

# Namespace and service account that training jobs run as; cloud IAM is bound to this identity
# (GKE Workload Identity, EKS IRSA), so both sides must agree on the names.
TRAINING_NAMESPACE = "training"
TRAINING_SERVICE_ACCOUNT = "trainer"

# What keeps cluster-autoscaler's scale-down off a node while a training pod runs there, on every cloud
# (our chart on EKS and Linode, GKE's managed autoscaler): a pod annotated safe-to-evict "false" blocks the
# removal of its node (cluster-autoscaler 1.35.2 simulator/drainability/rules/notsafetoevict, FAQ "What
# types of pods can prevent CA from removing a node?"). Without it a Job's pod is "replicated" and
# drainable: a node under the utilisation threshold (0.5 of its GPUs: one GPU of a four-GPU node) is
# drained after scale-down-unneeded-time, its running job evicted. Not a PodDisruptionBudget: that would
# also hold off the drains that give a pod its SIGTERM before a Spot reclaim (aws-node-termination-handler)
# or an upgrade, where the job should checkpoint and go.
SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
NOT_EVICTED_BY_SCALE_DOWN = {SAFE_TO_EVICT_ANNOTATION: "false"}
# Karpenter reads none of that: a pod blocks the voluntary disruption (consolidation, drift) of its node only
# with karpenter.sh/do-not-disrupt: "true" (karpenter.sh "Well-Known Annotations", GA; "Disruption", Pod-Level
# Controls). A cluster that is not the stack's own (cloud kubernetes) says which autoscaler removes its nodes
# (kubernetes.autoscaler); the clouds of this project all run cluster-autoscaler.
KARPENTER_DO_NOT_DISRUPT_ANNOTATION = "karpenter.sh/do-not-disrupt"
SCALE_DOWN_PROTECTION: Mapping[str, Mapping[str, str]] = {
    "cluster-autoscaler": NOT_EVICTED_BY_SCALE_DOWN,
    "karpenter": {KARPENTER_DO_NOT_DISRUPT_ANNOTATION: "true"},
    "none": {},  # nothing removes a node on its own: nothing to ask of a pod
}


def not_evicted_by_scale_down(autoscaler: Autoscaler) -> dict[str, str]:
    """The pod annotations that keep `autoscaler` from removing the node a training pod runs on."""
    return dict(SCALE_DOWN_PROTECTION[autoscaler])


# Which GPU pods the platform's GPU pod policy (platform/queue.py render_gpu_admission_policy) judges. "cluster":
# every namespace's, on a cluster the stack creates, where nothing but the platform asks for GPUs and a GPU pod
# outside the queue takes a GPU Kueue counts free. "queue-namespaces": only the namespaces the platform labels for
# its queue (queue.QUEUE_NAMESPACE_SELECTOR), on a cluster another team runs (cloud kubernetes): its other
# tenants' GPU Deployments and a preinstalled GPU operator's validator pod are theirs, not the platform's to refuse.
GpuPodScope = Literal["cluster", "queue-namespaces"]

# The private subnet (hence the zone) of an EKS node in an existing VPC, whose zones the config knows only as
# its subnets ("subnet1", ...): every system and GPU node group is one subnet and labels its nodes with it,
# so notebooks can be held where every GPU profile reaches, as zone names do in a new VPC.
SUBNET_LABEL = "gpu-platform.io/subnet"

# Label every GPU node carries with its pool name, on every cloud.
POOL_LABEL = "gpu-platform.io/pool"
# Label the untainted CPU (system) nodes carry on every cloud (GKE system pool, EKS system node groups,
# Linode's system workers): platform controllers run there, and so does CPU-only queued work.
SYSTEM_NODE_LABELS = {"gpu-platform.io/role": "system"}

# A pod sees only the GPUs it was allocated, on the clouds where the NVIDIA container toolkit injects
# them (Linode, EKS). By default the toolkit's runtime hook takes the device list from the container's
# NVIDIA_VISIBLE_DEVICES even in an unprivileged container (config accept-nvidia-visible-devices-envvar-
# when-unprivileged, default true: nvidia-container-toolkit api/config/v1/config.go), and the NVIDIA
# device plugin passes its allocation the same way (DEVICE_LIST_STRATEGY envvar, its default): a pod
# that sets NVIDIA_VISIBLE_DEVICES=all itself (CUDA images do) saw every GPU of the node whatever it
# requested. NVIDIA's fix, both halves: the device plugin passes the allocation as volume mounts
# (/dev/null at /var/run/nvidia-container-devices/<id>: k8s-device-plugin v0.20.0 internal/plugin/server.go
# updateResponseForDeviceMounts; README "DEVICE_LIST_STRATEGY"), which no pod spec can forge, and the
# toolkit reads the list only from there and ignores the variable in unprivileged containers
# (v1.17.8 cmd/nvidia-container-runtime-hook/container_config.go getDevices). GKE runs neither: its
# own device plugin hands a container the device nodes of its allocation, and nothing reads the variable.
DEVICE_LIST_STRATEGY = "volume-mounts"
TOOLKIT_ISOLATION_SETTINGS = (("accept-nvidia-visible-devices-envvar-when-unprivileged", "false"),
                              ("accept-nvidia-visible-devices-as-volume-mounts", "true"))


def toolkit_isolation_command() -> str:
    """The shell command that writes TOOLKIT_ISOLATION_SETTINGS into the node's toolkit config
    (/etc/nvidia-container-runtime/config.toml; `nvidia-ctk config --in-place --set key=value`, v1.17.8
    cmd/nvidia-ctk/config). The runtime hook reads the file at each container start: no restart."""
    return "nvidia-ctk config --in-place " + " ".join(f"--set {k}={v}" for k, v in TOOLKIT_ISOLATION_SETTINGS)


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def as_k8s(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}

    def toleration(self) -> dict[str, str]:
        return {"key": self.key, "operator": "Equal", "value": self.value, "effect": self.effect}


# Only pods that tolerate this land on GPU nodes: an idle GPU is the most expensive thing we run.
GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@dataclass(frozen=True)
class GpuPoolSpec:
    """A GPU node pool as the platform layer sees it."""

    name: str
    instance_type: str
    gpu_model: str
    gpus_per_node: int
    min_nodes: int
    max_nodes: int
    capacity: str  # spot | preemptible | on-demand
    node_labels: Mapping[str, str]
    taints: Sequence[Taint] = (GPU_TAINT,)
    # The zones its nodes can be in (their topology.kubernetes.io/zone); empty: not known (Linode has
    # no zones; an existing AWS VPC's subnets are known by id only).
    zones: tuple[str, ...] = ()

    @property
    def max_gpus(self) -> int:
        return self.max_nodes * self.gpus_per_node

    @property
    def node_selector(self) -> dict[str, str]:
        return {POOL_LABEL: self.name}

    def tolerations(self) -> list[dict[str, str]]:
        return [t.toleration() for t in self.taints]


@dataclass(frozen=True)
class SystemPoolSpec:
    """The CPU pool of system nodes as the platform layer sees it: its instance type and total size."""

    instance_type: str
    min_nodes: int
    max_nodes: int

    @property
    def node_labels(self) -> dict[str, str]:
        return dict(SYSTEM_NODE_LABELS)


# Where a training pod finds the certificates the checkpoint store's TLS certificate chains to, when the store has
# a private CA (cloud kubernetes: kubernetes.checkpointStore.caBundle): ConfigMap training/checkpoint-ca, key
# CHECKPOINT_CA_KEY, mounted by the torch-checkpointed runtime at CHECKPOINT_CA_DIR; the store's env names the file in
# AWS_CA_BUNDLE, which botocore (and s3fs through aiobotocore) reads as its `ca_bundle` (botocore configprovider.py).
CHECKPOINT_CA_CONFIGMAP = "checkpoint-ca"
CHECKPOINT_CA_KEY = "ca-bundle.pem"
CHECKPOINT_CA_DIR = "/etc/gpu-platform/checkpoint-ca"
CHECKPOINT_CA_PATH = f"{CHECKPOINT_CA_DIR}/{CHECKPOINT_CA_KEY}"


@dataclass(frozen=True)
class CheckpointStore:
    """Where training writes checkpoints and how a pod in the training namespace reaches it.

    url: bucket URL (s3://…, gs://…); None where the cluster has no checkpoint store (cloud kubernetes without
    kubernetes.checkpointStore: pods get no CHECKPOINT_URL). service_account_annotations: put on the training
    service account (IRSA role ARN, GKE Workload Identity). env: plain environment for pods (endpoint,
    region, AWS_CA_BUNDLE). credentials: secret environment (e.g. S3 keys on Linode), None where identity-based.
    ca_bundle: PEM certificates of the store's private CA (None: the image's trust store), put in ConfigMap
    CHECKPOINT_CA_CONFIGMAP and mounted at CHECKPOINT_CA_PATH.
    """

    url: Optional[pulumi.Input[str]]
    service_account_annotations: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    env: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    credentials: Optional[pulumi.Output[Mapping[str, str]]] = None
    ca_bundle: Optional[str] = None


@dataclass(frozen=True)
class ClusterHandle:
    cloud: str
    name: str
    kubeconfig: pulumi.Output[str]  # always a secret
    provider: "k8s.Provider"
    gpu_pools: Sequence[GpuPoolSpec]
    default_storage_class: str
    checkpoint: CheckpointStore
    # True where the cloud or the cluster component already runs the NVIDIA device plugin (GKE).
    gpu_device_plugin_installed: bool
    # Resources the platform must wait for (CNI, CSI, a reachable API server).
    ready: Sequence[pulumi.Resource] = ()
    endpoint: Optional[pulumi.Output[str]] = None
    # The zones the system (non-GPU) nodes can be in; empty: not known or no zones.
    system_zones: tuple[str, ...] = ()
    # The node label whose values system_zones and GpuPoolSpec.zones are: the zone itself, or, on an
    # existing AWS VPC whose subnets' zones are not known by name, SUBNET_LABEL (one value per subnet).
    zone_label: str = "topology.kubernetes.io/zone"
    # PrometheusRules the cluster component asks the platform's monitoring to apply (metadata without a
    # namespace), e.g. Linode's API-token expiry alert.
    alert_rules: Sequence[Mapping[str, Any]] = ()
    # The system (CPU) pool: the job queue gives CPU-only work a flavor there. None: not known.
    system_pool: Optional[SystemPoolSpec] = None
    # Where the pools' instance types are sized and priced: the stack's own node types on a cluster the stack does
    # not create (cloud kubernetes, with their prices or none). None: the price catalog (with priceOverrides).
    catalog: Optional["Catalog"] = None
    # Minutes from a scale-up to a schedulable GPU node, where the stack states it (cloud kubernetes); None: the
    # cloud's figure (gpu_platform/costs/node_boot.py).
    node_boot_minutes: Optional[float] = None
    # How long a new node of an autoscaled GPU pool has to register before the autoscaler gives it up (its
    # --max-node-provision-time, where the program sets it: linode.nodeGroups.joinDeadlineMinutes). Kueue's
    # waitForPodsReady timeout outlasts it (platform/queue.py pods_ready_timeouts). None: the program sets none.
    node_join_deadline_minutes: Optional[float] = None
    # A host folder whose *.prom files node-exporter's textfile collector reads (node-level metrics the
    # cluster's own scripts write, e.g. Linode's etcd snapshots). None: the collector stays off.
    node_textfile_dir: Optional[str] = None
    # The example training image by digest (components/images.py training_image), the stack output
    # trainingImage. None: not built and none published.
    training_image: Optional[pulumi.Output[str]] = None
    # A kubernetes.io/dockerconfigjson document (a secret) pods in the training namespace pull the stack's
    # images with, where the nodes cannot pull from the registry on their own identity (linode.imageRegistry).
    image_pull_config: Optional[pulumi.Output[str]] = None
    # What removes idle nodes (SCALE_DOWN_PROTECTION: the annotation a training pod carries to keep its node).
    autoscaler: Autoscaler = "cluster-autoscaler"
    # Which GPU pods the GPU pod policy judges (GpuPodScope): every namespace's on a cluster the stack creates.
    gpu_pod_scope: GpuPodScope = "cluster"

    @property
    def max_gpus(self) -> int:
        return sum(p.max_gpus for p in self.gpu_pools)


# The tag (label) naming the stack's cluster: the AWS stack budget counts only costs carrying it
# (aws/billing.py, `user:cluster$<name>`), so a team's own resources labelled with common_labels count too.
CLUSTER_LABEL = "cluster"


def common_labels(cfg: "StackConfig") -> dict[str, str]:
    """Owner/cost labels for every billable resource, a team's own included (keys valid as GCP labels, AWS and
    k8s tags; the `cluster` value, gpu-<environment>[-<nameSuffix>], is lowercase and at most 41 characters,
    within GCP's 63 for a label value; config/names.py checks it per cloud)."""
    return {
        "owner": cfg.owner,
        "cost-center": cfg.cost_center,
        "environment": cfg.environment,
        "managed-by": "pulumi",
        "app": "gpu-platform",
        CLUSTER_LABEL: cfg.name_prefix,
    }


def gpu_pool_specs(cfg: "StackConfig", extra_labels: Optional[Mapping[str, Mapping[str, str]]] = None) -> list[GpuPoolSpec]:
    """GpuPoolSpecs from the config and the catalog (GPUs per node, GPU model): the stack's catalog, which on cloud
    kubernetes holds its own node types (that cloud's component adds taints and zones: components/kubernetes)."""
    catalog = cfg.stack_catalog()
    specs = []
    for pool in cfg.gpu_pools:
        itype = catalog.instance(cfg.cloud, pool.instance_type)
        assert itype is not None, "validated by gpu_platform.config.stack"
        labels = {**pool.labels, POOL_LABEL: pool.name, "nvidia.com/gpu.present": "true"}
        labels.update((extra_labels or {}).get(pool.name, {}))
        specs.append(GpuPoolSpec(
            name=pool.name,
            instance_type=pool.instance_type,
            gpu_model=itype.gpu_model or "unknown",
            gpus_per_node=itype.gpus,
            min_nodes=pool.min_nodes,
            max_nodes=pool.max_nodes,
            capacity=pool.capacity,
            node_labels=labels,
        ))
    return specs
