"""Cost guardrails: interruptible GPU capacity, pools that scale to zero, ceilings on GPUs and on the
monthly bill at full capacity, and budget alerts on every stack with GPUs."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from typing import Any, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, StackValidationPolicy

from gpu_platform.policies.pools import (GKE_CLUSTER, LINODE_INSTANCE, Node, clouds_of, gpu_pools, node_groups,
                                         own_node_groups, stack_nodes)
from gpu_platform.policies.props import get

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
        approve = "approvedOnDemand: {reason: ..., approver: ...} on the pool"
        hint = {
            "linode": f"Linode has no spot market: set {approve}",
            "gcp": f"set capacity: spot or preemptible, or {approve}",
            "aws": f"set capacity: spot (mixed-instances, 0 % on-demand), or {approve}",
            "kubernetes": f"set capacity: spot where the node group runs on spot capacity, or {approve}",
        }[pool.cloud]
        why = f" ({pool.approval_problem})" if pool.approval_problem else ""
        report_violation(
            f"GPU pool '{pool.name}' ({pool.cloud}, {', '.join(pool.instance_types) or 'unknown type'}) runs {what} "
            f"without approval{why}; {hint}.", pool.urn)


interruptible_gpu_capacity = StackValidationPolicy(
    name="gpu-interruptible-capacity",
    description="GPU pools use interruptible capacity (spot or preemptible) unless the pool is explicitly "
                "approved for on-demand with a reason and an approver (pool option approvedOnDemand: {reason, "
                "approver}; tags/labels on-demand-approved, on-demand-approver, on-demand-reason).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_interruptible,
)


# ---------------------------------------------------------------------------------------------
# Scale to zero
# ---------------------------------------------------------------------------------------------


def exemptions(entries: Any) -> tuple[dict[str, dict[str, str]], list[str]]:
    """exemptPools entries: {pool, reason, approver, until} exempt a pool when the reason is a real one, the
    approver a person and `until` a date at most a year ahead (gpu_platform/config/approvals.py: an exemption
    from a guardrail is reviewed like every exception; one without an expiry held for ever); a bare name, or an
    entry whose reason, approver or date does not hold, exempts nothing and is reported."""
    from gpu_platform.config.approvals import approval_problems

    valid: dict[str, dict[str, str]] = {}
    unexplained: list[str] = []
    for e in entries or []:
        if isinstance(e, str):
            unexplained.append(e)
            continue
        pool = str(e.get("pool") or "").strip()
        if pool and not approval_problems(dict(e), need_until=True):
            valid[pool] = {"reason": str(e["reason"]).strip(), "approver": str(e["approver"]), "until": str(e["until"])}
        else:
            unexplained.append(pool or "?")
    return valid, unexplained


def _validate_scale_to_zero(args, report_violation) -> None:
    exempt, unexplained = exemptions(_config(args, "exemptPools", []))
    for pool in gpu_pools(stack_nodes(args.resources)):
        if (pool.cloud == "linode" and not pool.autoscaled) or pool.name in exempt:
            # Fixed-size Linode pools (minNodes == maxNodes) are sized Pulumi instances; autoscaled ones
            # (the node-group provider, gpu_platform/components/linode/node_groups.py) are held to this rule.
            continue
        note = (" Its exemptPools entry has no reason, approver and until that hold (a real reason; an e-mail address "
                "or @github-handle; the last day it holds, YYYY-MM-DD, at most a year ahead), so it exempts nothing: "
                "write it as {pool, reason, approver, until}." if pool.name in unexplained else "")
        if not pool.autoscaled:
            report_violation(f"GPU pool '{pool.name}' ({pool.cloud}) has a fixed size of {pool.max_nodes} nodes; "
                             f"give it autoscaling with a minimum of 0.{note}", pool.urn)
        elif pool.min_nodes != 0:
            report_violation(f"GPU pool '{pool.name}' ({pool.cloud}) keeps at least {pool.min_nodes} node(s) "
                             f"running when idle; set minNodes: 0 (or list the pool in exemptPools with a reason, "
                             f"an approver and until).{note}", pool.urn)


gpu_pools_scale_to_zero = StackValidationPolicy(
    name="gpu-pools-scale-to-zero",
    description="GPU node pools on GKE, AWS and autoscaled Linode pools scale down to zero nodes when no job needs them.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "exemptPools": {"type": "array", "default": [],
                        "items": {"anyOf": [
                            {"type": "string"},
                            {"type": "object", "required": ["pool", "reason", "approver"], "additionalProperties": False,
                             "properties": {"pool": {"type": "string", "minLength": 1},
                                            "reason": {"type": "string", "minLength": 10},
                                            "approver": {"type": "string", "minLength": 2},
                                            "until": {"type": "string"}}}]},
                        "description": "Pools allowed to keep a warm floor of nodes: {pool, reason, approver, until} "
                                       "(a bare name, or an entry without until, exempts nothing and is reported)."},
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
                             "use an instance type from the price catalog (gpu_platform/costs/catalog).", pool.urn)
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
# Monthly cost ceiling (reads gpu_platform.costs.estimator)
# ---------------------------------------------------------------------------------------------


# Preflight passes the stack config in a file (GPU_PLATFORM_STACK_CONFIG_FILE) rather than only in
# PULUMI_CONFIG (an environment string is capped at 128 KiB on Linux); the CLI passes PULUMI_CONFIG.
CAPACITY_KEYS = {"onDemand": "on-demand", "spot": "spot", "preemptible": "preemptible"}
DEFAULT_MIN_OVERRIDE_RATIO = 0.5
# Full capacity may cost this many times the monthly budget (pools are busy part of the month); more is
# a budget nobody can keep (a $1 budget on a $5.7k stack).
DEFAULT_MAX_BUDGET_OVERRUN = 4.0
# The budget may be at most this many times the full-capacity cost. The lowest budget alert is 25 % of the
# budget on AWS and GCP (components/aws/billing.py BILLING_PERCENTS, components/gcp/budget.py THRESHOLDS) and
# 50 % of it on Linode (the GPU spend run-rate, components/platform/monitoring.py): above 4 times the most the
# stack can spend, no alert can ever fire (a $10M budget on a $602 stack).
DEFAULT_MAX_BUDGET_HEADROOM = 4.0


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number the pack accepts")


def _stack_config() -> dict[str, Any]:
    from gpu_platform.policies.stack_settings import raw_config

    return raw_config()


def _raw_price_overrides() -> tuple[Optional[str], dict[str, Any]]:
    config = _stack_config()
    try:
        raw = config.get("gpu-platform:priceOverrides")
        raw = json.loads(raw, parse_constant=_refuse_constant) if isinstance(raw, str) else raw
    except ValueError:
        return config.get("gpu-platform:cloud"), {"(unreadable)": None}
    return config.get("gpu-platform:cloud"), raw if isinstance(raw, dict) else {}


def _usable(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _price_overrides() -> dict[str, dict[str, Any]]:
    """The stack's priceOverrides (gpu-platform:priceOverrides in the stack config the pack is handed),
    in the catalog's {"<cloud>/<type>": {...}} form; only finite positive prices (others are reported
    by the monthly-cost-ceiling policy, never passed on)."""
    cloud, raw = _raw_price_overrides()
    out = {}
    for key, value in raw.items():
        if isinstance(value, dict):
            clean = {k: v for k, v in value.items() if k in CAPACITY_KEYS and _usable(v)}
            if clean:
                out[key if "/" in key else f"{cloud}/{key}"] = clean
    return out


def override_problems(min_ratio: float) -> list[str]:
    """Overrides that are not prices, or far below what the catalog says the cheapest interruptible
    capacity costs (a typo or a wish would otherwise talk the cost ceiling around)."""
    from gpu_platform.costs.catalog import load_catalog

    cloud, raw = _raw_price_overrides()
    base = load_catalog()
    problems = []
    for type_name, value in sorted(raw.items()):
        if not isinstance(value, dict):
            problems.append(f"priceOverrides.{type_name} is not a mapping of capacity to $/hour")
            continue
        t = base.instance(str(cloud), type_name.split("/", 1)[-1])
        floor_prices = [p.usd_per_hour for c in ("spot", "preemptible") if t is not None and (p := t.price(c))]
        list_price = t.price("on-demand") if t is not None else None
        if t is not None and not floor_prices and list_price:
            floor_prices = [list_price.usd_per_hour]
        for key, price in sorted(value.items()):
            where = f"priceOverrides.{type_name}.{key}"
            if not _usable(price):
                problems.append(f"{where} = {price!r} is not a positive finite $/hour")
            elif key == "onDemand" and list_price and price < min_ratio * list_price.usd_per_hour:
                # An on-demand price is bounded by the on-demand list price, not the (far lower) spot one.
                problems.append(f"{where} = ${price:g}/hour is below {min_ratio:.0%} of the catalog's on-demand "
                                f"list price for {type_name} (${list_price.usd_per_hour:g}/hour); update the "
                                "catalog with a sourced price instead (minOverrideRatio)")
            elif key != "onDemand" and floor_prices and price < min_ratio * min(floor_prices):
                problems.append(f"{where} = ${price:g}/hour is below {min_ratio:.0%} of the catalog's cheapest "
                                f"interruptible price for {type_name} (${min(floor_prices):g}/hour); update the "
                                "catalog with a sourced price instead (minOverrideRatio)")
    return problems


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


def config_extras(cloud: str) -> dict[str, Any]:
    """What the bill takes from the stack's config rather than its resources: the checkpoint bucket
    (costs.checkpointGib, costs.checkpointGibPerDay, checkpointRetentionDays), NAT traffic (costs.natGibPerMonth)
    and the extended-support fee of its Kubernetes minor on the day, exactly as preflight's bill reads them
    (StackShape.from_config, estimator.extended_support). Empty when the pack was handed no config that
    validates (a pack run on a partial config): those lines are then listed as not modelled."""
    from gpu_platform.costs.estimator import StackShape, extended_support
    from gpu_platform.data.versions_calendar import today
    from gpu_platform.policies.stack_settings import stack_settings

    cfg = stack_settings().config
    if cfg is None or cfg.cloud != cloud:
        return {}
    shape = StackShape.from_config(cfg)
    fee, basis = extended_support(cfg.cloud, cfg.kubernetes_version, today())
    return dict(checkpoint_gib=shape.checkpoint_gib, checkpoint_gib_per_day=shape.checkpoint_gib_per_day,
                checkpoint_retention_days=shape.checkpoint_retention_days, nat_gib_per_month=shape.nat_gib_per_month,
                extended_support_usd_per_hour=fee, extended_support_basis=basis, region=shape.region)


def stack_shapes(nodes: list[Node], chart_storage_gib: float = 0.0, chart_load_balancers: int = 0,
                 with_config: bool = True):
    """One gpu_platform.costs.estimator.StackShape per cloud the stack runs on, read from its resources (and,
    `with_config`, the bucket, NAT traffic and extended-support fee from its config: config_extras).
    `chart_storage_gib`, `chart_load_balancers`: the persistent volumes and LoadBalancer Services the
    platform's charts create, which no resource shows (preflight renders the charts and passes them in the
    monthly-cost-ceiling's settings of the same names)."""
    from gpu_platform.costs.catalog import load_catalog
    from gpu_platform.costs.estimator import NodeGroup, PoolShape, StackShape

    overrides = _price_overrides()
    catalog = load_catalog(overrides or None)
    shapes = []
    storage = ((("the platform's charts (rendered by preflight: chartStorageGib)", float(chart_storage_gib)),)
               if chart_storage_gib > 0 else None)
    for cloud in sorted(clouds_of(nodes) - {"kubernetes"}):  # priced by its own node groups: own_nodes_estimate
        extras = config_extras(cloud) if with_config else {}
        # The stack's region prices its instances (catalog.Catalog.in_region): the resources' own where they say it.
        config_region = extras.pop("region", None)
        extras.update(pvc_gib=storage, pvc_basis="chartStorageGib, from the rendered charts" if storage else "")
        pools, system = [], []
        for group in node_groups(nodes) + ([p for p in gpu_pools(nodes) if p.cloud == "linode"]):
            if group.cloud != cloud:
                continue
            capacity = "on-demand" if group.capacity == "mixed" else group.capacity
            itype = _dearest(cloud, group.instance_types, capacity, catalog)
            if itype is None:
                raise ValueError(f"pool '{group.name}': no instance type of {group.instance_types} is in the price catalog")
            t = catalog.instance(cloud, itype)
            if not t.priced_somewhere(capacity):  # Spot of p4d is priced in eu-west-1, not us-east-1: the bill says
                capacity = "on-demand"
            if group.gpus_per_node:
                pools.append(PoolShape(group.name, itype, capacity, group.min_nodes, group.max_nodes,
                                       boot_disk_gib=group.boot_disk_gib))
            elif group.max_nodes:
                system.append(NodeGroup(group.name, itype, group.max_nodes, capacity, boot_disk_gib=group.boot_disk_gib))
        region = None
        if cloud == "linode":
            gpu_urns = {u for p in gpu_pools(nodes) for u in p.urns}
            plain = Counter(str(get(n.props, "type")) for n in nodes if n.type == LINODE_INSTANCE and n.urn not in gpu_urns)
            system += [NodeGroup("control-plane and system", t, c) for t, c in sorted(plain.items())]
            region = next((get(n.props, "region") for n in nodes if n.type == LINODE_INSTANCE), None)
            lbs = sum(1 for n in nodes if n.type == "linode:index/nodeBalancer:NodeBalancer") + chart_load_balancers
            shapes.append(StackShape(cloud, region, tuple(pools), system_nodes=tuple(system), load_balancers=lbs,
                                     price_overrides=overrides, **extras))
        elif cloud == "gcp":
            location = next((get(n.props, "location") for n in nodes if n.type == GKE_CLUSTER), None)
            nat_nodes = [n for n in nodes if n.type == "gcp:compute/routerNat:RouterNat"]
            nats = len(nat_nodes)
            # As preflight's bill counts them (preflight/costs.py _network_and_keys): the NAT's addresses, KMS keys,
            # the checkpoint bucket's soft-delete retention.
            extras.setdefault("public_ipv4", sum(len(get(n.props, "natIps") or []) or 1 for n in nat_nodes))
            extras.setdefault("kms_keys", sum(1 for n in nodes if n.type == "gcp:kms/cryptoKey:CryptoKey"))
            for n in nodes:
                seconds = get(n.props, "softDeletePolicy.retentionDurationSeconds") if n.type == "gcp:storage/bucket:Bucket" else None
                if seconds is not None:
                    extras.setdefault("soft_delete_days", int(seconds) / 86400)
            shapes.append(StackShape(cloud, location, tuple(pools), system_nodes=tuple(system), nat_gateways=nats,
                                     managed_control_plane=any(n.type == GKE_CLUSTER for n in nodes),
                                     load_balancers=chart_load_balancers or None, price_overrides=overrides, **extras))
        else:
            nats = sum(1 for n in nodes if n.type == "aws:ec2/natGateway:NatGateway")
            extras.setdefault("public_ipv4", sum(1 for n in nodes if n.type == "aws:ec2/eip:Eip"))
            extras.setdefault("kms_keys", sum(1 for n in nodes if n.type == "aws:kms/key:Key"))
            lbs = sum(1 for n in nodes if n.type in ("aws:lb/loadBalancer:LoadBalancer", "aws:alb/loadBalancer:LoadBalancer"))
            shapes.append(StackShape(cloud, config_region, tuple(pools), system_nodes=tuple(system), nat_gateways=nats,
                                     load_balancers=lbs + chart_load_balancers,
                                     managed_control_plane=any(n.type == "aws:eks/cluster:Cluster" for n in nodes),
                                     price_overrides=overrides, **extras))
    return [s for s in shapes if s.gpu_pools or s.system_nodes]


