"""Scenarios of the platform as a team uses it: the real JupyterHub hub spawning notebooks, a notebook
submitting a TrainJob with its own ServiceAccount, a TrainJob without a queue label, and (EKS) a
notebook whose home volume is in one zone getting a node in that zone.

The hub is the real one: JupyterHub, KubeSpawner and NativeAuthenticator from .venv-jupyterhub (the
z2jh 4.4.0 hub image's versions, requirements-jupyterhub.txt), started with the chart's own
`jupyterhub_config.py` and `z2jh.py` (the rendered ConfigMap `hub`) and the rendered Secret `hub` (its
`values.yaml`: profileList, KubeSpawner settings, authenticator), talking to the rehearsal's API server
with the token of the chart's `hub` ServiceAccount, so the chart's hub Role is what it may do. What
stands in, and only that (each also said in the scenario's details):
- the folder the pod mounts at /usr/local/etc/jupyterhub is a temporary folder (the path in the chart's
  two files is rewritten to it);
- the chart's own extension point, `jupyterhub_config.d/`, gets one file: addresses on 127.0.0.1, a proxy
  that keeps its routes in memory (no configurable-http-proxy, a Node.js program), the idle culler
  service left out (its `python3 -m jupyterhub_idle_culler` is not installed), and KubeSpawner's
  `get_pod_url` hook answering with a local HTTP responder: KWOK marks the notebook pod Running and
  Ready without a container, so nothing listens on the pod's IP. Everything up to that point
  (the PVC, the pod, Pod Security, Kueue's gate and admission, the scheduler's binding, the pod
  Running) is the real hub's and the cluster's doing."""

from __future__ import annotations

import base64
import copy
import http.cookiejar
import json
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

from gpu_platform.rehearsal.kube import ApiError, Client, UnknownKind, kubeconfig
from gpu_platform.rehearsal.nodes import GPU_RESOURCE, group_of
from gpu_platform.rehearsal.processes import ProcessGroup, free_port
from gpu_platform.rehearsal.scenarios import (
    QUEUE_LABEL, TRAINER, Context, Scenario, _admitted, _conditions, _example, _flavors, _job_pods, _nodes, _pending_reason,
    _evictions, _workload_for, _workload_message, example_or_not_rehearsed, scheduler_never_binds, submit,
    wait_local_queue_active,
)

ROOT = Path(__file__).resolve().parents[2]
HUB_PYTHON_ENV = "JUPYTERHUB_PYTHON"
MOUNT = "/usr/local/etc/jupyterhub"  # where the hub pod mounts the ConfigMap and Secret `hub`
ZONE = "topology.kubernetes.io/zone"
DEFAULT_LOCAL_QUEUE = "default"
USER = "researcher"
PASSWORD = "rehearsal-password-7f3a9c"

# A hub configuration's proxy that keeps its routes in memory: configurable-http-proxy (Node.js) does not
# run here. Shared with tests/test_notebooks_login.py; a str.format template like the configs it goes in.
IN_MEMORY_PROXY = '''
from jupyterhub.proxy import Proxy
from traitlets import Bool


class InMemoryProxy(Proxy):
    """Routes kept in memory: configurable-http-proxy (Node.js) does not run here."""
    should_start = Bool(False)
    routes = {{}}

    async def add_route(self, routespec, target, data):
        self.routes[routespec] = {{"routespec": routespec, "target": target, "data": data}}

    async def delete_route(self, routespec):
        self.routes.pop(routespec, None)

    async def get_all_routes(self):
        return dict(self.routes)
'''

# The rehearsal's file in the chart's jupyterhub_config.d (loaded after the chart's own settings).
REHEARSAL_CONFIG = '''
# gpu-platform rehearsal: addresses, state and stand-ins only (gpu_platform/rehearsal/hub.py says why).
import http.server
import threading
''' + IN_MEMORY_PROXY + '''


class _NotebookStandIn(http.server.BaseHTTPRequestHandler):
    """Answers the hub's check that the notebook server is up: KWOK runs no container."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b"{{}}")

    def log_message(self, *args):
        pass


_stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotebookStandIn)
threading.Thread(target=_stand_in.serve_forever, daemon=True).start()


def _pod_url(spawner, pod):
    url = "http://127.0.0.1:%d" % _stand_in.server_address[1]
    spawner.log.info("rehearsal: pod %s Running on node %s with IP %s; the hub reaches the stand-in %s",
                     pod["metadata"]["name"], pod["spec"].get("nodeName"), pod["status"].get("podIP"), url)
    return url


c.KubeSpawner.get_pod_url = _pod_url
c.KubeSpawner.start_timeout = {start_timeout}
c.JupyterHub.proxy_class = InMemoryProxy
c.JupyterHub.bind_url = "http://127.0.0.1:{public_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.hub_connect_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.pid_file = "{state}/jupyterhub.pid"
c.JupyterHub.services = [s for s in c.JupyterHub.services if s.get("name") != "jupyterhub-idle-culler"]
c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles if r.get("name") != "jupyterhub-idle-culler"]
'''


