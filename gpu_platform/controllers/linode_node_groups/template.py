"""The template node of a pool, for cluster-autoscaler's scale-up from zero: a v1.Node as if just
started, protobuf-serialized the way the autoscaler reads it (externalgrpc.proto
NodeGroupTemplateNodeInfoResponse.nodeBytes, decoded with v1.Node#Unmarshal in
cloudprovider/externalgrpc/externalgrpc_node_group.go).

What the autoscaler's simulation needs from it: the labels and taints a new node registers with
(the kubelet's node-labels and kubeadm's JoinConfiguration taints rendered by
gpu_platform/components/linode/render.py), and capacity/allocatable with the GPUs as nvidia.com/gpu
(what the NVIDIA device plugin advertises) - from gpu_platform/components/capacity.py via pools.json -
and ephemeral-storage: the plan's disk (the Linode API's `disk` of the instance type, read by the
provider) less the swap disk and what the kubelet reserves. Without it a pod asking any ephemeral storage
(Katib's metrics collector asks 500Mi) never fits the template, and the pool never leaves zero for it.
"""

from __future__ import annotations

from types import ModuleType

from typing import Optional

from gpu_platform.controllers.linode_node_groups.settings import EphemeralStorage, Pool, Settings

GPU_RESOURCE = "nvidia.com/gpu"
MIB = 1024 * 1024


def ephemeral_storage(disk_mib: int, reservation: EphemeralStorage) -> tuple[int, int]:
    """(capacity, allocatable) bytes of ephemeral storage of a node whose plan has `disk_mib` MB of disk:
    the root filesystem is the plan's disk less the swap disk (Linode creates both from an image);
    allocatable is that less kubeReserved + systemReserved and the evictionHard nodefs.available share
    (the kubelet's Node Allocatable)."""
    capacity = (int(disk_mib) - reservation.swap_mib) * MIB
    allocatable = capacity - reservation.reserved_bytes - int(capacity * reservation.eviction_percent / 100)
    return capacity, max(0, allocatable)


def template_labels(settings: Settings, pool: Pool, node_name: str) -> dict[str, str]:
    """The labels a node of the pool carries once registered: its kubelet node-labels plus the
    well-known ones the kubelet and the Linode CCM set."""
    return {
        **pool.labels,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": node_name,
        "node.kubernetes.io/instance-type": pool.instance_type,
        "topology.kubernetes.io/region": settings.region,
    }


def template_node(core: ModuleType, settings: Settings, pool: Pool, disk_mib: Optional[int] = None) -> "object":
    """A k8s.io.api.core.v1.Node message (core = the generated core/v1 module); `disk_mib`: the plan's disk
    (the Linode API's), for its ephemeral-storage."""
    name = f"{settings.cluster}-{pool.name}-template"
    node = core.Node()
    node.metadata.name = name
    for k, v in sorted(template_labels(settings, pool, name).items()):
        node.metadata.labels[k] = v
    for t in pool.taints:
        node.spec.taints.add(key=t.key, value=t.value, effect=t.effect)
    for k, v in pool.capacity.items():
        node.status.capacity[k].string = v
    for k, v in pool.allocatable.items():
        node.status.allocatable[k].string = v
    if disk_mib is not None and settings.ephemeral_storage is not None:
        capacity, allocatable = ephemeral_storage(disk_mib, settings.ephemeral_storage)
        node.status.capacity["ephemeral-storage"].string = str(capacity)
        node.status.allocatable["ephemeral-storage"].string = str(allocatable)
    node.status.conditions.add(type="Ready", status="True", reason="KubeletReady")
    node.status.nodeInfo.operatingSystem = "linux"
    node.status.nodeInfo.architecture = "amd64"
    return node


def template_node_bytes(core: ModuleType, settings: Settings, pool: Pool, disk_mib: Optional[int] = None) -> bytes:
    return template_node(core, settings, pool, disk_mib).SerializeToString()
