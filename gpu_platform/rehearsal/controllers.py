"""The platform's controllers as local processes: the binary built from the pinned module, the
configuration the chart renders (from its ConfigMap, with only the listening addresses, certificate
handling and leader election changed, each change listed), and the credentials of the ServiceAccount
the chart renders for it (a TokenRequest token in a kubeconfig), so missing RBAC fails as in a cluster."""

from __future__ import annotations

import copy
import os
import re
import socket
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from gpu_platform.rehearsal import binaries, pki, podmounts
from gpu_platform.rehearsal.kube import Client, kubeconfig
from gpu_platform.rehearsal.processes import Proc, ProcessGroup, free_port

READY_TIMEOUT = 60.0
# Kueue's waitForPodsReady in the rehearsal: time only, never behaviour. The stack's `timeout` (a GPU
# node's boot, or an autoscaled Linode pool's join deadline + 3, plus pull/start: 18 to 43 minutes) and
# backoff base (60 s) would make the never-ready drill take hours; these make it about two minutes. backoffLimitCount (the stack's maxRequeues) and
# recoveryTimeout stay as the stack renders them. Listed in the report's configChanges (the never-ready drill's
# own timeout below in the drill's details: configChanges shows what Kueue was last started with).
REHEARSAL_PODS_READY_TIMEOUT_S = 30
REHEARSAL_BACKOFF_BASE_S = 1
# The never-ready drill's own timeout, for its run only (scenarios.never_ready restarts Kueue with it and puts the
# rehearsal's back after): its job's pods never become Ready, so each of its backoffLimitCount + 1 admissions waits
# the whole timeout (about 127 s at 30 s). The other scenarios keep 30 s: their pods need the margin on a loaded machine.
NEVER_READY_DRILL_TIMEOUT_S = 8


@dataclass
class Controller:
    """One platform controller of the rendered releases, matched to its binary by the image it runs."""
    binary: str
    image: str  # a substring of the container image
    release: str = ""
    namespace: str = ""
    deployment: str = ""
    service_account: str = ""
    container: dict = field(default_factory=dict)
    config: Optional[dict] = None  # the Configuration from the chart's ConfigMap
    config_map: str = ""
    webhook_port: int = 0
    health_port: int = 0  # the Configuration's health.healthProbeBindAddress, on 127.0.0.1 (prepare)
    changes: list[str] = field(default_factory=list)
    proc: Optional[Proc] = None
    status: str = "pending"  # pending | running | failed | not-built
    problem: str = ""
    # True: started with the Configuration's own timing (the autoscaling drill: cluster-autoscaler waits 30 s
    # before it scales up for a GPU pod, which the rehearsal's shortened waitForPodsReady would evict first)
    stack_timing: bool = False
    # Set: waitForPodsReady.timeout for a drill of its own instead of REHEARSAL_PODS_READY_TIMEOUT_S (never-ready)
    pods_ready_timeout_s: Optional[int] = None

    @property
    def built(self) -> bool:
        return binaries.find(self.binary) is not None


SPECS = (("kueue-manager", "kueue/kueue:"), ("jobset-manager", "jobset/jobset:"),
         ("trainer-manager", "trainer/trainer-controller-manager:"),
         ("prometheus-operator", "prometheus-operator/prometheus-operator:"))


# Controllers the platform installs that the rehearsal does not run (issue 34 item 8), matched by the image
# their Deployment runs, with why. Their pods are KWOK's (Ready, doing nothing), their webhooks are removed
# (install.py): the report lists each as NOT REHEARSED with the reason.
KATIB_WEBHOOKS = ("its webhooks are removed: the pod mutator (mutator.pod.katib.kubeflow.org, failurePolicy Fail over "
                  "every pod of a namespace labelled katib.kubeflow.org/metrics-collector-injection=enabled, i.e. "
                  "training) and the Experiment defaulter and validator")
KATIB_WHY = ("github.com/kubeflow/katib v0.19.0 is served by the Go module proxy but not built here: its controller "
             "makes its own webhook certificate and patches the CA into the webhook configurations (katib-config "
             "init.certGenerator, open-policy-agent cert-controller's rotator, DNS name katib-controller.kubeflow.svc), "
             "which the rehearsal's local webhook URLs would need turned off and replaced by a certificate in its fixed "
             "folder, as trainer-manager's is; not done yet")
