"""Cost guardrails: interruptible GPU capacity, pools that scale to zero, ceilings on GPUs and on the
monthly bill at full capacity, and budget alerts on every stack with GPUs."""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, StackValidationPolicy

from policies.pools import GKE_CLUSTER, LINODE_INSTANCE, Node, clouds_of, gpu_pools, node_groups, stack_nodes
from policies.props import get

DEFAULT_MAX_GPUS = 64
DEFAULT_MAX_MONTHLY_USD = 50_000
SPEND_RULE_NAME = "gpu-spend-run-rate"  # the Linode budget guardrail, created by the platform layer


def _config(args: Any, key: str, default: Any) -> Any:
    value = (args.get_config() or {}).get(key)
    return default if value is None else value


# ---------------------------------------------------------------------------------------------
# Interruptible capacity
# ---------------------------------------------------------------------------------------------


def _validate_interruptible(args, report_violation) -> None:
    for pool in gpu_pools(stack_nodes(args.resources)):
        if pool.capacity in ("spot", "preemptible") or pool.on_demand_approved:
            continue
        what = "an on-demand share" if pool.capacity == "mixed" else "on-demand capacity"
        hint = {
            "linode": "Linode has no spot market: set approvedOnDemand: true on the pool (tag on-demand-approved:true)",
            "gcp": "set capacity: spot or preemptible, or approvedOnDemand: true (label on-demand-approved=true)",
            "aws": "set capacity: spot (mixed-instances, 0 % on-demand), or approvedOnDemand: true (tag on-demand-approved=true)",
        }[pool.cloud]
        report_violation(
            f"GPU pool '{pool.name}' ({pool.cloud}, {', '.join(pool.instance_types) or 'unknown type'}) runs {what} "
            f"without approval; {hint}.", pool.urn)


interruptible_gpu_capacity = StackValidationPolicy(
    name="gpu-interruptible-capacity",
    description="GPU pools use interruptible capacity (spot or preemptible) unless the pool is explicitly "
                "approved for on-demand (pool option approvedOnDemand: label/tag on-demand-approved=true).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_interruptible,
)


# ---------------------------------------------------------------------------------------------
# Scale to zero
# ---------------------------------------------------------------------------------------------


def _validate_scale_to_zero(args, report_violation) -> None:
    exempt = set(_config(args, "exemptPools", []))
    for pool in gpu_pools(stack_nodes(args.resources)):
        if pool.cloud == "linode" or pool.name in exempt:
            continue  # kubeadm pools on Linode are fixed-size by design (components.linode.config)
        if not pool.autoscaled:
            report_violation(f"GPU pool '{pool.name}' ({pool.cloud}) has a fixed size of {pool.max_nodes} nodes; "
                             "give it autoscaling with a minimum of 0.", pool.urn)
        elif pool.min_nodes != 0:
            report_violation(f"GPU pool '{pool.name}' ({pool.cloud}) keeps at least {pool.min_nodes} node(s) "
                             "running when idle; set minNodes: 0 (or list the pool in exemptPools).", pool.urn)


gpu_pools_scale_to_zero = StackValidationPolicy(
    name="gpu-pools-scale-to-zero",
    description="GPU node pools on GKE and AWS autoscale down to zero nodes when no job needs them.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "exemptPools": {"type": "array", "items": {"type": "string"}, "default": [],
                        "description": "Pool names allowed to keep a warm floor of nodes."},
    }),
    validate=_validate_scale_to_zero,
)


# ---------------------------------------------------------------------------------------------
# GPU ceiling
# ---------------------------------------------------------------------------------------------


def _validate_gpu_ceiling(args, report_violation) -> None:
    limit = int(_config(args, "maxGpus", DEFAULT_MAX_GPUS))
    pools = gpu_pools(stack_nodes(args.resources))
    total = 0
    for pool in pools:
        if pool.max_gpus is None:
            report_violation(f"GPU pool '{pool.name}': cannot count its GPUs ({'; '.join(pool.problems)}); "
                             "use an instance type from the price catalog (costs/catalog).", pool.urn)
            continue
        total += pool.max_gpus
    if total > limit:
        parts = ", ".join(f"{p.name}: {p.max_nodes} x {p.gpus_per_node}" for p in pools if p.max_gpus is not None)
        report_violation(f"The stack can scale to {total} GPUs ({parts}), over the ceiling of {limit} (maxGpus).")


