"""The differential check of cluster fit: for the shipped stacks and hypothesis-generated ones (fixed
seed), ask cluster fit and the real control plane the same questions and compare the answers.

Questions, per stack, each workload alone on the cluster at maximum size: the example TrainJob, every
JupyterHub profile's user pod, and a generated TrainJob of a given GPU count (pinned to a pool or not).
Answers: admitted by Kueue or not (and why), on which flavor, bound to which node group, or Pending
(why), or refused by the API server (why).

Cheap: one control plane per cloud (the API server's admission plugins differ by cloud), started once
with the install path of the rehearsal (`gpu_platform.rehearsal.run.install`: Kueue, JobSet, Trainer
running under their ServiceAccounts, webhooks served). Per stack only what differs is re-created: the
KWOK nodes (node model at maximum size), the program's queue and admission objects (ResourceFlavors,
ClusterQueue, LocalQueues, namespaces, runtimes, LimitRanges, admission policies), then the workloads;
the previous stack's leftovers are deleted. The charts' own Deployments are deleted after the install
so that every stack's nodes start empty, as fit's per-workload verdicts assume.

`python -m gpu_platform.rehearsal.differential --generated N --seed S` (`make differential N=200`)
writes build/differential.json and prints a summary; exit 3 on any disagreement.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

SEED = 20261124
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POOL_LABEL = "gpu-platform.io/pool"
KUEUE = "kueue.x-k8s.io/v1beta2"
TRAINER = "trainer.kubeflow.org/v1alpha1"
# What the program (not a chart) renders that decides admission and placement: re-applied per stack.
PER_STACK_KINDS = ("Namespace", "ResourceFlavor", "ClusterQueue", "LocalQueue", "ClusterTrainingRuntime",
                   "TrainingRuntime", "LimitRange", "ResourceQuota", "ValidatingAdmissionPolicy",
                   "ValidatingAdmissionPolicyBinding", "PriorityClass", "WorkloadPriorityClass", "ConfigMap")
DELETED_BETWEEN = ("ResourceFlavor", "ClusterQueue", "LocalQueue", "ValidatingAdmissionPolicy",
                   "ValidatingAdmissionPolicyBinding", "LimitRange", "ResourceQuota")
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob")
# GPU types per cloud the generator draws from: each validates in its shipped stack's region.
GPU_TYPES = {"aws": ("g5.xlarge", "g6.12xlarge", "g5.2xlarge", "g6.xlarge"),
             "gcp": ("a2-highgpu-1g", "a2-highgpu-2g"),
             "linode": ("g2-gpu-rtx4000a1-m", "g2-gpu-rtx4000a1-s", "g2-gpu-rtx4000a2-s")}
SHIPPED = ("aws-prod", "gcp-prod", "linode-dev", "linode-ha")


# --- the stacks ----------------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str  # a shipped stack's name, or gen-<i>
    base: str  # the shipped stack it varies
    config: Optional[dict]  # None: the shipped stack file as it is
    job_gpus: int = 1
    job_pool: Optional[str] = None  # the probe job's nodeSelector pool


def _shipped_config(stack: str) -> dict:
    import yaml

    from gpu_platform.project import find_project

    doc = yaml.safe_load((find_project().stacks_dir / f"Pulumi.{stack}.yaml").read_text())
    return copy.deepcopy(doc["config"])


def generated_cases(n: int, seed: int = SEED) -> list[Case]:
    """`n` stacks drawn by hypothesis with a fixed seed: each a shipped stack with its GPU pools (1-3,
    types of its cloud, min/max sizes), per-pool GPU quotas (0 included) and the probe job's size and
    pool varied. Only configs the program accepts are kept (parse_config)."""
    from hypothesis import HealthCheck, Phase, assume, given, seed as hseed, settings, strategies as st

    from gpu_platform.config.base import ConfigError
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import stack_input_from_mapping

    bases = {s: _shipped_config(s) for s in SHIPPED}
    out: list[Case] = []

    @st.composite
    def cases(draw):
        base = draw(st.sampled_from(SHIPPED))
        config = copy.deepcopy(bases[base])
        cloud = config["gpu-platform:cloud"]
        template = config["gpu-platform:gpuPools"][0]
        pools = []
        for i in range(draw(st.integers(1, 3))):
            lo = draw(st.integers(0, 2))
            hi = draw(st.integers(max(lo, 1), 3))
            if cloud == "linode" and "ha" in base:
                lo = hi  # linode-ha's fixed pools
            pools.append({**copy.deepcopy(template), "name": draw(st.sampled_from(("p", "q", "r", "gpu")) ) + str(i),
                          "instanceType": draw(st.sampled_from(GPU_TYPES[cloud])), "minNodes": lo, "maxNodes": hi})
        config["gpu-platform:gpuPools"] = pools
        if cloud == "aws":
            config["gpu-platform:aws"].pop("pools", None)
        quota = {}
        for p in pools:
            if draw(st.booleans()):
                quota[p["name"]] = draw(st.integers(0, 4))
        platform = config.setdefault("gpu-platform:platform", {})
        if quota:
            platform["gpuQuota"] = quota
        job_gpus = draw(st.integers(1, 5))
        job_pool = draw(st.one_of(st.none(), st.sampled_from([p["name"] for p in pools])))
        try:
            parse_config(stack_input_from_mapping(base, config).raw, base)
        except ConfigError:
            assume(False)
        return base, config, job_gpus, job_pool

    @hseed(seed)
    @settings(max_examples=n, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(cases())
    def collect(drawn):
        if len(out) < n:
            base, config, job_gpus, job_pool = drawn
            out.append(Case(f"gen-{len(out):03d}", base, config, job_gpus, job_pool))

    collect()
    return out


def shipped_cases() -> list[Case]:
    from gpu_platform.preflight.runner import stack_names
    from gpu_platform.project import find_project

    return [Case(s, s, None) for s in stack_names(find_project().stacks_dir)]


# --- cluster fit's answers -------------------------------------------------------------------------------------


@dataclass
class Prepared:
    case: Case
    cloud: str = ""
    releases: list = field(default_factory=list)
    model: Any = None
    questions: list[dict] = field(default_factory=list)  # {id, object, owner, fit}
    error: Optional[str] = None
    seconds: float = 0.0


def _probe(example: dict, gpus: int, pool: Optional[str]) -> dict:
    job = copy.deepcopy(example)
    name = f"diff-job-{gpus}gpu" + (f"-{pool}" if pool else "")
    job["metadata"] = {"name": name, "namespace": example["metadata"].get("namespace") or "training",
                       "labels": dict((example["metadata"].get("labels") or {}))}
    res = job["spec"]["trainer"].setdefault("resourcesPerNode", {})
    for part in ("requests", "limits"):
        res.setdefault(part, {})["nvidia.com/gpu"] = str(gpus)
    if pool:
        job["spec"]["runtimePatches"] = [{"manager": "gpu-platform.io/differential", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "nodeSelector": {POOL_LABEL: pool}}}}}}]}}}}]
    return job


def prepare(case: Case, chart_dirs: list[Path], base: Path) -> Prepared:
    """Plan, render and model the stack, add the probe job, check the fit; the questions with fit's answers."""
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.fit.pods import jupyterhub_user_pods
    from gpu_platform.preflight.fit.render import render_plan
    from gpu_platform.preflight.runner import load_stack, run_program, stack_input_from_mapping

    t = time.monotonic()
    out = Prepared(case)
    try:
        stack_input = load_stack(case.base) if case.config is None else stack_input_from_mapping(case.base, case.config)
        cfg = parse_config(stack_input.raw, case.base)
        plan = run_program(stack_input)
        releases = [r for r in render_plan(plan, chart_dirs, kubernetes_version=cfg.kubernetes_version, base=base) if r.rendered]
        model = cluster_model(cfg, plan)
    except Exception as exc:  # noqa: BLE001 recorded: a stack the program or the charts refuse is no question
        out.error = f"{type(exc).__name__}: {exc}"
        return out
    out.cloud, out.releases, out.model = model.cloud, releases, model
    example_rel = next((r for r in releases if r.source == "example"), None)
    example = next((o for o in (example_rel.objects if example_rel else []) if o.get("kind") == "TrainJob"), None)
    if example is not None:
        example_rel.objects.append(_probe(example, case.job_gpus, case.job_pool))
    report = check_fit(model, releases)
    verdicts = report.verdicts
    if example is not None:
        for job in [o for o in example_rel.objects if o.get("kind") == "TrainJob"]:
            oid = f"TrainJob/{job['metadata'].get('namespace')}/{job['metadata']['name']}"
            mine = {k: v for k, v in verdicts.items() if k.startswith(oid + "[")}
            node = mine.get(oid + "[node]") or next(iter(mine.values()), None)
            out.questions.append({"id": job["metadata"]["name"], "kind": "TrainJob", "object": job, "fit": _fit_answer(node)})
    for rel in releases:
        if (rel.chart or "").rstrip("/").rsplit("/", 1)[-1] == "jupyterhub" and isinstance(rel.values, dict):
            for pt in jupyterhub_user_pods(rel.name, rel.namespace, rel.values):
                slug = pt.owner.rsplit("(profile ", 1)[-1].rstrip(")")
                pod = {"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": f"diff-nb-{slug}".lower().replace("_", "-")[:60], "namespace": pt.namespace,
                                    "labels": dict(pt.labels)}, "spec": copy.deepcopy(pt.spec)}
                out.questions.append({"id": f"notebook {slug}", "kind": "Pod", "object": pod, "fit": _fit_answer(verdicts.get(pt.owner))})
    out.seconds = time.monotonic() - t
    return out


