"""Linode: a self-managed kubeadm GPU cluster (Linode's managed Kubernetes offers no GPU nodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

if TYPE_CHECKING:  # components.config imports this package's config module: no import cycle.
    from components.cluster import ClusterHandle
    from components.config import StackConfig


def create_cluster(cfg: "StackConfig") -> "ClusterHandle":
    from components.linode.cluster import LinodeClusterArgs, LinodeKubeadmCluster

    # The provider's own token, reused for the in-cluster CCM/CSI driver: set it with
    # `pulumi config set --secret linode:token ...` (or LINODE_TOKEN for the provider alone).
    token = pulumi.Config("linode").require_secret("token")
    cluster = LinodeKubeadmCluster(cfg.name_prefix, LinodeClusterArgs(config=cfg, api_token=token))
    return cluster.handle


def create_billing_alerts(cfg: "StackConfig") -> list[pulumi.Resource]:
    """Linode has no budget or billing-alarm API. The platform's Prometheus rule
    `gpu-spend-run-rate` alerts on the cluster's spend run-rate against monthlyBudgetUsd instead."""
    return []
