"""Cost reports for preflight: the whole bill as text and JSON, the budget comparison, the catalog's age, and
a chart for decisions. Pure and fast; matplotlib is imported only inside render_figure (Agg canvas, no pyplot).

The chart's data (`chart_data`) is computed apart from the drawing so that tests check what is plotted
(title, series, budget line) rather than pixels."""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from gpu_platform.costs.catalog import HOURS_PER_MONTH, Catalog, load_catalog, load_gpu_speeds
from gpu_platform.costs.estimator import Estimate, PoolShape, StackShape, catalog_age, estimate
from gpu_platform.costs.node_boot import NODE_BOOT_MINUTES
from gpu_platform.project import python_m, source_checkout

UTILISATIONS = (0.10, 0.25, 0.50, 0.75, 1.00)  # the JSON table
CHART_UTILISATIONS = tuple(i / 20 for i in range(21))  # 0 %, 5 %, ... 100 %: the idle floor shows at 0 %
CATALOG_MAX_AGE_DAYS = 90

Alternatives = Union[Sequence[Estimate], Mapping[str, Estimate]]


def _m(x: float) -> str:
    return f"${x:,.2f}"


def _unit(ln) -> str:
    return {"hour": "/h", "GiB-month": "/GiB-mo", "GB": "/GB"}.get(ln.unit, "/" + ln.unit)


@dataclass(frozen=True)
class Overhead:
    """billed GPU-hours / useful GPU-hours of a real autoscaler (>= 1) and how it was obtained."""

    factor: float = 1.0
    basis: str = "a perfect autoscaler (no boot, scale-down or preemption overhead)"


# ---------------------------------------------------------------------------------------------
# Budget and catalog age
# ---------------------------------------------------------------------------------------------


def budget_comparison(est: Estimate, budget_usd: Optional[float], overhead: Overhead = Overhead()) -> dict[str, Any]:
    if not budget_usd:
        return {}
    if not est.priced:  # nothing to compare: no share, no utilisation at which it is reached
        return {"monthlyBudgetUsd": budget_usd, "comparable": False}
    u_exp = est.expected_utilization
    at_exp = est.monthly_at_utilisation(u_exp, overhead.factor) if u_exp is not None else None
    reach = est.utilisation_at_budget(budget_usd, overhead.factor)
    return {
        "monthlyBudgetUsd": budget_usd,
        "idleFloorUsd": round(est.idle_monthly_usd, 2),
        "idleFloorShare": round(est.idle_monthly_usd / budget_usd, 4),
        "fullCapacityUsd": round(est.full_monthly_usd, 2),
        "fullCapacityShare": round(est.full_monthly_usd / budget_usd, 4),
        "expectedUtilization": u_exp,
        "expectedUsd": None if at_exp is None else round(at_exp, 2),
        "expectedShare": None if at_exp is None else round(at_exp / budget_usd, 4),
        "budgetReachedAtUtilization": None if reach is None else round(reach, 4),
        "overheadFactor": round(overhead.factor, 4),
        "overheadBasis": overhead.basis,
    }


def render_budget(est: Estimate, budget_usd: Optional[float], overhead: Overhead = Overhead()) -> list[str]:
    b = budget_comparison(est, budget_usd, overhead)
    if not b:
        return ["  budget: no monthlyBudgetUsd given"]
    if not est.priced:
        return [f"  budget (monthlyBudgetUsd): {_m(budget_usd)} / month: not compared (the stack has no node prices)"]
    out = [f"  budget (monthlyBudgetUsd): {_m(budget_usd)} / month"]

    def verdict(share: float) -> str:
        return "OVER the budget" if share > 1 else "within the budget"

    out.append(f"    idle floor     {_m(b['idleFloorUsd']):>12} = {100 * b['idleFloorShare']:5.1f} % of it")
    out.append(f"    full capacity  {_m(b['fullCapacityUsd']):>12} = {100 * b['fullCapacityShare']:5.1f} % of it: "
               f"{verdict(b['fullCapacityShare'])}")
    if b["expectedUsd"] is not None:
        out.append(f"    at the expected {100 * b['expectedUtilization']:.0f} % GPU utilisation (costs.expectedUtilization): "
                   f"{_m(b['expectedUsd'])} = {100 * b['expectedShare']:.1f} %: {verdict(b['expectedShare'])}")
    reach = b["budgetReachedAtUtilization"]
    if reach is None:
        out.append("    the budget is not reached even at 100 % GPU utilisation")
    elif reach == 0.0:
        out.append("    the budget is reached at 0 % GPU utilisation: the idle floor alone exceeds it")
    else:
        out.append(f"    the budget is reached at {100 * reach:.0f} % GPU utilisation over the month")
    out.append(f"    (autoscaler overhead x{overhead.factor:.2f}: {overhead.basis})")
    return out


