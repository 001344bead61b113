"""A controller's pods stood in for by the controller itself on the host, under the engine (engine.py), with nothing the
program or its chart deploys changed.

The rehearsal's KWOK nodes run no container and its control plane has no pod network. For a Deployment that runs a
controller of `HOSTED` (Kueue's kueue-controller-manager, the Kubeflow Trainer's controller manager and JobSet's
controller), once Helm has created it and the ConfigMap its Configuration is mounted from, `ControllerHost` does what a
node and the pod network would:

- runs the controller (controllers.py `start`, the binary built from the pinned module) with the Configuration as the
  chart rendered it, its internal certificate management and leader election included, as the Deployment's
  ServiceAccount (a TokenRequest token), changing only what the host needs: listening addresses on 127.0.0.1, the
  certDir (the rehearsal's folder where the pod's volume is mounted), and Kueue's visibility API server off (it
  writes its certificates to the fixed path /visibility, the pod's emptyDir; the APIServices the chart renders for it
  stay unserved). Each change is listed in `stood_in`.
- mounts the webhook Secret as the kubelet mounts a secret volume: the Deployment's volume mounted at the
  Configuration's webhook.certDir (the chart's `cert`, Secret kueue-webhook-server-cert) is written, key by key, into
  the rehearsal's certDir, again whenever the Secret changes. Kueue's internal certificate management
  (open-policy-agent/cert-controller v0.16.0 pkg/rotator/rotator.go) fills that Secret, injects its CA into the
  webhook configurations and conversion webhooks, then waits for the files (ensureCertsMounted) before it serves.
  trainer-manager and jobset-manager (`AT_POD_PATHS`) read the pod's own paths, which no Configuration field moves
  (the fixed certificate folder, the ServiceAccount mount's namespace file): they run with their pod's volumes at the
  pod's paths, private to the process (podmounts.py), and no certDir is set.
- restarts a process that exits, after the kubelet's back-off (10 s doubling to 5 minutes), as the Deployment's
  restartPolicy Always has the kubelet do: JobSet's and the Trainer's exit once on a first start (see
  `_restart_if_exited`).
- routes the pod network's part: each Service of the Deployment's pods whose port targets the webhook port is
  registered in the control plane's webhook proxy (webhook_proxy.py), so kube-apiserver's calls to the webhooks the
  chart configured (clientConfig.service) reach the process through its egress selector.
- makes the pods' readiness follow the process's: KWOK leaves the Deployment's pods Pending (ControlPlane
  held_images), and each round the pods' status is written as the kubelet writes it after the container's
  readinessProbe (its httpGet path on the process's health port): Running, Ready when the probe answers 200. Helm
  (the Release waits for the Deployment) and so the program's Kueue objects, which the webhooks check, wait for that.
- stops the process when its Deployment is deleted (`helm uninstall`), as the pods go, and unregisters its Services.
"""

from __future__ import annotations

import base64
import datetime
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Optional

from gpu_platform.rehearsal import controllers, podmounts
from gpu_platform.rehearsal.kube import ApiError, Client, PollingLoop, selector

# binary -> the image its Deployment runs (controllers.SPECS): the controllers the engine run hosts.
HOSTED = {b: image for b, image in controllers.SPECS if b in ("kueue-manager", "trainer-manager", "jobset-manager")}
# Those that read their pod's paths (the webhook certificate folder, the ServiceAccount's namespace file), which no
# Configuration field moves: run with the pod's volumes mounted there, private to the process (podmounts.py).
AT_POD_PATHS = frozenset({"trainer-manager", "jobset-manager"})
DEFAULT_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # controller-runtime's, Kueue's default webhook.certDir
MANAGER = "rehearsal-kubelet"


@dataclass
class Hosted:
    ctl: controllers.Controller
    deployment: dict
    cert_dir: Path
    secret: str = ""  # the Secret mounted at the certDir
    mounted: str = ""  # the resourceVersion last written
    services: list[tuple[str, str]] = field(default_factory=list)
    ready: Optional[bool] = None
    stopped: bool = False
    pods: dict[str, bool] = field(default_factory=dict)  # pod name -> Ready as last written
    mounts: Optional[dict[str, Path]] = None  # pod path -> host folder, for a process run at its pod's paths
    restarts: int = 0
    restart_at: float = 0.0  # monotonic time of the next start after an exit (the kubelet's back-off)


