"""The connections the platform needs, each checked against the rendered NetworkPolicies (and Cilium
policies) with the semantics of the CNI that enforces them (gpu_platform.preflight.fit.netpol).

A denied flow is silent on a real cluster: the packets are dropped and the client hangs until its own
timeout (a notebook's `kfp.Client()` to `ml-pipeline:8888` on Cilium, where z2jh's `privateIPs` ipBlock
never matches a pod), so nothing in a plan, a policy pack or the rehearsal (which has no network) shows
it. Here every flow is resolved from the rendered objects: the source and destination pods (their
namespace, labels and container ports), a Service's selector and targetPort, the namespaces' labels;
and the places that are not pods from the network model (pod, node and API server addresses, where
the API server runs).

Two kinds of flow:
- declared (DECLARED below): what users and the platform's parts need of each other, each with why
  and its upstream source; applies when the objects it names are rendered (the part is installed);
- derived from the rendered objects: the API server to every admission webhook, CRD conversion
  webhook and APIService backend it calls; Prometheus to every target its ServiceMonitors and
  PodMonitors select.

Pods no release renders (a pipeline step, a Katib trial, a user's training job, the cluster's DNS) are
modelled with the labels their controllers give them, and say so. Pure: objects in, results out.
"""

from __future__ import annotations

import ipaddress
import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

from gpu_platform.preflight.fit.netpol import (
    CILIUM_KINDS, EXTERNAL, NODE, POD, Dataplane, Decision, Peer, Policy, decide, policies_of,
)
from gpu_platform.preflight.fit.scrape import _namespaces_ok, _selector_matches
from gpu_platform.preflight.fit.selectors import label_selector_matches

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# Namespaces every cluster has, whether or not a release renders them.
BUILTIN_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
CILIUM_CONFIGMAP = ("kube-system", "cilium-config")  # the chart's agent configuration
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


# ---------------------------------------------------------------------------------------------
# What a flow names
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pods:
    """The rendered pods of `namespace` whose labels include `labels`; when none is rendered and
    `unrendered` says what makes them, one pod with those labels (a pipeline step, a trial, a user job)."""
    namespace: str
    labels: Mapping[str, str]
    what: str
    unrendered: Optional[str] = None


@dataclass(frozen=True)
class Service:
    """The pods a Service selects, on the container port its `port` (number or name) targets."""
    namespace: str
    name: str
    port: Union[int, str]


@dataclass(frozen=True)
class Place:
    """What is not a pod: the API server, the nodes' kubelets, an address on the internet."""
    kind: str  # apiserver | nodes | internet
    what: str


@dataclass(frozen=True)
class Endpoint:
    """An address a URL of the stack names, outside any rendered Service: on the nodes' network or outside the
    cluster (an on-premises MinIO, a cloud's object storage)."""
    what: str
    addresses: tuple[str, ...]
    port: int
    on_nodes: bool = False


APISERVER = Place("apiserver", "the Kubernetes API server")
# Resolved from the rendered objects (_Cluster.resolve): where ml-pipeline's OBJECTSTORECONFIG_HOST/PORT point
# (SeaweedFS in `kubeflow` on every shipped stack), and the endpoint of the checkpoint-store ConfigMap
# (AWS_ENDPOINT_URL_S3: the stack's kubernetes.checkpointStore.endpoint, Linode's Object Storage cluster), else
# the cloud's own object storage (S3, GCS: public addresses, HTTPS).
ARTIFACT_STORE = Place("artifact-store", "Pipelines' artifact store")
CHECKPOINT_BUCKET = Place("checkpoint-bucket", "the checkpoint bucket")
METADATA = Place("metadata", "the cloud metadata server (169.254.169.254)")
NODES = Place("nodes", "every node (kubelet, hostNetwork pods)")


@dataclass(frozen=True)
class FlowSpec:
    name: str
    source: Union[Pods, Service, Place]
    destination: Union[Pods, Service, Place, Endpoint]
    why: str
    port: Optional[int] = None  # for a Pods or Place destination; a Service names its own
    protocols: tuple[str, ...] = ("TCP",)
    needs: tuple[str, ...] = ()  # object ids (Kind/namespace/name): the flow applies when all are rendered
    expect: str = "allowed"  # or "denied": a connection the platform promises to keep closed
    clouds: tuple[str, ...] = ()  # only on these clouds (empty: every cloud)


# The cluster's DNS (CoreDNS on kubeadm and EKS, kube-dns on GKE): both label their pods k8s-app=kube-dns in
# kube-system; no release renders them.
DNS = Pods("kube-system", {"k8s-app": "kube-dns"}, "the cluster's DNS (kube-system, k8s-app=kube-dns)",
           unrendered="the cluster's own DNS add-on (CoreDNS / kube-dns), labelled k8s-app=kube-dns")
DNS_PORTS = ((("dns", 53, "UDP"), ("dns-tcp", 53, "TCP"), ("metrics", 9153, "TCP")))

HUB = Pods("jupyterhub", {"app": "jupyterhub", "component": "hub"}, "the JupyterHub hub")
PROXY = Pods("jupyterhub", {"app": "jupyterhub", "component": "proxy"}, "the JupyterHub proxy")
NOTEBOOK = Pods("jupyterhub", {"app": "jupyterhub", "component": "singleuser-server"}, "a notebook server")
TRAINING = Pods("training", {}, "a training pod (namespace training)",
                unrendered="a user's TrainJob/Job in training (no job is rendered; its pods carry the job's labels)")
TRIAL = Pods("training", {"katib.kubeflow.org/trial": "<trial>"}, "a Katib trial pod (namespace training)",
             unrendered="Katib's trial controller, for each trial of an Experiment (label katib.kubeflow.org/trial)")
