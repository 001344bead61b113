"""Cost reports for preflight: a text summary, a JSON file and a chart. Pure and fast; matplotlib is
imported only inside draw_cost_chart (Agg backend, no display)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Optional, Sequence, Union

from costs.catalog import HOURS_PER_MONTH, Catalog, load_catalog
from costs.estimator import Estimate, PoolShape, StackShape, estimate

UTILISATIONS = (0.10, 0.25, 0.50, 0.75, 1.00)

Alternatives = Union[Sequence[Estimate], Mapping[str, Estimate]]


def _m(x: float) -> str:
    return f"${x:,.2f}"


def render_cost_summary(est: Estimate) -> str:
    """Idle floor, full capacity, $/GPU-hour and the breakdown, as plain text."""
    out = [f"Cost estimate for {est.name} ({est.cloud}{', ' + est.region if est.region else ''}; "
           f"{HOURS_PER_MONTH:.0f} h/month)",
           f"  idle floor (no job running, pools at minNodes): {_m(est.idle_monthly_usd)} / month "
           f"({est.idle_gpus} GPUs)",
           f"  full capacity (pools at maxNodes, all month):  {_m(est.full_monthly_usd)} / month "
           f"({est.full_gpus} GPUs)"]
    if est.usd_per_gpu_hour is not None:
        out.append(f"  $ per GPU-hour at full use: {_m(est.usd_per_gpu_hour)} "
                   f"(GPU machines alone {_m(est.gpu_only_usd_per_gpu_hour or 0)})")
    out.append("  breakdown:")
    w = max((len(ln.name) for ln in est.lines), default=10)
    out.append(f"    {'item':<{w}}  {'qty idle..full':>14}  {'$/h each':>10}  {'idle $/mo':>11}  {'full $/mo':>11}")
    for ln in est.lines:
        qty = f"{ln.idle_quantity:g}..{ln.quantity:g}"
        out.append(f"    {ln.name:<{w}}  {qty:>14}  {ln.unit_usd_per_hour:>10.4f}  {ln.idle_monthly_usd:>11,.2f}  "
                   f"{ln.monthly_usd:>11,.2f}")
    out.append("  prices: " + "; ".join(sorted({f"{ln.resource} ({ln.date})" for ln in est.lines})))
    for w_ in est.warnings:
        out.append(f"  warning: {w_}")
    return "\n".join(out)


def write_cost_json(est: Estimate, path: Union[str, Path]) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = est.as_dict()
    doc["monthlyAtUtilisation"] = {f"{int(u * 100)}%": round(est.monthly_at_utilisation(u), 2) for u in UTILISATIONS}
    p.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return p


def default_alternatives(est: Estimate, catalog: Optional[Catalog] = None) -> dict[str, Estimate]:
    """The same GPU count (at maxNodes) elsewhere: always-on AWS p3 on-demand (the seed's fleet), an
    always-on Linode RTX 6000 cluster, and a GKE Spot A100 pool autoscaled from zero."""
    n = max(est.full_gpus, 1)
    cat = catalog or load_catalog()
    alts: dict[str, Estimate] = {}
    p16, p2 = divmod(n, 8)
    pools = tuple(p for p in (PoolShape("p3-16x", "p3.16xlarge", "on-demand", p16, p16) if p16 else None,
                              PoolShape("p3-2x", "p3.2xlarge", "on-demand", p2, p2) if p2 else None) if p)
    alts[f"AWS p3 on-demand, {n} V100 always on"] = estimate(
        StackShape("aws", "us-east-1", pools, system_nodes=(), nat_gateways=0, managed_control_plane=False,
                   name="aws-p3-always-on"), cat)
    if est.cloud != "linode":
        alts[f"Linode RTX 6000, {n} GPUs always on"] = estimate(
            StackShape("linode", "us-east", (PoolShape("rtx6000", "g1-gpu-rtx6000-1", "on-demand", n, n),),
                       control_plane_type="g6-standard-4", control_plane_count=1, name="linode-rtx6000"), cat)
    if est.cloud != "gcp":
        alts[f"GKE Spot A100, 0..{n} GPUs"] = estimate(
            StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, n),), name="gke-a100-spot"), cat)
    return alts


def draw_cost_chart(est: Estimate, alternatives: Optional[Alternatives], path_png: Union[str, Path]) -> Path:
    """Monthly cost at 10/25/50/75/100 % GPU utilisation: this stack against the alternatives."""
    # The object API with the Agg canvas: no pyplot, no GUI backend probing (half a second saved).
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    if alternatives is None:
        alternatives = default_alternatives(est)
    alts = list(alternatives.items()) if isinstance(alternatives, Mapping) else [(a.name, a) for a in alternatives]
    xs = [int(u * 100) for u in UTILISATIONS]
    fig = Figure(figsize=(8, 4.8), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    ax.plot(xs, [est.monthly_at_utilisation(u) for u in UTILISATIONS], marker="o", linewidth=2.5,
            label=f"{est.name} (this stack)")
    for label, a in alts:
        ax.plot(xs, [a.monthly_at_utilisation(u) for u in UTILISATIONS], marker=".", linestyle="--", label=label)
    ax.set_xlabel("GPU utilisation over the month (%)")
    ax.set_ylabel("USD per month")
    ax.set_title(f"Monthly cost vs utilisation ({est.full_gpus} GPUs at maxNodes)")
    ax.set_xticks(xs)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v:,.0f}"))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    p = Path(path_png)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    return p


__all__ = ["UTILISATIONS", "default_alternatives", "draw_cost_chart", "render_cost_summary", "write_cost_json"]
