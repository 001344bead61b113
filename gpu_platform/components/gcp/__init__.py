"""GKE for gpu-platform: a private cluster with preemptible/Spot GPU pools that scale to zero, a
checkpoint bucket reached through Workload Identity, and a Cloud Billing budget.

`create_cluster(cfg)` and `create_billing_alerts(cfg)` are what `gpu_platform.components.clouds` dispatches to.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pulumi

from gpu_platform.components.cluster import ClusterHandle, common_labels

if TYPE_CHECKING:
    from gpu_platform.config.model import StackConfig


def create_cluster(cfg: "StackConfig") -> ClusterHandle:
    """Create the stack's GKE side: the network, the private regional GKE cluster with its system pool and one
    GPU node pool per `gpuPools` entry (scaling from zero), the checkpoint bucket reached through Workload
    Identity, and the Artifact Registry repository when an image is built into it.

    Args: cfg, the validated stack config (`gpu_platform.config.parse_config`; its `gcp` section set).
    Returns the ClusterHandle the platform layer deploys onto, with the training image to use."""
    from dataclasses import replace

    from gpu_platform.components.gcp.cluster import GkeCluster, GkeClusterArgs
    from gpu_platform.components.gcp.registry import ArtifactRegistry
    from gpu_platform.components.images import training_image

    section = cfg.gcp
    assert section is not None, "validated by gpu_platform.config.stack"
    cluster = GkeCluster(cfg.name_prefix, GkeClusterArgs.from_config(cfg))
    # The stack's Artifact Registry repository, made when an image is built into it (only the example
    # training image on GKE: the cluster needs no image of this project's own).
    registry = lambda: ArtifactRegistry(f"{cfg.name_prefix}-images", section.project, section.region,  # noqa: E731
                                        cfg.name_prefix, common_labels(cfg), cluster.gcp_provider,
                                        opts=pulumi.ResourceOptions(parent=cluster))
    return replace(cluster.handle, training_image=training_image(cfg, registry))


def create_billing_alerts(cfg: "StackConfig") -> list[pulumi.Resource]:
    """Create the Cloud Billing budget on `gcp.project` (`monthlyBudgetUsd`) and one e-mail notification channel
    per `alertEmails` address.

    Args: cfg, the validated stack config (its `gcp` section set).
    Returns a list of the budget and its notification channels."""
    from gpu_platform.components.gcp.budget import BudgetArgs, GcpBudget

    section = cfg.gcp
    assert section is not None, "validated by gpu_platform.config.stack"
    budget = GcpBudget(f"{cfg.name_prefix}-billing", BudgetArgs(
        project=section.project, billing_account=section.billing_account,
        monthly_budget_usd=cfg.monthly_budget_usd, alert_emails=tuple(cfg.alert_emails),
        resource_prefix=cfg.name_prefix, labels=common_labels(cfg)))
    return budget.alerts