def catalog_age_info(est: Estimate, today: Optional[_dt.date] = None) -> Optional[dict[str, Any]]:
    """How old the estimate's prices are; None without prices (an unpriced estimate)."""
    dates = est.price_dates()
    if not dates:
        return None
    day = today or _dt.date.today()
    age, oldest = catalog_age(dates, day)
    stale = sorted({ln.resource for ln in est.lines if (day - _dt.date.fromisoformat(ln.date)).days > CATALOG_MAX_AGE_DAYS})
    return {"oldestPriceDate": oldest, "newestPriceDate": max(dates), "ageDays": age,
            "maxAgeDays": CATALOG_MAX_AGE_DAYS, "stale": age > CATALOG_MAX_AGE_DAYS, "staleResources": stale,
            "today": day.isoformat()}


def stale_warning(est: Estimate, today: Optional[_dt.date] = None) -> Optional[str]:
    a = catalog_age_info(est, today)
    if a is None or not a["stale"]:
        return None
    stale = f"prices older than {CATALOG_MAX_AGE_DAYS} days ({', '.join(a['staleResources'])})"
    if source_checkout() is None:  # an installed package: `costs refresh` would rewrite site-packages' catalog
        return (f"{stale}: give the prices you pay in the stack file's gpu-platform:priceOverrides (docs/cost-model.md) "
                "before trusting this bill")
    return f"{stale}: refresh them ({python_m('gpu_platform.costs')} refresh --help) before trusting this bill"


def render_catalog_age(est: Estimate, today: Optional[_dt.date] = None, seen: frozenset[str] = frozenset()) -> list[str]:
    a = catalog_age_info(est, today)
    if a is None:
        return []
    out = [f"  catalog age: prices dated {a['oldestPriceDate']} .. {a['newestPriceDate']}; the oldest is "
           f"{a['ageDays']} days old"]
    stale = stale_warning(est, today)
    if stale and stale not in seen:
        out.append(f"  warning: {stale}")
    elif stale:
        out[-1] += f"; {len(a['staleResources'])} older than {CATALOG_MAX_AGE_DAYS} days (warned before; -v repeats it)"
    return out


def notes(est: Estimate, today: Optional[_dt.date] = None) -> list[str]:
    """The bill's standing notes: what is not modelled and the stale-price warning. Preflight shows them
    in full the first time for a stack (and with -v), then one line while they stay the same."""
    return [*est.not_modelled, *filter(None, [stale_warning(est, today)])]


# ---------------------------------------------------------------------------------------------
# Text and JSON
# ---------------------------------------------------------------------------------------------


