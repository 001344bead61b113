"""A throwaway Kubernetes control plane of local processes on 127.0.0.1: etcd, kube-apiserver (the
admission plugins the clouds enable, Node+RBAC authorization), kube-controller-manager,
kube-scheduler, and KWOK as the kubelet of every node it is told to manage. Keys, data and kubeconfigs
live in a temporary folder removed on exit; logs go to the run folder.

With `webhook_proxy=True`, kube-apiserver is started with --egress-selector-config-file sending its `cluster`
network context (its calls to Service-referenced webhooks, to aggregated API servers and to kubelets: k8s.io/apiserver
v0.35.4 pkg/util/webhook/authentication.go, kube-aggregator v0.35.4 pkg/apiserver/apiserver.go, kubernetes v1.35.4
pkg/kubelet/client/kubelet_client.go) through `cp.webhook_proxy` (gpu_platform/rehearsal/webhook_proxy.py), an HTTP
CONNECT proxy on a Unix socket that tunnels a Service's cluster IP to the local address registered for it: a
Service-referenced webhook is called as its configuration says, with nothing of the configuration changed."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import tempfile
import time
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Mapping, Optional

from gpu_platform.rehearsal import binaries, pki
from gpu_platform.rehearsal.kube import Client, kubeconfig, wait_for
from gpu_platform.rehearsal.processes import ProcessGroup, Proc, free_port
from gpu_platform.rehearsal.webhook_proxy import WebhookProxy, egress_selector_config

KUBERNETES_SERVICE_CIDR = "10.96.0.0/16"
# How long kube-apiserver works on a request before answering 504 "unable to return a response in the time
# allotted" (--request-timeout; its default is 60 s). Not below the Pulumi provider's own client timeout
# (engine.PROVIDER_CLIENT_TIMEOUT_S): on CI (2026-11-29) two engine runs installing Kubeflow's CRDs at once on two
# cores took the API server past 60 s to serve /openapi/v2, and both `pulumi up`s failed while the provider would
# still have waited. Watches are not affected (--min-request-timeout governs them). It also lets priority and
# fairness queue a request longer before a 429 (half its deadline, a quarter of this without one, never over a
# minute: k8s.io/apiserver pkg/server/config.go, filters/priority-and-fairness.go getRequestWaitContext).
REQUEST_TIMEOUT_S = 300
ISSUER = "https://kubernetes.default.svc.cluster.local"
# KWOK manages the nodes carrying this annotation (and no other node).
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# The admission plugins the clouds' API servers run (kube-apiserver's default set, which GKE, EKS and
# kubeadm keep on, spelled out so that none is lost): Pod Security, LimitRanger, ResourceQuota, the
# webhooks and ValidatingAdmissionPolicy among them. ExtendedResourceToleration is added where the
# node model says the cloud runs it (GKE, EKS).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle", "LimitRanger", "ServiceAccount", "TaintNodesByCondition", "PodSecurity", "Priority",
    "DefaultTolerationSeconds", "DefaultStorageClass", "StorageObjectInUseProtection", "PersistentVolumeClaimResize",
    "RuntimeClass", "CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest",
    "CertificateSubjectRestriction", "DefaultIngressClass", "MutatingAdmissionPolicy", "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionWebhook", "ResourceQuota", "NodeRestriction",
)
STARTUP_TIMEOUT = 60.0
# The Go garbage collector's target for kube-apiserver (GOGC; Go's default is 100: collect when the heap has grown
# by as much as was live after the last collection). Installing the platform's CRDs (Kubeflow's, Kueue's, the
# Prometheus operator's: their schemas, OpenAPI documents and validators) left kube-apiserver with a heap of about
# 0.7 GB and the collector took about a fifth of its CPU: in linode-dev's engine run alone (2026-11-30) it used 78
# CPU-seconds at 100, 62 at 200, 60 at 400, for a peak resident size of 1.5, 2.3 and 3.2 GB. kube-apiserver is a
# third of `make test`'s CPU, on two cores. 200 takes most of the saving for 0.8 GB more per control plane. A GOGC
# already in the environment is kept (GOGC=100 gives Go's default back).
APISERVER_GOGC = "200"


def apiserver_env(environ: Mapping[str, str]) -> dict[str, str]:
    """kube-apiserver's environment: `environ` with APISERVER_GOGC unless it names a GOGC of its own (an empty one
    is none: Go reads it as unset)."""
    return {**environ, "GOGC": environ.get("GOGC") or APISERVER_GOGC}


class ControlPlaneError(RuntimeError):
    pass


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that `finally` tears the control plane down."""