def _fit_answer(v: Optional[dict]) -> dict:
    if v is None:
        return {"outcome": "not-modelled"}
    return {k: v[k] for k in ("outcome", "flavor", "groups", "reason") if k in v}


# --- the rehearsal's answers -------------------------------------------------------------------------------------


class Cluster:
    """One control plane with the platform's controllers, re-dressed per stack."""

    def __init__(self, first: Prepared, log_dir: Path):
        from gpu_platform.rehearsal.controlplane import ControlPlane
        from gpu_platform.rehearsal.install import InstallLog
        from gpu_platform.rehearsal.run import prepare_controllers

        self.cloud = first.cloud
        self.not_rehearsed: list[str] = []
        self.releases = [r for r in first.releases if _runs_controller_or_is_program(r)]
        self.controllers, self.ca_pem, self.cert_dir = prepare_controllers(self.releases, self.not_rehearsed)
        self.cp = ControlPlane(log_dir, extended_resource_toleration=first.model.extended_resource_toleration)
        self.log = InstallLog()
        self.applied: set[tuple[str, str, Optional[str]]] = set()
        self.asked = 0

    def __enter__(self) -> "Cluster":
        from gpu_platform.rehearsal.run import install

        self.cp.__enter__()
        try:
            self.installer = install(self.cp, self.releases, self.controllers, self.ca_pem, self.cert_dir, self.log)
            self._empty_nodes()
        except BaseException:
            self.cp.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cp.__exit__(*exc)

    @property
    def client(self):
        return self.cp.client

    def controller_problems(self) -> list[str]:
        return [f"{c.binary}: {c.status} {c.problem or ''}".strip() for c in self.controllers if c.status != "running"]

    def _empty_nodes(self) -> None:
        """The charts' workloads are not what the differential asks about: delete them (their controllers
        run as local processes, their webhooks are served from there)."""
        for rel in self.releases:
            for obj in rel.objects:
                if obj.get("kind") in WORKLOAD_KINDS:
                    api = obj.get("apiVersion", "apps/v1")
                    try:
                        self.client.delete(api, obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"))
                    except Exception:  # noqa: BLE001 a workload refused at install is simply absent
                        pass

    def dress(self, prep: Prepared) -> list[str]:
        """Nodes, queue and admission objects of this stack; what the API server refused."""
        from gpu_platform.rehearsal.install import Installer, InstallLog
        from gpu_platform.rehearsal.nodes import GROUP_LABEL, create_nodes

        client = self.client
        for node in client.list("v1", "Node", selector=GROUP_LABEL):
            client.delete("v1", "Node", node["metadata"]["name"])
        for pod in client.list("v1", "Pod"):
            if pod["spec"].get("nodeName"):
                _delete_now(client, "v1", "Pod", pod["metadata"]["name"], pod["metadata"]["namespace"])
        wanted = []
        for rel in prep.releases:
            if rel.source != "manifest":
                continue
            for obj in rel.objects:
                if obj.get("kind") in PER_STACK_KINDS:
                    wanted.append((rel.name, obj))
        keys = {(o["kind"], o["metadata"]["name"], o["metadata"].get("namespace")) for _, o in wanted}
        for kind, name, ns in sorted(self.applied - keys, key=str):
            if kind in DELETED_BETWEEN:
                api = {"ResourceFlavor": KUEUE, "ClusterQueue": KUEUE, "LocalQueue": KUEUE,
                       "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
                       "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1"}.get(kind, "v1")
                _delete_now(client, api, kind, name, ns)
        self.applied = keys
        log = InstallLog()
        installer = Installer(client, prep.releases, self.controllers, self.ca_pem, log)
        order = {"Namespace": 0, "ResourceFlavor": 1, "ClusterQueue": 2}
        for rel_name, obj in sorted(wanted, key=lambda ro: order.get(ro[1]["kind"], 3)):
            installer.apply(rel_name, obj)
        create_nodes(client, prep.model)
        return [f"{r['kind']}/{r['name']}: {r['message']}" for r in log.refused]

    def ask(self, q: dict, timeout: float) -> dict:
        """Submit the workload, wait for Kueue's and the scheduler's decisions, record them, delete it."""
        from gpu_platform.rehearsal.kube import ApiError, UnknownKind
        from gpu_platform.rehearsal.nodes import group_of
        from gpu_platform.rehearsal.scenarios import _admitted, _conditions, _flavors, _workload_for

        client, obj = self.client, copy.deepcopy(q["object"])
        self.asked += 1  # a fresh name per question: nothing of an earlier one can be mistaken for it
        obj["metadata"]["name"] = f"{obj['metadata']['name'][:40]}-{self.asked}"
        ns, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], obj["kind"]
        queued = QUEUE_LABEL in (obj["metadata"].get("labels") or {})
        try:
            client.create(obj)
        except (ApiError, UnknownKind) as exc:
            return {"outcome": "refused", "reason": str(exc)}
        answer: dict[str, Any] = {}
        deadline = time.monotonic() + timeout
        settled_at = None
        try:
            while time.monotonic() < deadline:
                w = _workload_for(client, ns, kind, name) if queued else None
                if queued and w is not None and not _admitted(w):
                    cond = _conditions(w).get("QuotaReserved") or {}
                    if cond.get("status") == "False" and cond.get("message"):
                        answer = {"outcome": "not-admitted", "reason": cond["message"]}
                        settled_at = settled_at or time.monotonic()
                        if time.monotonic() - settled_at > 2:  # Kueue retries; the message is its verdict
                            break
                        time.sleep(0.5)
                        continue
                if queued and not _admitted(w):
                    time.sleep(0.5)
                    continue
                if queued:
                    flavors = _flavors(w)
                    answer["flavor"] = flavors.get("nvidia.com/gpu") or next(iter(flavors.values()), None)
                pods = (client.list("v1", "Pod", ns, f"jobset.sigs.k8s.io/jobset-name={name}") if kind == "TrainJob"
                        else [p for p in [client.get("v1", "Pod", name, ns)] if p])
                nodes = {n["metadata"]["name"]: n for n in client.list("v1", "Node")}
                bound = [p for p in pods if p["spec"].get("nodeName")]
                if pods and len(bound) == len(pods):
                    answer.update(outcome="runs", groups=sorted({group_of(nodes.get(p["spec"]["nodeName"], {})) for p in bound}))
                    break
                stuck = [p for p in pods if (_conditions(p).get("PodScheduled") or {}).get("reason") == "Unschedulable"]
                if stuck:
                    answer.update(outcome="unschedulable", reason=(_conditions(stuck[0])["PodScheduled"].get("message") or ""))
                    settled_at = settled_at or time.monotonic()
                    if time.monotonic() - settled_at > 2:
                        break
                time.sleep(0.5)
            else:
                answer.setdefault("outcome", "timeout")
                if queued:
                    w = _workload_for(client, ns, kind, name)
                    answer.setdefault("reason", "no Workload" if w is None else json.dumps(_conditions(w))[:400])
        finally:
            self._remove(kind, name, ns)
        return answer

    def _remove(self, kind: str, name: str, ns: str) -> None:
        client = self.client
        if kind == "TrainJob":
            _delete_now(client, TRAINER, "TrainJob", name, ns)
            for js in client.list("jobset.x-k8s.io/v1alpha2", "JobSet", ns):
                if js["metadata"]["name"] == name:
                    _delete_now(client, "jobset.x-k8s.io/v1alpha2", "JobSet", name, ns)
            for job in client.list("batch/v1", "Job", ns, f"jobset.sigs.k8s.io/jobset-name={name}"):
                _delete_now(client, "batch/v1", "Job", job["metadata"]["name"], ns)
            for p in client.list("v1", "Pod", ns, f"jobset.sigs.k8s.io/jobset-name={name}"):
                _delete_now(client, "v1", "Pod", p["metadata"]["name"], ns)
        else:
            _delete_now(client, "v1", "Pod", name, ns)
        for w in client.list(KUEUE, "Workload", ns):
            if any(o.get("name") == name for o in w["metadata"].get("ownerReferences") or []):
                _delete_now(client, KUEUE, "Workload", w["metadata"]["name"], ns)