def hub_python() -> Path:
    return Path(os.environ.get(HUB_PYTHON_ENV) or ROOT / ".venv-jupyterhub" / "bin" / "python")


def _jupyterhub_release(ctx: Context) -> Optional[Any]:
    return next((r for r in ctx.releases if r.rendered and (r.chart or "").rstrip("/").rsplit("/", 1)[-1] == "jupyterhub"), None)


def _object(rel: Any, kind: str, name: str) -> Optional[dict]:
    return next((o for o in rel.objects if o.get("kind") == kind and o["metadata"]["name"] == name), None)


def _ca_pem(client: Client) -> str:
    """The API server's CA, from the client's own TLS context."""
    return "".join(ssl.DER_cert_to_PEM_cert(der) for der in client.ctx.get_ca_certs(binary_form=True))


def _log_dir(ctx: Context) -> Path:
    for ctl in ctx.controllers.values():
        if ctl.proc is not None:
            return ctl.proc.log.parent
    return Path(tempfile.gettempdir())


# --- a browser for the hub ------------------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


class Browser:
    """What a browser does with the hub: cookies, the _xsrf token in forms and API calls, no redirects
    followed (a login's 302 is its answer)."""

    def __init__(self, url: str):
        self.url = url
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect)

    def cookie(self, name: str) -> str:
        return next((c.value for c in self.jar if c.name == name), "")

    def request(self, method: str, path: str, form: Optional[dict] = None, body: Any = None) -> tuple[int, str]:
        data, headers = None, {"X-XSRFToken": self.cookie("_xsrf")}
        if form is not None:
            data = urllib.parse.urlencode({**form, "_xsrf": self.cookie("_xsrf")}).encode()
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
        req = urllib.request.Request(f"{self.url}/hub/{path}", data=data, method=method, headers=headers)
        try:
            with self.opener.open(req, timeout=60) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def open_login_page(self) -> None:
        self.request("GET", "login")  # sets the _xsrf cookie

    def signup(self, name: str, password: str) -> tuple[int, str]:
        self.open_login_page()
        return self.request("POST", "signup", {"username": name, "signup_password": password,
                                                "signup_password_confirmation": password})

    def login(self, name: str, password: str) -> bool:
        self.open_login_page()
        status, _ = self.request("POST", "login", {"username": name, "password": password})
        return status == 302 and bool(self.cookie("jupyterhub-hub-login"))


# --- the hub process --------------------------------------------------------------------------------------------------


class HubProcess:
    """The hub as the chart configures it, as a local process under the `hub` ServiceAccount's token."""

    def __init__(self, ctx: Context, rel: Any, sc: Scenario, start_timeout: int):
        self.ctx, self.rel, self.sc = ctx, rel, sc
        self.state = Path(tempfile.mkdtemp(prefix="rehearsal-hub-"))
        self.procs = ProcessGroup(_log_dir(ctx))
        self.hub_port, self.public_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.hub_port}"  # no proxy: the browser talks to the hub itself
        self.start_timeout = start_timeout
        self.proc = None

    def _write_mount(self) -> None:
        ns = self.rel.namespace
        cm = self.ctx.client.get("v1", "ConfigMap", "hub", ns)
        secret = self.ctx.client.get("v1", "Secret", "hub", ns)
        if cm is None or secret is None:
            raise RuntimeError(f"the chart's ConfigMap/Secret `hub` is not on the API server in {ns}")
        for folder, items in (("config", cm.get("data") or {}),
                              ("secret", {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()})):
            (self.state / folder).mkdir()
            for key, text in items.items():
                (self.state / folder / key).write_text(text)
        for name in ("jupyterhub_config.py", "z2jh.py"):
            path = self.state / "config" / name
            if not path.exists():
                raise RuntimeError(f"the chart's ConfigMap `hub` has no {name}")
            path.write_text(path.read_text().replace(MOUNT, str(self.state)))
        (self.state / "jupyterhub_config.d").mkdir()
        (self.state / "jupyterhub_config.d" / "rehearsal.py").write_text(REHEARSAL_CONFIG.format(
            start_timeout=self.start_timeout, public_port=self.public_port, hub_port=self.hub_port, state=self.state))

    def start(self) -> None:
        self._write_mount()
        client, ns = self.ctx.client, self.rel.namespace
        deployment = _object(self.rel, "Deployment", "hub") or {}
        sa = ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("serviceAccountName") or "hub"
        ca = self.state / "ca.crt"
        ca.write_text(_ca_pem(client))
        kcfg = self.state / "kubeconfig"
        kcfg.write_text(kubeconfig(f"https://{client.host}:{client.port}", str(ca), client.token(ns, sa), user=f"{ns}:{sa}"))
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env.update({"KUBECONFIG": str(kcfg), "POD_NAMESPACE": ns, "PYTHONUNBUFFERED": "1",
                    # Kubernetes' Service environment variables the chart's config reads (get_name_env).
                    "HUB_SERVICE_PORT": str(self.hub_port), "PROXY_API_SERVICE_PORT": str(free_port())})
        self.sc.details.append(f"hub: JupyterHub from {hub_python().parent.parent.name} with the chart's jupyterhub_config.py, "
                               f"as ServiceAccount {ns}/{sa}; mount {MOUNT} -> a temporary folder")
        self.proc = self.procs.start("jupyterhub", [str(hub_python()), "-m", "jupyterhub", "-f",
                                                    str(self.state / "config" / "jupyterhub_config.py")], env=env, cwd=self.state)
        deadline = time.monotonic() + max(self.ctx.timeout, 90)
        while True:
            if not self.proc.alive:
                raise RuntimeError(f"JupyterHub exited ({self.proc.popen.returncode}): {self.proc.tail(8)}")
            try:
                with urllib.request.urlopen(f"{self.url}/hub/api", timeout=3) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterHub did not answer within {max(self.ctx.timeout, 90):.0f}s: {self.proc.tail(8)}")
            time.sleep(0.5)

    def said(self, *needles: str) -> str:
        lines = [ln for ln in self.proc.tail(400).splitlines() if any(n in ln for n in needles)] if self.proc else []
        return lines[-1][-400:] if lines else ""

    def stop(self) -> None:
        self.procs.stop_all()
        shutil.rmtree(self.state, ignore_errors=True)


