"""The workload simulator: the seed scenario (AWS/GKE >= 6x, explained), and small exact cases."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_platform.costs.__main__ import main
from gpu_platform.costs.catalog import load_catalog
from gpu_platform.costs.simulator import Job, Platform, ScenarioError, load_scenario, render_report, simulate, simulate_platform

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
                 min_nodes=0, max_nodes=4, speed=2.0, scale_up_delay_h=0.1, scale_down_delay_h=0.2, allow_multi_node=True)
    # a 2-GPU job on 1-GPU nodes must be declared multi-node (it spans two nodes; slowdown 0 here)
    r = simulate_platform(p, [Job(0, "e", 1.0, 2, 4.0, "train", True)], cat, month_hours=24)
    # 2 nodes: boot 0.1 h + run 4/2 = 2 h + idle 0.2 h = 2.3 h each
    assert r.billed_gpu_hours == pytest.approx(2 * 2.3)
    assert r.busy_gpu_hours == pytest.approx(2 * 2.0)
    assert r.gpu_usd == pytest.approx(2 * 2.3 * cat.instance("gcp", "a2-highgpu-1g").spot.usd_per_hour)
    assert r.mean_wait_h == pytest.approx(0.1)


def test_preemption_loses_work_since_the_last_checkpoint():
    cat = load_catalog()
    p = Platform(name="gke", label="", cloud="gcp", mode="autoscale", capacity="preemptible",
                 instance_type="a2-highgpu-1g", max_nodes=2, preemption_per_job=0.5, checkpoint_interval_h=0.5,
                 restart_overhead_h=0.1, sigterm_checkpoint=False)
    r = simulate_platform(p, _jobs(("e", 0.0, 1, 10.0, "train")), cat, month_hours=48, seed=4)
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


# --- issue 14 item 4 / issue 15 item 4: an honest simulator ------------------------------------------------

from gpu_platform.costs.simulator import PREEMPTION_NOTICE_S, simulate_many  # noqa: E402


def _jobs2(*specs):
    return [Job(i, e, t, g, h, k, m) for i, (e, t, g, h, k, m) in enumerate(specs)]


HAND_JOBS = (("a", 0.0, 1, 4.0, "train", False), ("b", 1.0, 2, 3.0, "train", True), ("a", 2.0, 1, 2.0, "notebook", False))


def test_hand_computed_workload_busy_and_billed_gpu_hours_per_option():
    """Three jobs over a 24 h 'month' (reference-GPU hours): J0 a 1 GPU 4 h train at 0 h; J1 b 2 GPUs 3 h
    train at 1 h, may span nodes; J2 a 1 GPU 2 h notebook at 2 h.

    A) dedicated: a -> p3.2xlarge (1 GPU), b -> p3.8xlarge (4 GPUs), always on.
       billed = (1 + 4) x 24 = 120; J0 0-4 (4), J2 waits for a's only GPU, 4-6 (2), J1 1-4 on b (2 x 3 = 6):
       busy = 12; $ = 24 x (3.06 + 12.24) = 367.20; mean wait = (0 + 0 + 2) / 3.
    B) cluster of 2 x g1-gpu-rtx6000-1 (1 GPU each), multi-node allowed, slowdown 0.5:
       billed = 2 x 24 = 48; J0 node0 0-4 (4); J1 needs 2 GPUs, only node1 free, waits; J2 node1 2-4 (2);
       at 4 J1 spans both nodes for 3 x 1.5 = 4.5 h (2 x 4.5 = 9): busy = 15; $ = 2 x 1.50 x 24 = 72.
    C) GKE a2-highgpu-1g spot 0..4 nodes, speed 2, boot 0.25 h, scale-down after 0.5 h idle, slowdown 0.5:
       N0 requested 0 ready 0.25: J0 0.25-2.25 (4 / 2 = 2 h); J1 at 1 asks 2 nodes N1 N2 ready 1.25, spans:
       3 / 2 x 1.5 = 2.25 h, 1.25-3.5; J2 at 2 asks N3 (ready 2.25) but at 2.25 N0 frees first and takes it
       (notebook: 2 h, no speed-up) 2.25-4.25; N3 idle from 2.25, removed 2.75; N1 N2 removed 4.0; N0 removed 4.75.
       billed = 4.75 + 3 + 3 + 0.75 = 11.5; busy = 2 + 2 x 2.25 + 2 = 8.5; $ = 11.5 x a2-highgpu-1g Spot $/h.
    """
    cat = load_catalog()
    jobs = _jobs2(*HAND_JOBS)
    a = simulate_platform(Platform(name="aws", label="", cloud="aws", mode="dedicated",
                                   instances={"a": "p3.2xlarge", "b": "p3.8xlarge"}), jobs, cat, month_hours=24)
    b = simulate_platform(Platform(name="lin", label="", cloud="linode", mode="cluster", instance_type="g1-gpu-rtx6000-1",
                                   nodes=2, allow_multi_node=True, multi_node_slowdown=0.5), jobs, cat, month_hours=24)
    c = simulate_platform(Platform(name="gke", label="", cloud="gcp", mode="autoscale", capacity="spot",
                                   instance_type="a2-highgpu-1g", min_nodes=0, max_nodes=4, speed=2.0,
                                   scale_up_delay_h=0.25, scale_down_delay_h=0.5, allow_multi_node=True,
                                   multi_node_slowdown=0.5), jobs, cat, month_hours=24)
    for r, billed, busy in ((a, 120.0, 12.0), (b, 48.0, 15.0), (c, 11.5, 8.5)):
        assert r.billed_gpu_hours == pytest.approx(billed, rel=0.01), r.platform.name
        assert r.busy_gpu_hours == pytest.approx(busy, rel=0.01), r.platform.name
        assert r.jobs_done == 3 and r.reference_work_gpu_hours == pytest.approx(12.0)
    assert a.gpu_usd == pytest.approx(367.20, rel=0.01) and a.mean_wait_h == pytest.approx(2 / 3)
    assert b.gpu_usd == pytest.approx(72.0, rel=0.01) and b.multi_node_jobs == 1
    assert c.gpu_usd == pytest.approx(11.5 * cat.instance("gcp", "a2-highgpu-1g").spot.usd_per_hour, rel=0.01)
    assert c.multi_node_jobs == 1 and c.node_count_max == 4


def _gke(**kw):
    base = dict(name="gke", label="", cloud="gcp", mode="autoscale", capacity="preemptible",
                instance_type="a2-highgpu-1g", max_nodes=2, checkpoint_interval_h=0.5, restart_overhead_h=0.1,
                step_s=90.0, checkpoint_write_s=20.0)
    base.update(kw)
    return Platform(**base)


@pytest.mark.parametrize("platform, lost_h, rule", [
    # GCP: 30 s notice, 60 s grace >= 20 s write: the SIGTERM checkpoint keeps all but the step in flight:
    # 3.41 h = 12,276 s = 136 steps of 90 s + 36 s -> 0.01 h lost
    (_gke(), 0.01, "SIGTERM checkpoint"),
    # no handler: the work since the last 30-min checkpoint, 3.41 - 3.0 = 0.41 h
    (_gke(sigterm_checkpoint=False), 0.41, "periodic checkpoint"),
    # a checkpoint that takes longer than the notice cannot be saved in time: periodic rule
    (_gke(checkpoint_write_s=45.0), 0.41, "periodic checkpoint"),
    # AWS: 2 min notice; a 100 s write fits, but the pod's 60 s grace period does not
    (_gke(cloud="aws", instance_type="g5.xlarge", capacity="spot", checkpoint_write_s=100.0), 0.41, "periodic checkpoint"),
    (_gke(cloud="aws", instance_type="g5.xlarge", capacity="spot", checkpoint_write_s=100.0, grace_s=150.0), 0.01,
     "SIGTERM checkpoint"),
])
def test_exact_rework_for_a_known_preemption_schedule(platform, lost_h, rule):
    p = Platform(**{**platform.__dict__, "preempt_at_h": (3.41,)})
    r = simulate_platform(p, _jobs2(("e", 0.0, 1, 10.0, "train", False)), load_catalog(), month_hours=48)
    assert r.preemptions == 1 and r.jobs_done == 1
    assert r.rework_gpu_hours == pytest.approx(lost_h + 0.1, abs=1e-6)  # lost work + 0.1 h reload
    assert r.busy_gpu_hours == pytest.approx(10.0 + lost_h + 0.1, abs=1e-6)
    assert p.preemption_rule().startswith(rule)


def test_notice_lengths_per_cloud_are_the_documented_ones():
    assert PREEMPTION_NOTICE_S == {"gcp": 30.0, "aws": 120.0, "linode": 0.0}


def test_preemption_hits_every_attempt_and_notebooks_lose_their_session():
    cat = load_catalog()
    # scripted reclaims at 1 h and 2 h: the restarted attempt is hit again
    p = _gke(preempt_at_h=(1.0, 2.0), restart_overhead_h=0.0, step_s=3600.0)
    r = simulate_platform(p, _jobs2(("e", 0.0, 1, 5.0, "train", False)), cat, month_hours=48)
    assert r.preemptions == 2
    # a notebook preempted 1.5 h into a 3 h session redoes those 1.5 h (kernel state is lost)
    nb = simulate_platform(_gke(preempt_at_h=(1.5,), restart_overhead_h=0.0), _jobs2(("e", 0.0, 1, 3.0, "notebook", False)),
                           cat, month_hours=48)
    assert nb.preemptions == 1 and nb.notebook_lost_h == pytest.approx(1.5) and nb.rework_gpu_hours == pytest.approx(1.5)
    assert nb.busy_gpu_hours == pytest.approx(4.5)
    # the per-job probability applies to every attempt: with p = 1 a job can never finish, and that is an error
    with pytest.raises(ScenarioError, match="have not finished"):
        simulate_platform(_gke(preemption_per_job=1.0), _jobs2(("e", 0.0, 1, 2.0, "train", False)), cat, month_hours=2)


def test_jobs_that_can_never_fit_are_errors_naming_them():
    cat = load_catalog()
    single_pod = _jobs2(("e", 0.0, 4, 1.0, "train", False))
    with pytest.raises(ScenarioError, match=r"job 0 \(e, train, 4 GPUs\) is a single pod asking for 4 GPUs and a node has 1"):
        simulate_platform(_gke(max_nodes=8, allow_multi_node=True), single_pod, cat)
    spanning = _jobs2(("e", 0.0, 4, 1.0, "train", True))
    with pytest.raises(ScenarioError, match="does not run multi-node jobs"):
        simulate_platform(_gke(max_nodes=8), spanning, cat)
    with pytest.raises(ScenarioError, match="needs 4 GPUs, the pool at its largest has 2"):
        simulate_platform(_gke(max_nodes=2, allow_multi_node=True), spanning, cat)
    # allowed: it spans 4 nodes and pays the slowdown
    r = simulate_platform(_gke(max_nodes=4, allow_multi_node=True, multi_node_slowdown=0.2), spanning, cat, month_hours=24)
    assert r.multi_node_jobs == 1 and r.busy_gpu_hours == pytest.approx(4 * 1.2)


def test_month_length_printed_is_the_one_used():
    doc = load_scenario(SCENARIO)
    doc["workload"] = dict(doc["workload"], month_hours=720)
    rep = simulate(doc)
    text = render_report(rep)
    assert "month = 720 h" in text and "730" not in text.splitlines()[0]
    assert rep.result("aws-p3-always-on").billed_gpu_hours == pytest.approx(36 * 720)
    assert "gke-a100-preemptible (gcp): SIGTERM checkpoint" in text and "30 s preemption notice" in text


def test_monte_carlo_prints_mean_and_spread(capsys):
    rep = simulate_many(load_scenario(SCENARIO), 3)
    gke = rep.stats["gke-a100-preemptible"]
    assert gke["total_usd"].low <= gke["total_usd"].mean <= gke["total_usd"].high
    assert gke["ratio"].low >= 6  # the 6x holds on every seed, not just the shipped one
    assert main(["simulate", str(SCENARIO), "--seeds", "3"]) == 0
    out = capsys.readouterr().out
    assert "Monte Carlo" in out and "3 seeds 2022..2024" in out and "+-" in out


@pytest.mark.parametrize("itype,cloud,nodes", [("g5.48xlarge", "aws", 1000), ("a2-highgpu-1g", "gcp", 1000)])
def test_the_cost_report_simulates_a_bounded_pool_whatever_its_size(monkeypatch, itype, cloud, nodes):
    """Issue 23: the simulation's work grew with the pool (minutes at 1000 nodes). The report simulates
    at most SIMULATED_GPUS_MAX GPUs of the same shape and says so (timing: `make bench`)."""
    from gpu_platform.costs import report, simulator
    from gpu_platform.costs.estimator import PoolShape

    seen = []
    real = simulator.simulate_platform

    def recording(platform, jobs, *args, **kwargs):
        seen.append((platform, len(jobs)))
        return real(platform, jobs, *args, **kwargs)

    monkeypatch.setattr(simulator, "simulate_platform", recording)
    overhead = report.simulated_overhead(cloud, PoolShape("big", itype, "spot", 0, nodes))
    (platform, jobs), = seen
    gpus = load_catalog().instance(cloud, itype).gpus
    assert platform.max_nodes * gpus <= report.SIMULATED_GPUS_MAX and platform.min_nodes == 0
    assert jobs < 5000
    assert f"simulated at {platform.max_nodes} of its {nodes} nodes" in overhead.basis
