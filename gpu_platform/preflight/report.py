"""The readable plan: resource counts by type, then a tree with the inputs a reviewer cares about."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from gpu_platform.preflight.runner import Plan, PlannedResource, whole_numbers

# Inputs worth a reviewer's eye, by resource type suffix or anywhere (first match wins per key).
INTERESTING = (
    "region", "location", "zone", "type", "instanceType", "machineType", "label", "image",
    "inboundPolicy", "outboundPolicy", "inbounds", "diskEncryption", "ipv4", "port",
    "chart", "version", "namespace", "minSize", "maxSize", "desiredCapacity",
    "initialNodeCount", "autoscaling", "nodeConfig", "privateClusterConfig",
    "masterAuthorizedNetworksConfig", "amount", "thresholdRules", "threshold", "metricName",
    "vpcConfig", "metadataOptions", "blockDeviceMappings", "mixedInstancesPolicy", "capacityRebalance",
    "versioning", "acl", "provisioner", "reclaimPolicy", "imageId", "limitAmount", "notifications",
    "eventPattern", "kmsMasterKeyId", "spec",
)
MAX_VALUE = 160
EKS_ADDON = "aws:eks/addon:Addon"


def counts(plan: Plan) -> list[tuple[str, int]]:
    return sorted(Counter(r.type for r in plan.resources).items(), key=lambda kv: (-kv[1], kv[0]))


def _short(value: Any) -> str:
    text = json.dumps(whole_numbers(value), sort_keys=True, separators=(",", ":"))
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 3] + "..."


def highlights(r: PlannedResource) -> list[str]:
    inputs = r.inputs
    if r.type.startswith("kubernetes:helm.sh"):
        repo = (inputs.get("repositoryOpts") or {}).get("repo")
        where = f" repo={repo}" if repo else ""  # OCI charts carry their registry in the chart reference
        return [f"chart={inputs.get('chart')}@{inputs.get('version')}{where} namespace={inputs.get('namespace')}"]
    out = []
    if r.type == EKS_ADDON:
        # The EKS add-on versions are dated data: the plan says which row pins the version and how old its source is.
        from gpu_platform.data.eks_addon_versions import provenance

        name, version = inputs.get("addonName"), inputs.get("addonVersion")
        out.append(f"addon={name}@{version} ({provenance(str(name), str(version))})")
    for key in INTERESTING:
        if key in inputs and inputs[key] not in (None, "", [], {}):
            out += _lines(key, inputs[key])
    return out


def _lines(key: str, value: Any, depth: int = 0) -> list[str]:
    """key=value, or one line per sub-key when a mapping is too long to read on one line."""
    text = json.dumps(whole_numbers(value), sort_keys=True, separators=(",", ":"))
    if len(text) <= MAX_VALUE or not isinstance(value, dict) or depth >= 2:
        return [f"{key}={_short(value)}"]
    return [line for sub, v in sorted(value.items()) if v not in (None, "", [], {})
            for line in _lines(f"{key}.{sub}", v, depth + 1)]


def tree(plan: Plan) -> list[str]:
    children: dict[str | None, list[PlannedResource]] = {}
    urns = {r.urn for r in plan.resources}
    for r in plan.resources:
        parent = r.parent if r.parent in urns else None
        children.setdefault(parent, []).append(r)
    lines: list[str] = []

    def walk(parent: str | None, depth: int) -> None:
        # Sorted: registration order depends on when outputs resolve, and plans are diffed in review.
        for r in sorted(children.get(parent, []), key=lambda c: (c.name, c.type)):
            short_type = r.type.split(":")[-1]
            lines.append(f"{'  ' * depth}- {r.name} ({short_type})")
            for h in highlights(r):
                lines.append(f"{'  ' * depth}    {h}")
            walk(r.urn, depth + 1)

    walk(None, 0)
    return lines


def render_plan(plan: Plan) -> str:
    lines = [f"Plan for stack {plan.stack}: {len(plan.resources)} resource{'s' if len(plan.resources) != 1 else ''}",
             "", "Resources by type:"]
    width = max((len(t) for t, _ in counts(plan)), default=10)
    lines += [f"  {n:>4}  {t:<{width}}" for t, n in counts(plan)]
    lines += ["", "Resource tree:"] + ["  " + line for line in tree(plan)]
    return "\n".join(lines)
