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

What the run stands in for (EngineReport.stood_in): the container of a Helm hook Job it knows, run in the pod's
place with the pod's own ServiceAccount, the pod then completed as the kubelet would (gpu_platform/rehearsal/hooks.py:
kube-prometheus-stack's admission-create and admission-patch, which make the operator's webhook certificate Secret and
patch its CA into the webhook configurations); on Linode, the CRDs cilium-operator registers when it starts (shims.py).
kube-prometheus-stack's admission webhooks (failurePolicy Ignore, as the chart renders them) still answer nobody, so
the program's PrometheusRules are admitted unvalidated here (the rehearsal's own installer validates them with the
operator itself). The notebooks part deploys as it is without the queue (which is switched off below): JupyterHub's
release and the program's objects around it, not the notebooks' LocalQueues or Kueue's pod webhook on their
namespace (the program renders its image-puller hooks off).

What it cannot deploy yet, and why (the run switches those parts off by name rather than hanging; each reason was
seen under the engine on 2026-11-28): the rehearsal's KWOK nodes run no containers and its control plane has no pod
or service network, so a Helm hook Job nothing stands in for never completes (the Kubeflow Trainer chart's
post-install runtimes installer) and an in-cluster admission webhook with failurePolicy Fail (Kueue's, the
Trainer's) answers nobody. The rehearsal's own installer works around both
(gpu_platform/rehearsal/install.py: it performs the Trainer's `kubectl apply` hook itself and points each webhook's
clientConfig at a controller process on the host); under the engine that would change the objects the program
deploys. kube-apiserver's --enable-aggregator-routing does make admission webhooks resolve a Service through its
EndpointSlices (kubernetes v1.35.4 cmd/kube-apiserver/app/server.go buildServiceResolver, handed to the admission
plugins in pkg/controlplane/apiserver/config.go), but the address it finds is a KWOK pod's, where nothing listens
(and a pod address on the host's loopback is refused: EndpointSlice addresses may not be loopback, pkg/apis/core/
validation ValidateEndpointIP). A way for Kueue that changes no object, not built yet: kube-apiserver dials a
Service-referenced webhook through its egress selector's `cluster` network context (k8s.io/apiserver v0.35.4
pkg/util/webhook/authentication.go). Tried on 2026-11-29 with the rehearsal's kube-apiserver v1.35.4: an
EgressSelectorConfiguration `cluster` with HTTPConnect over a Unix socket sends `CONNECT <ClusterIP>:443` to a proxy
there, and a webhook server behind it, with a certificate for <service>.<namespace>.svc under the configuration's
caBundle, was called and obeyed (failurePolicy Fail). Over TCP with an http:// URL, which the config's validation
accepts, kube-apiserver v1.35.4 panics at start (egressselector.getTLSConfig dereferences the absent tlsConfig). Left
to build: a proxy that hands the Service's address to kueue-manager on the host, run with the chart's Configuration and
its internal certificate management on (open-policy-agent/cert-controller v0.16.0 makes the Secret and injects the CA,
then waits for the kubelet to mount the Secret into its certDir, ensureCertsMounted: the rehearsal would write it
there), and the pod's readiness following the process's (a KWOK pod is Ready at once, so Helm would go on to the
program's Kueue objects before the webhook serves, which a kubelet's readiness probe prevents).
Kubeflow's kustomize installs (Pipelines, Katib) no longer stop it: with $GPU_PLATFORM_LOCAL_CHARTS the program
builds them from the folder's pinned YAML (components/helm.py local_kustomize; the provider builds them offline).
The policy preview still runs without Kubeflow, and Kubeflow would not deploy even with a pod network:
NOT_PREVIEWABLE says what the engine found there (an SDK bug of the pinned pulumi-kubernetes, and the pack).
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
from gpu_platform.rehearsal.hooks import HookRunner
from gpu_platform.rehearsal.hooks import stood_in as hook_lines
from gpu_platform.rehearsal.kube import ApiError, Client
from gpu_platform.rehearsal.nodes import create_nodes
from gpu_platform.rehearsal.volumes import Provisioner, cluster_storage_classes

