"""Workload simulator: the same month of jobs run on several platforms, billed vs busy GPU-hours.

A *workload* is a list of jobs (submit time, GPUs, duration on the reference GPU, kind train|notebook),
given explicitly or generated from a few documented parameters. A *platform* says how GPUs are held:

- ``dedicated``: one always-on instance per engineer (the seed's AWS p3 fleet); an engineer's jobs
  queue on their own instance.
- ``cluster``: a fixed shared cluster (the seed's Linode kubeadm cluster): one FIFO queue, nodes
  always on.
- ``autoscale``: a node pool between minNodes and maxNodes (GKE / EKS): nodes are requested when
  queued jobs do not fit, usable after ``scale_up_delay``, removed after ``scale_down_delay`` idle;
  on preemptible/spot capacity jobs are preempted (per job or per node-hour), lose the work since
  their last checkpoint, pay a restart overhead, and wait for a new node.

Billing: a node is billed from the moment it is requested until it is removed (Linode's monthly
cap applied per node); the platform's fixed parts (control plane, system nodes, fees, NAT) come
from the estimator. The simulation is event driven and deterministic for a given seed.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from costs.catalog import HOURS_PER_MONTH, Catalog, load_catalog, load_override_set
from costs.estimator import NodeGroup, StackShape, estimate

EPS = 1e-9


class ScenarioError(ValueError):
    """A scenario file that cannot be simulated."""


@dataclass(frozen=True)
class Job:
    id: int
    engineer: str
    submit_h: float
    gpus: int
    hours: float  # wall-clock hours on the reference GPU (notebooks: session length)
    kind: str = "train"  # train | notebook


@dataclass(frozen=True)
class Platform:
    name: str
    label: str
    cloud: str
    mode: str  # dedicated | cluster | autoscale
    capacity: str = "on-demand"
    instance_type: Optional[str] = None  # cluster / autoscale
    instances: Mapping[str, str] = field(default_factory=dict)  # dedicated: engineer -> instance type
    nodes: int = 0  # cluster
    min_nodes: int = 0  # autoscale
    max_nodes: int = 0  # autoscale
    speed: float = 1.0  # training speed vs the reference GPU
    scale_up_delay_h: float = 0.0
    scale_down_delay_h: float = 0.0
    preemption_per_job: float = 0.0
    preemption_per_node_hour: float = 0.0
    checkpoint_interval_h: float = 0.5
    restart_overhead_h: float = 0.0
    platform_shape: Optional[StackShape] = None  # fixed parts, priced by the estimator


@dataclass
class StackResult:
    platform: Platform
    horizon_h: float
    billed_gpu_hours: float
    busy_gpu_hours: float  # GPUs held by running jobs, rework included
    rework_gpu_hours: float  # lost to preemption (work since last checkpoint + restart overhead)
    reference_work_gpu_hours: float  # the workload on the reference GPU (same for every platform)
    gpu_usd: float
    fixed_usd: float
    usd_per_gpu_hour: float  # GPU $/billed GPU-hour (effective, Linode cap included)
    jobs_done: int
    jobs_total: int
    preemptions: int
    mean_wait_h: float
    p90_wait_h: float
    node_count_max: int
    fixed_lines: list[tuple[str, float]] = field(default_factory=list)

    @property
    def total_usd(self) -> float:
        return self.gpu_usd + self.fixed_usd

    @property
    def idle_gpu_hours(self) -> float:
        return max(self.billed_gpu_hours - self.busy_gpu_hours, 0.0)

    @property
    def idle_fraction(self) -> float:
        return self.idle_gpu_hours / self.billed_gpu_hours if self.billed_gpu_hours else 0.0

    @property
    def useful_gpu_hours(self) -> float:
        return self.busy_gpu_hours - self.rework_gpu_hours

    @property
    def usd_per_reference_gpu_hour(self) -> float:
        """Total $ per GPU-hour of work measured on the reference GPU (V100 / RTX 6000)."""
        return self.total_usd / self.reference_work_gpu_hours if self.reference_work_gpu_hours else 0.0


@dataclass
class SimulationReport:
    name: str
    baseline: str
    results: list[StackResult]
    assumptions: list[str]
    prices: str
    notes: list[str] = field(default_factory=list)

    def result(self, name: str) -> StackResult:
        for r in self.results:
            if r.platform.name == name:
                return r
        raise KeyError(name)

    def ratio(self, name: str) -> float:
        """Baseline total $ / this stack's total $ (how many times cheaper)."""
        return self.result(self.baseline).total_usd / self.result(name).total_usd


