"""The Linode autoscaling drill: an autoscaled Linode GPU pool goes from zero to a node and back on the
rehearsal's control plane, with the real node-group provider (gpu_platform/controllers/linode_node_groups:
its gRPC server, its Linode client, its Kubernetes client with its own RBAC) as a separate process
talking to a local fake of the Linode API (linode_fake_api.py, built from recorded real responses).

The autoscaler side is a STAND-IN, named so in the report: the real cluster-autoscaler cannot be built
here (the Go module proxy refuses k8s.io/autoscaler/cluster-autoscaler at every version,
docs/linode-autoscaling.md). `AutoscalerStandIn` is a gRPC client generated from the same
externalgrpc.proto that makes cluster-autoscaler's calls in its order (cloudprovider/externalgrpc:
Refresh, NodeGroups, NodeGroupTargetSize, NodeGroupNodes, NodeGroupForNode, NodeGroupTemplateNodeInfo,
NodeGroupIncreaseSize, NodeGroupDeleteNodes) and follows its rules in their simplest form: scale up a
group whose template node an unschedulable pod fits, by the nodes the pods need beyond those already
coming; a node without pods (DaemonSets aside) for the grace is tainted ToBeDeletedByClusterAutoscaler,
drained by eviction, and deleted through the provider.

`InstanceBridge` plays what happens outside the cluster: a new fake instance "boots" and its kubelet
registers the Node the boot document describes (name, labels, taints from its kubeadm
JoinConfiguration; the instance's providerID, as the Linode CCM sets it; allocatable of the template,
which is what the real machine reports when the template is right); an instance that is gone loses its
Node (the CCM's node lifecycle). Any disagreement between the template node, the boot document and the
rehearsal's node model (cluster fit's) fails the drill.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import signal
import ssl
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from gpu_platform.components.capacity import parse_quantity
from gpu_platform.preflight.fit.selectors import match_expression, tolerates_any
from gpu_platform.rehearsal import pki
from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION
from gpu_platform.rehearsal.kube import ApiError, Client, UnknownKind
from gpu_platform.rehearsal.linode_fake_api import TOKEN, FakeLinodeApi
from gpu_platform.rehearsal.nodes import GPU_RESOURCE, GROUP_LABEL
from gpu_platform.rehearsal.processes import ProcessGroup, free_port

TITLE = ("an autoscaled Linode GPU pool from zero and back: the real node-group provider against a fake Linode API, "
         "driven by a cluster-autoscaler STAND-IN")
STAND_IN = ("cluster-autoscaler STAND-IN (gpu_platform/rehearsal/autoscale.py: externalgrpc's calls and scale-up/"
            "scale-down rules; the real autoscaler cannot be built here, docs/linode-autoscaling.md)")
KUEUE = "kueue.x-k8s.io/v1beta2"
TRAINER = "trainer.kubeflow.org/v1alpha1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
DELETION_TAINT = "ToBeDeletedByClusterAutoscaler"  # cluster-autoscaler's utils/taints
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
PROVIDER_ID_PREFIX = "linode://"


@dataclass
class Timing:
    """The drill's clock, shortened from the stack's (each named in the report)."""

    grace_seconds: float = 8.0  # linode.scaleDownGraceMinutes
    join_deadline_seconds: int = 20  # linode.nodeGroups.joinDeadlineMinutes
    boot_seconds: float = 2.0  # a Linode boot plus kubeadm join
    interval: float = 1.0  # cluster-autoscaler's --scan-interval (10 s)


# --- the pool definition, as the program renders it ---------------------------------------------


def pools_json(plan: Any) -> Optional[dict]:
    """pools.json from the plan's linode-node-groups ConfigMap (None: the stack has no autoscaled Linode pool)."""
    if plan is None:
        return None
    for r in plan.by_type(CONFIGMAP):
        data = (r.plain_inputs or {}).get("data") or {}
        if isinstance(data, dict) and isinstance(data.get("pools.json"), str):
            return json.loads(data["pools.json"])
    return None


# --- pods against a node: the scheduler's predicates the autoscaler simulates -----------------------


def pod_requests(pod: dict) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        # Extended resources: requests default to limits (the API server's defaulting).
        for name, value in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
            if name in ("cpu", "memory", GPU_RESOURCE):
                out[name] = out.get(name, 0) + parse_quantity(value)
    return out