def own_nodes_estimate(nodes: list[Node]):
    """The estimate of a cluster the stack does not create, from its node-groups ConfigMap: each group at its own
    price per node-hour (the stack's, never the catalog's). None when there is no such cluster or its groups carry
    no price (nothing to estimate: preflight's cost report says so); ValueError when only some carry one."""
    from gpu_platform.costs.catalog import OWN_NODES, InstanceType, Price, load_catalog
    from gpu_platform.costs.estimator import NodeGroup, PoolShape, StackShape, estimate

    groups = own_node_groups(nodes, include_cpu=True)
    if not groups:
        return None
    unreadable = [p for g in groups for p in g.problems]
    if unreadable:
        raise ValueError(f"node groups of the cluster: {'; '.join(unreadable)}")
    priced = [g for g in groups if g.usd_per_hour is not None]
    if not priced:
        return None
    if len(priced) != len(groups):
        raise ValueError(f"node groups {', '.join(g.name for g in groups if g.usd_per_hour is None)} have no price "
                         f"while {', '.join(g.name for g in priced)} have one")
    types, pools, system = {}, [], []
    for g in groups:
        itype = f"{g.name}/{g.instance_types[0]}"  # one type per group: its price belongs to the group's capacity
        price = Price(float(g.usd_per_hour), f"stack file: node group {g.name}", _dt.date.today().isoformat())
        types[itype] = InstanceType(cloud=OWN_NODES, name=itype, gpus=g.gpus_per_node or 0, gpu_model=None,
                                    gpu_memory_gib=None, vcpus=g.vcpus, memory_gib=g.memory_gib, accelerator=None,
                                    on_demand=price if g.capacity == "on-demand" else None,
                                    spot=price if g.capacity == "spot" else None, preemptible=None,
                                    regions=None, zones=None)
        if g.role == "gpu":
            pools.append(PoolShape(g.name, itype, g.capacity, g.min_nodes, g.max_nodes))
        elif g.max_nodes:
            system.append(NodeGroup(g.name, itype, g.min_nodes, g.capacity, max_count=g.max_nodes))
    catalog = load_catalog().with_instances(OWN_NODES, types)
    return estimate(StackShape(OWN_NODES, None, tuple(pools), system_nodes=tuple(system)), catalog)


