"""The cluster-autoscaler's permissions beyond its pinned chart's ClusterRole, on every cloud whose
autoscaler the program installs (EKS; Linode's externalgrpc autoscaler).

The chart (aws_versions.CLUSTER_AUTOSCALER_CHART_VERSION) renders the ClusterRole of the release it was
cut for and has no value for extra rules; the image the program runs follows the cluster's minor, and from
1.35 it lists and watches resource.k8s.io objects that ClusterRole does not grant, so it never syncs and
never scales (aws_versions.CLUSTER_AUTOSCALER_EXTRA_RULES says what, and where it was read). The program
adds those rules as a ClusterRole of its own, bound to the chart's ServiceAccount, created before the
release. Pure rendering here; `register` wires the objects as Pulumi resources.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from gpu_platform.data import aws_versions

LABELS = {"app.kubernetes.io/name": "cluster-autoscaler", "app.kubernetes.io/part-of": "gpu-platform"}


def role_name(service_account: str) -> str:
    return f"{service_account}-gpu-platform"


def extra_rbac_objects(namespace: str, service_account: str, kubernetes_version: str) -> list[dict]:
    """A ClusterRole with the rules the autoscaler image of `kubernetes_version` needs beyond the chart's,
    and its ClusterRoleBinding to the chart's ServiceAccount; [] when the chart's are enough."""
    rules = aws_versions.cluster_autoscaler_extra_rules(kubernetes_version)
    if not rules:
        return []
    name = role_name(service_account)
    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name, "labels": dict(LABELS)}, "rules": rules},
        {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name, "labels": dict(LABELS)},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}]},
    ]


def register(name: str, namespace: str, service_account: str, kubernetes_version: str,
             opts: Optional[pulumi.ResourceOptions] = None) -> list[pulumi.Resource]:
    """The objects of extra_rbac_objects as Pulumi resources (the release should depend on them)."""
    out: list[pulumi.Resource] = []
    for obj in extra_rbac_objects(namespace, service_account, kubernetes_version):
        if obj["kind"] == "ClusterRole":
            out.append(k8s.rbac.v1.ClusterRole(f"{name}-extra-cluster-role", metadata=obj["metadata"], rules=obj["rules"], opts=opts))
        else:
            out.append(k8s.rbac.v1.ClusterRoleBinding(f"{name}-extra-cluster-role-binding", metadata=obj["metadata"],
                                                      role_ref=obj["roleRef"], subjects=obj["subjects"], opts=opts))
    return out
