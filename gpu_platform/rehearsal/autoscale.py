"""The Linode autoscaling drill: an autoscaled Linode GPU pool goes from zero to a node and back on the
rehearsal's control plane, driven by the REAL cluster-autoscaler (built from its tagged source with
`-tags externalgrpc`, rehearsal/components.lock.toml) talking gRPC over mutual TLS to the real node-group
provider (gpu_platform/controllers/linode_node_groups: its gRPC server, its Linode client, its Kubernetes
client with its own RBAC) as a separate process, which talks to a local fake of the Linode API
(linode_fake_api.py, built from recorded real responses).

The autoscaler runs as the chart's Deployment would run it: the container's arguments as the pinned
cluster-autoscaler chart renders them for the stack (the plan's release; on a stack whose plan has none
because linode.nodeGroups.image is unset, the chart rendered by the drill with the values the program's
component passes, node_groups.autoscaler_release_values), the chart's ServiceAccount, ClusterRole and Role
plus the program's own extra rules (components/autoscaler_rbac.py) and nothing else, with that
ServiceAccount's token. What the drill changes is listed in the report: the addresses (127.0.0.1), the
cloud config's address and certificate files, and the clock (minutes to seconds).

`InstanceBridge` plays what happens outside the cluster: a new fake instance "boots" and its kubelet
registers the Node the boot document describes (name, labels, taints from its kubeadm
JoinConfiguration; the instance's providerID, as the Linode CCM sets it; the allocatable the kubelet
computes for the instance type: capacity.allocatable and the type's disk, components/capacity.py); an
instance that is gone loses its Node (the CCM's node lifecycle). Any disagreement between the template
node, the boot document, the registered node and the rehearsal's node model (cluster fit's) fails the
drill. What the autoscaler logged (its scale-ups and scale-downs and their reasons, per node group) is in
the report.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import signal
import ssl
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from gpu_platform.components.capacity import parse_quantity
from gpu_platform.rehearsal import binaries, pki
from gpu_platform.rehearsal.controlplane import KWOK_ANNOTATION
from gpu_platform.rehearsal.kube import ApiError, Client, UnknownKind, kubeconfig
from gpu_platform.rehearsal.linode_fake_api import TOKEN, FakeLinodeApi
from gpu_platform.rehearsal.nodes import GPU_RESOURCE, GROUP_LABEL
from gpu_platform.rehearsal.processes import ProcessGroup, free_port

TITLE = ("an autoscaled Linode GPU pool from zero and back: the real cluster-autoscaler (externalgrpc) and the real "
         "node-group provider against a fake Linode API")
AUTOSCALER = "cluster-autoscaler-externalgrpc"  # the binary (rehearsal/components.lock.toml)
KUEUE = "kueue.x-k8s.io/v1beta2"
TRAINER = "trainer.kubeflow.org/v1alpha1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
PROVIDER_ID_PREFIX = "linode://"
STATUS_CONFIGMAP = "cluster-autoscaler-status"  # --write-status-configmap (default true), in --namespace
LEASE = "cluster-autoscaler"  # --leader-elect-resource-name's default
# cluster-autoscaler exits by design when it cannot renew its leader lease in time (main.go OnStoppedLeading:
# klog.Fatalf("lost master"), "committing a suicide after losing mastership"): the kubelet restarts the container.
# An API server stalled by a loaded machine does that to the drill's autoscaler too; the drill restarts it as the
# kubelet would, at most this many times a drill (more is a crash loop, reported).
LOST_LEASE = "lost master"
LOST_LEASE_RESTARTS = 3
# Katib's metrics collector sidecar asks this much ephemeral storage (kubeflow/katib
# pkg/apis/config/v1beta1/defaults.go DefaultMetricsCollectorEphemeralStorageRequest): a trial pod the
# pool must be able to take from zero. The drill's first job carries it.
KATIB_EPHEMERAL_STORAGE = "500Mi"


@dataclass
class Timing:
    """The drill's clock, shortened from the stack's (each change is listed in the report)."""

    # Kueue's waitForPodsReady timeout is 30 s in the rehearsal (controllers.REHEARSAL_PODS_READY_TIMEOUT_S):
    # a pod pending longer is evicted and requeued (the stack's maxRequeues allow 3): the never-join drill
    # (a join deadline, a backoff, a restart) costs its TrainJob one or two requeues. The join deadline must
    # outlast the autoscaler's restart (its leader lease, its informers' sync, its first loops) or the
    # provider deletes the instance the restarted autoscaler is waiting for.
    grace_seconds: int = 20  # --scale-down-unneeded-time (linode.scaleDownGraceMinutes)
    join_deadline_seconds: int = 30  # --max-node-provision-time and the provider's joinDeadlineSeconds
    # The provider's joinBackstopSeconds (components/linode/node_groups.JOIN_BACKSTOP_SECONDS, 300 s): the
    # autoscaler removes a never-joined instance up to IncreaseSize's answer, a scan interval and two loops
    # after the deadline; here IncreaseSize answers at once (its held create is a later phase's) and a loop
    # takes well under a second.
    join_backstop_seconds: int = 15
    boot_seconds: float = 3.0  # a Linode boot plus kubeadm join
    scan_interval_seconds: int = 2  # --scan-interval (10 s)
    delay_after_add_seconds: int = 5  # --scale-down-delay-after-add (the chart's 10m)
    backoff_seconds: int = 5  # --initial-node-group-backoff-duration (5m) and the failure delays
    busy_watch_seconds: int = 40  # how long a busy node is watched for a scale-down that must not come
    # --leader-elect-lease-duration (15 s); the renew deadline is two thirds of it. An autoscaler that cannot renew
    # within it exits ("lost master"): at 6 s (renew 4 s) an API server stalled by a loaded machine (a local
    # `make test`, 2026-11-29: one loop took 8.8 s) ended linode-dev's drill. A successor in the drill does not wait
    # it out: every process runs on this host, and cluster-autoscaler's identity is the hostname (main.go), so it
    # renews the lease it finds as its own.
    lease_seconds: int = 10

    def flags(self) -> dict[str, str]:
        """cluster-autoscaler flags the drill sets over the chart's (seconds where the cluster has minutes)."""
        return {
            "scale-down-unneeded-time": f"{self.grace_seconds}s",
            "scale-down-delay-after-add": f"{self.delay_after_add_seconds}s",
            "max-node-provision-time": f"{self.join_deadline_seconds}s",
            "scan-interval": f"{self.scan_interval_seconds}s",
            "scale-down-delay-after-failure": f"{self.backoff_seconds}s",
            "initial-node-group-backoff-duration": f"{self.backoff_seconds}s",
            "max-node-group-backoff-duration": f"{self.backoff_seconds * 3}s",
            "unremovable-node-recheck-timeout": f"{self.backoff_seconds}s",
            # Shorter than the defaults (15 s, renew 10 s, retry 2 s): see lease_seconds.
            "leader-elect-lease-duration": f"{self.lease_seconds}s",
            "leader-elect-renew-deadline": f"{max(1, self.lease_seconds * 2 // 3)}s",
            "leader-elect-retry-period": "1s",
        }


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


def autoscaler_version_gap(built: Optional[str], minor: str) -> Optional[str]:
    """Why the drill's cluster-autoscaler binary (its lock version, `built`) is not the one the stack runs (the image
    tag aws_versions.CLUSTER_AUTOSCALER_IMAGE_TAGS picks for the stack's Kubernetes `minor`, on Linode and EKS alike),
    or None when it is. A drill of another version would report what that version does, not the stack's."""
    from gpu_platform.data import aws_versions

    wanted = aws_versions.CLUSTER_AUTOSCALER_IMAGE_TAGS.get(str(minor))
    if wanted is None:
        return f"the program pins no cluster-autoscaler image for Kubernetes {minor}"
    if built != wanted:
        return (f"the stack runs cluster-autoscaler {wanted} (the image for Kubernetes {minor}); the rehearsal's binary is "
                f"{built or 'of no recorded version'} (rehearsal/components.lock.toml builds one version), so its drill "
                "would show another version's behaviour")
    return None


def kubelet_and_ccm_labels(name: str, create_request: dict) -> dict[str, str]:
    """The labels a Linode node gets besides its kubelet's node-labels: the kubelet's own (kubernetes.io/hostname,
    os and arch) and the Linode CCM's, from the instance (linode-cloud-controller-manager cloud/linode/instances.go
    InstanceMetadata: InstanceType = the instance's type, Region = its region, no zone), which the cloud node
    controller of k8s.io/cloud-provider writes as node.kubernetes.io/instance-type and topology.kubernetes.io/region
    (the deprecated beta.* twins left out: nothing the platform selects on)."""
    return {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": str(create_request.get("type")),
            "topology.kubernetes.io/region": str(create_request.get("region"))}


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
                 pool_of: Callable[[dict], Optional[str]], timing: Timing,
                 node_resources: Optional[Callable[[str], tuple[dict, dict]]] = None):
        self.client, self.fake, self.stack_tag, self.timing = client, fake, stack_tag, timing
        self.template_of, self.pool_of = template_of, pool_of
        # pool -> (capacity, allocatable) the kubelet reports for the pool's instance type; default: the template's
        self.node_resources = node_resources
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
        request = self.fake.request_of(inst["id"])
        reg = join_registration(request)
        pool = self.pool_of(inst)
        tmpl = self.template_of(pool) if pool else None
        name = reg["name"] or inst["label"]
        if tmpl is None:
            self.problems.append(f"instance {inst['label']} carries no pool tag the provider knows")
            return name
        # The node registers with what its boot document, its kubelet and the CCM give it, not with the template:
        # a template label nothing gives the node lets the autoscaler's simulation place a pod the scheduler then
        # never places on the new node (and the pool scales up again and again).
        registered = {**kubelet_and_ccm_labels(name, request), **reg["labels"]}
        tlabels = {**tmpl["metadata"]["labels"], "kubernetes.io/hostname": name}
        wrong = {k: v for k, v in reg["labels"].items() if tlabels.get(k) != v}
        if wrong:
            self.problems.append(f"{name}: the kubelet registers labels {wrong} the template node does not have")
        promised = {k: v for k, v in tlabels.items() if registered.get(k) != v}
        if promised:
            self.problems.append(f"{name}: the template node has labels {promised} the node does not register with "
                                 "(not in its kubelet's node-labels, nor set by the kubelet or the Linode CCM)")
        key = lambda t: (t.get("key"), t.get("value") or "", t.get("effect"))  # noqa: E731
        if sorted(map(key, reg["taints"])) != sorted(map(key, tmpl["spec"]["taints"])):
            self.problems.append(f"{name}: the kubelet registers taints {reg['taints']}, the template node has "
                                 f"{tmpl['spec']['taints']}")
        labels = {**registered, GROUP_LABEL: pool}
        capacity, alloc = (self.node_resources(pool) if self.node_resources is not None
                           else (tmpl["status"]["capacity"], tmpl["status"]["allocatable"]))
        differ = sorted(k for k in set(alloc) | set(tmpl["status"]["allocatable"])
                        if parse_quantity(alloc.get(k, 0)) != parse_quantity(tmpl["status"]["allocatable"].get(k, 0)))
        if differ:
            talloc = tmpl["status"]["allocatable"]
            self.problems.append(f"{name}: the kubelet reports allocatable {', '.join(f'{k}={alloc.get(k)}' for k in differ)}, "
                                 f"the template node says {', '.join(f'{k}={talloc.get(k)}' for k in differ)}")
        self.client.create({"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels, "annotations": {KWOK_ANNOTATION: "fake"}},
                            "spec": {"taints": reg["taints"], "providerID": PROVIDER_ID_PREFIX + str(inst["id"])}})
        self.client.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                           "status": {"allocatable": alloc, "capacity": capacity}}, subresource="status")
        return name