def _delete_now(client, api: str, kind: str, name: str, ns: Optional[str]) -> None:
    """Delete, and drop finalizers (Kueue's, Trainer's) so the next stack never waits on them."""
    from gpu_platform.rehearsal.kube import ApiError, UnknownKind

    try:
        obj = client.get(api, kind, name, ns)
        if obj and obj["metadata"].get("finalizers"):
            client.merge_patch(api, kind, name, {"metadata": {"finalizers": None}}, ns)
        client.delete(api, kind, name, ns, grace_seconds=0)
    except (ApiError, UnknownKind):
        pass


def _runs_controller_or_is_program(rel) -> bool:
    """The releases the differential installs: the program's own objects and the charts whose
    controllers decide admission (Kueue, Trainer with JobSet)."""
    if rel.source == "manifest":
        return True
    chart = (rel.chart or "").rstrip("/").rsplit("/", 1)[-1]
    return chart in ("kueue", "kubeflow-trainer", "trainer", "jobset")


# --- comparing -------------------------------------------------------------------------------------------------


def agree(fit: dict, real: dict) -> tuple[bool, str]:
    """Same outcome (runs | refused | not-admitted | unschedulable); when both run, the same flavor and
    the real node group among those fit says can run it."""
    fo, ro = fit.get("outcome"), real.get("outcome")
    if fo != ro:
        return False, f"fit says {fo}, the cluster says {ro}"
    if fo == "runs":
        if fit.get("flavor") != real.get("flavor"):
            return False, f"flavor: fit {fit.get('flavor')}, Kueue {real.get('flavor')}"
        if not set(real.get("groups") or []) <= set(fit.get("groups") or []):
            return False, f"node group: fit {fit.get('groups')}, the scheduler {real.get('groups')}"
    return True, ""


