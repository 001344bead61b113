"""cluster-autoscaler: scales the GPU groups (and the system group) from pending pods, down to zero.

It discovers the groups by their tags and scales a GPU pool up from zero from the node-template
tags (labels, taint, GPUs, the accelerator label). It never removes a node the protection
controller holds (`cluster-autoscaler.kubernetes.io/scale-down-disabled=true`); each GPU group
carries its own scale-down-unneeded-time tag, the part of the stack's grace period the controller
leaves to the autoscaler (gpu_platform/components/aws/scale_down.py), so an idle GPU node goes after the grace
period once, not twice. The flag below is the default for groups without the tag (the system nodes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import iam

from gpu_platform.data import aws_versions as versions
from gpu_platform.components import autoscaler_rbac
from gpu_platform.components.helm import helm_release
from gpu_platform.components.aws.iam import irsa_role, policy, statement

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"


def autoscaler_policy(cluster_name: str) -> dict:
    """Writes only on groups tagged as this cluster's (the GPU groups and EKS's managed system group);
    describes everywhere (IAM cannot scope them)."""
    return policy(
        statement(["autoscaling:SetDesiredCapacity", "autoscaling:TerminateInstanceInAutoScalingGroup"], "*",
                  condition={"StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}},
                  sid="ScaleOwnGroups"),
        statement(["autoscaling:DescribeAutoScalingGroups", "autoscaling:DescribeAutoScalingInstances",
                   "autoscaling:DescribeLaunchConfigurations", "autoscaling:DescribeScalingActivities",
                   "autoscaling:DescribeTags", "ec2:DescribeImages", "ec2:DescribeInstanceTypes",
                   "ec2:DescribeLaunchTemplateVersions", "ec2:GetInstanceTypesFromInstanceRequirements",
                   "eks:DescribeNodegroup"], "*", sid="Describe"),
    )


# Groups without their own tag (EKS's system node group): the autoscaler's default.
DEFAULT_UNNEEDED_TIME = "10m"


def helm_values(cluster_name: str, region: str, role_arn: str, kubernetes_version: str) -> dict:
    return {
        "cloudProvider": "aws",
        "awsRegion": region,
        "autoDiscovery": {"clusterName": cluster_name},
        "image": {"repository": versions.CLUSTER_AUTOSCALER_IMAGE,
                  "tag": versions.cluster_autoscaler_image_tag(kubernetes_version)},
        "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT,
                                    "annotations": {"eks.amazonaws.com/role-arn": role_arn}}},
        "extraArgs": {
            "balance-similar-node-groups": True,
            "expander": "least-waste",
            "scale-down-unneeded-time": DEFAULT_UNNEEDED_TIME,
            "scale-down-delay-after-add": "10m",
            "skip-nodes-with-local-storage": False,
            "skip-nodes-with-system-pods": True,
        },
        "nodeSelector": {"gpu-platform.io/role": "system"},
        "resources": {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "600Mi"}},
    }


@dataclass
class ClusterAutoscalerArgs:
    cluster_name: str
    region: str
    kubernetes_version: str
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer_url: pulumi.Input[str]
    k8s_provider: k8s.Provider
    tags: Mapping[str, str]


class ClusterAutoscaler(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterAutoscalerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:ClusterAutoscaler", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = irsa_role(f"{name}-role", args.oidc_provider_arn, args.oidc_issuer_url, NAMESPACE, SERVICE_ACCOUNT, args.tags, child)
        iam.RolePolicy(f"{name}-role-policy", role=role.id, policy=json.dumps(autoscaler_policy(args.cluster_name)), opts=child)
        # The rules the image of this minor needs beyond the pinned chart's ClusterRole (resource.k8s.io from
        # 1.35: without them it never syncs its informers and never scales; components/autoscaler_rbac.py).
        extra_rbac = autoscaler_rbac.register(name, NAMESPACE, SERVICE_ACCOUNT, args.kubernetes_version,
                                              pulumi.ResourceOptions(parent=self, provider=args.k8s_provider))
        # helm_release: from $GPU_PLATFORM_LOCAL_CHARTS when set, like every other chart (the deploy installs
        # the archives preflight checked).
        self.release = helm_release(
            f"{name}-release", versions.CLUSTER_AUTOSCALER, NAMESPACE,
            role.arn.apply(lambda arn: helm_values(args.cluster_name, args.region, arn, args.kubernetes_version)),
            pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=extra_rbac),
            release_name="cluster-autoscaler", atomic=True)
        self.register_outputs({"roleArn": role.arn})
