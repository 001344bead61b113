"""One rehearsal of a stack: control plane, KWOK nodes from the node model, the install, the
platform controllers, the scenarios, the report (build/<stack>/rehearsal.json and the console)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from gpu_platform.rehearsal import binaries, cilium, controllers as ctlmod, pki
from gpu_platform.rehearsal.controlplane import ControlPlane
from gpu_platform.rehearsal.install import InstallLog, Installer, order_releases
from gpu_platform.rehearsal.kube import ApiError, UnknownKind
from gpu_platform.rehearsal.nodes import create_nodes
from gpu_platform.rehearsal.volumes import CLOUD_STORAGE_CLASSES, Provisioner
from gpu_platform.rehearsal.scenarios import SCENARIOS, Context, Scenario
from gpu_platform.rehearsal.standins import alertmanager_config, restore_rendered_secrets
from gpu_platform.rehearsal.hub import HUB_SCENARIOS
from gpu_platform.preflight.fit.run import default_chart_dirs

REPORT = "rehearsal.json"
# The scenarios of scenarios.py, then those of the platform as a team uses it (hub.py) and the
# Alertmanager configuration check (standins.py), which need the quota the earlier ones released.
ALL_SCENARIOS = SCENARIOS + (alertmanager_config,) + HUB_SCENARIOS
EXIT_OK, EXIT_FAILED = 0, 3


@dataclass
class Rehearsal:
    stack: str
    status: str = "PASS"
    nodes: list[str] = field(default_factory=list)
    install: InstallLog = field(default_factory=InstallLog)
    controllers: list[dict] = field(default_factory=list)
    controller_errors: dict[str, list[str]] = field(default_factory=dict)
    control_plane_errors: list[str] = field(default_factory=list)
    workloads: list[dict] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)
    not_rehearsed: list[str] = field(default_factory=list)
    volumes: list[str] = field(default_factory=list)
    cloud_objects: list[str] = field(default_factory=list)
    secrets_as_rendered: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    error: Optional[str] = None
    versions: dict = field(default_factory=dict)
    logs: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error or self.install.refused or any(s.status != "PASS" for s in self.scenarios)
                    or any(c["status"] != "running" for c in self.controllers) or self.control_plane_errors
                    or any(ctlmod.fatal(lines) for lines in self.controller_errors.values()))

    def to_json(self) -> dict[str, Any]:
        return {"stack": self.stack, "status": "FAIL" if self.failed else "PASS", "error": self.error,
                "nodes": self.nodes, "applied": self.install.applied, "refused": self.install.refused,
                "namespacesCreated": self.install.namespaces_created,
                "crdsRegistered": self.install.registered, "hooks": self.install.hooks,
                "webhooks": self.install.webhooks, "controllers": self.controllers,
                "controllerErrors": self.controller_errors, "controlPlaneErrors": self.control_plane_errors,
                "workloads": self.workloads, "scenarios": [s.to_json() for s in self.scenarios],
                "notRehearsed": self.not_rehearsed, "volumesProvisioned": self.volumes,
                "cloudObjects": self.cloud_objects,
                "secretsAsRendered": self.secrets_as_rendered, "timings": self.timings, "versions": self.versions, "logs": self.logs}


def _run_hook_job(installer: Installer, client, server: str, ca_file: str):
    """A hook Job whose container only `kubectl apply`s a ConfigMap of its release (Trainer's runtimes
    installer): the rehearsal applies that ConfigMap's manifests itself, with the Job's ServiceAccount's
    token, so its RBAC is exercised. Any other hook Job is skipped (returns None)."""

    def run(rel, job: dict) -> Optional[str]:
        pod = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
        script = " ".join(" ".join(map(str, (c.get("command") or []) + (c.get("args") or []))) for c in pod.get("containers") or [])
        if job.get("kind") != "Job" or "kubectl apply" not in script:
            return None
        cms = [v["configMap"]["name"] for v in pod.get("volumes") or [] if v.get("configMap")]
        sources = [o for o in rel.objects if o.get("kind") == "ConfigMap" and o["metadata"]["name"] in cms]
        if not sources:
            return None
        ns = job["metadata"].get("namespace") or rel.namespace
        sa = pod.get("serviceAccountName") or "default"
        as_sa = client.with_token(client.token(ns, sa))
        applied, refused = 0, []
        for cm in sources:
            for text in (cm.get("data") or {}).values():
                for doc in yaml.safe_load_all(text):
                    if not isinstance(doc, dict) or "kind" not in doc:
                        continue
                    try:
                        as_sa.apply(doc)
                        applied += 1
                    except (ApiError, UnknownKind) as exc:
                        refused.append(f"{doc['kind']}/{doc['metadata'].get('name')}: {exc}")
                        installer.log.refuse(rel.name, doc, f"(applied as {ns}/{sa} for hook {job['metadata']['name']}) {exc}")
        return (f"performed by the rehearsal: its `kubectl apply` of ConfigMap {', '.join(cms)} ({applied} object(s)) "
                f"as ServiceAccount {ns}/{sa}" + (f"; {len(refused)} refused" if refused else ""))

    return run


def prepare_controllers(releases: list[Any], not_rehearsed: list[str]):
    """The platform's controllers among the rendered releases, the webhook serving CA and certificate
    folder; a controller that cannot run here is marked not-built and listed in `not_rehearsed`."""
    controllers = ctlmod.find_controllers(releases)
    for ctl in controllers:
        if not ctl.built:
            ctl.status = "not-built"
            not_rehearsed.append(f"{ctl.binary} ({ctl.release}: Deployment {ctl.namespace}/{ctl.deployment}): binary not built "
                                 f"(`{binaries.BUILD_COMMAND}`); its webhooks are removed")
    ca_pem, cert_dir = pki.webhook_serving(binaries.cache_dir())
    for binary, fixed in (("trainer-manager", pki.WEBHOOK_CERT_DIR), ("kueue-manager", pki.KUEUE_METRICS_CERT_DIR)):
        for ctl in controllers:
            if ctl.binary == binary and ctl.status != "not-built":
                try:
                    pki.install_fixed_dir(cert_dir, fixed)
                except OSError as exc:
                    ctl.status = "not-built"
                    not_rehearsed.append(f"{binary}: cannot write its certificate to the fixed folder {fixed} ({exc}); "
                                         "its webhooks are removed")
    return controllers, ca_pem, cert_dir


def registered_crds(releases: list[Any], log: InstallLog, not_rehearsed: list[str]) -> tuple[tuple[str, list[dict]], ...]:
    """CRDs that no release renders but a controller of the stack registers when it starts: Cilium's
    (cilium-operator), from the pinned github.com/cilium/cilium module (rehearsal/cilium.py). Not built:
    listed NOT REHEARSED, and the platform's Cilium objects are refused as before."""
    rel = cilium.cilium_release(releases)
    if rel is None:
        return ()
    who = f"cilium-operator {rel.version} (CRDs it registers at start)"
    try:
        crds = cilium.operator_crds(rel.version)
    except (binaries.MissingBinaries, cilium.CiliumCrdsError) as exc:
        not_rehearsed.append(f"Cilium's CRDs ({who}): {exc}")
        return ()
    log.registered.append(f"{len(crds)} CRDs from {cilium.source(rel.version)}: "
                          f"{', '.join(c['metadata']['name'] for c in crds)}")
    return ((who, crds),)