def run(cases: list[Case], out: Path, chart_dirs: list[Path], base: Path, timeout: float = 30.0,
        echo=print) -> dict:
    """Every case, fit and cluster; the record (also written to `out`)."""
    started = time.monotonic()
    record: dict[str, Any] = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d"), "stacks": [], "disagreements": []}
    clouds = {b: _shipped_config(b)["gpu-platform:cloud"] for b in {c.base for c in cases}}
    cases = sorted(cases, key=lambda c: clouds[c.base])  # stable: shipped first within a cloud
    fit_seconds = 0.0
    cluster: Optional[Cluster] = None
    # The control planes' logs beside the record, to read after a disagreement, replaced by the next run as the record
    # is (they stayed in /tmp, a folder a cloud a run, until 2026-11-30).
    logs = out.parent / f"{out.stem}-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    # Fit of the next stack (rendering: helm's native code releases the GIL) runs while the cluster
    # answers this one; one ahead only, so that memory holds two stacks' renders at most.
    with ThreadPoolExecutor(1) as pool:
        ahead = pool.submit(prepare, cases[0], chart_dirs, base) if cases else None
        try:
            for i in range(len(cases)):
                p = ahead.result()
                ahead = pool.submit(prepare, cases[i + 1], chart_dirs, base) if i + 1 < len(cases) else None
                fit_seconds += p.seconds
                if p.error:
                    record["stacks"].append({"stack": p.case.name, "base": p.case.base, "error": p.error})
                    echo(f"  {p.case.name}: not compared: {p.error}")
                    continue
                if cluster is None or cluster.cloud != p.cloud:
                    if cluster is not None:
                        cluster.__exit__(None, None, None)
                        cluster = None
                    t = time.monotonic()
                    log_dir = Path(tempfile.mkdtemp(prefix=f"{p.cloud}-", dir=logs))
                    cluster = Cluster(p, log_dir).__enter__()
                    record.setdefault("controlPlanes", []).append({
                        "cloud": p.cloud, "logs": str(log_dir), "startSeconds": round(time.monotonic() - t, 1),
                        "controllerProblems": cluster.controller_problems(), "notRehearsed": cluster.not_rehearsed,
                        "installRefused": [f"{r['kind']}/{r['name']}: {r['message'][:200]}" for r in cluster.log.refused]})
                    echo(f"  control plane for {p.cloud}: {time.monotonic() - t:.0f} s"
                         + (f"; {', '.join(cluster.controller_problems())}" if cluster.controller_problems() else ""))
                _compare(cluster, p, timeout, record, echo)
        finally:
            if cluster is not None:
                cluster.__exit__(*sys.exc_info())
    record["fitSeconds"] = round(fit_seconds, 1)
    record["seconds"] = round(time.monotonic() - started, 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, sort_keys=True, default=str) + "\n")
    return record