PIPELINES_WHY = ("the Go module proxy refuses github.com/kubeflow/pipelines (403 \"not available\", checked 2026-11-28) "
                 "and ../shared/sources has no copy, so Pipelines' Go servers cannot be built from a pinned module")
NOT_RUN: tuple[tuple[str, str, str], ...] = (
    ("katib/katib-controller:", "Katib's controller", f"{KATIB_WHY}; {KATIB_WEBHOOKS}"),
    ("katib/katib-db-manager:", "Katib's DB manager", f"{KATIB_WHY}; it also needs MySQL (katib-mysql), which is "
                                                       "not a Go module"),
    ("katib/katib-ui:", "Katib's UI", KATIB_WHY),
    ("kfp-api-server:", "Pipelines' API server", PIPELINES_WHY),
    ("kfp-persistence-agent:", "Pipelines' persistence agent", PIPELINES_WHY),
    ("kfp-scheduled-workflow-controller:", "Pipelines' scheduled-workflow controller", PIPELINES_WHY),
    ("kfp-viewer-crd-controller:", "Pipelines' viewer controller", PIPELINES_WHY),
    ("kfp-metadata-writer:", "Pipelines' metadata writer", PIPELINES_WHY),
    ("argoproj/workflow-controller:", "Argo's workflow controller (Pipelines' runs)",
     "github.com/argoproj/argo-workflows/v4 v4.0.5 is served by the proxy, but it runs only the workflows "
     "Pipelines' API server compiles, which cannot be built (" + PIPELINES_WHY + ")"),
)


def not_run(releases: list[Any]) -> list[str]:
    """A NOT REHEARSED line for each Deployment of the rendered releases that runs a NOT_RUN controller."""
    out = []
    for rel in releases:
        for obj in rel.objects:
            if obj.get("kind") != "Deployment":
                continue
            pod = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
            images = [str(c.get("image", "")) for c in pod.get("containers") or []]
            for image, what, why in NOT_RUN:
                if any(image in i for i in images):
                    meta = obj.get("metadata") or {}
                    out.append(f"{what} ({rel.name}: Deployment {meta.get('namespace') or rel.namespace}/"
                               f"{meta.get('name')}, {next(i for i in images if image in i)}): not run: {why}")
    return out


def _config_path(container: dict) -> Optional[str]:
    for arg in container.get("args") or []:
        if str(arg).startswith("--config="):
            return str(arg).split("=", 1)[1]
    return None


def find_controllers(releases: list[Any]) -> list[Controller]:
    """Each controller Deployment of the rendered releases, with its ServiceAccount and Configuration."""
    found = []
    for binary, image in SPECS:
        for rel in releases:
            for obj in rel.objects:
                if obj.get("kind") != "Deployment":
                    continue
                pod = obj["spec"]["template"]["spec"]
                for c in pod.get("containers") or []:
                    if image not in str(c.get("image", "")):
                        continue
                    ctl = Controller(binary, image, rel.name, obj["metadata"].get("namespace") or rel.namespace,
                                     obj["metadata"]["name"], pod.get("serviceAccountName") or "default", c)
                    path = _config_path(c)
                    if path:
                        mount = next((m for m in c.get("volumeMounts") or [] if m.get("mountPath") == path
                                      or path.startswith(m.get("mountPath", "") + "/")), None)
                        vol = next((v for v in pod.get("volumes") or [] if mount and v.get("name") == mount["name"]), None)
                        cm_name = ((vol or {}).get("configMap") or {}).get("name")
                        cm = next((o for o in rel.objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == cm_name), None)
                        if cm is not None:
                            key = mount.get("subPath") or next(iter(cm.get("data") or {}), None)
                            ctl.config_map = cm_name
                            ctl.config = yaml.safe_load((cm.get("data") or {}).get(key) or "") or {}
                    found.append(ctl)
    return found


def _set(cfg: dict, dotted: str, value: Any, changes: list[str]) -> None:
    node = cfg
    keys = dotted.split(".")
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    old = node.get(keys[-1], "(unset)")
    if old != value:
        node[keys[-1]] = value
        changes.append(f"{dotted}: {old} -> {value}")


