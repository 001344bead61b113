"""EKS with GPU Auto Scaling groups: the AWS implementation of the cluster contract.

`create_cluster(cfg)` builds the network (unless an existing VPC is given), the EKS cluster, one GPU
Auto Scaling group per pool, spot interruption handling, the cluster-autoscaler, the scale-in
protection controller, the checkpoint bucket and the idle-GPU alarms, and returns a ClusterHandle.
`create_billing_alerts(cfg)` builds the stack's budget and, with `aws.accountBilling`, the account's billing
alarms (us-east-1).

All AWS resources go through an explicit provider for the region of the `aws` section, so the region
the config validated is the region used (`aws:region` in the stack file only serves CLI tools).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the cluster's modules are imported when called: importing one AWS module stays SDK-free
    import pulumi

    from gpu_platform.components.cluster import ClusterHandle
    from gpu_platform.config.model import StackConfig

__all__ = ["create_billing_alerts", "create_cluster"]


def create_cluster(cfg: "StackConfig") -> "ClusterHandle":
    """Create the stack's EKS side: the VPC (unless `aws.vpcId` names an existing one), the EKS cluster, one GPU
    Auto Scaling group per `gpuPools` entry with Spot interruption handling, the cluster-autoscaler, the scale-in
    protection controller, the checkpoint bucket and the idle-GPU alarms, all in `aws.region`.

    Args: cfg, the validated stack config (`gpu_platform.config.parse_config`; its `aws` section set).
    Returns the ClusterHandle the platform layer deploys onto (Kubernetes provider, pools, checkpoint store)."""
    from gpu_platform.components.aws.cluster import AwsCluster

    return AwsCluster(cfg.name_prefix, cfg).handle


def create_billing_alerts(cfg: "StackConfig") -> "list[pulumi.Resource]":
    """Create the stack's AWS Budget (its tagged spend against `monthlyBudgetUsd`, mailed to `alertEmails`) and,
    with `aws.accountBilling`, the account's EstimatedCharges alarms, in us-east-1 where AWS keeps billing data.

    Args: cfg, the validated stack config (its `aws` section set).
    Returns a list of one BillingAlerts component (the budget, its SNS topic and the alarms are its children)."""
    from gpu_platform.components.aws.billing import BillingAlerts, BillingAlertsArgs
    from gpu_platform.components.cluster import CLUSTER_LABEL, common_labels

    assert cfg.aws is not None, "validated by gpu_platform.config.stack"
    # The stack's budget counts the `cluster` tag of common_labels, which AwsCluster and a team's own
    # resources carry (its value: the cluster name).
    labels = common_labels(cfg)
    return [BillingAlerts(f"{cfg.name_prefix}-billing", BillingAlertsArgs(
        name_prefix=cfg.name_prefix, monthly_budget_usd=cfg.monthly_budget_usd, emails=cfg.alert_emails,
        tags=labels, stack_tag_value=labels[CLUSTER_LABEL], account_alarms=cfg.aws.account_billing))]
