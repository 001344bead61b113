"""Linode: a self-managed kubeadm GPU cluster (Linode's managed Kubernetes offers no GPU nodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

if TYPE_CHECKING:  # importing one Linode module (render.py in the node-group provider) runs this file: keep it light.
    from gpu_platform.components.cluster import ClusterHandle
    from gpu_platform.config.model import StackConfig


# Config namespace of the CCM/CSI token (not the provider's `linode:` namespace).
CLUSTER_TOKEN_NAMESPACE = "linode-cluster"
# Config namespace of the node-group provider's token (autoscaled GPU pools; scope linodes:read_write).
NODE_GROUPS_TOKEN_NAMESPACE = "linode-node-groups"


def create_cluster(cfg: "StackConfig") -> "ClusterHandle":
    from gpu_platform.components.linode.cluster import LinodeClusterArgs, LinodeKubeadmCluster
    from gpu_platform.config.checks.linode import node_groups_deployed

    # The deployer's token (`pulumi config set --secret linode:token ...`) creates the resources; the
    # in-cluster CCM/CSI driver gets its own, narrower token (`linode-cluster:token`, docs/quickstart-linode.md "Linode
    # API tokens"), falling back to the deployer's with a warning.
    deploy_token = pulumi.Config("linode").require_secret("token")
    cluster_token = pulumi.Config(CLUSTER_TOKEN_NAMESPACE).get_secret("token")
    if cluster_token is None:
        pulumi.log.warn(f"{CLUSTER_TOKEN_NAMESPACE}:token is not set: the CCM and CSI driver get the deployer's "
                        "linode:token. Create a token limited to Linodes, NodeBalancers, Volumes, VPCs and IPs "
                        "(docs/quickstart-linode.md, Linode API tokens).")
        cluster_token = deploy_token
    node_groups_token = None
    if node_groups_deployed(cfg):
        # The provider creates and deletes instances: it gets a token of its own, limited to Linodes, never
        # the CCM/CSI one (NodeBalancers, Volumes, VPCs and IPs too), whose expiry alerts are for other readers.
        # Read as plain text only to see it is there (CI passes "" for an unset GitHub secret); used as a secret.
        if not pulumi.Config(NODE_GROUPS_TOKEN_NAMESPACE).get("token"):
            raise pulumi.RunError(
                f"{NODE_GROUPS_TOKEN_NAMESPACE}:token is not set: the node-group provider (autoscaled GPU pools "
                f"{', '.join(p.name for p in cfg.gpu_pools if p.min_nodes < p.max_nodes)}) needs a Linode API token "
                "of its own with only Linodes: Read/Write. Create it with an expiry, run `pulumi config set --secret "
                f"{NODE_GROUPS_TOKEN_NAMESPACE}:token <token>` and state its expiry in "
                "gpu-platform:linode.nodeGroups.apiTokenExpires (docs/linode-autoscaling.md).")
        node_groups_token = pulumi.Config(NODE_GROUPS_TOKEN_NAMESPACE).require_secret("token")
    cluster = LinodeKubeadmCluster(cfg.name_prefix, LinodeClusterArgs(config=cfg, api_token=cluster_token,
                                                                      deploy_token=deploy_token,
                                                                      node_groups_token=node_groups_token))
    return cluster.handle


def create_billing_alerts(cfg: "StackConfig") -> list[pulumi.Resource]:
    """Linode has no budget or billing-alarm API. The platform's Prometheus rule
    `gpu-spend-run-rate` alerts on the cluster's spend run-rate against monthlyBudgetUsd instead."""
    return []