def prepare(ctl: Controller, run_dir: Path, cert_dir: Path, as_rendered: bool = False, pod_paths: bool = False) -> list[str]:
    """argv for the controller; its Configuration rewritten to local ports and the given certificates.
    `as_rendered` (the engine run: gpu_platform/rehearsal/controller_host.py): the chart's own certificate
    management and leader election stay as the Configuration renders them, and `cert_dir` is where the rehearsal
    mounts the webhook Secret, as the kubelet mounts the pod's volume at the Configuration's certDir. With
    `pod_paths` the process sees the pod's volumes at the pod's own paths (podmounts.py), so no certDir is set: the
    certificate folder is where the Deployment mounts the Secret (the Trainer's has no certDir field at all)."""
    ctl.webhook_port = ctl.webhook_port or free_port()
    metrics, health = free_port(), free_port()
    ctl.health_port = health
    exe = str(binaries.find(ctl.binary))
    if ctl.binary == "prometheus-operator":
        args = []
        for a in ctl.container.get("args") or []:
            key = str(a).split("=", 1)[0]
            if key in ("--web.cert-file", "--web.key-file", "--web.listen-address", "--web.enable-tls"):
                continue
            args.append(str(a))
        args += ["--web.enable-tls=true", f"--web.cert-file={cert_dir / 'tls.crt'}", f"--web.key-file={cert_dir / 'tls.key'}",
                 f"--web.listen-address=127.0.0.1:{ctl.webhook_port}"]
        ctl.changes = [f"--web.listen-address=127.0.0.1:{ctl.webhook_port}", "--web.cert-file/--web.key-file: the rehearsal's 127.0.0.1 certificate"]
        return [exe, *args]
    cfg = copy.deepcopy(ctl.config or {})
    changes: list[str] = []
    if not as_rendered:
        _set(cfg, "leaderElection.leaderElect", False, changes)
    elif (cfg.get("leaderElection") or {}).get("leaderElect") and not cfg["leaderElection"].get("resourceNamespace"):
        # In a pod, controller-runtime reads the namespace from the ServiceAccount mount; on the host it must be said.
        _set(cfg, "leaderElection.resourceNamespace", ctl.namespace, changes)
    _set(cfg, "webhook.port", ctl.webhook_port, changes)
    _set(cfg, "webhook.host", "127.0.0.1", changes)
    _set(cfg, "metrics.bindAddress", f"127.0.0.1:{metrics}", changes)
    _set(cfg, "health.healthProbeBindAddress", f"127.0.0.1:{health}", changes)
    if as_rendered:
        if not pod_paths:
            _set(cfg, "webhook.certDir", str(cert_dir), changes)
        if ctl.binary == "trainer-manager":  # the TrainJob status server listens on all interfaces otherwise
            _set(cfg, "statusServer.port", free_port(), changes)
    elif ctl.binary == "trainer-manager":
        _set(cfg, "certManagement.enable", False, changes)
        _set(cfg, "statusServer.port", free_port(), changes)
    else:
        _set(cfg, "internalCertManagement.enable", False, changes)
        _set(cfg, "webhook.certDir", str(cert_dir), changes)
    if ctl.binary == "kueue-manager" and isinstance(cfg.get("waitForPodsReady"), dict) and not ctl.stack_timing:
        _set(cfg, "waitForPodsReady.timeout", f"{ctl.pods_ready_timeout_s or REHEARSAL_PODS_READY_TIMEOUT_S}s", changes)
        if isinstance(cfg["waitForPodsReady"].get("requeuingStrategy"), dict):
            _set(cfg, "waitForPodsReady.requeuingStrategy.backoffBaseSeconds", REHEARSAL_BACKOFF_BASE_S, changes)
    ctl.changes = changes
    conf = run_dir / f"{ctl.binary}.config.yaml"
    conf.write_text(yaml.safe_dump(cfg, sort_keys=True))
    args = [f"--config={conf}"]
    for a in ctl.container.get("args") or []:
        if not str(a).startswith("--config="):
            args.append(str(a))
    if ctl.binary == "kueue-manager":
        # Kueue's visibility API is an aggregated API server of its own (with its own certificates):
        # not rehearsed; the gate keeps Kueue from starting it.
        args.append("--feature-gates=VisibilityOnDemand=false")
        ctl.changes.append("--feature-gates=VisibilityOnDemand=false (the visibility API server is not rehearsed)")
    return [exe, *args]