gpu_count_ceiling = StackValidationPolicy(
    name="gpu-count-ceiling",
    description="The stack's GPU pools at full size (max nodes x GPUs per node, from the catalog) stay "
                "under a ceiling on total GPUs.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "maxGpus": {"type": "integer", "minimum": 0, "default": DEFAULT_MAX_GPUS,
                    "description": "Most GPUs the stack may scale to."},
    }),
    validate=_validate_gpu_ceiling,
)


# ---------------------------------------------------------------------------------------------
# Monthly cost ceiling (reads costs.estimator)
# ---------------------------------------------------------------------------------------------


def _price_overrides() -> dict[str, dict[str, Any]]:
    """The stack's priceOverrides (gpu-platform:priceOverrides in PULUMI_CONFIG, as the CLI hands a
    policy pack the stack config), in the catalog's {"<cloud>/<type>": {...}} form."""
    try:
        config = json.loads(os.environ.get("PULUMI_CONFIG") or "{}")
        raw = config.get("gpu-platform:priceOverrides")
        raw = json.loads(raw) if isinstance(raw, str) else raw
    except (TypeError, ValueError):
        return {}
    cloud = config.get("gpu-platform:cloud")
    out = {}
    for key, value in (raw or {}).items():
        if isinstance(value, dict):
            out[key if "/" in key else f"{cloud}/{key}"] = value
    return out


def _dearest(cloud: str, types: list[str], capacity: str, catalog) -> Optional[str]:
    """The instance type of a multi-type pool that costs most per node (the worst case)."""
    best, best_price = None, -1.0
    for name in types:
        t = catalog.instance(cloud, name)
        p = t.price(capacity) if t is not None else None
        if t is not None and p is None:
            p = t.on_demand
        if p is not None and p.usd_per_hour > best_price:
            best, best_price = name, p.usd_per_hour
    return best


def stack_shapes(nodes: list[Node]):
    """One costs.estimator.StackShape per cloud the stack runs on, read from its resources."""
    from costs.catalog import load_catalog
    from costs.estimator import NodeGroup, PoolShape, StackShape

    overrides = _price_overrides()
    catalog = load_catalog(overrides or None)
    shapes = []
    for cloud in sorted(clouds_of(nodes)):
        pools, system = [], []
        for group in node_groups(nodes) + ([p for p in gpu_pools(nodes) if p.cloud == "linode"]):
            if group.cloud != cloud:
                continue
            capacity = "on-demand" if group.capacity == "mixed" else group.capacity
            itype = _dearest(cloud, group.instance_types, capacity, catalog)
            if itype is None:
                raise ValueError(f"pool '{group.name}': no instance type of {group.instance_types} is in the price catalog")
            t = catalog.instance(cloud, itype)
            if t.price(capacity) is None:
                capacity = "on-demand"
            if group.gpus_per_node:
                pools.append(PoolShape(group.name, itype, capacity, group.min_nodes, group.max_nodes))
            elif group.max_nodes:
                system.append(NodeGroup(group.name, itype, group.max_nodes, capacity))
        region = None
        if cloud == "linode":
            gpu_urns = {u for p in gpu_pools(nodes) for u in p.urns}
            plain = Counter(str(get(n.props, "type")) for n in nodes if n.type == LINODE_INSTANCE and n.urn not in gpu_urns)
            system += [NodeGroup("control-plane and system", t, c) for t, c in sorted(plain.items())]
            region = next((get(n.props, "region") for n in nodes if n.type == LINODE_INSTANCE), None)
            lbs = sum(1 for n in nodes if n.type == "linode:index/nodeBalancer:NodeBalancer")
            shapes.append(StackShape(cloud, region, tuple(pools), system_nodes=tuple(system), load_balancers=lbs,
                                     price_overrides=overrides))
        elif cloud == "gcp":
            location = next((get(n.props, "location") for n in nodes if n.type == GKE_CLUSTER), None)
            nats = sum(1 for n in nodes if n.type == "gcp:compute/routerNat:RouterNat")
            shapes.append(StackShape(cloud, location, tuple(pools), system_nodes=tuple(system), nat_gateways=nats,
                                     managed_control_plane=any(n.type == GKE_CLUSTER for n in nodes),
                                     price_overrides=overrides))
        else:
            nats = sum(1 for n in nodes if n.type == "aws:ec2/natGateway:NatGateway")
            lbs = sum(1 for n in nodes if n.type in ("aws:lb/loadBalancer:LoadBalancer", "aws:alb/loadBalancer:LoadBalancer"))
            shapes.append(StackShape(cloud, None, tuple(pools), system_nodes=tuple(system), nat_gateways=nats,
                                     load_balancers=lbs, managed_control_plane=any(n.type == "aws:eks/cluster:Cluster" for n in nodes),
                                     price_overrides=overrides))
    return [s for s in shapes if s.gpu_pools or s.system_nodes]