def _compare(cluster: "Cluster", p: Prepared, timeout: float, record: dict, echo) -> None:
    t = time.monotonic()
    refused = cluster.dress(p)
    row = {"stack": p.case.name, "base": p.case.base, "cloud": p.cloud, "jobGpus": p.case.job_gpus,
           "jobPool": p.case.job_pool, "pools": [{"name": g.name, "instanceType": g.instance_type, "minNodes": g.min_nodes,
                                                  "maxNodes": g.max_nodes, "gpus": g.allocatable.gpus}
                                                 for g in p.model.node_groups if g.role == "gpu"],
           "config": p.case.config, "refused": refused, "questions": []}
    for q in p.questions:
        real = cluster.ask(q, timeout)
        ok, why = agree(q["fit"], real)
        row["questions"].append({"id": q["id"], "fit": q["fit"], "cluster": real, "agree": ok, "why": why})
        if not ok:
            record["disagreements"].append({"stack": p.case.name, "question": q["id"], "why": why,
                                            "fit": q["fit"], "cluster": real})
    row["seconds"] = round(time.monotonic() - t, 1)
    record["stacks"].append(row)
    bad = [x for x in row["questions"] if not x["agree"]]
    echo(f"  {p.case.name:<12} {p.case.base:<11} {len(row['questions'])} questions, "
         + (f"{len(bad)} DISAGREE: " + "; ".join(f"{x['id']}: {x['why']}" for x in bad) if bad else "agree")
         + f" (fit {p.seconds:.0f} s, cluster {row['seconds']:.0f} s)")