# --- (g) the real hub spawns notebooks; a notebook submits a TrainJob -----------------------------------------------


def _server_state(browser: Browser, user: str) -> dict:
    status, text = browser.request("GET", f"api/users/{user}")
    if status != 200:
        return {"error": f"HTTP {status}: {text[:300]}"}
    return (json.loads(text).get("servers") or {}).get("", {}) or {"stopped": True}


def _spawn(hub: HubProcess, browser: Browser, user: str, slug: str, timeout: float) -> tuple[bool, str]:
    """Spawn the default server with a profile through the spawn form; wait until the hub says it is
    ready (True) or gave up (False, why: the hub's words and the last reason its pod was Pending; the
    hub deletes the pod when it gives up)."""
    status, text = browser.request("POST", f"spawn/{user}", {"profile": slug})
    if status not in (200, 302):
        return False, f"the spawn form answered HTTP {status}: {text[:300]}"
    deadline = time.monotonic() + timeout
    state: dict = {}
    pending = ""
    while time.monotonic() < deadline:
        state = _server_state(browser, user)
        if state.get("ready"):
            return True, ""
        if state.get("error") or (state.get("stopped") and time.monotonic() > deadline - timeout + 5):
            break
        pod = _user_pod(hub.ctx.client, hub.rel.namespace, user)
        if pod is not None and not pod["spec"].get("nodeName"):
            gates = [g.get("name") for g in pod["spec"].get("schedulingGates") or []]
            pending = (f"gated by Kueue ({_workload_message(_workload_for(hub.ctx.client, hub.rel.namespace, 'Pod', pod['metadata']['name']))})"
                       if gates else _pending_reason(pod))
        time.sleep(1)
    why = state.get("error") or hub.said("Error", "error", "failed", "Timeout") or f"hub state {state}"
    return False, why.strip() + (f"; its pod was Pending: {pending}" if pending else "")


def _stop(browser: Browser, user: str, client: Client, ns: str, pod_name: str, timeout: float = 60) -> bool:
    browser.request("DELETE", f"api/users/{user}/server")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if client.get("v1", "Pod", pod_name, ns) is None and _server_state(browser, user).get("stopped"):
            return True
        time.sleep(1)
    return False


def _user_pod(client: Client, ns: str, user: str) -> Optional[dict]:
    pods = client.list("v1", "Pod", ns, f"component=singleuser-server,hub.jupyter.org/username={user}")
    return pods[0] if pods else None


def _fit_group(ctx: Context, slug: str) -> Optional[str]:
    return next((p["group"] for p in ctx.placements if p["object"].endswith(f"(profile {slug})")), None)


