"""Deploys the job-aware scale-in protection controller (gpu_platform/controllers/scale_in_protection).

The controller runs from its own image, built from gpu_platform/controllers/scale_in_protection/Dockerfile
(python slim base pinned by digest, boto3 and its dependencies installed at build time with
--require-hashes): at `pulumi up` into the stack's ECR repository (components/aws/registry.py), or
published by .github/workflows/controller-image.yml on a release tag and named by
aws.scaleInController.image. Either way it is deployed by digest. Nothing is installed when the pod
starts, so a cluster without internet egress is protected like any other. The pod
meets the Kubernetes "restricted" Pod Security Standard: non-root, no privilege escalation, all
capabilities dropped, RuntimeDefault seccomp, read-only root filesystem.

What each guard stops (docs/quickstart-aws.md, "Scale-in protection"): the node annotation
`cluster-autoscaler.kubernetes.io/scale-down-disabled` is what keeps the cluster-autoscaler off a
busy node; instance scale-in protection only stops the group's own scale-in (a lowered desired
capacity, AZ rebalancing) - not TerminateInstanceInAutoScalingGroup (how the autoscaler removes a
node), Spot interruptions or health-check replacements.

IAM (IRSA): SetInstanceProtection on the GPU groups only, DescribeAutoScalingGroups (not scopable).
Kubernetes RBAC: list pods, list nodes, patch nodes (the scale-down-disabled annotation).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import iam

from gpu_platform.components.aws.iam import irsa_role, policy, statement
from gpu_platform.config import base
from gpu_platform.components.aws.scale_down import ScaleDownTiming
from gpu_platform.components.cluster import POOL_LABEL

NAMESPACE = "kube-system"
NAME = "gpu-scale-in-protection"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpu-platform"}
# registry/repository[:tag]@sha256:<64 hex>; the registry host is required (no Docker Hub shorthand).
IMAGE_BY_DIGEST = base.IMAGE_BY_DIGEST
RUN_AS = 65532  # the image's USER (gpu_platform/controllers/scale_in_protection/Dockerfile)


def protection_policy(asg_arns: Sequence[str]) -> dict:
    return policy(
        statement(["autoscaling:SetInstanceProtection"], list(asg_arns), sid="ProtectGpuGroups"),
        statement(["autoscaling:DescribeAutoScalingGroups"], "*", sid="Describe"),
    )


def cluster_role_rules() -> list[dict]:
    return [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "patch"]},
    ]


def render_deployment(image: str, role_arn: str, asg_names: Sequence[str], region: str, timing: ScaleDownTiming) -> dict:
    """The controller's Deployment manifest (validated strictly in the tests). The image is taken
    by digest, so a new controller version is a new digest in the stack config and rolls the pod."""
    if not re.fullmatch(IMAGE_BY_DIGEST, image):
        raise ValueError(f"controller image {image!r}: a reference by digest, registry/repository@sha256:<64 hex>")
    hardened = {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer of protection state at a time
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS), "annotations": {"gpu-platform.io/role-arn": role_arn}},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": True,
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"gpu-platform.io/role": "system"},
                    "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                                        "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "controller",
                        "image": image,
                        # The image's entrypoint runs the controller; nothing is installed at start.
                        "env": [
                            {"name": "ASG_NAMES", "value": ",".join(asg_names)},
                            {"name": "GRACE_SECONDS", "value": str(timing.controller_grace_seconds)},
                            {"name": "INTERVAL_SECONDS", "value": str(timing.controller_interval_seconds)},
                            {"name": "AWS_REGION", "value": region},
                            {"name": "NODE_SELECTOR", "value": POOL_LABEL},
                        ],
                        "securityContext": hardened,
                        "resources": {"requests": {"cpu": "20m", "memory": "96Mi"},
                                      "limits": {"cpu": "250m", "memory": "256Mi"}},
                        "livenessProbe": {
                            # The controller touches /tmp/heartbeat after every successful cycle.
                            "exec": {"command": ["sh", "-c", "test $(( $(date +%s) - $(stat -c %Y /tmp/heartbeat) )) -lt 600"]},
                            "initialDelaySeconds": 120, "periodSeconds": 60,
                        },
                        # Ready once a cycle has completed (it serves no traffic: the pod's Ready condition says
                        # it is protecting nodes).
                        "readinessProbe": {
                            "exec": {"command": ["sh", "-c", "test -f /tmp/heartbeat"]}, "periodSeconds": 30,
                        },
                        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
                    }],
                    "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
                },
            },
        },
    }


@dataclass
class ScaleInProtectionArgs:
    region: str
    asg_names: Sequence[str]
    asg_arns: Sequence[pulumi.Input[str]]
    image: pulumi.Input[str]  # by digest: aws.scaleInController.image, or the image built into ECR
    timing: ScaleDownTiming
    oidc_provider_arn: pulumi.Input[str]
    oidc_issuer_url: pulumi.Input[str]
    k8s_provider: k8s.Provider
    tags: Mapping[str, str]


class ScaleInProtection(pulumi.ComponentResource):
    def __init__(self, name: str, args: ScaleInProtectionArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:aws:ScaleInProtection", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        kube = pulumi.ResourceOptions(parent=self, provider=args.k8s_provider)
        role = irsa_role(f"{name}-role", args.oidc_provider_arn, args.oidc_issuer_url, NAMESPACE, NAME, args.tags, child)
        iam.RolePolicy(f"{name}-role-policy", role=role.id,
                       policy=pulumi.Output.all(*args.asg_arns).apply(lambda arns: json.dumps(protection_policy(arns))),
                       opts=child)
        meta = {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)}
        sa = k8s.core.v1.ServiceAccount(f"{name}-service-account", metadata={
            **meta, "annotations": {"eks.amazonaws.com/role-arn": role.arn}}, opts=kube)
        cr = k8s.rbac.v1.ClusterRole(f"{name}-cluster-role", metadata={"name": NAME, "labels": dict(LABELS)},
                                     rules=cluster_role_rules(), opts=kube)
        crb = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding", metadata={"name": NAME, "labels": dict(LABELS)},
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
            subjects=[{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}], opts=kube)
        manifest = pulumi.Output.all(role.arn, args.image).apply(
            lambda v: render_deployment(v[1], v[0], list(args.asg_names), args.region, args.timing))
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=meta, spec=manifest.apply(lambda m: m["spec"]),
            opts=pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=[sa, cr, crb]))
        self.register_outputs({"roleArn": role.arn})
