"""Log in to a REAL JupyterHub configured with the authentication part of what the RENDERED chart gives
the hub: the z2jh 4.4.0 chart's hub Secret `values.yaml`, loaded the way the chart's
jupyterhub_config.py loads it (every hub.config section into `c[section]`, then hub.extraConfig).
JupyterHub 5.5.0 and NativeAuthenticator 1.3.0 are the versions the chart's hub image ships
(zero-to-jupyterhub-k8s 4.4.0 images/hub/requirements.txt; pinned in requirements-dev.txt).

On localhost, no proxy process (an in-memory proxy class), nothing spawned. Shows that the admin
named in the stack signs up and logs in, a user who signs up is refused until the admin approves
them, and then gets in."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import JUPYTERHUB_NAMESPACE
from gpu_platform.components.platform.notebooks import jupyterhub_values
from gpu_platform.rehearsal.hub import IN_MEMORY_PROXY
from gpu_platform.rehearsal.processes import free_port

requests = pytest.importorskip("requests")
# The hub runs from its own virtualenv (requirements-jupyterhub.txt; `make jupyterhub-venv`, which make test runs).
HUB_PYTHON = Path(os.environ.get("JUPYTERHUB_PYTHON", Path(__file__).resolve().parents[1] / ".venv-jupyterhub" / "bin" / "python"))
helm_python = pytest.importorskip("helm_python")

ADMIN = "hubadmin"
PASSWORD = "correct-horse-battery-staple-7"
POOLS = [GpuPoolSpec("rtx", "g1-gpu-rtx6000-1", "Quadro RTX 6000", 1, 0, 1, "on-demand", {POOL_LABEL: "rtx"})]

# The test-only part of the hub's configuration: where to listen, where to keep state, and a proxy
# that keeps its routes in memory instead of starting configurable-http-proxy (a Node.js program).
CONFIG = '''
import yaml
''' + IN_MEMORY_PROXY + '''


c = get_config()  # noqa: F821
with open({values!r}) as f:
    chart_values = yaml.safe_load(f)
# as the chart's jupyterhub_config.py does (z2jh 4.4.0 files/hub/jupyterhub_config.py)
for section, cfg in (chart_values["hub"].get("config") or {{}}).items():
    assert section[:1].isupper(), section
    c[section].update(cfg)
for key, config_py in sorted((chart_values["hub"].get("extraConfig") or {{}}).items()):
    exec(config_py)

c.JupyterHub.proxy_class = InMemoryProxy
c.JupyterHub.bind_url = "http://127.0.0.1:{public_port}"
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{hub_port}"
c.JupyterHub.db_url = "sqlite:///{state}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "{state}/cookie_secret"
c.JupyterHub.pid_file = "{state}/jupyterhub.pid"
c.JupyterHub.cleanup_servers = False
c.JupyterHub.log_level = "INFO"
'''


def rendered_hub_values(admin_users: list[str]) -> dict[str, Any]:
    """The chart's own values as the hub reads them: the `values.yaml` key of the rendered hub Secret."""
    from tests.fit_support import chart_archive

    archive = chart_archive(versions.JUPYTERHUB.chart, versions.JUPYTERHUB.version)
    values = jupyterhub_values(POOLS, "standard", admin_users=admin_users)
    out = helm_python.Chart.load_archive(archive.read_bytes()).render(values, name="jupyterhub",
                                                                      namespace=JUPYTERHUB_NAMESPACE)
    for path, text in out.items():
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(text):
            if doc and doc["kind"] == "Secret" and doc["metadata"]["name"] == "hub":
                if "stringData" in doc and "values.yaml" in doc["stringData"]:
                    return yaml.safe_load(doc["stringData"]["values.yaml"])
                return yaml.safe_load(base64.b64decode(doc["data"]["values.yaml"]))
    raise AssertionError("the rendered chart has no hub Secret with values.yaml")


