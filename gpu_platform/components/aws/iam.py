"""IAM documents (pure functions: dicts in, dicts out) and a small helper to make a role.

Trust and permission policies are rendered here so tests can read them without running Pulumi.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional, Sequence

import pulumi
from pulumi_aws import iam


def partition(region: str) -> str:
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    if region.startswith("cn-"):
        return "aws-cn"
    return "aws"


def managed_policy_arn(region: str, name: str) -> str:
    return f"arn:{partition(region)}:iam::aws:policy/{name}"


def service_trust_policy(service: str) -> dict[str, Any]:
    """Trust for an AWS service principal (eks.amazonaws.com, ec2.amazonaws.com)."""
    return {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
    }


def irsa_trust_policy(oidc_provider_arn: str, issuer_url: str, namespace: str, service_account: str) -> dict[str, Any]:
    """IAM Roles for Service Accounts: only this one Kubernetes service account may assume the role."""
    host = issuer_url.removeprefix("https://")
    return {
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Federated": oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {"StringEquals": {
                f"{host}:sub": f"system:serviceaccount:{namespace}:{service_account}",
                f"{host}:aud": "sts.amazonaws.com",
            }},
        }],
    }


def statement(actions: Sequence[str], resources: Sequence[str] | str, condition: Optional[Mapping[str, Any]] = None,
              sid: Optional[str] = None) -> dict[str, Any]:
    out: dict[str, Any] = {"Effect": "Allow", "Action": list(actions),
                           "Resource": list(resources) if not isinstance(resources, str) else resources}
    if condition:
        out["Condition"] = dict(condition)
    if sid:
        out["Sid"] = sid
    return out


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def irsa_role(name: str, oidc_provider_arn: pulumi.Input[str], issuer_url: pulumi.Input[str], namespace: str,
              service_account: str, tags: Mapping[str, str], opts: pulumi.ResourceOptions) -> iam.Role:
    """A role that exactly one service account can assume through the cluster's OIDC provider."""
    trust = pulumi.Output.all(oidc_provider_arn, issuer_url).apply(
        lambda a: json.dumps(irsa_trust_policy(a[0], a[1], namespace, service_account)))
    return iam.Role(name, assume_role_policy=trust, tags=dict(tags),
                    description=f"IRSA role of {namespace}/{service_account}", opts=opts)
