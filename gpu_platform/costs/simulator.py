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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

from gpu_platform.costs.catalog import HOURS_PER_MONTH, Catalog, a_cloud, load_catalog, load_override_set
from gpu_platform.costs.estimator import NodeGroup, StackShape, estimate

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
    multi_node: bool = False  # may span nodes (a PyTorchJob/TrainJob with several workers); else one pod, one node


# Notice a node gets before a Spot/preemptible reclaim, per cloud, in seconds (sourced; see PREEMPTION_NOTICE_SOURCES).
PREEMPTION_NOTICE_S = {"gcp": 30.0, "aws": 120.0, "linode": 0.0}
PREEMPTION_NOTICE_SOURCES = {
    "gcp": "GCP: preemptible and Spot VMs get a 30 s preemption notice (ACPI G2 soft-off) before they are stopped "
           "(https://cloud.google.com/compute/docs/instances/spot#preemption and "
           "https://cloud.google.com/compute/docs/instances/preemptible#preemption-process)",
    "aws": "AWS: a Spot Instance interruption notice comes two minutes before EC2 stops or terminates the instance "
           "(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/spot-instance-termination-notices.html)",
    "linode": "Linode: no Spot/preemptible capacity and no interruption notice (https://www.linode.com/pricing/); "
              "a node lost to a host failure gives no warning",
}


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
    allow_multi_node: bool = False  # the flavour runs jobs across nodes (Kubeflow Trainer / PyTorchJob)
    multi_node_slowdown: float = 0.0  # extra run time of a job spread over >1 node (0.25 = 25 % longer)
    # Lost work on preemption (issue 15): with a SIGTERM checkpoint that fits in the notice (and the pod's
    # grace period) a job loses only the step in flight; otherwise the work since its last periodic checkpoint.
    sigterm_checkpoint: bool = True  # the training program writes a checkpoint on SIGTERM (examples/training)
    notice_s: Optional[float] = None  # None = the cloud's PREEMPTION_NOTICE_S
    grace_s: float = 60.0  # the pod's terminationGracePeriodSeconds
    checkpoint_write_s: float = 20.0  # time to write one checkpoint
    step_s: float = 1.0  # time of one training step on this platform
    preempt_at_h: tuple[float, ...] = ()  # a known schedule: at each time every node running a job is reclaimed

    @property
    def notice(self) -> float:
        return PREEMPTION_NOTICE_S.get(self.cloud, 0.0) if self.notice_s is None else self.notice_s

    @property
    def sigterm_rule_applies(self) -> bool:
        """True when a preempted training job can checkpoint at its current step before it is killed."""
        return self.sigterm_checkpoint and min(self.notice, self.grace_s) >= self.checkpoint_write_s

    def lost_work_h(self, job: Job, elapsed_h: float) -> float:
        """Work (wall hours) a preemption throws away, `elapsed_h` after the attempt started running."""
        if job.kind != "train":
            return elapsed_h  # a notebook's kernel state (loaded data, trained cells) is gone with the node
        if self.sigterm_rule_applies:
            return elapsed_h % (self.step_s / 3600.0)
        return elapsed_h % self.checkpoint_interval_h

    def preemption_rule(self) -> str:
        if self.capacity not in ("spot", "preemptible"):
            return "no preemption (on-demand capacity)"
        window = min(self.notice, self.grace_s)
        if self.sigterm_rule_applies:
            return (f"SIGTERM checkpoint: notice {self.notice:g} s, grace {self.grace_s:g} s >= checkpoint write "
                    f"{self.checkpoint_write_s:g} s -> a job loses the step in flight (<= {self.step_s:g} s)")
        why = "no SIGTERM handler" if not self.sigterm_checkpoint else \
            f"notice/grace {window:g} s < checkpoint write {self.checkpoint_write_s:g} s"
        return (f"periodic checkpoint: {why} -> a job loses the work since its last checkpoint "
                f"(every {self.checkpoint_interval_h * 60:g} min)")


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
    notebook_lost_h: float = 0.0  # interactive work lost to preemptions (GPU-hours)
    multi_node_jobs: int = 0  # jobs that ran spread over more than one node

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
    month_hours: float = HOURS_PER_MONTH

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
    multi = bool(spec.get("train_jobs_multi_node", False))
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
                jobs.append(Job(0, name, t, g, round(h, 4), "train", multi))
            if nb.get("hours_per_workday"):
                t = day * 24 + float(nb.get("start_hour", 10)) + rng.uniform(-0.5, 0.5)
                jobs.append(Job(0, name, t, int(nb.get("gpus", 1)), float(nb["hours_per_workday"]), "notebook"))
    jobs.sort(key=lambda j: (j.submit_h, j.engineer))
    return [replace(j, id=i) for i, j in enumerate(jobs)]


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
    type_name: str
    used: int = 0
    idle_since: float = 0.0
    removed_h: Optional[float] = None
    permanent: bool = False


