"""Hygiene: every resource whose type takes tags or labels (per the provider schemas) carries the owner /
cost-center / environment tags or labels that billing reports group by (advisory: a missing tag costs
attribution, not money)."""

from __future__ import annotations

import json
from typing import Any

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, ResourceValidationPolicy

from gpu_platform.policies.props import as_list, get, is_true, tags_of
from gpu_platform.policies.taggable import taggable

DEFAULT_REQUIRED_KEYS = ["owner", "cost-center", "environment"]

# Every resource type whose provider schema gives it tags or labels -> where they live (the installed
# SDKs, read by gpu_platform/policies/taggable.py; not a hand-kept list that misses e.g. ECR repositories).
BILLABLE = taggable()


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
        report_violation(f"{args.name} takes tags or labels but its {what} ({where}) lack {', '.join(missing)}.", None)


cost_allocation_tags = ResourceValidationPolicy(
    name="cost-allocation-tags",
    description="Every resource that takes tags or labels carries owner, cost-center and environment.",
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=PolicyConfigSchema(properties={
        "requiredKeys": {"type": "array", "items": {"type": "string"}, "default": DEFAULT_REQUIRED_KEYS,
                         "description": "Tag/label keys every taggable resource needs (cost-center matches "
                                        "costCenter and cost_center too)."},
    }),
    validate=_validate_tags,
)


POLICIES = [cost_allocation_tags]