def stack_estimates(nodes: list[Node], chart_storage_gib: float = 0.0, chart_load_balancers: int = 0) -> list:
    """One gpu_platform.costs.estimator.Estimate per cloud the stack runs on (stack_shapes, with the charts'
    volumes and load balancers preflight hands over) and, on a cluster the stack does not create, one from its
    node groups' own prices (none without prices)."""
    from gpu_platform.costs.estimator import estimate

    out = [estimate(shape) for shape in stack_shapes(nodes, chart_storage_gib, chart_load_balancers)]
    own = own_nodes_estimate(nodes)
    return out + ([own] if own is not None else [])


def _validate_monthly_cost(args, report_violation) -> None:
    from gpu_platform.costs.estimator import EstimateError

    limit = float(_config(args, "maxMonthlyUsd", DEFAULT_MAX_MONTHLY_USD))
    for problem in override_problems(float(_config(args, "minOverrideRatio", DEFAULT_MIN_OVERRIDE_RATIO))):
        report_violation(f"{problem}.")
    nodes = stack_nodes(args.resources)
    storage = float(_config(args, "chartStorageGib", 0) or 0)
    balancers = int(_config(args, "chartLoadBalancers", 0) or 0)
    try:
        estimates = stack_estimates(nodes, storage, balancers)
    except (EstimateError, ValueError) as exc:
        report_violation(f"Cannot estimate the stack's monthly cost: {exc}.")
        return
    # The same bill as preflight's cost report, to the cent (lines rounded to cents, summed).
    total = round(sum(e.full_monthly_usd for e in estimates), 2)
    lines = sorted((ln for e in estimates for ln in e.lines), key=lambda ln: -ln.monthly_usd)
    top = "; ".join(f"{ln.name}: ${ln.monthly_usd:,.2f}" for ln in lines[:4])
    left_out = sorted({m for e in estimates for m in e.not_modelled if m.startswith(NOT_SEEN)})
    if left_out:
        top += f" (not counted: {'; '.join(left_out)})"
    if total > limit:
        report_violation(f"At full capacity the stack costs ${total:,.2f}/month, over the ceiling of "
                         f"${limit:,.0f} (maxMonthlyUsd). Largest items: {top}.")
    from gpu_platform.policies.stack_settings import stack_settings

    settings = stack_settings()
    for problem in settings.problems:
        report_violation(f"Cannot read the stack's budget settings: {problem}.")
    factor = float(_config(args, "maxBudgetOverrun", DEFAULT_MAX_BUDGET_OVERRUN))
    budget = settings.monthly_budget_usd
    if budget and total > factor * budget:
        report_violation(f"At full capacity the stack costs ${total:,.2f}/month, {total / budget:,.1f} times its "
                         f"monthly budget of ${budget:,.0f} (monthlyBudgetUsd); at most {factor:g} times is allowed "
                         f"(maxBudgetOverrun). Raise the budget to what the stack may spend, or lower maxNodes. "
                         f"Largest items: {top}.")
    headroom = float(_config(args, "maxBudgetHeadroom", DEFAULT_MAX_BUDGET_HEADROOM))
    if budget and total > 0 and budget > headroom * total:
        report_violation(f"The monthly budget of ${budget:,.0f} (monthlyBudgetUsd) is {budget / total:,.1f} times the "
                         f"most the stack can cost (${total:,.2f}/month at full capacity); at most {headroom:g} "
                         f"times is allowed (maxBudgetHeadroom): no budget alert can ever fire, as the stack cannot "
                         f"spend even 25 % of it (${budget / 4:,.0f}; the lowest alert is at 25 % on AWS and GCP, 50 % "
                         f"on Linode). Set monthlyBudgetUsd to what the stack may spend, at most ${headroom * total:,.0f}.")


