"""The cluster-fit node model: every node group of a stack with what the scheduler sees on its nodes.

Built by `gpu_platform.preflight.fit.nodes.cluster_model` from the stack config and the mocked plan; read by
`gpu_platform.preflight.fit.checks`. Plain data, no Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from gpu_platform.components.capacity import Allocatable

ROLES = ("control-plane", "system", "gpu")


@dataclass(frozen=True, eq=False)
class NodeGroup:
    name: str
    role: str  # control-plane | system | gpu
    min_nodes: int
    max_nodes: int
    labels: dict[str, str]  # every label a node of the group carries (ours, the cloud's, well-known ones)
    taints: list[dict]  # Kubernetes form: {key, value?, effect}
    allocatable: Allocatable  # per node (the smallest instance type where a group mixes several)
    instance_type: str  # "g5.xlarge" or "g5.xlarge|g6.xlarge" for a mixed-instances group
    capacity: str  # on-demand | spot | preemptible
    # Why the group cannot grow to its configured maximum as deployed (max_nodes is then what it can reach):
    # e.g. an autoscaled Linode pool with no node-group provider in the plan stays at minNodes.
    capped: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"node group {self.name}: role {self.role!r} not one of {ROLES}")
        if not 0 <= self.min_nodes <= self.max_nodes:
            raise ValueError(f"node group {self.name}: min {self.min_nodes} / max {self.max_nodes}")

    @property
    def zone(self) -> Optional[str]:
        """The zone of a group that lives in one (EKS and GKE: one group per pool and zone, config/names.zonal_groups);
        in an existing AWS VPC, whose zones are known only as its subnets, the subnet (gpu-platform.io/subnet)."""
        return self.labels.get("topology.kubernetes.io/zone") or self.labels.get("gpu-platform.io/subnet")

    @property
    def key(self) -> str:
        """What tells this group apart in a report: its name, and its zone where a pool has one group per
        zone (the zonal groups of a pool share the name)."""
        return f"{self.name}/{self.zone}" if self.zone else self.name

    def to_json(self) -> dict[str, Any]:
        a = self.allocatable
        return {"name": self.name, "role": self.role, "minNodes": self.min_nodes, "maxNodes": self.max_nodes,
                "labels": dict(self.labels), "taints": list(self.taints), "instanceType": self.instance_type,
                "capacity": self.capacity,
                "allocatable": {"cpuMillis": a.cpu_millis, "memoryBytes": a.memory_bytes, "gpus": a.gpus, "pods": a.pods}}


@dataclass(frozen=True)
class NetworkModel:
    """How the cluster's network enforces NetworkPolicies, and where what is not a pod lives: read by the
    flow check (gpu_platform.preflight.fit.flows)."""
    dataplane: str  # cilium | gke-dataplane-v2 | calico | aws-vpc-cni | other-upstream | none
    description: str  # what enforces policies, with its source
    pod_cidrs: tuple[str, ...]  # where pods get their addresses
    node_cidrs: tuple[str, ...]  # where nodes (and hostNetwork pods) get theirs
    apiserver_cidrs: tuple[str, ...]  # the address(es) pods reach the API server at, after the Service
    apiserver_port: int
    apiserver_on_nodes: bool  # the API server runs on cluster nodes (kubeadm) rather than outside them
    # Cilium's policy-cidr-match-mode and enable-policy as the stack file states them (cloud kubernetes: the
    # cluster's own agent); None: read from the rendered cilium-config (Linode installs the chart itself).
    cilium_cidr_match_mode: Optional[tuple[str, ...]] = None
    cilium_enable_policy: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        out = {"dataplane": self.dataplane, "description": self.description, "podCidrs": list(self.pod_cidrs),
               "nodeCidrs": list(self.node_cidrs), "apiserverCidrs": list(self.apiserver_cidrs),
               "apiserverPort": self.apiserver_port, "apiserverOnNodes": self.apiserver_on_nodes}
        if self.cilium_cidr_match_mode is not None:
            out["ciliumPolicyCidrMatchMode"] = list(self.cilium_cidr_match_mode)
        if self.cilium_enable_policy is not None:
            out["ciliumEnablePolicy"] = self.cilium_enable_policy
        return out


@dataclass(eq=False)
class ClusterModel:
    cloud: str
    kubernetes_version: str
    node_groups: list[NodeGroup]
    control_plane_ports: Optional[frozenset[int]]  # None = the control plane reaches every node port
    notes: list[str] = field(default_factory=list)
    # The API server runs the ExtendedResourceToleration admission plugin: a pod requesting an extended
    # resource (nvidia.com/gpu) gets a toleration for the taint of the same key (GKE, EKS; not kubeadm's default).
    extended_resource_toleration: bool = False
    # The network the flow check evaluates NetworkPolicies on (None: not modelled, no flow is checked).
    network: Optional[NetworkModel] = None
    # What removes idle nodes, so which pod annotation keeps a training pod's node (components/cluster.py
    # SCALE_DOWN_PROTECTION): cluster-autoscaler on the clouds, the stack's kubernetes.autoscaler on cloud kubernetes.
    autoscaler: str = "cluster-autoscaler"
    # What else keeps cluster-autoscaler off a GPU node while a GPU pod runs on it ("" if nothing): EKS's
    # scale-in protection controller annotates every busy GPU node scale-down-disabled (components/aws/protection.py).
    busy_gpu_nodes_kept: str = ""

    def group(self, name: str) -> NodeGroup:
        for g in self.node_groups:
            if g.name == name:
                return g
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {"cloud": self.cloud, "kubernetesVersion": self.kubernetes_version,
                "nodeGroups": [g.to_json() for g in self.node_groups],
                "controlPlanePorts": None if self.control_plane_ports is None else sorted(self.control_plane_ports),
                "extendedResourceToleration": self.extended_resource_toleration, "autoscaler": self.autoscaler,
                "busyGpuNodesKept": self.busy_gpu_nodes_kept, "notes": list(self.notes),
                "network": None if self.network is None else self.network.to_json()}