@dataclass
class _Run:
    job: Job
    work_h: float  # wall hours of work this platform needs in total (speed and multi-node slowdown applied)
    done_h: float  # work done before this attempt
    start_h: float
    finish_h: float
    preempt_h: Optional[float]
    nodes: list[tuple[_Node, int]]
    overhead_h: float = 0.0


def _never_fits(platform: Platform, job: Job, node_gpus: int, group_gpus: int) -> Optional[str]:
    """Why `job` can never run on `platform` (None if it can)."""
    if job.gpus > group_gpus:
        where = f"{job.engineer}'s instance" if platform.mode == "dedicated" else "the pool at its largest"
        return f"needs {job.gpus} GPUs, {where} has {group_gpus}"
    if job.gpus > node_gpus:
        if not job.multi_node:
            return (f"is a single pod asking for {job.gpus} GPUs and a node has {node_gpus}; declare it "
                    "multi_node (a job that spans nodes) or use a larger instance type")
        if not platform.allow_multi_node:
            return (f"needs {job.gpus} GPUs across nodes of {node_gpus} GPUs, and {platform.name} does not run "
                    "multi-node jobs (allow_multi_node: false)")
    return None


def simulate_platform(platform: Platform, jobs: list[Job], catalog: Catalog, month_hours: float = HOURS_PER_MONTH,
                      seed: int = 0) -> StackResult:
    rng = random.Random(seed * 7919 + sum(map(ord, platform.name)))
    cloud = platform.cloud
    preemptible = platform.capacity in ("spot", "preemptible") and (
        platform.preemption_per_job > 0 or platform.preemption_per_node_hour > 0 or bool(platform.preempt_at_h))

    def itype(name: str):
        t = catalog.instance(cloud, name)
        if t is None or not t.is_gpu:
            raise ScenarioError(f"{platform.name}: {name!r} is not {a_cloud(cloud)} GPU type in the catalog")
        if t.price(platform.capacity) is None:
            raise ScenarioError(f"{platform.name}: {name} has no {platform.capacity} price")
        return t

    nodes: list[_Node] = []  # every node ever requested (billing)
    live: list[_Node] = []  # nodes not removed yet (kept apart: a long run requests thousands of nodes)
    next_id = [0]

    def add_node(type_name: str, group: str, now: float, delay: float, permanent: bool) -> _Node:
        t = itype(type_name)
        n = _Node(next_id[0], t.gpus, now, now + delay, group, type_name, idle_since=now + delay, permanent=permanent)
        next_id[0] += 1
        nodes.append(n)
        live.append(n)
        return n

    def remove_node(n: _Node, now: float) -> None:
        if n.removed_h is None:
            n.removed_h = now
            live.remove(n)

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
    node_gpus: dict[str, int] = {}
    if platform.mode == "autoscale":
        gpn_auto = itype(platform.instance_type).gpus  # type: ignore[arg-type]
        group_capacity["*"] = gpn_auto * platform.max_nodes
        node_gpus["*"] = gpn_auto
    else:
        for n in nodes:
            group_capacity[n.group] = group_capacity.get(n.group, 0) + n.gpus
            node_gpus[n.group] = max(node_gpus.get(n.group, 0), n.gpus)

    # A job that can never run is an error that names it, not a silent drop from the "same work".
    misfits = [(j, why) for j in jobs
               if (why := _never_fits(platform, j, node_gpus.get(group_of(j), 0), group_capacity.get(group_of(j), 0)))]
    if misfits:
        shown = "; ".join(f"job {j.id} ({j.engineer}, {j.kind}, {j.gpus} GPUs) {why}" for j, why in misfits[:3])
        more = f" (and {len(misfits) - 3} more)" if len(misfits) > 3 else ""
        raise ScenarioError(f"{platform.name}: {len(misfits)} job(s) can never run: {shown}{more}")

    pending = sorted(jobs, key=lambda j: j.submit_h)
    arrivals = 0
    queue: list[tuple[float, int, Job, float]] = []  # (submit, id, job, done_h)
    running: list[_Run] = []
    waits: list[float] = []
    first_start: dict[int, float] = {}
    restarts: set[int] = set()
    scripted = sorted(platform.preempt_at_h) if platform.capacity in ("spot", "preemptible") else []
    billed_gpu_h = busy_gpu_h = rework_gpu_h = notebook_lost = 0.0
    preemptions = 0
    done = 0
    spread_jobs: set[int] = set()
    max_nodes_seen = len(nodes)

    def work_of(job: Job, spans: bool) -> float:
        base = job.hours / platform.speed if job.kind == "train" else job.hours
        return base * (1.0 + platform.multi_node_slowdown) if spans else base

    def live_nodes() -> list[_Node]:
        return list(live)

    def try_place(job: Job, now: float) -> Optional[list[tuple[_Node, int]]]:
        cands = [n for n in live_nodes() if n.group == group_of(job) and n.ready_h <= now + EPS and n.gpus > n.used]
        # one node if any node has room (a job never spreads when it need not: no slowdown)
        single = sorted((n for n in cands if n.gpus - n.used >= job.gpus), key=lambda n: (n.gpus - n.used, n.id))
        if single:
            return [(single[0], job.gpus)]
        if not (job.multi_node and platform.allow_multi_node):
            return None
        if sum(n.gpus - n.used for n in cands) < job.gpus:
            return None
        cands.sort(key=lambda n: (-(n.gpus - n.used), n.id))  # fewest nodes: emptiest first
        take, need = [], job.gpus
        for n in cands:
            k = min(need, n.gpus - n.used)
            take.append((n, k))
            need -= k
            if need == 0:
                break
        return take

    def preempt(r: _Run, t: float) -> None:
        nonlocal rework_gpu_h, notebook_lost, preemptions
        elapsed = max(t - r.start_h - r.overhead_h, 0.0)
        lost = min(platform.lost_work_h(r.job, elapsed), elapsed)
        rework_gpu_h += lost * r.job.gpus
        if r.job.kind == "notebook":
            notebook_lost += lost * r.job.gpus
        preemptions += 1
        running.remove(r)
        for n, k in r.nodes:
            n.used -= k
            remove_node(n, t)  # the preempted VM is gone; the autoscaler asks for a new one
        restarts.add(r.job.id)
        heapq.heappush(queue, (r.job.submit_h, r.job.id, r.job, r.done_h + elapsed - lost))

    t = 0.0
    same_instant = 0
    while True:
        # 1. arrivals
        while arrivals < len(pending) and pending[arrivals].submit_h <= t + EPS:
            j = pending[arrivals]
            arrivals += 1
            heapq.heappush(queue, (j.submit_h, j.id, j, 0.0))
        # 2. preemptions (every job on a preempted node is hit), then completions
        hit = [r for r in running if r.preempt_h is not None and r.preempt_h <= t + EPS and r.preempt_h < r.finish_h - EPS]
        while scripted and scripted[0] <= t + EPS:
            scripted.pop(0)
            hit += [r for r in running if r not in hit and r.finish_h > t + EPS]
        gone = {id(n) for r in hit for n, _ in r.nodes}
        hit += [r for r in running if r not in hit and any(id(n) in gone for n, _ in r.nodes)]
        for r in hit:
            preempt(r, t)
        for r in list(running):
            if r.finish_h <= t + EPS:
                running.remove(r)
                done += 1
                for n, k in r.nodes:
                    n.used -= k
                    if n.used == 0:
                        n.idle_since = t
        # 3. schedule (best-effort FIFO: a job that fits starts even if an older one waits)
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
            spans = len(place) > 1
            if spans:
                spread_jobs.add(job.id)
            work = work_of(job, spans)
            overhead = 0.0
            if job.id in restarts:  # reload the checkpoint / restart the kernel: time spent again
                restarts.discard(job.id)
                overhead = platform.restart_overhead_h
                rework_gpu_h += overhead * job.gpus
            remaining = max(work - done_h, 0.0) + overhead
            preempt_at = None
            if preemptible:
                # "one shutdown every 50 jobs" applies to every attempt (a restarted job can be hit again)
                if platform.preemption_per_job > 0 and rng.random() < platform.preemption_per_job:
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
        # 4. autoscaler: scale up for queued jobs that do not fit, scale down idle nodes
        if platform.mode == "autoscale":
            live = live_nodes()
            gpn = gpn_auto
            free = [n.gpus - n.used for n in live]  # ready free + booting
            added = 0
            for _, _, job, _ in sorted(queue):
                spans_ok = job.multi_node and platform.allow_multi_node
                fit = next((i for i, f in enumerate(free) if f >= job.gpus), None)
                if fit is not None:
                    free[fit] -= job.gpus
                    continue
                if spans_ok and job.gpus > gpn:
                    have = sum(free)
                    need = math.ceil(max(job.gpus - have, 0) / gpn)
                else:
                    need = 1
                if need <= platform.max_nodes - len(live_nodes()):
                    for _ in range(need):
                        add_node(platform.instance_type, "*", t, platform.scale_up_delay_h, False)  # type: ignore[arg-type]
                        free.append(gpn)
                        added += 1
                    if spans_ok and job.gpus > gpn:
                        left = job.gpus
                        for i in sorted(range(len(free)), key=lambda i: -free[i]):
                            k = min(left, free[i])
                            free[i] -= k
                            left -= k
                    else:
                        free[-1] -= job.gpus
                else:
                    break
            max_nodes_seen = max(max_nodes_seen, len(live_nodes()))
            if added and platform.scale_up_delay_h <= EPS and same_instant < 3:
                same_instant += 1  # nodes usable at once: schedule again before time moves
                continue
            same_instant = 0
            # A ready node stays while nodes booting for queued work are not ready: the queued multi-node job's
            # pods sit on it waiting for their peers (a job is placed whole here, so it looks idle). Removing it
            # once its idle time passed the scale-down delay, with a boot longer than that delay, asked for it
            # again, for ever (a 2 x 4-GPU pool with a 12-minute boot never finished an 8-GPU job).
            gang_waits = bool(queue) and any(n.ready_h > t + EPS for n in live_nodes())
            removable = 0 if gang_waits else len(live_nodes()) - platform.min_nodes
            for n in sorted(live_nodes(), key=lambda n: n.idle_since):
                if removable <= 0:
                    break
                if n.used == 0 and n.ready_h <= t + EPS and n.idle_since + platform.scale_down_delay_h <= t + EPS:
                    remove_node(n, t)
                    removable -= 1
        # 5. next event
        cands: list[float] = []
        if arrivals < len(pending):
            cands.append(pending[arrivals].submit_h)
        for r in running:
            cands.append(min(r.finish_h, r.preempt_h) if r.preempt_h is not None else r.finish_h)
        if scripted and running:
            cands.append(scripted[0])
        for n in live_nodes():
            if n.ready_h > t + EPS:
                cands.append(n.ready_h)
            elif platform.mode == "autoscale" and n.used == 0 and len(live_nodes()) > platform.min_nodes:
                cands.append(n.idle_since + platform.scale_down_delay_h)
        if t < month_hours - EPS:
            cands.append(month_hours)
        cands = [c for c in cands if c > t + EPS]
        if t > 20 * month_hours:
            stuck = sorted({job.id for _, _, job, _ in queue} | {r.job.id for r in running})
            raise ScenarioError(f"{platform.name}: after {t:,.0f} h jobs {stuck[:10]} have not finished (preempted "
                                "faster than they make progress?)")
        if not cands:
            if queue:
                stuck = sorted(job.id for _, _, job, _ in queue)
                raise ScenarioError(f"{platform.name}: jobs {stuck[:10]} wait forever (no node can take them)")
            break
        nxt = min(cands)
        dt = nxt - t
        for n in live_nodes():
            billed_gpu_h += n.gpus * dt
            busy_gpu_h += n.used * dt
        t = nxt

    horizon = max(t, month_hours)
    # bill nodes (permanent nodes to the horizon); Linode caps each node-month
    gpu_usd = 0.0
    for n in nodes:
        end = n.removed_h if n.removed_h is not None else horizon
        hours = end - n.created_h
        if n.removed_h is None and horizon > t:
            billed_gpu_h += n.gpus * (horizon - t)
        ti = catalog.instance(cloud, n.type_name)
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
    ref_work = sum(j.hours * j.gpus for j in jobs)
    waits_sorted = sorted(waits)
    p90 = waits_sorted[int(0.9 * (len(waits_sorted) - 1))] if waits_sorted else 0.0
    return StackResult(
        platform=platform, horizon_h=horizon, billed_gpu_hours=billed_gpu_h, busy_gpu_hours=busy_gpu_h,
        rework_gpu_hours=rework_gpu_h, reference_work_gpu_hours=ref_work, gpu_usd=gpu_usd, fixed_usd=fixed_usd,
        usd_per_gpu_hour=gpu_usd / billed_gpu_h if billed_gpu_h else 0.0, jobs_done=done, jobs_total=len(jobs),
        preemptions=preemptions, mean_wait_h=sum(waits) / len(waits) if waits else 0.0, p90_wait_h=p90,
        node_count_max=max_nodes_seen, fixed_lines=fixed_lines, notebook_lost_h=notebook_lost,
        multi_node_jobs=len(spread_jobs))


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
        restart_overhead_h=float(d.get("restart_overhead_minutes", 0)) / 60, platform_shape=shape,
        allow_multi_node=bool(d.get("multi_node", False)),
        multi_node_slowdown=float(d.get("multi_node_slowdown", 0.0)),
        sigterm_checkpoint=bool(pre.get("sigterm_checkpoint", True)),
        notice_s=None if pre.get("notice_seconds") is None else float(pre["notice_seconds"]),
        grace_s=float(pre.get("grace_seconds", 60)), checkpoint_write_s=float(pre.get("checkpoint_write_seconds", 20)),
        step_s=float(pre.get("step_seconds", 1.0)),
        preempt_at_h=tuple(float(x) for x in pre.get("at_hours") or ()))


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
                    j.get("kind", "train"), bool(j.get("multi_node", False))) for i, j in enumerate(w["jobs"])]
    return generate_workload(w)


