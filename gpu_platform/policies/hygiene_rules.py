"""Hygiene: every billable resource carries the owner / cost-center / environment tags or labels that
billing reports group by (advisory: a missing tag costs attribution, not money)."""

from __future__ import annotations

import json
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy

from gpu_platform.policies.props import as_list, get, is_true, tags_of

DEFAULT_REQUIRED_KEYS = ["owner", "cost-center", "environment"]

# Billable resource types -> where their tags/labels live.
BILLABLE: dict[str, str] = {
    # Linode: flat "key:value" tag strings.
    "linode:index/instance:Instance": "tags",
    "linode:index/nodeBalancer:NodeBalancer": "tags",
    "linode:index/volume:Volume": "tags",
    "linode:index/lkeCluster:LkeCluster": "tags",
    "linode:index/reservedIp:ReservedIp": "tags",
    # GCP: label maps.
    "gcp:container/cluster:Cluster": "resourceLabels",
    "gcp:container/nodePool:NodePool": "nodeConfig.resourceLabels",
    "gcp:compute/instance:Instance": "labels",
    "gcp:compute/disk:Disk": "labels",
    "gcp:compute/address:Address": "labels",
    "gcp:storage/bucket:Bucket": "labels",
    # AWS: tag maps (Auto Scaling groups: a list of {key, value, propagateAtLaunch}).
    "aws:autoscaling/group:Group": "tags",
    "aws:eks/cluster:Cluster": "tags",
    "aws:eks/nodeGroup:NodeGroup": "tags",
    "aws:ec2/instance:Instance": "tags",
    "aws:ec2/natGateway:NatGateway": "tags",
    "aws:ec2/eip:Eip": "tags",
    "aws:ebs/volume:Volume": "tags",
    "aws:s3/bucket:Bucket": "tags",
    "aws:s3/bucketV2:BucketV2": "tags",
    "aws:lb/loadBalancer:LoadBalancer": "tags",
    "aws:kms/key:Key": "tags",
    "aws:sqs/queue:Queue": "tags",
}


def _norm(key: str) -> str:
    """owner / cost-center / costCenter / cost_center compare equal."""
    return key.lower().replace("-", "").replace("_", "")


def _provider_setting(props: Any, key: str) -> Any:
    """A provider input; object-valued provider settings travel as JSON text (the SDKs serialize them)."""
    value = get(props, key)
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _provider_defaults(args: Any) -> dict[str, str]:
    """Tags/labels the resource's explicit provider adds (aws defaultTags, gcp defaultLabels)."""
    prov = args.provider
    if prov is None:
        return {}
    if prov.resource_type == "pulumi:providers:aws":
        return tags_of(_provider_setting(prov.props, "defaultTags") or {}, "tags")
    if prov.resource_type == "pulumi:providers:gcp":
        return tags_of({"labels": _provider_setting(prov.props, "defaultLabels") or {}}, "labels")
    return {}


def _validate_tags(args, report_violation) -> None:
    where = BILLABLE.get(args.resource_type)
    if where is None:
        return
    required = list((args.get_config() or {}).get("requiredKeys", DEFAULT_REQUIRED_KEYS))
    if args.resource_type == "aws:autoscaling/group:Group":
        # Provider default tags never reach an ASG's instances; only tags propagated at launch do.
        tags = {str(get(t, "key")): str(get(t, "value", "")) for t in as_list(get(args.props, "tags"))
                if is_true(get(t, "propagateAtLaunch"))}
        what = "tags propagated at launch"
    else:
        tags = {**_provider_defaults(args), **tags_of(args.props, where)}
        what = "tags" if "abels" not in where else "labels"
    present = {_norm(k) for k, v in tags.items() if v}
    missing = [k for k in required if _norm(k) not in present]
    if missing:
        report_violation(f"{args.name} is billable but its {what} ({where}) lack {', '.join(missing)}.", None)


cost_allocation_tags = ResourceValidationPolicy(
    name="cost-allocation-tags",
    description="Every billable resource carries owner, cost-center and environment tags or labels.",
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=PolicyConfigSchema(properties={
        "requiredKeys": {"type": "array", "items": {"type": "string"}, "default": DEFAULT_REQUIRED_KEYS,
                         "description": "Tag/label keys every billable resource needs (cost-center matches "
                                        "costCenter and cost_center too)."},
    }),
    validate=_validate_tags,
)


POLICIES = [cost_allocation_tags]