def fits(pod: dict, node: dict, used: Optional[dict] = None) -> Optional[str]:
    """None if the pod fits the node (beside `used`, what pods already placed there request), else why not."""
    spec = pod.get("spec") or {}
    labels = node["metadata"].get("labels") or {}
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return f"node selector {k}={v}"
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms"))
    if terms and not any(all(match_expression(labels, e) for e in t.get("matchExpressions") or []) for t in terms):
        return "required node affinity"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates_any(spec.get("tolerations"), taint):
            return f"taint {taint['key']}:{taint['effect']}"
    alloc = (node.get("status") or {}).get("allocatable") or {}
    for name, want in pod_requests(pod).items():
        have = parse_quantity(alloc.get(name, 0)) - (used or {}).get(name, 0)
        if want > have:
            return f"insufficient {name}"
    return None


# --- the template node: protobuf -> the Node a kubelet registers ---------------------------------------


def node_from_template(tmpl: Any) -> dict:
    """The v1.Node message NodeGroupTemplateNodeInfo returns, as the API's JSON."""
    return {"metadata": {"name": tmpl.metadata.name, "labels": dict(tmpl.metadata.labels)},
            "spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in tmpl.spec.taints]},
            "status": {"allocatable": {k: q.string for k, q in tmpl.status.allocatable.items()},
                       "capacity": {k: q.string for k, q in tmpl.status.capacity.items()}}}


def join_registration(create_request: dict) -> dict:
    """What the instance's kubelet registers with, from its boot document (cloud-init user data ->
    kubeadm JoinConfiguration nodeRegistration): name, node-labels, taints."""
    from gpu_platform.components.linode import render

    doc = yaml.safe_load(render.decode_user_data(create_request["metadata"]["user_data"]))
    text = next(f["content"] for f in doc.get("write_files") or [] if f.get("path") == render.KUBEADM_CONFIG_PATH)
    join = next(d for d in yaml.safe_load_all(text) if isinstance(d, dict) and d.get("kind") == "JoinConfiguration")
    reg = join.get("nodeRegistration") or {}
    labels: dict[str, str] = {}
    for arg in reg.get("kubeletExtraArgs") or []:
        if arg.get("name") == "node-labels":
            labels.update(kv.split("=", 1) for kv in str(arg.get("value", "")).split(",") if kv)
    return {"name": reg.get("name"), "labels": labels, "taints": list(reg.get("taints") or [])}


def model_disagreements(template: dict, group: Any) -> list[str]:
    """Where the template node and the rehearsal's node model (cluster fit's) differ on what scheduling
    decides: GPUs allocatable, taints, and the model's labels."""
    problems = []
    alloc = template["status"]["allocatable"]
    gpus = int(parse_quantity(alloc.get(GPU_RESOURCE, 0)))
    if gpus != group.allocatable.gpus:
        problems.append(f"the template node offers {gpus} {GPU_RESOURCE}, the node model {group.allocatable.gpus}")
    key = lambda t: (t.get("key"), t.get("value") or "", t.get("effect"))  # noqa: E731
    if sorted(map(key, template["spec"]["taints"])) != sorted(map(key, group.taints)):
        problems.append(f"the template node's taints {template['spec']['taints']} are not the node model's {group.taints}")
    missing = {k: v for k, v in group.labels.items() if template["metadata"]["labels"].get(k) != v
               and not k.startswith(("topology.kubernetes.io/zone", "kubernetes.io/hostname"))}
    if missing:
        problems.append(f"the template node lacks the node model's labels {missing}")
    return problems


# --- the node-group provider as a process ---------------------------------------------------------------


class ProviderProcess:
    """`python -m gpu_platform.controllers.linode_node_groups`, as its Deployment runs it: pools.json,
    the generated stubs, mutual TLS, a Linode token (the fake's), the Kubernetes API with its own
    ServiceAccount's token."""

    NAME = "linode-node-groups"

    def __init__(self, work: Path, settings: dict, stubs_dir: Path, tls_dir: Path, sa_dir: Path,
                 linode_url: str, kube: Client, procs: ProcessGroup):
        self.port = free_port()
        settings_file = work / "pools.json"
        settings_file.write_text(json.dumps(settings, indent=1))
        self.env = {**os.environ, "SETTINGS_FILE": str(settings_file), "STUBS_DIR": str(stubs_dir),
                    "LISTEN": f"127.0.0.1:{self.port}", "TLS_DIR": str(tls_dir), "LINODE_TOKEN": TOKEN,
                    "LINODE_API_URL": linode_url, "KUBERNETES_SERVICE_HOST": kube.host,
                    "KUBERNETES_SERVICE_PORT": str(kube.port), "SERVICE_ACCOUNT_DIR": str(sa_dir),
                    "LINODE_FIREWALL_ID": "3118155", "LINODE_SUBNET_ID": "55",
                    "CONTROL_PLANE_ENDPOINT": f"{kube.host}:{kube.port}", "PYTHONUNBUFFERED": "1"}
        self.procs = procs
        self.proc = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        self.proc = self.procs.start(f"{self.NAME}-{self.starts}",
                                     [sys.executable, "-m", "gpu_platform.controllers.linode_node_groups"], env=self.env)

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything (a node lost, an OOM kill)."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.popen.wait(10)

    @property
    def log(self) -> Optional[Path]:
        return self.proc.log if self.proc else None