# ---------------------------------------------------------------------------------------------
# Workload
# ---------------------------------------------------------------------------------------------


def generate_workload(spec: Mapping[str, Any]) -> list[Job]:
    """Jobs for a month from documented parameters (see examples/seed-scenario.yaml)."""
    rng = random.Random(int(spec.get("seed", 0)))
    month_h = float(spec.get("month_hours", HOURS_PER_MONTH))
    engineers = spec["engineers"]
    day_start, day_end = spec.get("workday_hours", [9, 18])
    jobs_per_day = float(spec.get("train_jobs_per_workday", 2.0))
    gpu_mix = {int(k): float(v) for k, v in spec.get("gpus_per_job", {1: 1.0}).items()}
    dur = spec.get("duration_hours", {"median": 2.0, "sigma": 0.8, "max": 24})
    nb = spec.get("notebooks") or {}
    # the last submissions leave a day and a half for work to finish inside the month
    days = int((month_h - float(spec.get("quiet_tail_hours", 36))) // 24)
    jobs: list[Job] = []
    for eng in engineers:
        name, cap = eng["name"], int(eng.get("max_gpus", 8))
        choices = [(g, w) for g, w in gpu_mix.items() if g <= cap] or [(1, 1.0)]
        for day in range(days):
            if day % 7 in (5, 6):  # day 0 is a Monday; weekends have no submissions
                continue
            n = _poisson(rng, jobs_per_day)
            for _ in range(n):
                t = day * 24 + rng.uniform(day_start, day_end)
                g = _weighted(rng, choices)
                h = min(rng.lognormvariate(math.log(float(dur["median"])), float(dur["sigma"])), float(dur["max"]))
                jobs.append(Job(0, name, t, g, round(h, 4), "train"))
            if nb.get("hours_per_workday"):
                t = day * 24 + float(nb.get("start_hour", 10)) + rng.uniform(-0.5, 0.5)
                jobs.append(Job(0, name, t, int(nb.get("gpus", 1)), float(nb["hours_per_workday"]), "notebook"))
    jobs.sort(key=lambda j: (j.submit_h, j.engineer))
    return [Job(i, j.engineer, j.submit_h, j.gpus, j.hours, j.kind) for i, j in enumerate(jobs)]


def _poisson(rng: random.Random, lam: float) -> int:
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def _weighted(rng: random.Random, choices: list[tuple[int, float]]) -> int:
    total = sum(w for _, w in choices)
    x = rng.uniform(0, total)
    for g, w in choices:
        x -= w
        if x <= 0:
            return g
    return choices[-1][0]


# ---------------------------------------------------------------------------------------------
# Simulation
# ---------------------------------------------------------------------------------------------


@dataclass
class _Node:
    id: int
    gpus: int
    created_h: float
    ready_h: float
    group: str
    used: int = 0
    idle_since: float = 0.0
    removed_h: Optional[float] = None
    permanent: bool = False


@dataclass
class _Run:
    job: Job
    work_h: float  # wall hours of work this platform needs in total
    done_h: float  # work done before this attempt
    start_h: float
    finish_h: float
    preempt_h: Optional[float]
    nodes: list[tuple[_Node, int]]
    overhead_h: float = 0.0


def simulate_platform(platform: Platform, jobs: list[Job], catalog: Catalog, month_hours: float = HOURS_PER_MONTH,
                      seed: int = 0) -> StackResult:
    rng = random.Random(seed * 7919 + sum(map(ord, platform.name)))
    cloud = platform.cloud
    preemptible = platform.capacity in ("spot", "preemptible") and (
        platform.preemption_per_job > 0 or platform.preemption_per_node_hour > 0)

    def itype(name: str):
        t = catalog.instance(cloud, name)
        if t is None or not t.is_gpu:
            raise ScenarioError(f"{platform.name}: {name!r} is not a {cloud} GPU type in the catalog")
        if t.price(platform.capacity) is None:
            raise ScenarioError(f"{platform.name}: {name} has no {platform.capacity} price")
        return t

    nodes: list[_Node] = []
    next_id = [0]

    def add_node(type_name: str, group: str, now: float, delay: float, permanent: bool) -> _Node:
        t = itype(type_name)
        n = _Node(next_id[0], t.gpus, now, now + delay, group, idle_since=now + delay, permanent=permanent)
        n.type_name = type_name  # type: ignore[attr-defined]
        next_id[0] += 1
        nodes.append(n)
        return n

    if platform.mode == "dedicated":
        engineers = {j.engineer for j in jobs}
        missing = sorted(engineers - set(platform.instances))
        if missing:
            raise ScenarioError(f"{platform.name}: no instance for engineers {', '.join(missing)}")
        for eng, tname in platform.instances.items():
            add_node(tname, eng, 0.0, 0.0, True)
    elif platform.mode == "cluster":
        if not platform.instance_type or platform.nodes < 1:
            raise ScenarioError(f"{platform.name}: a cluster needs instance_type and nodes >= 1")
        for _ in range(platform.nodes):
            add_node(platform.instance_type, "*", 0.0, 0.0, True)
    elif platform.mode == "autoscale":
        if not platform.instance_type or platform.max_nodes < 1 or platform.min_nodes > platform.max_nodes:
            raise ScenarioError(f"{platform.name}: autoscale needs instance_type and 0 <= min_nodes <= max_nodes >= 1")
        for _ in range(platform.min_nodes):
            add_node(platform.instance_type, "*", 0.0, 0.0, False)
    else:
        raise ScenarioError(f"{platform.name}: mode must be dedicated, cluster or autoscale, not {platform.mode!r}")

    def group_of(job: Job) -> str:
        return job.engineer if platform.mode == "dedicated" else "*"

    group_capacity: dict[str, int] = {}
    if platform.mode == "autoscale":
        group_capacity["*"] = itype(platform.instance_type).gpus * platform.max_nodes  # type: ignore[arg-type]
    else:
        for n in nodes:
            group_capacity[n.group] = group_capacity.get(n.group, 0) + n.gpus

    pending = sorted(jobs, key=lambda j: j.submit_h)
    arrivals = 0
    queue: list[tuple[float, int, Job, float]] = []  # (submit, id, job, done_h)
    running: list[_Run] = []
    waits: list[float] = []
    first_start: dict[int, float] = {}
    dropped: list[Job] = []
    restarts: set[int] = set()
    restarts_seen: set[int] = set()  # jobs that have started at least once
    billed_gpu_h = busy_gpu_h = rework_gpu_h = 0.0
    preemptions = 0
    done = 0
    max_nodes_seen = len(nodes)

    def work_of(job: Job) -> float:
        return job.hours / platform.speed if job.kind == "train" else job.hours

    def live_nodes() -> list[_Node]:
        return [n for n in nodes if n.removed_h is None]

    def try_place(job: Job, now: float) -> Optional[list[tuple[_Node, int]]]:
        cands = [n for n in live_nodes() if n.group == group_of(job) and n.ready_h <= now + EPS and n.gpus > n.used]
        if sum(n.gpus - n.used for n in cands) < job.gpus:
            return None
        # fewest nodes: fill the emptiest-fitting nodes first
        cands.sort(key=lambda n: (-(n.gpus - n.used), n.id))
        take, need = [], job.gpus
        for n in cands:
            k = min(need, n.gpus - n.used)
            take.append((n, k))
            need -= k
            if need == 0:
                break
        return take

    t = 0.0
    same_instant = 0
    while True:
        # 1. arrivals
        while arrivals < len(pending) and pending[arrivals].submit_h <= t + EPS:
            j = pending[arrivals]
            arrivals += 1
            if j.gpus > group_capacity.get(group_of(j), 0):
                dropped.append(j)
                continue
            heapq.heappush(queue, (j.submit_h, j.id, j, 0.0))
        # 2. preemptions (every job on a preempted node is hit), then completions
        hit = [r for r in running if r.preempt_h is not None and r.preempt_h <= t + EPS and r.preempt_h < r.finish_h]
        gone = {id(n) for r in hit for n, _ in r.nodes}
        hit += [r for r in running if r not in hit and any(id(n) in gone for n, _ in r.nodes)]
        for r in hit:
            elapsed = max(t - r.start_h - r.overhead_h, 0.0)
            lost = (elapsed % platform.checkpoint_interval_h) if r.job.kind == "train" else 0.0
            rework_gpu_h += lost * r.job.gpus
            preemptions += 1
            running.remove(r)
            for n, k in r.nodes:
                n.used -= k
                n.removed_h = t  # the preempted VM is gone; the autoscaler asks for a new one
            restarts.add(r.job.id)
            heapq.heappush(queue, (r.job.submit_h, r.job.id, r.job, r.done_h + elapsed - lost))
        for r in list(running):
            if r.finish_h <= t + EPS:
                running.remove(r)
                done += 1
                for n, k in r.nodes:
                    n.used -= k
                    if n.used == 0:
                        n.idle_since = t
        # 4. schedule (best-effort FIFO: a job that fits starts even if an older one waits)
        waiting = sorted(queue)
        queue = []
        for item in waiting:
            submit, _, job, done_h = item
            place = try_place(job, t)
            if place is None:
                queue.append(item)
                continue
            for n, k in place:
                n.used += k
            work = work_of(job)
            overhead = 0.0
            first_attempt = job.id not in restarts_seen
            restarts_seen.add(job.id)
            if job.id in restarts:  # reload the checkpoint / restart the kernel: work done again
                restarts.discard(job.id)
                overhead = platform.restart_overhead_h
                rework_gpu_h += overhead * job.gpus
            remaining = work - done_h + overhead
            preempt_at = None
            if preemptible:
                # the per-job rate is per job (the seed's "one shutdown every 50 jobs"), not per attempt
                if platform.preemption_per_job > 0 and first_attempt and \
                        rng.random() < platform.preemption_per_job:
                    preempt_at = t + rng.uniform(0, remaining)
                if platform.preemption_per_node_hour > 0:
                    rate = platform.preemption_per_node_hour * len(place)
                    cand = t + rng.expovariate(rate)
                    preempt_at = cand if preempt_at is None else min(preempt_at, cand)
            if job.id not in first_start:
                first_start[job.id] = t
                waits.append(t - submit)
            running.append(_Run(job, work, done_h, t, t + remaining, preempt_at, place, overhead))
        heapq.heapify(queue)
        # 5. autoscaler: scale up for queued jobs that do not fit, scale down idle nodes
        if platform.mode == "autoscale":
            live = live_nodes()
            gpn = itype(platform.instance_type).gpus  # type: ignore[arg-type]
            free_virtual = sum(n.gpus - n.used for n in live)  # ready free + booting
            added = 0
            for _, _, job, _ in sorted(queue):
                if job.gpus <= free_virtual:
                    free_virtual -= job.gpus
                    continue
                need = math.ceil((job.gpus - free_virtual) / gpn)
                room = platform.max_nodes - len(live_nodes())
                if need <= room:
                    for _ in range(need):
                        add_node(platform.instance_type, "*", t, platform.scale_up_delay_h, False)  # type: ignore[arg-type]
                        added += 1
                    free_virtual += need * gpn - job.gpus
                else:
                    break
            max_nodes_seen = max(max_nodes_seen, len(live_nodes()))
            if added and platform.scale_up_delay_h <= EPS and same_instant < 3:
                same_instant += 1  # nodes usable at once: schedule again before time moves
                continue
            same_instant = 0
            removable = len(live_nodes()) - platform.min_nodes
            for n in sorted(live_nodes(), key=lambda n: n.idle_since):
                if removable <= 0:
                    break
                if n.used == 0 and n.ready_h <= t + EPS and n.idle_since + platform.scale_down_delay_h <= t + EPS:
                    n.removed_h = t
                    removable -= 1
        # 6. next event
        cands: list[float] = []
        if arrivals < len(pending):
            cands.append(pending[arrivals].submit_h)
        for r in running:
            cands.append(min(r.finish_h, r.preempt_h) if r.preempt_h is not None else r.finish_h)
        for n in live_nodes():
            if n.ready_h > t + EPS:
                cands.append(n.ready_h)
            elif platform.mode == "autoscale" and n.used == 0 and len(live_nodes()) > platform.min_nodes:
                cands.append(n.idle_since + platform.scale_down_delay_h)
        if t < month_hours - EPS:
            cands.append(month_hours)
        cands = [c for c in cands if c > t + EPS]
        if t > 20 * month_hours:  # a platform that cannot finish the work (e.g. preempted faster than it checkpoints)
            dropped.extend(job for _, _, job, _ in queue)
            dropped.extend(r.job for r in running)
            cands = []
            queue = []
        if not cands:
            if queue:  # nothing can change any more: the rest can never be placed
                dropped.extend(job for _, _, job, _ in queue)
                queue = []
            break
        nxt = min(cands)
        dt = nxt - t
        for n in live_nodes():
            busy_n = n.used
            billed_gpu_h += n.gpus * dt
            busy_gpu_h += busy_n * dt
        t = nxt

    horizon = max(t, month_hours)
    # bill nodes (permanent nodes to the horizon); Linode caps each node-month
    gpu_usd = 0.0
    for n in nodes:
        end = n.removed_h if n.removed_h is not None else horizon
        hours = end - n.created_h
        if n.removed_h is None and horizon > t:
            billed_gpu_h += n.gpus * (horizon - t)
        ti = catalog.instance(cloud, n.type_name)  # type: ignore[attr-defined]
        price = ti.price(platform.capacity)
        cost = price.usd_per_hour * hours
        if ti.monthly_cap_usd is not None:
            cost = min(cost, ti.monthly_cap_usd * max(1.0, hours / HOURS_PER_MONTH))
        gpu_usd += cost
    fixed_usd, fixed_lines = 0.0, []
    if platform.platform_shape is not None:
        est = estimate(platform.platform_shape, catalog)
        scale = horizon / HOURS_PER_MONTH
        fixed_usd = est.idle_monthly_usd * scale
        fixed_lines = [(ln.name, ln.idle_monthly_usd * scale) for ln in est.lines]
    ref_work = sum(j.hours * j.gpus for j in jobs if j not in dropped)
    waits_sorted = sorted(waits)
    p90 = waits_sorted[int(0.9 * (len(waits_sorted) - 1))] if waits_sorted else 0.0
    return StackResult(
        platform=platform, horizon_h=horizon, billed_gpu_hours=billed_gpu_h, busy_gpu_hours=busy_gpu_h,
        rework_gpu_hours=rework_gpu_h, reference_work_gpu_hours=ref_work, gpu_usd=gpu_usd, fixed_usd=fixed_usd,
        usd_per_gpu_hour=gpu_usd / billed_gpu_h if billed_gpu_h else 0.0, jobs_done=done, jobs_total=len(jobs),
        preemptions=preemptions, mean_wait_h=sum(waits) / len(waits) if waits else 0.0, p90_wait_h=p90,
        node_count_max=max_nodes_seen, fixed_lines=fixed_lines)


# ---------------------------------------------------------------------------------------------
# Scenario files
# ---------------------------------------------------------------------------------------------


def _platform_from(d: Mapping[str, Any]) -> Platform:
    try:
        name, cloud, mode = d["name"], d["cloud"], d["mode"]
    except KeyError as exc:
        raise ScenarioError(f"stack entry {d.get('name', '?')}: missing {exc.args[0]}") from None
    pre = d.get("preemption") or {}
    shape = None
    pf = d.get("platform")
    if pf is not None:
        system = pf.get("system_nodes")
        shape = StackShape(
            cloud=cloud, region=pf.get("region"), gpu_pools=(),
            control_plane_type=pf.get("control_plane_type"), control_plane_count=int(pf.get("control_plane_count", 0)),
            system_nodes=None if system is None else tuple(
                NodeGroup(s.get("role", "system"), s["instance_type"], int(s["count"])) for s in system),
            load_balancers=pf.get("load_balancers"), nat_gateways=pf.get("nat_gateways"),
            managed_control_plane=bool(pf.get("managed_control_plane", cloud != "linode")), name=name)
    return Platform(
        name=name, label=d.get("label", name), cloud=cloud, mode=mode, capacity=d.get("capacity", "on-demand"),
        instance_type=d.get("instance_type"), instances=dict(d.get("instances") or {}), nodes=int(d.get("nodes", 0)),
        min_nodes=int(d.get("min_nodes", 0)), max_nodes=int(d.get("max_nodes", 0)), speed=float(d.get("speed", 1.0)),
        scale_up_delay_h=float(d.get("scale_up_delay_minutes", 0)) / 60,
        scale_down_delay_h=float(d.get("scale_down_delay_minutes", 0)) / 60,
        preemption_per_job=float(pre.get("per_job", 0.0)), preemption_per_node_hour=float(pre.get("per_node_hour", 0.0)),
        checkpoint_interval_h=float(d.get("checkpoint_interval_minutes", 30)) / 60,
        restart_overhead_h=float(d.get("restart_overhead_minutes", 0)) / 60, platform_shape=shape)


def load_scenario(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    if not isinstance(doc, Mapping) or "stacks" not in doc or "workload" not in doc:
        raise ScenarioError(f"{path}: a scenario needs 'workload' and 'stacks'")
    return dict(doc)


def scenario_jobs(doc: Mapping[str, Any]) -> list[Job]:
    w = doc["workload"]
    if w.get("jobs"):
        return [Job(i, str(j.get("engineer", "team")), float(j["submit_hour"]), int(j["gpus"]), float(j["hours"]),
                    j.get("kind", "train")) for i, j in enumerate(w["jobs"])]
    return generate_workload(w)


def simulate(doc: Mapping[str, Any], prices: Optional[str] = None) -> SimulationReport:
    """Run every stack of a scenario on the same jobs. `prices`: None = the scenario's own choice,
    "current" = the catalog as is, or an override-set name (e.g. "seed-era-2022")."""
    price_set = prices if prices is not None else doc.get("prices", "current")
    overrides = None if price_set in (None, "current") else load_override_set(price_set)
    catalog = load_catalog(overrides)
    jobs = scenario_jobs(doc)
    month = float(doc["workload"].get("month_hours", HOURS_PER_MONTH))
    seed = int(doc["workload"].get("seed", 0))
    results = [simulate_platform(_platform_from(s), jobs, catalog, month, seed) for s in doc["stacks"]]
    baseline = doc.get("baseline") or results[0].platform.name
    if baseline not in {r.platform.name for r in results}:
        raise ScenarioError(f"baseline {baseline!r} is not one of the stacks")
    return SimulationReport(name=str(doc.get("name", "scenario")), baseline=baseline, results=results,
                            assumptions=[str(a) for a in doc.get("assumptions", [])], prices=str(price_set),
                            notes=[str(n) for n in doc.get("notes", [])])


# ---------------------------------------------------------------------------------------------
# Text output
# ---------------------------------------------------------------------------------------------


def _money(x: float) -> str:
    return f"${x:,.0f}"


def render_report(rep: SimulationReport) -> str:
    rs = rep.results
    base = rep.result(rep.baseline)
    rows = [
        ("GPU type / capacity", lambda r: f"{_types(r.platform)} {r.platform.capacity}"),
        ("billed GPU-hours", lambda r: f"{r.billed_gpu_hours:,.0f}"),
        ("busy GPU-hours", lambda r: f"{r.busy_gpu_hours:,.0f}"),
        ("  of which rework", lambda r: f"{r.rework_gpu_hours:,.1f}"),
        ("idle share of billed", lambda r: f"{100 * r.idle_fraction:.0f} %"),
        ("GPU $/billed GPU-hour", lambda r: f"${r.usd_per_gpu_hour:.3f}"),
        ("GPU nodes $", lambda r: _money(r.gpu_usd)),
        ("fixed parts $", lambda r: _money(r.fixed_usd)),
        ("TOTAL $ (month)", lambda r: _money(r.total_usd)),
        (f"ratio {rep.baseline} / stack", lambda r: f"{base.total_usd / r.total_usd:.1f}x"),
        ("$ per V100-equiv GPU-hour", lambda r: f"${r.usd_per_reference_gpu_hour:.2f}"),
        ("jobs done / total", lambda r: f"{r.jobs_done}/{r.jobs_total}"),
        ("preemptions", lambda r: str(r.preemptions)),
        ("mean / p90 queue wait h", lambda r: f"{r.mean_wait_h:.1f} / {r.p90_wait_h:.1f}"),
    ]
    out = [f"Scenario: {rep.name}   (prices: {rep.prices}; month = {HOURS_PER_MONTH:.0f} h)", ""]
    cells = [[fn(r) for r in rs] for _, fn in rows]
    lw = max(len(label) for label, _ in rows)
    cw = [max(len(r.platform.name), *(len(c[i]) for c in cells)) for i, r in enumerate(rs)]
    head = f"{'':<{lw}}" + "".join(f" | {r.platform.name:>{cw[i]}}" for i, r in enumerate(rs))
    out += [head, "-" * len(head)]
    for (label, _), row in zip(rows, cells):
        out.append(f"{label:<{lw}}" + "".join(f" | {c:>{cw[i]}}" for i, c in enumerate(row)))
    out += ["", "Why the gap:"]
    for r in rs:
        if r is base:
            continue
        out += ["  " + line for line in explain_gap(base, r)]
    if rep.notes:
        out += ["", "Notes:"] + [f"  - {n}" for n in rep.notes]
    return "\n".join(out)


def _types(p: Platform) -> str:
    if p.mode == "dedicated":
        return "+".join(sorted(set(p.instances.values())))
    return str(p.instance_type)


def explain_gap(base: StackResult, other: StackResult) -> list[str]:
    """Decompose base total / other total into idle hours, price per GPU-hour, speed and rework."""
    b, o = base, other
    ratio = b.total_usd / o.total_usd
    lines = [f"{b.platform.name} costs {ratio:.1f}x {o.platform.name} "
             f"({_money(b.total_usd)} vs {_money(o.total_usd)}) for the same "
             f"{b.reference_work_gpu_hours:,.0f} GPU-hours of work on the reference GPU:"]
    lines.append(f"  - idle hours: {b.platform.name} bills {b.billed_gpu_hours:,.0f} GPU-hours of which "
                 f"{100 * b.idle_fraction:.0f} % idle; {o.platform.name} bills {o.billed_gpu_hours:,.0f} "
                 f"({100 * o.idle_fraction:.0f} % idle) -> {b.billed_gpu_hours / max(o.billed_gpu_hours, EPS):.1f}x "
                 f"fewer billed GPU-hours")
    lines.append(f"  - price per GPU-hour: ${b.usd_per_gpu_hour:.2f} vs ${o.usd_per_gpu_hour:.2f} "
                 f"({o.platform.capacity}) -> {b.usd_per_gpu_hour / max(o.usd_per_gpu_hour, EPS):.1f}x")
    if o.platform.speed != b.platform.speed:
        lines.append(f"  - speed: training runs {o.platform.speed / b.platform.speed:.1f}x faster on "
                     f"{_types(o.platform)}, so the same work needs fewer busy GPU-hours "
                     f"({o.busy_gpu_hours:,.0f} vs {b.busy_gpu_hours:,.0f})")
    if o.preemptions or o.rework_gpu_hours:
        lines.append(f"  - preemption rework: {o.preemptions} preemptions cost {o.rework_gpu_hours:,.1f} GPU-hours "
                     f"({100 * o.rework_gpu_hours / max(o.busy_gpu_hours, EPS):.1f} % of busy time) "
                     f"plus the wait for replacement nodes")
    lines.append(f"  - fixed parts: {_money(b.fixed_usd)} vs {_money(o.fixed_usd)} "
                 + (f"({', '.join(f'{n} {_money(v)}' for n, v in o.fixed_lines)})" if o.fixed_lines else ""))
    gpu_ratio = b.gpu_usd / o.gpu_usd if o.gpu_usd else float("inf")
    lines.append(f"  - check: billed-hours ratio x price ratio = "
                 f"{b.billed_gpu_hours / max(o.billed_gpu_hours, EPS):.1f} x "
                 f"{b.usd_per_gpu_hour / max(o.usd_per_gpu_hour, EPS):.2f} = {gpu_ratio:.1f}x on GPU nodes; "
                 f"fixed parts bring it to {ratio:.1f}x")
    return lines


__all__ = ["Job", "Platform", "ScenarioError", "SimulationReport", "StackResult", "explain_gap", "generate_workload",
           "load_scenario", "render_report", "scenario_jobs", "simulate", "simulate_platform"]
