"""A stack's Kubernetes layer deployed by the real Pulumi engine onto a rehearsal control plane (issue 36 item 3).

The engine is the one `make engine-build` builds (the CLI, the Python language host, pulumi-resource-kubernetes
v4.25.0) and the program runs in its own `.venv` (requirements.txt: pulumi-kubernetes 4.34.2, what users run; the
engine takes the provider binary on $PATH whatever release the SDK names: docs/rehearsal.md says why the pair is
safe; tests/test_rehearsal_engine.py checks every input the program sends is in that provider's schema). Offline:
a file backend and a passphrase secrets provider in a folder of the run's own, no update check, no plugin download,
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
patch its CA into the webhook configurations; the Kubeflow Trainer chart's runtimes installer and cleanup, kubectl's
requests for their scripts); Kueue's controller pods (gpu_platform/rehearsal/controller_host.py):
kueue-manager, built from the pinned module, runs on the host with the Configuration the chart rendered (its internal
certificate management on: it makes the webhook Secret and injects its CA; the rehearsal writes the Secret into the
process's certDir as the kubelet mounts it), as the Deployment's ServiceAccount, and the pods' readiness follows the
process's readinessProbe (KWOK holds them Pending: ControlPlane held_images), so Helm and then the program's Kueue
objects wait for the webhooks to serve; on Linode, the CRDs cilium-operator registers when it starts (shims.py).
kube-apiserver reaches a Service-referenced webhook through its egress selector's `cluster` network context, which
the run's control plane sends to the rehearsal's webhook proxy (gpu_platform/rehearsal/webhook_proxy.py: a Service's
cluster IP to the local address registered for it), so every webhook configuration stays as the chart renders it.
kube-prometheus-stack's admission webhooks (failurePolicy Ignore, as the chart renders them) have no address
registered, so the program's PrometheusRules are admitted unvalidated here (the rehearsal's own installer validates
them with the operator itself); Kueue's visibility APIServices stay unavailable (kueue-manager runs with its
visibility server off: it writes its certificates to the fixed path /visibility). The notebooks part deploys with
the queue: JupyterHub's release, the notebooks' LocalQueues and Kueue's pod webhook on their namespace (the program
renders its image-puller hooks off).

Kubeflow deploys the same way: trainer-manager and jobset-manager are hosted as kueue-manager is, each run at its pod's
paths (podmounts.py: both read the fixed certificate folder /tmp/k8s-webhook-server/serving-certs and their namespace
from the ServiceAccount mount), their charts' certificate management on; the Trainer chart's runtimes hooks are stood in
for (hooks.py). What the run cannot deploy (not_deployable: the parts switched off by name rather than hanging): Kubeflow
on a host that cannot give a process mounts of its own (no unprivileged user namespaces), where the Trainer's webhook
(failurePolicy Fail) would answer nobody. kube-apiserver's --enable-aggregator-routing (webhooks resolved through
EndpointSlices) was no way: the address found is a KWOK pod's, where nothing listens, and a pod address on the host's
loopback is refused (EndpointSlice addresses may not be loopback, pkg/apis/core/validation ValidateEndpointIP). Over
TCP with an http:// URL, which the EgressSelectorConfiguration's validation accepts, kube-apiserver v1.35.4 panics at
start (egressselector.getTLSConfig dereferences the absent tlsConfig): the proxy listens on a Unix socket.
Kubeflow's kustomize installs (Pipelines, Katib) no longer stop it: with $GPU_PLATFORM_LOCAL_CHARTS the program
builds them from the folder's pinned YAML (components/helm.py local_kustomize; the provider builds them offline).
The policy preview runs on the stack as shipped, Kubeflow's installs expanded object by object (seen 2026-11-29:
the pack passes onprem-dev whole; before, pulumi-kubernetes 4.25.0's SDK stopped the program there, and the
pack refused Katib's and Pipelines' upstream images by tag: security_rules.PINNED_INSTALL_PARENTS).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from gpu_platform.components.helm import LOCAL_CHARTS_ENV
from gpu_platform.rehearsal.controller_host import HOSTED, ControllerHost
from gpu_platform.rehearsal.controlplane import ControlPlane
from gpu_platform.rehearsal.hooks import HookRunner
from gpu_platform.rehearsal.hooks import stood_in as hook_lines
from gpu_platform.rehearsal.kube import ApiError, Client
from gpu_platform.rehearsal.nodes import create_nodes
from gpu_platform.rehearsal.volumes import Provisioner, cluster_storage_classes

PASSPHRASE = "rehearsal-only-passphrase"
# The CLI's automatic log (pulumi v3.259.0 pkg/logging/encrypted.go StartLogging, unconditional since pulumi#23731):
# every command writes a debug-level log of every step's properties to $PULUMI_HOME/logs (gzipped; encrypted once a
# stack's secrets manager is loaded). It
# was 40 % of the CLI's CPU samples in each `up` and `destroy` of an engine run, the collector's share of it aside
# (`pulumi --profiling`, 2026-11-30): the CLI took 43 to 48 CPU-seconds in linode-dev's engine run with it, 14 without.
# No rehearsal reads it. The CLI has no switch for it; when it cannot make that folder it says "automatic logging
# unavailable" (at a level it does not print) and runs without. AUTOMATIC_LOGS_ENV=1 keeps it, to debug the engine.
AUTOMATIC_LOGS_ENV = "GPU_PLATFORM_ENGINE_AUTOMATIC_LOGS"

PROVIDER_CLIENT_TIMEOUT_S = 300  # seconds; see EngineRun.env
NODES_TIMEOUT_S = 180.0  # the KWOK nodes' registration, as the suite's rehearsal clusters wait (a hang guard)
# How long destroy waits for what it deleted to go (a namespace's contents go after the namespace's own deletion
# returns) before reporting what is still there as left behind.
DESTROY_SETTLE_S = 60


def without_automatic_logs(pulumi_home: Path) -> None:
    """A file where the CLI would make its automatic logs' folder (why: above it); with AUTOMATIC_LOGS_ENV=1 exactly,
    no such file, so that the switch also works on a PULUMI_HOME a run without it left. A real folder is left alone."""
    logs = pulumi_home / "logs"
    if os.environ.get(AUTOMATIC_LOGS_ENV) == "1":
        if logs.is_file():
            logs.unlink()
    elif not logs.exists():
        logs.write_text(f"Not a folder: no automatic logs in a rehearsal (gpu_platform/rehearsal/engine.py; "
                        f"{AUTOMATIC_LOGS_ENV}=1 keeps them).\n")


def not_deployable() -> dict[str, str]:
    """The platform parts the engine cannot deploy onto the rehearsal control plane, with why: none on a host that can
    give a process mounts of its own; else Kubeflow, whose Trainer's and JobSet's controllers read their pods' paths
    (podmounts.check: unshare, unprivileged user namespaces), so their webhooks (failurePolicy Fail) would answer
    nobody and the program's ClusterTrainingRuntime would be refused."""
    from gpu_platform.rehearsal import podmounts

    out: dict[str, str] = {}
    why = podmounts.check()
    if why:
        out["kubeflow"] = (f"the Trainer's and JobSet's controllers read their pod's paths (the webhook certificate folder, the "
                           f"ServiceAccount's namespace), which this host cannot give a process of its own: {why}")
    return out