def summary(record: dict, seed: int, generated: int) -> str:
    stacks = [s for s in record["stacks"] if "questions" in s]
    questions = [q for s in stacks for q in s["questions"]]
    outcomes: dict[str, int] = {}
    for q in questions:
        outcomes[q["cluster"].get("outcome", "?")] = outcomes.get(q["cluster"].get("outcome", "?"), 0) + 1
    lines = [f"differential check of cluster fit, {record['date']}, seed {seed}: "
             f"{len([s for s in stacks if not s['stack'].startswith('gen-')])} shipped + "
             f"{len([s for s in stacks if s['stack'].startswith('gen-')])} generated stacks compared "
             f"({generated} generated, {len(record['stacks']) - len(stacks)} not compared)",
             f"  questions: {len(questions)} ({', '.join(f'{k} {v}' for k, v in sorted(outcomes.items()))} on the cluster)",
             f"  agree: {sum(1 for q in questions if q['agree'])}, disagree: {len(record['disagreements'])}",
             f"  time: {record['seconds']:.0f} s (fit {record['fitSeconds']:.0f} s; control planes: "
             + ", ".join(f"{c['cloud']} {c['startSeconds']:.0f} s" for c in record.get("controlPlanes", [])) + ")"]
    for d in record["disagreements"]:
        lines.append(f"  DISAGREE {d['stack']} {d['question']}: {d['why']}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    from gpu_platform.preflight.fit.run import default_chart_dirs
    from gpu_platform.project import find_project
    from gpu_platform.rehearsal import binaries

    ap = argparse.ArgumentParser(prog="python -m gpu_platform.rehearsal.differential", description=__doc__.split("\n\n")[0])
    ap.add_argument("--generated", type=int, default=200, help="hypothesis-generated stacks (default 200)")
    ap.add_argument("--seed", type=int, default=SEED)
    ap.add_argument("--shipped", nargs="*", default=None, metavar="STACK",
                    help="the shipped stacks to compare (default: all; none with an empty list)")
    ap.add_argument("--out", type=Path, default=Path("build/differential.json"))
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for each answer")
    args = ap.parse_args(argv)
    project = find_project()
    shipped = [c for c in shipped_cases() if args.shipped is None or c.name in args.shipped]
    cases = shipped + (generated_cases(args.generated, args.seed) if args.generated else [])
    print(f"differential: {len(cases)} stacks (seed {args.seed})", flush=True)
    try:
        record = run(cases, args.out, default_chart_dirs(project.root), project.root, args.timeout,
                     echo=lambda s: print(s, flush=True))
    except binaries.MissingBinaries as exc:
        print(f"differential: {exc}", file=sys.stderr)
        return 3
    print(summary(record, args.seed, args.generated))
    print(f"  record: {args.out}")
    return 3 if record["disagreements"] else 0


if __name__ == "__main__":
    sys.exit(main())
