"""The rehearsal's scenarios, each a function of the running cluster returning a Scenario (PASS/FAIL
with the reasons). They compare what the real control plane and controllers did with what cluster
fit predicted (its placements), so a wrong model shows up as a disagreement."""

from __future__ import annotations

import copy
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpu_platform.components.cluster import NOT_EVICTED_BY_SCALE_DOWN
from gpu_platform.components.platform.notebooks import SUBMITTER_ROLE
from gpu_platform.components.platform.queue import LOCAL_QUEUE, SUSPEND_POLICY
from gpu_platform.preflight.fit.render import SECRET_PLACEHOLDER
from gpu_platform.preflight.fit.selectors import match_expression, tolerates_any
from gpu_platform.rehearsal import autoscale, autoscale_aws
from gpu_platform.rehearsal.kube import ApiError, Client, UnknownKind, selector
from gpu_platform.rehearsal.nodes import GPU_RESOURCE, group_of, node_objects

KUEUE = "kueue.x-k8s.io/v1beta2"
TRAINER = "trainer.kubeflow.org/v1alpha1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass
class Scenario:
    name: str
    title: str
    status: str = "PASS"  # PASS | FAIL | NOT REHEARSED
    details: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def fail(self, message: str) -> None:
        self.status = "FAIL"
        self.problems.append(message)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "title": self.title, "status": self.status, "details": self.details,
                "problems": self.problems, "seconds": round(self.seconds, 1)}


@dataclass
class Context:
    client: Client
    releases: list[Any]
    model: Any
    placements: list[dict]  # cluster fit's: {release, object, group, pods}
    controllers: dict[str, Any]  # binary -> Controller
    timeout: float = 60.0
    workloads: list[dict] = field(default_factory=list)  # filled by scenario (a), read by the report
    plan: Any = None  # preflight's plan of the stack (the autoscaling drill reads the provider's pools.json from it)
    cfg: Any = None  # the stack's config (the autoscaling drill renders the autoscaler's chart from it when the plan has none)
    # Restarts a controller with its Configuration (as ctl.config and ctl.stack_timing say); returns its problems.
    restart: Optional[Callable[[Any], list[str]]] = None


# --- helpers ------------------------------------------------------------------------------------------


def _conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or []}


def _pods_of(client: Client, namespace: str, match_labels: dict) -> list[dict]:
    return client.list("v1", "Pod", namespace, selector(match_labels)) if match_labels else []


def _nodes(client: Client) -> dict[str, dict]:
    return {n["metadata"]["name"]: n for n in client.list("v1", "Node")}


def _pending_reason(pod: dict) -> str:
    cond = _conditions(pod).get("PodScheduled") or {}
    return cond.get("message") or cond.get("reason") or (pod.get("status") or {}).get("phase", "?")


def selects(pod_spec: dict, node: dict) -> bool:
    """The pod's nodeSelector and required node affinity select this node (taints aside)."""
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (pod_spec.get("nodeSelector") or {}).items()):
        return False
    req = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
    if req:
        return any(all(match_expression(labels, e) for e in term.get("matchExpressions") or []) for term in req)
    return True


# --- (a) every workload Ready on its intended node group ---------------------------------------------------

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet")