PIPELINE_STEP = Pods("kubeflow", {"workflows.argoproj.io/workflow": "<run>"}, "a pipeline step (Argo workflow pod)",
                     unrendered="Argo's workflow controller, for each step of a run (label workflows.argoproj.io/workflow)")
PROMETHEUS = Pods("monitoring", {"app.kubernetes.io/name": "prometheus"}, "Prometheus")
GRAFANA = Pods("monitoring", {"app.kubernetes.io/name": "grafana"}, "Grafana")

HUB_NEEDS = ("Deployment/jupyterhub/hub",)
PIPELINES_NEEDS = ("Service/kubeflow/ml-pipeline",)
KATIB_NEEDS = ("Service/kubeflow/katib-db-manager",)
PIPELINES_MYSQL = Service("kubeflow", "mysql", 3306)
KATIB_MYSQL = Service("kubeflow", "katib-mysql", 3306)
# The databases nothing but their servers may reach (components/platform/kubeflow.py render_database_policies):
# Pipelines' MySQL lets root in without a password, Katib's with the password its manifest ships.
MYSQL_WHY = ("kept closed: {db} lets root in from any address ({how}); only {servers} may reach it "
             "(NetworkPolicy {policy}, docs/platform.md \"Network flows\")")
PIPELINES_MYSQL_WHY = MYSQL_WHY.format(db="Pipelines' MySQL", how="MYSQL_ALLOW_EMPTY_PASSWORD, no password",
                                       servers="ml-pipeline, metadata-grpc and the cache server",
                                       policy="kubeflow/pipelines-mysql-clients")
KATIB_MYSQL_WHY = MYSQL_WHY.format(db="Katib's MySQL", how="the password `test` of the shipped katib-mysql-secrets",
                                   servers="katib-db-manager", policy="kubeflow/katib-mysql-clients")