# --- the autoscaler as the chart renders it ----------------------------------------------------------------


@dataclass
class AutoscalerRelease:
    """The autoscaler's objects as the program installs them, and where they come from."""

    objects: list[dict]  # the chart's render (and, when rendered here, the program's extra RBAC)
    source: str  # for the report
    installed: bool  # True: part of the installed releases; False: the drill applies (and removes) them
    # The program's RBAC for the autoscaler beyond the chart's (components/autoscaler_rbac.py): as installed
    # (the releases' ClusterRoles bound to its ServiceAccount outside the chart), or as rendered here.
    extra: list[dict] = field(default_factory=list)

    def deployment(self) -> dict:
        found = [o for o in self.objects if o.get("kind") == "Deployment"]
        if len(found) != 1:
            raise ValueError(f"{self.source}: {len(found)} Deployment(s), expected the autoscaler's one")
        return found[0]

    def container(self) -> dict:
        return self.deployment()["spec"]["template"]["spec"]["containers"][0]

    def service_account(self) -> tuple[str, str]:
        dep = self.deployment()
        return (dep["metadata"].get("namespace") or "kube-system",
                dep["spec"]["template"]["spec"].get("serviceAccountName") or "default")

    def rbac(self) -> list[dict]:
        """What the drill applies to run the autoscaler with the chart's permissions: its ServiceAccount and roles."""
        return [o for o in self.objects if o.get("kind") in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                                                "Role", "RoleBinding")]


NAMESPACED_CHART_KINDS = ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service", "PodDisruptionBudget")


def _is_autoscaler_chart(rel: Any) -> bool:
    from gpu_platform.data import aws_versions

    return rel.source == "helm" and str(rel.chart or "").rstrip("/").rsplit("/", 1)[-1] == aws_versions.CLUSTER_AUTOSCALER_CHART