def render_cost_summary(est: Estimate, budget_usd: Optional[float] = None, overhead: Overhead = Overhead(),
                        today: Optional[_dt.date] = None, seen: frozenset[str] = frozenset()) -> str:
    """The whole monthly bill line by line with its assumptions, what is not modelled, the budget
    comparison and the catalog's age, as plain text. Notes in `seen` (shown before) take one line. Without prices
    (cloud kubernetes without node prices) it says so and what is unpriced, and prints no figure."""
    if not est.priced:
        return render_unpriced_summary(est, budget_usd, seen)
    out = [f"Cost estimate for {est.name} ({est.cloud}{', ' + est.region if est.region else ''}; "
           f"{HOURS_PER_MONTH:.0f} h/month)",
           f"  idle floor (no job running, pools at minNodes): {_m(est.idle_monthly_usd)} / month "
           f"({est.idle_gpus} GPUs)",
           f"  full capacity (pools at maxNodes, all month):  {_m(est.full_monthly_usd)} / month "
           f"({est.full_gpus} GPUs)"]
    if est.usd_per_gpu_hour is not None:
        out.append(f"  $ per GPU-hour at full use: {_m(est.usd_per_gpu_hour)} "
                   f"(GPU machines alone {_m(est.gpu_only_usd_per_gpu_hour or 0)})")
    out.append("  the whole bill:")
    w = max((len(ln.name) for ln in est.lines), default=10)
    out.append(f"    {'item':<{w}}  {'qty idle..full':>16}  {'unit price':>14}  {'idle $/mo':>11}  {'full $/mo':>11}")
    for ln in est.lines:
        qty = f"{ln.idle_quantity:g}..{ln.quantity:g}"
        price = f"{ln.unit_usd_per_hour:.4f}{_unit(ln)}"
        out.append(f"    {ln.name:<{w}}  {qty:>16}  {price:>14}  {ln.idle_monthly_usd:>11,.2f}  {ln.monthly_usd:>11,.2f}")
        if ln.assumption:
            out.append(f"    {'':<{w}}    assumes: {ln.assumption}")
    if est.not_modelled and set(est.not_modelled) <= seen:
        out.append(f"    {'not modelled':<{w}}  {len(est.not_modelled)} items, as on the last run (cost.json "
                   "`notModelled`; -v lists them)")
    else:
        out.append(f"    {'not modelled':<{w}}  {'':>16}  {'':>14}  {'-':>11}  {'-':>11}")
        for item in est.not_modelled:
            out.append(f"    {'':<{w}}    - {item}")
    out.append("  prices: " + "; ".join(sorted({f"{ln.resource} ({ln.date}{', ' + ln.status if ln.status else ''})"
                                                for ln in est.lines})))
    out += render_priced_in(est)
    out += render_catalog_age(est, today, seen)
    out += render_budget(est, budget_usd, overhead)
    for w_ in est.warnings:
        out.append(f"  warning: {w_}")
    return "\n".join(out)


def priced_in(est: Estimate) -> list[tuple[str, list[str], str, str]]:
    """(whose prices, the resources priced with them, oldest date, newest date), the stack's own region first:
    which region's prices the bill used, and how old they are."""
    groups: dict[str, list[Any]] = {}
    for ln in est.lines:
        if ln.priced_in:
            groups.setdefault(ln.priced_in, []).append(ln)
    order = sorted(groups, key=lambda k: (k != est.region, k == "priceOverrides", k))
    return [(k, sorted({ln.resource for ln in groups[k]}), min(ln.date for ln in groups[k]),
             max(ln.date for ln in groups[k])) for k in order]


def render_priced_in(est: Estimate) -> list[str]:
    """One line per source of prices: '  priced in eu-west-1: g5.xlarge, m6i.large (dated 2026-11-28)'."""
    out = []
    for where, resources, oldest, newest in priced_in(est):
        dated = oldest if oldest == newest else f"{oldest} .. {newest}"
        label = "priced with" if where == "priceOverrides" else "priced in"
        out.append(f"  {label} {where}: {', '.join(resources)} (dated {dated})")
    return out


def render_unpriced_summary(est: Estimate, budget_usd: Optional[float] = None, seen: frozenset[str] = frozenset()) -> str:
    """The bill of a stack without prices: none. What has no price, how to give one, the GPUs, what is not
    modelled anyway, and that the budget is not compared."""
    out = [f"Cost estimate for {est.name} ({est.cloud}): NOT ESTIMATED: the stack gives no node prices",
           "  without a price per node-hour there is no bill, no GPU spend run-rate alert and no cost guardrail; "
           "nothing is made up in their place",
           "  unpriced:"]
    out += [f"    - {u}" for u in est.unpriced]
    out.append("  to price them: kubernetes.nodeTypes.<type>.usdPerHour {onDemand, spot} in the stack file (what one "
               "node costs you per hour)")
    out.append(f"  GPUs: {est.idle_gpus} at idle (pools at minNodes), {est.full_gpus} at full capacity"
               + (f" ({', '.join(est.gpu_models)})" if est.gpu_models else ""))
    if est.not_modelled and set(est.not_modelled) <= seen:
        out.append(f"  not modelled: {len(est.not_modelled)} items, as on the last run (cost.json `notModelled`; -v lists them)")
    else:
        out.append("  not modelled either way:")
        out += [f"    - {item}" for item in est.not_modelled]
    out += render_budget(est, budget_usd)
    return "\n".join(out)