# What the platform needs, with why and where that is written. Ports are the pods' (policies see the
# address and port after the Service's translation).
DECLARED: tuple[FlowSpec, ...] = (
    FlowSpec("hub to the Kubernetes API", HUB, APISERVER, "KubeSpawner creates, watches and deletes each user's "
             "pod and volume (z2jh 4.4.0 files/hub/jupyterhub_config.py)", needs=HUB_NEEDS),
    FlowSpec("hub to the proxy's API", HUB, Service("jupyterhub", "proxy-api", 8001),
             "the hub adds and removes each server's route (z2jh proxy-api Service)", needs=HUB_NEEDS),
    FlowSpec("proxy to the hub", PROXY, Service("jupyterhub", "hub", 8081), "every login and /hub request",
             needs=HUB_NEEDS),
    FlowSpec("proxy to a notebook", PROXY, NOTEBOOK, "every request to a user's server (KubeSpawner port 8888)",
             port=8888, needs=HUB_NEEDS),
    FlowSpec("hub to a notebook", HUB, NOTEBOOK, "the hub polls each server it spawned", port=8888, needs=HUB_NEEDS),
    FlowSpec("notebook to the hub", NOTEBOOK, Service("jupyterhub", "hub", 8081),
             "jupyterhub-singleuser authenticates users and reports activity (idle culling)", needs=HUB_NEEDS),
    FlowSpec("notebook to the Kubernetes API", NOTEBOOK, APISERVER, "a notebook submits TrainJobs, Jobs and Katib "
             "Experiments to training with its service account (notebook-user)", needs=HUB_NEEDS),
    FlowSpec("notebook to Pipelines", NOTEBOOK, Service("kubeflow", "ml-pipeline", 8888),
             "kfp.Client() at KF_PIPELINES_ENDPOINT (http://ml-pipeline.kubeflow.svc.cluster.local:8888)",
             needs=HUB_NEEDS + PIPELINES_NEEDS),
    FlowSpec("notebook to Katib's DB manager", NOTEBOOK, Service("kubeflow", "katib-db-manager", 6789),
             "the Katib SDK's get_trial_metrics reads katib-db-manager.kubeflow:6789 (kubeflow/katib "
             "sdk/python/v1beta1/kubeflow/katib/constants/constants.py DEFAULT_DB_MANAGER_ADDRESS)",
             needs=HUB_NEEDS + KATIB_NEEDS),
    FlowSpec("notebook to DNS", NOTEBOOK, DNS, "every Service name a notebook uses", port=53, protocols=("UDP", "TCP"),
             needs=HUB_NEEDS),
    FlowSpec("hub to DNS", HUB, DNS, "the hub reaches the proxy and the API by name", port=53,
             protocols=("UDP", "TCP"), needs=HUB_NEEDS),
    FlowSpec("training to DNS", TRAINING, DNS, "the bucket's and the peers' names", port=53, protocols=("UDP", "TCP"),
             needs=("Namespace/training",)),
    FlowSpec("training to the checkpoint bucket", TRAINING, CHECKPOINT_BUCKET, "checkpoints are written to and read "
             "from the stack's bucket at the endpoint the checkpoint-store ConfigMap gives pods (AWS_ENDPOINT_URL_S3)",
             needs=("ConfigMap/training/checkpoint-store",)),
    FlowSpec("training peers (torch rendezvous)", TRAINING, TRAINING, "the nodes of a multi-node TrainJob meet on the "
             "trainer port (kubeflow/trainer v2.3.0 pkg/constants ContainerTrainerPort 29500)", port=29500,
             needs=("Namespace/training",)),
    FlowSpec("trial to Katib's DB manager", TRIAL, Service("kubeflow", "katib-db-manager", 6789),
             "a trial's metrics collector (or the SDK's report_metrics) writes its metrics to katib-db-manager:6789",
             needs=KATIB_NEEDS + ("Namespace/training",)),
    FlowSpec("Katib controller to its DB manager", Pods("kubeflow", {"katib.kubeflow.org/component": "controller"},
                                                        "Katib's controller"),
             Service("kubeflow", "katib-db-manager", 6789), "trial results and the suggestion's observations",
             needs=KATIB_NEEDS),
    FlowSpec("Katib DB manager to MySQL", Pods("kubeflow", {"katib.kubeflow.org/component": "db-manager"},
                                               "Katib's DB manager"),
             KATIB_MYSQL, "Katib's database", needs=KATIB_NEEDS),
    FlowSpec("Pipelines API to MySQL", Pods("kubeflow", {"app": "ml-pipeline"}, "the Pipelines API server"),
             PIPELINES_MYSQL, "runs, pipelines and experiments", needs=PIPELINES_NEEDS),
    FlowSpec("Pipelines API to the object store", Pods("kubeflow", {"app": "ml-pipeline"}, "the Pipelines API server"),
             ARTIFACT_STORE, "pipeline packages and artifacts (its OBJECTSTORECONFIG_HOST and _PORT)",
             needs=PIPELINES_NEEDS),
    FlowSpec("pipeline step to the object store", PIPELINE_STEP, ARTIFACT_STORE,
             "each step's inputs and outputs (the launcher)", needs=PIPELINES_NEEDS),
    FlowSpec("notebook to the Pipelines artifact store", NOTEBOOK, ARTIFACT_STORE,
             "a notebook reads a run's outputs and uploads inputs where kfp.Client()'s runs keep them (the S3 API "
             "ml-pipeline's OBJECTSTORECONFIG_HOST names)", needs=HUB_NEEDS + PIPELINES_NEEDS),
    FlowSpec("ML Metadata to MySQL", Pods("kubeflow", {"component": "metadata-grpc-server"}, "ML Metadata (metadata-grpc)"),
             PIPELINES_MYSQL, "executions and artifacts of every v2 step (--mysql_config_host)", needs=PIPELINES_NEEDS),
    FlowSpec("notebook to Pipelines' MySQL", NOTEBOOK, PIPELINES_MYSQL, PIPELINES_MYSQL_WHY,
             needs=HUB_NEEDS + PIPELINES_NEEDS, expect="denied"),
    FlowSpec("training to Pipelines' MySQL", TRAINING, PIPELINES_MYSQL, PIPELINES_MYSQL_WHY,
             needs=PIPELINES_NEEDS + ("Namespace/training",), expect="denied"),
    FlowSpec("pipeline step to Pipelines' MySQL", PIPELINE_STEP, PIPELINES_MYSQL, PIPELINES_MYSQL_WHY,
             needs=PIPELINES_NEEDS, expect="denied"),
    FlowSpec("notebook to Katib's MySQL", NOTEBOOK, KATIB_MYSQL, KATIB_MYSQL_WHY,
             needs=HUB_NEEDS + KATIB_NEEDS, expect="denied"),
    FlowSpec("training to Katib's MySQL", TRAINING, KATIB_MYSQL, KATIB_MYSQL_WHY,
             needs=KATIB_NEEDS + ("Namespace/training",), expect="denied"),
    FlowSpec("trial to Katib's MySQL", TRIAL, KATIB_MYSQL, KATIB_MYSQL_WHY,
             needs=KATIB_NEEDS + ("Namespace/training",), expect="denied"),
    FlowSpec("pipeline step to Pipelines", PIPELINE_STEP, Service("kubeflow", "ml-pipeline", 8887),
             "the driver and launcher call the API server's gRPC port", needs=PIPELINES_NEEDS),
    FlowSpec("pipeline step to ML Metadata", PIPELINE_STEP, Service("kubeflow", "metadata-grpc-service", 8080),
             "the driver and launcher record executions and artifacts", needs=PIPELINES_NEEDS),
    FlowSpec("Grafana to Prometheus", GRAFANA, Service("monitoring", "kube-prometheus-stack-prometheus", 9090),
             "every dashboard", needs=("Service/monitoring/kube-prometheus-stack-prometheus",)),
    FlowSpec("notebook to the cloud metadata server", NOTEBOOK, METADATA, "kept closed on every cloud: notebooks need "
             "no cloud identity (z2jh egressAllowRules.cloudMetadataServer: false; docs/platform.md)", port=80,
             needs=HUB_NEEDS, expect="denied"),
    FlowSpec("training to the cloud metadata server", TRAINING, METADATA, "kept closed on Linode (the node's user "
             "data) and EKS (the node role's credentials): NetworkPolicy training-egress, and on Linode the "
             "CiliumClusterwideNetworkPolicy deny-instance-metadata (docs/platform.md)", port=80,
             needs=("Namespace/training",), expect="denied", clouds=("linode", "aws")),
    FlowSpec("Prometheus to Alertmanager", PROMETHEUS, Service("monitoring", "kube-prometheus-stack-alertmanager", 9093),
             "every alert (the idle-GPU and token-expiry alerts included)",
             needs=("Service/monitoring/kube-prometheus-stack-alertmanager",)),
)


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------


@dataclass
class FlowResult:
    name: str
    source: str
    destination: str
    port: Optional[int]
    protocol: str
    verdict: str  # allowed | denied | unresolved | not-evaluated
    why: str
    derived: bool = False
    reason: str = ""  # for denied / unresolved / not-evaluated
    policies: list[str] = field(default_factory=list)  # the policies that decide it (isolating or denying)
    releases: list[str] = field(default_factory=list)
    expected: str = "allowed"  # what the platform needs: allowed, or denied (kept closed)
    fix: str = ""  # for a denied flow: what lets it through, for what the blocked side is (a pod, a node, ...)

    def line(self) -> str:
        port = f":{self.port}/{self.protocol}" if self.port is not None else ""
        return f"{self.name}: {self.source} -> {self.destination}{port}"


