"""The workload simulator: the seed scenario (AWS/GKE >= 6x, explained), and small exact cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from costs.__main__ import main
from costs.catalog import load_catalog
from costs.simulator import Job, Platform, ScenarioError, load_scenario, render_report, simulate, simulate_platform

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "seed-scenario.yaml"


@pytest.fixture(scope="module")
def seed_report():
    return simulate(load_scenario(SCENARIO))


def test_seed_scenario_aws_costs_at_least_six_times_gke(seed_report):
    assert seed_report.baseline == "aws-p3-always-on"
    assert seed_report.ratio("gke-a100-preemptible") >= 6
    assert seed_report.ratio("linode-rtx6000") > 1  # Linode sits between the two
    assert seed_report.ratio("gke-a100-preemptible") > seed_report.ratio("linode-rtx6000")


def test_seed_scenario_matches_its_stated_assumptions(seed_report):
    aws = seed_report.result("aws-p3-always-on")
    gke = seed_report.result("gke-a100-preemptible")
    lin = seed_report.result("linode-rtx6000")
    assert 0.70 <= aws.idle_fraction <= 0.82  # "idle 75% of the time"
    assert aws.billed_gpu_hours == pytest.approx(36 * 730)  # 3 x p3.8xlarge + 3 x p3.16xlarge, always on
    assert lin.gpu_usd == pytest.approx(15 * 1000.0)  # 5 x rtx6000-3 at the monthly cap
    for r in seed_report.results:
        assert r.jobs_done == r.jobs_total  # the same work is finished everywhere
        assert r.reference_work_gpu_hours == pytest.approx(aws.reference_work_gpu_hours)
    # ~1 preemption per 50 jobs, and the lost work is counted
    assert 0 < gke.preemptions <= gke.jobs_total / 20
    assert gke.rework_gpu_hours > 0
    assert gke.billed_gpu_hours < aws.billed_gpu_hours / 5


def test_seed_scenario_output_is_a_side_by_side_table_with_the_explanation(seed_report):
    text = render_report(seed_report)
    head = next(line for line in text.splitlines() if "aws-p3-always-on" in line and "gke-a100-preemptible" in line)
    assert "linode-rtx6000" in head
    assert "TOTAL $ (month)" in text and "ratio aws-p3-always-on / stack" in text
    for phrase in ("Why the gap:", "idle hours:", "price per GPU-hour:", "speed:", "preemption rework:"):
        assert phrase in text
    assert f"{seed_report.ratio('gke-a100-preemptible'):.1f}x" in text


def test_cli_simulate_prints_the_table(capsys):
    assert main(["simulate", str(SCENARIO), "--prices", "current"]) == 0
    out = capsys.readouterr().out
    assert "prices: current" in out and "Why the gap:" in out
    ratio = float(out.split("aws-p3-always-on costs ")[2].split("x")[0])  # the GKE paragraph
    assert ratio >= 6


def _jobs(*specs):
    return [Job(i, e, t, g, h, k) for i, (e, t, g, h, k) in enumerate(specs)]


def test_autoscale_bills_boot_and_scale_down_time_exactly():
    cat = load_catalog()
    p = Platform(name="gke", label="", cloud="gcp", mode="autoscale", capacity="spot", instance_type="a2-highgpu-1g",
                 min_nodes=0, max_nodes=4, speed=2.0, scale_up_delay_h=0.1, scale_down_delay_h=0.2)
    r = simulate_platform(p, _jobs(("e", 1.0, 2, 4.0, "train")), cat, month_hours=24)
    # 2 nodes: boot 0.1 h + run 4/2 = 2 h + idle 0.2 h = 2.3 h each
    assert r.billed_gpu_hours == pytest.approx(2 * 2.3)
    assert r.busy_gpu_hours == pytest.approx(2 * 2.0)
    assert r.gpu_usd == pytest.approx(2 * 2.3 * cat.instance("gcp", "a2-highgpu-1g").spot.usd_per_hour)
    assert r.mean_wait_h == pytest.approx(0.1)


def test_preemption_loses_work_since_the_last_checkpoint():
    cat = load_catalog()
    p = Platform(name="gke", label="", cloud="gcp", mode="autoscale", capacity="preemptible",
                 instance_type="a2-highgpu-1g", max_nodes=2, preemption_per_job=1.0, checkpoint_interval_h=0.5,
                 restart_overhead_h=0.1)
    r = simulate_platform(p, _jobs(("e", 0.0, 1, 10.0, "train")), cat, month_hours=48, seed=3)
    assert r.preemptions >= 1 and r.jobs_done == 1
    assert 0 < r.rework_gpu_hours <= r.preemptions * (0.5 + 0.1) + 1e-9
    assert r.busy_gpu_hours == pytest.approx(10.0 + r.rework_gpu_hours)


def test_dedicated_fleet_queues_per_engineer_and_bills_all_month():
    cat = load_catalog()
    p = Platform(name="aws", label="", cloud="aws", mode="dedicated", instances={"a": "p3.2xlarge", "b": "p3.2xlarge"})
    r = simulate_platform(p, _jobs(("a", 1.0, 1, 2.0, "train"), ("a", 1.0, 1, 2.0, "train")), cat, month_hours=730)
    assert r.billed_gpu_hours == pytest.approx(2 * 730) and r.busy_gpu_hours == pytest.approx(4.0)
    assert r.gpu_usd == pytest.approx(2 * 730 * 3.06)
    assert r.mean_wait_h == pytest.approx(1.0)  # the second job waited for a's only GPU, b's GPU stayed idle


def test_scenario_errors_are_reported():
    cat = load_catalog()
    with pytest.raises(ScenarioError, match="no instance for engineers"):
        simulate_platform(Platform(name="x", label="", cloud="aws", mode="dedicated", instances={}),
                          _jobs(("a", 0, 1, 1, "train")), cat)
    with pytest.raises(ScenarioError, match="has no preemptible price"):
        simulate_platform(Platform(name="x", label="", cloud="linode", mode="cluster", capacity="preemptible",
                                   instance_type="g1-gpu-rtx6000-1", nodes=1), [], cat)