def cost_document(est: Estimate, budget_usd: Optional[float] = None, overhead: Overhead = Overhead(),
                  today: Optional[_dt.date] = None) -> dict[str, Any]:
    doc = est.as_dict()
    if not est.priced:
        doc["monthlyAtUtilisation"] = None
        doc["monthlyAtUtilisationWithOverhead"] = None
        doc["budget"] = budget_comparison(est, budget_usd, overhead)
        doc["catalogAge"] = None
        return doc
    doc["monthlyAtUtilisation"] = {f"{int(u * 100)}%": round(est.monthly_at_utilisation(u), 2) for u in UTILISATIONS}
    doc["monthlyAtUtilisationWithOverhead"] = {f"{int(u * 100)}%": round(est.monthly_at_utilisation(u, overhead.factor), 2)
                                               for u in UTILISATIONS}
    doc["budget"] = budget_comparison(est, budget_usd, overhead)
    doc["catalogAge"] = catalog_age_info(est, today)
    return doc


def write_cost_json(est: Estimate, path: Union[str, Path], budget_usd: Optional[float] = None,
                    overhead: Overhead = Overhead(), today: Optional[_dt.date] = None) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(cost_document(est, budget_usd, overhead, today), indent=2, sort_keys=False) + "\n",
                 encoding="utf-8")
    return p


# ---------------------------------------------------------------------------------------------
# Autoscaler overhead from the simulator
# ---------------------------------------------------------------------------------------------

# The seed scenario's work pattern (examples/seed-scenario.yaml), scaled to the pool: weekday jobs, log-normal
# durations, one 4 h notebook per engineer and day.
REFERENCE_WORKLOAD = {"seed": 2022, "month_hours": HOURS_PER_MONTH, "workday_hours": [9, 18],
                      "train_jobs_per_workday": 3.8, "gpus_per_job": {1: 0.35, 2: 0.25, 4: 0.30, 8: 0.10},
                      "duration_hours": {"median": 3.0, "sigma": 0.9, "max": 36},
                      "notebooks": {"hours_per_workday": 4, "gpus": 1, "start_hour": 10},
                      "train_jobs_multi_node": True}


# The largest pool simulated as it is (its run time grows with its size); larger pools are simulated at
# this size with the same shape.
SIMULATED_GPUS_MAX = 128


# Minutes from a scale-up to a schedulable GPU node (gpu_platform/costs/node_boot.py: the queue's
# waitForPodsReady timeouts start from the same figures, or from a Linode node group's longer join deadline:
# components/platform/queue.py pods_ready_timeouts). The bill counts the boot, not the deadline.
SCALE_UP_MINUTES = NODE_BOOT_MINUTES


