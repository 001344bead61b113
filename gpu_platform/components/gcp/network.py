"""A VPC-native network for a private GKE cluster: one subnet with secondary ranges for pods and
services, Cloud NAT so private nodes can still pull images, and the firewall rule private clusters
need for webhooks and aggregated APIs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pulumi
from pulumi_gcp import compute

PODS_RANGE = "pods"
SERVICES_RANGE = "services"
# Ports the GKE control plane calls on nodes (webhooks, CRD conversion, aggregated APIs) for the platform's pinned
# charts, read from what they render (gpu_platform/data/platform_versions.py; tests/test_gcp_plan.py re-derives them from
# the rendered charts and fails when a chart update needs another port). GKE's own rule for a private cluster
# opens only 443 and 10250; without ours, these calls time out (webhooks refuse objects, an unreachable APIService
# turns FailedDiscoveryCheck and namespace deletion, `pulumi destroy` included, hangs).
#   8082  Kueue visibility API server (APIService v1beta1/v1beta2.visibility.kueue.x-k8s.io)
#   8443  Katib controller webhooks
#   9443  Kueue webhooks and CRD conversion; JobSet and Kubeflow Trainer webhooks
#   10250 kube-prometheus-stack operator admission webhook (also in GKE's own rule; listed so the set is complete)
CONTROL_PLANE_TO_NODE_PORTS = ("8082", "8443", "9443", "10250")


@dataclass(frozen=True)
class NetworkArgs:
    """resource_prefix: the GCP names of the network, subnet, router and NAT start with it."""

    resource_prefix: str
    region: str
    network_cidr: str
    pods_cidr: str
    services_cidr: str
    master_cidr: str
    node_tag: str


def secondary_ranges(args: NetworkArgs) -> list[dict[str, str]]:
    return [
        {"range_name": PODS_RANGE, "ip_cidr_range": args.pods_cidr},
        {"range_name": SERVICES_RANGE, "ip_cidr_range": args.services_cidr},
    ]


def nat_settings() -> dict[str, Any]:
    """Cloud NAT for every range of the subnet (nodes and pods), automatic external IPs, errors logged."""
    return {
        "nat_ip_allocate_option": "AUTO_ONLY",
        "source_subnetwork_ip_ranges_to_nat": "ALL_SUBNETWORKS_ALL_IP_RANGES",
        "log_config": {"enable": True, "filter": "ERRORS_ONLY"},
    }


class GcpNetwork(pulumi.ComponentResource):
    """Outputs: network_id, subnet_id, network_name, subnet_name."""

    def __init__(self, name: str, args: NetworkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:gcp:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        prefix = args.resource_prefix
        self.network = compute.Network(
            f"{name}-vpc",
            name=f"{prefix}-vpc",
            auto_create_subnetworks=False,
            routing_mode="REGIONAL",
            description="gpu-platform: VPC of the GKE cluster",
            opts=child,
        )
        self.subnet = compute.Subnetwork(
            f"{name}-subnet",
            name=f"{prefix}-nodes",
            network=self.network.id,
            region=args.region,
            ip_cidr_range=args.network_cidr,
            secondary_ip_ranges=secondary_ranges(args),
            # Private nodes reach Google APIs (Artifact Registry, GCS checkpoints) without NAT.
            private_ip_google_access=True,
            opts=child,
        )
        self.router = compute.Router(
            f"{name}-router",
            name=f"{prefix}-router",
            network=self.network.id,
            region=args.region,
            opts=child,
        )
        self.nat = compute.RouterNat(
            f"{name}-nat",
            name=f"{prefix}-nat",
            router=self.router.name,
            region=args.region,
            **nat_settings(),
            opts=child,
        )
        self.webhook_firewall = compute.Firewall(
            f"{name}-webhooks",
            name=f"{prefix}-master-webhooks",
            network=self.network.id,
            direction="INGRESS",
            source_ranges=[args.master_cidr],
            target_tags=[args.node_tag],
            allows=[{"protocol": "tcp", "ports": list(CONTROL_PLANE_TO_NODE_PORTS)}],
            description="gpu-platform: GKE control plane to webhooks and aggregated APIs on nodes",
            opts=child,
        )
        self.network_id = self.network.id
        self.subnet_id = self.subnet.id
        self.register_outputs({"networkId": self.network.id, "subnetId": self.subnet.id})