# What the built provider (v4.25.0, the only release the Go proxy serves) does otherwise than the one users'
# `pulumi up` runs with the program's SDK (requirements.txt), for exactly the pair SKEW_REVIEWED_FOR (a test fails
# when either moves), read on 2026-11-29 from pulumi/pulumi-kubernetes' merged pull requests and CHANGELOG up to
# 4.32.0 (4.33.0 to 4.34.2 unread: no stored CHANGELOG for them); each with what the rehearsal does about it. Every
# engine report carries the list (`providerSkew`).
SKEW_REVIEWED_FOR = ("4.25.0", "4.34.2")  # (the built provider, the program's SDK)
PROVIDER_SKEW = (
    "#4278 (4.29.0): users' provider creates client-side and fails with AlreadyExists on an object the cluster already "
    "has; the built one takes it over by server-side apply (and its destroy deletes it): every run reports each object "
    "taken over (takenOver) and fails",
    "#4293 (4.30.0): users' provider keeps a null in Helm values, deleting the chart's key; the built one drops it: the "
    "program passes no null in values (notebooks.auth_config sets admin_access false instead)",
    "#4094 (4.26.0): users' provider waits for a StatefulSet's observedGeneration; the built one may call it ready a "
    "generation early (no StatefulSet update is rehearsed)",
    "#4181 (4.27.0): users' provider no longer waits forever on a claim updated on a WaitForFirstConsumer class; the "
    "built one would (no claim update is rehearsed)",
    "#4417 (4.32.0): users' provider reads a Helm release's CRDs at preview to know whether its custom resources are "
    "namespaced; the built one looks them up on the cluster",
    "Helm v3.18.6, kustomize api v0.19.0 and client-go v0.33.3 in the built provider; v3.20.2, v0.21.1 and v0.36.1 in "
    "4.32.0's go.mod",
)

