"""The cost part of preflight: the stack's estimate, cost.json and the comparison chart."""

from __future__ import annotations

from pathlib import Path

from components.config import StackConfig


def cost_section(cfg: StackConfig, out: Path) -> str:
    from costs import report
    from costs.catalog import load_catalog
    from costs.estimator import StackShape, estimate

    shape = StackShape.from_config(cfg)
    est = estimate(shape, load_catalog(cfg.catalog_overrides() or None))
    report.write_cost_json(est, out / "cost.json")
    report.draw_cost_chart(est, report.default_alternatives(est), out / "cost.png")
    return "\n".join([report.render_cost_summary(est),
                      f"Wrote {out / 'cost.json'} and {out / 'cost.png'}"])
