"""Node allocatable per cloud: what the scheduler can hand to pods on one node of an instance type.

allocatable = capacity (catalog vCPUs / memory / GPUs) - kube-reserved - system-reserved - hard eviction
threshold (memory), pods = the kubelet's maxPods. Each cloud's formula below names its source. The
catalog's memory is the plan's nominal size; the kernel reports a little less as MemTotal (kubelet
capacity), so these figures are an upper bound by a few percent: quotas and checks built on them
must leave headroom, never plan to the last MiB.

Used by the program (Kueue quotas from allocatable, not nominal size) and by preflight's cluster-fit
checks; nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Optional

from gpu_platform.data import linode_kubelet
from gpu_platform.data.quantity import cpu_millis, memory_bytes, parse_quantity  # noqa: F401 (re-exported)

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import Catalog

MI = 1024 ** 2
GI = 1024 ** 3

# kubelet's built-in defaults (KubeletConfiguration v1beta1: maxPods 110; evictionHard
# memory.available "100Mi"), https://kubernetes.io/docs/reference/config-api/kubelet-config.v1beta1/
KUBELET_DEFAULT_MAX_PODS = 110
KUBELET_DEFAULT_EVICTION_MEMORY = "100Mi"


@dataclass(frozen=True)
class Allocatable:
    cpu_millis: int
    memory_bytes: int
    gpus: int
    pods: int

    def __str__(self) -> str:
        return f"{self.cpu_millis}m CPU, {self.memory_bytes / GI:.1f} GiB, {self.gpus} GPU, {self.pods} pods"


class CapacityError(ValueError):
    """An instance type the catalog does not know, or a cloud without a formula."""


# ---------------------------------------------------------------------------------------------
# The tiered reservations GKE documents and nodeadm implements
# ---------------------------------------------------------------------------------------------

# (upper bound of the tier in millicores, per-10000 of that tier reserved). GKE "Plan GKE Standard node
# sizes", CPU reservations: 6 % of the first core, 1 % of the next, 0.5 % of the next 2, 0.25 % above 4
# (https://cloud.google.com/kubernetes-engine/docs/concepts/plan-node-sizes#memory_cpu). nodeadm
# (awslabs/amazon-eks-ami nodeadm/internal/kubelet/config.go getCPUMillicoresToReserve, commit 81fec2e,
# 2026-07-23) uses the same tiers with integer millicores per tier; both clouds use this function.
_CPU_TIERS = ((1000, 600), (2000, 100), (4000, 50), (None, 25))


def tiered_cpu_reserved_millis(vcpus: int) -> int:
    total = vcpus * 1000
    reserved, start = 0, 0
    for end, per10k in _CPU_TIERS:
        top = total if end is None else min(total, end)
        if top > start:
            reserved += (top - start) * per10k // 10000
        if end is None or total <= end:
            break
        start = end
    return reserved


# GKE memory reservations (same page): 255 MiB on machines under 1 GiB; else 25 % of the first 4 GiB,
# 20 % of the next 4, 10 % of the next 8, 6 % of the next 112, 2 % above 128 GiB; plus the 100 MiB
# hard eviction threshold.
_GKE_MEMORY_TIERS = ((4 * GI, 25), (8 * GI, 20), (16 * GI, 10), (128 * GI, 6), (None, 2))
GKE_EVICTION_MEMORY = 100 * MI
GKE_MAX_PODS = 110  # GKE Standard's default maximum Pods per node (--default-max-pods-per-node 110)


def gke_memory_reserved_bytes(memory: int) -> int:
    if memory < GI:
        return 255 * MI
    reserved, start = 0, 0
    for end, pct in _GKE_MEMORY_TIERS:
        top = memory if end is None else min(memory, end)
        if top > start:
            reserved += (top - start) * pct // 100
        if end is None or memory <= end:
            break
        start = end
    return reserved


# ---------------------------------------------------------------------------------------------
# EKS (AL2023, nodeadm)
# ---------------------------------------------------------------------------------------------

# (ENIs on the default network card, IPv4 addresses per ENI) for the catalog's AWS types, from
# nodeadm's embedded nodeadm/internal/kubelet/instance-info.jsonl (awslabs/amazon-eks-ami commit
# 81fec2e, 2026-07-23); p3.* are no longer in that file and come from its former eni-max-pods.txt
# (commit 6826d21^, 2025-10: p3.2xlarge 58, p3.8xlarge/16xlarge 234 = 4x15 / 8x30).
EKS_ENI = {
    "m6i.large": (3, 10), "m6i.xlarge": (4, 15), "m6i.2xlarge": (4, 15),
    "m7i.large": (3, 10), "m7i.xlarge": (4, 15), "m7i.2xlarge": (4, 15),
    "g5.xlarge": (4, 15), "g5.2xlarge": (4, 15), "g5.4xlarge": (8, 30), "g5.8xlarge": (8, 30),
    "g5.12xlarge": (15, 50), "g5.16xlarge": (8, 30), "g5.24xlarge": (15, 50), "g5.48xlarge": (7, 50),
    "g6.xlarge": (4, 15), "g6.2xlarge": (4, 15), "g6.4xlarge": (8, 30), "g6.8xlarge": (8, 30),
    "g6.12xlarge": (8, 30), "g6.16xlarge": (15, 50), "g6.24xlarge": (15, 50), "g6.48xlarge": (15, 50),
    "g6e.xlarge": (4, 15), "g6e.2xlarge": (4, 15), "g6e.4xlarge": (8, 30), "g6e.8xlarge": (8, 30),
    "g6e.12xlarge": (10, 30), "g6e.16xlarge": (15, 50), "g6e.24xlarge": (10, 50), "g6e.48xlarge": (10, 50),
    "p3.2xlarge": (4, 15), "p3.8xlarge": (8, 30), "p3.16xlarge": (8, 30),
    "p3dn.24xlarge": (15, 50), "p4d.24xlarge": (15, 50), "p5.48xlarge": (2, 50),
}
EKS_EVICTION_MEMORY = 100 * MI  # nodeadm default evictionHard memory.available "100Mi"


def eks_max_pods(instance_type: str, vcpus: int, managed_node_group: bool) -> int:
    """nodeadm's default: ENIs x (IPv4 per ENI - 1) + 2 (no prefix delegation: the vpc-cni add-on runs
    with its defaults). Managed node groups without a custom AMI cap it at 110 below 30 vCPUs and 250
    above (EKS User Guide, "Choose an optimal Amazon EC2 node instance type", How maxPods is determined).
    Self-managed nodes (our GPU Auto Scaling Groups) get the uncapped value."""
    if instance_type not in EKS_ENI:
        raise CapacityError(f"aws/{instance_type}: no ENI data for the max-pods formula (add it to EKS_ENI "
                            "from nodeadm's instance-info.jsonl)")
    enis, ips = EKS_ENI[instance_type]
    pods = enis * (ips - 1) + 2
    if managed_node_group:
        pods = min(pods, 110 if vcpus < 30 else 250)
    return pods


def eks_memory_reserved_bytes(max_pods: int) -> int:
    """nodeadm getMemoryMebibytesToReserve: kube-reserved memory = 11 MiB x maxPods + 255 MiB."""
    return (11 * max_pods + 255) * MI


# ---------------------------------------------------------------------------------------------
# Linode (kubeadm): whatever our KubeletConfiguration reserves
# ---------------------------------------------------------------------------------------------


def linode_kubelet_reservations() -> tuple[dict, dict, Optional[dict], int]:
    """(kubeReserved, systemReserved, evictionHard or None, maxPods) from gpu_platform/data/linode_kubelet.py,
    which the Linode renderer writes into the kubelet configuration. A kubelet with no evictionHard keeps its
    default memory.available 100Mi; one that sets evictionHard without memory.available has none."""
    return (dict(getattr(linode_kubelet, "KUBE_RESERVED", {}) or {}),
            dict(getattr(linode_kubelet, "SYSTEM_RESERVED", {}) or {}),
            getattr(linode_kubelet, "EVICTION_HARD", None),
            int(getattr(linode_kubelet, "MAX_PODS", KUBELET_DEFAULT_MAX_PODS)))


def linode_ephemeral_storage_reservation() -> dict:
    """What a Linode node keeps of its plan's disk from pods (pools.json `ephemeralStorage`; the node-group
    provider subtracts it from the disk the Linode API gives for the plan): kubeReserved + systemReserved
    ephemeral-storage (plus an absolute evictionHard nodefs.available), the evictionHard nodefs.available
    percentage of the filesystem, and the swap disk Linode makes beside the root disk."""
    kube, system, eviction, _ = linode_kubelet_reservations()
    reserved = sum(memory_bytes(r["ephemeral-storage"]) for r in (kube, system) if "ephemeral-storage" in r)
    threshold = str((eviction or {}).get("nodefs.available", "10%" if eviction is None else "0%"))
    percent = 0.0
    if threshold.endswith("%"):
        percent = float(Decimal(threshold[:-1]))
    else:
        reserved += memory_bytes(threshold)
    return {"reservedBytes": reserved, "evictionPercent": percent,
            "swapMib": int(getattr(linode_kubelet, "DEFAULT_SWAP_MIB", 0))}


def _linode(vcpus: int, memory: int, gpus: int) -> Allocatable:
    kube, system, eviction, max_pods = linode_kubelet_reservations()
    cpu = vcpus * 1000 - sum(cpu_millis(r["cpu"]) for r in (kube, system) if "cpu" in r)
    mem = memory - sum(memory_bytes(r["memory"]) for r in (kube, system) if "memory" in r)
    threshold = KUBELET_DEFAULT_EVICTION_MEMORY if eviction is None else eviction.get("memory.available")
    if threshold is not None:
        if str(threshold).endswith("%"):
            mem -= memory * int(Decimal(str(threshold)[:-1]) * 100) // 10000
        else:
            mem -= memory_bytes(threshold)
    return Allocatable(cpu, mem, gpus, max_pods)


# ---------------------------------------------------------------------------------------------
# A cluster the stack does not create (cloud kubernetes): what the stack file states
# ---------------------------------------------------------------------------------------------


def _own_node(vcpus: int, memory: int, gpus: int, stated: "Optional[dict]") -> Allocatable:
    """A node type of the stack's own (kubernetes.nodeTypes): its `allocatable` as the stack file copies it from
    `kubectl get node`, or, not given, the kubelet's defaults: no kube/system reservation, the hard eviction
    threshold memory.available 100Mi, maxPods 110 (KubeletConfiguration v1beta1 defaults; an upper bound, and the
    config warns so)."""
    if stated:
        return Allocatable(cpu_millis(stated["cpu"]), memory_bytes(stated["memory"]), gpus,
                           int(stated.get("pods", KUBELET_DEFAULT_MAX_PODS)))
    return Allocatable(vcpus * 1000, memory - memory_bytes(KUBELET_DEFAULT_EVICTION_MEMORY), gpus,
                       KUBELET_DEFAULT_MAX_PODS)


# ---------------------------------------------------------------------------------------------
# The entry point
# ---------------------------------------------------------------------------------------------


def allocatable(cloud: str, instance_type: str, catalog: Optional["Catalog"] = None, *,
                managed_node_group: bool = False) -> Allocatable:
    """Allocatable of one node of `instance_type` on `cloud` (linode | gcp | aws).

    managed_node_group (aws only): the EKS managed node group's maxPods cap applies (system nodes);
    False for self-managed nodes (the GPU Auto Scaling Groups)."""
    if catalog is None:
        from gpu_platform.costs.catalog import load_catalog

        catalog = load_catalog()
    itype = catalog.instance(cloud, instance_type)
    if itype is None:
        if cloud == "kubernetes":
            raise CapacityError(f"kubernetes/{instance_type}: not a node type of the stack (kubernetes.nodeTypes)")
        raise CapacityError(f"{cloud}/{instance_type}: not in the price catalog (gpu_platform/costs/catalog/{cloud}.yaml)")
    memory = int(Decimal(str(itype.memory_gib)) * GI)
    if cloud == "kubernetes":
        return _own_node(itype.vcpus, memory, itype.gpus, itype.allocatable)
    if cloud == "gcp":
        cpu = itype.vcpus * 1000 - tiered_cpu_reserved_millis(itype.vcpus)
        mem = memory - gke_memory_reserved_bytes(memory) - GKE_EVICTION_MEMORY
        return Allocatable(cpu, mem, itype.gpus, GKE_MAX_PODS)
    if cloud == "aws":
        pods = eks_max_pods(instance_type, itype.vcpus, managed_node_group)
        cpu = itype.vcpus * 1000 - tiered_cpu_reserved_millis(itype.vcpus)
        mem = memory - eks_memory_reserved_bytes(pods) - EKS_EVICTION_MEMORY
        return Allocatable(cpu, mem, itype.gpus, pods)
    if cloud == "linode":
        return _linode(itype.vcpus, memory, itype.gpus)
    raise CapacityError(f"no allocatable formula for cloud {cloud!r} (linode, gcp, aws, kubernetes)")


def scale(a: Allocatable, nodes: int) -> Allocatable:
    """What `nodes` such nodes offer together (quota maths)."""
    return Allocatable(a.cpu_millis * nodes, a.memory_bytes * nodes, a.gpus * nodes, a.pods * nodes)