PASSPHRASE = "rehearsal-only-passphrase"
# The platform parts the engine cannot deploy onto the rehearsal control plane (the module docstring says why).
NOT_DEPLOYABLE = {
    "kubeflow": ("the Kubeflow Trainer chart's post-install hook Job kubeflow-trainer-runtimes-installer never completes "
                 "on a KWOK node, and the program's ClusterTrainingRuntime is checked by the Trainer's validating webhook "
                 "(failurePolicy Fail, Service kubeflow-system/kubeflow-trainer-controller-manager), which nothing serves "
                 "without a pod network; its kustomize installs build from the local folder, but the pinned SDK cannot run "
                 "them (NOT_PREVIEWABLE)"),
    "queue": "Kueue's admission webhook (failurePolicy Fail) answers nobody without a pod network",
}
# Of those, the ones the policy preview (the stack as shipped otherwise) also leaves out, and why (seen 2026-11-28).
NOT_PREVIEWABLE = {
    "kubeflow": ("pulumi-kubernetes 4.25.0's Python SDK (the provider's release, .venv-engine) types kustomize.v2.Directory's "
                 "`resources` output as a string, so the program stops (AssertionError \"Unexpected type. Expected 'list' "
                 "got '<class 'str'>'\") once the provider has built the install and returns the list "
                 "(pulumi/pulumi-kubernetes#3389, fixed by #4295 after 4.25.0); and through the engine each upstream "
                 "object of those installs is a resource the pack judges: the mandatory images-by-digest refuses Katib's "
                 "Deployments (images by tag), which preflight's mocks never expand"),
}
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
    preview_changes: list[dict] = field(default_factory=list)  # the last preview_changes(): steps other than same
    stood_in: list[str] = field(default_factory=list)  # what the rehearsal did in the data plane's place
    # What `helm uninstall` keeps by design: Helm-created namespaces, a chart's crds/ (split_left_by_helm).
    left_by_helm: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"stack": self.stack, "resources": self.resources, "secondUp": self.second_up,
                "leftBehind": self.left_behind, "leftByHelm": self.left_by_helm, "notDeployed": self.not_deployed, "timings": self.timings,
                "policyViolations": self.policy_violations, "previewChanges": self.preview_changes,
                "stoodIn": self.stood_in}


def shim_prelude(cloud: str) -> str:
    """What the engine's `__main__.py` runs before the program for a stack of `cloud`: the cloud-layer shim
    (gpu_platform/rehearsal/shims.py) where the cloud creates the cluster; nothing for `cloud: kubernetes`."""
    from gpu_platform.rehearsal.shims import SHIMMED_CLOUDS

    if cloud == "kubernetes":
        return ""
    if cloud not in SHIMMED_CLOUDS:
        raise EngineError(f"no cloud-layer shim for cloud {cloud!r} (gpu_platform/rehearsal/shims.py has "
                          f"{', '.join(SHIMMED_CLOUDS)})")
    return f"from gpu_platform.rehearsal import shims\n\nshims.install({cloud!r})\n"


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


def chart_crds(archive: str) -> list[tuple[str, str, list[str]]]:
    """(name, group, versions) of every CustomResourceDefinition in a chart archive's crds/ directories, its subcharts'
    included: what Helm installs before the release's templates and never upgrades or deletes (Helm docs, "Custom
    Resource Definitions"). [] where the archive is not a readable file."""
    import tarfile

    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: the CRDs are megabytes of YAML

    class Loader(base):  # type: ignore[valid-type,misc]  # YAML 1.1's `=` (the "value" type) is a plain string here
        pass

    Loader.add_constructor("tag:yaml.org,2002:value", yaml.SafeLoader.construct_yaml_str)
    out = []
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                if not member.isfile() or len(parts) < 3 or parts[-2] != "crds" or not parts[-1].endswith((".yaml", ".yml")):
                    continue
                for doc in yaml.load_all(tar.extractfile(member).read(), Loader=Loader):  # noqa: S506
                    if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                        spec = doc.get("spec") or {}
                        out.append((doc["metadata"]["name"], spec.get("group", ""),
                                    [v["name"] for v in spec.get("versions") or [] if v.get("served", True)]))
    except (OSError, ValueError, tarfile.TarError):
        return []
    return out