def _provider_rbac(client: Client) -> None:
    """The provider's ServiceAccount and roles, as gpu_platform/components/linode/node_groups.py deploys them."""
    from gpu_platform.components.linode import node_groups as component

    role_rules, cluster_rules = component.rbac_rules()
    meta = {"name": component.NAME, "namespace": component.NAMESPACE, "labels": dict(component.LABELS)}
    subject = [{"kind": "ServiceAccount", "name": component.NAME, "namespace": component.NAMESPACE}]
    rbac = "rbac.authorization.k8s.io/v1"
    for obj in ({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
                {"apiVersion": rbac, "kind": "Role", "metadata": meta, "rules": role_rules},
                {"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta, "subjects": subject,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": component.NAME}},
                {"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": component.NAME}, "rules": cluster_rules},
                {"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": component.NAME}, "subjects": subject,
                 "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": component.NAME}}):
        client.apply(obj)


def _cluster_ca_pem(client: Client) -> bytes:
    return "".join(ssl.DER_cert_to_PEM_cert(der) for der in client.ctx.get_ca_certs(binary_form=True)).encode()


# --- the world outside the cluster: instances boot and register ----------------------------------------


class InstanceBridge:
    """Fake instances become KWOK nodes (and go away with them)."""

    def __init__(self, client: Client, fake: FakeLinodeApi, stack_tag: str, template_of: Callable[[str], dict],
                 pool_of: Callable[[dict], Optional[str]], timing: Timing):
        self.client, self.fake, self.stack_tag, self.timing = client, fake, stack_tag, timing
        self.template_of, self.pool_of = template_of, pool_of
        self.seen: dict[int, float] = {}
        self.joined: dict[int, str] = {}
        self.never_join: set[int] = set()
        self.refuse_next = False
        self.booting = True  # False: instances stay provisioning (a boot takes minutes; a restart seconds)
        self.problems: list[str] = []

    def step(self) -> None:
        now = time.monotonic()
        instances = self.fake.instances_tagged(self.stack_tag)
        for inst in instances:
            iid = inst["id"]
            if iid not in self.seen:
                self.seen[iid] = now
                if self.refuse_next:  # its boot fails: it never registers
                    self.refuse_next = False
                    self.never_join.add(iid)
            if (iid in self.joined or iid in self.never_join or not self.booting
                    or now - self.seen[iid] < self.timing.boot_seconds):
                continue
            self.fake.set_status(inst["label"], "running")
            self.joined[iid] = self._register(inst)
        alive = {PROVIDER_ID_PREFIX + str(i["id"]) for i in instances}
        for node in self.client.list("v1", "Node"):
            pid = (node.get("spec") or {}).get("providerID") or ""
            if pid.startswith(PROVIDER_ID_PREFIX) and pid not in alive:
                self.client.delete("v1", "Node", node["metadata"]["name"])  # the CCM: the instance is gone

    def _register(self, inst: dict) -> str:
        reg = join_registration(self.fake.request_of(inst["id"]))
        pool = self.pool_of(inst)
        tmpl = self.template_of(pool) if pool else None
        name = reg["name"] or inst["label"]
        if tmpl is None:
            self.problems.append(f"instance {inst['label']} carries no pool tag the provider knows")
            return name
        tlabels = {**tmpl["metadata"]["labels"], "kubernetes.io/hostname": name}
        wrong = {k: v for k, v in reg["labels"].items() if tlabels.get(k) != v}
        if wrong:
            self.problems.append(f"{name}: the kubelet registers labels {wrong} the template node does not have")
        key = lambda t: (t.get("key"), t.get("value") or "", t.get("effect"))  # noqa: E731
        if sorted(map(key, reg["taints"])) != sorted(map(key, tmpl["spec"]["taints"])):
            self.problems.append(f"{name}: the kubelet registers taints {reg['taints']}, the template node has "
                                 f"{tmpl['spec']['taints']}")
        labels = {**tlabels, **reg["labels"], GROUP_LABEL: pool}
        self.client.create({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
                            "spec": {"taints": reg["taints"], "providerID": PROVIDER_ID_PREFIX + str(inst["id"])}})
        self.client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                           "status": {"allocatable": tmpl["status"]["allocatable"],
                                      "capacity": tmpl["status"]["capacity"]}}, subresource="status")
        return name


