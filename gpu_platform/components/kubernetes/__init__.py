"""A cluster the stack does not create (`cloud: kubernetes`): the cluster contract for an existing cluster.

`create_cluster(cfg)` creates nothing outside the cluster: a Kubernetes provider for the kubeconfig the stack
names, a read of the StorageClass the stack names (a `pulumi up` against a cluster without it stops there), and
the stack's description of its node groups as a ConfigMap (gpu-platform/node-groups), which the cluster-fit
model and the policy pack read as they read the clouds' node pools. `create_billing_alerts(cfg)` creates nothing:
an existing cluster has no billing API this program can use; the platform's GPU spend run-rate rule (with node
prices) is its budget alert.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pulumi

    from gpu_platform.components.cluster import ClusterHandle
    from gpu_platform.config.model import StackConfig

__all__ = ["create_billing_alerts", "create_cluster"]


def create_cluster(cfg: "StackConfig") -> "ClusterHandle":
    from gpu_platform.components.kubernetes.cluster import ExistingCluster, ExistingClusterArgs

    return ExistingCluster(cfg.name_prefix, ExistingClusterArgs.from_config(cfg)).handle


def create_billing_alerts(cfg: "StackConfig") -> "list[pulumi.Resource]":
    return []
