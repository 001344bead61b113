"""Reports for preflight: the whole bill as text and JSON, budget comparison, catalog age, the decision chart
(its data and a real PNG; the test checks what is plotted, not pixels)."""

from __future__ import annotations

import datetime as dt
import json
import struct
import sys

import pytest

from gpu_platform.costs.catalog import load_catalog, load_gpu_speeds
from gpu_platform.costs.estimator import NodeGroup, PoolShape, StackShape, estimate
from gpu_platform.costs.report import (CHART_UTILISATIONS, UTILISATIONS, Overhead, chart_data, default_alternatives, draw_cost_chart,
                          render_cost_summary, render_figure, write_cost_json)

TODAY = dt.date(2026, 11, 23)


@pytest.fixture(scope="module")
def est():
    return estimate(StackShape("gcp", "us-central1", (PoolShape("a100", "a2-highgpu-1g", "spot", 0, 8, boot_disk_gib=200),),
                               system_nodes=(NodeGroup("system", "e2-standard-4", 1, max_count=3, boot_disk_gib=50),),
                               pvc_gib=(("prometheus", 50.0),), pvc_basis="test", checkpoint_gib=100, nat_gib_per_month=200,
                               extended_support_usd_per_hour=0.0, extended_support_basis="1.33 in standard support",
                               expected_utilization=0.3, name="gcp-prod"))


def test_summary_prints_every_line_with_its_assumption_and_what_is_not_modelled(est):
    text = render_cost_summary(est, 5000, today=TODAY)
    assert f"idle floor (no job running, pools at minNodes): ${est.idle_monthly_usd:,.2f} / month" in text
    assert f"full capacity (pools at maxNodes, all month):  ${est.full_monthly_usd:,.2f} / month (8 GPUs)" in text
    for line in est.lines:
        assert line.name in text
        if line.assumption:
            assert f"assumes: {line.assumption}" in text
    kinds = {ln.kind for ln in est.lines}
    assert {"gpu-pool", "system", "disk", "storage", "network-data", "support", "fixed"} <= kinds
    assert "not modelled" in text and "internet egress" in text
    assert "a2-highgpu-1g (2026-07-30" in text  # every price's date is shown


def test_catalog_age_warns_past_90_days(est):
    text = render_cost_summary(est, 5000, today=TODAY)
    assert "catalog age: prices dated 2026-07-30" in text and "116 days old" in text
    # Cloud NAT data/per-VM and GCS Standard are dated by the Cloud Billing Catalog generation that states them (2026-07-30)
    assert ("warning: prices older than 90 days (a2-highgpu-1g, cloud-nat-data, cloud-nat-per-vm, e2-standard-4, gcs-standard)"
            in text)
    fresh = render_cost_summary(est, 5000, today=dt.date(2026, 8, 1))
    assert "warning: prices older" not in fresh


def test_budget_comparison_and_the_utilisation_where_it_is_reached(est):
    text = render_cost_summary(est, 5000, today=TODAY)
    u = est.utilisation_at_budget(5000)
    assert 0 < u < 1 and est.monthly_at_utilisation(u) == pytest.approx(5000, rel=1e-6)
    assert f"the budget is reached at {100 * u:.0f} % GPU utilisation" in text
    assert "full capacity" in text and "OVER the budget" in text  # $11.8k > $5k
    assert "at the expected 30 % GPU utilisation" in text
    # the autoscaler's overhead moves the point where the budget is reached to a lower utilisation
    assert est.utilisation_at_budget(5000, 1.2) < u
    assert est.utilisation_at_budget(100) == 0.0 and est.utilisation_at_budget(1e9) is None


def test_json_has_every_line_budget_and_catalog_age(est, tmp_path):
    p = write_cost_json(est, tmp_path / "sub" / "cost.json", 5000, Overhead(1.1, "test"), TODAY)
    doc = json.loads(p.read_text())
    assert doc["fullMonthlyUsd"] == round(est.full_monthly_usd, 2) and doc["fullGpus"] == 8
    assert [ln["name"] for ln in doc["lines"]] == [ln.name for ln in est.lines]
    assert all(ln["assumption"] is not None and ln["source"] and ln["date"] for ln in doc["lines"])
    assert sum(ln["monthlyUsd"] for ln in doc["lines"]) == pytest.approx(doc["fullMonthlyUsd"], abs=0.05)
    assert doc["notModelled"] and doc["budget"]["monthlyBudgetUsd"] == 5000
    assert doc["budget"]["overheadFactor"] == 1.1 and doc["catalogAge"]["stale"] is True
    assert list(doc["monthlyAtUtilisation"]) == ["10%", "25%", "50%", "75%", "100%"]
    assert doc["monthlyAtUtilisation"]["100%"] == round(est.full_monthly_usd, 2)