# --- the autoscaler stand-in -------------------------------------------------------------------------------


@dataclass
class StandInLog:
    calls: list[str] = field(default_factory=list)
    increases: list[tuple[str, int]] = field(default_factory=list)
    deletions: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class AutoscalerStandIn:
    """cluster-autoscaler's RunOnce, reduced to the externalgrpc calls and rules this drill needs."""

    def __init__(self, pb2: Any, pb2_grpc: Any, core: Any, address: str, tls_dir: Path, client: Client, timing: Timing):
        import grpc

        self.grpc, self.pb2, self.core, self.client, self.timing = grpc, pb2, core, client, timing
        creds = grpc.ssl_channel_credentials((tls_dir / "ca.crt").read_bytes(), (tls_dir / "client.key").read_bytes(),
                                             (tls_dir / "client.crt").read_bytes())
        self.channel = grpc.secure_channel(address, creds)
        self.stub = pb2_grpc.CloudProviderStub(self.channel)
        self.unneeded_since: dict[str, float] = {}
        self.log = StandInLog()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method: str, request: Any, timeout: float = 60.0) -> Any:
        self.log.calls.append(method)
        return getattr(self.stub, method)(request, timeout=timeout)

    def template(self, group: str) -> dict:
        raw = self._call("NodeGroupTemplateNodeInfo", self.pb2.NodeGroupTemplateNodeInfoRequest(id=group)).nodeBytes
        node = self.core.Node()
        node.ParseFromString(raw)  # v1.Node#Unmarshal, as externalgrpc_node_group.go TemplateNodeInfo does
        return node_from_template(node)

    def run_once(self) -> None:
        """One loop; a failed call ends it (the autoscaler logs and tries again next loop)."""
        try:
            self._run_once()
        except self.grpc.RpcError as exc:
            self.log.errors.append(f"{exc.code().name}: {exc.details()}")

    def _run_once(self) -> None:
        pb2 = self.pb2
        self._call("Refresh", pb2.RefreshRequest())
        groups = self._call("NodeGroups", pb2.NodeGroupsRequest()).nodeGroups
        nodes = self.client.list("v1", "Node")
        state = {}
        for g in groups:
            target = self._call("NodeGroupTargetSize", pb2.NodeGroupTargetSizeRequest(id=g.id)).targetSize
            instances = {i.id for i in self._call("NodeGroupNodes", pb2.NodeGroupNodesRequest(id=g.id)).instances}
            state[g.id] = {"group": g, "target": target, "instances": instances, "nodes": []}
        for n in nodes:
            pid = (n.get("spec") or {}).get("providerID") or ""
            if not pid:
                continue
            ask = pb2.ExternalGrpcNode(providerID=pid, name=n["metadata"]["name"],
                                       labels=(n["metadata"].get("labels") or {}))
            gid = self._call("NodeGroupForNode", pb2.NodeGroupForNodeRequest(node=ask)).nodeGroup.id
            if gid in state:
                state[gid]["nodes"].append(n)
        pods = self.client.list("v1", "Pod")
        self._scale_up(state, pods)
        self._scale_down(state, pods)

    def _scale_up(self, state: dict, pods: list[dict]) -> None:
        pending = [p for p in pods if not p["spec"].get("nodeName") and not p["spec"].get("schedulingGates")
                   and any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                           for c in (p.get("status") or {}).get("conditions") or [])]
        if not pending:
            return
        for gid, s in state.items():
            tmpl = self.template(gid)
            wants = [p for p in pending if fits(p, tmpl) is None]
            if not wants:
                continue
            # Bin-pack the pods onto template nodes; nodes already asked for (target minus registered)
            # take pods first: a pod that fits on an upcoming node triggers nothing.
            bins: list[dict] = []
            for p in wants:
                req = pod_requests(p)
                for used in bins:
                    if fits(p, tmpl, used) is None:
                        for k, v in req.items():
                            used[k] = used.get(k, 0) + v
                        break
                else:
                    bins.append(dict(req))
            upcoming = max(0, s["target"] - len(s["nodes"]))
            delta = min(len(bins) - upcoming, s["group"].maxSize - s["target"])
            if delta > 0:
                self.log.increases.append((gid, delta))
                self._call("NodeGroupIncreaseSize", self.pb2.NodeGroupIncreaseSizeRequest(id=gid, delta=delta))
            pending = [p for p in pending if p not in wants]

    def _scale_down(self, state: dict, pods: list[dict]) -> None:
        now = time.monotonic()
        for gid, s in state.items():
            size = s["target"]
            for n in s["nodes"]:
                name = n["metadata"]["name"]
                on = [p for p in pods if p["spec"].get("nodeName") == name
                      and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                      and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]
                if on:
                    self.unneeded_since.pop(name, None)
                    continue
                since = self.unneeded_since.setdefault(name, now)
                if now - since < self.timing.grace_seconds or size - 1 < s["group"].minSize:
                    continue
                self._drain(n, pods)
                ask = self.pb2.ExternalGrpcNode(providerID=n["spec"]["providerID"], name=name,
                                                labels=(n["metadata"].get("labels") or {}))
                self.log.deletions.append((gid, name))
                self._call("NodeGroupDeleteNodes", self.pb2.NodeGroupDeleteNodesRequest(id=gid, nodes=[ask]))
                self.unneeded_since.pop(name, None)
                size -= 1

    def _drain(self, node: dict, pods: list[dict]) -> None:
        name = node["metadata"]["name"]
        taints = [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") != DELETION_TAINT]
        taints.append({"key": DELETION_TAINT, "value": str(int(time.time())), "effect": "NoSchedule"})
        self.client.merge_patch("v1", "Node", name, {"spec": {"taints": taints}})
        for p in pods:
            if p["spec"].get("nodeName") != name or any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or []):
                continue
            ns, pod = p["metadata"]["namespace"], p["metadata"]["name"]
            try:
                self.client.request("POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction",
                                    {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}})
            except ApiError as exc:
                if exc.status != 404:
                    raise