class Hub:
    def __init__(self, url: str, proc: subprocess.Popen, log: Path):
        self.url, self.proc, self.log = url, proc, log

    def session(self) -> "requests.Session":
        s = requests.Session()
        r = s.get(f"{self.url}/hub/login", timeout=10)
        assert r.status_code == 200, r.text[:500]
        return s

    def post(self, s: "requests.Session", path: str, data: dict[str, str]) -> "requests.Response":
        """A form POST as the browser sends it (with the _xsrf token the hub set as a cookie)."""
        return s.post(f"{self.url}/hub/{path}", data={**data, "_xsrf": s.cookies.get("_xsrf", "")},
                      allow_redirects=False, timeout=30)

    def signup(self, name: str, password: str = PASSWORD) -> str:
        s = self.session()
        r = self.post(s, "signup", {"username": name, "signup_password": password,
                                    "signup_password_confirmation": password})
        assert r.status_code == 200, r.text[:500]
        return r.text

    def login(self, name: str, password: str = PASSWORD) -> tuple["requests.Session", "requests.Response"]:
        s = self.session()
        return s, self.post(s, "login", {"username": name, "password": password})


@pytest.fixture(scope="module")
def hub(tmp_path_factory) -> Iterator[Hub]:
    state = tmp_path_factory.mktemp("hub")
    values_file = state / "values.yaml"
    values_file.write_text(yaml.safe_dump(rendered_hub_values([ADMIN])))
    hub_port, public_port = free_port(), free_port()
    (state / "jupyterhub_config.py").write_text(CONFIG.format(values=str(values_file), hub_port=hub_port,
                                                              public_port=public_port, state=state))
    log = state / "hub.log"
    with log.open("w") as out:
        if not HUB_PYTHON.exists():
            pytest.fail(f"{HUB_PYTHON} is missing: run `make jupyterhub-venv` (make test does)")
        proc = subprocess.Popen([str(HUB_PYTHON), "-m", "jupyterhub", "-f", str(state / "jupyterhub_config.py")],
                                cwd=state, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    url = f"http://127.0.0.1:{hub_port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"JupyterHub exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
            try:
                if requests.get(f"{url}/hub/api", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"JupyterHub did not answer within 60 s:\n{log.read_text()[-3000:]}")
            time.sleep(0.3)
        yield Hub(url, proc, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def logged_in(r: "requests.Response") -> bool:
    """A successful login redirects and sets the hub's login cookie; a refused one re-renders the form."""
    return r.status_code == 302 and "jupyterhub-hub-login" in r.cookies


def test_rendered_config_lets_approved_users_in() -> None:
    """What the hub loads: NativeAuthenticator, allow_all (JupyterHub 5 defaults it to False, and
    NativeAuthenticator does not set it, so nobody could log in), admin_access off whatever the provider does with a
    null (the review of 2026-11-29 found the engine's provider kept the chart's true where a null was meant to drop it)."""
    config = rendered_hub_values([ADMIN])["hub"]["config"]
    assert config["JupyterHub"]["authenticator_class"] == "nativeauthenticator.NativeAuthenticator"
    assert config["Authenticator"]["allow_all"] is True
    assert config["Authenticator"]["admin_users"] == [ADMIN]
    assert config["NativeAuthenticator"]["open_signup"] is False
    assert config["JupyterHub"]["admin_access"] is False


@pytest.mark.sidevenv
def test_admin_signs_up_and_logs_in_users_wait_for_approval(hub: Hub) -> None:
    # first admin: signs up under the configured name, is authorized at once, logs in
    assert "has not been authorized" not in hub.signup(ADMIN)
    admin, r = hub.login(ADMIN)
    assert logged_in(r), hub.log.read_text()[-2000:]
    me = admin.get(f"{hub.url}/hub/api/user", headers={"X-XSRFToken": admin.cookies.get("_xsrf", "")}, timeout=10)
    assert me.status_code == 200 and json.loads(me.text)["admin"] is True

    # anyone else signs up but is refused until an admin approves
    hub.signup("alice")
    _, r = hub.login("alice")
    assert not logged_in(r) and "has not been authorized" in r.text
    _, r = hub.login("alice", "wrong-password-entirely")
    assert not logged_in(r)

    # a non-admin cannot approve anyone; the admin can
    approve = admin.get(f"{hub.url}/hub/authorize/alice", allow_redirects=False, timeout=10)
    assert approve.status_code == 302
    alice, r = hub.login("alice")
    assert logged_in(r), hub.log.read_text()[-2000:]
    hub.signup("mallory")
    assert alice.get(f"{hub.url}/hub/authorize/mallory", allow_redirects=False, timeout=10).status_code == 403
    _, r = hub.login("mallory")
    assert not logged_in(r)


@pytest.mark.sidevenv
def test_unknown_user_is_refused(hub: Hub) -> None:
    _, r = hub.login("nobody")
    assert not logged_in(r) and "Invalid username or password" in r.text