class ControllerHost(PollingLoop):
    name = "rehearsal-controller-host"

    def __init__(self, cp, run_dir: Path, interval: float = 1.0):
        super().__init__(cp.client, interval)
        self.cp, self.run_dir = cp, Path(run_dir)
        self.hosted: dict[str, Hosted] = {}
        self.problems: list[str] = []  # a controller that could not be started, with why
        self.events: list[str] = []  # what it did, in order (stood_in)

    # --- the loop ------------------------------------------------------------------------------------------

    def once(self) -> None:
        try:
            self._round()
        except (ApiError, OSError):
            raise  # PollingLoop retries at the next round
        except Exception as exc:  # noqa: BLE001 - a fault of the stand-in is reported, not a dead thread
            line = f"the rehearsal's controller host failed: {type(exc).__name__}: {exc}"
            if line not in self.problems:
                self.problems.append(line)

    def _round(self) -> None:
        for dep in self.client.list("apps/v1", "Deployment"):
            meta = dep["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if key in self.hosted or meta.get("deletionTimestamp"):
                continue
            containers = dep["spec"]["template"]["spec"].get("containers") or []
            if any(image in str(c.get("image")) for c in containers for image in HOSTED.values()):
                self._start(key, dep)
        for key, h in self.hosted.items():
            if not h.stopped:
                self._tend(key, h)

    def _start(self, key: str, dep: dict) -> None:
        ns = dep["metadata"]["namespace"]
        pod = dep["spec"]["template"]["spec"]
        cms = [self.client.get("v1", "ConfigMap", v["configMap"]["name"], ns)
               for v in pod.get("volumes") or [] if v.get("configMap")]
        if any(cm is None for cm in cms):
            return  # Helm creates the ConfigMap before the Deployment; a later round sees it
        if self.client.get("v1", "ServiceAccount", pod.get("serviceAccountName") or "default", ns) is None:
            return
        release = (dep["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name", "")
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", **dep}  # a list's items carry no kind
        objects = [dep, *({"apiVersion": "v1", "kind": "ConfigMap", **cm} for cm in cms)]
        found = controllers.find_controllers([SimpleNamespace(name=release, namespace=ns, objects=objects)])
        ctl = next((c for c in found if c.binary in HOSTED), None)
        if ctl is None:
            return
        ctl.stack_timing = True  # nothing is queued under the engine: the Configuration's own timing
        cert_dir = self.run_dir / f"{ctl.binary}-{ns}" / "certs"
        h = Hosted(ctl, dep, cert_dir)
        cfg = ctl.config or {}
        mount_path = ((cfg.get("webhook") or {}).get("certDir")) or DEFAULT_CERT_DIR
        container = ctl.container
        mount = next((m for m in container.get("volumeMounts") or [] if m.get("mountPath") == mount_path), None)
        vol = next((v for v in pod.get("volumes") or [] if mount and v.get("name") == mount["name"]), None)
        h.secret = ((vol or {}).get("secret") or {}).get("secretName", "")
        if not ctl.built:
            ctl.status, ctl.problem = "not-built", f"no {ctl.binary} binary: run `make rehearsal-build`"
            self.problems.append(f"{key}: {ctl.problem}")
            h.stopped = True
            self.hosted[key] = h
            return
        cert_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        mounts = None
        if ctl.binary in AT_POD_PATHS:
            why = podmounts.check()
            if why:
                ctl.status, ctl.problem = "not-run", f"cannot give it its pod's paths: {why}"
                self.problems.append(f"{key}: {ctl.problem}")
                h.stopped = True
                self.hosted[key] = h
                return
            mounts = {mount_path: cert_dir, podmounts.SERVICE_ACCOUNT_DIR: self._service_account_dir(h)}
        h.mounts = mounts
        # (a refused TokenRequest raises ApiError before the process starts: the next round tries again)
        controllers.start(ctl, self.client, self.cp.server, self.cp.ca_file, self.cp.procs, self.run_dir, cert_dir,
                          as_rendered=True, mounts=mounts)
        self.hosted[key] = h
        self.events.append(
            f"{ctl.binary} run on the host in the place of Deployment {key}'s pods, as ServiceAccount "
            f"{ns}/{ctl.service_account}, with the Configuration of ConfigMap {ns}/{ctl.config_map} as rendered but "
            f"{'; '.join(ctl.changes)} (log {ctl.proc.log})")
        self._register(key, h)

    def _service_account_dir(self, h: Hosted) -> Path:
        """The pod's ServiceAccount volume as the kubelet projects it: a token of the Deployment's ServiceAccount, the
        cluster's CA and the namespace (what the Trainer's and JobSet's controllers and controller-runtime's leader
        election read the namespace from)."""
        ns, sa = h.ctl.namespace, h.ctl.service_account
        folder = h.cert_dir.parent / "serviceaccount"
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        for name, data in (("token", self.client.token(ns, sa)), ("ca.crt", Path(self.cp.ca_file).read_text()),
                           ("namespace", ns)):
            (folder / name).write_text(data)
            os.chmod(folder / name, 0o600)
        return folder

    def _register(self, key: str, h: Hosted) -> None:
        """Each Service of the pods whose port targets the Configuration's webhook port -> the process's."""
        ns, ctl = h.ctl.namespace, h.ctl
        labels = h.deployment["spec"]["template"]["metadata"].get("labels") or {}
        webhook_port = int(((ctl.config or {}).get("webhook") or {}).get("port") or 9443)
        named = {p.get("name"): p.get("containerPort") for p in ctl.container.get("ports") or []}
        proxy = self.cp.webhook_proxy
        for svc in self.client.list("v1", "Service", ns):
            spec = svc.get("spec") or {}
            sel = spec.get("selector") or {}
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                continue
            for port in spec.get("ports") or []:
                target = port.get("targetPort", port.get("port"))
                target = named.get(target) if isinstance(target, str) else target
                if target == webhook_port and proxy is not None:
                    proxy.register(ns, svc["metadata"]["name"], ctl.webhook_port)
                    h.services.append((ns, svc["metadata"]["name"]))
                    self.events.append(f"Service {ns}/{svc['metadata']['name']} (port {port.get('port')} -> "
                                       f"{target}) routed by the webhook proxy to {ctl.binary} at 127.0.0.1:{ctl.webhook_port}")

    def _tend(self, key: str, h: Hosted) -> None:
        ns, name = key.split("/", 1)
        if self.client.get("apps/v1", "Deployment", name, ns) is None:
            self._stop_controller(key, h, "its Deployment was deleted")
            return
        self._mount(key, h)
        self._restart_if_exited(key, h)
        alive = h.ctl.proc is not None and h.ctl.proc.alive
        ready = alive and self._probe(h)
        if h.ready is not None and ready != h.ready:
            self.events.append(f"{key}: readiness of its pods now {ready} ({'probe answered' if ready else 'probe failed' if alive else 'process exited'})")
        elif h.ready is None and ready:
            self.events.append(f"{key}: its pods Ready once the readinessProbe answered on 127.0.0.1:{h.ctl.health_port}")
        h.ready = ready
        self._write_pods(h, ready)

    def _restart_if_exited(self, key: str, h: Hosted) -> None:
        """The kubelet's part for a container that exited (the Deployment's restartPolicy Always): start it again
        after a back-off of 10 s doubling to 5 minutes (kubelet's CrashLoopBackOff), with the pod's volumes as they
        are then. JobSet's exits once on a first start: its chart renders the webhook Secret with empty values, the
        files are there empty, its rotator takes them for mounted and its webhook server finds no certificate in
        them (sigs.k8s.io/jobset v0.12.0 charts internalcert/secret.yaml; cert-controller v0.16.0
        ensureCertsMounted only checks that tls.crt exists)."""
        proc = h.ctl.proc
        if proc is None or proc.alive:
            return
        now = time.monotonic()
        if not h.restart_at:
            h.restart_at = now + min(10 * 2 ** h.restarts, 300)
            self.events.append(f"{h.ctl.binary} of {key} exited with code {proc.popen.returncode} "
                               f"({controllers.last_words(proc.log)}); restarted in {h.restart_at - now:.0f} s, as the "
                               f"kubelet restarts a container")
            return
        if now < h.restart_at:
            return
        h.restarts += 1
        h.restart_at = 0.0
        old_log = proc.log.with_name(f"{proc.log.stem}.{h.restarts - 1}{proc.log.suffix}")
        try:
            proc.log.replace(old_log)  # the exited container's log, kept beside the new one
        except OSError:
            pass
        controllers.start(h.ctl, self.client, self.cp.server, self.cp.ca_file, self.cp.procs, self.run_dir,
                          h.cert_dir, as_rendered=True, mounts=h.mounts)

    def _mount(self, key: str, h: Hosted) -> None:
        if not h.secret:
            return
        secret = self.client.get("v1", "Secret", h.secret, h.ctl.namespace)
        if secret is None or secret["metadata"]["resourceVersion"] == h.mounted or not secret.get("data"):
            return
        for k, v in secret["data"].items():  # the kubelet's atomic writer: a file per key, replaced whole
            tmp = h.cert_dir / f".{k}.tmp"
            tmp.write_bytes(base64.b64decode(v))
            os.chmod(tmp, 0o600)
            os.replace(tmp, h.cert_dir / k)
        first = not h.mounted
        h.mounted = secret["metadata"]["resourceVersion"]
        self.events.append(f"Secret {h.ctl.namespace}/{h.secret} ({', '.join(sorted(secret['data']))}) "
                           f"{'mounted' if first else 'mounted again (changed)'} into {h.cert_dir}, the process's "
                           f"certDir, as the kubelet mounts the pod's volume")

    def _probe(self, h: Hosted) -> bool:
        probe = (h.ctl.container.get("readinessProbe") or {}).get("httpGet") or {}
        path = probe.get("path") or "/readyz"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{h.ctl.health_port}{path}", timeout=2) as resp:
                return 200 <= resp.status < 400
        except (OSError, urllib.error.URLError):
            return False

    def _write_pods(self, h: Hosted, ready: bool) -> None:
        sel = selector(h.deployment["spec"]["selector"].get("matchLabels") or {})
        for pod in self.client.list("v1", "Pod", h.ctl.namespace, selector=sel):
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if meta.get("deletionTimestamp") or not spec.get("nodeName"):
                continue
            if h.pods.get(meta["name"]) == ready:
                continue
            self._write_status(pod, ready)
            h.pods[meta["name"]] = ready

    def _write_status(self, pod: dict, ready: bool) -> None:
        """The pod's status as the kubelet writes it for running containers whose readinessProbe passes (ready) or
        not yet; the host's address (the node's InternalIP) and no pod IP: no pod network."""
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        started = (pod.get("status") or {}).get("startTime") or now
        node = self.client.get("v1", "Node", pod["spec"]["nodeName"]) or {}
        host_ip = next((a["address"] for a in (node.get("status") or {}).get("addresses") or []
                        if a.get("type") == "InternalIP"), None)
        flag = "True" if ready else "False"
        status = {
            "phase": "Running", "startTime": started,
            "conditions": [{"type": "Initialized", "status": "True", "lastTransitionTime": started},
                           {"type": "Ready", "status": flag, "lastTransitionTime": now},
                           {"type": "ContainersReady", "status": flag, "lastTransitionTime": now}],
            "containerStatuses": [{"name": c["name"], "image": c.get("image"), "imageID": "", "ready": ready,
                                   "restartCount": 0, "started": True, "state": {"running": {"startedAt": started}}}
                                  for c in pod["spec"].get("containers") or []],
            **({"hostIP": host_ip, "hostIPs": [{"ip": host_ip}]} if host_ip else {}),
        }
        try:
            self.client.apply({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"]},
                               "status": status}, manager=MANAGER, subresource="status")
        except ApiError as exc:
            if exc.status != 404:
                raise

    def _stop_controller(self, key: str, h: Hosted, why: str) -> None:
        h.stopped = True
        for ns, name in h.services:
            if self.cp.webhook_proxy is not None:
                self.cp.webhook_proxy.unregister(ns, name)
        if h.ctl.proc is not None:
            self.cp.procs.stop(h.ctl.proc)
        self.events.append(f"{h.ctl.binary} of {key} stopped: {why}")

    # --- the report ----------------------------------------------------------------------------------------

    def stood_in(self) -> list[str]:
        out = list(self.events) + [f"not hosted: {p}" for p in self.problems]
        proxy = self.cp.webhook_proxy
        if proxy is not None and (proxy.tunnelled or proxy.refused):
            served = {}
            for line in proxy.tunnelled:
                what = line.split(" -> ")[1]
                served[what] = served.get(what, 0) + 1
            refused: dict[str, int] = {}
            for line in proxy.refused:  # "CONNECT ip:port: why"
                why = line.split(": ", 1)[-1]
                refused[why] = refused.get(why, 0) + 1
            out.append("webhook proxy (kube-apiserver's egress selector, cluster context): "
                       + (", ".join(f"{n} connection(s) to {w}" for w, n in sorted(served.items())) or "no connection")
                       + "".join(f"; {n} refused: {why}" for why, n in sorted(refused.items())))
        return out