@dataclass
class FlowReport:
    dataplane: str
    results: list[FlowResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> list[FlowResult]:
        return [r for r in self.results if r.verdict != r.expected]

    def to_json(self) -> dict[str, Any]:
        return {"dataplane": self.dataplane, "checked": len(self.results), "failed": len(self.failed),
                "flows": [asdict(r) for r in self.results], "notes": list(self.notes)}


# ---------------------------------------------------------------------------------------------
# The cluster as the flows see it
# ---------------------------------------------------------------------------------------------


def _ports(spec: Mapping[str, Any]) -> tuple[tuple[Optional[str], int, str], ...]:
    out = []
    for c in list(spec.get("containers") or []) + list(spec.get("initContainers") or []):
        for p in c.get("ports") or []:
            try:
                out.append((p.get("name"), int(p.get("containerPort")), str(p.get("protocol") or "TCP")))
            except (TypeError, ValueError):
                continue
    return tuple(out)


class _Cluster:
    def __init__(self, network: Any, releases: list[Any], templates: list[Any]):
        self.network = network
        self.objects = [(rel.name, o) for rel in releases for o in rel.objects if isinstance(o, dict)]
        self.ids = {_oid(o) for _r, o in self.objects}
        self.release_of = {}
        for r, o in self.objects:
            self.release_of.setdefault(_oid(o), r)
        self.ns_labels: dict[str, dict[str, str]] = {ns: {NAMESPACE_NAME_LABEL: ns} for ns in BUILTIN_NAMESPACES}
        for _r, o in self.objects:
            if o.get("kind") == "Namespace" and o.get("apiVersion") == "v1":
                name = (o.get("metadata") or {}).get("name")
                labels = self.ns_labels.setdefault(name, {NAMESPACE_NAME_LABEL: name})
                labels.update({k: str(v) for k, v in ((o.get("metadata") or {}).get("labels") or {}).items()})
                self.ids.add(f"Namespace/{name}")
        self.services = {((o.get("metadata") or {}).get("namespace"), (o.get("metadata") or {}).get("name")): o
                         for _r, o in self.objects if o.get("kind") == "Service" and o.get("apiVersion") == "v1"}
        self.pods: list[Peer] = []
        self.pod_release: dict[int, str] = {}
        for pt in templates:
            if pt.hook or not pt.namespace:
                continue
            peer = self.pod(pt.owner, pt.namespace, pt.labels, pt.spec)
            self.pods.append(peer)
            self.pod_release[id(peer)] = pt.release
        self.policies: list[Policy] = policies_of(self.objects)
        self.notes: list[str] = []

    def pod(self, what: str, namespace: str, labels: Mapping[str, str], spec: Mapping[str, Any]) -> Peer:
        net = self.network
        if spec.get("hostNetwork"):
            return Peer(what, NODE, namespace, dict(labels), self.ns_labels.get(namespace, {}), _ports(spec),
                        tuple(net.node_cidrs), frozenset({"host", "remote-node"}))
        # The API server's ServiceAccount admission names "default" where the spec names none.
        account = str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")
        return Peer(what, POD, namespace, dict(labels), self.ns_labels.get(namespace, {NAMESPACE_NAME_LABEL: namespace}),
                    _ports(spec), tuple(net.pod_cidrs), service_account=account)

    def place(self, place: Place) -> Peer:
        net = self.network
        if place.kind == "apiserver":
            if net.apiserver_on_nodes:
                return Peer(place.what, NODE, addresses=tuple(net.apiserver_cidrs),
                            entities=frozenset({"kube-apiserver", "remote-node", "host"}))
            return Peer(place.what, EXTERNAL, addresses=tuple(net.apiserver_cidrs),
                        entities=frozenset({"kube-apiserver", "world"}))
        if place.kind == "metadata":
            return Peer(place.what, EXTERNAL, addresses=("169.254.169.254/32",), entities=frozenset({"world"}))
        if place.kind == "nodes":
            return Peer(place.what, NODE, addresses=tuple(net.node_cidrs), entities=frozenset({"host", "remote-node"}))
        from gpu_platform.preflight.fit.nodes import PUBLIC_RANGES

        return Peer(place.what, EXTERNAL, addresses=PUBLIC_RANGES, entities=frozenset({"world"}))

    def select(self, ref: Pods) -> list[Peer]:
        found = [p for p in self.pods if p.namespace == ref.namespace
                 and all(p.labels.get(k) == str(v) for k, v in ref.labels.items())]
        if found or ref.unrendered is None:
            return found
        ports = DNS_PORTS if ref is DNS else ()
        return [Peer(f"{ref.what} [not rendered: {ref.unrendered}]", POD, ref.namespace, dict(ref.labels),
                     self.ns_labels.get(ref.namespace, {NAMESPACE_NAME_LABEL: ref.namespace}), ports,
                     tuple(self.network.pod_cidrs))]

    def _env(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The plain env values of a rendered workload's containers (name -> value)."""
        for _r, o in self.objects:
            meta = o.get("metadata") or {}
            if (o.get("kind"), meta.get("namespace"), meta.get("name")) == (kind, namespace, name):
                spec = ((o.get("spec") or {}).get("template") or {}).get("spec") or {}
                return {e.get("name"): e.get("value") for c in spec.get("containers") or [] for e in c.get("env") or []
                        if isinstance(e, dict) and "value" in e}
        return {}

    def _configmap(self, namespace: str, name: str) -> Optional[Mapping[str, Any]]:
        for _r, o in self.objects:
            meta = o.get("metadata") or {}
            if (o.get("kind"), meta.get("namespace"), meta.get("name")) == ("ConfigMap", namespace, name):
                return o.get("data") or {}
        return None

    def resolve(self, place: Place) -> tuple[Any, Optional[int], str]:
        """ARTIFACT_STORE and CHECKPOINT_BUCKET as the rendered objects configure them: (destination, port, "") with
        the destination a Service, pods, an Endpoint or a Place; or (None, None, why not)."""
        if place.kind == ARTIFACT_STORE.kind:
            env = self._env("Deployment", "kubeflow", "ml-pipeline")
            host, port = env.get("OBJECTSTORECONFIG_HOST"), env.get("OBJECTSTORECONFIG_PORT")
            if not host:
                return None, None, "Deployment kubeflow/ml-pipeline is not rendered or sets no OBJECTSTORECONFIG_HOST"
            scheme = "https" if str(env.get("OBJECTSTORECONFIG_SECURE", "false")).lower() == "true" else "http"
            return self.url_destination(f"{scheme}://{host}" + (f":{port}" if port else ""), place.what,
                                        "ml-pipeline's OBJECTSTORECONFIG_HOST")
        if place.kind == CHECKPOINT_BUCKET.kind:
            data = self._configmap("training", "checkpoint-store") or {}
            url = data.get("AWS_ENDPOINT_URL_S3")
            if not url:  # the SDK's default: the cloud's own object storage (S3, GCS) on the internet
                return Place("internet", f"{place.what} (the cloud's object storage: public addresses)"), 443, ""
            return self.url_destination(str(url), place.what, "the checkpoint-store ConfigMap's AWS_ENDPOINT_URL_S3")
        return place, None, ""

    def url_destination(self, url: str, what: str, where: str) -> tuple[Any, Optional[int], str]:
        """Where a pod's connection to `url` goes: a Service of the cluster (<name>.<namespace>[.svc[.cluster.local]]),
        rendered or not; an address (on the nodes' network or outside the cluster); or a host name, resolved at run
        time, somewhere outside the cluster (public or private addresses, not the nodes': said in a note)."""
        m = re.fullmatch(r"(https?)://([A-Za-z0-9.:\[\]-]+?)(?::([0-9]{1,5}))?/?", url.strip())
        if not m:
            return None, None, f"{where} is {url[:100]!r}, not a URL http(s)://host[:port]"
        host, port = m.group(2).strip("[]").lower(), int(m.group(3) or (443 if m.group(1) == "https" else 80))
        shown = f"{what} ({m.group(1)}://{host}:{port})"
        svc = re.fullmatch(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?)\.([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.svc(\.cluster\.local)?)?", host)
        if svc and (svc.group(5) or svc.group(3) in self.ns_labels):
            name, ns = svc.group(1), svc.group(3)
            if (ns, name) in self.services:
                return Service(ns, name, port), port, ""
            if any((o.get("metadata") or {}).get("namespace") == ns for _r, o in self.objects):
                return None, None, f"{where} names Service {ns}/{name}, which is not rendered"
            # Another team's Service (an in-cluster MinIO): its pods' labels are not known, its targetPort taken as
            # its port.
            return Pods(ns, {}, f"{shown}: Service {ns}/{name}'s pods",
                        unrendered=f"Service {ns}/{name} is not the platform's: any pod of {ns}, port {port}"), port, ""
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            ip = None
        if ip is not None:
            cidr = f"{ip}/{ip.max_prefixlen}"
            if any(ip in ipaddress.ip_network(n, strict=False) for n in self.network.node_cidrs):
                return Endpoint(f"{shown}, on the nodes' network", (cidr,), port, on_nodes=True), port, ""
            return Endpoint(shown, (cidr,), port), port, ""
        from gpu_platform.preflight.fit.nodes import PRIVATE_RANGES, PUBLIC_RANGES

        self.notes.append(f"{what}: {host} is resolved at run time; judged as an address outside the cluster (public "
                          f"or private) on port {port}, not a node's (an address in the URL is checked as it is)")
        return Endpoint(shown, tuple(PRIVATE_RANGES) + tuple(PUBLIC_RANGES), port), port, ""

    def service_backends(self, svc: Service) -> tuple[list[tuple[Peer, int]], str]:
        """(pod, container port) for each pod the Service selects on its port; or [] and why not."""
        obj = self.services.get((svc.namespace, svc.name))
        if obj is None:
            return [], f"Service {svc.namespace}/{svc.name} is not rendered"
        spec = obj.get("spec") or {}
        port = next((p for p in spec.get("ports") or []
                     if (isinstance(svc.port, int) and p.get("port") == svc.port) or p.get("name") == svc.port), None)
        if port is None:
            return [], f"Service {svc.namespace}/{svc.name} has no port {svc.port}"
        selector = spec.get("selector")
        if not selector:
            return [], f"Service {svc.namespace}/{svc.name} selects no pods (its endpoints are kept by someone else)"
        pods = [p for p in self.pods + self.select(DNS) if p.namespace == svc.namespace
                and all(p.labels.get(k) == str(v) for k, v in selector.items())]
        if not pods:
            return [], f"Service {svc.namespace}/{svc.name} selects {selector}, which no rendered pod carries"
        target = port.get("targetPort", port.get("port"))
        proto = str(port.get("protocol") or "TCP")
        out = []
        for pod in pods:
            if isinstance(target, int) or str(target).isdigit():
                out.append((pod, int(target)))
                continue
            number = next((n for name, n, pr in pod.ports if name == target and pr == proto), None)
            if number is None:
                return [], (f"Service {svc.namespace}/{svc.name} port {svc.port} targets {target!r}, which {pod.what} "
                            "does not declare")
            out.append((pod, number))
        return out, ""


def _oid(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name')}"


# ---------------------------------------------------------------------------------------------
# The dataplane, from the network model and the rendered CNI
# ---------------------------------------------------------------------------------------------


def dataplane(network: Any, releases: Iterable[Any]) -> Dataplane:
    """The network model's dataplane; for Cilium on Linode its rendered agent configuration (the chart's
    cilium-config ConfigMap: policy-cidr-match-mode, enable-policy) and chart version."""
    kind = network.dataplane
    if kind == "none":
        return Dataplane(network.description, enforced=False)
    if kind in ("calico", "aws-vpc-cni", "other-upstream"):
        return Dataplane(f"{network.description}, upstream semantics: ipBlock matches any address")
    if kind == "gke-dataplane-v2":
        # GKE manages the agent's configuration: Cilium's defaults (no policy-cidr-match-mode).
        return Dataplane(f"{network.description}, Cilium: ipBlock never matches pods or nodes", cilium=True)
    if network.cilium_cidr_match_mode is not None:
        # The cluster's own Cilium (cloud kubernetes): its settings as the stack file states them.
        modes = set(network.cilium_cidr_match_mode)
        enable = network.cilium_enable_policy or "default"
        name = (f"{network.description}: Cilium (policy-cidr-match-mode: {' '.join(sorted(modes)) or 'none'}"
                f"{'' if enable == 'default' else f', enable-policy: {enable}'})")
        return Dataplane(name, enforced=enable != "never", cilium=True, cidr_matches_nodes="nodes" in modes,
                         cidr_matches_pods="pods" in modes, enforce_always=enable == "always")
    config: Mapping[str, Any] = {}
    version = None
    for rel in releases:
        for obj in rel.objects:
            meta = obj.get("metadata") or {}
            if obj.get("kind") == "ConfigMap" and (meta.get("namespace"), meta.get("name")) == CILIUM_CONFIGMAP:
                config = obj.get("data") or {}
                version = rel.version
    modes = set(str(config.get("policy-cidr-match-mode", "")).replace(",", " ").split())
    name = f"Cilium{' ' + version if version else ''} (policy-cidr-match-mode: {' '.join(sorted(modes)) or 'none'})"
    return Dataplane(name, cilium=True, cidr_matches_nodes="nodes" in modes, cidr_matches_pods="pods" in modes,
                     enforce_always=str(config.get("enable-policy", "default")) == "always",
                     cluster_name=str(config.get("cluster-name") or "default"))


# ---------------------------------------------------------------------------------------------
# Derived flows
# ---------------------------------------------------------------------------------------------


def _webhook_flows(cluster: _Cluster) -> list[FlowSpec]:
    """The API server calls every admission webhook, CRD conversion webhook and APIService backend it is
    given, at the Service's port (clientConfig.service.port, default 443)."""
    calls: dict[tuple[str, str, int], list[str]] = {}
    for _r, o in cluster.objects:
        kind, meta = o.get("kind"), o.get("metadata") or {}
        if kind in WEBHOOK_KINDS:
            for wh in o.get("webhooks") or []:
                svc = (wh.get("clientConfig") or {}).get("service")
                if svc:
                    calls.setdefault((svc.get("namespace"), svc.get("name"), int(svc.get("port") or 443)),
                                     []).append(str(wh.get("name")))
        elif kind == "CustomResourceDefinition":
            conv = (o.get("spec") or {}).get("conversion") or {}
            svc = ((conv.get("webhook") or {}).get("clientConfig") or {}).get("service")
            if conv.get("strategy") == "Webhook" and svc:
                calls.setdefault((svc.get("namespace"), svc.get("name"), int(svc.get("port") or 443)),
                                 []).append(f"conversion of {meta.get('name')}")
        elif kind == "APIService":
            svc = (o.get("spec") or {}).get("service")
            if svc:
                calls.setdefault((svc.get("namespace"), svc.get("name"), int(svc.get("port") or 443)),
                                 []).append(f"APIService {meta.get('name')}")
    out = []
    for (ns, name, port), what in sorted(calls.items()):
        shown = ", ".join(what[:3]) + (f" and {len(what) - 3} more" if len(what) > 3 else "")
        out.append(FlowSpec(f"API server to webhook {ns}/{name}", APISERVER, Service(ns, name, port),
                            f"the API server calls it for {shown}"))
    return out


def _scrape_flows(cluster: _Cluster) -> list[FlowSpec]:
    """Prometheus scrapes every Service endpoint its ServiceMonitors select (by the Service port's name)
    and every pod port its PodMonitors select; a Service with no selector is the API server's or the
    kubelet's (scrape.CLUSTER_SERVICES)."""
    out: dict[tuple, FlowSpec] = {}
    for _r, mon in cluster.objects:
        kind = mon.get("kind")
        if kind not in ("ServiceMonitor", "PodMonitor") or not str(mon.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
            continue
        spec, name = mon.get("spec") or {}, (mon.get("metadata") or {}).get("name")
        if kind == "ServiceMonitor":
            for (ns, sname), svc in sorted(cluster.services.items(), key=lambda kv: str(kv[0])):
                if not _namespaces_ok(mon, ns) or not _selector_matches(
                        spec.get("selector"), dict((svc.get("metadata") or {}).get("labels") or {})):
                    continue
                for ep in spec.get("endpoints") or []:
                    port = ep.get("port")
                    if port and any(p.get("name") == port for p in (svc.get("spec") or {}).get("ports") or []):
                        out.setdefault((ns, sname, port), FlowSpec(
                            f"Prometheus to {ns}/{sname} ({port})", PROMETHEUS, Service(ns, sname, port),
                            f"ServiceMonitor {name}"))
            if spec.get("selector") and _selector_matches(spec["selector"], {"app.kubernetes.io/name": "kubelet",
                                                                               "k8s-app": "kubelet"}):
                out.setdefault(("nodes", 10250), FlowSpec("Prometheus to every kubelet (10250)", PROMETHEUS, NODES,
                                                          f"ServiceMonitor {name}", port=10250))
            if spec.get("selector") and _selector_matches(spec["selector"], {"component": "apiserver",
                                                                               "provider": "kubernetes"}):
                out.setdefault(("apiserver",), FlowSpec("Prometheus to the API server", PROMETHEUS, APISERVER,
                                                        f"ServiceMonitor {name}"))
        else:
            for ep in spec.get("podMetricsEndpoints") or []:
                port = ep.get("port")
                pods = [p for p in cluster.pods if _namespaces_ok(mon, p.namespace)
                        and label_selector_matches(spec.get("selector"), dict(p.labels))]
                for pod in pods:
                    number = next((n for pn, n, _pr in pod.ports if pn == port), None)
                    if number is not None:
                        out.setdefault((pod.what, port), FlowSpec(
                            f"Prometheus to {pod.what} ({port})", PROMETHEUS,
                            Pods(str(pod.namespace), dict(pod.labels), pod.what), f"PodMonitor {name}", port=number))
    return list(out.values())


# ---------------------------------------------------------------------------------------------
# Checking
# ---------------------------------------------------------------------------------------------


def _what_kind(peer: Peer) -> str:
    if peer.kind == POD:
        return "a pod"
    if "kube-apiserver" in peer.entities:
        return "the API server" + (" (on the nodes)" if peer.kind == NODE else "")
    return "a node" if peer.kind == NODE else "an address outside the cluster"


def _explain(decision: Decision, src: Peer, dst: Peer, dp: Dataplane) -> str:
    parts = []
    for label, side, pod in (("egress", decision.egress, src), ("ingress", decision.ingress, dst)):
        if side.allowed:
            continue
        if side.denied_by:
            parts.append(f"{pod.what}'s {label} is denied by {', '.join(sorted(set(side.denied_by)))}")
            continue
        text = (f"{pod.what}'s {label} is isolated by {', '.join(sorted(set(side.isolated_by)))} and no rule of them "
                f"allows it")
        if side.cidr_skipped:
            other = dst if label == "egress" else src
            text += (f" ({', '.join(sorted(set(side.cidr_skipped)))} has an ipBlock covering its address, but {dp.name} "
                     f"does not apply ipBlock/CIDR rules to {_what_kind(other)}"
                     + (": select it with podSelector/namespaceSelector instead)" if other.kind == POD else
                        " through 0.0.0.0/0 or ::/0, even with policy-cidr-match-mode nodes (cilium/cilium#47827): "
                        "only a narrower range that holds the nodes' addresses, and no NetworkPolicy selector can "
                        "select it)" if dp.cidr_matches_nodes else
                        " unless its policy-cidr-match-mode lists nodes, and no NetworkPolicy selector can select it)"))
        parts.append(text)
    return "; ".join(parts)


def _fix(decision: Decision, src: Peer, dst: Peer, dp: Dataplane) -> str:
    """What lets a denied flow through, by what the blocked side's other end is: a pod is selected by
    podSelector/namespaceSelector; a node or an API server on the nodes by no selector: an ipBlock reaches it where the
    CNI applies one (upstream semantics, Cilium with policy-cidr-match-mode nodes), or on Cilium a CiliumNetworkPolicy
    entity (Documentation/security/policy/layer3.rst "Entities based": kube-apiserver, host, remote-node)."""
    egress_blocked = not decision.egress.allowed
    side = decision.egress if egress_blocked else decision.ingress
    other = dst if egress_blocked else src
    if side.denied_by:
        return f"remove or narrow the deny rule of {', '.join(sorted(set(side.denied_by)))} that matches it"
    where = ("allow it in the policy that isolates that side (or the chart value that renders it)")
    if other.kind == POD:
        return (f"{where}, selecting the other side with podSelector/namespaceSelector"
                + (" (on Cilium an ipBlock never matches a pod)" if dp.cilium else ""))
    addresses = ", ".join(other.addresses[:4]) + (", ..." if len(other.addresses) > 4 else "")
    if other.kind == EXTERNAL:
        return f"{where} with an ipBlock covering {_what_kind(other)}'s addresses ({addresses})"
    entities = "kube-apiserver" if "kube-apiserver" in other.entities else "host, remote-node"
    if dp.cilium:
        return (f"{_what_kind(other)} is no pod, so no podSelector/namespaceSelector selects it: on Cilium either let "
                f"ipBlock rules match nodes (policy-cidr-match-mode: nodes, the Helm value policyCIDRMatchMode: nodes; "
                f"on cloud kubernetes also kubernetes.network.cilium.policyCidrMatchMode: [nodes]), so that an ipBlock "
                f"covering {addresses} applies, or allow the pods a CiliumNetworkPolicy "
                f"{'egress toEntities' if egress_blocked else 'ingress fromEntities'}: [{entities}] "
                "(docs/quickstart-kubernetes.md \"The network\")")
    return (f"{_what_kind(other)} is no pod, so no podSelector/namespaceSelector selects it: {where} with an ipBlock "
            f"covering its addresses ({addresses}), which this CNI applies to nodes (upstream semantics)")


def _check(cluster: _Cluster, dp: Dataplane, spec: FlowSpec, derived: bool) -> list[FlowResult]:
    def result(src: str, dst: str, port: Optional[int], proto: str, verdict: str, reason: str = "",
               policies: Iterable[str] = ()) -> FlowResult:
        pols = sorted(set(policies))
        return FlowResult(spec.name, src, dst, port, proto, verdict, spec.why, derived=derived, reason=reason,
                          policies=pols, releases=sorted({cluster.release_of.get(p, "?") for p in pols}),
                          expected=spec.expect)

    src_peers = cluster.select(spec.source) if isinstance(spec.source, Pods) else (
        [cluster.place(spec.source)] if isinstance(spec.source, Place) else [])
    src_what = spec.source.what if isinstance(spec.source, (Pods, Place)) else f"Service {spec.source.name}"
    destination: Any = spec.destination
    dst_port = spec.port
    if isinstance(destination, Place) and destination.kind in (ARTIFACT_STORE.kind, CHECKPOINT_BUCKET.kind):
        destination, resolved_port, why = cluster.resolve(destination)
        if destination is None:
            return [result(src_what, spec.destination.what, None, spec.protocols[0], "unresolved", why)]
        dst_port = resolved_port if resolved_port is not None else dst_port
    if not src_peers:
        return [result(src_what, _dst_what(destination), dst_port, spec.protocols[0], "unresolved",
                       f"no rendered pod in {spec.source.namespace} carries {dict(spec.source.labels)}")]
    if isinstance(destination, Service):
        backends, why = cluster.service_backends(destination)
        if not backends:
            return [result(src_what, _dst_what(destination), None, spec.protocols[0], "unresolved", why)]
    elif isinstance(destination, Pods):
        dsts = cluster.select(destination)
        if not dsts:
            return [result(src_what, _dst_what(destination), dst_port, spec.protocols[0], "unresolved",
                           f"no rendered pod in {destination.namespace} carries {dict(destination.labels)}")]
        backends = [(d, int(dst_port or 0)) for d in dsts]
    elif isinstance(destination, Endpoint):
        peer = Peer(destination.what, NODE if destination.on_nodes else EXTERNAL, addresses=destination.addresses,
                    entities=frozenset({"host", "remote-node"} if destination.on_nodes else {"world"}))
        backends = [(peer, destination.port)]
    else:
        place = cluster.place(destination)
        port = dst_port if dst_port is not None else (
            cluster.network.apiserver_port if destination.kind == "apiserver" else 443)
        backends = [(place, port)]
    out = []
    for proto in spec.protocols:
        failed = None
        ports = sorted({p for _d, p in backends})
        for src in src_peers:
            for dst, port in backends:
                d = decide(src, dst, port, proto, cluster.policies, dp)
                if spec.expect == "denied" and not d.unsupported:
                    if d.allowed:
                        failed = result(src.what, dst.what, port, proto, "allowed",
                                        f"nothing drops it{'' if dp.enforced else ' (' + dp.name + ')'}")
                    continue
                if d.unsupported:
                    failed = result(src.what, dst.what, port, proto, "not-evaluated",
                                    "a Cilium policy uses what this check does not evaluate: "
                                    + "; ".join(sorted(set(d.unsupported))))
                elif not d.allowed:
                    side = d.egress if not d.egress.allowed else d.ingress
                    failed = result(src.what, dst.what, port, proto, "denied", _explain(d, src, dst, dp),
                                    side.denied_by or side.isolated_by)
                    failed.fix = _fix(d, src, dst, dp)
                if failed:
                    break
            if failed:
                break
        out.append(failed or result(src_what, _dst_what(destination), ports[0] if len(ports) == 1 else None, proto,
                                    spec.expect))
    return out


def _dst_what(dst: Union[Pods, Service, Place, Endpoint]) -> str:
    if isinstance(dst, Service):
        return f"Service {dst.namespace}/{dst.name}"
    return dst.what


def check_flows(network: Any, releases: Iterable[Any], templates: Iterable[Any],
                declared: Iterable[FlowSpec] = DECLARED, cloud: Optional[str] = None) -> Optional[FlowReport]:
    """Every declared flow whose part is installed, and every derived flow, checked. None without a
    network model (nothing to check against)."""
    if network is None:
        return None
    releases = list(releases)
    cluster = _Cluster(network, releases, list(templates))
    dp = dataplane(network, releases)
    report = FlowReport(dp.name)
    cilium_policies = [p for p in cluster.policies if p.kind in CILIUM_KINDS]
    if cilium_policies and not dp.cilium:
        report.notes.append(f"{len(cilium_policies)} Cilium polic{'y' if len(cilium_policies) == 1 else 'ies'} rendered, "
                            f"but the dataplane is not Cilium: not evaluated")
    if not dp.enforced:
        report.notes.append(f"{dp.name}: every flow is allowed")
    if cloud == "kubernetes" and network.dataplane != "none":
        report.notes.append("kubernetes.network is the stack file's, not read from the cluster offline: `pulumi "
                            "preview` and `up` read Cilium's kube-system/cilium-config (policy-cidr-match-mode, "
                            "enable-policy) and the default/kubernetes EndpointSlice (the API server's addresses and "
                            "port) and stop, naming the key, where the cluster says otherwise (podCidrs, and a CNI "
                            "other than Cilium, are not read)")
    specs = [(s, False) for s in declared if all(n in cluster.ids for n in s.needs)
             and (not s.clouds or cloud in s.clouds)]
    specs += [(s, True) for s in _webhook_flows(cluster) + _scrape_flows(cluster)]
    for spec, derived in specs:
        report.results.extend(_check(cluster, dp, spec, derived))
    report.notes.extend(dict.fromkeys(cluster.notes))
    return report


def report_json(report: FlowReport) -> str:
    return json.dumps(report.to_json(), indent=2, sort_keys=True)