def simulate(doc: Mapping[str, Any], prices: Optional[str] = None, seed: Optional[int] = None) -> SimulationReport:
    """Run every stack of a scenario on the same jobs. `prices`: None = the scenario's own choice,
    "current" = the catalog as is, or an override-set name (e.g. "seed-era-2022"). `seed` replaces the
    workload's seed (a generated workload and the preemption draws both follow it)."""
    price_set = prices if prices is not None else doc.get("prices", "current")
    overrides = None if price_set in (None, "current") else load_override_set(price_set)
    catalog = load_catalog(overrides)
    if seed is not None:
        doc = dict(doc, workload=dict(doc["workload"], seed=seed))
    jobs = scenario_jobs(doc)
    month = float(doc["workload"].get("month_hours", HOURS_PER_MONTH))
    seed = int(doc["workload"].get("seed", 0))
    results = [simulate_platform(_platform_from(s), jobs, catalog, month, seed) for s in doc["stacks"]]
    baseline = doc.get("baseline") or results[0].platform.name
    if baseline not in {r.platform.name for r in results}:
        raise ScenarioError(f"baseline {baseline!r} is not one of the stacks")
    return SimulationReport(name=str(doc.get("name", "scenario")), baseline=baseline, results=results,
                            assumptions=[str(a) for a in doc.get("assumptions", [])], prices=str(price_set),
                            notes=[str(n) for n in doc.get("notes", [])], month_hours=month)