def simulated_overhead(cloud: str, pool: PoolShape, catalog: Optional[Catalog] = None, scale_up_minutes: Optional[float] = None,
                       scale_down_minutes: float = 10.0, preemptions_per_job: float = 0.02,
                       region: Optional[str] = None) -> Overhead:
    """billed / useful GPU-hours of `pool` running the reference workload in the simulator: boot time,
    scale-down delay and preemption rework (lost work and reloads), over a perfect autoscaler. The pool's type is
    priced in `region` where the catalog prices it there (AWS Spot of p4d: eu-west-1's, none in us-east-1)."""
    from gpu_platform.costs.catalog import RegionalPriceMissing
    from gpu_platform.costs.simulator import Platform, generate_workload, simulate_platform

    cat = catalog or load_catalog()
    if region and cat.instance(cloud, pool.instance_type) is not None:
        try:
            here, _ = cat.in_region(cloud, pool.instance_type, pool.capacity, region)
        except RegionalPriceMissing:
            pass  # the bill refuses the stack; the simulator says what it lacks
        else:
            cat = cat.with_instances(cloud, {**{t.name: t for t in cat.instances(cloud)}, pool.instance_type: here})
    if scale_up_minutes is None:
        scale_up_minutes = SCALE_UP_MINUTES.get(cloud, 8.0)
    if pool.min_nodes >= pool.max_nodes:
        return Overhead(1.0, "fixed-size pool: billed all month whatever the use")
    gpn = cat.instance(cloud, pool.instance_type).gpus
    scaled = ""
    if gpn * pool.max_nodes > SIMULATED_GPUS_MAX:
        # The simulation's work grows with the pool (more engineers, more jobs, more nodes per event):
        # minutes at 1000 nodes. The overhead is a ratio of billed to useful hours per job, so the same
        # pool shape at a bounded size gives it; min/max keep their proportion.
        nodes = max(2, SIMULATED_GPUS_MAX // max(gpn, 1))
        low = min(round(pool.min_nodes * nodes / pool.max_nodes), nodes - 1)
        scaled = (f"; simulated at {nodes} of its {pool.max_nodes} nodes (the ratio, not the size, is what is "
                  f"measured; the simulation is bounded to {SIMULATED_GPUS_MAX} GPUs)")
        pool = replace(pool, min_nodes=low, max_nodes=nodes)
    cap = gpn * pool.max_nodes
    engineers = max(1, round(cap / 6))  # the seed: 6 engineers for 36 GPUs
    spec = dict(REFERENCE_WORKLOAD, engineers=[{"name": f"e{i}", "max_gpus": min(8, cap)} for i in range(engineers)])
    jobs = generate_workload(spec)
    spot = pool.capacity in ("spot", "preemptible")
    plat = Platform(name=pool.name, label=pool.name, cloud=cloud, mode="autoscale", capacity=pool.capacity,
                    instance_type=pool.instance_type, min_nodes=pool.min_nodes, max_nodes=pool.max_nodes,
                    scale_up_delay_h=scale_up_minutes / 60, scale_down_delay_h=scale_down_minutes / 60,
                    preemption_per_job=preemptions_per_job if spot else 0.0, restart_overhead_h=5 / 60,
                    allow_multi_node=True, multi_node_slowdown=0.0)
    r = simulate_platform(plat, jobs, cat, HOURS_PER_MONTH, 2022)
    useful = max(r.busy_gpu_hours - r.rework_gpu_hours, 1e-9)
    factor = max(r.billed_gpu_hours / useful, 1.0)
    return Overhead(factor, f"simulated: pool {pool.name} running the seed scenario's work pattern "
                            f"({engineers} engineer(s), {len(jobs)} jobs), boot {scale_up_minutes:g} min, scale-down after "
                            f"{scale_down_minutes:g} min idle, {r.preemptions} preemptions; billed "
                            f"{r.billed_gpu_hours:,.0f} / useful {useful:,.0f} GPU-hours{scaled}")


# ---------------------------------------------------------------------------------------------
# Alternatives and the chart
# ---------------------------------------------------------------------------------------------


def _stack_speed(est: Estimate) -> tuple[float, str]:
    speeds = load_gpu_speeds()
    known = [speeds.speed(m) for m in est.gpu_models]
    if est.gpu_models and all(s is not None for s in known):
        s = min(known)  # several pools: the slowest GPU bounds the work (conservative)
        return s, f"{', '.join(est.gpu_models)} = {s:g} x {speeds.reference}"
    missing = [m for m, s in zip(est.gpu_models, known) if s is None]
    return 1.0, (f"{', '.join(missing) or 'GPU'} not in the benchmark table: counted as 1.0 x {speeds.reference} "
                 "(an assumption, not a measurement)")


def default_alternatives(est: Estimate, catalog: Optional[Catalog] = None) -> dict[str, Estimate]:
    """The same WORK elsewhere (reference-GPU hours, gpu_platform/costs/catalog/gpu-speed.yaml): always-on AWS p3 V100s
    (the seed's fleet), an always-on Linode RTX 6000 cluster, and a GKE Spot A100 pool autoscaled from zero."""
    cat = catalog or load_catalog()
    speeds = load_gpu_speeds()
    s_stack, _ = _stack_speed(est)
    work_gpus = max(est.full_gpus, 1) * s_stack  # reference GPUs the stack's full capacity equals

    def n_for(model: str) -> int:
        return max(1, math.ceil(work_gpus / (speeds.speed(model) or 1.0) - 1e-9))

    alts: dict[str, Estimate] = {}
    n = n_for("NVIDIA V100 16GB")
    p16, p2 = divmod(n, 8)
    pools = tuple(p for p in (PoolShape("p3-16x", "p3.16xlarge", "on-demand", p16, p16) if p16 else None,
                              PoolShape("p3-2x", "p3.2xlarge", "on-demand", p2, p2) if p2 else None) if p)
    alts[f"AWS p3 on-demand: {n} x V100 always on"] = estimate(
        StackShape("aws", "us-east-1", pools, system_nodes=(), nat_gateways=0, managed_control_plane=False,
                   name="aws-p3-always-on"), cat)
    if est.cloud != "linode":
        n = n_for("Quadro RTX 6000")
        alts[f"Linode kubeadm: {n} x RTX 6000 always on"] = estimate(
            StackShape("linode", "us-east", (PoolShape("rtx6000", "g1-gpu-rtx6000-1", "on-demand", n, n),),
                       control_plane_type="g6-standard-4", control_plane_count=1, name="linode-rtx6000"), cat)
    if est.cloud != "gcp":
        n = n_for("NVIDIA A100 40GB")
        alts[f"GKE Spot: 0..{n} x A100 40GB autoscaled"] = estimate(
            StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, n),), name="gke-a100-spot"), cat)
    return alts


