"""Deploys the job-aware scale-in protection controller (controllers/scale_in_protection).

No image is built: the controller is one Python file shipped in a ConfigMap and run by a pinned
public python image. Its only dependency, boto3 (with its own dependencies), is installed by an init
container from PyPI with `pip --require-hashes` into an emptyDir: every wheel pinned by version and
SHA-256 in components/aws/versions.py, so what runs is exactly what was reviewed, with no registry
of our own to build, push to or secure. The pod runs as non-root with a read-only root filesystem.

IAM (IRSA): SetInstanceProtection on the GPU groups only, DescribeAutoScalingGroups (not scopable).
Kubernetes RBAC: list pods, list nodes, patch nodes (the scale-down-disabled annotation).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pulumi
import pulumi_kubernetes as k8s
from pulumi_aws import iam

from components.aws import versions
from components.aws.iam import irsa_role, policy, statement
from components.cluster import POOL_LABEL

NAMESPACE = "kube-system"
NAME = "gpu-scale-in-protection"
CONTROLLER_SOURCE = Path(__file__).resolve().parents[2] / "controllers" / "scale_in_protection" / "controller.py"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": "gpu-platform"}


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


def source_files() -> dict[str, str]:
    """What the ConfigMap ships: the controller module and its hash-pinned requirements."""
    return {"controller.py": CONTROLLER_SOURCE.read_text(encoding="utf-8"),
            "requirements.txt": versions.controller_requirements()}


def render_deployment(role_arn: str, asg_names: Sequence[str], region: str, grace_seconds: int,
                      interval_seconds: int = 30) -> dict:
    """The controller's Deployment manifest (validated strictly in the tests). The pod template
    carries a hash of the shipped source, so a new controller version rolls the pod."""
    digest = hashlib.sha256(json.dumps(source_files(), sort_keys=True).encode()).hexdigest()
    hardened = {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "runAsUser": 65532, "runAsGroup": 65532, "capabilities": {"drop": ["ALL"]},
    }
    deps = {"name": "deps", "mountPath": "/deps"}
    app = {"name": "app", "mountPath": "/app", "readOnly": True}
    tmp = {"name": "tmp", "mountPath": "/tmp"}
    env_common = [{"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}, {"name": "HOME", "value": "/tmp"}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},  # one writer of protection state at a time
            "selector": {"matchLabels": dict(LABELS)},
            "template": {
                "metadata": {"labels": dict(LABELS), "annotations": {"gpu-platform.io/role-arn": role_arn,
                                                                 "gpu-platform.io/source-sha256": digest}},
                "spec": {
                    "serviceAccountName": NAME,
                    "automountServiceAccountToken": True,
                    "priorityClassName": "system-cluster-critical",
                    "nodeSelector": {"gpu-platform.io/role": "system"},
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": 65532},
                    "initContainers": [{
                        "name": "install-deps",
                        "image": versions.CONTROLLER_IMAGE,
                        "command": ["python", "-m", "pip", "install", "--no-cache-dir", "--no-deps", "--require-hashes",
                                    "--only-binary=:all:", "--target", "/deps", "-r", "/app/requirements.txt"],
                        "env": env_common + [{"name": "PIP_DISABLE_PIP_VERSION_CHECK", "value": "1"}],
                        "securityContext": hardened,
                        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "256Mi"}},
                        "volumeMounts": [deps, app, tmp],
                    }],
                    "containers": [{
                        "name": "controller",
                        "image": versions.CONTROLLER_IMAGE,
                        "command": ["python", "/app/controller.py"],
                        "env": env_common + [
                            {"name": "PYTHONPATH", "value": "/deps"},
                            {"name": "ASG_NAMES", "value": ",".join(asg_names)},
                            {"name": "GRACE_SECONDS", "value": str(grace_seconds)},
                            {"name": "INTERVAL_SECONDS", "value": str(interval_seconds)},
                            {"name": "AWS_REGION", "value": region},
                            {"name": "NODE_SELECTOR", "value": POOL_LABEL},
                        ],
                        "securityContext": hardened,
                        "resources": {"requests": {"cpu": "20m", "memory": "96Mi"}, "limits": {"memory": "256Mi"}},
                        "livenessProbe": {
                            "exec": {"command": ["sh", "-c", "test $(( $(date +%s) - $(stat -c %Y /tmp/heartbeat) )) -lt 600"]},
                            "initialDelaySeconds": 120, "periodSeconds": 60,
                        },
                        "volumeMounts": [deps, app, tmp],
                    }],
                    "volumes": [
                        {"name": "app", "configMap": {"name": NAME}},
                        {"name": "deps", "emptyDir": {"sizeLimit": "256Mi"}},
                        {"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}},
                    ],
                },
            },
        },
    }


@dataclass
class ScaleInProtectionArgs:
    region: str
    asg_names: Sequence[str]
    asg_arns: Sequence[pulumi.Input[str]]
    grace_minutes: int
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
        cm = k8s.core.v1.ConfigMap(f"{name}-source", metadata=meta, data=source_files(), opts=kube)
        manifest = role.arn.apply(lambda arn: render_deployment(arn, list(args.asg_names), args.region, args.grace_minutes * 60))
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", metadata=meta, spec=manifest.apply(lambda m: m["spec"]),
            opts=pulumi.ResourceOptions(parent=self, provider=args.k8s_provider, depends_on=[sa, cr, crb, cm]))
        self.register_outputs({"roleArn": role.arn})