def test_alternatives_do_the_same_work_not_the_same_gpu_count(est):
    """8 A100 40GB = 8 x 2.39 V100 of work (resnet50 FP32, gpu_platform/costs/catalog/gpu-speed.yaml) = 19.1 -> 20 V100,
    25.7 -> 26 RTX 6000."""
    speeds = load_gpu_speeds()
    assert speeds.speed("NVIDIA A100 40GB") == pytest.approx(882 / 369, abs=1e-3)
    alts = default_alternatives(est)
    aws = next(a for label, a in alts.items() if label.startswith("AWS p3"))
    assert aws.full_gpus == 20 and aws.lines[0].resource == "p3.16xlarge"
    assert aws.monthly_at_utilisation(0.1) == pytest.approx(20 * 3.06 * 730)  # always on: flat
    lin = next(a for label, a in alts.items() if label.startswith("Linode"))
    assert lin.full_gpus == 26


def test_chart_data_is_what_the_decision_needs(est):
    data = chart_data(est, None, 5000, Overhead(1.2, "simulated"))
    assert data.title.startswith("gcp-prod (gcp us-central1): 8 x NVIDIA A100 40GB, spot, 0..8 GPUs")
    stack = data.series[0]
    assert stack.style == "stack" and stack.xs[0] == 0 and stack.xs[-1] == 100 and len(stack.xs) == len(CHART_UTILISATIONS)
    assert stack.ys[0] == pytest.approx(est.idle_monthly_usd)  # the idle floor shows at 0 %
    assert stack.ys[-1] == pytest.approx(est.full_monthly_usd)
    assert stack.ys[10] == pytest.approx(est.monthly_at_utilisation(0.5, 1.2))
    assert stack.ys[10] > est.monthly_at_utilisation(0.5)  # the overhead is in the stack's curve
    assert "autoscaler overhead x1.20" in stack.label
    assert data.budget_usd == 5000 and "reached at" in data.budget_label
    assert any("gpu-speed" in n or "deeplearning-benchmark" in n for n in data.notes)


def _png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_chart_png_and_the_figure_show_the_data(est, tmp_path):
    data = chart_data(est, None, 5000)
    fig = render_figure(data)
    ax = fig.axes[0]
    assert ax.get_title() == data.title and ax.get_xlim() == (0.0, 100.0)
    lines = ax.get_lines()
    plotted = {ln.get_label().replace("\n", " "): list(ln.get_ydata()) for ln in lines}
    for s in data.series:
        assert plotted[s.label] == pytest.approx(s.ys)
    assert plotted[data.budget_label] == pytest.approx([5000, 5000])  # the budget line
    legend = ax.get_legend()
    assert legend.get_bbox_to_anchor().x0 > ax.get_window_extent().x1 - 1  # legend outside the plot area
    assert [t.get_text().replace("\n", " ") for t in legend.get_texts()] == [s.label for s in data.series] + [data.budget_label]
    p = draw_cost_chart(est, None, tmp_path / "chart.png", 5000)
    assert _png_size(p) == (1200, 560)
    assert json.loads(p.with_suffix(".chart.json").read_text())["series"][0]["label"] == data.series[0].label


def test_report_module_does_not_import_matplotlib_or_pulumi():
    import subprocess

    code = ("import sys, gpu_platform.costs.report, gpu_platform.costs.estimator, gpu_platform.costs.simulator, gpu_platform.costs.catalog, gpu_platform.costs.refresh, gpu_platform.costs.seedcheck, "
            "gpu_platform.costs.refresh_clouds; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('matplotlib', 'pulumi', 'components')]; "
            "print(bad); sys.exit(1 if bad else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_utilisations_table_is_unchanged():
    assert UTILISATIONS == (0.10, 0.25, 0.50, 0.75, 1.00)
    assert load_catalog() is load_catalog()