# Stand-ins for the secrets CI passes from the deploy environment (deploy.yml's config-map).
STANDIN_SECRETS = {"checkpoint-store:accessKeyId": "rehearsal-access-key",
                   "checkpoint-store:secretAccessKey": "rehearsal-secret-key"}


class EngineError(RuntimeError):
    """A CLI command failed; the message holds the command, the errors it reported and the end of its output."""


def failure_message(command: str, returncode: int, output: str, tail: int = 4000, keep: int = 20) -> str:
    """What a failed CLI command said, for the test report: each error of its `Diagnostics:` block under the resource
    it is about, whole (a message's further lines follow its `error: ` line at the same indent, pulumi v3.259.0
    pkg/backend/display/progress.go printDiagnostics: a program's traceback, a provider's joined errors), at most `keep`
    lines of each (its first and its last); then the end of the output. The end alone (the stack's outputs, the
    resource counts) can leave out the error that started it: on CI (2026-11-30) the report showed a Kustomize
    Directory's `grpc: the client connection is closing`, the engine stopping, not the Helm release that stopped it."""
    errors: list[tuple[str, list[str]]] = []
    block = re.split(r"(?m)^Diagnostics:\n", output, maxsplit=1)
    if len(block) == 2:
        resource, current = "", None
        for line in re.split(r"(?m)^(?:Outputs|Resources|Duration):", block[1], maxsplit=1)[0].splitlines():
            if re.match(r"  \S.*:$", line):  # a resource's header: "  type (name):"
                resource, current = line.strip(), None
            elif line.startswith("    error: "):
                current = [line[4:]]
                errors.append((resource, current))
            elif current is not None and line.startswith("    ") and not re.match(r"    (warning|debug): ", line):
                current.append(line[4:])  # the error's next line (or an unprefixed message after it)
            else:
                current = None  # a blank line ends a resource's stream; a warning ends the error
    summary = ""
    for resource, lines in errors:
        if len(lines) > keep:
            lines = lines[:keep // 4] + [f"[{len(lines) - keep} lines]"] + lines[-(keep - keep // 4):]
        first, *rest = lines
        summary += f"\n  {resource} {first}" if resource else f"\n  {first}"
        summary += "".join(f"\n      {line}" for line in rest)
    return (f"pulumi {command} exited {returncode}" + (f"; its errors:{summary}" if errors else "")
            + f"\nthe end of its output:\n{output[-tail:]}")


# A step still in flight, as the non-interactive display prints its row (pulumi v3.259.0 pkg/backend/display
# progress.go getStepInProgressOpText: a present-tense verb, the whole seconds so far, the provider's last status
# message); a row of the same resource with any other status (`created (0.17s)`, `**creating failed**`) ends it.
_IN_FLIGHT = re.compile(r"(?:creating replacement|creating|updating|deleting original|deleting|replacing"
                        r"|reading for replacement|reading|refreshing|discarding original|discarding"
                        r"|importing replacement|importing) \(\d+s\)(.*)")
# A row may follow the progress dots on their line (`@ destroying.... -  kubernetes:... deleted (35s)`).
_ROW = re.compile(r"(?:@ \w+\.* )?\s*\S{0,3}\s+([\w.-]+:[\w./-]*:[\w.-]+) (\S+) (.*)")
# Components (the program's, and pulumi-kubernetes v4.25.0's: its SDK's and its provider's multi-language ones) get no
# row when they end, only in the display's last reprint (progress.go: outside a terminal a row is printed again only
# for a custom resource), so they would always look in flight.
_COMPONENTS = re.compile(r"pulumi:pulumi:Stack|gpu-platform:.*"
                         r"|kubernetes:(?:helm\.sh/v[234]:Chart|kustomize(?:/v2)?:Directory|yaml(?:/v2)?:Config(?:File|Group))")


def unfinished_steps(output: str) -> list[str]:
    """The resources whose last row in a command's output says their step is still in flight, in the order they
    started, each with the provider's last status message (`Waiting for app ReplicaSet to be available`): what a command
    killed at its timeout was waiting for. A row is printed when a step's status changes, so its seconds say little and
    are left out. Components (`_COMPONENTS`) are left out too: nothing says when they end."""
    last: dict[tuple[str, str], Optional[str]] = {}
    for line in output.splitlines():
        row = _ROW.fullmatch(line)
        if row is not None:
            kind, name, status = row.groups()
            flight = _IN_FLIGHT.match(status)
            last[kind, name] = flight[1].strip() if flight else None
    return [f"{kind} {name}" + (f": {message}" if message else "") for (kind, name), message in last.items()
            if message is not None and not _COMPONENTS.fullmatch(kind)]


def kill_session(sid: int) -> list[int]:
    """SIGKILL to every process of session `sid` (each `/proc/<pid>/stat`'s sixth field), its leader first; the pids
    signalled. A process group is not enough: the Pulumi CLI starts each plugin in a group of its own."""
    def session(pid: int) -> Optional[int]:
        try:
            return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[3])
        except (OSError, IndexError, ValueError):
            return None  # gone meanwhile, or not readable

    killed: list[int] = []
    for _ in range(3):  # again: a process not yet killed may have started another meanwhile
        found = [pid for pid in [sid] + sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != sid)
                 if pid not in killed and session(pid) == sid]
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except (ProcessLookupError, PermissionError):
                pass  # gone meanwhile; or, its pid reused, no longer ours
    return killed


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
    # Claims no provisioner took (no class, or a class the cluster lacks: volumes.Provisioner), as on a cluster.
    claims_unprovisioned: list[str] = field(default_factory=list)
    # Objects the cluster had that `up` took over instead of failing (EngineRun.up): `group kind namespace/name`.
    taken_over: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"stack": self.stack, "resources": self.resources, "secondUp": self.second_up,
                "leftBehind": self.left_behind, "leftByHelm": self.left_by_helm, "notDeployed": self.not_deployed, "timings": self.timings,
                "policyViolations": self.policy_violations, "previewChanges": self.preview_changes,
                "stoodIn": self.stood_in, "claimsUnprovisioned": self.claims_unprovisioned,
                "takenOver": self.taken_over, "providerSkew": list(PROVIDER_SKEW)}


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
    the control plane writes them by itself). A group version whose discovery answers 503 is an aggregated API
    nobody serves (Kueue's visibility API, served by no process here: controller_host.py); nothing of it can be
    listed, so it is skipped, as client-go's discovery reports such a group apart (ErrGroupDiscoveryFailed)."""
    seen: set[str] = set()
    versions = [("", "v1")]
    for group in client.request("GET", "/apis").get("groups", []):
        versions.append((group["name"], group["preferredVersion"]["version"]))
    for group, version in versions:
        base = f"/api/{version}" if not group else f"/apis/{group}/{version}"
        gv = version if not group else f"{group}/{version}"
        try:
            resources = client.request("GET", base).get("resources", [])
        except ApiError as exc:
            if exc.status != 503:
                raise
            continue
        for res in resources:
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


def unversioned(entry: str) -> str:
    """A snapshot entry (`group/version kind namespace/name`) without its version: `group kind namespace/name`."""
    api_version, rest = entry.split(" ", 1)
    return f"{api_version.rpartition('/')[0]} {rest}"


def object_key(resource: dict) -> Optional[str]:
    """The object a Kubernetes resource of the engine's state creates, as unversioned() writes it; None for what
    creates no object of its own name (providers, components, Helm releases, kustomize and YAML groups, patches, and
    a read of an object the cluster has: `external` in the state)."""
    kind_of = resource["type"].rsplit(":", 1)[-1]
    outputs = resource.get("outputs") or {}
    meta = outputs.get("metadata") or {}
    if (not resource["type"].startswith("kubernetes:") or kind_of.endswith("Patch") or not outputs.get("kind")
            or not outputs.get("apiVersion") or not meta.get("name") or resource.get("custom") is False
            or resource.get("external")):
        return None
    return f"{str(outputs['apiVersion']).rpartition('/')[0]} {outputs['kind']} {meta.get('namespace', '')}/{meta['name']}"


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


def kept_by_helm(resources: list[dict]) -> set[str]:
    """What `helm uninstall` keeps by design of the releases among `resources` (the report's): a namespace a Release
    of the program created with --create-namespace (helm/helm#1464), with the ServiceAccount and CA ConfigMap the
    control plane puts in every namespace; and the CRDs of a Release's chart's crds/ directories (chart_crds), with
    the APIService kube-apiserver keeps for each served version of their groups."""
    releases = [r for r in resources if r.get("type") == "kubernetes:helm.sh/v3:Release"]
    helm = {x for r in releases if r.get("createNamespace") for ns in [r.get("namespace")]
            for x in (f"v1 Namespace /{ns}", f"v1 ConfigMap {ns}/kube-root-ca.crt", f"v1 ServiceAccount {ns}/default")}
    for r in releases:
        for name, group, versions in chart_crds(str(r.get("chart") or "")):
            helm.add(f"apiextensions.k8s.io/v1 CustomResourceDefinition /{name}")
            helm.update(f"apiregistration.k8s.io/v1 APIService /{v}.{group}" for v in versions)
    return helm


def split_left_by_helm(left: list[str], resources: list[dict]) -> tuple[list[str], list[str]]:
    """(left behind, left by Helm): of what `destroy` left, what `helm uninstall` keeps by design (kept_by_helm).
    Anything else is left behind."""
    return _split_kept(left, kept_by_helm(resources))


def _split_kept(left: list[str], kept: set[str]) -> tuple[list[str], list[str]]:
    return [x for x in left if x not in kept], [x for x in left if x in kept]


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
        self.charts, self.venv = Path(charts), Path(venv or root / ".venv")
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
        self.host: Optional[ControllerHost] = None
        self.preview_errors: list[str] = []
        self._export_cache: Optional[tuple[list, list[dict]]] = None

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
        for d in ("state", "pulumi-home", "tmp"):
            (self.out / d).mkdir(exist_ok=True)
        without_automatic_logs(self.out / "pulumi-home")
        return {
            "PATH": os.pathsep.join([str(self.venv / "bin"), str(engine_bin()), "/usr/bin", "/bin"]),
            "HOME": str(self.out), "PULUMI_HOME": str(self.out / "pulumi-home"),
            # The provider writes the kubeconfig it is given to a temporary file for Helm on every configure and never
            # removes it (pulumi-kubernetes v4.25.0 provider/util.go writeKubeconfigToFile): in the run's own folder,
            # not hundreds of bearer-token kubeconfigs in /tmp after a few test sessions.
            "TMPDIR": str(self.out / "tmp"),
            "PULUMI_BACKEND_URL": f"file://{self.out / 'state'}", "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
            "PULUMI_SKIP_UPDATE_CHECK": "true", "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
            # State written once an operation ends, not after every step (the same steps; docs/rehearsal.md).
            "PULUMI_SKIP_CHECKPOINTS": "true",
            # The provider's requests to the API server, discovery and the OpenAPI schema included, wait this long
            # (pulumi-kubernetes provider.go, PULUMI_K8S_CLIENT_TIMEOUT; discovery's own default is 32 s): a rehearsal
            # API server serving Kubeflow's CRDs beside three other test clusters on 2 cores took longer (CI, 2026-11-29).
            "PULUMI_K8S_CLIENT_TIMEOUT": str(PROVIDER_CLIENT_TIMEOUT_S),
            "KUBECONFIG": str(kubeconfig), LOCAL_CHARTS_ENV: str(self.charts),
            # The policy pack imports the package it ships in, from this checkout (.venv's may be another's).
            "PYTHONPATH": str(self.root),
            # Nothing but the local API server may be reached: a download attempt fails instead of succeeding.
            "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "127.0.0.1,localhost",
        }

    def pulumi(self, *args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
        t = time.monotonic()
        # A session of its own: at the timeout the CLI's plugins, the program and the policy pack go with it, instead
        # of going on loading the API server the next test uses (each plugin has a process group of its own, pulumi
        # v3.259.0 sdk/go/common/resource/plugin/plugin.go RegisterProcessGroup, but stays in the CLI's session).
        cli = subprocess.Popen([str(engine_bin() / "pulumi"), *args, "--non-interactive"], cwd=self.project,
                               env=self._env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
        timed_out = False
        try:
            stdout, stderr = cli.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_session(cli.pid)
            stdout, stderr = cli.communicate()
        except BaseException:  # Ctrl-C, the control plane's SIGTERM: its own session keeps the CLI from either
            kill_session(cli.pid)
            cli.communicate()
            raise
        proc = subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr)
        step = args[0] if args[0] != "stack" else f"stack-{args[1]}"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_dir / "pulumi.log", "a") as log:
            log.write(f"$ pulumi {' '.join(args)}\n{proc.stdout}{proc.stderr}\n(exit {proc.returncode})\n\n")
        self.report.timings[step] = round(self.report.timings.get(step, 0) + time.monotonic() - t, 1)
        if timed_out or proc.returncode < 0:
            # CI (2026-11-30) showed only `TimeoutExpired` and the output's first bytes: nothing said what it waited on.
            why = (f"did not finish in {timeout:.0f} s" if timed_out else
                   f"was killed by signal {-proc.returncode} from outside the run (the kernel's OOM killer sends 9)")
            waiting = unfinished_steps(proc.stdout) or ["(no resource step in flight)"]
            raise EngineError(f"pulumi {' '.join(args)} {why}; still in flight:\n  " + "\n  ".join(waiting)
                              + self._circumstances() + f"\nthe end of its output:\n{(proc.stdout + proc.stderr)[-4000:]}")
        if check and proc.returncode != 0:
            raise EngineError(failure_message(" ".join(args), proc.returncode, proc.stdout + proc.stderr)
                              + self._circumstances())
        return proc

    def _circumstances(self, keep: int = 20) -> str:
        """For a failed command's report: the machine's load, and the last of what the hosted controllers did (their
        exits and restarts, their pods' readiness), which a Helm release and the webhooks the program's objects go
        through wait on."""
        load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
        events = self.host.events[-keep:] if self.host is not None else []
        return (f"\nthe machine's load average (1, 5, 15 minutes): {load}"
                + "".join(f"\nthe hosted controllers: {event}" for event in events))

    # --- the run ---------------------------------------------------------------------------------------------

    def __enter__(self) -> "EngineRun":
        t = time.monotonic()
        # kube-apiserver's calls to Service-referenced webhooks go through the webhook proxy, and KWOK leaves the pods
        # of the controllers the run hosts not Ready: their readiness follows the process's (controller_host.py).
        self.cp = ControlPlane(self.log_dir, extended_resource_toleration=self.model.extended_resource_toleration,
                               webhook_proxy=True, held_images=tuple(HOSTED.values()))
        self.cp.__enter__()
        try:
            create_nodes(self.cp.client, self.model, timeout=NODES_TIMEOUT_S)
            for storage, _why in cluster_storage_classes(self.model.cloud, self.cfg):
                self.cp.client.apply(storage)
            # The cluster's CSI driver: a PersistentVolume for each Pending claim (Kubeflow's MySQL and artifact
            # store, Katib's MySQL), which the program's Deployments wait for.
            self.provisioner = Provisioner(self.cp.client).start()
            # The containers of Helm hook Jobs it knows (hooks.py: kube-prometheus-stack's certificate hooks, the Kubeflow
            # Trainer chart's runtimes installer and cleanup).
            self.hooks = HookRunner(self.cp.client).start()
            # The controllers whose webhooks the program's objects go through (Kueue's), on the host in their pods'
            # place once Helm has created their Deployment.
            self.host = ControllerHost(self.cp, self.out / "controllers").start()
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
            # The policy pack on the stack as shipped (a preview deploys nothing), as CI previews it; then the parts
            # the engine cannot deploy here, and those the caller leaves out, switched off.
            if self.policy_config is not None:
                self.policy_preview = self.preview_with_policies(self.policy_config)
            off = not_deployable()
            for part in sorted({*off, *self.also_off}):
                self.pulumi("config", "set", "--path", f"gpu-platform:platform.{part}", "false", "--stack", self.stack)
                if part in off:
                    self.report.not_deployed[part] = off[part]
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.host is not None:
            self.host.stop()
            self.report.stood_in.extend(self.host.stood_in())
            self.host = None
        if self.hooks is not None:
            self.hooks.stop()
            self.report.stood_in.extend(hook_lines(self.hooks))
            self.hooks = None
        if self.provisioner is not None:
            self.provisioner.stop()
            self.report.claims_unprovisioned = sorted(self.provisioner.unprovisioned)
            self.provisioner = None
        if self.cp is not None:
            self.cp.close()
            self.cp = None

    def _exported(self) -> list[dict]:
        """The stack's resources as `pulumi stack export` gives them. The export (the whole state decrypted and
        printed) is taken again only when the backend's state files changed since the last one: `up` reads the state
        before and after, and the previous `up`'s after is this one's before."""
        stamp = sorted((str(p), p.stat().st_mtime_ns, p.stat().st_size)
                       for p in (self.out / "state" / ".pulumi" / "stacks").rglob("*") if p.is_file())
        if self._export_cache is None or self._export_cache[0] != stamp:
            resources = json.loads(self.pulumi("stack", "export", "--stack", self.stack).stdout)["deployment"].get("resources") or []
            self._export_cache = (stamp, resources)
        return self._export_cache[1]

    def up(self) -> None:
        """`pulumi up`, the engine's record of what it made (report.resources), and the objects it took over
        (report.taken_over): those the cluster had before this `up` that it now holds as created. The built provider
        (4.25.0) creates by server-side apply, which takes an existing object over silently; users' provider (4.29 and
        later, pulumi/pulumi-kubernetes#4278) creates client-side and fails with AlreadyExists instead."""
        held = {k for res in self._exported() for k in [object_key(res)] if k}
        on_cluster = {unversioned(entry) for entry in snapshot(self.cp.client)}
        self.pulumi("up", "--yes", "--skip-preview", "--stack", self.stack)
        resources = self._exported()
        self.report.taken_over.extend(sorted({k for res in resources for k in [object_key(res)]
                                              if k and k not in held and k in on_cluster}))
        for res in resources:
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
        # What Helm keeps by design stays for good: the wait ends once nothing else is left. (Waiting for nothing at
        # all to be left ran out its whole minute in every run, 60 snapshots of every object on the API server.)
        kept = kept_by_helm(self.report.resources)
        start = time.monotonic()
        settled = 0  # consecutive looks with only what Helm keeps left: two, a second apart, end the wait
        while True:  # a namespace's contents go after the namespace's own deletion returns
            self._delete_released_volumes()
            left = sorted(snapshot(self.cp.client) - self.before)
            settled = settled + 1 if all(x in kept for x in left) else 0
            if settled == 2 or time.monotonic() > start + DESTROY_SETTLE_S:
                break
            time.sleep(1)
        waited = time.monotonic() - start
        self.report.timings["destroy-settle"] = round(self.report.timings.get("destroy-settle", 0) + waited, 1)
        self.report.left_behind, self.report.left_by_helm = _split_kept(left, kept)
