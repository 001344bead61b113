"""The provider's configuration: what the Pulumi program renders into the `linode-node-groups`
ConfigMap (gpu_platform/components/linode/node_groups.py, `pools.json`) plus the deploy-time values it
passes as environment variables. Join material is never part of it: it is minted per node (service.py).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional

# Tags that find the service's instances again after a restart (Linode tags are free-form strings).
STACK_TAG = "node-group-stack:{}"
POOL_TAG = "node-group:{}"
# joinBackstopSeconds when pools.json (a program's before it) does not say: the program's own value,
# components/linode/node_groups.py JOIN_BACKSTOP_SECONDS.
DEFAULT_JOIN_BACKSTOP_SECONDS = 300


class SettingsError(ValueError):
    pass


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class EphemeralStorage:
    """What the kubelet of every node keeps of its root filesystem (kubeReserved + systemReserved
    ephemeral-storage, evictionHard nodefs.available) and the swap disk Linode carves out of the plan's
    disk: the template node's ephemeral-storage is the plan's disk less these."""

    reserved_bytes: int
    eviction_percent: float
    swap_mib: int


@dataclass(frozen=True)
class Pool:
    name: str
    instance_type: str
    min_nodes: int
    max_nodes: int
    gpus_per_node: int
    gpu_type: str  # the value of the GPU label on this pool's nodes
    addresses: tuple[str, ...]  # one fixed VPC address per slot (label <cluster>-<pool>-<slot>)
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    capacity: Mapping[str, str]  # Kubernetes quantities: cpu, memory, pods, nvidia.com/gpu
    allocatable: Mapping[str, str]
    hourly_price_usd: float
    tags: tuple[str, ...]  # extra Linode tags (role, pool, capacity, approval)


@dataclass(frozen=True)
class Settings:
    cluster: str  # the stack's name prefix: instance labels and the stack tag
    region: str
    image: str
    kubernetes_minor: str
    control_plane_endpoint: str
    pod_cidr: str
    service_cidr: str
    max_gpus: int  # the policy pack's gpu-count-ceiling maxGpus, over every pool
    join_deadline_seconds: int  # the autoscaler's --max-node-provision-time (and the bootstrap token's life)
    gpu_label: str
    pools: tuple[Pool, ...]
    tags: tuple[str, ...] = ()
    # None: pools.json of a program before it (the template then offers no ephemeral storage)
    ephemeral_storage: Optional[EphemeralStorage] = None
    disk_encryption: bool = True
    authorized_keys: tuple[str, ...] = ()
    # GPUs of the stack's fixed pools (the program's own instances, always there): they count against
    # max_gpus with the provider's.
    fixed_gpus: int = 0
    # How long after the join deadline the provider deletes an instance that never registered itself: a
    # backstop for when the autoscaler is away. The autoscaler must time the scale-up out and remove the
    # instance first (it backs the group off only then); see components/linode/node_groups.py JOIN_BACKSTOP_SECONDS.
    join_backstop_seconds: int = DEFAULT_JOIN_BACKSTOP_SECONDS
    # Deploy-time (environment): resources the program creates.
    firewall_id: Optional[int] = None
    subnet_id: Optional[int] = None

    def pool(self, name: str) -> Pool:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(name)

    @property
    def stack_tag(self) -> str:
        return STACK_TAG.format(self.cluster)


def _seconds(doc: Mapping[str, Any], key: str, default: int) -> int:
    value = doc.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SettingsError(f"pools.json: {key} must be a whole number of seconds >= 0, got {value!r}")
    return value


def _req(doc: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in doc:
        raise SettingsError(f"{where}: missing key {key!r}")
    return doc[key]


def parse(doc: Mapping[str, Any], env: Mapping[str, str] = {}) -> Settings:
    pools = []
    for i, p in enumerate(_req(doc, "pools", "pools.json")):
        where = f"pools.json pools[{i}]"
        pool = Pool(
            name=str(_req(p, "name", where)), instance_type=str(_req(p, "instanceType", where)),
            min_nodes=int(_req(p, "minNodes", where)), max_nodes=int(_req(p, "maxNodes", where)),
            gpus_per_node=int(_req(p, "gpusPerNode", where)), gpu_type=str(_req(p, "gpuType", where)),
            addresses=tuple(_req(p, "addresses", where)), labels=dict(_req(p, "labels", where)),
            taints=tuple(Taint(**t) for t in _req(p, "taints", where)),
            capacity=dict(_req(p, "capacity", where)), allocatable=dict(_req(p, "allocatable", where)),
            hourly_price_usd=float(p.get("hourlyPriceUsd", 0.0)), tags=tuple(p.get("tags", ())))
        if not 0 <= pool.min_nodes <= pool.max_nodes <= len(pool.addresses):
            raise SettingsError(f"{where}: need 0 <= minNodes <= maxNodes <= {len(pool.addresses)} addresses")
        pools.append(pool)
    eph = doc.get("ephemeralStorage")
    ephemeral = None
    if eph is not None:
        where = "pools.json ephemeralStorage"
        ephemeral = EphemeralStorage(int(_req(eph, "reservedBytes", where)), float(_req(eph, "evictionPercent", where)),
                                     int(_req(eph, "swapMib", where)))
    fw, subnet = env.get("LINODE_FIREWALL_ID"), env.get("LINODE_SUBNET_ID")
    return Settings(
        cluster=str(_req(doc, "cluster", "pools.json")), region=str(_req(doc, "region", "pools.json")),
        image=str(_req(doc, "image", "pools.json")), kubernetes_minor=str(_req(doc, "kubernetesMinor", "pools.json")),
        control_plane_endpoint=str(env.get("CONTROL_PLANE_ENDPOINT") or _req(doc, "controlPlaneEndpoint", "pools.json")),
        pod_cidr=str(_req(doc, "podCidr", "pools.json")), service_cidr=str(_req(doc, "serviceCidr", "pools.json")),
        max_gpus=int(_req(doc, "maxGpus", "pools.json")),
        join_deadline_seconds=int(_req(doc, "joinDeadlineSeconds", "pools.json")),
        gpu_label=str(_req(doc, "gpuLabel", "pools.json")), pools=tuple(pools), tags=tuple(doc.get("tags", ())),
        ephemeral_storage=ephemeral,
        disk_encryption=bool(doc.get("diskEncryption", True)), authorized_keys=tuple(doc.get("authorizedKeys", ())),
        fixed_gpus=int(doc.get("fixedGpus", 0)),
        join_backstop_seconds=_seconds(doc, "joinBackstopSeconds", DEFAULT_JOIN_BACKSTOP_SECONDS),
        firewall_id=int(fw) if fw else None, subnet_id=int(subnet) if subnet else None)


def load(path: str, env: Optional[Mapping[str, str]] = None) -> Settings:
    with open(path, encoding="utf-8") as f:
        return parse(json.load(f), os.environ if env is None else env)
