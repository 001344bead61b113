"""KWOK nodes for every node group of the stack at its maximum size, from the node model cluster fit
uses (gpu_platform.preflight.fit.nodes.cluster_model): labels, taints and allocatable as the model
has them, GPUs as nvidia.com/gpu. A wrong model shows up as a disagreement between fit and rehearsal."""

from __future__ import annotations

from typing import Any

from gpu_platform.preflight.fit.model import ClusterModel, NodeGroup
from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION
from gpu_platform.rehearsal.kube import Client, wait_for

GPU_RESOURCE = "nvidia.com/gpu"
# The label naming the model's node group on each node: how the report tells where a pod landed.
GROUP_LABEL = "rehearsal.gpu-platform.io/node-group"


def node_name(group: NodeGroup, index: int) -> str:
    return f"{group.name}-{index}".lower().replace("_", "-")


def resources(group: NodeGroup) -> dict[str, str]:
    a = group.allocatable
    out = {"cpu": f"{a.cpu_millis}m", "memory": str(a.memory_bytes), "pods": str(a.pods), "ephemeral-storage": "100Gi"}
    if a.gpus:
        out[GPU_RESOURCE] = str(a.gpus)
    return out


def node_objects(model: ClusterModel) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(Node, its status) for every node of every group at the group's maximum size."""
    out = []
    # Several model groups may share a name (EKS: one Auto Scaling group per pool and zone): number
    # their nodes on, so every node name is unique.
    taken: dict[str, int] = {}
    for group in model.node_groups:
        first = taken.get(group.name, 0)
        taken[group.name] = first + group.max_nodes
        for i in range(first, first + group.max_nodes):
            name = node_name(group, i)
            labels = {**group.labels, "kubernetes.io/hostname": name, GROUP_LABEL: group.name}
            node = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
                    "spec": {"taints": [dict(t) for t in group.taints]}}
            res = resources(group)
            out.append((node, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                               "status": {"allocatable": res, "capacity": res}}))
    return out


def create_nodes(client: Client, model: ClusterModel, timeout: float = 60.0) -> list[str]:
    names = []
    for node, status in node_objects(model):
        client.create(node)
        client.apply(status, subresource="status")
        names.append(node["metadata"]["name"])

    def all_ready():
        ready = {n["metadata"]["name"] for n in client.list("v1", "Node")
                 if any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or [])}
        return set(names) <= ready

    wait_for(f"KWOK to make nodes {', '.join(names)} Ready", all_ready, timeout)
    return names


def group_of(node: dict[str, Any]) -> str:
    return ((node.get("metadata") or {}).get("labels") or {}).get(GROUP_LABEL, "?")