# Lines of the bill the pack cannot price when preflight did not hand it the rendered charts or the stack's
# config (estimator.not_modelled texts): named in the message, so a lower figure than preflight's says why.
NOT_SEEN = ("persistent volumes of the platform", "checkpoint bucket", "NAT data processing", "extended-support fee",
            "boot disks")


monthly_cost_ceiling = StackValidationPolicy(
    name="monthly-cost-ceiling",
    description="The estimated monthly cost at full capacity (every pool at max nodes all month, plus fixed "
                "parts, priced by gpu_platform/costs/estimator from the catalog) stays under a ceiling.",
    enforcement_level=EnforcementLevel.MANDATORY,
    config_schema=PolicyConfigSchema(properties={
        "maxMonthlyUsd": {"type": "number", "minimum": 0, "default": DEFAULT_MAX_MONTHLY_USD,
                          "description": "Most USD per month the stack may cost at full capacity."},
        "minOverrideRatio": {"type": "number", "minimum": 0, "maximum": 1, "default": DEFAULT_MIN_OVERRIDE_RATIO,
                             "description": "A priceOverrides price below this share of the catalog's price "
                                            "(on-demand list price for onDemand, cheapest interruptible price for "
                                            "spot and preemptible) is a violation."},
        "maxBudgetOverrun": {"type": "number", "minimum": 1, "default": DEFAULT_MAX_BUDGET_OVERRUN,
                             "description": "Most times the stack's monthlyBudgetUsd its full-capacity cost may be."},
        "chartStorageGib": {"type": "number", "minimum": 0, "default": 0,
                            "description": "GiB of persistent volumes the platform's charts request (PVCs, StatefulSet "
                                           "and Prometheus claims), which no resource shows: preflight sets it from "
                                           "the rendered charts. It only adds to the estimate."},
        "chartLoadBalancers": {"type": "integer", "minimum": 0, "default": 0,
                               "description": "Services of type LoadBalancer the platform's charts create (preflight "
                                              "sets it from the rendered charts). It only adds to the estimate."},
        "maxBudgetHeadroom": {"type": "number", "minimum": 1, "default": DEFAULT_MAX_BUDGET_HEADROOM,
                              "description": "Most times its full-capacity cost the stack's monthlyBudgetUsd may be "
                                             "(above it no budget alert can fire)."},
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
        if cloud in ("linode", "kubernetes") and n.type == "kubernetes:monitoring.coreos.com/v1:PrometheusRule":
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
    "kubernetes": f"a PrometheusRule named {SPEND_RULE_NAME} (an existing cluster has no billing API here; the platform's "
                  "monitoring must be on)",
}


# Clouds whose only budget alert is the platform's Prometheus rule: it leaves the cluster only as Alertmanager's
# e-mail, which Alertmanager sends only through platform.alertSmtp (components/platform/monitoring.py,
# alertmanager_config: without a relay every route ends at the null receiver). On GCP and AWS the cloud's own
# budget mails alertEmails (Cloud Monitoring channels, SNS) with or without a relay.
_RELAYED_CLOUDS = ("linode", "kubernetes")


_RELAY_WHY = {
    "linode": "Linode has no budget or billing-alert API",
    "kubernetes": "The program uses no billing API of an existing cluster's owner",
}


def _check_relay(cloud: str, settings: Any, report_violation) -> None:
    from gpu_platform.policies.stack_settings import NAMESPACE

    where = "Linode" if cloud == "linode" else "cloud kubernetes"
    if settings.platform_problem:
        report_violation(f"The stack has GPU capacity on {where}, whose only budget alert is Alertmanager's e-mail, but "
                         f"whether it sets platform.alertSmtp cannot be read: {settings.platform_problem}.")
    elif settings.alert_smtp is None:
        report_violation(
            f"The stack has GPU capacity on {where} but its budget alerts reach no one: {NAMESPACE}:platform has no "
            f"alertSmtp. {_RELAY_WHY[cloud]}, so the {SPEND_RULE_NAME} alert is the only budget alert, and "
            "Alertmanager mails it to alertEmails only through that SMTP relay. Add to gpu-platform:platform: "
            "alertSmtp: {smarthost: <host>:<port>, from: <sender address>} (and username and passwordSecret, a "
            "Secret in the monitoring namespace with key `password`, if the relay needs a login); "
            "docs/costs-and-alerts.md.")


def _validate_budget_alerts(args, report_violation) -> None:
    from gpu_platform.policies.stack_settings import NAMESPACE, raw_config, stack_settings

    nodes = stack_nodes(args.resources)
    pools = gpu_pools(nodes)
    clouds = sorted({p.cloud for p in pools})
    # Alerts reach people through the stack's alertEmails (billing budgets, Alertmanager); without any,
    # every alarm above fires into the void. Checked when the pack is handed the stack's config.
    has_config = any(str(k).startswith(f"{NAMESPACE}:") for k in raw_config())
    settings = stack_settings() if has_config else None
    for cloud in clouds:
        if cloud == "kubernetes" and not any(getattr(p, "usd_per_hour", None) is not None for p in pools
                                             if p.cloud == "kubernetes"):
            continue  # no node prices: no spend to alert on (preflight says the stack has no bill)
        if not _has_budget_alerts(cloud, nodes):
            report_violation(f"The stack has GPU capacity on {cloud} but no budget alert: it needs {_BUDGET_HINT[cloud]}.")
        if cloud in _RELAYED_CLOUDS and settings is not None:
            _check_relay(cloud, settings, report_violation)
    if clouds and settings is not None and not settings.alert_emails:
        report_violation(f"The stack has GPU capacity but its budget alerts reach nobody: set {NAMESPACE}:alertEmails "
                         "to at least one address that reads them.")


budget_alerts_required = StackValidationPolicy(
    name="budget-alerts-required",
    description="A stack with GPU capacity has budget alerts: a GCP billing budget, an AWS budget or billing "
                "alarm, or on Linode (and cloud kubernetes) the platform's gpu-spend-run-rate Prometheus rule; and "
                "they reach someone (alertEmails; on Linode and cloud kubernetes also platform.alertSmtp, the relay "
                "Alertmanager mails them through).",
    enforcement_level=EnforcementLevel.MANDATORY,
    validate=_validate_budget_alerts,
)


POLICIES = [interruptible_gpu_capacity, gpu_pools_scale_to_zero, gpu_count_ceiling, monthly_cost_ceiling,
            budget_alerts_required]