def install(cp: ControlPlane, releases: list[Any], controllers: list, ca_pem: bytes, cert_dir, log: InstallLog,
            not_rehearsed: Optional[list[str]] = None) -> Installer:
    """Namespaces, CRDs (those controllers register themselves first), then every release in the
    program's order, each release's controllers started (under their ServiceAccounts, webhooks served
    locally) as soon as the release is applied."""
    client, run_dir = cp.client, Path(cp.tmp)
    ca_file = str(pki.write(run_dir / "webhook-ca.crt", ca_pem))
    by_release: dict[str, list] = {}
    for ctl in controllers:
        if ctl.status != "not-built":
            ctl.webhook_port = ctlmod.free_port()
        by_release.setdefault(ctl.release, []).append(ctl)

    def after_release(rel):
        for ctl in by_release.get(rel.name, []):
            if ctl.status == "not-built":
                continue
            try:
                ctlmod.start(ctl, client, cp.server, cp.ca_file, cp.procs, run_dir, cert_dir)
            except (ApiError, OSError) as exc:
                ctl.status, ctl.problem = "failed", f"could not start: {exc}"
                continue
            ctlmod.wait_ready(ctl, ca_file)

    installer = Installer(client, releases, controllers, ca_pem, log, on_release=after_release)
    installer.namespaces()
    installer.crds(registered=registered_crds(releases, log, not_rehearsed if not_rehearsed is not None else []))
    for rel in order_releases(releases):
        installer.release(rel, _run_hook_job(installer, client, cp.server, cp.ca_file))
    return installer