def _check_notebook(ctx: Context, sc: Scenario, ns: str, slug: str, pod: dict, gpu: bool) -> None:
    name = pod["metadata"]["name"]
    labels = pod["metadata"].get("labels") or {}
    if labels.get("app.kubernetes.io/managed-by") != "kubespawner":
        sc.fail(f"profile {slug}: pod {name} is not labelled as made by KubeSpawner ({labels})")
    node = pod["spec"].get("nodeName")
    nodes = _nodes(ctx.client)
    landed = group_of(nodes.get(node, {})) if node else None
    want = _fit_group(ctx, slug)
    sc.details.append(f"profile {slug}: KubeSpawner's pod {name} admitted by Pod Security (namespace {ns}: "
                      f"{(ctx.client.get('v1', 'Namespace', ns) or {}).get('metadata', {}).get('labels', {}).get('pod-security.kubernetes.io/enforce', 'no level')}), "
                      f"bound to {node} (group {landed}; cluster fit: {want or '-'})")
    if want and landed != want:
        sc.fail(f"profile {slug}: pod {name} bound to group {landed}, cluster fit places it on {want}")
    if gpu:
        w = _workload_for(ctx.client, ns, "Pod", name)
        if not _admitted(w):
            sc.fail(f"profile {slug}: pod {name} runs without a Kueue admission ({_workload_message(w)})")
        else:
            sc.details.append(f"profile {slug}: Kueue gated the pod and admitted Workload {w['metadata']['name']} "
                              f"on flavor {_flavors(w).get(GPU_RESOURCE) or _flavors(w)}")
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or [] if v.get("persistentVolumeClaim")]
    for claim in claims:
        pvc = ctx.client.get("v1", "PersistentVolumeClaim", claim, ns)
        phase = ((pvc or {}).get("status") or {}).get("phase")
        if pvc is None:
            sc.fail(f"profile {slug}: the home claim {claim} was not created")
        else:
            pv = ctx.client.get("v1", "PersistentVolume", pvc["spec"]["volumeName"]) if pvc["spec"].get("volumeName") else None
            terms = ((((pv or {}).get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get("nodeSelectorTerms") or []
            pinned = "; ".join(f"{e.get('key')} {e.get('operator')} {','.join(e.get('values') or [])}"
                               for t in terms for e in (t.get("matchExpressions") or []) + (t.get("matchFields") or []))
            sc.details.append(f"profile {slug}: home PersistentVolumeClaim {claim} created by KubeSpawner ({phase}, "
                              f"class {pvc['spec'].get('storageClassName')}, volume {pvc['spec'].get('volumeName')}"
                              f"{', node affinity ' + pinned if pinned else ''})")
    if not claims:
        sc.fail(f"profile {slug}: pod {name} mounts no PersistentVolumeClaim (the chart's dynamic home storage)")


def _notebook_token(client: Client, pod: dict) -> tuple[str, str]:
    """The token the kubelet would mount into the notebook: its ServiceAccount's, bound to the pod."""
    ns, sa = pod["metadata"]["namespace"], pod["spec"].get("serviceAccountName") or "default"
    doc = client.request("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                          "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                              "kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}}})
    return sa, doc["status"]["token"]


def _wait_admitted(client: Client, ns: str, kind: str, name: str, timeout: float, gave_up=None) -> Optional[dict]:
    """The job's Workload once admitted; else what there is after `timeout`, or as soon as `gave_up(w)`
    (e.g. no Workload while the job's pods already exist: Kueue will not manage it any more)."""
    deadline = time.monotonic() + timeout
    w = None
    while time.monotonic() < deadline:
        w = _workload_for(client, ns, kind, name)
        if _admitted(w) or (gave_up is not None and gave_up(w)):
            return w
        time.sleep(1)
    return w


def _submit_from_notebook(ctx: Context, sc: Scenario, pod: dict) -> None:
    """With the notebook pod's ServiceAccount token: the example TrainJob is accepted and admitted;
    a Deployment or reading Secrets is refused."""
    job = _example(ctx)
    if job is None:
        sc.details.append("no example TrainJob: nothing submitted from the notebook")
        return
    sa, token = _notebook_token(ctx.client, pod)
    as_notebook = ctx.client.with_token(token)
    who = f"{pod['metadata']['namespace']}/{sa}"
    ns = job["metadata"].get("namespace") or "training"
    mine = copy.deepcopy(job)
    mine["metadata"] = {**mine["metadata"], "name": "from-notebook", "namespace": ns}
    if err := submit(as_notebook, mine):
        sc.fail(f"the notebook (ServiceAccount {who}) cannot submit the example TrainJob: {err}")
        return
    w = _wait_admitted(ctx.client, ns, "TrainJob", "from-notebook", ctx.timeout)
    if _admitted(w):
        sc.details.append(f"from the notebook, as ServiceAccount {who}: TrainJob {ns}/from-notebook accepted and admitted "
                          f"on flavor {_flavors(w).get(GPU_RESOURCE) or _flavors(w)}")
    else:
        sc.fail(f"TrainJob {ns}/from-notebook (submitted from the notebook) not admitted: {_workload_message(w)}")
    status, _ = _status_of(lambda: as_notebook.request("GET", f"/apis/{TRAINER}/namespaces/{ns}/trainjobs/from-notebook"))
    if status != 200:
        sc.fail(f"the notebook cannot read back its own TrainJob (HTTP {status})")
    denied = {
        f"create a Deployment in {ns}": lambda: as_notebook.create({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {
            "name": "from-notebook", "namespace": ns}, "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
                "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        f"read Secrets in {ns}": lambda: as_notebook.list("v1", "Secret", ns),
        "read Secrets in kube-system": lambda: as_notebook.list("v1", "Secret", "kube-system"),
    }
    for what, call in denied.items():
        status, message = _status_of(call)
        if status == 403:
            sc.details.append(f"the notebook may not {what}: refused (403)")
        else:
            sc.fail(f"the notebook's ServiceAccount {who} may {what} (HTTP {status or 'OK'}{': ' + message if message else ''}); "
                    "its RBAC must stop at the training namespace's job kinds")
    try:
        as_notebook.delete(TRAINER, "TrainJob", "from-notebook", ns)
    except ApiError as exc:
        sc.fail(f"the notebook cannot delete its own TrainJob: {exc}")
        ctx.client.delete(TRAINER, "TrainJob", "from-notebook", ns)
    _wait_gone(ctx.client, ns, "TrainJob", "from-notebook")


def _status_of(call) -> tuple[int, str]:
    try:
        call()
        return 200, ""
    except ApiError as exc:
        return exc.status, exc.message[:200]


def _wait_gone(client: Client, ns: str, kind: str, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _workload_for(client, ns, kind, name) is not None:
        time.sleep(1)


def hub_spawn(ctx: Context) -> Scenario:
    sc = Scenario("hub-spawn", "the real JupyterHub hub (the chart's config, its ServiceAccount): a user signs up, is approved, "
                               "logs in and spawns the CPU and a GPU profile; from the notebook, a TrainJob is submitted")
    rel = _jupyterhub_release(ctx)
    if rel is None:
        sc.details.append("the stack installs no JupyterHub")
        return sc
    if not hub_python().exists():
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"{hub_python()} is missing: run `make jupyterhub-venv`")
        return sc
    values = rel.values or {}
    profiles = [p.get("slug") for p in (values.get("singleuser") or {}).get("profileList") or []]
    admins = ((((values.get("hub") or {}).get("config") or {}).get("Authenticator") or {}).get("admin_users")) or []
    gpu = [s for s in profiles if s and s != "cpu"]
    wanted = (["cpu"] if "cpu" in profiles else []) + gpu[:1]
    if not admins or not wanted:
        sc.fail(f"the rendered hub config names no admin user ({admins}) or no profile ({profiles})")
        return sc
    hub = HubProcess(ctx, rel, sc, start_timeout=int(max(ctx.timeout, 60)))
    ns = rel.namespace
    try:
        hub.start()
        admin, user = Browser(hub.url), Browser(hub.url)
        admin.signup(admins[0], PASSWORD)
        if not admin.login(admins[0], PASSWORD):
            sc.fail(f"the admin {admins[0]} named in the stack signed up but cannot log in: {hub.said('login', 'Login')}")
            return sc
        user.signup(USER, PASSWORD)
        if user.login(USER, PASSWORD):
            sc.fail(f"{USER} logged in before an admin approved them (NativeAuthenticator open_signup)")
        status, _ = admin.request("GET", f"authorize/{USER}")
        if not user.login(USER, PASSWORD):
            sc.fail(f"{USER} cannot log in after {admins[0]} approved them (authorize answered HTTP {status})")
            return sc
        sc.details.append(f"{admins[0]} (admin in the stack) and {USER} signed up; {USER} logged in after {admins[0]} "
                          "approved them (NativeAuthenticator)")
        for slug in wanted:
            ok, why = _spawn(hub, user, USER, slug, ctx.timeout + 30)
            pod = _user_pod(ctx.client, ns, USER)
            if not ok:
                sc.fail(f"profile {slug}: the hub's spawn did not succeed: {why}")
                if pod:
                    _stop(user, USER, ctx.client, ns, pod["metadata"]["name"])
                continue
            if pod is None:
                sc.fail(f"profile {slug}: the hub says the server is ready, yet there is no pod of {USER} in {ns}")
                continue
            sc.details.append(f"profile {slug}: spawned through the hub's spawn form; the hub reports the server ready "
                              f"(pod IP {pod['status'].get('podIP')} answered by the rehearsal's stand-in)")
            _check_notebook(ctx, sc, ns, slug, pod, gpu=slug != "cpu")
            if slug == wanted[0]:
                _submit_from_notebook(ctx, sc, pod)
            if not _stop(user, USER, ctx.client, ns, pod["metadata"]["name"]):
                sc.fail(f"profile {slug}: stopping the server through the hub's API left pod {pod['metadata']['name']}")
            else:
                sc.details.append(f"profile {slug}: stopped through the hub's REST API; KubeSpawner deleted the pod")
    except (RuntimeError, OSError) as exc:
        sc.fail(str(exc))
    finally:
        hub.stop()
    return sc


# --- (h) a GPU TrainJob without the queue label --------------------------------------------------------------------------


def unlabelled_trainjob(ctx: Context) -> Scenario:
    """LocalQueue `default` (what Kueue gives a job without a queue name in `training`) is the GPU queue
    (ClusterQueue gpu-training, issue #22 item 1): a GPU TrainJob without the label is queued there and
    admitted on a GPU flavor, not ignored and not refused."""
    sc = Scenario("unlabelled-trainjob", "a GPU TrainJob without the queue-name label is queued in the namespace's "
                                         f"`{DEFAULT_LOCAL_QUEUE}` LocalQueue and admitted by Kueue, not ignored")
    job = example_or_not_rehearsed(ctx, sc)
    if job is None:
        return sc
    ns = job["metadata"].get("namespace") or "training"
    # Kueue defaults the label only once its cache holds the LocalQueue (it is Active): a job created
    # before that is ignored, which the scenario reports as such, not as a race of the rehearsal.
    lq = wait_local_queue_active(ctx, DEFAULT_LOCAL_QUEUE, ns)
    if lq is None:
        sc.fail(f"namespace {ns} has no LocalQueue {DEFAULT_LOCAL_QUEUE!r}: a TrainJob without {QUEUE_LABEL} is not queued")
    else:
        sc.details.append(f"LocalQueue {ns}/{DEFAULT_LOCAL_QUEUE} -> ClusterQueue {lq['spec'].get('clusterQueue')} "
                          f"(Active={(_conditions(lq).get('Active') or {}).get('status')})")
    probe = copy.deepcopy(job)
    labels = {k: v for k, v in (probe["metadata"].get("labels") or {}).items() if k != QUEUE_LABEL}
    probe["metadata"] = {"name": "unlabelled", "namespace": ns, **({"labels": labels} if labels else {})}
    if err := submit(ctx.client, probe):
        sc.fail(f"TrainJob {ns}/unlabelled (a GPU job without {QUEUE_LABEL}) refused: {err}")
        return sc
    live = ctx.client.get(TRAINER, "TrainJob", "unlabelled", ns) or {}
    label = (live.get("metadata", {}).get("labels") or {}).get(QUEUE_LABEL)
    sc.details.append(f"submitted without {QUEUE_LABEL}; as stored: {QUEUE_LABEL}={label or '(none)'}")
    try:
        w = _wait_admitted(ctx.client, ns, "TrainJob", "unlabelled", ctx.timeout,
                           gave_up=lambda w: w is None and bool(_job_pods(ctx.client, ns, "unlabelled")))
        if w is None:
            sc.fail(f"Kueue created no Workload for TrainJob {ns}/unlabelled: a job without the label is ignored by the queue")
            pods = _job_pods(ctx.client, ns, "unlabelled")
            if pods:
                sc.fail(f"and its pods run outside Kueue: {', '.join(p['metadata']['name'] for p in pods)}")
            return sc
        queue = (w.get("spec") or {}).get("queueName")
        if queue != DEFAULT_LOCAL_QUEUE:
            sc.fail(f"its Workload {w['metadata']['name']} is in LocalQueue {queue!r}, not {DEFAULT_LOCAL_QUEUE!r}")
        if not _admitted(w):
            sc.fail(f"its Workload {w['metadata']['name']} (LocalQueue {queue}) not admitted within {ctx.timeout:.0f}s: "
                    f"{_workload_message(w)}")
            return sc
        sc.details.append(f"Workload {w['metadata']['name']} queued in LocalQueue {queue} and admitted on flavor "
                          f"{_flavors(w).get(GPU_RESOURCE) or _flavors(w)}")
        deadline = time.monotonic() + ctx.timeout
        pods: list[dict] = []
        while time.monotonic() < deadline:
            pods = _job_pods(ctx.client, ns, "unlabelled")
            if pods and all(p["spec"].get("nodeName") for p in pods):
                break
            time.sleep(1)
        nodes = _nodes(ctx.client)
        for p in pods:
            node = p["spec"].get("nodeName")
            if node:
                sc.details.append(f"pod {p['metadata']['name']} bound to {node} (group {group_of(nodes.get(node, {}))})")
            else:
                sc.fail(f"pod {p['metadata']['name']} not bound: {_pending_reason(p)}")
        if not pods:
            sc.fail("the admitted TrainJob made no pod within the timeout")
    finally:
        ctx.client.delete(TRAINER, "TrainJob", "unlabelled", ns)
        _wait_gone(ctx.client, ns, "TrainJob", "unlabelled")
    return sc


# --- (i) EKS: a notebook whose home volume is in zone b gets a node in zone b ------------------------------------------


def _zonal_gpu_pool(ctx: Context) -> Optional[tuple[str, list[str]]]:
    """The first GPU pool with groups in two or more zones: (pool, its zones sorted)."""
    zones: dict[str, set[str]] = {}
    for g in ctx.model.node_groups:
        if g.role == "gpu" and g.labels.get(ZONE):
            zones.setdefault(g.name, set()).add(g.labels[ZONE])
    return next(((pool, sorted(z)) for pool, z in zones.items() if len(z) >= 2), None)


def _volume_conflict(reason: str) -> bool:
    """The scheduler's words for nodes outside a bound volume's topology (kube-scheduler 1.35: "didn't
    match PersistentVolume's node affinity"; older: "volume node affinity conflict")."""
    return "PersistentVolume's node affinity" in reason or "volume node affinity conflict" in reason


def _zone_terms(spec: dict) -> list:
    return (((spec.get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []


def _required_zones(spec: dict, zones: list[str]) -> set[str]:
    """The zones a pod's required node affinity lets it start in (every one of `zones` when it names none)."""
    allowed: set[str] = set()
    for term in _zone_terms(spec) or [{}]:
        exprs = [e for e in term.get("matchExpressions") or [] if e.get("key") == ZONE]
        ok = set(zones)
        for e in exprs:
            if e.get("operator") == "In":
                ok &= set(e.get("values") or [])
            elif e.get("operator") == "NotIn":
                ok -= set(e.get("values") or [])
        allowed |= ok
    return allowed


def _drop_zone_affinity(spec: dict) -> None:
    """The pod's required node affinity without its zone rules. A term left empty is dropped, and the
    whole rule when no term is left: an empty nodeSelectorTerm matches no node at all."""
    terms = _zone_terms(spec)
    for term in terms:
        term["matchExpressions"] = [e for e in term.get("matchExpressions") or [] if e.get("key") != ZONE]
    kept = [t for t in terms if t.get("matchExpressions") or t.get("matchFields")]
    if terms and not kept:
        spec["affinity"]["nodeAffinity"].pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    elif terms:
        spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] = kept


def _gone_pod_reason(ctx: Context, ns: str, name: str) -> str:
    """What is known of a pod that was deleted under a scenario: its Kueue Workload's conditions and evictions (for a
    plain pod, Kueue's eviction deletes it: a waitForPodsReady timeout on a loaded machine) and the namespace's
    events naming it."""
    w = _workload_for(ctx.client, ns, "Pod", name)
    said = [f"Kueue: {_workload_message(w)}" + (f", evictions {_evictions(w)}" if _evictions(w) else "")]
    try:
        events = [e for e in ctx.client.list("v1", "Event", ns) if (e.get("involvedObject") or {}).get("name") == name]
    except (ApiError, UnknownKind):
        events = []
    said += [f"{e.get('reason')}: {e.get('message')}" for e in events[-4:]]
    return "; ".join(said)


def zone_drill(ctx: Context) -> Scenario:
    sc = Scenario("zone-drill", "a GPU notebook whose home volume is in zone b gets a node of its pool in zone b "
                                "(Kueue's flavor and the scheduler's volume topology agree)")
    from gpu_platform.preflight.fit.pods import jupyterhub_user_pods

    found = _zonal_gpu_pool(ctx)
    if found is None:
        sc.details.append("no GPU pool spans zones on this stack (one node group per pool): nothing to drill")
        return sc
    pool, zones = found
    rel = _jupyterhub_release(ctx)
    templates = jupyterhub_user_pods(rel.name, rel.namespace, rel.values) if rel is not None and isinstance(rel.values, dict) else []
    tmpl = next((t for t in templates if t.owner.endswith(f"(profile gpu-{pool})")), None)
    if tmpl is None:
        sc.status = "NOT REHEARSED"
        sc.problems.append(f"no notebook profile gpu-{pool} to drill with (pool {pool} spans {', '.join(zones)})")
        return sc
    # The home goes where a notebook may start (the hub holds notebooks to the zones every profile reaches:
    # notebooks.home_zones); the control is held to another zone of the pool.
    startable = [z for z in zones if z in _required_zones(tmpl.spec, zones)]
    if not startable:
        sc.fail(f"profile gpu-{pool} may start in none of its pool's zones ({', '.join(zones)})")
        return sc
    zone = startable[1] if len(startable) > 1 else startable[0]
    control_zone = next(z for z in zones if z != zone)
    ns, claim, pv_name = tmpl.namespace, "rehearsal-zone-home", f"rehearsal-zone-home-{zone}"
    storage_class = (((rel.values.get("singleuser") or {}).get("storage") or {}).get("dynamic") or {}).get("storageClass") or ""
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv_name},
          "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                   "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/rehearsal-volumes/{pv_name}"},
                   "claimRef": {"namespace": ns, "name": claim},
                   # an EBS volume is zonal: the PV says so as the EBS CSI driver writes it
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": ZONE, "operator": "In", "values": [zone]}]}]}}}}
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": claim, "namespace": ns},
           "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class, "volumeName": pv_name,
                    "resources": {"requests": {"storage": "10Gi"}}}}
    spec = copy.deepcopy(tmpl.spec)
    homes = {v["name"] for v in spec.get("volumes") or [] if v.get("persistentVolumeClaim")}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in homes] + \
        [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}]
    for c in spec.get("containers") or []:
        c["volumeMounts"] = [m for m in c.get("volumeMounts") or [] if m.get("name") not in homes] + \
            [{"name": "home", "mountPath": "/home/jovyan"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "jupyter-zone-drill", "namespace": ns, "labels": dict(tmpl.labels)},
           "spec": spec}
    made = []
    try:
        for obj in (pv, pvc, pod):
            if err := submit(ctx.client, obj):
                sc.fail(f"{obj['kind']} {obj['metadata']['name']} refused: {err}")
                return sc
            made.append(obj)
        sc.details.append(f"home volume: PersistentVolume {pv_name} in zone {zone} (node affinity {ZONE}={zone}), "
                          f"bound to claim {ns}/{claim}; notebook pod of profile gpu-{pool} (pool {pool}: zones {', '.join(zones)})")
        deadline = time.monotonic() + ctx.timeout
        live: dict = {}
        never = None  # the scheduler's own word that no node can take it, as the nodes stand
        while time.monotonic() < deadline:
            live = ctx.client.get("v1", "Pod", "jupyter-zone-drill", ns) or {}
            if (live.get("spec") or {}).get("nodeName"):
                break
            never = scheduler_never_binds(live)
            if never:
                break
            time.sleep(1)
        node = (live.get("spec") or {}).get("nodeName")
        if not node:
            gates = [g.get("name") for g in (live.get("spec") or {}).get("schedulingGates") or []]
            if not live:  # CI's loaded run of 2026-12-01 said only "?": the pod had gone; say who took it
                why = f"the pod is gone; {_gone_pod_reason(ctx, ns, 'jupyter-zone-drill')}"
            elif gates:
                why = f"gated by Kueue: {_workload_message(_workload_for(ctx.client, ns, 'Pod', 'jupyter-zone-drill'))}"
            else:
                why = _pending_reason(live)
            sc.fail(f"the notebook with its home in zone {zone} got no node "
                    + ("(no node can ever take it as the cluster stands)" if never else f"within {ctx.timeout:.0f}s")
                    + f": {why}")
            return sc
        labels = (_nodes(ctx.client).get(node, {}).get("metadata") or {}).get("labels") or {}
        w = _workload_for(ctx.client, ns, "Pod", "jupyter-zone-drill")
        if w is not None:
            sc.details.append(f"Kueue admitted it on flavor {_flavors(w).get(GPU_RESOURCE) or _flavors(w)}")
        sc.details.append(f"bound to {node} (group {labels.get('rehearsal.gpu-platform.io/node-group')}, zone {labels.get(ZONE)})")
        if labels.get(ZONE) != zone:
            sc.fail(f"bound to {node} in zone {labels.get(ZONE)}: its home volume is in {zone}, the pod can never mount it")
        if labels.get("rehearsal.gpu-platform.io/node-group") != pool:
            sc.fail(f"bound to {node} of group {labels.get('rehearsal.gpu-platform.io/node-group')}, not the profile's pool {pool}")
        # The control: the same notebook held to another zone must not start (so zone b was no chance).
        other = {**copy.deepcopy(pod), "metadata": {**pod["metadata"], "name": "jupyter-zone-drill-control"}}
        _drop_zone_affinity(other["spec"])  # only the volume may keep it from the other zone
        other["spec"]["nodeSelector"] = {**(other["spec"].get("nodeSelector") or {}), ZONE: control_zone}
        if err := submit(ctx.client, other):
            sc.fail(f"control pod refused: {err}")
            return sc
        made.append(other)
        why = ""
        deadline = time.monotonic() + ctx.timeout
        while time.monotonic() < deadline:
            live = ctx.client.get("v1", "Pod", "jupyter-zone-drill-control", ns) or {}
            why = _pending_reason(live)
            if (live.get("spec") or {}).get("nodeName") or _volume_conflict(why):
                break
            time.sleep(1)
        if (live.get("spec") or {}).get("nodeName"):
            sc.fail(f"control: the same notebook held to zone {control_zone} was bound to {live['spec']['nodeName']} although "
                    f"its volume is in {zone}: the volume's zone is not enforced")
        elif _volume_conflict(why):
            sc.details.append(f"control: the same notebook held to zone {control_zone} stays Pending: {why}")
        else:
            sc.fail(f"control: the notebook held to zone {control_zone} is Pending for another reason than its volume: {why}")
    finally:
        for obj in reversed(made):
            try:
                ctx.client.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"], obj["metadata"].get("namespace"),
                                  grace_seconds=0 if obj["kind"] == "Pod" else None)
            except (ApiError, UnknownKind):
                pass
        # Gone before the next drill on this shared cluster makes the same names: the PersistentVolume keeps its
        # pv-protection finalizer until its claim is gone, and a create meanwhile is refused ("object is being
        # deleted", seen when the machine was loaded).
        deadline = time.monotonic() + 60
        for obj in reversed(made):
            while time.monotonic() < deadline:
                try:
                    if ctx.client.get(obj["apiVersion"], obj["kind"], obj["metadata"]["name"],
                                      obj["metadata"].get("namespace")) is None:
                        break
                except (ApiError, UnknownKind):
                    break
                time.sleep(0.5)
    return sc


HUB_SCENARIOS = (unlabelled_trainjob, hub_spawn, zone_drill)