@dataclass
class Spread:
    mean: float
    sd: float
    low: float
    high: float

    @classmethod
    def of(cls, xs: list[float]) -> "Spread":
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
        return cls(m, sd, min(xs), max(xs))

    def fmt(self, f: str = ",.0f", unit: str = "") -> str:
        return f"{self.mean:{f}}{unit} +- {self.sd:{f}} ({self.low:{f}}..{self.high:{f}})"


@dataclass
class MonteCarloReport:
    name: str
    baseline: str
    seeds: list[int]
    month_hours: float
    prices: str
    stats: dict[str, dict[str, Spread]]  # platform -> metric -> spread

    def render(self) -> str:
        out = [f"Monte Carlo: {self.name}   ({len(self.seeds)} seeds {self.seeds[0]}..{self.seeds[-1]}; "
               f"prices: {self.prices}; month = {self.month_hours:g} h)",
               "mean +- standard deviation (lowest..highest) over the seeds; workload and preemptions both re-drawn", ""]
        labels = {"total_usd": ("TOTAL $ (month)", ",.0f"), "ratio": (f"ratio {self.baseline} / stack", ".1f"),
                  "preemptions": ("preemptions", ".1f"), "rework_gpu_hours": ("rework GPU-hours", ",.1f"),
                  "notebook_lost_h": ("  of which notebooks", ",.1f"), "billed_gpu_hours": ("billed GPU-hours", ",.0f"),
                  "mean_wait_h": ("mean queue wait h", ".2f")}
        for name, metrics in self.stats.items():
            out.append(f"{name}:")
            for key, (label, f) in labels.items():
                if key in metrics:
                    out.append(f"  {label:<28} {metrics[key].fmt(f)}")
        return "\n".join(out)


