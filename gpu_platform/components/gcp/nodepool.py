"""GKE node pools: the small on-demand system pool and one autoscaling GPU pool per configured pool.

The settings are plain functions returning the SDK's keyword arguments (snake_case dicts), so tests
read them without running Pulumi; `create_*_pool` only wires them into `container.NodePool`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pulumi_gcp import container

from gpu_platform.config.base import approval_tags
from gpu_platform.config.gcp import (  # noqa: F401 (SPOT_GRACE_MIN_MINOR: re-exported)
    SPOT_GRACE_MIN_MINOR, SPOT_SHUTDOWN_GRACE_CRITICAL_PODS_SECONDS, SPOT_SHUTDOWN_GRACE_SECONDS, spot_grace_allowed,
)
from gpu_platform.components.cluster import GpuPoolSpec, Taint

# GKE's spelling of the Kubernetes taint effects.
GKE_TAINT_EFFECTS = {"NoSchedule": "NO_SCHEDULE", "PreferNoSchedule": "PREFER_NO_SCHEDULE", "NoExecute": "NO_EXECUTE"}
# Access is governed by the node service account's IAM roles; the broad scope is Google's recommendation.
NODE_OAUTH_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
IMAGE_TYPE = "COS_CONTAINERD"
SYSTEM_DISK_GB = 50
# ML images (CUDA, PyTorch) are large; a small boot disk makes image pulls fail on GPU nodes.
GPU_DISK_GB = 200
DISK_TYPE = "pd-balanced"


@dataclass(frozen=True)
class GkeGpuPool:
    """A configured GPU pool with what GKE needs beyond the cluster contract's GpuPoolSpec."""

    spec: GpuPoolSpec
    accelerator: str  # GCP accelerator type, e.g. nvidia-tesla-a100
    zones: tuple[str, ...]  # node locations: the configured zones offering the accelerator
    approved_on_demand: bool


def gke_taint(taint: Taint) -> dict[str, str]:
    return {"key": taint.key, "value": taint.value, "effect": GKE_TAINT_EFFECTS[taint.effect]}


def capacity_flags(capacity: str) -> dict[str, bool]:
    """Preemptible (24 h max lifetime, the seed's 8x saving) or Spot (no max lifetime) or neither."""
    if capacity not in ("spot", "preemptible", "on-demand"):
        raise ValueError(f"capacity must be spot, preemptible or on-demand, not {capacity!r}")
    return {"spot": capacity == "spot", "preemptible": capacity == "preemptible"}


def spot_shutdown_grace(capacity: str, kubernetes_minor: Optional[str]) -> Optional[dict[str, int]]:
    """The kubelet_config fields that give a Spot pool's pods 105 s to checkpoint before the VM stops
    (config/gcp.py: GKE's Spot grace, 1.35+), or None where GKE keeps its default (on-demand or
    preemptible pools; nodes that may run a minor before 1.35). `kubernetes_minor`: the oldest minor the
    nodes can run, pinned or the release channel's (components/gcp/cluster.py node_minor_floor)."""
    if capacity != "spot" or not spot_grace_allowed(kubernetes_minor):
        return None
    return {"shutdown_grace_period_seconds": SPOT_SHUTDOWN_GRACE_SECONDS,
            "shutdown_grace_period_critical_pods_seconds": SPOT_SHUTDOWN_GRACE_CRITICAL_PODS_SECONDS}


def autoscaling(min_nodes: int, max_nodes: int, capacity: str) -> dict[str, Any]:
    """Total (not per-zone) limits, so min 0 really means no node; interruptible capacity takes
    whichever zone has it (ANY), on-demand capacity is spread over the zones (BALANCED)."""
    return {
        "total_min_node_count": min_nodes,
        "total_max_node_count": max_nodes,
        "location_policy": "BALANCED" if capacity == "on-demand" else "ANY",
    }


def gpu_resource_labels(common: Mapping[str, str], pool: GkeGpuPool) -> dict[str, str]:
    """GCP labels on the pool's VMs: the cost labels plus what the policy pack reads."""
    return {
        **common,
        "gpu-pool": pool.spec.name,
        **approval_tags(pool.approved_on_demand, "gcp"),  # with approver and reason (policy pack)
    }


def _hardened(service_account: pulumi.Input[str], node_tag: str) -> dict[str, Any]:
    """Settings every node shares: least-privilege identity, GKE metadata server, Shielded VM."""
    return {
        "service_account": service_account,
        "oauth_scopes": list(NODE_OAUTH_SCOPES),
        "workload_metadata_config": {"mode": "GKE_METADATA"},
        "shielded_instance_config": {"enable_secure_boot": True, "enable_integrity_monitoring": True},
        "metadata": {"disable-legacy-endpoints": "true"},
        "image_type": IMAGE_TYPE,
        "disk_type": DISK_TYPE,
        "tags": [node_tag],
    }