# --- the drill ----------------------------------------------------------------------------------------------


def _example(ctx: Any) -> Optional[dict]:
    for rel in ctx.releases:
        if rel.source == "example":
            for o in rel.objects:
                if o.get("kind") == "TrainJob":
                    return o
    return None


def _workload(client: Client, ns: str, trainjob: str) -> Optional[dict]:
    for w in client.list(KUEUE, "Workload", ns):
        if any(o.get("kind") == "TrainJob" and o.get("name") == trainjob for o in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def _admitted(w: Optional[dict]) -> bool:
    return bool(w) and any(c.get("type") == "Admitted" and c.get("status") == "True"
                           for c in (w.get("status") or {}).get("conditions") or [])


class Drill:
    def __init__(self, ctx: Any, sc: Any, settings: dict, work: Path, log_dir: Path, timing: Timing):
        self.ctx, self.sc, self.client, self.timing = ctx, sc, ctx.client, timing
        self.work, self.log_dir = work, log_dir  # work: keys and the token (deleted after); log_dir: kept
        self.settings = settings
        self.stack_tag = f"node-group-stack:{settings['cluster']}"
        self.pools = {p["name"]: p for p in settings["pools"]}

    def until(self, what: str, done: Callable[[], bool], timeout: Optional[float] = None) -> bool:
        """Runs the world (bridge, then the stand-in's loop) until `done`; False (and a failure) on timeout."""
        deadline = time.monotonic() + (timeout or max(self.ctx.timeout, 90))
        while time.monotonic() < deadline:
            self.bridge.step()
            self.standin.run_once()
            if done():
                return True
            time.sleep(self.timing.interval)
        self.sc.fail(f"{what}: not within {timeout or max(self.ctx.timeout, 90):.0f}s "
                     f"(the stand-in's last errors: {self.standin.log.errors[-2:] or 'none'}; "
                     f"provider log {self.provider.log})")
        return False

    def pool_nodes(self, pool: str) -> list[dict]:
        return [n for n in self.client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == pool
                and ((n.get("spec") or {}).get("providerID") or "").startswith(PROVIDER_ID_PREFIX)]

    def pool_instances(self, pool: str) -> list[dict]:
        return [i for i in self.fake.instances_tagged(self.stack_tag) if f"node-group:{pool}" in i["tags"]]

    def submit(self, job: dict, name: str) -> Optional[tuple[str, str]]:
        obj = copy.deepcopy(job)
        ns = job["metadata"].get("namespace") or "training"
        obj["metadata"] = {"name": name, "namespace": ns, "labels": dict(job["metadata"].get("labels") or {})}
        try:
            self.client.create(obj)
        except (ApiError, UnknownKind) as exc:
            self.sc.fail(f"TrainJob {ns}/{name} refused: {exc}")
            return None
        return ns, name

    def bound_in_pool(self, ns: str, name: str, pool: str) -> Callable[[], bool]:
        def check() -> bool:
            pods = self.client.list("v1", "Pod", ns, f"jobset.sigs.k8s.io/jobset-name={name}")
            names = {n["metadata"]["name"] for n in self.pool_nodes(pool)}
            return bool(pods) and all(p["spec"].get("nodeName") in names for p in pods) and _admitted(_workload(self.client, ns, name))
        return check

    def end(self, ns: str, name: str) -> bool:
        """The job ends: its TrainJob is deleted (KWOK's pods run until deleted), its quota freed. The
        world goes on meanwhile (the stand-in sees the node busy until the pods are gone)."""
        self.client.delete(TRAINER, "TrainJob", name, ns)
        return self.until(f"TrainJob {ns}/{name} and its pods gone", lambda: _workload(self.client, ns, name) is None
                          and not self.client.list("v1", "Pod", ns, f"jobset.sigs.k8s.io/jobset-name={name}"), timeout=120)

    def template_of(self, pool: str) -> dict:
        if pool not in self._templates:
            self._templates[pool] = self.standin.template(pool)
        return self._templates[pool]

    def pool_of(self, inst: dict) -> Optional[str]:
        return next((p for p in self.pools if f"node-group:{p}" in inst["tags"]), None)

    def run(self) -> None:
        from gpu_platform.controllers.linode_node_groups import stubs
        from gpu_platform.controllers.linode_node_groups.__main__ import load_stubs

        sc, client, t = self.sc, self.client, self.timing
        job = _example(self.ctx)
        if job is None:
            sc.status = "NOT REHEARSED"
            sc.problems.append("no example TrainJob to make the GPU demand")
            return
        for need in ("kueue-manager", "trainer-manager", "jobset-manager"):
            ctl = self.ctx.controllers.get(need)
            if ctl is None or ctl.status != "running":
                sc.status = "NOT REHEARSED"
                sc.problems.append(f"{need} is not running")
        if sc.status != "PASS":
            return
        try:
            stubs_dir = stubs.generate(self.work / "stubs")
        except ImportError as exc:
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"the gRPC stubs cannot be generated: {exc} (grpcio-tools, requirements-dev.txt)")
            return
        pb2, pb2_grpc, core = load_stubs(str(stubs_dir))
        sys.path.remove(str(stubs_dir))  # imported; the folder goes with the drill
        pool = next(p for p in self.pools)
        group = next((g for g in self.ctx.model.node_groups if g.name == pool), None)

        # mutual TLS as the program issues it: a CA, the provider's server certificate, the autoscaler's client one
        tls_dir = self.work / "tls"
        ca = pki.CA.new("linode-node-groups-ca")
        crt, key = ca.issue("localhost", dns=["localhost"], ips=["127.0.0.1"], server=True)
        ccrt, ckey = ca.issue("cluster-autoscaler", server=False)
        for name, data in (("ca.crt", ca.cert_pem), ("tls.crt", crt), ("tls.key", key), ("client.crt", ccrt), ("client.key", ckey)):
            pki.write(tls_dir / name, data, private=name.endswith(".key"))
        _provider_rbac(client)
        sa_dir = self.work / "serviceaccount"
        pki.write(sa_dir / "token", client.token("kube-system", ProviderProcess.NAME).encode(), private=True)
        pki.write(sa_dir / "ca.crt", _cluster_ca_pem(client))

        self.fake = FakeLinodeApi(lambda: datetime.datetime.now(datetime.timezone.utc))
        procs = ProcessGroup(self.log_dir)
        self._templates: dict[str, dict] = {}
        try:
            self.provider = ProviderProcess(self.work, self.settings, stubs_dir, tls_dir, sa_dir, self.fake.base_url,
                                            client, procs)
            self.provider.start()
            self.standin = AutoscalerStandIn(pb2, pb2_grpc, core, f"localhost:{self.provider.port}", tls_dir, client, t)
            self.bridge = InstanceBridge(client, self.fake, self.stack_tag, self.template_of, self.pool_of, t)
            self._drill(job, pool, group)
        finally:
            if getattr(self, "standin", None) is not None:
                self.standin.close()
            procs.stop_all()
            self.fake.close()
            sc.problems.extend(self.bridge.problems if getattr(self, "bridge", None) else [])
            if sc.problems and sc.status == "PASS":
                sc.status = "FAIL"
            sc.details.append(f"provider logs: {self.log_dir}")

    def _wait_provider(self) -> bool:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                self.standin._call("NodeGroups", self.standin.pb2.NodeGroupsRequest(), timeout=2)
                return True
            except self.standin.grpc.RpcError:
                time.sleep(0.5)
        self.sc.fail(f"the node-group provider did not answer within 60s: {self.provider.proc.tail() if self.provider.proc else ''}")
        return False

    def _drill(self, job: dict, pool: str, group: Any) -> None:
        sc, client, t = self.sc, self.client, self.timing
        sc.details.append(f"autoscaler: {STAND_IN}")
        sc.details.append(f"pool {pool}: {self.pools[pool]['instanceType']} x {self.pools[pool]['minNodes']}-"
                          f"{self.pools[pool]['maxNodes']} (pools.json as the program renders it); drill clock: scale-down "
                          f"grace {t.grace_seconds:.0f}s, join deadline {t.join_deadline_seconds}s, boot {t.boot_seconds:.0f}s")
        # The pool at minNodes: the rehearsal made its nodes at maxNodes (node model); they are not instances.
        for n in client.list("v1", "Node", selector=f"{GROUP_LABEL}={pool}"):
            client.delete("v1", "Node", n["metadata"]["name"])
        if not self._wait_provider():
            return
        tmpl = self.template_of(pool)
        if group is not None:
            for p in model_disagreements(tmpl, group):
                sc.fail(f"pool {pool}: {p}")
        sc.details.append(f"template node: {tmpl['status']['allocatable'].get(GPU_RESOURCE)} {GPU_RESOURCE}, taints "
                          + ", ".join(f"{x['key']}={x.get('value', '')}:{x['effect']}" for x in tmpl["spec"]["taints"]))

        # 1. A pending GPU TrainJob: a node appears in its pool, the job is admitted and bound.
        started = time.monotonic()
        ref = self.submit(job, "rehearsal-autoscale-a")
        if ref is None:
            return
        if not self.until(f"TrainJob {ref[0]}/{ref[1]} admitted and bound to a new node of {pool}",
                          self.bound_in_pool(*ref, pool)):
            return
        nodes = [n["metadata"]["name"] for n in self.pool_nodes(pool)]
        creates = len(self.fake.calls("POST"))
        if self.standin.log.increases != [(pool, 1)] or creates != 1:
            sc.fail(f"one pending pod, one node: the stand-in asked {self.standin.log.increases} and the provider "
                    f"called create {creates} time(s) (a target size that leaves out a booting instance makes "
                    "the autoscaler ask again)")
        sc.details.append(f"scale-up: IncreaseSize {self.standin.log.increases} -> instance(s) "
                          f"{[i['label'] for i in self.pool_instances(pool)]} -> node(s) {nodes}; TrainJob admitted and "
                          f"bound after {time.monotonic() - started:.0f}s")
        # 2. The job ends; after the grace the idle node is drained and deleted, its instance with it.
        if not self.end(*ref):
            return
        started = time.monotonic()
        if not self.until(f"idle node(s) {nodes} of {pool} removed and their instance deleted",
                          lambda: not self.pool_instances(pool) and not self.pool_nodes(pool)):
            return
        sc.details.append(f"scale-down: {self.standin.log.deletions} after {time.monotonic() - started:.0f}s idle "
                          f"(grace {t.grace_seconds:.0f}s); the fake Linode API holds no instance of {pool}")

        # 3. A node that never joins is deleted by the provider at the join deadline; the pool recovers ...
        # 4. ... and the provider is killed in the middle of that recovery: its create reached Linode, the
        # answer never came back. Restarted, it finds the instance by its tags; nothing leaks, nothing doubles.
        posts_before = len(self.fake.calls("POST"))
        held = threading.Event()
        self.fake.faults["POST"] += [("pass",), ("hold", held)]
        self.bridge.refuse_next = True
        ref = self.submit(job, "rehearsal-autoscale-b")
        if ref is None:
            return
        stop = threading.Event()

        def world() -> None:  # the loop in the background: the provider's answer will hang
            while not stop.is_set():
                self.bridge.step()
                self.standin.run_once()
                stop.wait(t.interval)

        loop = threading.Thread(target=world, name="autoscale-world", daemon=True)
        loop.start()
        started = time.monotonic()
        deadline = started + t.join_deadline_seconds + max(self.ctx.timeout, 90)
        while time.monotonic() < deadline and self.fake.held == 0:
            time.sleep(0.2)
        if self.fake.held == 0:
            stop.set()
            held.set()
            loop.join(60)
            sc.fail(f"no second scale-up within {deadline - started:.0f}s of the second TrainJob (instances that never "
                    f"joined: {sorted(self.bridge.never_join)}; the stand-in's last errors {self.standin.log.errors[-2:]})")
            return
        alive = {i["id"] for i in self.fake.instances_tagged(self.stack_tag)}
        lost = sorted(self.bridge.never_join)
        if not lost or set(lost) & alive:
            sc.fail(f"the pool scaled up again while instance(s) {lost} that never joined still exist")
        else:
            sc.details.append(f"instance {lost[0]} never registered: the provider deleted it at the join deadline "
                              f"({t.join_deadline_seconds}s) and the stand-in asked for a node again "
                              f"{time.monotonic() - started:.0f}s after the TrainJob")
        self.bridge.booting = False  # the in-flight instance is still booting when the provider is back
        in_flight = [i["label"] for i in self.pool_instances(pool)]
        self.provider.kill()
        held.set()
        stop.set()
        loop.join(120)
        self.provider.start()
        if not self._wait_provider():
            return
        asked = len(self.standin.log.increases)
        for _ in range(3):  # the autoscaler's next loops see the pool while the instance still boots
            self.bridge.step()
            self.standin.run_once()
            time.sleep(t.interval)
        self.bridge.booting = True
        if len(self.standin.log.increases) != asked:
            sc.fail(f"after the restart the stand-in asked for more nodes ({self.standin.log.increases[asked:]}): the "
                    f"provider did not count the instance {in_flight} it was creating when it died")
        sc.details.append(f"provider killed (SIGKILL) while its create of {in_flight} was in flight (Linode made it, "
                          f"the answer reached nobody); restarted (the stand-in saw: "
                          f"{self.standin.log.errors[-1] if self.standin.log.errors else 'no error'})")
        if not self.until(f"TrainJob {ref[0]}/{ref[1]} bound to {pool} after the restart", self.bound_in_pool(*ref, pool)):
            return
        instances = self.pool_instances(pool)
        posts = len(self.fake.calls("POST")) - posts_before
        sc.details.append(f"after the restart: instance(s) {[i['label'] for i in instances]}, node(s) "
                          f"{[n['metadata']['name'] for n in self.pool_nodes(pool)]}, {posts} create call(s) since the lost node")
        if len(instances) != 1 or posts != 2:
            sc.fail(f"after the restart the pool holds {len(instances)} instance(s) ({posts} create calls since the lost "
                    "node; want 1 instance from 2 creates: the lost one and the interrupted one)")
        if self.end(*ref) and self.until(f"the pool {pool} back at minNodes", lambda: not self.pool_instances(pool) and not self.pool_nodes(pool)):
            left = self.fake.instances_tagged(self.stack_tag)
            sc.details.append(f"pool {pool} back at {len(self.pool_nodes(pool))} node(s); the fake Linode API holds "
                              f"{len(left)} instance(s) of the stack")


def linode_autoscaling(ctx: Any, sc: Any, timing: Optional[Timing] = None) -> Any:
    """Fills scenario `sc` (scenarios.Scenario) with the drill on `ctx` (scenarios.Context)."""
    t = timing or Timing()
    settings = pools_json(getattr(ctx, "plan", None))
    if ctx.model.cloud != "linode" or not settings or not settings.get("pools"):
        sc.details.append("the stack has no autoscaled Linode GPU pool (no node-group provider to drill)")
        return sc
    settings = {**settings, "joinDeadlineSeconds": t.join_deadline_seconds}
    with tempfile.TemporaryDirectory(prefix="rehearsal-autoscale-") as tmp:
        work = Path(tmp)
        # Beside the controllers' logs (build/<stack>/rehearsal-logs/), where the report points.
        logs = next((Path(c.proc.log).parent for c in ctx.controllers.values() if getattr(c, "proc", None)), None)
        Drill(ctx, sc, settings, work, (logs / "linode-autoscaling") if logs else work / "logs", t).run()
    return sc