def simulate_many(doc: Mapping[str, Any], seeds: int, prices: Optional[str] = None) -> MonteCarloReport:
    """The scenario `seeds` times (workload seed, seed+1, ...): mean and spread of the preemption-driven figures."""
    if seeds < 2:
        raise ScenarioError("a Monte Carlo run needs at least 2 seeds")
    first = int(doc["workload"].get("seed", 0))
    reps = [simulate(doc, prices, seed=first + i) for i in range(seeds)]
    stats: dict[str, dict[str, Spread]] = {}
    for r0 in reps[0].results:
        name = r0.platform.name
        rs = [rep.result(name) for rep in reps]
        stats[name] = {k: Spread.of([float(getattr(r, k)) for r in rs])
                       for k in ("total_usd", "preemptions", "rework_gpu_hours", "notebook_lost_h", "billed_gpu_hours",
                                 "mean_wait_h")}
        stats[name]["ratio"] = Spread.of([rep.ratio(name) for rep in reps])
    return MonteCarloReport(reps[0].name, reps[0].baseline, [first + i for i in range(seeds)], reps[0].month_hours,
                            reps[0].prices, stats)


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
        ("  of which notebooks lost", lambda r: f"{r.notebook_lost_h:,.1f}"),
        ("jobs spread over nodes", lambda r: f"{r.multi_node_jobs}" + (
            f" (+{100 * r.platform.multi_node_slowdown:g} % time)" if r.multi_node_jobs else "")),
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
    out = [f"Scenario: {rep.name}   (prices: {rep.prices}; month = {rep.month_hours:g} h)", ""]
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
    out += ["", "Preemption rule per stack (lost work on a reclaim):"]
    for r in rs:
        out.append(f"  {r.platform.name} ({r.platform.cloud}): {r.platform.preemption_rule()}")
    clouds = sorted({r.platform.cloud for r in rs if r.platform.capacity in ('spot', 'preemptible')})
    out += [f"  notice: {PREEMPTION_NOTICE_SOURCES[c]}" for c in clouds]
    out.append("  notebooks: a preempted notebook loses its kernel state: the session time since it started is redone")
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
    if o.multi_node_jobs:
        lines.append(f"  - multi-node: {o.multi_node_jobs} jobs ran spread over nodes and took "
                     f"{100 * o.platform.multi_node_slowdown:g} % longer (multi_node_slowdown), which the busy hours include")
    if o.preemptions or o.rework_gpu_hours:
        lines.append(f"  - preemption rework: {o.preemptions} preemptions cost {o.rework_gpu_hours:,.1f} GPU-hours "
                     f"({100 * o.rework_gpu_hours / max(o.busy_gpu_hours, EPS):.1f} % of busy time; "
                     f"{o.notebook_lost_h:,.1f} of it lost notebook work) plus the wait for replacement nodes; "
                     f"rule: {o.platform.preemption_rule()}")
    lines.append(f"  - fixed parts: {_money(b.fixed_usd)} vs {_money(o.fixed_usd)} "
                 + (f"({', '.join(f'{n} {_money(v)}' for n, v in o.fixed_lines)})" if o.fixed_lines else ""))
    gpu_ratio = b.gpu_usd / o.gpu_usd if o.gpu_usd else float("inf")
    lines.append(f"  - check: billed-hours ratio x price ratio = "
                 f"{b.billed_gpu_hours / max(o.billed_gpu_hours, EPS):.1f} x "
                 f"{b.usd_per_gpu_hour / max(o.usd_per_gpu_hour, EPS):.2f} = {gpu_ratio:.1f}x on GPU nodes; "
                 f"fixed parts bring it to {ratio:.1f}x")
    return lines


__all__ = ["Job", "MonteCarloReport", "PREEMPTION_NOTICE_S", "PREEMPTION_NOTICE_SOURCES", "Platform", "ScenarioError",
           "SimulationReport", "Spread", "StackResult", "explain_gap", "generate_workload", "load_scenario",
           "render_report", "scenario_jobs", "simulate", "simulate_many", "simulate_platform"]