@dataclass
class ChartSeries:
    label: str
    xs: list[float]  # utilisation, percent
    ys: list[float]  # USD per month
    style: str = "alternative"  # stack | alternative


@dataclass
class ChartData:
    title: str
    xlabel: str
    ylabel: str
    series: list[ChartSeries]
    budget_usd: Optional[float] = None
    budget_label: str = ""
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"title": self.title, "xlabel": self.xlabel, "ylabel": self.ylabel, "budgetUsd": self.budget_usd,
                "budgetLabel": self.budget_label, "notes": self.notes,
                "series": [{"label": s.label, "style": s.style, "x": s.xs, "y": [round(y, 2) for y in s.ys]}
                           for s in self.series]}


def chart_data(est: Estimate, alternatives: Optional[Alternatives] = None, budget_usd: Optional[float] = None,
               overhead: Overhead = Overhead()) -> ChartData:
    """What the decision chart shows. x: the stack's GPU utilisation over the month, 0-100 %; y: USD per month.
    The stack's curve includes the autoscaler's overhead; each alternative is sized to do the same work
    (reference-GPU hours) and costed at the utilisation that work gives it."""
    if alternatives is None:
        alternatives = default_alternatives(est)
    if not est.priced:
        return _unpriced_chart_data(est, alternatives, budget_usd)
    alts = list(alternatives.items()) if isinstance(alternatives, Mapping) else [(a.name, a) for a in alternatives]
    speeds = load_gpu_speeds()
    s_stack, speed_note = _stack_speed(est)
    stack_work = est.full_gpus * s_stack  # reference GPUs at 100 %
    xs = [round(100 * u, 1) for u in CHART_UTILISATIONS]
    models = ", ".join(est.gpu_models) or "no GPU"
    caps = "/".join(est.capacities) or "-"
    title = (f"{est.name} ({est.cloud}{' ' + est.region if est.region else ''}): {est.full_gpus} x {models}, {caps}, "
             f"{est.idle_gpus}..{est.full_gpus} GPUs\nMonthly cost vs GPU utilisation, alternatives doing the same work")
    series = [ChartSeries(f"{est.name} (this stack: {models}, {caps}; autoscaler overhead x{overhead.factor:.2f})",
                          xs, [est.monthly_at_utilisation(u, overhead.factor) for u in CHART_UTILISATIONS], "stack")]
    for label, a in alts:
        models_a = list(a.gpu_models)
        s_a = speeds.speed(models_a[0]) if models_a else None
        alt_work = a.full_gpus * (s_a or 1.0)
        ys = []
        for u in CHART_UTILISATIONS:
            need = u * stack_work
            ua = need / alt_work if alt_work else 0.0
            ys.append(a.monthly_at_utilisation(min(ua, 1.0)) * max(ua, 1.0))  # beyond its size: pro rata
        series.append(ChartSeries(label, xs, ys))
    notes = [f"work = GPU-hours x relative speed ({speed_note}); speeds: {speeds.source}",
             f"autoscaler overhead: {overhead.basis}"]
    budget_label = ""
    if budget_usd:
        reach = est.utilisation_at_budget(budget_usd, overhead.factor)
        where = ("not reached at 100 %" if reach is None else "exceeded by the idle floor" if reach == 0
                 else f"reached at {100 * reach:.0f} %")
        budget_label = f"budget ${budget_usd:,.0f}/month ({where})"
    return ChartData(title, "GPU utilisation of this stack over the month (%)", "USD per month", series,
                     budget_usd, budget_label, notes)