def rehearse(stack: str, cfg, plan, releases: list[Any], model, placements: list[dict], out: Path,
             timeout: float = 90.0, scenarios=ALL_SCENARIOS, chart_dirs: Optional[list[Path]] = None) -> Rehearsal:
    """Run the rehearsal; never raises for a cluster problem (it is in the result), raises
    binaries.MissingBinaries when the control plane cannot be built from the cache."""
    result = Rehearsal(stack, versions=binaries.versions())
    log_dir = out / "rehearsal-logs"
    result.logs = str(log_dir)
    started = time.monotonic()
    releases = [r for r in releases if r.rendered]
    # Secrets a controller reads as configuration, as the chart renders them (not preflight's masked copy).
    result.secrets_as_rendered = restore_rendered_secrets(plan, releases, chart_dirs or default_chart_dirs(),
                                                          getattr(cfg, "kubernetes_version", None))
    controllers, ca_pem, cert_dir = prepare_controllers(releases, result.not_rehearsed)
    with ControlPlane(log_dir, extended_resource_toleration=model.extended_resource_toleration) as cp:
        result.timings["controlPlane"] = round(time.monotonic() - started, 1)
        client = cp.client
        provisioner = None
        try:
            t = time.monotonic()
            result.nodes = create_nodes(client, model)
            result.timings["nodes"] = round(time.monotonic() - t, 1)
            for sc_obj in CLOUD_STORAGE_CLASSES.get(model.cloud, []):
                client.apply(sc_obj)
                result.cloud_objects.append(f"StorageClass {sc_obj['metadata']['name']} (the cloud creates it)")
            provisioner = Provisioner(client).start()
            t = time.monotonic()
            install(cp, releases, controllers, ca_pem, cert_dir, result.install, result.not_rehearsed)
            result.timings["install"] = round(time.monotonic() - t, 1)
            ctx = Context(client, releases, model, placements, {c.binary: c for c in controllers}, timeout=timeout,
                          plan=plan)
            for fn in scenarios:
                t = time.monotonic()
                try:
                    sc = fn(ctx)
                except (ApiError, UnknownKind, TimeoutError, OSError) as exc:
                    sc = Scenario(fn.__name__, fn.__doc__ or fn.__name__)
                    sc.fail(f"{type(exc).__name__}: {exc}")
                sc.seconds = time.monotonic() - t
                result.scenarios.append(sc)
            result.workloads = ctx.workloads
        except (ApiError, UnknownKind, TimeoutError, OSError) as exc:
            result.error = f"{type(exc).__name__}: {exc}"
        finally:
            if provisioner is not None:
                provisioner.stop()
                result.volumes = list(provisioner.made)
            result.control_plane_errors = cp.check_running()
            for ctl in controllers:
                if ctl.proc is not None and not ctl.proc.alive and ctl.status == "running":
                    ctl.status, ctl.problem = "failed", f"exited with code {ctl.proc.popen.returncode}: {ctlmod.last_words(ctl.proc.log)}"
                result.controllers.append({"binary": ctl.binary, "release": ctl.release, "deployment": f"{ctl.namespace}/{ctl.deployment}",
                                           "serviceAccount": f"{ctl.namespace}/{ctl.service_account}", "status": ctl.status,
                                           "problem": ctl.problem, "webhookPort": ctl.webhook_port, "configChanges": ctl.changes,
                                           "log": str(ctl.proc.log) if ctl.proc else None})
                if ctl.proc is not None:
                    lines = ctlmod.error_lines(ctl.proc.log)
                    if lines:
                        result.controller_errors[ctl.binary] = lines
    result.timings["total"] = round(time.monotonic() - started, 1)
    result.status = "FAIL" if result.failed else "PASS"
    out.mkdir(parents=True, exist_ok=True)
    (out / REPORT).write_text(json.dumps(result.to_json(), indent=2, sort_keys=True, default=str) + "\n")
    return result