def _validate_monthly_cost(args, report_violation) -> None:
    from costs.estimator import EstimateError, estimate

    limit = float(_config(args, "maxMonthlyUsd", DEFAULT_MAX_MONTHLY_USD))
    nodes = stack_nodes(args.resources)
    try:
        estimates = [estimate(shape) for shape in stack_shapes(nodes)]
    except (EstimateError, ValueError) as exc:
        report_violation(f"Cannot estimate the stack's monthly cost: {exc}.")
        return
    total = sum(e.full_monthly_usd for e in estimates)
    if total > limit:
        lines = sorted((ln for e in estimates for ln in e.lines), key=lambda ln: -ln.monthly_usd)
        top = "; ".join(f"{ln.name}: ${ln.monthly_usd:,.0f}" for ln in lines[:4])
        report_violation(f"At full capacity the stack costs about ${total:,.0f}/month, over the ceiling of "
                         f"${limit:,.0f} (maxMonthlyUsd). Largest items: {top}.")


monthly_cost_ceiling = StackValidationPolicy(
    name="monthly-cost-ceiling",
    description="The estimated monthly cost at full capacity (every pool at max nodes all month, plus fixed "
                "parts, priced by costs/estimator from the catalog) stays under a ceiling.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "maxMonthlyUsd": {"type": "number", "minimum": 0, "default": DEFAULT_MAX_MONTHLY_USD,
                          "description": "Most USD per month the stack may cost at full capacity."},
    }),
    validate=_validate_monthly_cost,
)


# ---------------------------------------------------------------------------------------------
# Budget alerts
# ---------------------------------------------------------------------------------------------


def _length(value: Any) -> int:
    try:
        return len(value) if value is not None and not isinstance(value, str) else 0
    except TypeError:
        return 0


def _has_budget_alerts(cloud: str, nodes: list[Node]) -> bool:
    for n in nodes:
        if cloud == "linode" and n.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule":
            if get(n.props, "metadata.name") == SPEND_RULE_NAME and _length(get(n.props, "spec.groups")):
                return True
        if cloud == "gcp" and n.type == "gcp:billing/budget:Budget":
            if _length(get(n.props, "thresholdRules")):
                return True
        if cloud == "aws" and n.type == "aws:budgets/budget:Budget":
            if _length(get(n.props, "notifications")):
                return True
        if cloud == "aws" and n.type == "aws:cloudwatch/metricAlarm:MetricAlarm":
            if (get(n.props, "namespace") == "AWS/Billing" and get(n.props, "metricName") == "EstimatedCharges"
                    and _length(get(n.props, "alarmActions"))):
                return True
    return False


_BUDGET_HINT = {
    "linode": f"a PrometheusRule named {SPEND_RULE_NAME} (Linode has no billing API; the platform's monitoring must be on)",
    "gcp": "a gcp.billing.Budget with threshold rules",
    "aws": "an aws.budgets.Budget with notifications, or a CloudWatch alarm with actions on AWS/Billing EstimatedCharges",
}


def _validate_budget_alerts(args, report_violation) -> None:
    nodes = stack_nodes(args.resources)
    for cloud in sorted({p.cloud for p in gpu_pools(nodes)}):
        if not _has_budget_alerts(cloud, nodes):
            report_violation(f"The stack has GPU capacity on {cloud} but no budget alert: it needs {_BUDGET_HINT[cloud]}.")


budget_alerts_required = StackValidationPolicy(
    name="budget-alerts-required",
    description="A stack with GPU capacity has budget alerts: a GCP billing budget, an AWS budget or billing "
                "alarm, or on Linode the platform's gpu-spend-run-rate Prometheus rule.",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_budget_alerts,
)


POLICIES = [interruptible_gpu_capacity, gpu_pools_scale_to_zero, gpu_count_ceiling, monthly_cost_ceiling,
            budget_alerts_required]