def _unpriced_chart_data(est: Estimate, alternatives: Alternatives, budget_usd: Optional[float]) -> ChartData:
    """Without node prices the stack has no curve: the chart shows what the same work (its GPUs at full use) would
    cost elsewhere, and says the stack's own cost is not known."""
    speeds = load_gpu_speeds()
    s_stack, speed_note = _stack_speed(est)
    stack_work = est.full_gpus * s_stack
    xs = [round(100 * u, 1) for u in CHART_UTILISATIONS]
    series = []
    for label, a in (list(alternatives.items()) if isinstance(alternatives, Mapping) else [(a.name, a) for a in alternatives]):
        s_a = speeds.speed(a.gpu_models[0]) if a.gpu_models else None
        alt_work = a.full_gpus * (s_a or 1.0)
        ys = []
        for u in CHART_UTILISATIONS:
            ua = u * stack_work / alt_work if alt_work else 0.0
            ys.append(a.monthly_at_utilisation(min(ua, 1.0)) * max(ua, 1.0))
        series.append(ChartSeries(label, xs, ys))
    models = ", ".join(est.gpu_models) or "no GPU"
    title = (f"{est.name} ({est.cloud}): {est.full_gpus} x {models}; its own cost is NOT ESTIMATED (no node prices)\n"
             "What the same work would cost elsewhere, vs its GPU utilisation")
    notes = [f"work = GPU-hours x relative speed ({speed_note}); speeds: {speeds.source}",
             "this stack: no node prices (kubernetes.nodeTypes.<type>.usdPerHour), so no curve of its own"]
    label = f"budget ${budget_usd:,.0f}/month (not compared: no node prices)" if budget_usd else ""
    return ChartData(title, "GPU utilisation of this stack over the month (%)", "USD per month", series, budget_usd,
                     label, notes)


def render_figure(data: ChartData):
    """A matplotlib Figure (Agg canvas, no pyplot) of `data`; the legend sits outside the plot area."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    import textwrap

    def wrap(label: str) -> str:  # legend entries wrap instead of running off the figure
        return textwrap.fill(label, 46)

    fig = Figure(figsize=(12, 5.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.08, 0.22, 0.52, 0.64))
    for s in data.series:
        if s.style == "stack":
            ax.plot(s.xs, s.ys, marker="o", markersize=3, linewidth=2.5, label=wrap(s.label), zorder=3)
        else:
            ax.plot(s.xs, s.ys, linestyle="--", linewidth=1.5, label=wrap(s.label))
    if data.budget_usd:
        ax.axhline(data.budget_usd, color="crimson", linestyle=":", linewidth=2, label=wrap(data.budget_label))
    ax.set_xlim(0, 100)
    ax.set_ylim(bottom=0)
    ax.set_xticks(list(range(0, 101, 10)))
    ax.set_xlabel(data.xlabel)
    ax.set_ylabel(data.ylabel)
    ax.set_title(data.title, fontsize=10)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:,.0f}"))
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, frameon=False)
    fig.text(0.01, 0.01, "\n".join(textwrap.fill(n, 190) for n in data.notes), fontsize=6.5, va="bottom")
    return fig


def draw_cost_chart(est: Estimate, alternatives: Optional[Alternatives], path_png: Union[str, Path],
                    budget_usd: Optional[float] = None, overhead: Overhead = Overhead()) -> Path:
    """The decision chart as a PNG, and its data as <name>.chart.json beside it (not <name>.json: preflight's
    cost.json sits beside cost.png)."""
    data = chart_data(est, alternatives, budget_usd, overhead)
    fig = render_figure(data)
    p = Path(path_png)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    p.with_suffix(".chart.json").write_text(json.dumps(data.as_dict(), indent=2) + "\n", encoding="utf-8")
    return p


__all__ = ["CATALOG_MAX_AGE_DAYS", "CHART_UTILISATIONS", "ChartData", "ChartSeries", "Overhead", "UTILISATIONS",
           "budget_comparison", "catalog_age_info", "chart_data", "cost_document", "default_alternatives",
           "draw_cost_chart", "render_budget", "render_catalog_age", "render_cost_summary", "render_figure",
           "simulated_overhead", "write_cost_json"]