def system_node_config(machine_type: str, service_account: pulumi.Input[str], node_tag: str,
                       resource_labels: Mapping[str, str]) -> dict[str, Any]:
    return {
        **_hardened(service_account, node_tag),
        "machine_type": machine_type,
        "disk_size_gb": SYSTEM_DISK_GB,
        "resource_labels": dict(resource_labels),
        "labels": {"gpu-platform.io/role": "system"},
    }


def gpu_node_config(pool: GkeGpuPool, service_account: pulumi.Input[str], node_tag: str,
                    common_labels: Mapping[str, str], driver_version: str,
                    kubernetes_minor: Optional[str] = None) -> dict[str, Any]:
    spec = pool.spec
    grace = spot_shutdown_grace(spec.capacity, kubernetes_minor)
    return {
        **({"kubelet_config": grace} if grace else {}),
        **_hardened(service_account, node_tag),
        "machine_type": spec.instance_type,
        "disk_size_gb": GPU_DISK_GB,
        **capacity_flags(spec.capacity),
        "guest_accelerators": [{
            "type": pool.accelerator,
            "count": spec.gpus_per_node,
            # GKE installs the NVIDIA driver; its device plugin then advertises nvidia.com/gpu.
            "gpu_driver_installation_config": {"gpu_driver_version": driver_version},
        }],
        # gVNIC: required by A3 (H100) machines, faster for the others.
        "gvnic": {"enabled": True},
        "labels": dict(spec.node_labels),
        "taints": [gke_taint(t) for t in spec.taints],
        "resource_labels": gpu_resource_labels(common_labels, pool),
    }


def initial_gpu_nodes_per_zone(min_nodes: int, zone_count: int) -> int:
    """GKE's initial count is per zone; enough to reach the total minimum, zero when it is zero."""
    return -(-min_nodes // max(zone_count, 1))


def gpu_upgrade_settings() -> dict[str, Any]:
    """One GPU node at a time, the replacement first: max_unavailable 0 means GKE adds an upgraded node before it
    drains an old one, so the pool never shrinks and an evicted job restarts (from its checkpoint) at once instead
    of waiting for a node. Draining still evicts the pods of the node being replaced (GKE honours
    PodDisruptionBudgets for up to an hour); *when* that may happen is decided by the cluster's maintenance window
    (default: weekends only) and exclusions. The surge node needs one node's GPU quota during an upgrade."""
    return {"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0}


def create_system_pool(name: str, cluster: container.Cluster, location: str, zones: Sequence[str],
                       machine_type: str, min_nodes: int, max_nodes: int, service_account: pulumi.Input[str],
                       node_tag: str, resource_labels: Mapping[str, str],
                       opts: Optional[pulumi.ResourceOptions] = None) -> container.NodePool:
    from gpu_platform.config.gcp import SYSTEM_POOL_NAME

    return container.NodePool(
        name,
        name=SYSTEM_POOL_NAME,
        cluster=cluster.id,
        location=location,
        node_locations=list(zones),
        initial_node_count=1,
        autoscaling=autoscaling(min_nodes, max_nodes, "on-demand"),
        management={"auto_repair": True, "auto_upgrade": True},
        upgrade_settings={"strategy": "SURGE", "max_surge": 1, "max_unavailable": 0},
        node_config=system_node_config(machine_type, service_account, node_tag, resource_labels),
        opts=opts,
    )


def create_gpu_pool(name: str, cluster: container.Cluster, location: str, pool: GkeGpuPool,
                    service_account: pulumi.Input[str], node_tag: str, common_labels: Mapping[str, str],
                    driver_version: str, kubernetes_minor: Optional[str] = None,
                    opts: Optional[pulumi.ResourceOptions] = None) -> container.NodePool:
    spec = pool.spec
    return container.NodePool(
        name,
        name=spec.name,
        cluster=cluster.id,
        location=location,
        node_locations=list(pool.zones),
        # Nothing runs until a job asks for a GPU (min 0): the autoscaler adds nodes from zero.
        initial_node_count=initial_gpu_nodes_per_zone(spec.min_nodes, len(pool.zones)),
        autoscaling=autoscaling(spec.min_nodes, spec.max_nodes, spec.capacity),
        management={"auto_repair": True, "auto_upgrade": True},
        upgrade_settings=gpu_upgrade_settings(),
        node_config=gpu_node_config(pool, service_account, node_tag, common_labels, driver_version, kubernetes_minor),
        # Changing minNodes later must not replace the pool: the count at creation is all this sets.
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(ignore_changes=["initialNodeCount"])),
    )