def _env(ctl: Controller, kubeconfig_path: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(kubeconfig_path.parent), "KUBECONFIG": str(kubeconfig_path)}
    for e in ctl.container.get("env") or []:
        if "value" in e:
            env[e["name"]] = str(e["value"])
        elif (e.get("valueFrom") or {}).get("fieldRef"):
            path = e["valueFrom"]["fieldRef"].get("fieldPath")
            env[e["name"]] = {"metadata.namespace": ctl.namespace, "metadata.name": f"{ctl.deployment}-rehearsal",
                              "spec.serviceAccountName": ctl.service_account}.get(path, "")
    return env


def start(ctl: Controller, client: Client, server: str, ca_file: str, procs: ProcessGroup, run_dir: Path,
          cert_dir: Path, as_rendered: bool = False, mounts: Optional[dict[str, Path]] = None) -> None:
    """`mounts` (pod path -> host folder): the process runs with those mounted at the pod's paths (podmounts.py)."""
    token = client.token(ctl.namespace, ctl.service_account)
    kc = pki.write(run_dir / f"{ctl.binary}.kubeconfig",
                   kubeconfig(server, ca_file, token, f"system:serviceaccount:{ctl.namespace}:{ctl.service_account}").encode(),
                   private=True)
    argv = prepare(ctl, run_dir, cert_dir, as_rendered, pod_paths=bool(mounts))
    if mounts:
        argv = podmounts.in_pod_mounts(argv, mounts)
        ctl.changes.append("run with the pod's volumes at the pod's paths, private to the process: "
                           + ", ".join(f"{path} <- {src}" for path, src in sorted(mounts.items())))
    ctl.proc = procs.start(ctl.binary, argv, env=_env(ctl, kc), cwd=run_dir)
    ctl.status = "running"


def wait_ready(ctl: Controller, ca_pem_file: str, timeout: float = READY_TIMEOUT) -> bool:
    """The webhook port answers TLS with the rehearsal's certificate; False (with the log tail) if the
    process exits or the port stays closed."""
    deadline = time.monotonic() + timeout
    ctx = ssl.create_default_context(cafile=ca_pem_file)
    while time.monotonic() < deadline:
        if ctl.proc is not None and not ctl.proc.alive:
            ctl.status, ctl.problem = "failed", f"exited with code {ctl.proc.popen.returncode}: {last_words(ctl.proc.log)}"
            return False
        try:
            with socket.create_connection(("127.0.0.1", ctl.webhook_port), timeout=1) as s:
                with ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                    return True
        except (OSError, ssl.SSLError):
            time.sleep(0.3)
    ctl.status, ctl.problem = "failed", f"its webhook port {ctl.webhook_port} did not answer within {timeout:.0f}s"
    return False


# A controller's error lines: controller-runtime's JSON/console logs, klog's E-lines, slog's level=error.
_ERROR = re.compile(r'"level"\s*:\s*"(error|fatal|panic)"|\tERROR\t|^E\d{4} |level=error|\bpanic:', re.I)


# Error lines that fail the rehearsal: RBAC refusals, crashes, a manager that cannot start or watch. Other
# error lines (a reconcile retried after an optimistic-concurrency conflict) are reported, not failed.
_FATAL = re.compile(r"forbidden|panic|fatal|unable to (start|create|set ?up|run)|failed to (list|watch|start|get informer)", re.I)


def fatal(lines: list[str]) -> list[str]:
    return [ln for ln in lines if _FATAL.search(ln)]


def last_words(log: Path) -> str:
    """The last error line of a log (else its last line), cut to 500 characters."""
    lines = error_lines(log) or (log.read_text(errors="replace").splitlines()[-1:] if log.exists() else [])
    return lines[-1][:500] if lines else "(empty log)"


def log_size(log: Path) -> int:
    try:
        return log.stat().st_size
    except OSError:
        return 0


def error_lines(log: Path, limit: int = 40, width: Optional[int] = 600, since: int = 0,
                until: Optional[int] = None) -> list[str]:
    """The log's error lines between bytes `since` and `until` (the end by default): a cluster kept for
    several runs reports each run's own."""
    try:
        with log.open("rb") as fh:
            fh.seek(since)
            data = fh.read() if until is None else fh.read(max(0, until - since))
            lines = data.decode(errors="replace").splitlines()
    except OSError:
        return []
    return [ln[:width] if width else ln for ln in lines if _ERROR.search(ln)][:limit]
