"""A stack's Kubernetes layer deployed by the real Pulumi engine onto a rehearsal control plane (issue 36 item 3).

The engine is the one `make engine-build` builds (the CLI, the Python language host, pulumi-resource-kubernetes
v4.25.0) and the program runs in `.venv-engine` (`make engine-venv`: pulumi-kubernetes 4.25.0). Offline: a file
backend and a passphrase secrets provider in a folder of the run's own, no update check, no plugin download,
every Helm chart from a local folder ($GPU_PLATFORM_LOCAL_CHARTS, gpu_platform/components/helm.py). The stack's
cloud layer is stood in for by `ClusterShim`: the control plane's admin kubeconfig under the context the stack
file names, and the KWOK nodes of the stack's node model (preflight's fit), with the StorageClass the stack file
says exists. That is what a `cloud: kubernetes` stack reads from a cluster, so the program itself runs unchanged.

What one run does, each step once: `pulumi up`; the engine's own record of what it made (`pulumi stack export`);
a second `pulumi up --expect-no-changes` (exit 0 only when the engine finds nothing to change); `pulumi destroy`;
then every object the API server lists that the control plane did not have before `up` (none may be left).

What it cannot deploy yet, and why (the run refuses those parts by name rather than hanging): the rehearsal's
KWOK nodes run no containers and its control plane has no service network, so a Helm hook Job never completes
(kube-prometheus-stack's admission-create waits the release's whole timeout), an in-cluster admission webhook
(Kueue's, JupyterHub's) is unreachable, and Kubeflow Pipelines' kustomize remote targets are fetched from GitHub
at `pulumi up`. The rehearsal's own installer works around the first two (gpu_platform/rehearsal/install.py);
under the engine they need changes to the objects the program deploys, which this run does not make.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gpu_platform.components.helm import LOCAL_CHARTS_ENV
from gpu_platform.rehearsal.controlplane import ControlPlane
from gpu_platform.rehearsal.kube import ApiError, Client
from gpu_platform.rehearsal.nodes import create_nodes
from gpu_platform.rehearsal.volumes import existing_storage_class

PASSPHRASE = "rehearsal-only-passphrase"
# The platform parts the engine cannot deploy onto the rehearsal control plane (the module docstring says why).
NOT_DEPLOYABLE = {
    "kubeflow": "Kubeflow Pipelines' kustomize remote targets are fetched from github.com at `pulumi up`",
    "notebooks": "JupyterHub's chart hook and admission webhook need a pod network the KWOK nodes do not have",
    "queue": "Kueue's admission webhook (failurePolicy Fail) is unreachable without a service network",
    "monitoring": "kube-prometheus-stack's admission-create hook Job never completes on a KWOK node",
}
# Of those, the ones that cannot even be previewed offline: the policy preview runs with them off.
NOT_PREVIEWABLE = {"kubeflow"}
# Stand-ins for the secrets CI passes from the deploy environment (deploy.yml's config-map).
STANDIN_SECRETS = {"checkpoint-store:accessKeyId": "rehearsal-access-key",
                   "checkpoint-store:secretAccessKey": "rehearsal-secret-key"}


class EngineError(RuntimeError):
    """A CLI command failed; the message holds the command and the end of its output."""


@dataclass
class EngineReport:
    stack: str
    resources: list[dict] = field(default_factory=list)  # the engine's record: type, name, and for Helm, status
    second_up: str = ""  # the engine's summary of the no-op `up`
    left_behind: list[str] = field(default_factory=list)
    not_deployed: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    policy_violations: list[str] = field(default_factory=list)  # "[level]  policy  (type: name)" lines of the preview

    def to_json(self) -> dict:
        return {"stack": self.stack, "resources": self.resources, "secondUp": self.second_up,
                "leftBehind": self.left_behind, "notDeployed": self.not_deployed, "timings": self.timings,
                "policyViolations": self.policy_violations}


def engine_bin() -> Path:
    from gpu_platform.rehearsal.binaries import bin_dir  # the rehearsal's bin/ (make engine-build)

    return bin_dir()


def snapshot(client: Client) -> set[str]:
    """Every object the API server lists, as `group/version kind namespace/name` (events and leases left out:
    the control plane writes them by itself)."""
    seen: set[str] = set()
    versions = [("", "v1")]
    for group in client.request("GET", "/apis").get("groups", []):
        versions.append((group["name"], group["preferredVersion"]["version"]))
    for group, version in versions:
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        gv = version if not group else f"{group}/{version}"
        for res in client.request("GET", base).get("resources", []):
            if "/" in res["name"] or "list" not in res.get("verbs", []) or res["kind"] in ("Event", "Lease"):
                continue
            try:
                items = client.request("GET", f"{base}/{res['name']}").get("items", [])
            except ApiError:
                continue
            for item in items:
                meta = item.get("metadata") or {}
                seen.add(f"{gv} {res['kind']} {meta.get('namespace', '')}/{meta.get('name')}")
    return seen


@dataclass
class ClusterShim:
    """The cloud layer's outputs for the engine: a kubeconfig whose context is the one the stack file names
    (`kubernetes.context`), pointing at the rehearsal's API server, and the stack's nodes as KWOK nodes."""
    cp: ControlPlane
    context: Optional[str]

    def kubeconfig(self, path: Path) -> Path:
        doc = json.loads(Path(self.cp.admin_kubeconfig).read_text())
        name = self.context or doc["current-context"]
        doc["contexts"][0]["name"] = name
        doc["current-context"] = name
        path.write_text(json.dumps(doc))
        path.chmod(0o600)
        return path


class EngineRun:
    """One stack through the engine in `out`: project copy, backend, PULUMI_HOME and logs all under it."""

    def __init__(self, stack: str, cfg: Any, model: Any, out: Path, root: Path, charts: Path,
                 venv: Optional[Path] = None, config: Optional[dict[str, str]] = None, plant: Optional[str] = None,
                 policy_config: Optional[Path] = None):
        self.stack, self.cfg, self.model, self.out, self.root = stack, cfg, model, Path(out), Path(root)
        self.charts, self.venv = Path(charts), Path(venv or root / ".venv-engine")
        self.config = dict(config or {})
        self.plant = plant  # Python run after the program, in its Pulumi runtime (tests plant defects with it)
        self.policy_config = policy_config  # the stack's policy pack config (preflight policy-config), as CI passes it
        self.policy_preview: Optional[subprocess.CompletedProcess] = None
        self.report = EngineReport(stack)
        self.project = self.out / "project"
        self.log_dir = self.out / "logs"
        self.cp: Optional[ControlPlane] = None

    # --- set-up ----------------------------------------------------------------------------------------------

    def _project(self) -> None:
        self.project.mkdir(parents=True)
        for top in ("Pulumi.yaml", "gpu_platform", "examples"):
            (self.project / top).symlink_to(self.root / top)
        shutil.copytree(self.root / "stacks", self.project / "stacks")
        (self.project / ".venv").symlink_to(self.venv)
        if self.plant is None:
            (self.project / "__main__.py").symlink_to(self.root / "__main__.py")
        else:
            self.replant(self.plant)

    def replant(self, plant: str) -> None:
        """The program as it is, then `plant` (Python in the same Pulumi runtime): what the next command runs."""
        self.plant = plant
        (self.project / "__main__.py").write_text(
            f"import runpy\n\nrunpy.run_path({str(self.root / '__main__.py')!r}, run_name='__main__')\n\n{plant}\n")

    def env(self, kubeconfig: Path) -> dict[str, str]:
        for d in ("state", "pulumi-home"):
            (self.out / d).mkdir(exist_ok=True)
        return {
            "PATH": os.pathsep.join([str(self.venv / "bin"), str(engine_bin()), "/usr/bin", "/bin"]),
            "HOME": str(self.out), "PULUMI_HOME": str(self.out / "pulumi-home"),
            "PULUMI_BACKEND_URL": f"file://{self.out / 'state'}", "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            "KUBECONFIG": str(kubeconfig), LOCAL_CHARTS_ENV: str(self.charts),
            # The policy pack imports the package it ships in; .venv-engine does not install it.
            "PYTHONPATH": str(self.root),
            # Nothing but the local API server may be reached: a download attempt fails instead of succeeding.
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
        }

    def pulumi(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        t = time.monotonic()
        proc = subprocess.run([str(engine_bin() / "pulumi"), *args, "--non-interactive"], cwd=self.project,
                              env=self._env, capture_output=True, text=True, timeout=timeout)
        step = args[0] if args[0] != "stack" else f"stack-{args[1]}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "pulumi.log", "a") as log:
            log.write(f"$ pulumi {' '.join(args)}\n{proc.stdout}{proc.stderr}\n(exit {proc.returncode})\n\n")
        self.report.timings[step] = round(self.report.timings.get(step, 0) + time.monotonic() - t, 1)
        if check and proc.returncode != 0:
            raise EngineError(f"pulumi {' '.join(args)} exited {proc.returncode}:\n{(proc.stdout + proc.stderr)[-4000:]}")
        return proc

    # --- the run ---------------------------------------------------------------------------------------------

    def __enter__(self) -> "EngineRun":
        t = time.monotonic()
        self.cp = ControlPlane(self.log_dir)
        self.cp.__enter__()
        try:
            create_nodes(self.cp.client, self.model)
            storage = existing_storage_class(self.cfg)
            if storage is not None:
                self.cp.client.apply(storage)
            self.report.timings["controlPlane"] = round(time.monotonic() - t, 1)
            self._project()
            context = getattr(getattr(self.cfg, "kubernetes", None), "context", None)
            self.shim = ClusterShim(self.cp, context)
            self._env = self.env(self.shim.kubeconfig(self.out / "kubeconfig"))
            self.before = snapshot(self.cp.client)
            self.pulumi("stack", "init", self.stack)
            settings = ["--secret" if k in STANDIN_SECRETS else "--plaintext" for k in self.config]
            pairs = [x for (k, v), flag in zip(self.config.items(), settings) for x in (flag, f"{k}={v}")]
            secrets = [x for k, v in STANDIN_SECRETS.items() for x in ("--secret", f"{k}={v}")]
            self.pulumi("config", "set-all", "--stack", self.stack, *secrets, *pairs)
            # Parts that cannot even preview offline first; then the policy pack on the stack as shipped otherwise
            # (a preview deploys nothing), as CI previews it; then the parts the engine cannot deploy here.
            parts = sorted(NOT_DEPLOYABLE, key=lambda p: p not in NOT_PREVIEWABLE)
            for part in parts:
                if self.policy_config is not None and self.policy_preview is None and part not in NOT_PREVIEWABLE:
                    self.policy_preview = self.preview_with_policies(self.policy_config)
                self.pulumi("config", "set", "--path", f"gpu-platform:platform.{part}", "false", "--stack", self.stack)
                self.report.not_deployed[part] = NOT_DEPLOYABLE[part]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.cp is not None:
            self.cp.close()
            self.cp = None

    def up(self) -> None:
        self.pulumi("up", "--yes", "--skip-preview", "--stack", self.stack)
        state = json.loads(self.pulumi("stack", "export", "--stack", self.stack).stdout)
        for res in state["deployment"].get("resources") or []:
            if res["type"].startswith("pulumi:providers:") or res["type"] == "pulumi:pulumi:Stack":
                continue
            entry = {"type": res["type"], "name": res["urn"].rsplit("::", 1)[-1]}
            outputs = res.get("outputs") or {}
            if res["type"] == "kubernetes:helm.sh/v3:Release":
                status = outputs.get("status") or {}
                entry.update(chart=outputs.get("chart"), version=outputs.get("version"),
                             status=status.get("status"), namespace=status.get("namespace"))
            self.report.resources.append(entry)

    def second_up(self) -> subprocess.CompletedProcess:
        """`pulumi up --refresh --expect-no-changes`: exit 0 only if the engine finds nothing to change once it has
        read every object back from the API server (drift.yml's check): a value the API server defaults or
        rewrites differently from the program's shows up here as a change."""
        proc = self.pulumi("up", "--yes", "--skip-preview", "--refresh", "--expect-no-changes", "--diff",
                           "--stack", self.stack, check=False)
        self.report.second_up = (proc.stdout + proc.stderr).split("Resources:", 1)[-1].strip().split("\n\n", 1)[0]
        return proc

    def preview_with_policies(self, policy_config: Path) -> subprocess.CompletedProcess:
        """`pulumi preview --policy-pack gpu_platform/policies --policy-pack-config FILE`, as the workflows run it:
        the pack through the engine on what the program registers; exit non-zero on a mandatory violation."""
        proc = self.pulumi("preview", "--policy-pack", str(self.project / "gpu_platform" / "policies"),
                           "--policy-pack-config", str(policy_config), "--stack", self.stack, check=False)
        self.report.policy_violations = [line.strip()[2:] for line in (proc.stdout + proc.stderr).splitlines()
                                         if re.match(r"\s*- \[(mandatory|advisory)\]", line)]
        return proc

    def destroy(self) -> None:
        self.pulumi("destroy", "--yes", "--skip-preview", "--stack", self.stack)
        deadline = time.monotonic() + 60
        while True:  # a namespace's contents go after the namespace's own deletion returns
            left = sorted(snapshot(self.cp.client) - self.before)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(1)
        self.report.left_behind = left