def autoscaler_release(ctx: Any, settings: dict, extra_rbac: bool = True) -> AutoscalerRelease:
    """The plan's cluster-autoscaler release; a stack whose plan has none (linode.nodeGroups.image unset: the
    program deploys only the pool definition) gets the chart rendered here with the values the program's
    component would pass, and the extra RBAC it would create (`extra_rbac=False`: the chart's alone)."""
    from gpu_platform.components import autoscaler_rbac
    from gpu_platform.components.linode import node_groups
    from gpu_platform.data import aws_versions
    from gpu_platform.preflight.fit.render import chart_info, find_chart, render_chart
    from gpu_platform.preflight.fit.run import default_chart_dirs

    for rel in ctx.releases:
        if _is_autoscaler_chart(rel) and rel.rendered:
            release = AutoscalerRelease(list(rel.objects), f"the plan's release {rel.name} (chart {rel.chart} {rel.version})", True)
            release.extra = installed_extra_rbac(ctx.releases, rel, *release.service_account())
            return release
    cfg = getattr(ctx, "cfg", None)
    grace = cfg.linode.scale_down_grace_minutes if cfg is not None and cfg.linode is not None else 15
    minor = settings["kubernetesMinor"]
    values = node_groups.autoscaler_release_values(settings["cluster"], minor, grace,
                                                   settings["joinDeadlineSeconds"] // 60, client_cert_pem="")
    chart = find_chart(aws_versions.CLUSTER_AUTOSCALER_CHART, aws_versions.CLUSTER_AUTOSCALER_CHART_VERSION, default_chart_dirs())
    if chart is None:
        raise FileNotFoundError(f"chart {aws_versions.CLUSTER_AUTOSCALER_CHART} {aws_versions.CLUSTER_AUTOSCALER_CHART_VERSION} "
                                f"is in none of {default_chart_dirs()}")
    objects, _ = render_chart(chart_info(chart, node_groups.AUTOSCALER_RELEASE), node_groups.AUTOSCALER_RELEASE, values,
                              node_groups.NAMESPACE, f"v{minor}.0", [])
    for o in objects:  # what render_plan's fill_namespaces does for a release
        if o.get("kind") in NAMESPACED_CHART_KINDS:
            o.setdefault("metadata", {}).setdefault("namespace", node_groups.NAMESPACE)
    extra = autoscaler_rbac.extra_rbac_objects(node_groups.NAMESPACE, node_groups.AUTOSCALER_SERVICE_ACCOUNT, minor) if extra_rbac else []
    what = (f"chart {aws_versions.CLUSTER_AUTOSCALER_CHART} {aws_versions.CLUSTER_AUTOSCALER_CHART_VERSION} rendered by the drill with "
            "node_groups.autoscaler_release_values (the plan has no autoscaler: linode.nodeGroups.image is unset)")
    if extra:
        what += f", plus the program's extra RBAC ({', '.join(o['kind'] + ' ' + o['metadata']['name'] for o in extra)})"
    elif extra_rbac:
        what += f", no extra RBAC for Kubernetes {minor}"
    else:
        what += ", WITHOUT the program's extra RBAC (the chart's ClusterRole alone)"
    return AutoscalerRelease(objects + extra, what, False, extra)


def installed_extra_rbac(releases: list[Any], chart: Any, namespace: str, service_account: str) -> list[dict]:
    """The ClusterRoleBindings of the installed releases other than the autoscaler's chart that bind its
    ServiceAccount, each after its ClusterRole: what the program grants beyond the chart."""
    subject = {"kind": "ServiceAccount", "name": service_account, "namespace": namespace}
    others = [o for rel in releases if rel is not chart and rel.rendered for o in rel.objects]
    roles = {o["metadata"]["name"]: o for o in others if o.get("kind") == "ClusterRole"}
    out: list[dict] = []
    for b in others:
        if b.get("kind") == "ClusterRoleBinding" and subject in (b.get("subjects") or []):
            role = roles.get((b.get("roleRef") or {}).get("name"))
            out += ([role] if role is not None else []) + [b]
    return out


def cloud_config(program_yaml: str, port: int, tls_dir: Path) -> tuple[str, list[str]]:
    """The program's --cloud-config for externalgrpc (node_groups.autoscaler_cloud_config) with the provider's
    local address and the client certificate files of this drill; the changes for the report."""
    doc = yaml.safe_load(program_yaml)
    changes = []
    for key, value in (("address", f"localhost:{port}"), ("key", str(tls_dir / "client.key")),
                       ("cert", str(tls_dir / "client.crt")), ("cacert", str(tls_dir / "ca.crt"))):
        if doc.get(key) != value:
            changes.append(f"cloud-config {key}: {doc.get(key)} -> {value}")
            doc[key] = value
    return yaml.safe_dump(doc, sort_keys=False), changes


def _split_flag(arg: str) -> tuple[str, Optional[str]]:
    name, eq, value = arg.lstrip("-").partition("=")
    return name, (value if eq else None)


def autoscaler_argv(container: dict, overrides: dict[str, str], binary: str) -> tuple[list[str], list[str]]:
    """argv from the chart container's command/args: the binary for `./cluster-autoscaler`, each flag of
    `overrides` set (replacing the chart's value or added); the changes as `flag: chart -> drill`."""
    words = [str(a) for a in (container.get("command") or []) + (container.get("args") or [])]
    if not words or not words[0].endswith("cluster-autoscaler"):
        raise ValueError(f"the autoscaler container runs {words[:1]}, not cluster-autoscaler")
    argv, seen, changes = [binary], set(), []
    for arg in words[1:]:
        name, value = _split_flag(arg)
        if name in overrides:
            seen.add(name)
            if value != overrides[name]:
                changes.append(f"--{name}: {value} -> {overrides[name]}")
            argv.append(f"--{name}={overrides[name]}")
        else:
            argv.append(arg)
    for name, value in overrides.items():
        if name not in seen:
            changes.append(f"--{name}: (default) -> {value}")
            argv.append(f"--{name}={value}")
    return argv, changes


class AutoscalerProcess:
    """The cluster-autoscaler binary with the chart's arguments, the ServiceAccount's token and the drill's
    overrides; killed and started again like a pod."""

    NAME = "cluster-autoscaler"

    def __init__(self, release: AutoscalerRelease, client: Client, server: str, ca_file: str, work: Path, tls_dir: Path,
                 provider_port: int, timing: Timing, procs: ProcessGroup, binary: str = AUTOSCALER,
                 config: Optional[tuple[str, list[str]]] = None, extra_env: Optional[dict[str, str]] = None):
        """`binary`: the lock's name of the build to run; `config`: the --cloud-config text and its changes for
        the report (default: the Linode provider's, from tls_dir and provider_port); `extra_env`: set over the
        chart container's environment (the AWS drill's credentials and endpoints)."""
        exe = binaries.find(binary)
        if exe is None:
            raise binaries.MissingBinaries([binary])
        self.release, self.client, self.procs = release, client, procs
        container = release.container()
        self.namespace, self.service_account = release.service_account()
        if config is None:
            from gpu_platform.components.linode import node_groups

            config = cloud_config(node_groups.autoscaler_cloud_config(), provider_port, tls_dir)
        text, self.changes = config[0], list(config[1])
        conf = pki.write(work / "cloud-config.yaml", text.encode())
        self.port = free_port()
        kc_path = work / "cluster-autoscaler.kubeconfig"
        overrides = {"cloud-config": str(conf), "kubeconfig": str(kc_path), "address": f"127.0.0.1:{self.port}",
                     **timing.flags()}
        self.argv, flag_changes = autoscaler_argv(container, overrides, str(exe))
        self.changes = flag_changes + self.changes
        self.kubeconfig = (kc_path, server, ca_file)
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)}
        for e in container.get("env") or []:
            path = ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
            if "value" in e:
                self.env[e["name"]] = str(e["value"])
            elif path:
                self.env[e["name"]] = {"metadata.namespace": self.namespace,
                                       "spec.serviceAccountName": self.service_account}.get(path, "")
        self.env.update(extra_env or {})
        self.proc = None
        self.starts = 0
        self.logs: list[Path] = []

    def start(self) -> None:
        """A fresh token of the chart's ServiceAccount (a new pod gets one), then the process."""
        kc_path, server, ca_file = self.kubeconfig
        token = self.client.token(self.namespace, self.service_account)
        pki.write(kc_path, kubeconfig(server, ca_file, token, f"system:serviceaccount:{self.namespace}:{self.service_account}").encode(),
                  private=True)
        self.starts += 1
        self.proc = self.procs.start(f"{self.NAME}-{self.starts}", self.argv, env=self.env)
        self.logs.append(self.proc.log)

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything (an evicted or OOM-killed pod)."""
        assert self.proc is not None
        try:
            os.killpg(self.proc.popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.popen.wait(10)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive

    def version(self) -> str:
        """What the running binary says it is (main.go logs `Cluster Autoscaler <version>` first)."""
        m = re.search(r"\] Cluster Autoscaler (\S+)", self.proc.log.read_text(errors="replace") if self.proc else "")
        return m[1] if m else "?"

    def text(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs if p.exists())

    def forbidden(self, log: Optional[Path] = None) -> list[str]:
        """The distinct RBAC refusals logged (verb and resource), e.g. `list resourceslices.resource.k8s.io`,
        by the process that wrote `log` (default: the current one)."""
        found = []
        log = log or (self.proc.log if self.proc is not None else None)
        text = log.read_text(errors="replace") if log is not None and log.exists() else ""
        for m in re.finditer(r'cannot (\w+) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"', text):
            what = f"{m[1]} {m[2]}{'.' + m[3] if m[3] else ''}"
            if what not in found:
                found.append(what)
        return found


    def informers_refused(self) -> list[str]:
        """The lists its informers were refused (client-go's reflector: `"Failed to watch" err="failed to list
        *v1.ResourceSlice: ... cannot list resource "resourceslices" in API group "resource.k8s.io"`), as
        `list resourceslices.resource.k8s.io`: an informer whose list is refused never syncs."""
        text = self.proc.log.read_text(errors="replace") if self.proc is not None and self.proc.log.exists() else ""
        found = []
        for line in text.splitlines():
            if "reflector.go" not in line or "Failed to watch" not in line:
                continue
            for m in re.finditer(r'cannot (list) resource \\?"([^"\\]+)\\?" in API group \\?"([^"\\]*)\\?"', line):
                what = f"{m[1]} {m[2]}{'.' + m[3] if m[3] else ''}"
                if what not in found:
                    found.append(what)
        return found


def rbac_grants(client: Client, namespace: str, service_account: str, what: str) -> bool:
    """Whether an RBAC object the API server holds grants ServiceAccount namespace/service_account `what`
    (`verb resource.group`, as AutoscalerProcess.forbidden writes it): a ClusterRoleBinding, or a RoleBinding
    in its namespace, naming it (or a group every ServiceAccount of the namespace is in) with a rule for the
    verb, the resource and the group. The objects are the truth the authorizer converges to (it reads them
    through informers); nothing changes them while the autoscaler waits, so a refusal none grants stands."""
    verb, _, res = what.partition(" ")
    resource, _, group = res.partition(".")
    user = f"system:serviceaccount:{namespace}:{service_account}"
    groups = {"system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"}

    def names_it(binding: dict) -> bool:
        for s in binding.get("subjects") or []:
            if (s.get("kind") == "ServiceAccount" and s.get("name") == service_account
                    and (s.get("namespace") or binding["metadata"].get("namespace")) == namespace):
                return True
            if (s.get("kind") == "User" and s.get("name") == user) or (s.get("kind") == "Group" and s.get("name") in groups):
                return True
        return False

    def allows(rule: dict) -> bool:
        return (any(g in (group, "*") for g in rule.get("apiGroups") or []) and any(r in (resource, "*") for r in rule.get("resources") or [])
                and any(v in (verb, "*") for v in rule.get("verbs") or []) and not rule.get("resourceNames"))

    rbac = "rbac.authorization.k8s.io/v1"
    bindings = client.list(rbac, "ClusterRoleBinding") + client.list(rbac, "RoleBinding", namespace)
    for b in bindings:
        if not names_it(b):
            continue
        ref = b.get("roleRef") or {}
        role = client.get(rbac, ref.get("kind"), ref.get("name"), None if ref.get("kind") == "ClusterRole" else namespace)
        if role is not None and any(allows(r) for r in role.get("rules") or []):
            return True
    return False


def _short(text: str, head: int = 300) -> str:
    return text if len(text) <= head else text[:head] + " …"


# --- what the autoscaler logged, per node group ---------------------------------------------------------

# klog's header: severity, MMDD, time, thread, file:line]
_KLOG = re.compile(r"^([IWEF])(\d{4}) (\d\d:\d\d:\d\d)\.\d+\s+\d+ [^\]]+\] (.*)$")
_EVENTS = (
    ("unschedulable", re.compile(r"^Pod (\S+) is unschedulable$")),
    ("plan", re.compile(r"^Final scale-up plan: (.*)$")),
    ("scale-up", re.compile(r"^Scale-up: setting group (\S+) size to (\d+)")),
    ("scale-up timed out", re.compile(r"^Scale-up timed out for node group (\S+) after (\S+)")),
    ("backoff", re.compile(r"^Disabling scale-up for node group (\S+) until (\S+ \S+)")),
    ("unregistered removed", re.compile(r"^Removing (\d+) unregistered nodes for node group (\S+)")),
    ("scale-down", re.compile(r'^Scale-down: removing empty node "?([^"\s]+)"?')),
    ("scale-down", re.compile(r"^Scale-down: removing node (\S+), utilization: (.*)$")),
    ("unremovable", re.compile(r"^Node (\S+) unremovable: (.*)$")),
    # eligibility.go: a node annotated cluster-autoscaler.kubernetes.io/scale-down-disabled=true (EKS's controller)
    ("unremovable", re.compile(r"^Skipping (\S+) from delete consideration - (the node is marked as no scale down)$")),
    ("not removable", re.compile(r"^Node (\S+) is not suitable for removal: (.*)$")),
)


@dataclass
class LoggedEvent:
    time: str
    group: str
    kind: str  # scale-up | scale-down | scale-up timed out | backoff | unregistered removed | unremovable | not removable
    text: str  # the autoscaler's own words

    def __str__(self) -> str:
        return f"{self.time} {self.kind}: {self.text}"


def logged_events(text: str, group_of_node: Callable[[str], Optional[str]]) -> list[LoggedEvent]:
    """The autoscaler's scale-ups and scale-downs and the reasons it gave, from its log (klog, --v=4), each
    under its node group. A scale-up carries the pods it logged unschedulable before it and the plan; a
    node's repeated 'unremovable' reason is kept once per reason."""
    out: list[LoggedEvent] = []
    pods: list[str] = []
    plan = ""
    scaled = False  # a scale-up was logged since the pods and plan: the next pod line starts a new loop's
    seen_unremovable: set[tuple[str, str]] = set()
    for line in text.splitlines():
        m = _KLOG.match(line)
        if not m:
            continue
        clock, msg = m[3], m[4]
        for kind, rx in _EVENTS:
            e = rx.match(msg)
            if not e:
                continue
            if kind == "unschedulable":
                if scaled:
                    pods, plan, scaled = [], "", False
                if e[1] not in pods:
                    pods.append(e[1])
            elif kind == "plan":
                plan = e[1]
            elif kind == "scale-up":
                # A plan of several groups (--balance-similar-node-groups) logs one line per group: each is
                # for the same pods and plan.
                why = f"pods {', '.join(pods)} unschedulable" if pods else "no pod named"
                out.append(LoggedEvent(clock, e[1], kind, f"{msg} ({why}; plan {plan or '?'})"))
                scaled = True
            elif kind in ("scale-up timed out", "backoff"):
                out.append(LoggedEvent(clock, e[1], kind, msg))
            elif kind == "unregistered removed":
                out.append(LoggedEvent(clock, e[2], kind, msg))
            else:
                group = group_of_node(e[1])
                if group is None:
                    break
                if kind in ("unremovable", "not removable"):
                    key = (e[1], re.sub(r"[\d.]+%", "N%", e[2]))
                    if key in seen_unremovable:
                        break
                    seen_unremovable.add(key)
                out.append(LoggedEvent(clock, group, kind, msg))
            break
    return out


# --- a read-only look at the provider: its template node, as the autoscaler receives it ---------------------


class ProviderProbe:
    """A gRPC client with the autoscaler's certificate that only reads (NodeGroups, the template node): the
    drill checks the template against the boot document and the node model. It never scales anything."""

    def __init__(self, address: str, tls_dir: Path, stubs: tuple):
        import grpc

        self.grpc = grpc
        self.pb2, pb2_grpc, self.core = stubs
        creds = grpc.ssl_channel_credentials((tls_dir / "ca.crt").read_bytes(), (tls_dir / "client.key").read_bytes(),
                                             (tls_dir / "client.crt").read_bytes())
        self.channel = grpc.secure_channel(address, creds)
        self.stub = pb2_grpc.CloudProviderStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def ready(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.stub.NodeGroups(self.pb2.NodeGroupsRequest(), timeout=2)
                return True
            except self.grpc.RpcError:
                time.sleep(0.5)
        return False

    def template(self, group: str) -> dict:
        raw = self.stub.NodeGroupTemplateNodeInfo(self.pb2.NodeGroupTemplateNodeInfoRequest(id=group), timeout=30).nodeBytes
        node = self.core.Node()
        node.ParseFromString(raw)  # v1.Node#Unmarshal, as externalgrpc_node_group.go TemplateNodeInfo does
        return node_from_template(node)


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




def _node_resources(pool: dict) -> tuple[dict, dict]:
    """(capacity, allocatable) the kubelet of a node of this pool reports: CPU, memory, pods and GPUs of the
    capacity model (pools.json), and the root filesystem of the plan's disk as the (fake) Linode API gives it,
    less the swap disk, with the kubelet's Node Allocatable reservations (data/linode_kubelet.py)."""
    from gpu_platform.components.capacity import linode_ephemeral_storage_reservation
    from gpu_platform.rehearsal.linode_fake_api import plan_type

    capacity, allocatable = dict(pool["capacity"]), dict(pool["allocatable"])
    plan = plan_type(pool["instanceType"])
    if plan is not None:
        r = linode_ephemeral_storage_reservation()
        disk = (int(plan["disk"]) - r["swapMib"]) * 1024 * 1024
        capacity["ephemeral-storage"] = str(disk)
        allocatable["ephemeral-storage"] = str(disk - r["reservedBytes"] - int(disk * r["evictionPercent"] / 100))
    return capacity, allocatable



class Drill:
    """The world (fake Linode API, provider, instance bridge) and the real autoscaler, with the phases each
    scenario runs on it."""

    def __init__(self, ctx: Any, sc: Any, planned: dict, work: Path, log_dir: Path, timing: Timing,
                 extra_rbac: bool = True):
        self.ctx, self.sc, self.client, self.timing = ctx, sc, ctx.client, timing
        self.work, self.log_dir = work, log_dir  # work: keys and tokens (deleted after); log_dir: kept
        # pools.json as planned (the autoscaler's chart values come from it) and as the drill runs the provider
        self.planned = planned
        settings = self.settings = {**planned, "joinDeadlineSeconds": timing.join_deadline_seconds,
                                    "joinBackstopSeconds": timing.join_backstop_seconds}
        self.extra_rbac = extra_rbac
        self.stack_tag = f"node-group-stack:{settings['cluster']}"
        self.pools = {p["name"]: p for p in settings["pools"]}
        self._templates: dict[str, dict] = {}
        self._applied: list[dict] = []
        self.release: Optional[AutoscalerRelease] = None
        self.autoscaler: Optional[AutoscalerProcess] = None
        self.lease_restarts = 0
        self.bridge: Optional[InstanceBridge] = None
        self.probe: Optional[ProviderProbe] = None
        self._stop = threading.Event()
        self._world: Optional[threading.Thread] = None
        self.world_errors: list[str] = []
        self.chart_only_log: Optional[Path] = None  # the run with the chart's RBAC alone (refusals expected)

    # --- the world ----------------------------------------------------------------------------------

    def _run_world(self) -> None:
        while not self._stop.is_set():
            try:
                self.bridge.step()
            except (ApiError, UnknownKind, OSError) as exc:  # reported; the next step tries again
                self.world_errors.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.5)

    def until(self, what: str, done: Callable[[], bool], timeout: Optional[float] = None,
              never: Optional[Callable[[], Optional[str]]] = None) -> bool:
        """Waits (the world and the autoscaler run on their own) until `done`; False and a failure on timeout,
        or as soon as `never()` returns the autoscaler's own word that it never will."""
        limit = timeout or max(self.ctx.timeout, 90)
        started = time.monotonic()
        said = None
        while time.monotonic() < started + limit:
            if done():
                return True
            if self.autoscaler is not None and self.autoscaler.proc is not None and not self.autoscaler.alive:
                if self.restarted_after_lost_lease():
                    continue
                self.sc.fail(f"{what}: cluster-autoscaler exited ({self.autoscaler.proc.tail(5)})")
                return False
            said = never() if never is not None else None
            if said:
                break
            time.sleep(0.5)
        self.sc.fail(f"{what}: not within {time.monotonic() - started:.0f}s"
                     + (f", and never: {said}" if said else "")
                     + f" (the autoscaler's last words: {self._last_words()}; logs {self.log_dir})")
        return False

    def never_scales_for(self, ns: str, name: str, pool: str, loops: int = 2) -> Callable[[], Optional[str]]:
        """For Drill.until: the autoscaler's own word that no scale-up of `pool` can take TrainJob ns/name's pod,
        said in `loops` of its loops: its simulation of the pod on the pool's template node failed a predicate
        (cluster-autoscaler 1.35.2 core/scaleup/orchestrator/orchestrator.go:629 logs "Pod %s/%s can't be
        scheduled on %s, predicate checking error: %v", then "No expansion options", line 170). The template node is the
        provider's (NodeGroupTemplateNodeInfo, from pools.json) and does not change while the drill runs, nor
        does the pod: the verdict stands."""
        said = re.compile(rf"\] Pod {re.escape(ns)}/{re.escape(name)}-\S+ can't be scheduled on {re.escape(pool)}, "
                          r"predicate checking error: (.*)$", re.M)

        def check() -> Optional[str]:
            if self.autoscaler is None or self.autoscaler.proc is None or not self.autoscaler.proc.log.exists():
                return None
            found = said.findall(self.autoscaler.proc.log.read_text(errors="replace"))
            if len(found) < loops:
                return None
            return f"its simulation of the pod on {pool}'s template node fails, {len(found)} loops running: {_short(found[-1])}"
        return check

    def _last_words(self) -> str:
        """The current autoscaler's last warnings or errors, and why it last refused to scale a group up."""
        if self.autoscaler is None or self.autoscaler.proc is None:
            return "not started"
        lines = self.autoscaler.proc.log.read_text(errors="replace").splitlines() if self.autoscaler.proc.log.exists() else []
        said = [ln for ln in lines if ln[:1] in ("E", "W")][-2:]
        said += [ln for ln in lines if "predicate checking error" in ln][-1:]
        return " | ".join(ln.split("] ", 1)[-1][:300] for ln in said) or "no warning or error"

    def pool_nodes(self, pool: str) -> list[dict]:
        return [n for n in self.client.list("v1", "Node") if (n["metadata"].get("labels") or {}).get(GROUP_LABEL) == pool
                and ((n.get("spec") or {}).get("providerID") or "").startswith(PROVIDER_ID_PREFIX)]

    def pool_instances(self, pool: str) -> list[dict]:
        return [i for i in self.fake.instances_tagged(self.stack_tag) if f"node-group:{pool}" in i["tags"]]

    def template_of(self, pool: str) -> dict:
        if pool not in self._templates:
            self._templates[pool] = self.probe.template(pool)
        return self._templates[pool]

    def pool_of(self, inst: dict) -> Optional[str]:
        return next((p for p in self.pools if f"node-group:{p}" in inst["tags"]), None)

    def group_of_node(self, name: str) -> Optional[str]:
        m = re.match(rf"^{re.escape(self.settings['cluster'])}-(.+)-\d+$", name)
        return m[1] if m and m[1] in self.pools else None

    # --- jobs -------------------------------------------------------------------------------------

    def submit(self, job: dict, name: str, extra_requests: Optional[dict] = None,
               gpus: Optional[int] = None) -> Optional[tuple[str, str]]:
        """The example TrainJob under another name; `extra_requests` added to its requests, `gpus` per node."""
        obj = copy.deepcopy(job)
        ns = job["metadata"].get("namespace") or "training"
        obj["metadata"] = {"name": name, "namespace": ns, "labels": dict(job["metadata"].get("labels") or {})}
        res = obj["spec"]["trainer"].setdefault("resourcesPerNode", {})
        if extra_requests:
            res.setdefault("requests", {}).update(extra_requests)
        if gpus is not None:
            for part in ("requests", "limits"):
                res.setdefault(part, {})[GPU_RESOURCE] = str(gpus)
        try:
            self.client.create(obj)
        except (ApiError, UnknownKind) as exc:
            self.sc.fail(f"TrainJob {ns}/{name} refused: {exc}")
            return None
        return ns, name

    def pods_of(self, ns: str, name: str) -> list[dict]:
        return self.client.list("v1", "Pod", ns, f"jobset.sigs.k8s.io/jobset-name={name}")

    def bound_in_pool(self, ns: str, name: str, pool: str) -> Callable[[], bool]:
        def check() -> bool:
            pods = self.pods_of(ns, name)
            names = {n["metadata"]["name"] for n in self.pool_nodes(pool)}
            return (bool(pods) and all(p["spec"].get("nodeName") in names and (p.get("status") or {}).get("phase") == "Running"
                                       for p in pods) and _admitted(_workload(self.client, ns, name)))
        return check

    def end(self, ns: str, name: str) -> bool:
        """The job ends: its TrainJob is deleted (KWOK's pods run until deleted), its quota freed."""
        self.client.delete(TRAINER, "TrainJob", name, ns)
        return self.until(f"TrainJob {ns}/{name} and its pods gone", lambda: _workload(self.client, ns, name) is None
                          and not self.pods_of(ns, name), timeout=120)

    # --- the autoscaler -----------------------------------------------------------------------------

    def status_stamp(self) -> Optional[str]:
        """The time of the autoscaler's status ConfigMap (written at the end of every loop); None while it says
        `Initializing` (what the autoscaler writes when it starts, before its informers have synced)."""
        cm = self.client.get("v1", "ConfigMap", STATUS_CONFIGMAP, self.autoscaler.namespace)
        try:
            status = yaml.safe_load(((cm or {}).get("data") or {}).get("status") or "") or {}
        except yaml.YAMLError:
            return None
        if not isinstance(status, dict) or status.get("autoscalerStatus") in (None, "Initializing"):
            return None
        return str(status.get("time"))

    def loops(self, n: int, timeout: float = 90, stop: Optional[Callable[[], bool]] = None) -> bool:
        """Waits until the autoscaler has finished `n` more loops (its status ConfigMap rewritten n times); False
        at `timeout`, or as soon as `stop()` says it never will."""
        seen, stamps = self.status_stamp(), 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and stamps < n:
            if (not self.autoscaler.alive and not self.restarted_after_lost_lease()) or (stop is not None and stop()):
                return False
            now = self.status_stamp()
            if now is not None and now != seen:
                seen, stamps = now, stamps + 1
            time.sleep(0.3)
        return stamps >= n

    def restarted_after_lost_lease(self) -> bool:
        """True if the autoscaler had exited because it lost its leader lease (LOST_LEASE) and is started again, as
        the kubelet restarts its container; at most LOST_LEASE_RESTARTS times a drill, each one in the report."""
        a = self.autoscaler
        if a is None or a.proc is None or a.alive or self.lease_restarts >= LOST_LEASE_RESTARTS:
            return False
        if LOST_LEASE not in a.proc.tail(5):
            return False
        self.lease_restarts += 1
        self.sc.details.append(f"cluster-autoscaler exited on a lost leader lease (\"{LOST_LEASE}\": it could not renew it "
                               f"while the API server was slow) and was started again, as the kubelet restarts its "
                               f"container ({self.lease_restarts} of at most {LOST_LEASE_RESTARTS} a drill)")
        a.start()
        return True

    def never_syncs(self) -> list[str]:
        """The lists the autoscaler's informers were refused that no RBAC object grants its ServiceAccount
        (rbac_grants): while it has not run a loop, each is an informer that never syncs, and cluster-autoscaler
        runs no loop before every informer has synced (main.go buildAutoscaler; aws_versions.CLUSTER_AUTOSCALER_DRA_RULES
        says where it was read)."""
        if self.status_stamp() is not None:
            return []
        a = self.autoscaler
        return [r for r in a.informers_refused() if not rbac_grants(self.client, a.namespace, a.service_account, r)]

    def start_autoscaler(self, what: str) -> bool:
        """Starts the autoscaler (again) and waits until it has synced its informers and run a loop, or until
        an informer was refused what no RBAC rule grants (never_syncs); at most 120 s."""
        started = time.monotonic()
        self.autoscaler.start()
        first: list[float] = []

        def refused_for_good() -> bool:
            # The verdict standing 2 s: every informer's first list has been refused by then (they start
            # together), so the report names them all, as it did when it waited 120 s.
            if not self.never_syncs():
                first.clear()
                return False
            first[:] = first or [time.monotonic()]
            return time.monotonic() - first[0] >= 2.0

        if self.loops(2, timeout=120, stop=refused_for_good):
            self.sc.details.append(f"{what}: cluster-autoscaler {self.autoscaler.version()} "
                                   f"(as {self.autoscaler.namespace}/{self.autoscaler.service_account}) synced its informers "
                                   f"and ran its loop {time.monotonic() - started:.0f}s after it started")
            return True
        refused = self.autoscaler.forbidden()
        never = self.never_syncs() if self.autoscaler.alive else []
        self.sc.fail(f"{what}: cluster-autoscaler ran no loop within {time.monotonic() - started:.0f}s" + (
            f": its informers never synced, the API server refused its ServiceAccount {', '.join(refused)}"
            + (f" (no RBAC rule grants {', '.join(never)}: it never will)" if never else "")
            if refused else f" ({self._last_words()})"))
        return False

    def program_rbac(self) -> list[dict]:
        """The program's extra RBAC for the autoscaler's ServiceAccount (components/autoscaler_rbac.py) as the
        releases carry it: a stack whose program grants none has none to take away."""
        return list(self.release.extra) if self.release is not None else []

    def chart_rbac_alone(self, wait: float = 30.0) -> None:
        """The autoscaler with the chart's RBAC alone: the program's extra rules taken away (and put back
        after): it must not sync while the API server refuses it; what it was refused is the report's."""
        extra = self.program_rbac()
        if not extra:
            self.sc.details.append(f"chart's RBAC alone: the program adds no rule for Kubernetes {self.planned['kubernetesMinor']}")
            return
        present = [o for o in extra if self.client.get(o["apiVersion"], o["kind"], o["metadata"]["name"]) is not None]
        for o in present:
            self.client.delete(o["apiVersion"], o["kind"], o["metadata"]["name"])
        try:
            self.autoscaler.start()
            started = time.monotonic()
            # Every resource of the program's rules refused to its informers, with no RBAC rule granting it
            # (never_syncs): it waits for ever (at most `wait` s).
            while (time.monotonic() - started < wait and self.status_stamp() is None
                   and not len({r.split(" ", 1)[1].split(".", 1)[0] for r in self.never_syncs()}) >= len(self._dra_resources(extra))):
                time.sleep(0.5)
            synced = self.status_stamp() is not None
            refused = self.autoscaler.forbidden()
            self.chart_only_log = self.autoscaler.proc.log
            self.autoscaler.kill()
        finally:
            for o in extra:  # as installed (or as the drill applies them)
                self.client.apply(o)
            self._forget_leader()
        waited = time.monotonic() - started
        if synced:
            self.sc.details.append("chart's RBAC alone: the autoscaler synced and ran its loop: the program's extra rules "
                                   f"({', '.join(o['metadata']['name'] for o in extra)}) are not needed by this image")
        elif refused:
            self.sc.details.append(f"chart's RBAC alone: the autoscaler never synced its informers in {waited:.0f}s; the API "
                                   f"server refused: {', '.join(refused)} (what the program's ClusterRole "
                                   f"{extra[0]['metadata']['name']} grants)")
        else:
            self.sc.fail(f"chart's RBAC alone: the autoscaler neither synced nor was refused anything in {wait:.0f}s "
                         f"({self._last_words()})")

    @staticmethod
    def _dra_resources(extra: list[dict]) -> set[str]:
        return {r for o in extra for rule in o.get("rules") or [] for r in rule["resources"]}

    def _forget_leader(self) -> None:
        """The killed autoscaler's leader lease removed (the next one would wait out its 15 s lease duration)."""
        try:
            self.client.delete("coordination.k8s.io/v1", "Lease", LEASE, self.autoscaler.namespace)
        except (ApiError, UnknownKind):
            pass

    def _apply_rbac(self, release: AutoscalerRelease) -> None:
        for obj in release.rbac():
            self.client.apply(obj)
            self._applied.append(obj)

    def _remove_applied(self) -> None:
        for obj in reversed(self._applied):
            meta = obj["metadata"]
            try:
                self.client.delete(obj["apiVersion"], obj["kind"], meta["name"], meta.get("namespace"))
            except (ApiError, UnknownKind):
                pass
        self._applied.clear()

    def provider_log(self) -> str:
        logs = [p for p in self.log_dir.glob(f"{ProviderProcess.NAME}-*.log")]
        return "\n".join(p.read_text(errors="replace") for p in sorted(logs))

    def events(self) -> list[LoggedEvent]:
        return logged_events(self.autoscaler.text(), self.group_of_node) if self.autoscaler else []

    def autoscaler_said(self, pattern: str) -> list[str]:
        return [m[0] for m in re.finditer(pattern, self.autoscaler.text() if self.autoscaler else "")]

    def no_scale_up(self, ns: str, pod_prefix: str) -> Optional[str]:
        """The autoscaler's latest word that a pod of `pod_prefix` did not trigger a scale-up (its NotTriggerScaleUp
        Event, processors/status/eventing_scale_up_processor.go: "pod didn't trigger scale-up: <reasons per
        group>"), else None: what a scale-up that cannot come is concluded from, as soon as the autoscaler says it.
        Only about the pods there now (by UID): an earlier pod of the same name (a drill before, on the same
        cluster) left its Events behind for the API server's event TTL (an hour)."""
        pods = {p["metadata"]["uid"] for p in self.client.list("v1", "Pod", ns) if p["metadata"]["name"].startswith(pod_prefix)}
        said = [e for e in self.client.list("v1", "Event", ns) if e.get("reason") == "NotTriggerScaleUp"
                and (e.get("involvedObject") or {}).get("uid") in pods]
        said.sort(key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
        return str(said[-1].get("message")) if said else None

    # --- what a phase shared by both clouds asks of the cloud's world (AwsDrill answers for moto) -----

    def pool_of_groups(self, pool: str) -> list[str]:
        """The autoscaler's node groups of `pool`: on Linode the pool is one node group."""
        return [pool]

    # Where the drill's instances live, as a new node's failures name it (AwsDrill: moto).
    INSTANCES_IN = "the fake Linode API"

    def shown_instances(self, instances: list[dict]) -> list:
        return [i["label"] for i in instances]

    def shown_nodes(self, nodes: list[dict]) -> list:
        return [n["metadata"]["name"] for n in nodes]

    def scaled_groups(self, pool: str) -> str:
        """What the autoscaler scales for `pool`, as a failure says it (on Linode the pool is its one group)."""
        return pool

    def new_node_problems(self, inst: dict, node: dict, ups: list[LoggedEvent]) -> list[str]:
        """Where the one new node is not its instance's: the node is named by the instance's label, with its
        providerID."""
        want = f"{PROVIDER_ID_PREFIX}{inst['id']}"
        if node["spec"].get("providerID") != want or node["metadata"]["name"] != inst["label"]:
            return [f"node {node['metadata']['name']} has providerID {node['spec'].get('providerID')}; its instance is "
                    f"{inst['label']} ({want})"]
        return []

    def one_new_node(self, label: str, pool: str, ups_before: int, started: float, ran: str) -> Optional[tuple[dict, dict]]:
        """After a scale-up from zero for one pod: one scale-up, one instance, one node that is the instance's
        (new_node_problems; the report's line `label: ...`). Returns (instance, node) or None with the failure."""
        sc = self.sc
        instances, nodes = self.pool_instances(pool), self.pool_nodes(pool)
        ups = _scale_ups(self, pool)[ups_before:]
        sc.details.append(f"{label}: {len(ups)} scale-up(s) of {pool} ({ups[0].text if ups else 'none logged'}) -> instance(s) "
                          f"{self.shown_instances(instances)} -> node(s) {self.shown_nodes(nodes)}; {ran} after "
                          f"{time.monotonic() - started:.0f}s")
        if len(ups) != 1 or len(instances) != 1 or len(nodes) != 1:
            sc.fail(f"{label}: one pending pod, one node: the autoscaler scaled {self.scaled_groups(pool)} up {len(ups)} "
                    f"time(s), {self.INSTANCES_IN} holds {len(instances)} instance(s), {len(nodes)} node(s) registered")
            return None
        [inst], [node] = instances, nodes
        for problem in self.new_node_problems(inst, node, ups):
            sc.fail(f"{label}: {problem}")
        return inst, node

    def instance_deleted(self, inst: dict) -> tuple[str, Optional[str]]:
        """(what the cloud shows of the scaled-down instance, the failure if it was not deleted): the node-group
        provider's DELETE of it in the fake Linode API, and the instance gone from its listing."""
        path = f"/v4/linode/instances/{inst['id']}"
        deletes = [c for c in self.fake.calls("DELETE") if c[1] == path]
        left = [i for i in self.fake.instances_tagged(self.stack_tag) if i["id"] == inst["id"]]
        said = (f"the fake Linode API: {len(deletes)} DELETE {path} ({inst['label']}), "
                + ("the instance is still listed" if left else "no instance of its pool left"))
        if not deletes or left:
            return said, f"the instance {inst['label']} of the idle node was not deleted in the Linode API ({said})"
        return said, None

    def check_refusals(self) -> None:
        """With the program's RBAC, the API server refused the autoscaler nothing, in any of its runs."""
        for log in self.autoscaler.logs:
            refused = self.autoscaler.forbidden(log) if log != self.chart_only_log else []
            if refused:
                self.sc.fail(f"RBAC: the API server refused cluster-autoscaler ({log.name}) {', '.join(refused)}")

    def report_events(self) -> None:
        """Per node group, the scale-ups and scale-downs and the reasons the autoscaler logged."""
        by_group: dict[str, list[LoggedEvent]] = {}
        for e in self.events():
            by_group.setdefault(e.group, []).append(e)
        for group, events in by_group.items():
            ups = sum(e.kind == "scale-up" for e in events)
            downs = sum(e.kind == "scale-down" for e in events)
            self.sc.details.append(f"node group {group}: {ups} scale-up(s), {downs} scale-down(s), as cluster-autoscaler logged them:")
            self.sc.details.extend(f"  {group}: {e}" for e in events)

    # --- set-up and tear-down -------------------------------------------------------------------------

    def example_job(self, autoscaler: str) -> Optional[dict]:
        """The example TrainJob that makes the GPU demand, or None with the scenario NOT REHEARSED and why:
        no example, a controller the drill needs not running, or the `autoscaler` binary not built."""
        sc = self.sc
        job = _example(self.ctx)
        if job is None:
            sc.status = "NOT REHEARSED"
            sc.problems.append("no example TrainJob to make the GPU demand")
            return None
        for need in ("kueue-manager", "trainer-manager", "jobset-manager"):
            ctl = self.ctx.controllers.get(need)
            if ctl is None or ctl.status != "running":
                sc.status = "NOT REHEARSED"
                sc.problems.append(f"{need} is not running")
        if binaries.find(autoscaler) is None:
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"{autoscaler} is not built (`{binaries.BUILD_COMMAND}`)")
        else:
            gap = autoscaler_version_gap((binaries.versions().get(autoscaler) or {}).get("version"),
                                         self.planned.get("kubernetesMinor", ""))
            if gap:
                sc.status = "NOT REHEARSED"
                sc.problems.append(gap)
        return job

    def whole_grace(self) -> float:
        """An idle node's grace on the drill's clock: the autoscaler's unneeded time (AwsDrill adds the scale-in
        protection controller's part when it runs)."""
        return float(self.timing.grace_seconds)

    def busy_node_kept(self, ref: tuple[str, str], pool: str, nodes: list[str], shown: str,
                       reason_of: Callable[[Any], bool]) -> None:
        """Past the grace, the pool's `nodes` running TrainJob `ref` are still there and its pods not evicted;
        the autoscaler's last "unremovable" reason for them (the events `reason_of` picks) goes in the report."""
        sc, t = self.sc, self.timing
        grace = self.whole_grace()
        time.sleep(max(t.busy_watch_seconds, grace + 3 * t.scan_interval_seconds))
        still = [n["metadata"]["name"] for n in self.pool_nodes(pool)]
        pods = self.pods_of(*ref)
        why = [e.text for e in self.events() if e.kind in ("unremovable", "not removable") and reason_of(e)]
        if still != nodes or not pods or any(p["metadata"].get("deletionTimestamp") for p in pods):
            sc.fail(f"busy node: {shown} running TrainJob {ref[1]} was scaled down or its pod evicted within "
                    f"{t.busy_watch_seconds}s (nodes now {still}; the autoscaler logged {why[-1:] or 'no reason'})")
        else:
            sc.details.append(f"busy node: {shown} kept while TrainJob {ref[1]} runs "
                              f"({max(t.busy_watch_seconds, grace):.0f}s, grace {grace:g}s); "
                              f"the autoscaler's reason: {why[-1] if why else 'none logged'}")

    def run(self, phases: Callable[["Drill", dict, str], None]) -> None:
        from gpu_platform.controllers.linode_node_groups import stubs
        from gpu_platform.controllers.linode_node_groups.__main__ import load_stubs

        sc, client, t = self.sc, self.client, self.timing
        job = self.example_job(AUTOSCALER)
        if job is None or sc.status != "PASS":
            return
        try:
            stubs_dir = stubs.generate(self.work / "stubs")
        except ImportError as exc:
            sc.status = "NOT REHEARSED"
            sc.problems.append(f"the gRPC stubs cannot be generated: {exc} (grpcio-tools, requirements-dev.txt)")
            return
        generated = load_stubs(str(stubs_dir))
        sys.path.remove(str(stubs_dir))  # imported; the folder goes with the drill
        try:
            release = self.release = autoscaler_release(self.ctx, self.planned, self.extra_rbac)
        except (OSError, ValueError) as exc:
            sc.fail(f"the autoscaler's release: {exc}")
            return
        pool = next(iter(self.pools))

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
        try:
            self.provider = ProviderProcess(self.work, self.settings, stubs_dir, tls_dir, sa_dir, self.fake.base_url, client, procs)
            self.provider.start()
            self.probe = ProviderProbe(f"localhost:{self.provider.port}", tls_dir, generated)
            if not self.probe.ready():
                sc.fail(f"the node-group provider did not answer within 60s: {self.provider.proc.tail() if self.provider.proc else ''}")
                return
            if not release.installed:
                self._apply_rbac(release)
            self.autoscaler = AutoscalerProcess(release, client, self.ctx_server(), self.ctx_ca_file(), self.work, tls_dir,
                                                self.provider.port, t, procs)
            self.bridge = InstanceBridge(client, self.fake, self.stack_tag, self.template_of, self.pool_of, t,
                                         node_resources=lambda p: _node_resources(self.pools[p]))
            sc.details.append(f"autoscaler: {release.source}; run with {len(self.autoscaler.argv) - 1} arguments, changed: "
                              + "; ".join(self.autoscaler.changes))
            sc.details.append(f"pool {pool}: {self.pools[pool]['instanceType']} x {self.pools[pool]['minNodes']}-"
                              f"{self.pools[pool]['maxNodes']} (pools.json as the program renders it); drill clock: scale-down "
                              f"grace {t.grace_seconds}s, join deadline {t.join_deadline_seconds}s (the provider's backstop "
                              f"{t.join_backstop_seconds}s later), boot {t.boot_seconds:.0f}s, "
                              f"scan every {t.scan_interval_seconds}s")
            # The pool at minNodes: the rehearsal made its nodes at maxNodes (node model); they are not instances.
            for n in client.list("v1", "Node", selector=f"{GROUP_LABEL}={pool}"):
                client.delete("v1", "Node", n["metadata"]["name"])
            self._world = threading.Thread(target=self._run_world, name="autoscale-world", daemon=True)
            self._world.start()
            with self.kueue_at_stack_timing():
                phases(self, job, pool)
        finally:
            self._stop.set()
            if self._world is not None:
                self._world.join(30)
            try:
                if self.autoscaler is not None:
                    self.check_refusals()
                    self.report_events()
            finally:
                if self.probe is not None:
                    self.probe.close()
                procs.stop_all()
                self._cleanup(pool)
                self.fake.close()
            sc.problems.extend(self.bridge.problems if self.bridge is not None else [])
            sc.problems.extend(f"the instance bridge: {e}" for e in self.world_errors[:3])
            if sc.problems and sc.status == "PASS":
                sc.status = "FAIL"
            sc.details.append(f"autoscaler and provider logs: {self.log_dir}")

    @contextmanager
    def kueue_at_stack_timing(self):
        """Kueue runs with the stack's own waitForPodsReady for the drill. The rehearsal shortens its timeout to
        30 s (the never-ready drill), but cluster-autoscaler waits 30 s after a GPU pod appears before it scales
        up for it (core/static_autoscaler.go unschedulablePodWithGpuTimeBuffer, not a flag): at 30 s Kueue would
        evict every job a GPU pool must be scaled up for, and its requeued pods would start that wait again."""
        kueue = self.ctx.controllers.get("kueue-manager")
        restart = getattr(self.ctx, "restart", None)
        timeout = ((getattr(kueue, "config", None) or {}).get("waitForPodsReady") or {}).get("timeout")
        if kueue is None or restart is None or timeout is None or kueue.status != "running":
            yield
            return
        kueue.stack_timing = True
        problems = restart(kueue)
        try:
            if problems:
                self.sc.fail(f"Kueue could not be restarted with the stack's waitForPodsReady: {'; '.join(problems)}")
            else:
                self.sc.details.append(f"Kueue runs with the stack's waitForPodsReady.timeout {timeout} for the drill (the "
                                       "rehearsal's 30 s would evict a job before the autoscaler's 30 s wait for a new "
                                       "GPU pod is over); put back after it")
            yield
        finally:
            kueue.stack_timing = False
            for p in restart(kueue):
                self.sc.fail(f"Kueue could not be put back to the rehearsal's timing: {p}")

    def ctx_server(self) -> str:
        return f"https://{self.client.host}:{self.client.port}"

    def ctx_ca_file(self) -> str:
        path = self.work / "cluster-ca.crt"
        pki.write(path, _cluster_ca_pem(self.client))
        return str(path)

    def _cleanup(self, pool: str) -> None:
        """What the drill made goes: nodes of instances, the autoscaler's status and lease, its RBAC if the drill
        applied it, the TrainJobs it submitted."""
        for n in self.pool_nodes(pool):
            self.client.delete("v1", "Node", n["metadata"]["name"])
        ns = self.autoscaler.namespace if self.autoscaler is not None else "kube-system"
        for api, kind, name in (("v1", "ConfigMap", STATUS_CONFIGMAP), ("coordination.k8s.io/v1", "Lease", LEASE)):
            try:
                self.client.delete(api, kind, name, ns)
            except (ApiError, UnknownKind):
                pass
        try:
            for tj in self.client.list(TRAINER, "TrainJob", "training"):
                if tj["metadata"]["name"].startswith("rehearsal-autoscale-"):
                    self.client.delete(TRAINER, "TrainJob", tj["metadata"]["name"], "training")
        except (ApiError, UnknownKind):
            pass
        self._remove_applied()


# --- the phases ------------------------------------------------------------------------------------------


def _check_template(d: Drill, pool: str) -> None:
    tmpl = d.template_of(pool)
    group = next((g for g in d.ctx.model.node_groups if g.name == pool), None)
    if group is not None and group.allocatable.gpus == int(d.pools[pool]["gpusPerNode"]):
        for p in model_disagreements(tmpl, group):
            d.sc.fail(f"pool {pool}: {p}")
    alloc = tmpl["status"]["allocatable"]
    d.sc.details.append(f"template node: {alloc.get(GPU_RESOURCE)} {GPU_RESOURCE}, ephemeral-storage "
                        f"{alloc.get('ephemeral-storage', 'NONE')}, taints "
                        + ", ".join(f"{x['key']}={x.get('value', '')}:{x['effect']}" for x in tmpl["spec"]["taints"]))


# --- phases both clouds run (the EKS drill's too: autoscale_aws.py) ---------------------------------------

NOTEBOOK_POD = "jupyter-rehearsal-autoscale"


def _pool_of_pods(d: Drill, pods: list[dict]) -> Optional[str]:
    """The one pool whose instance-backed nodes run every pod of `pods`, each Running; else None."""
    if not pods:
        return None
    pools = set()
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or (p.get("status") or {}).get("phase") != "Running":
            return None
        pool = next((pl for pl in d.pools if node in {n["metadata"]["name"] for n in d.pool_nodes(pl)}), None)
        if pool is None:
            return None
        pools.add(pool)
    return pools.pop() if len(pools) == 1 else None


def _pod_workload(client: Any, ns: str, pod: str) -> Optional[dict]:
    """Kueue's Workload of a plain pod (the pod integration: owned by the Pod)."""
    for w in client.list(KUEUE, "Workload", ns):
        if any(o.get("kind") == "Pod" and o.get("name") == pod for o in w["metadata"].get("ownerReferences") or []):
            return w
    return None


def _scale_from_zero(d: Drill, what: str, ns: str, prefixes: list[str],
                     bound: Callable[[], Optional[str]]) -> Optional[str]:
    """Waits until `bound` names the pool whose new node(s) run the pods (the autoscaler scaled it up), or the
    autoscaler says a pod of `prefixes` did not trigger a scale-up (its NotTriggerScaleUp Event: concluded at
    once, not after a hang guard). Returns the pool, or None with the failure and the autoscaler's reasons."""
    found: dict[str, str] = {}

    def done() -> bool:
        pool = bound()
        if pool:
            found["pool"] = pool
            return True
        said = next((m for m in (d.no_scale_up(ns, p) for p in prefixes) if m), None)
        if said:
            found["refused"] = said
        return said is not None

    if not d.until(what, done, timeout=d.timing.join_deadline_seconds + 120):
        return None
    if "pool" in found:
        return found["pool"]
    why = sorted(set(d.autoscaler_said(rf"Pod {re.escape(ns)}/(?:{'|'.join(map(re.escape, prefixes))})\S* can't be scheduled "
                                       r"on [^,\n]+, predicate checking error: [^\n]*")))
    # The groups the pod's own pool pin (its Kueue flavor) rules out say nothing about why its pool was not scaled.
    why = [w for w in why if '"NodeAffinity"' not in w] or why
    d.sc.fail(f"{what}: the autoscaler did not scale up for it: {found['refused']}"
              + (f" ({'; '.join(w.split(' ', 2)[-1] for w in why[-3:])})" if why else ""))
    return None


def _scale_ups(d: Drill, pool: str) -> list[LoggedEvent]:
    return [e for e in d.events() if e.kind == "scale-up" and e.group in d.pool_of_groups(pool)]


def _back_to_zero(d: Drill, what: str, pools: list[str]) -> bool:
    t = d.timing
    return d.until(what, lambda: all(not d.pool_instances(p) and not d.pool_nodes(p) for p in pools),
                   timeout=t.grace_seconds + 120)


def gpu_notebook_from_zero(d: Drill, other_than: Optional[str] = None) -> bool:
    """The pod JupyterHub's KubeSpawner makes for a GPU profile, as the stack's rendered hub values describe it
    (preflight.fit.pods.jupyterhub_user_pods, as the notebook-profiles scenario creates it), pending in Kueue's
    gpu-queue: the autoscaler scales its profile's pool from zero, it is admitted, binds and runs; the notebook
    stopped, its idle node goes after the grace and the autoscaler deletes its instance (the Linode API's
    DELETE, or moto's terminated instance). The profile of a pool `other_than` the first drill's when there is
    one. False when the drill cannot go on (the pool not back at zero)."""
    from gpu_platform.components.cluster import POOL_LABEL
    from gpu_platform.preflight.fit.pods import jupyterhub_user_pods

    sc, client, t = d.sc, d.client, d.timing
    templates = [tp for rel in d.ctx.releases if rel.rendered and isinstance(rel.values, dict)
                 and str(rel.chart or "").rstrip("/").rsplit("/", 1)[-1] == "jupyterhub"
                 for tp in jupyterhub_user_pods(rel.name, rel.namespace, rel.values)]
    gpu = [tp for tp in templates if (tp.spec.get("nodeSelector") or {}).get(POOL_LABEL) in d.pools]
    if not gpu:
        sc.details.append("GPU notebook: the stack installs no JupyterHub GPU profile on an autoscaled pool: not drilled")
        return True
    tmpl = next((tp for tp in gpu if tp.spec["nodeSelector"][POOL_LABEL] != other_than), gpu[0])
    pool, profile = tmpl.spec["nodeSelector"][POOL_LABEL], tmpl.owner.rsplit("(profile ", 1)[-1].rstrip(")")
    ns = tmpl.namespace
    if _scale_ups(d, pool) and d.autoscaler is not None:
        # The autoscaler keeps the NodeInfo of a group's last ready node and simulates a scale-up from zero on it, not
        # on the template, for --node-info-cache-expire-time (10 years; processors/nodeinfosprovider/
        # mixed_nodeinfos_processor.go, nodeInfoCache): after the first drill's node, this pool's scale-up would not
        # test the template. Restarted, it knows only the template, as on a new cluster or after any restart.
        d.autoscaler.kill()
        if not d.start_autoscaler(f"GPU notebook: restarted so that it simulates the notebook on {pool}'s template node, "
                                  "not on the node info it cached from the earlier drill's node"):
            return False
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": NOTEBOOK_POD, "namespace": ns, "labels": dict(tmpl.labels)},
           "spec": copy.deepcopy(tmpl.spec)}
    started = time.monotonic()
    ups_before = len(_scale_ups(d, pool))
    downs_before = len([e for e in d.events() if e.kind == "scale-down" and e.group in d.pool_of_groups(pool)])
    try:
        client.create(pod)
    except (ApiError, UnknownKind) as exc:
        sc.fail(f"GPU notebook: the API server refused the pod of profile {profile}: {exc}")
        return False
    try:
        def bound() -> Optional[str]:
            live = client.get("v1", "Pod", NOTEBOOK_POD, ns)
            return _pool_of_pods(d, [live]) if live and _admitted(_pod_workload(client, ns, NOTEBOOK_POD)) else None

        landed = _scale_from_zero(d, f"GPU notebook: pod {ns}/{NOTEBOOK_POD} of profile {profile} admitted, bound and running "
                                     f"on a new node of {pool}", ns, [NOTEBOOK_POD], bound)
        if landed is None:
            return False
        if landed != pool:
            sc.fail(f"GPU notebook: profile {profile} asks pool {pool}; its pod runs on {landed}")
            return False
        w = _pod_workload(client, ns, NOTEBOOK_POD)
        queue = tmpl.labels.get(QUEUE_LABEL)
        got = d.one_new_node("GPU notebook", pool, ups_before, started,
                             f"notebook pod of profile {profile} (the hub's KubeSpawner pod as rendered; LocalQueue {queue}, "
                             f"Kueue workload {(w or {}).get('metadata', {}).get('name')}) admitted, bound and running")
        if got is None:
            return False
        inst, node = got
    finally:
        try:
            client.delete("v1", "Pod", NOTEBOOK_POD, ns, grace_seconds=0)
        except (ApiError, UnknownKind):
            pass
    # The notebook stopped (the hub deletes its pod): its idle node goes after the grace, its instance deleted.
    stopped = time.monotonic()
    if not _back_to_zero(d, f"GPU notebook: {pool} back at zero after the notebook stopped", [pool]):
        return False
    gone = time.monotonic() - stopped
    downs = [e for e in d.events() if e.kind == "scale-down" and e.group in d.pool_of_groups(pool)][downs_before:]
    deleted, problem = d.instance_deleted(inst)
    sc.details.append(f"GPU notebook: stopped; {pool} back at zero ({len(d.pool_instances(pool))} instance(s), "
                      f"{len(d.pool_nodes(pool))} node(s)) {gone:.0f}s after (grace {t.grace_seconds}s): "
                      f"{downs[-1].text if downs else 'no scale-down logged'}; {deleted}")
    if gone < t.grace_seconds:
        sc.fail(f"GPU notebook: the idle node {node['metadata']['name']} went {gone:.0f}s after the notebook stopped, before "
                f"the grace of {t.grace_seconds}s")
    if not downs:
        sc.fail(f"GPU notebook: node {node['metadata']['name']} went, but the autoscaler logged no scale-down of it "
                "(something else removed it)")
    if problem:
        sc.fail(f"GPU notebook: {problem}")
    return True


def scale_from_zero_and_back(d: Drill, job: dict, pool: str) -> None:
    """The shipped drill: sync; a pending TrainJob (with a Katib trial's ephemeral storage) scales the pool
    from zero, binds and runs; its busy node outlives the grace; after it ends the node goes after the grace
    and its instance is deleted; a GPU notebook's pod (the hub's, for the stack's GPU profile) does the same;
    a node that never joins is timed out at the join deadline by the autoscaler, which backs the pool off and
    removes it before the provider's backstop; the autoscaler killed while its scale-up is in flight and
    started again neither leaks nor doubles an instance."""
    sc, t = d.sc, d.timing
    _check_template(d, pool)
    d.chart_rbac_alone()
    if not d.start_autoscaler("sync with the program's RBAC"):
        return

    # 1. A pending GPU TrainJob: the autoscaler scales the pool from zero, the job is admitted, bound, running.
    started = time.monotonic()
    ref = d.submit(job, "rehearsal-autoscale-a", extra_requests={"ephemeral-storage": KATIB_EPHEMERAL_STORAGE})
    if ref is None:
        return
    if not d.until(f"scale-up: TrainJob {ref[0]}/{ref[1]} (asking {KATIB_EPHEMERAL_STORAGE} ephemeral-storage) admitted, "
                   f"bound and running on a new node of {pool}", d.bound_in_pool(*ref, pool), timeout=t.join_deadline_seconds + 90,
                   never=d.never_scales_for(*ref, pool)):
        return
    nodes = [n["metadata"]["name"] for n in d.pool_nodes(pool)]
    creates = len(d.fake.calls("POST"))
    ups = [e for e in d.events() if e.kind == "scale-up" and e.group == pool]
    sc.details.append(f"scale-up: {len(ups)} scale-up(s) of {pool} ({ups[0].text if ups else 'none logged'}) -> instance(s) "
                      f"{[i['label'] for i in d.pool_instances(pool)]} -> node(s) {nodes}; TrainJob (with "
                      f"{KATIB_EPHEMERAL_STORAGE} ephemeral-storage) admitted, bound and running after {time.monotonic() - started:.0f}s")
    if len(ups) != 1 or creates != 1:
        sc.fail(f"scale-up: one pending pod, one node: the autoscaler scaled {pool} up {len(ups)} time(s) and the provider "
                f"called create {creates} time(s)")

    # 2. The busy node: past the grace, the autoscaler keeps it (and says why).
    d.busy_node_kept(ref, pool, nodes, str(nodes), lambda e: e.group == pool)

    # 3. The job ends; after the grace the idle node is removed and its instance deleted.
    if not d.end(*ref):
        return
    ended = time.monotonic()
    if not d.until(f"scale-down: idle node(s) {nodes} of {pool} removed and their instance deleted",
                   lambda: not d.pool_instances(pool) and not d.pool_nodes(pool), timeout=t.grace_seconds + 120):
        return
    gone = time.monotonic() - ended
    downs = [e for e in d.events() if e.kind == "scale-down" and e.group == pool]
    sc.details.append(f"scale-down: {downs[-1].text if downs else 'none logged'}, {gone:.0f}s after the job ended (grace "
                      f"{t.grace_seconds}s); the fake Linode API holds no instance of {pool}")
    if gone < t.grace_seconds:
        sc.fail(f"scale-down: the idle node went {gone:.0f}s after the job ended, before the grace of {t.grace_seconds}s")
    if not downs:
        sc.fail("scale-down: the node went, but the autoscaler logged no scale-down (something else removed it)")

    # 3b. A GPU notebook (the hub's pod for a GPU profile) scales the pool from zero in the same way; stopped, its
    # node goes after the grace and its instance is deleted.
    if not gpu_notebook_from_zero(d):
        return

    # 4. A node that never joins: the autoscaler times the scale-up out at the join deadline, backs the pool off
    # and removes the instance (the provider's own deletion, a backstop, comes later), and the pool recovers ...
    # 5. ... with the autoscaler killed while its second scale-up is in flight (the provider's create reached
    # Linode, its answer is held). Started again, it counts the booting instance: nothing leaks, nothing doubles.
    posts_before = len(d.fake.calls("POST"))
    marks = NeverJoinMarks(len(d.events()), len(d.autoscaler.text() if d.autoscaler else ""),
                           len(d.provider_log().splitlines()))
    held = threading.Event()
    d.fake.faults["POST"] += [("pass",), ("hold", held)]
    d.bridge.refuse_next = True
    ref = d.submit(job, "rehearsal-autoscale-b")
    if ref is None:
        return
    started = time.monotonic()
    if not d.until("a node that never joins: the pool scaled up again after the join deadline",
                   lambda: d.fake.held > 0, timeout=t.join_deadline_seconds + 120):
        held.set()
        return
    lost = sorted(d.bridge.never_join)
    alive = {i["id"] for i in d.fake.instances_tagged(d.stack_tag)}
    never_joined_timed_out(d, pool, lost, alive, time.monotonic() - started, marks)
    d.bridge.booting = False  # the in-flight instance stays booting until the restarted autoscaler has looked at it
    d.autoscaler.kill()
    held.set()
    in_flight = [i["label"] for i in d.pool_instances(pool)]
    if not d.start_autoscaler(f"restart: killed (SIGKILL) while its scale-up of {in_flight} was in flight, started again"):
        d.bridge.booting = True
        return
    posts_after_restart = len(d.fake.calls("POST"))
    if not d.loops(2):
        sc.fail("restart: the restarted autoscaler stopped running its loop")
    d.bridge.booting = True
    if len(d.fake.calls("POST")) != posts_after_restart:
        sc.fail(f"restart: the restarted autoscaler asked for another node while {in_flight} was still booting")
    if not d.until(f"TrainJob {ref[0]}/{ref[1]} bound to {pool} after the restart", d.bound_in_pool(*ref, pool),
                   timeout=t.join_deadline_seconds + 90):
        return
    instances = d.pool_instances(pool)
    posts = len(d.fake.calls("POST")) - posts_before
    sc.details.append(f"after the restart: instance(s) {[i['label'] for i in instances]}, node(s) "
                      f"{[n['metadata']['name'] for n in d.pool_nodes(pool)]}, {posts} create call(s) since the lost node")
    if len(instances) != 1 or posts != 2:
        sc.fail(f"restart: the pool holds {len(instances)} instance(s) ({posts} create calls since the lost node; want 1 "
                "instance from 2 creates: the lost one and the interrupted one)")
    if d.end(*ref) and d.until(f"the pool {pool} back at minNodes", lambda: not d.pool_instances(pool) and not d.pool_nodes(pool),
                               timeout=t.grace_seconds + 120):
        left = d.fake.instances_tagged(d.stack_tag)
        sc.details.append(f"pool {pool} back at {len(d.pool_nodes(pool))} node(s); the fake Linode API holds "
                          f"{len(left)} instance(s) of the stack")


@dataclass(frozen=True)
class NeverJoinMarks:
    """How much the autoscaler and the provider had logged when the never-join phase began: only what came
    after counts (an earlier phase's backoff is not this one's)."""

    events: int = 0
    autoscaler_chars: int = 0
    provider_lines: int = 0


def never_joined_timed_out(d: Drill, pool: str, lost: list[int], alive: set[int], after: float,
                           marks: NeverJoinMarks = NeverJoinMarks()) -> bool:
    """The verdict on a node that never joined, once the pool has asked for a node again: the autoscaler timed
    the scale-up out at --max-node-provision-time (clusterstate.go updateScaleRequests: "Scale-up timed out for
    node group ...", then "Disabling scale-up for node group ..." - the backoff and failed-scale-up metric a
    group whose nodes never join must get) and removed the instance itself through the provider's DeleteNodes
    (static_autoscaler.go removeOldUnregisteredNodes), before the provider's own backstop. An instance the
    provider deletes first leaves the autoscaler a group at its target: it logs the scale-up "finished
    successfully" and asks again at once, a fresh GPU instance every join deadline with no backoff."""
    sc, t = d.sc, d.timing
    said = {kind: [e.text for e in d.events()[marks.events:] if e.group == pool and e.kind == kind]
            for kind in ("scale-up timed out", "backoff", "unregistered removed")}
    # The Event it records (on its status ConfigMap; its event sink logs it too).
    said["ScaleUpTimedOut Event"] = [m[1] for m in re.finditer(
        rf"reason: 'ScaleUpTimedOut' (Nodes added to group {re.escape(pool)} failed to register within \S+)",
        (d.autoscaler.text() if d.autoscaler else "")[marks.autoscaler_chars:])]
    log = d.provider_log().splitlines()[marks.provider_lines:]
    backstop = [ln.split(": ", 1)[-1] for ln in log if "did not join within" in ln]
    removed = [ln.split(": ", 1)[-1] for ln in log if "(it never registered as a node)" in ln]
    ok = True
    if not lost or set(lost) & alive:
        sc.fail(f"never joined: the pool scaled up again while instance(s) {lost} that never joined still exist")
        ok = False
    missing = [f"{kind!r}" for kind, texts in said.items() if not texts]
    if missing:
        sc.fail(f"never joined: the autoscaler logged no {', '.join(missing)} for {pool} (want 'Scale-up timed out for "
                f"node group {pool}' with its ScaleUpTimedOut Event, 'Disabling scale-up for node group {pool}' and "
                f"'Removing 1 unregistered nodes for node group {pool}' at --max-node-provision-time "
                f"{t.join_deadline_seconds}s): it never backed the group off; "
                f"the provider: {'; '.join(backstop + removed) or 'nothing logged'}")
        ok = False
    if backstop:
        sc.fail(f"never joined: the provider's backstop deleted the instance before the autoscaler timed it out: "
                f"{'; '.join(backstop)}")
        ok = False
    elif not removed:
        sc.fail("never joined: the provider logged no deletion of a never-registered instance on the autoscaler's DeleteNodes")
        ok = False
    if ok:
        sc.details.append(f"never joined: instance {lost[0]} never registered; the autoscaler timed the scale-up out at "
                          f"--max-node-provision-time ({t.join_deadline_seconds}s): {said['scale-up timed out'][0]} (Event "
                          f"ScaleUpTimedOut: {said['ScaleUpTimedOut Event'][0]}); "
                          f"{said['backoff'][0]}; {said['unregistered removed'][0]}; the provider on its DeleteNodes: "
                          f"{removed[0]} (its own backstop: {t.join_deadline_seconds + t.join_backstop_seconds}s); "
                          f"the autoscaler asked for a node again {after:.0f}s after the TrainJob")
    return ok


def busy_node_at_low_utilisation(d: Drill, job: dict, pool: str) -> None:
    """Two nodes whose training pods use at most half their GPUs (2 of 4 on one, 1 of 4 on the other), each
    with room for the other's pod: the autoscaler's simulation can move either pod, so only what protects a
    running trainer keeps its node (cluster-autoscaler FAQ, "What types of pods can prevent CA from removing
    a node?"). No training pod may be evicted nor its node removed while it runs. Needs a pool of nodes with
    4 or more GPUs and maxNodes >= 2 (the shipped linode-dev pool has 1-GPU nodes, whose training pod keeps
    them at 100 %); tests plant one."""
    sc, t = d.sc, d.timing
    gpus, most = int(d.pools[pool]["gpusPerNode"]), int(d.pools[pool]["maxNodes"])
    if gpus < 4 or most < 2:
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"pool {pool} has {gpus}-GPU nodes, at most {most}: a busy node below the autoscaler's "
                           "utilisation threshold needs nodes of 4 or more GPUs and maxNodes >= 2")
        return
    if not d.start_autoscaler("sync with the program's RBAC"):
        return
    half = gpus // 2
    refs = {}
    for key, name, n in (("m", "rehearsal-autoscale-m", half), ("f", "rehearsal-autoscale-f", gpus - half)):
        refs[key] = d.submit(job, name, gpus=n)
        if refs[key] is None or not d.until(f"TrainJob {name} ({n} GPUs) running on a node of {pool}",
                                            d.bound_in_pool(*refs[key], pool), timeout=t.join_deadline_seconds + 90):
            return
    first = {p["spec"]["nodeName"] for key in "mf" for p in d.pods_of(*refs[key])}
    refs["s"] = d.submit(job, "rehearsal-autoscale-s", gpus=1)
    if refs["s"] is None or not d.until(f"TrainJob rehearsal-autoscale-s (1 GPU) running on a second node of {pool}",
                                        d.bound_in_pool(*refs["s"], pool), timeout=t.join_deadline_seconds + 90):
        return
    [pod] = d.pods_of(*refs["s"])
    node = pod["spec"]["nodeName"]
    if len(first) != 1 or node in first:
        sc.fail(f"set-up: the {half}+{gpus - half}-GPU jobs landed on {sorted(first)}, the 1-GPU one on {node}: not the "
                "two nodes the scenario needs")
        return
    d.end(*refs["f"])  # the first node now has room for the small job: half its GPUs are free
    # Every running training pod, where it runs: none may be evicted nor its node removed while it runs.
    watched = {p["metadata"]["uid"]: (p["metadata"]["name"], p["spec"]["nodeName"]) for key in "ms" for p in d.pods_of(*refs[key])}
    started = time.monotonic()
    sc.details.append(f"{node}: TrainJob rehearsal-autoscale-s's pod uses 1 of {gpus} GPUs; {sorted(first)[0]} runs "
                      f"rehearsal-autoscale-m's {half} of {gpus}: both at or below the autoscaler's 0.5 utilisation threshold "
                      "(eligibility.go isNodeAtOrBelowUtilizationThreshold), each with room for the other's pod")
    evicted = ""
    while not evicted and time.monotonic() - started < t.busy_watch_seconds + t.grace_seconds:
        running = {p["metadata"]["uid"]: p for key in "ms" for p in d.pods_of(*refs[key]) if not p["metadata"].get("deletionTimestamp")}
        nodes = {n["metadata"]["name"] for n in d.pool_nodes(pool)}
        for uid, (name, where) in watched.items():
            if uid not in running or where not in nodes:
                evicted = (f"after {time.monotonic() - started:.0f}s training pod {name} was evicted from {where}"
                           + ("" if where in nodes else f" and {where} removed"))
                break
        time.sleep(1)
    busy = {where for _, where in watched.values()}
    why = [e.text for e in d.events() if e.group == pool and any(n in e.text for n in busy)
           and e.kind in ("not removable", "unremovable", "scale-down")]
    downs = [w for w in why if w.startswith("Scale-down")]
    if evicted:
        sc.fail(f"busy node at low utilisation: {evicted} (the autoscaler: {downs[-1] if downs else why[-1] if why else 'nothing logged'}): "
                "nothing protects a running trainer from scale-down")
    else:
        sc.details.append(f"busy node at low utilisation: {sorted(busy)} and their training pods kept for "
                          f"{time.monotonic() - started:.0f}s (grace {t.grace_seconds}s); the autoscaler's reasons: "
                          f"{'; '.join(dict.fromkeys(w for w in why if not w.startswith('Scale-down'))) or 'none logged'}")
    for key in ("m", "s"):
        d.end(*refs[key])
    d.until(f"the pool {pool} back at minNodes", lambda: not d.pool_instances(pool) and not d.pool_nodes(pool),
            timeout=t.grace_seconds + 180)


# --- the entry points ------------------------------------------------------------------------------------


def _settings(ctx: Any) -> Optional[dict]:
    """pools.json as the installed (or planted) releases carry it, else from the plan."""
    for rel in getattr(ctx, "releases", []) or []:
        for o in rel.objects:
            if o.get("kind") == "ConfigMap" and isinstance((o.get("data") or {}).get("pools.json"), str):
                return json.loads(o["data"]["pools.json"])
    return pools_json(getattr(ctx, "plan", None))


def not_rehearsed(cloud: str) -> list[str]:
    """The autoscaling this rehearsal does not run, for the report's NOT REHEARSED list."""
    if cloud == "gcp":
        return ["GKE autoscaling: the cluster autoscaler is Google's own, managed (no binary the rehearsal can run); "
                "GKE node pools' scale-ups and scale-downs are not rehearsed (cluster fit keeps GKE's documented "
                "scale-from-zero rules)"]
    if cloud == "aws":
        return ["EKS autoscaling: the eks-autoscaling drill runs cluster-autoscaler (aws) against moto's Auto Scaling and "
                "EC2 APIs; NOT REHEARSED there: the termination lifecycle hook's wait (moto terminates an instance at once; "
                "aws-node-termination-handler does not run), Spot capacity and interruptions (moto launches on-demand), "
                "and the scale-in protection controller in eks-autoscaling-extended (the shipped drill runs it and measures "
                "its hold; the extended drill's half-used nodes check the runtime's safe-to-evict guard, which the "
                "controller's annotation would mask)"]
    return []


def run_drill(ctx: Any, sc: Any, phases: Callable[[Drill, dict, str], None], timing: Optional[Timing] = None,
              extra_rbac: bool = True) -> Any:
    """Fills scenario `sc` (scenarios.Scenario) with `phases` of the drill on `ctx` (scenarios.Context)."""
    t = timing or Timing()
    settings = _settings(ctx)
    if ctx.model.cloud != "linode" or not settings or not settings.get("pools"):
        sc.details.append("the stack has no autoscaled Linode GPU pool (no node-group provider to drill)")
        return sc
    with tempfile.TemporaryDirectory(prefix="rehearsal-autoscale-") as tmp:
        work = Path(tmp)
        # Beside the controllers' logs (build/<stack>/rehearsal-logs/), where the report points.
        logs = next((Path(c.proc.log).parent for c in ctx.controllers.values() if getattr(c, "proc", None)), None)
        name = sc.name
        Drill(ctx, sc, settings, work, (logs / name) if logs else work / "logs", t, extra_rbac).run(phases)
    return sc


def linode_autoscaling(ctx: Any, sc: Any, timing: Optional[Timing] = None) -> Any:
    return run_drill(ctx, sc, scale_from_zero_and_back, timing)


def linode_busy_node(ctx: Any, sc: Any, timing: Optional[Timing] = None) -> Any:
    return run_drill(ctx, sc, busy_node_at_low_utilisation, timing)