def _intended(placements: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for p in placements:
        out.setdefault(p["object"], set()).add(p["group"])
    return out


def _workload_state(client: Client, obj: dict, nodes: dict[str, dict]) -> dict:
    kind, meta = obj["kind"], obj["metadata"]
    ns, name = meta.get("namespace"), meta["name"]
    live = client.get("apps/v1", kind, name, ns)
    st = (live or {}).get("status") or {}
    if live is None:
        return {"kind": kind, "namespace": ns, "name": name, "ready": 0, "want": None, "groups": [], "pending": ["not created"]}
    if kind == "DaemonSet":
        want, ready = st.get("desiredNumberScheduled", 0), st.get("numberReady", 0)
    else:
        want, ready = (live.get("spec") or {}).get("replicas", 1), st.get("readyReplicas", 0)
    pods = _pods_of(client, ns, ((live.get("spec") or {}).get("selector") or {}).get("matchLabels") or {})
    groups = sorted({group_of(nodes[p["spec"]["nodeName"]]) for p in pods if p["spec"].get("nodeName") in nodes})
    pending = [f"{p['metadata']['name']}: {_pending_reason(p)}" for p in pods if not p["spec"].get("nodeName")]
    return {"kind": kind, "namespace": ns, "name": name, "ready": ready, "want": want, "groups": groups,
            "pending": pending, "live": live, "pods": pods}


def _why_no_pods(client: Client, live: dict) -> str:
    """Why a workload has fewer pods than it wants: its ReplicaFailure condition (a Deployment copies
    its ReplicaSet's, e.g. Pod Security's refusal), else the newest Warning event of it or its ReplicaSets."""
    cond = _conditions(live).get("ReplicaFailure")
    if cond and cond.get("status") == "True":
        return cond.get("message") or cond.get("reason") or ""
    ns, name = live["metadata"].get("namespace"), live["metadata"]["name"]
    try:
        events = [e for e in client.list("v1", "Event", ns) if e.get("type") == "Warning"
                  and (e.get("involvedObject") or {}).get("name", "").startswith(name)]
    except (ApiError, UnknownKind):
        return ""
    events.sort(key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return events[-1].get("message", "") if events else ""


def workloads_ready(ctx: Context) -> Scenario:
    sc = Scenario("workloads", "every Deployment/StatefulSet/DaemonSet Ready on the node group cluster fit intends")
    objs = [(rel.name, o) for rel in ctx.releases if rel.rendered and rel.source != "example"
            for o in rel.objects if o.get("kind") in WORKLOAD_KINDS and "helm.sh/hook" not in ((o["metadata"].get("annotations") or {}))]
    intended = _intended(ctx.placements)
    deadline = time.monotonic() + ctx.timeout
    while True:
        nodes = _nodes(ctx.client)
        states = [(rel, _workload_state(ctx.client, o, nodes)) for rel, o in objs]
        if all(s["want"] is not None and s["ready"] >= s["want"] for _, s in states) or time.monotonic() > deadline:
            break
        time.sleep(2)
    ctx.workloads = []
    for rel, s in states:
        key = f"{s['kind']}/{s['namespace']}/{s['name']}"
        row = {"release": rel, "object": key, "ready": s["ready"], "want": s["want"], "groups": s["groups"],
               "fitGroups": sorted(intended.get(key, set()))}
        ctx.workloads.append(row)
        if s["want"] is None:
            sc.fail(f"{key} ({rel}): not created")
            continue
        if s["ready"] < s["want"]:
            why = "; ".join(s["pending"][:3]) or _why_no_pods(ctx.client, s["live"]) or "pods not Ready"
            sc.fail(f"{key} ({rel}): {s['ready']}/{s['want']} Ready ({why})")
        if s["kind"] == "DaemonSet":
            spec = s["live"]["spec"]["template"]["spec"]
            on = {p["spec"].get("nodeName") for p in s["pods"]}
            for name, node in nodes.items():
                if name in on or not selects(spec, node):
                    continue
                blocking = [t for t in node["spec"].get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")
                            and not tolerates_any(spec.get("tolerations"), t)]
                taints = ", ".join(f"{t['key']}={t.get('value', '')}:{t['effect']}" for t in blocking)
                sc.fail(f"{key} ({rel}): selects node {name} (group {group_of(node)}) but runs no pod there"
                        + (f": it does not tolerate {taints}" if taints else ""))
            if s["want"] == 0:
                if intended.get(key):
                    sc.fail(f"{key} ({rel}): runs on no node; cluster fit places it on {', '.join(sorted(intended[key]))}")
                else:
                    sc.details.append(f"{key}: runs on no node (its node selector matches none; as cluster fit predicts)")
        fit_groups = intended.get(key)
        if fit_groups is not None and s["groups"] and set(s["groups"]) != fit_groups:
            # Where several groups admit a pod, fit's packing and the scheduler's scoring may choose
            # differently: a note. A pod without a GPU request on a GPU group fails (it takes the GPU
            # node's room and, where the group autoscales, keeps a GPU node up).
            gpu_groups = {g.name for g in ctx.model.node_groups if g.role == "gpu"}
            wants_gpu = any(GPU_RESOURCE in ((c.get("resources") or {}).get("requests") or {}) or
                            GPU_RESOURCE in ((c.get("resources") or {}).get("limits") or {})
                            for c in s["live"]["spec"]["template"]["spec"].get("containers") or [])
            stray = sorted((set(s["groups"]) - fit_groups) & gpu_groups) if s["kind"] != "DaemonSet" and not wants_gpu else []
            message = (f"{key} ({rel}): cluster fit places it on {', '.join(sorted(fit_groups))}, "
                       f"the scheduler put it on {', '.join(s['groups'])}")
            if stray:
                tol = s["live"]["spec"]["template"]["spec"].get("tolerations") or []
                sc.fail(message + f": a pod without a GPU request on GPU group {', '.join(stray)} (its tolerations: {tol})")
            else:
                sc.details.append(message + " (both admit it)")
    ok = sum(1 for _, s in states if s["want"] is not None and s["ready"] >= s["want"])
    sc.details.append(f"{ok}/{len(states)} workloads Ready")
    return sc


# --- (b) the example TrainJob ---------------------------------------------------------------------------------


def _example(ctx: Context) -> Optional[dict]:
    for rel in ctx.releases:
        if rel.source == "example":
            for o in rel.objects:
                if o.get("kind") == "TrainJob":
                    return o
    return None


def _runtime_grace(client: Client, trainjob: dict) -> Optional[int]:
    """The grace period the TrainJob's runtime (as installed on the API server) gives the trainer's pods."""
    ref = (trainjob.get("spec") or {}).get("runtimeRef") or {}
    kind = ref.get("kind") or "ClusterTrainingRuntime"
    ns = (trainjob.get("metadata") or {}).get("namespace") if kind == "TrainingRuntime" else None
    runtime = client.get(TRAINER, kind, ref.get("name"), ns) if ref.get("name") else None
    for rj in ((((runtime or {}).get("spec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
        pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        if "terminationGracePeriodSeconds" in pod:
            return int(pod["terminationGracePeriodSeconds"])
    return None


def _grace(trainjob: dict) -> Optional[int]:
    """The grace period the TrainJob's own runtimePatches set (none: the runtime's applies)."""
    for patch in (trainjob.get("spec") or {}).get("runtimePatches") or []:
        for rj in (((patch.get("trainingRuntimeSpec") or {}).get("template") or {}).get("spec") or {}).get("replicatedJobs") or []:
            pod = (((rj.get("template") or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
            if "terminationGracePeriodSeconds" in pod:
                return int(pod["terminationGracePeriodSeconds"])
    return None


def _workload_for(client: Client, namespace: str, owner_kind: str, owner_name: str) -> Optional[dict]:
    for w in client.list(KUEUE, "Workload", namespace):
        if any(o.get("kind") == owner_kind and o.get("name") == owner_name for o in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def _admitted(w: Optional[dict]) -> bool:
    return bool(w) and (_conditions(w).get("Admitted") or {}).get("status") == "True"


def _flavors(w: dict) -> dict[str, str]:
    out = {}
    for ps in ((w.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        out.update(ps.get("flavors") or {})
    return out


def _flavor_group(client: Client, flavor: str, model) -> Optional[str]:
    rf = client.get(KUEUE, "ResourceFlavor", flavor)
    labels = ((rf or {}).get("spec") or {}).get("nodeLabels") or {}
    for g in model.node_groups:
        if labels and all(g.labels.get(k) == v for k, v in labels.items()):
            return g.name
    return None


def _job_pods(client: Client, namespace: str, trainjob: str) -> list[dict]:
    return client.list("v1", "Pod", namespace, f"jobset.sigs.k8s.io/jobset-name={trainjob}")


def _workload_message(w: Optional[dict]) -> str:
    if not w:
        return "no Workload was created for it (is the TrainJob integration enabled and the namespace managed?)"
    conds = _conditions(w)
    for t in ("QuotaReserved", "Admitted", "Evicted"):
        c = conds.get(t)
        if c and c.get("message"):
            return f"{t}={c.get('status')}: {c['message']}"
    return "no admission condition yet"


# --- a negative from the controller's own verdict, not from a timeout -----------------------------------------------
#
# A scenario that expects something NOT to happen (Kueue never admits, a pod never binds) used to wait out
# ctx.timeout, the hang guard (180 s in the test suite). It ends as soon as the controller itself says it
# never will, as the cluster stands: its verdict is the finding, read where the controller writes it.

# Kueue v0.19.2's words on a Workload's QuotaReserved=False condition for a pod set no flavor can ever take
# while the ClusterQueue stays as it is (pkg/scheduler/flavorassigner/flavorassigner.go: the message is each
# pod set's "couldn't assign flavors to pod set <name>: " and its flavors' reasons, sorted, joined by ", "):
# the request above a flavor's maximum capacity (nominal quota plus what the cohort may lend;
# fitsResourceQuota, reason ExceedsMaxQuota), a taint of the flavor the pod set does not tolerate or labels
# its affinity refuses (checkFlavorForPodSets, NoMatchingFlavor), a resource no resource group covers
# (findFlavorForPodSets). The condition's reason says so only with the UnadmittedWorkloadsObservability
# feature gate (off by default in v0.19, pkg/features/kube_features.go; otherwise "Pending"), so the message
# is read. Any other reason of any flavor ("insufficient unused quota": the quota is in use and frees when
# another workload ends; "flavor X not found": not in Kueue's cache yet) leaves the pod set admissible later.
KUEUE_NEVER_FIT = (
    r"insufficient quota for \S+ in flavor \S+, previously considered podsets requests \(\S+\) \+ current podset "
    r"request \(\S+\) > maximum capacity \(\S+\)",
    r"untolerated taint \S+ in flavor \S+",
    r"flavor \S+ doesn't match node affinity",
    r"resource \S+ unavailable in ClusterQueue",
)
KUEUE_UNCOVERED = "unavailable in ClusterQueue"
_POD_SET = "couldn't assign flavors to pod set "
# A verdict must still stand this long after it is first read. Kueue's scheduler re-evaluates an inadmissible
# Workload as soon as its ClusterQueue's spec changes in Kueue's cache (ClusterQueueReconciler.Update ->
# qManager.UpdateClusterQueue requeues them; pkg/controller/core/clusterqueue_controller.go), within
# milliseconds of the change; 2 s of the verdict standing covers a verdict computed just before.
VERDICT_STANDS_S = 2.0


def _never_fits(message: str) -> bool:
    """Kueue's message names pod sets, each with only reasons of KUEUE_NEVER_FIT."""
    import re

    if not message.startswith(_POD_SET):
        return False
    for part in message[len(_POD_SET):].split("; " + _POD_SET):
        reasons = part.split(": ", 1)[1] if ": " in part else ""
        rest = reasons
        for pattern in KUEUE_NEVER_FIT:
            rest = re.sub(pattern, "", rest)
        if rest == reasons or rest.replace(",", "").strip():
            return False
    return True


def kueue_never_admits(client: Client, w: Optional[dict]) -> Optional[str]:
    """Kueue's own word that Workload `w` cannot be admitted by its ClusterQueue as it stands (its
    QuotaReserved=False condition's message: a pod set no flavor can ever take, KUEUE_NEVER_FIT), once
    Kueue's cache holds that ClusterQueue's current spec (its Active condition's observedGeneration is the
    object's generation: the cache is updated in the event handler, before the reconciler writes it);
    None otherwise."""
    cond = _conditions(w or {}).get("QuotaReserved") or {}
    if cond.get("status") != "False" or not _never_fits(cond.get("message") or ""):
        return None
    ns, queue = w["metadata"].get("namespace"), (w.get("spec") or {}).get("queueName")
    lq = client.get(KUEUE, "LocalQueue", queue, ns) if queue else None
    cq = client.get(KUEUE, "ClusterQueue", (lq.get("spec") or {}).get("clusterQueue")) if lq else None
    active = _conditions(cq or {}).get("Active") or {}
    if cq is None or active.get("observedGeneration") != cq["metadata"].get("generation"):
        return None
    return f"ClusterQueue {cq['metadata']['name']} can never admit it as it stands"


def wait_admission(ctx: Context, fetch: Callable[[], Optional[dict]], timeout: float,
                   done: Optional[Callable[[Optional[dict]], bool]] = None) -> tuple[Optional[dict], Optional[str]]:
    """Polls fetch() (a Workload) until done(w) (default: admitted), or until Kueue says it never admits it
    (kueue_never_admits, standing VERDICT_STANDS_S), or `timeout`. Returns (the last Workload, Kueue's
    verdict or None)."""
    done = done or _admitted
    deadline, first = time.monotonic() + timeout, None
    while True:
        w = fetch()
        if done(w):
            return w, None
        verdict = kueue_never_admits(ctx.client, w)
        if verdict is None:
            first = None
        elif first is None:
            first = time.monotonic()
        elif time.monotonic() - first >= VERDICT_STANDS_S:
            return w, verdict
        if time.monotonic() > deadline:
            return w, None
        time.sleep(0.5)


# kube-scheduler v1.35's Filter reasons that no pod leaving a node can lift: the pod's node selector or
# affinity, a bound volume's node affinity, a taint (pkg/scheduler/framework/plugins/nodeaffinity,
# volumebinding/binder.go ErrReasonNodeConflict, tainttoleration). With a fixed set of nodes (the rehearsal's
# nodes are the model's; no autoscaler runs outside its drill) a pod every node refuses for these reasons
# never binds.
STATIC_UNSCHEDULABLE = ("didn't match Pod's node affinity/selector", "didn't match PersistentVolume's node affinity",
                        "volume node affinity conflict", "had untolerated taint")


# PostFilter words of kube-scheduler v1.35's DynamicResources plugin for a pod without resource claims
# (plugins/dynamicresources/dynamicresources.go PostFilter): it has nothing to deallocate.
NOTHING_TO_FREE = ("no new claims to deallocate", "plugin disabled")


def scheduler_never_binds(pod: dict) -> Optional[str]:
    """The scheduler's own word that `pod` binds to no node as the nodes stand: PodScheduled=False,
    reason Unschedulable, every node refused for a reason of STATIC_UNSCHEDULABLE, and preemption not
    helpful on every node (pkg/scheduler/framework/preemption/preemption.go: "Preemption is not helpful
    for scheduling" for each node whose filter failed UnschedulableAndUnresolvable); None otherwise."""
    import re

    cond = _conditions(pod).get("PodScheduled") or {}
    message = cond.get("message") or ""
    if cond.get("status") != "False" or cond.get("reason") != "Unschedulable":
        return None
    m = re.match(r"^0/(\d+) nodes are available: (.*?)\. (.*)preemption: 0/(\d+) nodes are available: (\d+) Preemption is "
                 r"not helpful for scheduling\.?$", message)
    if m is None or not (m[1] == m[4] == m[5]):
        return None
    # The other PostFilter plugins' words come first, joined by ", " (framework.go RunPostFilterPlugins): only
    # those saying they have nothing to free are allowed.
    if any(r.strip() not in NOTHING_TO_FREE for r in m[3].split(", ") if r.strip()):
        return None
    reasons = [re.sub(r"^\d+ ", "", r.strip()) for r in m[2].split(", ")]
    if not reasons or not all(any(s in r for s in STATIC_UNSCHEDULABLE) for r in reasons):
        return None
    return message


def _short(text: str, head: int = 260, tail: int = 160) -> str:
    return text if len(text) <= head + tail + 5 else f"{text[:head]} … {text[-tail:]}"


# What a controller logs when the API server was slow or its object was stale, not what refused its work: it retries
# these (controller-runtime requeues with backoff), so a scenario waits on instead of ending on them. A local `make test`
# (2026-11-29, load near 10) ended linode-ha's TrainJob wait on jobset-manager's "Timeout: request did not complete
# within requested timeout" though the JobSet would have made its pods on a later try.
TRANSIENT_CONTROLLER_ERRORS = (
    "the object has been modified", "not found", "request did not complete within requested timeout",
    "context deadline exceeded", "unable to return a response in the time allotted", "connection refused",
    "i/o timeout", "TLS handshake timeout", "client rate limiter", "etcdserver: request timed out",
    "http2: client connection lost",
)


def _controller_said(ctx: Context, binaries: tuple[str, ...], about: str, transient: bool = False) -> str:
    """The newest error line of these controllers' logs that names `about`, shortened; "" if there is none. Lines of
    TRANSIENT_CONTROLLER_ERRORS (an overloaded API server, a stale object, an unreachable webhook) count only with
    `transient`: a wait does not end on them, but a failure, once the wait is over, still quotes them (a webhook
    that is down for good logs "connection refused" too)."""
    import json as _json

    from gpu_platform.rehearsal.controllers import error_lines

    for b in binaries:
        ctl = ctx.controllers.get(b)
        if ctl is None or ctl.proc is None:
            continue
        # The newest line: early ones are often transient (an object not created yet).
        for line in reversed(error_lines(ctl.proc.log, limit=10_000, width=None)):
            if about not in line or (not transient and any(t in line for t in TRANSIENT_CONTROLLER_ERRORS)):
                continue
            try:
                err = _json.loads(line).get("error") or _json.loads(line).get("msg") or line
            except ValueError:
                err = line
            return f"{b} says: {_short(str(err))}"
    return ""


def _refusal(write: Callable[[dict], Any], obj: dict) -> Optional[str]:
    """None when the API server took `obj` through `write` (create or apply), else its refusal."""
    try:
        write(obj)
        return None
    except (ApiError, UnknownKind) as exc:
        return str(exc)


def _apply(client: Client, obj: dict) -> Optional[str]:
    return _refusal(client.apply, obj)


def submit(client: Client, obj: dict) -> Optional[str]:
    return _refusal(client.create, obj)


def submit_within_quota(ctx: Context, obj: dict, interval: float = 1.0) -> Optional[str]:
    """`submit`, tried again while the namespace's ResourceQuota refuses it for want of room, for up to the run's
    timeout. A scenario waits for its own pods to go, but a pod counts against the quota until the quota controller
    has recounted after it went (seconds on a loaded machine), and the scenario's pod is not the user's: a user's pod
    is refused at once. A quota that never has room is the refusal, saying how long it waited."""
    started = time.monotonic()
    while (err := submit(ctx.client, obj)) is not None and "exceeded quota" in err:
        if time.monotonic() - started >= ctx.timeout:
            return f"{err} (still after {time.monotonic() - started:.0f}s)"
        time.sleep(interval)
    return err


def example_trainjob(ctx: Context) -> Scenario:
    sc = Scenario("trainjob", "the example TrainJob admitted by Kueue on the intended flavor, bound to that pool, "
                              "checkpoint grace period kept")
    job = _example(ctx)
    if job is None:
        sc.status = "NOT REHEARSED"
        sc.problems.append("no example TrainJob (examples/training/trainjob-checkpointed.yaml or --job)")
        return sc
    for need in ("kueue-manager", "trainer-manager", "jobset-manager"):
        ctl = ctx.controllers.get(need)
        if ctl is None or ctl.status != "running":
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"{need} is not running ({ctl.status if ctl else 'not in the rendered releases'}"
                               f"{': ' + ctl.problem if ctl and ctl.problem else ''})")
    if sc.status != "PASS":
        return sc
    ns, name = job["metadata"].get("namespace") or "training", job["metadata"]["name"]
    patched_grace = _grace(job)
    want_grace = patched_grace if patched_grace is not None else _runtime_grace(ctx.client, job)
    sc.details.append(f"checkpoint grace period: {want_grace} s, from the TrainJob's runtimePatches" if patched_grace is not None
                      else f"checkpoint grace period: {want_grace} s, from its runtime "
                           f"{(job['spec'].get('runtimeRef') or {}).get('name')}")
    fit_group = next((p["group"] for p in ctx.placements if p["object"].startswith(f"TrainJob/{ns}/{name}")), None)
    sc.details.append(f"cluster fit places it on node group {fit_group or '(none)'}")
    err = submit(ctx.client, copy.deepcopy(job))
    if err:
        sc.fail(f"TrainJob {ns}/{name} refused by the API server: {err}")
        return sc
    deadline = time.monotonic() + ctx.timeout
    live = ctx.client.get(TRAINER, "TrainJob", name, ns) or {}
    if (live.get("spec") or {}).get("suspend") is not True:
        # Kueue's webhook suspends a queued TrainJob at creation (v0.19.2 pkg/controller/jobs/trainjob/
        # trainjob_webhook.go Default: WorkloadShouldBeSuspended); the job stays suspended until admitted. For a
        # framework its Configuration does not enable, Kueue sets up a no-op webhook and no reconciler
        # (pkg/controller/jobframework/setup.go: cb.SetupWebhook(mgr, WithNoopWebhook(true))), and it ignores a
        # job in a namespace it does not manage: a TrainJob it did not suspend gets no Workload, ever.
        w = _workload_for(ctx.client, ns, "TrainJob", name)
        if not w:
            sc.fail(f"TrainJob {ns}/{name} not admitted by Kueue: {_workload_message(w)}; Kueue's webhook did not "
                    f"suspend it at creation (spec.suspend {(live.get('spec') or {}).get('suspend')})")
            return sc
    w, verdict = wait_admission(ctx, lambda: _workload_for(ctx.client, ns, "TrainJob", name), ctx.timeout)
    if not _admitted(w):
        sc.fail(f"TrainJob {ns}/{name} not admitted by Kueue "
                + (f"({verdict})" if verdict else f"within {ctx.timeout:.0f}s")
                + f": {_workload_message(w)}")
        return sc
    flavors = _flavors(w)
    gpu_flavor = flavors.get(GPU_RESOURCE) or next(iter(flavors.values()), None)
    group = _flavor_group(ctx.client, gpu_flavor, ctx.model) if gpu_flavor else None
    sc.details.append(f"Kueue admitted Workload {w['metadata']['name']} on flavor {gpu_flavor} (node group {group})")
    if fit_group and group != fit_group:
        sc.fail(f"Kueue admitted it on flavor {gpu_flavor} (node group {group}); cluster fit placed it on {fit_group}")
    pods: list[dict] = []
    waited = time.monotonic()
    while time.monotonic() < deadline + ctx.timeout:
        pods = _job_pods(ctx.client, ns, name)
        if pods and all(p["spec"].get("nodeName") for p in pods):
            break
        # No pod yet and a controller already says why (a refused update, retried forever): stop waiting.
        if not pods and time.monotonic() - waited > 20 and _controller_said(ctx, ("trainer-manager", "jobset-manager"), name):
            break
        time.sleep(1)
    nodes = _nodes(ctx.client)
    if not pods:
        said = _controller_said(ctx, ("trainer-manager", "jobset-manager"), name, transient=True)
        sc.fail(f"no pod of TrainJob {ns}/{name} was created" + (f": {said}" if said else " (JobSet/Job controllers; see their logs)"))
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node:
            sc.fail(f"pod {p['metadata']['name']} not bound: {_pending_reason(p)}")
            continue
        landed = group_of(nodes[node]) if node in nodes else "?"
        sc.details.append(f"pod {p['metadata']['name']} bound to {node} (group {landed}), "
                          f"terminationGracePeriodSeconds {p['spec'].get('terminationGracePeriodSeconds')}")
        if group and landed != group:
            sc.fail(f"pod {p['metadata']['name']} bound to group {landed}, not the admitted flavor's {group}")
        if want_grace is not None and p["spec"].get("terminationGracePeriodSeconds") != want_grace:
            sc.fail(f"pod {p['metadata']['name']} has terminationGracePeriodSeconds "
                    f"{p['spec'].get('terminationGracePeriodSeconds')}, the TrainJob asks {want_grace}: the checkpoint "
                    "window is lost between the TrainJob and its pods")
    live = ctx.client.get(TRAINER, "TrainJob", name, ns)
    if patched_grace is not None and live is not None and _grace(live) != patched_grace:
        sc.fail(f"the admitted TrainJob no longer carries terminationGracePeriodSeconds {want_grace} "
                f"(now {_grace(live)}): Kueue rewrote it with a Trainer schema that lacks the field; set it in "
                "the runtime's pod template instead (the platform's torch-checkpointed runtime)")
    return sc


# --- (c) inadmissible jobs ----------------------------------------------------------------------------------


def _probe_job(job: dict, name: str, queue: str, gpus: int) -> dict:
    probe = copy.deepcopy(job)
    probe["metadata"] = {"name": name, "namespace": job["metadata"].get("namespace") or "training",
                         "labels": {QUEUE_LABEL: queue}}
    res = probe["spec"]["trainer"].setdefault("resourcesPerNode", {})
    for part in ("requests", "limits"):
        res.setdefault(part, {})[GPU_RESOURCE] = str(gpus)
    return probe


def _log_mark(ctx: Context, binary: str) -> int:
    """Where the controller's log ends now (what it logs after this is read by _kueue_refused_workloads)."""
    from gpu_platform.rehearsal.controllers import log_size

    ctl = ctx.controllers.get(binary)
    return log_size(ctl.proc.log) if ctl is not None and ctl.proc is not None else 0


def _kueue_refused_workloads(ctx: Context, since: int) -> bool:
    """kueue-manager's log, after byte `since`, says the API server refused it to create, list or watch
    Workloads (client-go's `... is forbidden: User ... cannot create resource "workloads" in API group
    "kueue.x-k8s.io"`): RBAC does not change while a scenario runs, so it creates none."""
    import re

    from gpu_platform.rehearsal.controllers import error_lines

    ctl = ctx.controllers.get("kueue-manager")
    if ctl is None or ctl.proc is None:
        return False
    refused = re.compile(r'cannot (create|list|watch) resource \\?"workloads\\?" in API group \\?"kueue\.x-k8s\.io')
    return any(refused.search(ln) for ln in error_lines(ctl.proc.log, limit=10_000, width=None, since=since))


def inadmissible(ctx: Context) -> Scenario:
    sc = Scenario("inadmissible", "a job larger than any node is refused at submission; a job within every node but "
                                  "beyond the queue's quota, and one on zero-quota flavors, stay inadmissible in Kueue")
    # Kueue's verdicts come in a second or two when the machine is idle; a loaded one gets the run's whole timeout.
    wait = ctx.timeout
    release_example(ctx)
    job = example_or_not_rehearsed(ctx, sc)
    if job is None:
        return sc
    ns = job["metadata"].get("namespace") or "training"
    queue = (job["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    most = max((g.allocatable.gpus for g in ctx.model.node_groups), default=0)
    # The platform's fit policy refuses a job no pool's node can hold before it can hold quota.
    big = _probe_job(job, "rehearsal-too-big", queue, most + 1)
    err = submit(ctx.client, big)
    # The API server loads policy bindings from a watch: right after install a binding can be a moment
    # away from being enforced (seen once under load), so an acceptance is retried for a few seconds.
    deadline, attempt = time.monotonic() + 15, 1
    while err is None and time.monotonic() < deadline:
        ctx.client.delete(TRAINER, "TrainJob", big["metadata"]["name"], ns)
        time.sleep(1)
        attempt += 1
        big["metadata"]["name"] = f"rehearsal-too-big-{attempt}"
        err = submit(ctx.client, big)
    if err is None:
        sc.fail(f"rehearsal-too-big (one node needing {most + 1} GPU(s), the largest node has {most}) was accepted: "
                "the fit policy (gpu-jobs-fit-their-pool) should refuse it at submission")
        ctx.client.delete(TRAINER, "TrainJob", big["metadata"]["name"], ns)
    elif "ValidatingAdmissionPolicy" in err and "denied request" in err:
        sc.details.append(f"rehearsal-too-big (one node needing {most + 1} GPU(s)): refused at admission: {_short(err)}")
    else:
        sc.fail(f"rehearsal-too-big refused, but not by the fit policy: {err}")
    # A ClusterQueue with the shipped flavors, every quota zero, and its LocalQueue.
    kueue_mark = _log_mark(ctx, "kueue-manager")
    lq = ctx.client.get(KUEUE, "LocalQueue", queue, ns) if queue else None
    cq = ctx.client.get(KUEUE, "ClusterQueue", lq["spec"]["clusterQueue"]) if lq else None
    submitted = []
    if cq is not None:
        # Kueue's own inadmissibility: one GPU a node (every pool's node holds it, so the fit policy lets
        # it through), on more nodes than any flavor's GPU quota: no flavor can ever hold the pod set.
        quotas = [int(r["nominalQuota"]) for rg in cq["spec"]["resourceGroups"] for f in rg["flavors"]
                  for r in f["resources"] if r["name"] == GPU_RESOURCE]
        over = _probe_job(job, "rehearsal-over-quota", queue, 1)
        over["spec"]["trainer"]["numNodes"] = max(quotas, default=0) + 1
        if err := submit(ctx.client, over):
            sc.fail(f"rehearsal-over-quota (within every pool's node, beyond the quota) refused at submission: {err}")
        else:
            submitted.append(("rehearsal-over-quota", f"{max(quotas, default=0) + 1} nodes of one GPU, the largest "
                                                      f"flavor quota is {max(quotas, default=0)} GPUs", "insufficient quota"))
        zero = {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": "rehearsal-zero-quota"},
                "spec": {"namespaceSelector": cq["spec"].get("namespaceSelector", {}),
                         "resourceGroups": [{"coveredResources": rg["coveredResources"],
                                             "flavors": [{"name": f["name"], "resources": [{"name": r["name"], "nominalQuota": 0}
                                                                                          for r in f["resources"]]}
                                                         for f in rg["flavors"]]} for rg in cq["spec"]["resourceGroups"]]}}
        zq = {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": "rehearsal-zero-quota", "namespace": ns},
              "spec": {"clusterQueue": "rehearsal-zero-quota"}}
        # Applied, not created: a later run on the same cluster (the test suite's planted runs after the shipped
        # one) finds them from the run before, and a create would be refused (409 already exists).
        errs = [e for e in (_apply(ctx.client, zero), _apply(ctx.client, zq)) if e]
        if errs:
            sc.fail(f"zero-quota ClusterQueue refused: {errs[0]}")
        elif err := submit(ctx.client, _probe_job(job, "rehearsal-zero-quota", "rehearsal-zero-quota", 1)):
            sc.fail(f"probe TrainJob refused: {err}")
        else:
            submitted.append(("rehearsal-zero-quota", "one GPU on flavors with zero quota", "insufficient quota"))
    else:
        sc.fail(f"no LocalQueue {queue!r} (or its ClusterQueue) in {ns}: Kueue's inadmissibility not exercised")
    # Until Kueue has said of each probe that it never admits it (kueue_never_admits: above maximum capacity),
    # the verdict standing VERDICT_STANDS_S, or the API server has refused Kueue what making a Workload takes
    # (in its log since the probes were submitted: no Workload can come); at most `wait` seconds.
    started, first = time.monotonic(), None
    while submitted and time.monotonic() - started < wait:
        ws = [_workload_for(ctx.client, ns, "TrainJob", name) for name, _, _ in submitted]
        if any(w is None for w in ws) and _kueue_refused_workloads(ctx, kueue_mark):
            break
        if all(not _admitted(w) and reason in _workload_message(w) and kueue_never_admits(ctx.client, w)
               for w, (_, _, reason) in zip(ws, submitted)):
            first = first or time.monotonic()
            if time.monotonic() - first >= VERDICT_STANDS_S:
                break
        else:
            first = None
        time.sleep(0.5)
    waited = time.monotonic() - started
    for name, what, reason in submitted:
        w = _workload_for(ctx.client, ns, "TrainJob", name)
        said = _workload_message(w)
        if w is None:
            sc.fail(f"{name} ({what}): Kueue created no Workload for it")
        elif _admitted(w):
            sc.fail(f"{name} ({what}): Kueue ADMITTED it on {_flavors(w)}; its pods can never be scheduled")
        elif reason not in said:
            sc.fail(f"{name} ({what}): not admitted, but Kueue does not say why ({reason!r} expected): {said}")
        else:
            sc.details.append(f"{name} ({what}): not admitted after {waited:.0f}s ({said})")
        ctx.client.delete(TRAINER, "TrainJob", name, ns)
    return sc


# --- (c2) nothing bypasses the queue -------------------------------------------------------------------------------


# Pod Security "restricted" (the training namespace's level), so only the queue's policies decide.
_RESTRICTED_POD = {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}}
_RESTRICTED_CONTAINER = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _gpu_pod(name: str, namespace: str, labels: Optional[dict] = None, owner: Optional[dict] = None) -> dict:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [owner]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"securityContext": _RESTRICTED_POD, "containers": [{
                "name": "c", "image": "busybox", "command": ["sleep", "1"], "securityContext": _RESTRICTED_CONTAINER,
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {GPU_RESOURCE: "1"}}}]}}


def _ungate_by_hand(ctx: Context, sc: Scenario, ns: str) -> None:
    """A GPU pod labelled with a queue that never admits it is held by Kueue's scheduling gate; removing the
    gate by hand would run it unqueued, so the API server must refuse that update."""
    pod = _gpu_pod("rehearsal-ungated-by-hand", ns, labels={QUEUE_LABEL: "rehearsal-no-such-queue"})
    if err := submit_within_quota(ctx, pod):
        sc.fail(f"a GPU pod labelled with a queue was refused at creation: {err}")
        return
    live = ctx.client.get("v1", "Pod", "rehearsal-ungated-by-hand", ns) or {}
    gates = [g.get("name") for g in (live.get("spec") or {}).get("schedulingGates") or []]
    try:
        if "kueue.x-k8s.io/admission" not in gates:
            sc.fail(f"Kueue did not gate a pod labelled {QUEUE_LABEL} in {ns} (gates {gates})")
            return
        try:
            ctx.client.merge_patch("v1", "Pod", "rehearsal-ungated-by-hand", {"spec": {"schedulingGates": None}}, ns)
        except ApiError as exc:
            if "admission-gate-removed-only-by-kueue" in str(exc):
                sc.details.append(f"Kueue's admission gate removed by hand: refused ({_short(str(exc))})")
            else:
                sc.fail(f"removing Kueue's admission gate by hand was refused, but not by the gate policy: {exc}")
            return
        sc.fail(f"a user removed Kueue's admission gate from a GPU pod in {ns}: it runs unqueued")
    finally:
        ctx.client.delete("v1", "Pod", "rehearsal-ungated-by-hand", ns)


def queue_bypass(ctx: Context) -> Scenario:
    """The API server, with the platform's admission policies, refuses what would bypass or break the
    queue, and a Kubeflow Pipelines GPU step is queued: a bare GPU pod naming a Job it is no part of
    (a forged ownerReference), a GPU step without the queue label, a TrainJob whose runtimePatches
    Kueue v0.19.2 drops."""
    sc = Scenario("queue-bypass", "a GPU pod with a forged Job owner, a GPU Job hung under a queued Job, Kueue's gate removed by hand, "
                                  "a zero-GPU Job in the GPU queue, a CPU step tolerating the GPU taint and an unlabelled "
                                  "GPU pipeline step are refused; "
                                  "a labelled pipeline step is queued by Kueue; a TrainJob Kueue would break is refused")
    wait = ctx.timeout  # for the pipeline step's Workload: at once when the machine is idle
    ctl = ctx.controllers.get("kueue-manager")
    job = _example(ctx)
    if ctl is None or ctl.status != "running":
        sc.status = "NOT REHEARSED"
        sc.problems.append("needs a running Kueue")
        return sc
    ns = (job or {}).get("metadata", {}).get("namespace") or "training"
    # A real Job the pod is no part of (Kueue's pod webhook itself refuses an owner that does not exist,
    # and skips a pod whose owner is a Job it manages).
    unrelated = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "rehearsal-unrelated", "namespace": ns,
                                                                       "labels": {QUEUE_LABEL: CPU_LOCAL_QUEUE}},
                 "spec": {"suspend": True, "template": {"metadata": {"annotations": dict(NOT_EVICTED_BY_SCALE_DOWN)}, "spec": {
                     "restartPolicy": "Never", "securityContext": _RESTRICTED_POD, "containers": [
                         {"name": "c", "image": "busybox", "securityContext": _RESTRICTED_CONTAINER,
                          "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}
    if err := submit(ctx.client, unrelated):
        sc.fail(f"a CPU Job in {ns} was refused: {err}")
        return sc
    live_job = ctx.client.get("batch/v1", "Job", "rehearsal-unrelated", ns) or {"metadata": {}}
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "rehearsal-unrelated",
             "uid": live_job["metadata"].get("uid", ""), "controller": True}
    # Kueue's pod webhook reads the owner from its informer cache: right after the Job is created it may not
    # hold it yet and answers 404 (mpod.kb.io ... not found) for a Job the API server has. Try again then.
    deadline = time.monotonic() + ctx.timeout
    while True:
        err = submit(ctx.client, _gpu_pod("rehearsal-forged-owner", ns, owner=owner))
        if err is None or "mpod.kb.io" not in err or "not found" not in err or time.monotonic() > deadline:
            break
        time.sleep(1)
    # A GPU Job hung under that Job: Kueue would neither queue nor count it (it skips a child of a job it
    # manages), and its pods are the job controller's.
    child = copy.deepcopy(unrelated)
    child["metadata"] = {"name": "rehearsal-owned-child", "namespace": ns, "ownerReferences": [owner],
                         "labels": {QUEUE_LABEL: "gpu-queue"}}
    child["spec"]["suspend"] = False
    child["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {GPU_RESOURCE: "1"}
    child_err = submit(ctx.client, child)
    ctx.client.delete("batch/v1", "Job", "rehearsal-unrelated", ns)
    # A Job whose GPU limit is 0 asks for no GPU: in the GPU queue Kueue would give it a GPU flavor and its
    # toleration, and the NVIDIA runtime hands an unprivileged container every GPU its image's
    # NVIDIA_VISIBLE_DEVICES names. The routing policy must take it for CPU work.
    zero = copy.deepcopy(unrelated)
    zero["metadata"] = {"name": "rehearsal-zero-gpu", "namespace": ns}
    zero["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {GPU_RESOURCE: "0"}
    zero_err = submit(ctx.client, zero)
    if zero_err is None:
        sc.fail(f"a Job in {ns} with nvidia.com/gpu: 0 and no queue label was ADMITTED to the GPU queue")
        ctx.client.delete("batch/v1", "Job", "rehearsal-zero-gpu", ns)
    elif "work-in-its-queue" in zero_err and "asks for no GPU" in zero_err:
        sc.details.append(f"Job with a zero GPU limit in the GPU queue: refused ({_short(zero_err)})")
    else:
        sc.fail(f"a Job with nvidia.com/gpu: 0 was refused, but not as CPU work by the routing policy: {zero_err}")
    if child_err is None:
        sc.fail(f"a GPU Job in {ns} naming a queued Job as its owner was ADMITTED: Kueue never counts it")
        ctx.client.delete("batch/v1", "Job", "rehearsal-owned-child", ns)
    elif "jobs-owned-only-by-their-controllers" in child_err:
        sc.details.append(f"GPU Job owned by a queued Job: refused ({_short(child_err)})")
    else:
        sc.fail(f"a GPU Job owned by a queued Job was refused, but not by the owner policy: {child_err}")
    if err is None:
        sc.fail(f"a bare GPU pod in {ns} naming an unrelated Job as its owner was ADMITTED: it runs unqueued")
        ctx.client.delete("v1", "Pod", "rehearsal-forged-owner", ns)
    elif "gpu-pods-through-the-queue" in err:
        sc.details.append(f"forged Job owner: refused ({_short(err)})")
    else:
        sc.fail(f"forged Job owner refused, but not by the queue policy: {err}")
    _ungate_by_hand(ctx, sc, ns)
    if ctx.client.get("v1", "Namespace", "kubeflow") is None:
        sc.details.append("no kubeflow namespace (Pipelines off): pipeline steps not rehearsed")
    else:
        err = submit(ctx.client, _gpu_pod("rehearsal-unlabelled-step", "kubeflow"))
        if err is None:
            sc.fail("an unlabelled GPU pod in kubeflow was ADMITTED: it runs unqueued")
            ctx.client.delete("v1", "Pod", "rehearsal-unlabelled-step", "kubeflow")
        else:
            sc.details.append(f"unlabelled GPU step in kubeflow: refused ({_short(err)})")
        # A CPU-only step that tolerates the GPU nodes' taint would run on a GPU node outside the queue.
        cpu_step = _gpu_pod("rehearsal-cpu-step-on-gpu-node", "kubeflow")
        cpu_step["spec"]["containers"][0]["resources"].pop("limits")
        cpu_step["spec"]["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
        err = submit(ctx.client, cpu_step)
        if err is None:
            sc.fail("a CPU-only pod in kubeflow tolerating the GPU nodes' taint was ADMITTED: it can run on a GPU node unqueued")
            ctx.client.delete("v1", "Pod", "rehearsal-cpu-step-on-gpu-node", "kubeflow")
        elif "gpu-nodes-only-for-gpu-pods" in err:
            sc.details.append(f"CPU step tolerating the GPU taint in kubeflow: refused ({_short(err)})")
        else:
            sc.fail(f"a CPU-only pod tolerating the GPU taint was refused, but not by gpu-nodes-only-for-gpu-pods: {err}")
        step = _gpu_pod("rehearsal-gpu-step", "kubeflow", labels={QUEUE_LABEL: "gpu-queue"})
        if err := submit(ctx.client, step):
            sc.fail(f"a GPU pipeline step labelled {QUEUE_LABEL}=gpu-queue was refused: {err}")
        else:
            deadline, w = time.monotonic() + wait, None
            while time.monotonic() < deadline and w is None:
                w = _workload_for(ctx.client, "kubeflow", "Pod", "rehearsal-gpu-step")
                time.sleep(1)
            live = ctx.client.get("v1", "Pod", "rehearsal-gpu-step", "kubeflow") or {}
            if w is None:
                sc.fail("the labelled GPU pipeline step got no Kueue Workload: Kueue's pod integration does not manage "
                        f"kubeflow (namespace labels {(live.get('metadata') or {}).get('labels')})")
            else:
                sc.details.append(f"labelled GPU step in kubeflow: queued as Workload {w['metadata']['name']} "
                                  f"({'admitted' if _admitted(w) else _workload_message(w)})")
            ctx.client.delete("v1", "Pod", "rehearsal-gpu-step", "kubeflow")
    if job is not None and ctx.client.get("v1", "Namespace", ns) is not None:
        patched = copy.deepcopy(job)
        patched["metadata"] = {"name": "rehearsal-grace-patch", "namespace": ns}
        patched["spec"]["runtimePatches"] = [{"manager": "gpu-platform.io/rehearsal", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
                "terminationGracePeriodSeconds": 60}}}}}]}}}}]
        err = submit(ctx.client, patched)
        if err is None:
            sc.fail("a TrainJob setting terminationGracePeriodSeconds in runtimePatches was accepted: Kueue v0.19.2 "
                    "drops the field on admission and the job never starts")
            ctx.client.delete(TRAINER, "TrainJob", "rehearsal-grace-patch", ns)
        elif "torch-checkpointed" in err:
            sc.details.append(f"TrainJob with a grace-period runtime patch: refused ({_short(err)})")
        else:
            sc.fail(f"the grace-period TrainJob was refused without naming the torch-checkpointed runtime: {err}")
    return sc


# --- (c2b) only Kueue starts a queued Job ----------------------------------------------------------------------

UNSUSPEND_JOB = "rehearsal-unsuspended-by-hand"


def submitter_identity(releases: list[Any], namespace: str) -> Optional[tuple[str, str]]:
    """(namespace, name) of the first ServiceAccount the platform's RoleBinding binds Role `job-submitter`
    to in `namespace`, as rendered (notebooks.render_submitter_binding: the notebooks' `notebook-user`)."""
    for rel in releases:
        for o in rel.objects:
            if (o.get("kind") == "RoleBinding" and (o.get("roleRef") or {}).get("name") == SUBMITTER_ROLE
                    and (o["metadata"].get("namespace") or rel.namespace) == namespace):
                for s in o.get("subjects") or []:
                    if s.get("kind") == "ServiceAccount":
                        return s.get("namespace") or namespace, s["name"]
    return None


def _wait(check, timeout: float, interval: float = 1.0):
    """check()'s first truthy value within `timeout` seconds, else its last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def _created_by(pod: dict) -> str:
    """The field managers that wrote the pod (kube-controller-manager for the job controller's)."""
    return ", ".join(sorted({m.get("manager", "?") for m in pod["metadata"].get("managedFields") or []})) or "?"


def unsuspend_by_hand(ctx: Context, window: float = 6.0) -> Scenario:
    """A user with the platform's `job-submitter` Role (the ServiceAccount its RoleBinding names, with a
    token of its own: the real RBAC and admission decide) creates a GPU Job in LocalQueue `gpu-queue`
    while its ClusterQueue is held (stopPolicy Hold: Kueue cannot admit it) and patches
    `spec.suspend: false`. Kueue v0.19.2's webhooks let that through and its job reconciler suspends the
    Job again only afterwards; the job controller can create the Job's pods in between (a race either
    controller may win). The API server must refuse the patch (jobs-started-only-by-kueue) and no pod
    may be created; once the ClusterQueue runs again Kueue must admit the Job as usual; raising the
    admitted Job's parallelism as that user must be refused too."""
    sc = Scenario("unsuspend-by-hand", f"a {SUBMITTER_ROLE} lifting spec.suspend of a Job Kueue has not admitted is "
                                       f"refused by {SUSPEND_POLICY} and the job controller creates no pod for it; Kueue "
                                       "admits the Job once its ClusterQueue can; raising the admitted Job's "
                                       "parallelism is refused")
    ctl = ctx.controllers.get("kueue-manager")
    if ctl is None or ctl.status != "running":
        sc.status = "NOT REHEARSED"
        sc.problems.append("needs a running Kueue")
        return sc
    ns = ((_example(ctx) or {}).get("metadata") or {}).get("namespace") or "training"
    who = submitter_identity(ctx.releases, ns)
    if who is None:
        if any(o.get("kind") == "Role" and o["metadata"]["name"] == SUBMITTER_ROLE for rel in ctx.releases for o in rel.objects):
            sc.fail(f"Role {SUBMITTER_ROLE} is rendered but no RoleBinding in {ns} binds it to a ServiceAccount: "
                    "nobody to rehearse as")
        else:
            sc.details.append(f"the stack renders no Role {SUBMITTER_ROLE} (notebooks off): no user may patch a Job, "
                              "nothing to rehearse")
        return sc
    lq = wait_local_queue_active(ctx, LOCAL_QUEUE, ns)
    if lq is None:
        sc.fail(f"no LocalQueue {LOCAL_QUEUE} in {ns}")
        return sc
    cq_name = lq["spec"]["clusterQueue"]
    held_before = ((ctx.client.get(KUEUE, "ClusterQueue", cq_name) or {}).get("spec") or {}).get("stopPolicy") or "None"
    user = f"ServiceAccount {who[0]}/{who[1]}"
    try:
        as_user = ctx.client.with_token(ctx.client.token(*who))
    except ApiError as exc:
        sc.fail(f"no token for {user}, which RoleBinding {SUBMITTER_ROLE} names: {exc}")
        return sc
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": UNSUSPEND_JOB, "namespace": ns, "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
           "spec": {"completions": 2, "parallelism": 1, "backoffLimit": 0, "template": {
               "metadata": {"annotations": dict(NOT_EVICTED_BY_SCALE_DOWN)}, "spec": {
                   "restartPolicy": "Never", "securityContext": _RESTRICTED_POD, "containers": [{
                       "name": "c", "image": "busybox", "command": ["sleep", "3600"], "securityContext": _RESTRICTED_CONTAINER,
                       "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {GPU_RESOURCE: "1"}}}]}}}}
    pods_of_job = f"batch.kubernetes.io/job-name={UNSUSPEND_JOB}"
    ctx.client.merge_patch(KUEUE, "ClusterQueue", cq_name, {"spec": {"stopPolicy": "Hold"}})
    try:
        cq = _wait(lambda: (lambda c: c if (_conditions(c).get("Active") or {}).get("status") == "False" else None)(
            ctx.client.get(KUEUE, "ClusterQueue", cq_name) or {}), ctx.timeout)
        if not cq:
            sc.fail(f"ClusterQueue {cq_name} held (stopPolicy Hold) but Kueue still reports it active")
            return sc
        if err := submit(as_user, job):
            sc.fail(f"as {user} (Role {SUBMITTER_ROLE}): a GPU Job in LocalQueue {LOCAL_QUEUE} was refused: {err}")
            return sc
        live = ctx.client.get("batch/v1", "Job", UNSUSPEND_JOB, ns) or {}
        if live.get("spec", {}).get("suspend") is not True:
            sc.fail(f"Kueue did not suspend the Job {ns}/{UNSUSPEND_JOB} at creation (spec.suspend "
                    f"{live.get('spec', {}).get('suspend')}): its job webhook does not manage {ns}")
            return sc
        # The Workload, once Kueue has said why it waits (QuotaReserved False: the ClusterQueue is inactive).
        w = _wait(lambda: (lambda w: w if w and (_admitted(w) or "QuotaReserved" in _conditions(w)) else None)(
            _workload_for(ctx.client, ns, "Job", UNSUSPEND_JOB)), ctx.timeout)
        w = w or _workload_for(ctx.client, ns, "Job", UNSUSPEND_JOB)
        if w is None or _admitted(w):
            sc.fail(f"the Job's Workload while ClusterQueue {cq_name} is held: "
                    + ("none created" if w is None else f"ADMITTED on {_flavors(w)}"))
            return sc
        sc.details.append(f"as {user} (Role {SUBMITTER_ROLE}): Job {ns}/{UNSUSPEND_JOB} (1 GPU) created, suspended by "
                          f"Kueue, Workload {w['metadata']['name']} not admitted while ClusterQueue {cq_name} is held "
                          f"({_short(_workload_message(w))})")
        _lift_suspend(ctx, sc, as_user, user, ns, pods_of_job, window)
        ctx.client.merge_patch(KUEUE, "ClusterQueue", cq_name, {"spec": {"stopPolicy": held_before}})
        _admitted_later(ctx, sc, as_user, user, ns, cq_name, pods_of_job)
        return sc
    finally:
        ctx.client.merge_patch(KUEUE, "ClusterQueue", cq_name, {"spec": {"stopPolicy": held_before}})
        ctx.client.delete("batch/v1", "Job", UNSUSPEND_JOB, ns, grace_seconds=0)
        _wait(lambda: _workload_for(ctx.client, ns, "Job", UNSUSPEND_JOB) is None, 30)


def _lift_suspend(ctx: Context, sc: Scenario, as_user: Client, user: str, ns: str, pods_of_job: str,
                  window: float) -> None:
    """The user's `kubectl patch job --type merge -p '{"spec":{"suspend":false}}'`; then every pod the job
    controller created for the Job in the next `window` seconds (a watch from before the patch: Kueue
    suspends the Job again and the pods are deleted, so a later list would not show them)."""
    since = ctx.client.resource_version("v1", "Pod", ns, pods_of_job)
    try:
        as_user.merge_patch("batch/v1", "Job", UNSUSPEND_JOB, {"spec": {"suspend": False}}, ns)
        accepted = True
    except ApiError as exc:
        accepted = False
        if SUSPEND_POLICY in str(exc):
            sc.details.append(f"spec.suspend: false by {user} on the unadmitted Job: refused (HTTP {exc.status}: "
                              f"{_short(exc.message)})")
        else:
            sc.fail(f"spec.suspend: false by {user} on the unadmitted Job was refused, but not by {SUSPEND_POLICY} "
                    f"(HTTP {exc.status}: {exc.message}): the Role does not let the user patch Jobs, so the policy is untested")
    if accepted:
        sc.fail(f"{user} lifted spec.suspend of Job {ns}/{UNSUSPEND_JOB}, which Kueue had not admitted: the API server "
                f"accepted it ({SUSPEND_POLICY} missing or not enforced)")
    time.sleep(window)
    created = [e["object"] for e in ctx.client.watch("v1", "Pod", since, ns, pods_of_job) if e.get("type") == "ADDED"]
    live = ctx.client.get("batch/v1", "Job", UNSUSPEND_JOB, ns) or {}
    if created:
        sc.fail(f"the job controller created pod(s) for the Job Kueue had not admitted, within {window:.0f}s of the "
                f"patch: " + ", ".join(f"{p['metadata']['name']} (written by {_created_by(p)})" for p in created)
                + f"; the Job is now spec.suspend {live.get('spec', {}).get('suspend')} (Kueue suspends it again "
                  "afterwards), its GPU pods ran outside the quota meanwhile")
    else:
        sc.details.append(f"no pod created for the Job in the {window:.0f}s after the patch (a watch from before it); "
                          f"spec.suspend still {live.get('spec', {}).get('suspend')}")


def _admitted_later(ctx: Context, sc: Scenario, as_user: Client, user: str, ns: str, cq_name: str,
                    pods_of_job: str) -> None:
    """ClusterQueue running again: Kueue admits the Job and starts it, its pod is bound; then the user's
    raise of the running Job's parallelism must be refused and no second pod created."""

    def running():
        w = _workload_for(ctx.client, ns, "Job", UNSUSPEND_JOB)
        pods = [p for p in ctx.client.list("v1", "Pod", ns, pods_of_job)
                if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")]
        return (w, pods) if _admitted(w) and pods else None

    seen = _wait(running, ctx.timeout)
    if not seen:
        w = _workload_for(ctx.client, ns, "Job", UNSUSPEND_JOB)
        sc.fail(f"once ClusterQueue {cq_name} ran again, Kueue did not admit and start the Job within {ctx.timeout:.0f}s: "
                f"{_workload_message(w)}")
        return
    w, pods = seen
    nodes = _nodes(ctx.client)
    sc.details.append(f"ClusterQueue {cq_name} running again: Kueue admitted Workload {w['metadata']['name']} on flavor "
                      f"{', '.join(sorted(set(_flavors(w).values())))}, pod {pods[0]['metadata']['name']} bound to "
                      f"{pods[0]['spec']['nodeName']} (group {group_of(nodes.get(pods[0]['spec']['nodeName'], {}))})")
    since = ctx.client.resource_version("v1", "Pod", ns, pods_of_job)
    try:
        as_user.merge_patch("batch/v1", "Job", UNSUSPEND_JOB, {"spec": {"parallelism": 2}}, ns)
    except ApiError as exc:
        if SUSPEND_POLICY in str(exc) and "parallelism" in str(exc):
            sc.details.append(f"parallelism 1 -> 2 by {user} on the admitted Job: refused (HTTP {exc.status}: {_short(exc.message)})")
        else:
            sc.fail(f"raising the admitted Job's parallelism by {user} was refused, but not by {SUSPEND_POLICY}: {exc}")
        return
    time.sleep(3)
    more = [e["object"]["metadata"]["name"] for e in ctx.client.watch("v1", "Pod", since, ns, pods_of_job)
            if e.get("type") == "ADDED"]
    sc.fail(f"{user} raised the parallelism of the admitted Job from 1 to 2: accepted (Kueue had admitted and counted "
            f"one pod); pods created in the 3s after: {', '.join(more) or 'none'}")


# --- (c3) CPU-only work stays off the GPU pools -------------------------------------------------------------------


def wait_local_queue_active(ctx: Context, name: str, ns: str) -> Optional[dict]:
    """The LocalQueue once Kueue reports it Active (or as it is when the scenario's time is up; None when it
    does not exist). Kueue defaults an unlabelled job's queue only once its cache holds the LocalQueue: a
    job created before that is ignored for good (no Workload), a race of the rehearsal, not a finding."""
    deadline = time.monotonic() + ctx.timeout
    lq = ctx.client.get(KUEUE, "LocalQueue", name, ns)
    while lq is not None and time.monotonic() < deadline:
        if (_conditions(lq).get("Active") or {}).get("status") == "True":
            break
        time.sleep(1)
        lq = ctx.client.get(KUEUE, "LocalQueue", name, ns)
    return lq


CPU_LOCAL_QUEUE = "cpu-queue"  # the program's queue.CPU_LOCAL_QUEUE (ClusterQueue cpu-work: the system flavor)
# The ephemeral-storage request Katib v0.19.0 gives every suggestion container (pkg/apis/config/v1beta1/defaults.go).
KATIB_SUGGESTION_DISK = "500Mi"


def cpu_job_placement(ctx: Context) -> Scenario:
    """A CPU-only Job in the training namespace labelled with LocalQueue cpu-queue: Kueue must admit it
    to a flavor of system nodes (the system flavor, the only one of ClusterQueue cpu-work), so it is
    bound to a system node; admitted to a GPU flavor it would get the pool's nodeSelector and
    tolerations, hold GPU-pool quota and scale a GPU node up for a CPU job. Then the system quota is
    filled and the next CPU job must wait (_cpu_job_after_the_system_quota). Without the label (LocalQueue
    `default`, the GPU queue) a CPU-only Job is refused, saying to name cpu-queue (_unlabelled_cpu_job).
    The Job asks for ephemeral-storage as Katib v0.19.0's suggestion pod does (500Mi): no ClusterQueue covers
    it, so Kueue must be configured to ignore it (resources.excludeResourcePrefixes) or it waits for ever,
    "resource ephemeral-storage unavailable in ClusterQueue"."""
    sc = Scenario("cpu-job-placement", f"a CPU-only Job in training labelled {CPU_LOCAL_QUEUE}, asking for "
                                       "ephemeral-storage as a Katib suggestion pod does, is admitted to the "
                                       "system flavor and bound to a system node, never a GPU node; once the system "
                                       "quota is used up, the next one waits and never gets a GPU flavor; without "
                                       f"the label it is refused, naming {CPU_LOCAL_QUEUE}")
    ctl = ctx.controllers.get("kueue-manager")
    job = _example(ctx)
    ns = (job or {}).get("metadata", {}).get("namespace") or "training"
    if ctl is None or ctl.status != "running" or ctx.client.get("v1", "Namespace", ns) is None:
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"needs a running Kueue and the {ns} namespace")
        return sc
    if wait_local_queue_active(ctx, CPU_LOCAL_QUEUE, ns) is None:
        sc.fail(f"no LocalQueue {CPU_LOCAL_QUEUE} in {ns}: CPU-only work has no queue of the system nodes")
        return sc
    name = "rehearsal-cpu-job"
    cpu_job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: CPU_LOCAL_QUEUE}},
               "spec": {"backoffLimit": 0, "template": {"metadata": {"annotations": dict(NOT_EVICTED_BY_SCALE_DOWN)}, "spec": {
                   "restartPolicy": "Never", "securityContext": _RESTRICTED_POD, "containers": [
                       {"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                        "securityContext": _RESTRICTED_CONTAINER,
                        "resources": {"requests": {"cpu": "100m", "memory": "64Mi",
                                                   "ephemeral-storage": KATIB_SUGGESTION_DISK}}}]}}}}
    try:
        if err := submit(ctx.client, cpu_job):
            sc.fail(f"a CPU-only Job in {ns} labelled {CPU_LOCAL_QUEUE} was refused: {err}")
            return sc
        return _cpu_job_placed(ctx, sc, ns, cpu_job)
    finally:
        _unlabelled_cpu_job(ctx, sc, ns, cpu_job)


def _unlabelled_cpu_job(ctx: Context, sc: Scenario, ns: str, cpu_job: dict) -> None:
    """Without a queue label Kueue queues the Job in LocalQueue `default`, the GPU queue: the routing
    policy must refuse it, saying to name cpu-queue."""
    probe = copy.deepcopy(cpu_job)
    probe["metadata"] = {"name": "rehearsal-cpu-job-unlabelled", "namespace": ns}
    err = submit(ctx.client, probe)
    if err is None:
        w = None
        deadline = time.monotonic() + min(ctx.timeout, 30)
        while time.monotonic() < deadline and not _admitted(w):
            w = _workload_for(ctx.client, ns, "Job", probe["metadata"]["name"])
            time.sleep(1)
        got = ", ".join(sorted(set(_flavors(w).values()))) if _admitted(w) else None
        ctx.client.delete("batch/v1", "Job", probe["metadata"]["name"], ns, grace_seconds=0)
        sc.fail(f"a CPU-only Job in {ns} without {QUEUE_LABEL} was accepted"
                + (f" and admitted from LocalQueue {(w.get('spec') or {}).get('queueName')} to flavor(s) {got}"
                   if got else "") + f": it is not refused with the queue to use ({CPU_LOCAL_QUEUE})")
    elif f"{QUEUE_LABEL}: {CPU_LOCAL_QUEUE}" not in err:
        sc.fail(f"the unlabelled CPU-only Job was refused without naming {QUEUE_LABEL}: {CPU_LOCAL_QUEUE}: {err}")
    else:
        sc.details.append(f"CPU-only Job without {QUEUE_LABEL}: refused, naming {QUEUE_LABEL}: {CPU_LOCAL_QUEUE} "
                          f"({_short(err)})")


def _cpu_job_placed(ctx: Context, sc: Scenario, ns: str, cpu_job: dict) -> Scenario:
    name = cpu_job["metadata"]["name"]
    roles = {g.name: g.role for g in ctx.model.node_groups}

    def bound() -> Optional[tuple[dict, list[dict]]]:
        w = _workload_for(ctx.client, ns, "Job", name)
        pods = [p for p in ctx.client.list("v1", "Pod", ns, f"batch.kubernetes.io/job-name={name}")
                if p["spec"].get("nodeName")]
        return (w, pods) if _admitted(w) and pods else None

    _, verdict = wait_admission(ctx, lambda: _workload_for(ctx.client, ns, "Job", name), ctx.timeout,
                                done=lambda w: _admitted(w) and bound() is not None)
    seen = bound()
    try:
        if seen is None:
            w = _workload_for(ctx.client, ns, "Job", name)
            sc.fail("the CPU-only Job was not admitted and bound "
                    + (f"(Kueue: {verdict})" if verdict else f"within {ctx.timeout:.0f}s")
                    + f": {_workload_message(w)}")
            return sc
        w, pods = seen
        flavors = _flavors(w)
        groups = {f: _flavor_group(ctx.client, f, ctx.model) for f in set(flavors.values())}
        off = {f: g for f, g in groups.items() if roles.get(g or "") != "system"}
        if off:
            sc.fail(f"Kueue admitted the CPU-only Job to flavor(s) {', '.join(sorted(off))} (node group "
                    f"{', '.join(str(g) for g in off.values())}), not to a flavor of system nodes: it holds GPU-pool quota "
                    "and takes (or scales up) a GPU node")
        nodes = _nodes(ctx.client)
        for p in pods:
            node = p["spec"]["nodeName"]
            group = group_of(nodes.get(node, {}))
            if roles.get(group) != "system":
                sc.fail(f"pod {p['metadata']['name']} of the CPU-only Job was bound to node {node} of group {group} "
                        f"({roles.get(group, '?')}), not a system node")
            else:
                sc.details.append(f"CPU-only Job asking for ephemeral-storage {KATIB_SUGGESTION_DISK}: queued by "
                                  f"LocalQueue {CPU_LOCAL_QUEUE}, admitted to flavor(s) "
                                  f"{', '.join(sorted(set(flavors.values())))}, pod bound to system node {node}")
        return sc
    finally:
        ctx.client.delete("batch/v1", "Job", name, ns, grace_seconds=0)
        _cpu_job_larger_than_a_system_node(ctx, sc, ns, cpu_job)
        if sc.status != "FAIL":
            _cpu_job_after_the_system_quota(ctx, sc, ns, cpu_job, roles)


def _millis(q: Any) -> int:
    q = str(q)
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def _system_flavor_room(ctx: Context, ns: str, roles: dict) -> Optional[tuple[str, int, int]]:
    """(system flavor, its CPU quota, CPU still unreserved) of the ClusterQueue behind LocalQueue
    cpu-queue, from the ClusterQueue's status once Kueue has written it."""
    lq = ctx.client.get(KUEUE, "LocalQueue", CPU_LOCAL_QUEUE, ns) or {}
    cq_name = (lq.get("spec") or {}).get("clusterQueue")
    deadline = time.monotonic() + ctx.timeout
    while cq_name and time.monotonic() < deadline:
        cq = ctx.client.get(KUEUE, "ClusterQueue", cq_name) or {}
        for rg in (cq.get("spec") or {}).get("resourceGroups") or []:
            for fl in rg.get("flavors") or []:
                if roles.get(_flavor_group(ctx.client, fl["name"], ctx.model) or "") != "system":
                    continue
                quota = next((_millis(r["nominalQuota"]) for r in fl["resources"] if r["name"] == "cpu"), 0)
                status = cq.get("status") or {}
                if "flavorsReservation" not in status:
                    break  # Kueue has not reported yet
                used = sum(_millis(r.get("total", "0")) for f in status.get("flavorsReservation") or []
                           if f.get("name") == fl["name"] for r in f.get("resources") or [] if r.get("name") == "cpu")
                return fl["name"], quota, quota - used
        time.sleep(1)
    return None


def _cpu_job_after_the_system_quota(ctx: Context, sc: Scenario, ns: str, cpu_job: dict, roles: dict) -> None:
    """Platform review #3: with the system flavor first in the GPU ClusterQueue, Kueue moved the CPU job
    that came after the system quota was used up on to the next flavor (flavorFungibility), a GPU pool:
    a CPU job on a GPU node, a GPU node scaled up for it. Fill the system flavor's CPU quota with a Job
    of pods that each fit a system node, then submit a small CPU-only Job: it must stay pending
    (insufficient unused quota) and never be admitted to any flavor of GPU nodes."""
    deadline = time.monotonic() + ctx.timeout  # the first CPU Job's reservation released first
    while time.monotonic() < deadline and _workload_for(ctx.client, ns, "Job", cpu_job["metadata"]["name"]):
        time.sleep(1)
    room = _system_flavor_room(ctx, ns, roles)
    if room is None:
        sc.fail(f"the ClusterQueue behind LocalQueue {CPU_LOCAL_QUEUE} has no flavor of system nodes (or Kueue reported no usage): "
                "the system-quota overflow is not rehearsed")
        return
    flavor, quota, free = room
    per_pod_max = max(100, min((g.allocatable.cpu_millis - 200) * 95 // 100 - 100
                               for g in ctx.model.node_groups if g.role == "system"))
    pods = max(1, -(-free // per_pod_max))
    if free < 200 or pods >= 50:
        sc.details.append(f"flavor {flavor}: {free}m of {quota}m CPU unreserved: too little (or too much) to fill "
                          "with pods that fit a system node; the overflow is not rehearsed on this stack")
        return
    filler = copy.deepcopy(cpu_job)
    filler["metadata"]["name"] = "rehearsal-cpu-filler"
    filler["spec"]["parallelism"] = filler["spec"]["completions"] = pods
    filler["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] = {"cpu": f"{free // pods}m",
                                                                                    "memory": "64Mi"}
    probe = copy.deepcopy(cpu_job)
    probe["metadata"]["name"] = "rehearsal-cpu-after-quota"
    probe["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "250m"  # > what is left
    try:
        if err := submit(ctx.client, filler):
            sc.fail(f"the Job filling the {flavor} quota ({pods} x {free // pods}m) was refused: {err}")
            return
        deadline, w = time.monotonic() + ctx.timeout, None
        while time.monotonic() < deadline and not _admitted(w):
            w = _workload_for(ctx.client, ns, "Job", "rehearsal-cpu-filler")
            time.sleep(1)
        if not _admitted(w):
            sc.fail(f"the Job filling the {flavor} quota was not admitted: {_workload_message(w)}")
            return
        sc.details.append(f"flavor {flavor}: {pods} x {free // pods}m CPU admitted, the {quota}m quota used up")
        if err := submit(ctx.client, probe):
            sc.fail(f"a CPU-only Job submitted after the system quota was used up was refused: {err}")
            return
        # Kueue decides within a second or two; watch long enough to see it retry, and that it never admits.
        deadline, waited, w = time.monotonic() + ctx.timeout, None, None
        while time.monotonic() < deadline:
            w = _workload_for(ctx.client, ns, "Job", probe["metadata"]["name"])
            if _admitted(w):
                break
            if waited is None and "insufficient unused quota" in _workload_message(w):
                waited = time.monotonic()
            if waited is not None and time.monotonic() - waited > 15:
                break
            time.sleep(1)
        if _admitted(w):
            got = sorted(set(_flavors(w).values()))
            groups = {f: _flavor_group(ctx.client, f, ctx.model) for f in got}
            if all(roles.get(g or "") == "system" for g in groups.values()):
                sc.fail(f"the CPU-only Job after the filler was admitted to {', '.join(got)}: the {flavor} quota was "
                        "not used up (Kueue's usage report was stale), so the overflow was not shown")
                return
            sc.fail(f"after the {flavor} quota was used up, Kueue admitted the next CPU-only Job to flavor(s) "
                    f"{', '.join(got)} (node group {', '.join(str(g) for g in groups.values())}, "
                    f"{', '.join(sorted({roles.get(g or '', '?') for g in groups.values()}))}): "
                    "not to a flavor of system nodes, so a CPU job takes (or scales up) a GPU node")
        elif waited is None:
            sc.fail(f"the CPU-only Job after the system quota is neither admitted nor waiting for quota: "
                    f"{_workload_message(w)}")
        else:
            sc.details.append(f"CPU-only Job after the system quota: stays pending, no flavor assigned "
                              f"({_short(_workload_message(w))})")
    finally:
        for n in ("rehearsal-cpu-after-quota", "rehearsal-cpu-filler"):
            ctx.client.delete("batch/v1", "Job", n, ns, grace_seconds=0)


def _cpu_job_larger_than_a_system_node(ctx: Context, sc: Scenario, ns: str, cpu_job: dict) -> None:
    """A CPU-only Job larger than any system node but within the system flavor's CPU quota: Kueue would
    admit it there and it would never schedule, so the fit policy must refuse it at submission."""
    node = max((g.allocatable.cpu_millis for g in ctx.model.node_groups if g.role == "system"), default=0)
    lq = ctx.client.get(KUEUE, "LocalQueue", CPU_LOCAL_QUEUE, ns) or {}
    cq = ctx.client.get(KUEUE, "ClusterQueue", lq["spec"]["clusterQueue"]) if lq else None
    flavors = [f for rg in (cq or {}).get("spec", {}).get("resourceGroups", []) for f in rg["flavors"]]
    first = flavors[0] if flavors else {}
    quota = next((r["nominalQuota"] for r in first.get("resources", []) if r["name"] == "cpu"), "0")
    quota_m = int(quota[:-1]) if str(quota).endswith("m") else int(float(quota) * 1000)
    if not node or node + 100 > quota_m:
        sc.details.append(f"no CPU size is larger than a system node ({node}m) and within the {first.get('name')} "
                          f"flavor's CPU quota ({quota}): the oversized CPU Job is not rehearsed on this stack")
        return
    big = copy.deepcopy(cpu_job)
    big["metadata"]["name"] = "rehearsal-cpu-job-too-big"
    big["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = f"{node + 100}m"
    err = submit(ctx.client, big)
    if err is None:
        ctx.client.delete("batch/v1", "Job", "rehearsal-cpu-job-too-big", ns, grace_seconds=0)
        sc.fail(f"a CPU-only Job of {node + 100}m CPU (a system node has {node}m allocatable, the {first.get('name')} "
                f"flavor {quota}) was accepted: Kueue admits it to the system nodes where it never schedules")
    elif "gpu-jobs-fit-their-pool" in err and "CPU-only pod" in err:
        sc.details.append(f"CPU-only Job of {node + 100}m CPU (larger than a system node, within the flavor's quota): "
                          f"refused ({_short(err)})")
    else:
        sc.fail(f"the oversized CPU-only Job was refused, but not by the fit policy's CPU rule: {err}")


# --- (d) operator-made pods --------------------------------------------------------------------------------------


def _stand_in_refused(ctx: Context, ns: str, name: str) -> bool:
    """The operator refuses a configuration that is preflight's secret stand-in (its log cuts the value
    to `preflig...`)."""
    said = _controller_said(ctx, ("prometheus-operator",), f"{ns}/{name}")
    return SECRET_PLACEHOLDER[:7] in said and "secret" in said


def operator_pods(ctx: Context) -> Scenario:
    sc = Scenario("operator-pods", "the Prometheus operator creates Prometheus and Alertmanager; their pods land and fit")
    ctl = ctx.controllers.get("prometheus-operator")
    wanted = [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for rel in ctx.releases if rel.rendered
              for o in rel.objects if o.get("kind") in ("Prometheus", "Alertmanager") and o.get("apiVersion", "").startswith("monitoring.coreos.com/")]
    if not wanted:
        sc.details.append("the stack renders no Prometheus or Alertmanager")
        return sc
    if ctl is None or ctl.status != "running":
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"prometheus-operator is not running ({ctl.status if ctl else 'not rendered'})")
        return sc

    def sts_name(kind: str, name: str) -> str:
        return f"{'prometheus' if kind == 'Prometheus' else 'alertmanager'}-{name}"

    def ready(sts: Optional[dict]) -> bool:
        return bool(sts) and ((sts.get("status") or {}).get("readyReplicas") or 0) >= (sts["spec"].get("replicas") or 1)

    # All at once: one object the operator cannot build must not use up the others' time.
    deadline = time.monotonic() + ctx.timeout
    found: dict[tuple, Optional[dict]] = {}
    while True:
        found = {(k, ns, n): ctx.client.get("apps/v1", "StatefulSet", sts_name(k, n), ns) for k, ns, n in wanted}
        if all(ready(v) or (v is None and _stand_in_refused(ctx, ns, n)) for (_, ns, n), v in found.items()) \
                or time.monotonic() > deadline:
            break
        time.sleep(2)
    for kind, ns, name in wanted:
        sts = found[(kind, ns, name)]
        sts_name_ = sts_name(kind, name)
        if sts is None:
            said = _controller_said(ctx, ("prometheus-operator",), f"{ns}/{name}", transient=True)
            if _stand_in_refused(ctx, ns, name):
                sc.status = "NOT REHEARSED" if sc.status == "PASS" else sc.status
                sc.problems.append(f"{kind} {ns}/{name}: its configuration is a secret preflight does not know (a stand-in "
                                   f"value was rendered), so the operator cannot build it here: {said}")
            else:
                sc.fail(f"{kind} {ns}/{name}: the operator created no StatefulSet {sts_name_} within {ctx.timeout:.0f}s"
                        + (f": {said}" if said else ""))
            continue
        nodes = _nodes(ctx.client)
        pods = _pods_of(ctx.client, ns, sts["spec"]["selector"].get("matchLabels") or {})
        for p in pods:
            node = p["spec"].get("nodeName")
            if not node:
                sc.fail(f"{kind} {ns}/{name}: pod {p['metadata']['name']} not scheduled: {_pending_reason(p)}")
            else:
                sc.details.append(f"{kind} {ns}/{name}: pod {p['metadata']['name']} on {node} (group {group_of(nodes.get(node, {}))})")
        ready_n = ((sts.get("status") or {}).get("readyReplicas") or 0)
        if ready_n < (sts["spec"].get("replicas") or 1):
            sc.fail(f"{kind} {ns}/{name}: StatefulSet {sts_name_} {ready_n}/{sts['spec'].get('replicas') or 1} Ready")
        ctx.workloads.append({"release": "(operator)", "object": f"StatefulSet/{ns}/{sts_name_}", "ready": ready_n,
                              "want": sts["spec"].get("replicas") or 1,
                              "groups": sorted({group_of(nodes.get(p["spec"].get("nodeName"), {})) for p in pods if p["spec"].get("nodeName")}),
                              "fitGroups": []})
    return sc


# --- (e) preemption drill --------------------------------------------------------------------------------------


def preemption_drill(ctx: Context) -> Scenario:
    sc = Scenario("preemption-drill", "the node running the job is deleted: the job's pod is replaced and bound again "
                                      "in its pool, or waits for a new node")
    job = _example(ctx)
    if job is None:
        sc.status = "NOT REHEARSED"
        sc.problems.append("no example TrainJob")
        return sc
    ns, name = job["metadata"].get("namespace") or "training", job["metadata"]["name"]
    pods = [p for p in _job_pods(ctx.client, ns, name) if p["spec"].get("nodeName")]
    if not pods:
        sc.status = "NOT REHEARSED"
        sc.problems.append("the example TrainJob has no bound pod (see the trainjob scenario)")
        return sc
    victim = pods[0]["spec"]["nodeName"]
    nodes = _nodes(ctx.client)
    group = group_of(nodes[victim])
    spare = [n for n, node in nodes.items() if group_of(node) == group and n != victim]
    ctx.client.delete("v1", "Node", victim)
    sc.details.append(f"deleted node {victim} (group {group}); {len(spare)} other node(s) in the group")
    old = {p["metadata"]["uid"] for p in pods}
    deadline = time.monotonic() + max(ctx.timeout, 90)
    replaced: list[dict] = []
    while time.monotonic() < deadline:
        current = _job_pods(ctx.client, ns, name)
        replaced = [p for p in current if p["metadata"]["uid"] not in old]
        if replaced and (not spare or all(p["spec"].get("nodeName") for p in replaced)):
            break
        time.sleep(2)
    w = _workload_for(ctx.client, ns, "TrainJob", name)
    sc.details.append(f"Workload after the drill: {'admitted' if _admitted(w) else 'not admitted'} ({_workload_message(w)})")
    if not replaced:
        sc.fail(f"no replacement pod for TrainJob {ns}/{name} within {deadline - time.monotonic() + max(ctx.timeout, 90):.0f}s "
                "after its node was deleted")
        return sc
    for p in replaced:
        node = p["spec"].get("nodeName")
        if node:
            landed = group_of(_nodes(ctx.client).get(node, {}))
            sc.details.append(f"replacement pod {p['metadata']['name']} bound to {node} (group {landed})")
            if landed != group:
                sc.fail(f"replacement pod bound to group {landed}, not {group}")
        elif spare:
            sc.fail(f"replacement pod {p['metadata']['name']} not bound although {spare[0]} is free: {_pending_reason(p)}")
        else:
            sc.details.append(f"replacement pod {p['metadata']['name']} waits for a new node of {group}: {_pending_reason(p)}")
    if not spare:
        _autoscaler_adds(ctx, sc, victim, group, ns, name)
    return sc


def _restore_node(ctx: Context, victim: str) -> bool:
    """The model's node `victim` created again (as KWOK registers it); False when the model has no such node."""
    pair = next(((n, st) for n, st in node_objects(ctx.model) if n["metadata"]["name"] == victim), None)
    if pair is None:
        return False
    ctx.client.create(copy.deepcopy(pair[0]))
    ctx.client.apply(copy.deepcopy(pair[1]), subresource="status")
    return True


def _autoscaler_adds(ctx: Context, sc: Scenario, victim: str, group: str, ns: str, name: str) -> None:
    """No other node in the pool: play the autoscaler and bring the pool's node back (the same KWOK
    node), then the waiting pod must bind to it. Also leaves the pool whole for the scenarios after."""
    if not _restore_node(ctx, victim):
        return
    deadline = time.monotonic() + max(ctx.timeout, 90)
    pods: list[dict] = []
    while time.monotonic() < deadline:
        pods = _job_pods(ctx.client, ns, name)
        if pods and all(p["spec"].get("nodeName") for p in pods):
            break
        time.sleep(2)
    for p in pods:
        if p["spec"].get("nodeName"):
            sc.details.append(f"the autoscaler's node {victim} (group {group}) added: pod {p['metadata']['name']} bound to "
                              f"{p['spec']['nodeName']}")
        else:
            sc.fail(f"pod {p['metadata']['name']} not bound after node {victim} of {group} came back: {_pending_reason(p)}")


def release_example(ctx: Context) -> None:
    """Delete the example TrainJob so that the scenarios after it find the queue's quota free."""
    job = _example(ctx)
    if job is None:
        return
    ns, name = job["metadata"].get("namespace") or "training", job["metadata"]["name"]
    try:
        if ctx.client.delete(TRAINER, "TrainJob", name, ns):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and _workload_for(ctx.client, ns, "TrainJob", name) is not None:
                time.sleep(1)
    except (ApiError, UnknownKind):
        pass


# --- (f, without the hub) notebook pods of every profile ------------------------------------------------------


def notebook_profiles(ctx: Context) -> Scenario:
    """Each JupyterHub profile's user pod, as the hub's KubeSpawner would create it (the pod cluster fit
    models, gpu_platform.preflight.fit.pods.jupyterhub_user_pods), created through the API server: Pod
    Security admits it, Kueue admits GPU profiles, the scheduler binds it to the group fit intends."""
    from gpu_platform.preflight.fit.pods import jupyterhub_user_pods

    sc = Scenario("notebook-profiles", "each notebook profile's pod admitted (Pod Security, Kueue) and bound where fit "
                                       "places it (the pod the hub's KubeSpawner makes; the hub itself is not run)")
    templates = []
    for rel in ctx.releases:
        if rel.rendered and (rel.chart or "").rstrip("/").rsplit("/", 1)[-1] == "jupyterhub" and isinstance(rel.values, dict):
            templates += jupyterhub_user_pods(rel.name, rel.namespace, rel.values)
    if not templates:
        sc.details.append("the stack installs no JupyterHub")
        return sc
    fit_groups = _intended(ctx.placements)
    created = []
    for i, t in enumerate(templates):
        slug = t.owner.rsplit("(profile ", 1)[-1].rstrip(")") if "(profile " in t.owner else str(i)
        name = f"jupyter-rehearsal-{slug}".lower().replace("_", "-")[:60]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": t.namespace, "labels": dict(t.labels)},
               "spec": copy.deepcopy(t.spec)}
        if err := submit(ctx.client, pod):
            sc.fail(f"profile {slug}: the API server refused its pod: {err}")
            continue
        created.append((slug, t, name))
    deadline = time.monotonic() + ctx.timeout
    pods: dict[str, dict] = {}
    while time.monotonic() < deadline and created:
        pods = {name: ctx.client.get("v1", "Pod", name, t.namespace) or {} for _, t, name in created}
        if all(p.get("spec", {}).get("nodeName") for p in pods.values()):
            break
        time.sleep(1)
    nodes = _nodes(ctx.client)
    for slug, t, name in created:
        p = pods.get(name) or {}
        node = (p.get("spec") or {}).get("nodeName")
        want = fit_groups.get(t.owner)
        if not node:
            gates = [g.get("name") for g in (p.get("spec") or {}).get("schedulingGates") or []]
            why = f"held by scheduling gate(s) {', '.join(gates)} (Kueue has not admitted it" if gates else _pending_reason(p)
            if gates:
                w = _workload_for(ctx.client, t.namespace, "Pod", name)
                why += f": {_workload_message(w)})"
            sc.fail(f"profile {slug}: pod not bound within {ctx.timeout:.0f}s: {why}")
            continue
        landed = group_of(nodes.get(node, {}))
        sc.details.append(f"profile {slug}: pod bound to {node} (group {landed})")
        if QUEUE_LABEL in t.labels:  # queued (GPU profiles; the CPU profile in cpu-queue): Kueue admitted it
            w = _workload_for(ctx.client, t.namespace, "Pod", name)
            if _admitted(w):
                sc.details.append(f"profile {slug}: admitted by Kueue from LocalQueue {t.labels[QUEUE_LABEL]} on flavor "
                                  f"{', '.join(sorted(set(_flavors(w).values())))}")
            else:
                sc.fail(f"profile {slug}: queued in {t.labels[QUEUE_LABEL]} but bound without a Kueue admission "
                        f"({_workload_message(w)})")
        if want and landed not in want:
            sc.fail(f"profile {slug}: cluster fit places it on {', '.join(sorted(want))}, the scheduler put it on {landed}")
    for _, t, name in created:
        ctx.client.delete("v1", "Pod", name, t.namespace, grace_seconds=0)
    return sc


# --- (e2) a preemption is not a retry; (e3) a job that never becomes Ready stops ----------------------------------

JOBSET = "jobset.x-k8s.io/v1alpha2"
# kwok-stages.yaml never makes a pod with this container image Ready: an image that never pulls.
NEVER_READY_IMAGE = "rehearsal.invalid/never-ready:0"


def _requeue_count(w: Optional[dict]) -> int:
    return int((((w or {}).get("status") or {}).get("requeueState") or {}).get("count") or 0)


def _pods_ready(w: Optional[dict]) -> dict:
    return _conditions(w or {}).get("PodsReady") or {}


def _jobset_restarts(client: Client, ns: str, name: str) -> tuple[int, int]:
    st = (client.get(JOBSET, "JobSet", name, ns) or {}).get("status") or {}
    return int(st.get("restarts") or 0), int(st.get("restartsCountTowardsMax") or 0)


def _wait_for_pods_ready_config(ctx: Context) -> dict:
    ctl = ctx.controllers.get("kueue-manager")
    return dict(((ctl.config if ctl else None) or {}).get("waitForPodsReady") or {})


def _evictions(w: Optional[dict]) -> dict[str, int]:
    """status.schedulingStats.evictions by reason (and underlying cause): what Kueue counted."""
    out: dict[str, int] = {}
    for e in (((w or {}).get("status") or {}).get("schedulingStats") or {}).get("evictions") or []:
        key = e.get("reason", "?") + (f"/{e['underlyingCause']}" if e.get("underlyingCause") else "")
        out[key] = out.get(key, 0) + int(e.get("count") or 0)
    return out


def example_or_not_rehearsed(ctx: Context, sc: Scenario,
                             controllers: tuple[str, ...] = ("kueue-manager",)) -> Optional[dict]:
    """The example TrainJob when it and the controllers a scenario needs are there; otherwise None, with the
    scenario marked NOT REHEARSED and what is missing said."""
    job = _example(ctx)
    if job is None:
        sc.status = "NOT REHEARSED"
        sc.problems.append("no example TrainJob")
    for need in controllers:
        ctl = ctx.controllers.get(need)
        if ctl is None or ctl.status != "running":
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"{need} is not running")
    return job if sc.status != "NOT REHEARSED" else None


# What the retry drills need running: Kueue evicts and re-admits, JobSet restarts, Trainer makes the JobSet.
RETRY_CONTROLLERS = ("kueue-manager", "trainer-manager", "jobset-manager")


def preemption_not_counted(ctx: Context) -> Scenario:
    """The node of the (already once preempted) example job is deleted again: the pod fails with
    DisruptionTarget (the pod garbage collector), the runtime's podFailurePolicy fails its Job with
    reason PodFailurePolicy, the JobSet restarts without counting it (restarts grows,
    restartsCountTowardsMax does not), the new pod lands on another node of the pool, and Kueue's
    Workload goes PodsReady False (WaitForRecovery) then True (Recovered) without an eviction: its
    requeue count is unchanged, so no number of preemptions deactivates a job that runs again."""
    sc = Scenario("preemption-not-counted", "a preemption is not a retry: the JobSet restarts uncounted, the Workload "
                                            "recovers without eviction, its requeue count is unchanged")
    job = example_or_not_rehearsed(ctx, sc, RETRY_CONTROLLERS)
    if job is None:
        return sc
    ns, name = job["metadata"].get("namespace") or "training", job["metadata"]["name"]
    conf = _wait_for_pods_ready_config(ctx)
    sc.details.append(f"Kueue waitForPodsReady: recoveryTimeout {conf.get('recoveryTimeout', '(= timeout)')} (the stack's), "
                      f"backoffLimitCount {(conf.get('requeuingStrategy') or {}).get('backoffLimitCount')}")
    deadline = time.monotonic() + max(ctx.timeout, 90)
    w = None
    while time.monotonic() < deadline:  # the preemption drill before may have just re-bound the pod
        w = _workload_for(ctx.client, ns, "TrainJob", name)
        if _admitted(w) and _pods_ready(w).get("status") == "True":
            break
        time.sleep(2)
    if not (_admitted(w) and _pods_ready(w).get("status") == "True"):
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"the example TrainJob is not running with all pods Ready ({_workload_message(w)}; "
                           f"PodsReady {_pods_ready(w).get('reason')}): see the trainjob and preemption-drill scenarios")
        return sc
    count0, evictions0 = _requeue_count(w), _evictions(w)
    restarts0, counted0 = _jobset_restarts(ctx.client, ns, name)
    pods = [p for p in _job_pods(ctx.client, ns, name) if p["spec"].get("nodeName")]
    if not pods:
        sc.status = "NOT REHEARSED"
        sc.problems.append("the example TrainJob's Workload is Ready but it has no bound pod")
        return sc
    victim = pods[0]["spec"]["nodeName"]
    nodes = _nodes(ctx.client)
    group = group_of(nodes.get(victim, {}))
    spare = [n for n, node in nodes.items() if group_of(node) == group and n != victim]
    ctx.client.delete("v1", "Node", victim)
    deleted = time.monotonic()
    sc.details.append(f"deleted node {victim} (group {group}); requeue count {count0}, JobSet restarts {restarts0} "
                      f"({counted0} counted towards maxRestarts)")
    old = {p["metadata"]["uid"] for p in pods}
    # Ends as soon as the job runs again. Before that: PodGC's 40 s quarantine of a deleted node's pod, the JobSet's
    # restart, a new pod bound and made Ready, Kueue's PodsReady; under load (a local `make test`, 2026-11-29) that
    # took longer than the run's 180 s timeout alone.
    deadline = time.monotonic() + ctx.timeout + 120
    seen_recovery, node_back = False, bool(spare)
    restarts, counted = restarts0, counted0
    while time.monotonic() < deadline:
        if not node_back and any(p["metadata"]["uid"] not in old for p in _job_pods(ctx.client, ns, name)):
            # No other node in the pool: once the replacement pod exists (the old one is gone, which
            # needs the node gone), play the autoscaler and bring the node back.
            _autoscaler_adds(ctx, sc, victim, group, ns, name)
            node_back = True
        w = _workload_for(ctx.client, ns, "TrainJob", name)
        pr = _pods_ready(w)
        seen_recovery |= pr.get("reason") == "WaitForRecovery"
        restarts, counted = _jobset_restarts(ctx.client, ns, name)
        # "Recovered" counts only with a replacement pod bound: the condition the drill before left is still True
        # (Recovered) when the JobSet's restart count moves, before Kueue has seen the pod go (PodGC deletes a pod
        # of a deleted node only after its 40 s quarantine, and the restart follows at once).
        if (restarts > restarts0 and pr.get("status") == "True" and pr.get("reason") == "Recovered"
                and _replacement_bound(ctx.client, ns, name, old)):
            break
        if (restarts == restarts0 and pr.get("status") == "True" and pr.get("reason") == "Recovered"
                and _replaced_in_place(ctx.client, ns, name, pods, old)):
            # The Job made the replacement pod itself and has not failed, and the Workload runs again: the JobSet
            # restarts only when a child Job fails (jobset v0.12.0 pkg/controllers/jobset_controller.go,
            # executeFailurePolicy on a failed Job), so it never restarts for this preemption.
            break
        js = ctx.client.get(JOBSET, "JobSet", name, ns) or {}
        if restarts == restarts0 and (_conditions(js).get("Failed") or {}).get("status") == "True":
            break  # a failed JobSet is finished: it restarts no more (jobset_controller.go: jobSetFinished)
        time.sleep(2)
    if not node_back:
        # The pool's only node, and no replacement pod came to call it back: bring it back all the same, or every
        # GPU scenario after this one finds its pool without a node.
        _restore_node(ctx, victim)
        sc.details.append(f"node {victim} (group {group}) brought back after the drill (no replacement pod called for it)")
    if not _replacement_bound(ctx.client, ns, name, old):
        sc.fail(f"no replacement pod of TrainJob {ns}/{name} was bound within {time.monotonic() - deleted:.0f}s of its "
                f"node's deletion: the job does not run again")
    pr = _pods_ready(w)
    sc.details.append(f"after {time.monotonic() - deleted:.0f}s: JobSet restarts {restarts} ({counted} counted), Workload "
                      f"PodsReady {pr.get('status')} ({pr.get('reason')}), requeue count {_requeue_count(w)}, "
                      f"evictions {_evictions(w) or 'none'}")
    if restarts <= restarts0:
        sc.fail(f"the JobSet was not restarted after its pod's node was deleted (restarts {restarts}): the runtime's "
                "podFailurePolicy did not fail the Job on DisruptionTarget, or its failurePolicy has no rule for it")
    if counted != counted0:
        sc.fail(f"the restart counted towards the JobSet's maxRestarts ({counted0} -> {counted}): preemptions would use "
                "up the job's retries (failurePolicy rule RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy missing)")
    if not (pr.get("status") == "True" and pr.get("reason") == "Recovered"):
        sc.fail(f"the Workload did not recover: PodsReady {pr.get('status')} ({pr.get('reason')}: {pr.get('message')}); "
                f"{_workload_message(w)}")
    if _requeue_count(w) != count0 or _evictions(w) != evictions0:
        sc.fail(f"Kueue evicted/counted the preempted job: requeue count {count0} -> {_requeue_count(w)}, evictions "
                f"{evictions0 or 'none'} -> {_evictions(w) or 'none'}")
    if not _admitted(w) or (w.get("spec") or {}).get("active") is False:
        sc.fail(f"the Workload is no longer admitted/active: {_workload_message(w)}")
    if not seen_recovery and pr.get("reason") != "Recovered":
        sc.details.append("PodsReady WaitForRecovery was not observed (the restart may have been quicker than the poll)")
    nodes = _nodes(ctx.client)
    for p in _job_pods(ctx.client, ns, name):
        node = p["spec"].get("nodeName")
        landed = group_of(nodes.get(node, {})) if node else "(not bound)"
        sc.details.append(f"pod {p['metadata']['name']} on {node or '-'} (group {landed})")
        if node and landed != group:
            sc.fail(f"pod {p['metadata']['name']} bound to group {landed}, not {group}")
    return sc


def _replacement_bound(client: Client, ns: str, name: str, old: set[str]) -> bool:
    """A pod of the TrainJob that is not one of `old` (the uids before the drill) is bound to a node."""
    return any(p["metadata"]["uid"] not in old and p["spec"].get("nodeName") for p in _job_pods(client, ns, name))


def _replaced_in_place(client: Client, ns: str, name: str, before: list[dict], old: set[str]) -> bool:
    """A new pod of the TrainJob, bound, made by the same child Job as the pods before (same owner uid: a
    JobSet restart recreates its Jobs), and that Job not failed."""
    owners = {o.get("uid") for p in before for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"}
    new = [p for p in _job_pods(client, ns, name) if p["metadata"]["uid"] not in old and p["spec"].get("nodeName")]
    if not owners or not new:
        return False
    for p in new:
        ref = next((o for o in p["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), None)
        if ref is None or ref.get("uid") not in owners:
            return False
        job = client.get("batch/v1", "Job", ref["name"], ns) or {}
        if (_conditions(job).get("Failed") or {}).get("status") == "True" or (_conditions(job).get("FailureTarget") or {}).get("status") == "True":
            return False
    return True


def never_ready(ctx: Context) -> Scenario:
    """A TrainJob whose pods never become Ready (its image never pulls: KWOK keeps pods with
    NEVER_READY_IMAGE not Ready) is evicted by Kueue (PodsReadyTimeout) and re-admitted
    backoffLimitCount times, then deactivated, with Kueue's reason on the Workload. The rehearsal
    shortens only the timeout and the backoff base: Kueue is restarted with the drill's timeout
    (controllers.NEVER_READY_DRILL_TIMEOUT_S) for the drill and with the rehearsal's after it."""
    from gpu_platform.rehearsal.controllers import NEVER_READY_DRILL_TIMEOUT_S, REHEARSAL_BACKOFF_BASE_S

    sc = Scenario("never-ready", "a job whose pods never become Ready is re-admitted maxRequeues times, then "
                                 "deactivated with Kueue's reason on its Workload")
    job = example_or_not_rehearsed(ctx, sc, RETRY_CONTROLLERS)
    if job is None:
        return sc
    release_example(ctx)  # its quota free (inadmissible has done it already where it ran)
    conf = _wait_for_pods_ready_config(ctx)
    limit = (conf.get("requeuingStrategy") or {}).get("backoffLimitCount")
    if not conf:
        sc.fail("Kueue's Configuration has no waitForPodsReady: a job whose pods never become Ready holds its quota "
                "(and a GPU node) forever")
        return sc
    if limit is None:
        sc.fail("waitForPodsReady.requeuingStrategy has no backoffLimitCount: a job that can never run is re-admitted "
                "(and scales a GPU node up) forever")
        return sc
    with _kueue_pods_ready_timeout(ctx, sc, NEVER_READY_DRILL_TIMEOUT_S) as timeout_s:
        if timeout_s is None:
            return sc
        sc.details.append(f"Kueue waitForPodsReady: timeout {timeout_s}s for the drill (the stack's "
                          f"{conf.get('timeout')}), backoff base {REHEARSAL_BACKOFF_BASE_S}s (the stack's "
                          f"{(conf.get('requeuingStrategy') or {}).get('backoffBaseSeconds')}), backoffLimitCount {limit} (the stack's)")
        _never_ready_drill(ctx, sc, job, int(limit), timeout_s)
    return sc


@contextmanager
def _kueue_pods_ready_timeout(ctx: Context, sc: Scenario, seconds: int):
    """Kueue restarted with waitForPodsReady.timeout `seconds` for the block, then with the rehearsal's again. Yields
    the timeout in force: `seconds`; the rehearsal's where nothing can restart Kueue (a Context without `restart`,
    Kueue not running); None when the restart failed (the scenario failed, saying so)."""
    from gpu_platform.rehearsal.controllers import REHEARSAL_PODS_READY_TIMEOUT_S

    kueue = ctx.controllers.get("kueue-manager")
    if ctx.restart is None or kueue is None or kueue.status != "running":
        yield REHEARSAL_PODS_READY_TIMEOUT_S
        return
    try:
        kueue.pods_ready_timeout_s = seconds
        problems = ctx.restart(kueue)
        if problems:
            sc.fail(f"Kueue could not be restarted with the drill's waitForPodsReady.timeout {seconds}s: {'; '.join(problems)}")
            yield None
        else:
            yield seconds
    finally:
        kueue.pods_ready_timeout_s = None
        for problem in ctx.restart(kueue):
            sc.fail(f"Kueue could not be put back to the rehearsal's waitForPodsReady.timeout: {problem}")


def _never_ready_drill(ctx: Context, sc: Scenario, job: dict, limit: int, timeout_s: int) -> None:
    """The drill itself, with Kueue's waitForPodsReady.timeout at `timeout_s`."""
    from gpu_platform.rehearsal.controllers import REHEARSAL_BACKOFF_BASE_S

    ns, name = job["metadata"].get("namespace") or "training", "rehearsal-never-ready"
    probe = copy.deepcopy(job)
    probe["metadata"] = {"name": name, "namespace": ns, "labels": dict(job["metadata"].get("labels") or {})}
    probe["spec"]["trainer"]["image"] = NEVER_READY_IMAGE
    if err := submit(ctx.client, probe):
        sc.fail(f"TrainJob {ns}/{name} refused: {err}")
        return
    started = time.monotonic()
    per_round = timeout_s + 2 ** min(limit, 6) * REHEARSAL_BACKOFF_BASE_S + 30
    deadline = started + (limit + 1) * per_round + 60
    w: Optional[dict] = None
    counts: list[int] = []
    admissions, was_admitted, bound = 0, False, set()
    while time.monotonic() < deadline:
        w = _workload_for(ctx.client, ns, "TrainJob", name)
        now_admitted = _admitted(w)
        if now_admitted and not was_admitted:
            admissions += 1
        was_admitted = now_admitted
        c = _requeue_count(w)
        if w is not None and (not counts or counts[-1] != c) and c:
            counts.append(c)
        bound |= {p["spec"]["nodeName"] for p in _job_pods(ctx.client, ns, name) if p["spec"].get("nodeName")}
        # spec.active turns false first; Kueue's eviction (the Evicted condition with its reason) follows.
        if (w is not None and (w.get("spec") or {}).get("active") is False
                and str((_conditions(w).get("Evicted") or {}).get("reason", "")).startswith("Deactivated")):
            break
        time.sleep(1)
    evicted = _conditions(w or {}).get("Evicted") or {}
    sc.details.append(f"after {time.monotonic() - started:.0f}s: admitted {admissions} time(s) as seen by polling every second, requeue counts seen "
                      f"{counts or 'none'}, evictions {_evictions(w) or 'none'}, pods bound to {', '.join(sorted(bound)) or 'no node'}")
    if w is None:
        sc.fail(f"Kueue created no Workload for TrainJob {ns}/{name}")
    elif (w.get("spec") or {}).get("active") is not False:
        sc.fail(f"not deactivated within {deadline - started:.0f}s (limit {limit}): admitted {admissions} time(s), requeue "
                f"count {_requeue_count(w)}; {_workload_message(w)}")
    else:
        sc.details.append(f"Workload {w['metadata']['name']}: spec.active false; Evicted {evicted.get('status')} reason "
                          f"{evicted.get('reason')}: {evicted.get('message')}")
        if "RequeuingLimitExceeded" not in str(evicted.get("reason")):
            sc.fail(f"deactivated, but not for the requeuing limit: Evicted reason {evicted.get('reason')} ({evicted.get('message')})")
        timeouts = sum(n for k, n in _evictions(w).items() if k.split("/")[0] == "PodsReadyTimeout")
        if timeouts != limit:
            sc.fail(f"evicted {timeouts} time(s) for PodsReadyTimeout before deactivation; the stack's maxRequeues is {limit}")
    ctx.client.delete(TRAINER, "TrainJob", name, ns)
    # Its pods count against the namespace's ResourceQuota until they are gone, and the next scenario (queue-bypass)
    # creates a GPU pod there: CI's loaded run (2026-11-29) got `exceeded quota` from a pod still going.
    _wait(lambda: not _job_pods(ctx.client, ns, name), ctx.timeout)


def linode_autoscaling(ctx: Context) -> Scenario:
    sc = Scenario("linode-autoscaling", autoscale.TITLE)
    try:
        return autoscale.linode_autoscaling(ctx, sc)
    finally:
        # The drill starts its pools at zero and ends with them at zero: give them back the nodes the model
        # has (at maxNodes), as the preemption drill does, so the scenarios after it find the pool whole.
        restored = restore_model_nodes(ctx)
        if restored:
            sc.details.append(f"after the drill, the model's nodes were added back: {', '.join(restored)}")


def _model_nodes_back_after_eks_drill(ctx: Context, sc: Scenario) -> None:
    # As linode_autoscaling: the drill starts the GPU groups at zero; the model's nodes come back after it.
    restored = restore_model_nodes(ctx) if ctx.model.cloud == "aws" else []
    if restored:
        sc.details.append(f"after the drill, the model's nodes were added back: {', '.join(restored)}")


def eks_autoscaling(ctx: Context) -> Scenario:
    sc = Scenario("eks-autoscaling", autoscale_aws.TITLE)
    try:
        return autoscale_aws.eks_autoscaling(ctx, sc)
    finally:
        _model_nodes_back_after_eks_drill(ctx, sc)


def eks_autoscaling_extended(ctx: Context) -> Scenario:
    """Not in SCENARIOS: about six more minutes of the EKS drill (a GPU notebook from zero, half-used 4-GPU
    nodes kept, a node that never joins, the autoscaler killed mid-scale-up), which would take aws-prod's
    `--rehearse` past preflight's default --timeout (900 s) on a loaded machine; tests run it on the shared
    aws-prod cluster (tests/test_rehearsal_autoscaler_aws.py)."""
    sc = Scenario("eks-autoscaling-extended", autoscale_aws.EXTENDED_TITLE)
    try:
        return autoscale_aws.eks_autoscaling_extended(ctx, sc)
    finally:
        _model_nodes_back_after_eks_drill(ctx, sc)


def linode_busy_node(ctx: Context) -> Scenario:
    """Not in SCENARIOS: the shipped linode-dev pool has 1-GPU nodes, which a training pod keeps at 100 % use;
    tests run it on a planted pool of 4-GPU nodes (tests/test_rehearsal_autoscaler.py)."""
    sc = Scenario("linode-busy-node", "nodes whose training pods use at most half their GPUs are not scaled down by "
                                      "the real cluster-autoscaler while the pods run")
    try:
        return autoscale.linode_busy_node(ctx, sc)
    finally:
        restore_model_nodes(ctx)


def restore_model_nodes(ctx: Context) -> list[str]:
    present = {n["metadata"]["name"] for n in ctx.client.list("v1", "Node")}
    added = []
    for node, status in node_objects(ctx.model):
        if node["metadata"]["name"] not in present:
            ctx.client.create(copy.deepcopy(node))
            ctx.client.apply(copy.deepcopy(status), subresource="status")
            added.append(node["metadata"]["name"])
    deadline = time.monotonic() + 60
    while added and time.monotonic() < deadline:
        ready = {n["metadata"]["name"] for n in ctx.client.list("v1", "Node")
                 if (_conditions(n).get("Ready") or {}).get("status") == "True"}
        if set(added) <= ready:
            break
        time.sleep(1)
    return added


SCENARIOS = (workloads_ready, example_trainjob, preemption_drill, preemption_not_counted, inadmissible, never_ready,
             queue_bypass, unsuspend_by_hand, cpu_job_placement, notebook_profiles, operator_pods, linode_autoscaling,
             eks_autoscaling)
