"""Reports for preflight: text summary, JSON, chart PNG."""

from __future__ import annotations

import json
import sys

import pytest

from costs.estimator import PoolShape, StackShape, estimate
from costs.report import UTILISATIONS, default_alternatives, draw_cost_chart, render_cost_summary, write_cost_json


@pytest.fixture(scope="module")
def est():
    return estimate(StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8),), name="gcp-prod"))


def test_summary_names_idle_floor_full_capacity_rate_and_breakdown(est):
    text = render_cost_summary(est)
    assert f"idle floor (no job running, pools at minNodes): ${est.idle_monthly_usd:,.2f} / month" in text
    assert f"full capacity (pools at maxNodes, all month):  ${est.full_monthly_usd:,.2f} / month (8 GPUs)" in text
    assert f"$ per GPU-hour at full use: ${est.usd_per_gpu_hour:,.2f}" in text
    for line in est.lines:
        assert line.name in text
    assert "a2-highgpu-1g (2026-07-30)" in text  # every price's date is shown


def test_json_has_totals_lines_and_utilisation(est, tmp_path):
    p = write_cost_json(est, tmp_path / "sub" / "cost.json")
    doc = json.loads(p.read_text())
    assert doc["fullMonthlyUsd"] == round(est.full_monthly_usd, 2) and doc["fullGpus"] == 8
    assert doc["lines"][0]["resource"] == "a2-highgpu-1g" and doc["lines"][0]["source"]
    assert list(doc["monthlyAtUtilisation"]) == ["10%", "25%", "50%", "75%", "100%"]
    assert doc["monthlyAtUtilisation"]["100%"] == round(est.full_monthly_usd, 2)


def test_default_alternatives_are_the_same_gpu_count_elsewhere(est):
    alts = default_alternatives(est)
    aws = next(a for label, a in alts.items() if label.startswith("AWS p3"))
    assert aws.full_gpus == 8 and aws.lines[0].resource == "p3.16xlarge"
    assert aws.monthly_at_utilisation(0.1) == pytest.approx(8 * 3.06 * 730)  # always on: flat
    assert any(label.startswith("Linode RTX 6000") for label in alts)


def test_chart_png_is_written_and_matplotlib_is_imported_lazily(est, tmp_path):
    import costs.report  # noqa: F401 - already imported above; matplotlib must not come with it

    assert all(u in UTILISATIONS for u in (0.1, 0.25, 0.5, 0.75, 1.0))
    p = draw_cost_chart(est, None, tmp_path / "chart.png")
    data = p.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    p2 = draw_cost_chart(est, [est], tmp_path / "chart2.png")
    assert p2.stat().st_size > 5000


def test_report_module_does_not_import_matplotlib_or_pulumi():
    import subprocess

    code = ("import sys, costs.report, costs.estimator, costs.simulator, costs.catalog, costs.refresh, costs.seedcheck; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'pulumi', 'components')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
