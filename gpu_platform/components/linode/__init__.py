"""Linode: a self-managed kubeadm GPU cluster (Linode's managed Kubernetes offers no GPU nodes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import pulumi

if TYPE_CHECKING:  # importing one Linode module (render.py in the node-group provider) runs this file: keep it light.
    from gpu_platform.components.cluster import ClusterHandle
    from gpu_platform.config.model import StackConfig


# Config namespace of the CCM/CSI token (not the provider's `linode:` namespace).
CLUSTER_TOKEN_NAMESPACE = "linode-cluster"
# Config namespace of the node-group provider's token (autoscaled GPU pools; scope linodes:read_write).
NODE_GROUPS_TOKEN_NAMESPACE = "linode-node-groups"


def create_cluster(cfg: "StackConfig") -> "ClusterHandle":
    """Create the stack's kubeadm cluster on Linode: the VPC, firewall and control-plane Linodes (behind a
    NodeBalancer when there are three), the system and GPU node Linodes (autoscaled pools through the node-group
    provider), the CCM and CSI driver with their own API token, and the checkpoint and etcd-snapshot buckets.

    Args: cfg, the validated stack config (`gpu_platform.config.parse_config`; its `linode` section set). The
    tokens are read from the stack's secret config (`linode:token`, `linode-cluster:token`,
    `linode-node-groups:token`); a missing one stops the program naming the key.
    Returns the ClusterHandle the platform layer deploys onto."""
    from gpu_platform.components.linode.cluster import LinodeClusterArgs, LinodeKubeadmCluster
    from gpu_platform.config.checks.linode import node_groups_deployed

    from gpu_platform.components.read_only import read_only_run

    # A read-only run (drift.yml; components/read_only.py) holds linode:token only, a read-only one: the inputs the
    # other tokens reach keep the state's values there, so the stand-ins below are never compared or used.
    read_only = read_only_run()
    # The deployer's token (`pulumi config set --secret linode:token ...`) creates the resources; the
    # in-cluster CCM/CSI driver gets its own, narrower token (`linode-cluster:token`, docs/quickstart-linode.md "Linode
    # API tokens"), falling back to the deployer's with a warning.
    deploy_token = pulumi.Config("linode").require_secret("token")
    cluster_token = pulumi.Config(CLUSTER_TOKEN_NAMESPACE).get_secret("token")
    if cluster_token is None and read_only:
        cluster_token = deploy_token
    if cluster_token is None:
        pulumi.log.warn(f"{CLUSTER_TOKEN_NAMESPACE}:token is not set: the CCM and CSI driver get the deployer's "
                        "linode:token. Create a token limited to Linodes, NodeBalancers, Volumes, VPCs and IPs "
                        "(docs/quickstart-linode.md, Linode API tokens).")
        cluster_token = deploy_token
    from gpu_platform.config.checks.linode import node_groups_deployed

    registry_password, pull_password = registry_secrets(cfg)
    node_groups_token = None
    if node_groups_deployed(cfg):
        # The provider creates and deletes instances: it gets a token of its own, limited to Linodes, never
        # the CCM/CSI one (NodeBalancers, Volumes, VPCs and IPs too), whose expiry alerts are for other readers.
        # Read as plain text only to see it is there (CI passes "" for an unset GitHub secret); used as a secret.
        if not pulumi.Config(NODE_GROUPS_TOKEN_NAMESPACE).get("token") and read_only:
            node_groups_token = pulumi.Output.secret("")
        elif not pulumi.Config(NODE_GROUPS_TOKEN_NAMESPACE).get("token"):
            raise pulumi.RunError(
                f"{NODE_GROUPS_TOKEN_NAMESPACE}:token is not set: the node-group provider (autoscaled GPU pools "
                f"{', '.join(p.name for p in cfg.gpu_pools if p.min_nodes < p.max_nodes)}) needs a Linode API token "
                "of its own with only Linodes: Read/Write. Create it with an expiry, run `pulumi config set --secret "
                f"{NODE_GROUPS_TOKEN_NAMESPACE}:token <token>` and state its expiry in "
                "gpu-platform:linode.nodeGroups.apiTokenExpires (docs/linode-autoscaling.md).")
        else:
            node_groups_token = pulumi.Config(NODE_GROUPS_TOKEN_NAMESPACE).require_secret("token")
    cluster = LinodeKubeadmCluster(cfg.name_prefix, LinodeClusterArgs(config=cfg, api_token=cluster_token,
                                                                      deploy_token=deploy_token,
                                                                      node_groups_token=node_groups_token,
                                                                      registry_password=registry_password,
                                                                      registry_pull_password=pull_password))
    return cluster.handle


def builds_images(cfg: "StackConfig") -> bool:
    """Whether `pulumi up` builds an image into linode.imageRegistry: the node-group provider's (autoscaled
    pools without linode.nodeGroups.image) or the example training image."""
    from gpu_platform.components.images import TRAINING

    section = cfg.linode
    if section is None or section.image_registry is None:
        return False
    provider = section.node_groups.image is None and any(p.min_nodes < p.max_nodes for p in cfg.gpu_pools)
    training = cfg.platform.training_image
    return provider or (training.build and training.image is None and TRAINING.available())


def registry_secrets(cfg: "StackConfig") -> "tuple[Optional[pulumi.Output[str]], Optional[pulumi.Output[str]]]":
    """(push password, pull password) of linode.imageRegistry, from their secret namespace; a missing one
    stops the program before any resource is registered, naming the key."""
    from gpu_platform.components.read_only import read_only_run
    from gpu_platform.config.linode import REGISTRY_SECRET_NAMESPACE as NS

    if not builds_images(cfg):
        return None, None
    registry = cfg.linode.image_registry  # type: ignore[union-attr]
    config = pulumi.Config(NS)

    def secret(key: str, why: str) -> "pulumi.Output[str]":
        value = config.get_secret(key)
        if value is not None:
            return value
        missing = f"{NS}:{key} is not set: {why}. Set it with `pulumi config set --secret {NS}:{key} <token>`"
        if not pulumi.runtime.is_dry_run():
            raise pulumi.RunError(missing + " (docs/quickstart-linode.md, \"Images\")")
        # A preview builds nothing (components/images.py: buildOnPreview false), so it needs no password; CI's
        # previews hold none (docs/ci.md). `pulumi up` stops above. A read-only run keeps the state's (read_only.py).
        if not read_only_run():
            pulumi.log.warn(missing + "; `pulumi up` stops until it is")
        return pulumi.Output.secret("")

    password = secret("password", f"the password or token {registry.username} pushes to {registry.server} with "
                                  "(linode.imageRegistry)")
    pull = None
    if registry.pull_username is not None:
        pull = secret("pullPassword", f"linode.imageRegistry.pullUsername ({registry.pull_username}) needs its "
                                      "read-only token, or remove pullUsername to pull with the push credentials")
    return password, pull


def create_billing_alerts(cfg: "StackConfig") -> list[pulumi.Resource]:
    """Create nothing: Linode has no budget or billing-alarm API. The platform's Prometheus rule
    `gpu-spend-run-rate` alerts on the cluster's spend run-rate against monthlyBudgetUsd instead.

    Args: cfg, the validated stack config. Returns an empty list."""
    return []