def split_left_by_helm(left: list[str], resources: list[dict]) -> tuple[list[str], list[str]]:
    """(left behind, left by Helm): of what `destroy` left, what `helm uninstall` keeps by design: a namespace a Release
    of the program created with --create-namespace (helm/helm#1464), with the ServiceAccount and CA ConfigMap the
    control plane puts in every namespace; and the CRDs of a Release's chart's crds/ directories (chart_crds), with
    the APIService kube-apiserver keeps for each served version of their groups. Anything else is left behind."""
    releases = [r for r in resources if r.get("type") == "kubernetes:helm.sh/v3:Release"]
    helm = {x for r in releases if r.get("createNamespace") for ns in [r.get("namespace")]
            for x in (f"v1 Namespace /{ns}", f"v1 ConfigMap {ns}/kube-root-ca.crt", f"v1 ServiceAccount {ns}/default")}
    for r in releases:
        for name, group, versions in chart_crds(str(r.get("chart") or "")):
            helm.add(f"apiextensions.k8s.io/v1 CustomResourceDefinition /{name}")
            helm.update(f"apiregistration.k8s.io/v1 APIService /{v}.{group}" for v in versions)
    return [x for x in left if x not in helm], [x for x in left if x in helm]


@dataclass
class ClusterShim:
    """The cloud layer's outputs for the engine: a kubeconfig whose context is the one the stack file names
    (`kubernetes.context`), pointing at the rehearsal's API server, and the stack's nodes as KWOK nodes."""
    cp: ControlPlane
    context: Optional[str]

    def network_objects(self, network: Any) -> list[dict]:
        """What a cluster whose `kubernetes.network` is `network` has, and the program reads before it installs
        anything (components/kubernetes/cluster.py `_read_network`): with Cilium, the agent's kube-system/cilium-config
        (policy-cidr-match-mode, enable-policy as the stack file states them); with `apiServer`, the default/kubernetes
        EndpointSlice that kube-apiserver keeps (the rehearsal's runs with --endpoint-reconciler-type=none, so it has
        none) with an address where the stack file says the API server is (the first of apiServer.cidrs, else with
        onNodes the first host of nodeCidrs) and its port. The reads are exercised; as the shim writes what the stack
        file says, the disagreement check always agrees here (its own tests plant disagreements)."""
        import ipaddress

        out: list[dict] = []
        if network is None or network.cni == "none":
            return out
        if network.cni == "cilium":
            cilium = network.cilium
            out.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "cilium-config", "namespace": "kube-system"},
                        "data": {"policy-cidr-match-mode": " ".join(cilium.policy_cidr_match_mode) if cilium else "",
                                 "enable-policy": cilium.enable_policy if cilium else "default"}})
        api = network.api_server
        if api is not None:
            ranges = list(api.cidrs) or (list(network.node_cidrs) if api.on_nodes else [])
            address = str(next(ipaddress.ip_network(str(ranges[0]), strict=False).hosts())) if ranges else "127.0.0.1"
            # No managed-by label: neither kube-controller-manager's EndpointSlice controller nor its mirroring
            # controller touches it.
            out.append({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                        "metadata": {"name": "kubernetes", "namespace": "default",
                                     "labels": {"kubernetes.io/service-name": "kubernetes"}},
                        "addressType": "IPv6" if ":" in address else "IPv4",
                        "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                        "ports": [{"name": "https", "port": api.port, "protocol": "TCP"}]})
        return out

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
                 policy_config: Optional[Path] = None, prelude: Optional[str] = None, also_off: tuple[str, ...] = ()):
        self.stack, self.cfg, self.model, self.out, self.root = stack, cfg, model, Path(out), Path(root)
        self.charts, self.venv = Path(charts), Path(venv or root / ".venv-engine")
        self.config = dict(config or {})
        self.plant = plant  # Python run after the program, in its Pulumi runtime (tests plant defects with it)
        # Python run before the program: the cloud-layer shim of a stack whose cloud creates the cluster (shims.py),
        # and a test's change to what the program reads (a chart's pinned version).
        self.prelude = prelude if prelude is not None else shim_prelude(getattr(cfg, "cloud", "kubernetes"))
        self.policy_config = policy_config  # the stack's policy pack config (preflight policy-config), as CI passes it
        # Parts a caller switches off as well, after the policy preview (a test that needs none of them: its cost).
        self.also_off = tuple(also_off)
        self.policy_preview: Optional[subprocess.CompletedProcess] = None
        self.report = EngineReport(stack)
        self.project = self.out / "project"
        self.log_dir = self.out / "logs"
        self.cp: Optional[ControlPlane] = None
        self.provisioner: Optional[Provisioner] = None
        self.hooks: Optional[HookRunner] = None
        self.preview_errors: list[str] = []

    # --- set-up ----------------------------------------------------------------------------------------------

    def _project(self) -> None:
        self.project.mkdir(parents=True)
        for top in ("Pulumi.yaml", "gpu_platform", "examples"):
            (self.project / top).symlink_to(self.root / top)
        shutil.copytree(self.root / "stacks", self.project / "stacks")
        (self.project / ".venv").symlink_to(self.venv)
        if self.plant is None and not self.prelude:
            (self.project / "__main__.py").symlink_to(self.root / "__main__.py")
        else:
            self.replant(self.plant, self.prelude)

    def replant(self, plant: Optional[str], prelude: Optional[str] = None) -> None:
        """`prelude` (None: the run's own), the program as it is, then `plant` (Python in the same Pulumi runtime):
        what the next command runs."""
        self.plant, self.prelude = plant, self.prelude if prelude is None else prelude
        prelude = self.prelude
        main = self.project / "__main__.py"
        if main.is_symlink():
            main.unlink()
        main.write_text(f"import runpy\n\n{prelude or ''}\n"
                        f"runpy.run_path({str(self.root / '__main__.py')!r}, run_name='__main__')\n\n{plant or ''}\n")

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
        self.cp = ControlPlane(self.log_dir, extended_resource_toleration=self.model.extended_resource_toleration)
        self.cp.__enter__()
        try:
            create_nodes(self.cp.client, self.model)
            for storage, _why in cluster_storage_classes(self.model.cloud, self.cfg):
                self.cp.client.apply(storage)
            # The cluster's CSI driver: a PersistentVolume for each Pending claim (Kubeflow's MySQL and artifact
            # store, Katib's MySQL), which the program's Deployments wait for.
            self.provisioner = Provisioner(self.cp.client).start()
            # The containers of Helm hook Jobs it knows (hooks.py: kube-prometheus-stack's certificate hooks).
            self.hooks = HookRunner(self.cp.client).start()
            self._project()
            section = getattr(self.cfg, "kubernetes", None)
            self.shim = ClusterShim(self.cp, getattr(section, "context", None))
            for obj in self.shim.network_objects(getattr(section, "network", None)):
                self.cp.client.apply(obj)
            # What a controller of the cloud layer registers when it starts (Cilium's CRDs on Linode: shims.py).
            from gpu_platform.rehearsal.shims import cluster_objects

            registered = cluster_objects(self.cfg)
            for obj in registered:
                self.cp.client.apply(obj)
            if registered:
                self.report.stood_in.append(
                    f"{len(registered)} CRDs cilium-operator registers when it starts (no container runs on a KWOK "
                    f"node): {', '.join(o['metadata']['name'] for o in registered)}")
            self.report.timings["controlPlane"] = round(time.monotonic() - t, 1)
            self._env = self.env(self.shim.kubeconfig(self.out / "kubeconfig"))
            self.before = snapshot(self.cp.client)
            self.pulumi("stack", "init", self.stack)
            settings = ["--secret" if k in STANDIN_SECRETS else "--plaintext" for k in self.config]
            pairs = [x for (k, v), flag in zip(self.config.items(), settings) for x in (flag, f"{k}={v}")]
            secrets = [x for k, v in STANDIN_SECRETS.items() for x in ("--secret", f"{k}={v}")]
            self.pulumi("config", "set-all", "--stack", self.stack, *secrets, *pairs)
            # The parts the policy preview cannot take first; then the policy pack on the stack as shipped otherwise
            # (a preview deploys nothing), as CI previews it; then the parts the engine cannot deploy here.
            for part in sorted({*NOT_DEPLOYABLE, *self.also_off}, key=lambda p: (p not in NOT_PREVIEWABLE, p)):
                if self.policy_config is not None and self.policy_preview is None and part not in NOT_PREVIEWABLE:
                    self.policy_preview = self.preview_with_policies(self.policy_config)
                self.pulumi("config", "set", "--path", f"gpu-platform:platform.{part}", "false", "--stack", self.stack)
                if part in NOT_DEPLOYABLE:
                    self.report.not_deployed[part] = NOT_DEPLOYABLE[part]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.hooks is not None:
            self.hooks.stop()
            self.report.stood_in.extend(hook_lines(self.hooks))
            self.hooks = None
        if self.provisioner is not None:
            self.provisioner.stop()
            self.provisioner = None
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
                             status=status.get("status"), namespace=status.get("namespace"),
                             createNamespace=bool((res.get("inputs") or {}).get("createNamespace")))
            self.report.resources.append(entry)

    def second_up(self) -> subprocess.CompletedProcess:
        """`pulumi up --refresh --expect-no-changes`: exit 0 only if the engine finds nothing to change once it has
        read every object back from the API server (drift.yml's check): a value the API server defaults or
        rewrites differently from the program's shows up here as a change."""
        proc = self.pulumi("up", "--yes", "--skip-preview", "--refresh", "--expect-no-changes", "--diff",
                           "--stack", self.stack, check=False)
        self.report.second_up = (proc.stdout + proc.stderr).split("Resources:", 1)[-1].strip().split("\n\n", 1)[0]
        return proc

    def preview_changes(self, check: bool = True) -> list[dict]:
        """`pulumi preview --json`: each step the engine would take other than `same` or a read, as it reports it
        (op, type, name, and the keys its diff names), e.g. after a prelude that moves one chart's pinned version.
        With check=False a failed preview still returns the steps it reported; its error diagnostics are in
        `preview_errors`."""
        proc = self.pulumi("preview", "--json", "--stack", self.stack, check=check)
        doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
        self.preview_errors = [d.get("message", "") for d in doc.get("diagnostics") or [] if d.get("severity") == "error"]
        if proc.returncode != 0 and not self.preview_errors:
            self.preview_errors = [(proc.stdout + proc.stderr)[-2000:]]
        steps = doc.get("steps") or []
        out = []
        for step in steps:
            if step.get("op") in ("same", "read"):  # a read (`.get`) is made on every run and changes nothing
                continue
            urn = step.get("urn", "")
            out.append({"op": step.get("op"), "type": urn.split("::")[-2].rsplit("$", 1)[-1] if "::" in urn else "",
                        "name": urn.rsplit("::", 1)[-1], "diffKeys": sorted(step.get("diffReasons") or [])})
        self.report.preview_changes = out
        return out

    def preview_with_policies(self, policy_config: Path) -> subprocess.CompletedProcess:
        """`pulumi preview --policy-pack gpu_platform/policies --policy-pack-config FILE`, as the workflows run it:
        the pack through the engine on what the program registers; exit non-zero on a mandatory violation."""
        proc = self.pulumi("preview", "--policy-pack", str(self.project / "gpu_platform" / "policies"),
                           "--policy-pack-config", str(policy_config), "--stack", self.stack, check=False)
        self.report.policy_violations = [line.strip()[2:] for line in (proc.stdout + proc.stderr).splitlines()
                                         if re.match(r"\s*- \[(mandatory|advisory)\]", line)]
        return proc

    def _delete_released_volumes(self) -> None:
        """What the CSI driver does for a released volume of reclaim policy Delete: the stand-in's hostPath volumes
        have no deleter in kube-controller-manager, which marks them Failed instead."""
        for pv in self.cp.client.list("v1", "PersistentVolume"):
            spec, phase = pv.get("spec") or {}, (pv.get("status") or {}).get("phase")
            if (str((spec.get("hostPath") or {}).get("path", "")).startswith("/rehearsal-volumes/")
                    and spec.get("persistentVolumeReclaimPolicy") == "Delete" and phase in ("Released", "Failed")):
                try:
                    self.cp.client.delete("v1", "PersistentVolume", pv["metadata"]["name"])
                except ApiError:
                    pass

    def destroy(self) -> None:
        self.pulumi("destroy", "--yes", "--skip-preview", "--stack", self.stack)
        deadline = time.monotonic() + 60
        while True:  # a namespace's contents go after the namespace's own deletion returns
            self._delete_released_volumes()
            left = sorted(snapshot(self.cp.client) - self.before)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(1)
        self.report.left_behind, self.report.left_by_helm = split_left_by_helm(left, self.report.resources)