def _on_sigterm(signum, frame):
    raise _Terminated()


class ControlPlane:
    """`with ControlPlane(log_dir) as cp:` — cp.client is an admin client; everything stops on exit."""

    def __init__(self, log_dir: Path, extended_resource_toleration: bool = False, start_timeout: float = STARTUP_TIMEOUT,
                 webhook_proxy: bool = False, held_images: tuple[str, ...] = ()):
        self.bins = binaries.require_control_plane()
        self.log_dir = log_dir
        self.ert = extended_resource_toleration
        self.start_timeout = start_timeout
        self.tmp: Optional[Path] = None
        self.procs = ProcessGroup(log_dir)
        self.client: Optional[Client] = None
        self.port = 0
        self._old_sigterm = None
        self.timings: dict[str, float] = {}
        self.with_webhook_proxy = webhook_proxy
        self.webhook_proxy: Optional[WebhookProxy] = None
        # Pods with a container whose image contains one of these KWOK leaves Pending, not Ready: the caller writes
        # their status as the kubelet would (controller_host.py: readiness following a process on the host).
        self.held_images = tuple(held_images)

    # --- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> "ControlPlane":
        import threading

        if threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.procs.stop_all()
        if self.webhook_proxy is not None:
            self.webhook_proxy.stop()
            self.webhook_proxy = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    # --- start ---------------------------------------------------------------------------------------

    def _check_alive(self, proc: Proc) -> None:
        if not proc.alive:
            raise ControlPlaneError(f"{proc.name} exited with code {proc.popen.returncode}; its log {proc.log} ends:\n{proc.tail()}")

    def _wait(self, proc: Proc, what: str, check) -> None:
        def probe():
            self._check_alive(proc)
            return check()

        t0 = time.monotonic()
        wait_for(f"{what} ({proc.name}, log {proc.log})", probe, self.start_timeout, 0.3,
                 on_timeout=lambda: f"; its log ends:\n{proc.tail()}")
        self.timings[proc.name] = round(time.monotonic() - t0, 1)

    def start(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="gpu-platform-rehearsal-"))
        pkidir = self.tmp / "pki"
        ca = pki.CA.new("gpu-platform rehearsal CA")
        ca_file = pki.write(pkidir / "ca.crt", ca.cert_pem)
        pki.write(pkidir / "ca.key", pki._key_pem(ca.key), private=True)
        crt, key = ca.issue("kube-apiserver", dns=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                                   "kubernetes.default.svc.cluster.local"], ips=["127.0.0.1", "10.96.0.1"])
        pki.write(pkidir / "apiserver.crt", crt)
        pki.write(pkidir / "apiserver.key", key, private=True)
        sa_priv, sa_pub = pki.service_account_key()
        pki.write(pkidir / "sa.key", sa_priv, private=True)
        pki.write(pkidir / "sa.pub", sa_pub)
        self.ca, self.ca_file = ca, str(ca_file)
        token = secrets.token_urlsafe(32)
        pki.write(pkidir / "tokens.csv", f'{token},rehearsal-admin,rehearsal-admin,"system:masters"\n'.encode(), private=True)

        # etcd
        etcd_port, peer_port = free_port(), free_port()
        etcd = self.procs.start("etcd", [
            self.bins["etcd"], "--name=rehearsal", f"--data-dir={self.tmp / 'etcd'}",
            f"--listen-client-urls=http://127.0.0.1:{etcd_port}", f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}", f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=rehearsal=http://127.0.0.1:{peer_port}", "--unsafe-no-fsync=true",
            "--listen-metrics-urls=", "--log-level=warn"])
        self._wait(etcd, "etcd /health", lambda: _http_ok(f"http://127.0.0.1:{etcd_port}/health"))

        # kube-apiserver
        self.port = free_port()
        plugins = list(ADMISSION_PLUGINS) + (["ExtendedResourceToleration"] if self.ert else [])
        egress = []
        if self.with_webhook_proxy:
            # Listening before kube-apiserver starts; it resolves targets once the admin client exists (below).
            self.webhook_proxy = WebhookProxy(None, self.tmp / "egress-cluster.sock").start()  # type: ignore[arg-type]
            conf = self.tmp / "egress-selector.yaml"
            conf.write_text(egress_selector_config(self.webhook_proxy.path))
            egress = [f"--egress-selector-config-file={conf}"]
        apiserver = self.procs.start("kube-apiserver", [
            self.bins["kube-apiserver"], f"--etcd-servers=http://127.0.0.1:{etcd_port}", "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1", f"--secure-port={self.port}", f"--tls-cert-file={pkidir / 'apiserver.crt'}",
            f"--tls-private-key-file={pkidir / 'apiserver.key'}", f"--client-ca-file={ca_file}",
            f"--token-auth-file={pkidir / 'tokens.csv'}", f"--service-account-issuer={ISSUER}",
            f"--service-account-key-file={pkidir / 'sa.pub'}", f"--service-account-signing-key-file={pkidir / 'sa.key'}",
            f"--service-cluster-ip-range={KUBERNETES_SERVICE_CIDR}", "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(plugins)}", "--allow-privileged=true",
            "--endpoint-reconciler-type=none", "--profiling=false", f"--cert-dir={self.tmp / 'apiserver-certs'}",
            f"--request-timeout={REQUEST_TIMEOUT_S}s", *egress], env=apiserver_env(os.environ))
        self.client = Client("127.0.0.1", self.port, self.ca_file, token)
        if self.webhook_proxy is not None:
            self.webhook_proxy.client = self.client
        self._wait(apiserver, "kube-apiserver /readyz", lambda: self.client.request("GET", "/readyz") == "ok")
        self.server = f"https://127.0.0.1:{self.port}"
        admin_kc = pki.write(self.tmp / "admin.kubeconfig", kubeconfig(self.server, self.ca_file, token).encode(), private=True)
        self.admin_kubeconfig = admin_kc

        # kube-controller-manager: every controller under its own ServiceAccount's credentials
        kcm = self.procs.start("kube-controller-manager", [
            self.bins["kube-controller-manager"], f"--kubeconfig={admin_kc}", f"--authentication-kubeconfig={admin_kc}",
            f"--authorization-kubeconfig={admin_kc}", "--secure-port=0", "--leader-elect=false",
            "--use-service-account-credentials=true", f"--service-account-private-key-file={pkidir / 'sa.key'}",
            f"--root-ca-file={ca_file}", "--controllers=*", f"--service-cluster-ip-range={KUBERNETES_SERVICE_CIDR}",
            "--node-monitor-grace-period=40s", "--terminated-pod-gc-threshold=100", "--v=1"])
        scheduler = self.procs.start("kube-scheduler", [
            self.bins["kube-scheduler"], f"--kubeconfig={admin_kc}", f"--authentication-kubeconfig={admin_kc}",
            f"--authorization-kubeconfig={admin_kc}", "--secure-port=0", "--leader-elect=false", "--v=1"])
        # KWOK: the kubelet of the nodes annotated kwok.x-k8s.io/node=fake, with Stages that make pods
        # Running and Ready without containers (and never complete them: a training pod runs until deleted).
        stages = self.tmp / "kwok.yaml"
        stages.write_text(kwok_stages(self.held_images))
        kwok = self.procs.start("kwok", [
            self.bins["kwok"], f"--kubeconfig={admin_kc}", f"--config={stages}", "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}=fake", "--node-lease-duration-seconds=40",
            "--cidr=10.244.0.0/16", "--node-ip=10.0.0.1"], env={**os.environ, "HOME": str(self.tmp)})
        # The service-account token controller is ready when the default namespace's ServiceAccount exists.
        self._wait(kcm, "kube-controller-manager (the default ServiceAccount)",
                   lambda: self.client.get("v1", "ServiceAccount", "default", "default"))
        for proc in (scheduler, kwok):
            self._check_alive(proc)

    def check_running(self) -> list[str]:
        """Control-plane processes that have exited (by name, with their exit code)."""
        return [f"{p.name} exited with code {p.popen.returncode}" for p in self.procs.procs if not p.alive]


def kwok_stages(held_images: tuple[str, ...] = ()) -> str:
    """The KWOK Stages of kwok-stages.yaml; with `held_images`, pod-ready selects no pod that has a container whose
    image contains one of them (a gojq query per image, DoesNotExist: sigs.k8s.io/kwok v0.8.0
    pkg/utils/expression/query.go and selector.go), so KWOK leaves such a pod Pending."""
    import json

    import yaml

    text = resources.files("gpu_platform.rehearsal").joinpath("kwok-stages.yaml").read_text()
    if not held_images:
        return text
    docs = [d for d in yaml.safe_load_all(text) if d]
    ready = next(d for d in docs if d["metadata"]["name"] == "pod-ready")
    for image in held_images:
        ready["spec"]["selector"]["matchExpressions"].append(
            {"key": f".spec.containers.[] | select(.image | contains({json.dumps(image)})) | .image",
             "operator": "DoesNotExist"})
    return yaml.safe_dump_all(docs, sort_keys=False)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False
