"""One rehearsal of a stack: control plane, KWOK nodes from the node model, the install, the
platform controllers, the scenarios, the report (build/<stack>/rehearsal.json and the console)."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from gpu_platform.rehearsal import autoscale, binaries, cilium, controllers as ctlmod, pki
from gpu_platform.rehearsal.controlplane import ControlPlane
from gpu_platform.rehearsal.install import InstallLog, Installer, hooks_of, order_releases
from gpu_platform.rehearsal.kube import ApiError, UnknownKind, wait_for
from gpu_platform.rehearsal.nodes import create_nodes
from gpu_platform.rehearsal.volumes import Provisioner, cluster_storage_classes
from gpu_platform.rehearsal.scenarios import SCENARIOS, Context, Scenario, release_example, restore_model_nodes
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
    volumes_unprovisioned: list[str] = field(default_factory=list)  # claims no provisioner takes (volumes.py)
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
                "claimsUnprovisioned": self.volumes_unprovisioned,
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
    not_rehearsed.extend(ctlmod.not_run(releases))
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
            not_rehearsed: Optional[list[str]] = None, timeout: float = 90.0) -> Installer:
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
            ctlmod.wait_ready(ctl, ca_file, max(ctlmod.READY_TIMEOUT, timeout))

    installer = Installer(client, releases, controllers, ca_pem, log, on_release=after_release)
    installer.namespaces()
    # The run's own timeout: 39 CRDs took over a minute to be served on a loaded 2-core CI machine.
    installer.crds(timeout=max(60.0, timeout),
                   registered=registered_crds(releases, log, not_rehearsed if not_rehearsed is not None else []))
    for rel in order_releases(releases):
        installer.release(rel, _run_hook_job(installer, client, cp.server, cp.ca_file))
    return installer


class StackCluster:
    """A stack's rehearsal cluster kept up across scenario runs: the control plane, the KWOK nodes of the
    node model, the volume provisioner, every release installed and the platform's controllers running.

    `rehearse` runs every scenario on one and closes it. The test suite keeps one per stack for the
    whole session (tests/rehearsal_support.py): the scenarios already clean up after themselves (each
    deletes what it created and gives the pools back their nodes, since they run one after another on
    one cluster), so later runs find the cluster as installed. `planted` changes the installed objects
    for one run (a planted bug) and puts them back afterwards."""

    def __init__(self, stack: str, cfg, plan, releases: list[Any], model, placements: list[dict], out: Path,
                 timeout: float = 90.0, chart_dirs: Optional[list[Path]] = None):
        self.stack, self.cfg, self.plan, self.model, self.placements = stack, cfg, plan, model, placements
        self.out, self.timeout, self.chart_dirs = out, timeout, chart_dirs
        self.releases = [r for r in releases if r.rendered]
        self.base = Rehearsal(stack, versions=binaries.versions())
        self.base.logs = str(out / "rehearsal-logs")
        self.cp: Optional[ControlPlane] = None
        self.controllers: list = []
        self.installer: Optional[Installer] = None
        self.provisioner: Optional[Provisioner] = None
        self.runs = 0
        self._restarts = 0
        self._installed_config: dict[str, Optional[dict]] = {}  # controller binary -> its Configuration as installed
        self._started = 0.0
        self._log_marks: dict[str, int] = {}  # controller binary -> log offset already reported
        # Error lines of a log a restart set aside before the next snapshot read them (reported by that snapshot)
        self._set_aside: dict[str, list[str]] = {}

    # --- lifecycle ------------------------------------------------------------------------------------

    def __enter__(self) -> "StackCluster":
        """Start and install; a cluster problem is recorded in `base.error` (runs then report it), a
        missing binary raises binaries.MissingBinaries."""
        self._started = time.monotonic()
        base = self.base
        # Secrets a controller reads as configuration, as the chart renders them (not preflight's masked copy).
        base.secrets_as_rendered = restore_rendered_secrets(self.plan, self.releases, self.chart_dirs or default_chart_dirs(),
                                                            getattr(self.cfg, "kubernetes_version", None))
        self.controllers, self.ca_pem, self.cert_dir = prepare_controllers(self.releases, base.not_rehearsed)
        base.not_rehearsed.extend(autoscale.not_rehearsed(self.model.cloud))
        self._installed_config = {c.binary: c.config for c in self.controllers}
        self.cp = ControlPlane(Path(base.logs), extended_resource_toleration=self.model.extended_resource_toleration)
        self.cp.__enter__()
        base.timings["controlPlane"] = round(time.monotonic() - self._started, 1)
        client = self.cp.client
        try:
            t = time.monotonic()
            base.nodes = create_nodes(client, self.model, timeout=max(60.0, self.timeout))
            base.timings["nodes"] = round(time.monotonic() - t, 1)
            for sc_obj, why in cluster_storage_classes(self.model.cloud, self.cfg):
                client.apply(sc_obj)
                base.cloud_objects.append(why)
            self.provisioner = Provisioner(client).start()
            t = time.monotonic()
            self.installer = install(self.cp, self.releases, self.controllers, self.ca_pem, self.cert_dir, base.install,
                                     base.not_rehearsed, timeout=self.timeout)
            base.timings["install"] = round(time.monotonic() - t, 1)
        except (ApiError, UnknownKind, TimeoutError, OSError) as exc:
            base.error = f"{type(exc).__name__}: {exc}"
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.provisioner is not None:
            self.provisioner.stop()
            self.provisioner = None
        if self.cp is not None:
            self.cp.close()
            self.cp = None

    # --- runs -----------------------------------------------------------------------------------------

    def run(self, scenarios=ALL_SCENARIOS, releases: Optional[list[Any]] = None) -> Rehearsal:
        """Run `scenarios` in order on the cluster as it is now; the result carries the install's log and
        the controllers' state and error lines since the previous run. `releases`: what the scenarios
        read (a planted copy), the installed ones by default."""
        if self.cp is None:
            raise RuntimeError("the rehearsal cluster is not started")
        base = self.base
        result = Rehearsal(self.stack, nodes=base.nodes, install=base.install, not_rehearsed=list(base.not_rehearsed),
                           cloud_objects=base.cloud_objects, secrets_as_rendered=base.secrets_as_rendered,
                           timings=dict(base.timings), error=base.error, versions=base.versions, logs=base.logs)
        self.runs += 1
        if base.error is None:
            ctx = Context(self.cp.client, releases if releases is not None else self.releases, self.model, self.placements,
                          {c.binary: c for c in self.controllers}, timeout=self.timeout, plan=self.plan, cfg=self.cfg,
                          restart=lambda ctl: self._restart(ctl, ctl.config))
            started = time.monotonic()
            try:
                for fn in scenarios:
                    t = time.monotonic()
                    try:
                        sc = fn(ctx)
                    except (ApiError, UnknownKind, TimeoutError, OSError) as exc:
                        sc = Scenario(fn.__name__, fn.__doc__ or fn.__name__)
                        sc.fail(f"{type(exc).__name__}: {exc}")
                    sc.seconds = time.monotonic() - t
                    result.scenarios.append(sc)
            except (ApiError, UnknownKind, TimeoutError, OSError) as exc:
                result.error = f"{type(exc).__name__}: {exc}"
            result.workloads = ctx.workloads
            result.timings["scenarios"] = round(time.monotonic() - started, 1)
        if self.provisioner is not None:
            result.volumes = list(self.provisioner.made)
            result.volumes_unprovisioned = sorted(self.provisioner.unprovisioned)
        self._snapshot(result)
        result.timings["total"] = round(time.monotonic() - self._started, 1)
        result.status = "FAIL" if result.failed else "PASS"
        return result

    def _snapshot(self, result: Rehearsal) -> None:
        """Control-plane and controller state now; controller error lines written since the last run."""
        result.control_plane_errors = self.cp.check_running() if self.cp is not None else []
        for ctl in self.controllers:
            if ctl.proc is not None and not ctl.proc.alive and ctl.status == "running":
                ctl.status, ctl.problem = "failed", f"exited with code {ctl.proc.popen.returncode}: {ctlmod.last_words(ctl.proc.log)}"
            result.controllers.append({"binary": ctl.binary, "release": ctl.release, "deployment": f"{ctl.namespace}/{ctl.deployment}",
                                       "serviceAccount": f"{ctl.namespace}/{ctl.service_account}", "status": ctl.status,
                                       "problem": ctl.problem, "webhookPort": ctl.webhook_port, "configChanges": ctl.changes,
                                       "log": str(ctl.proc.log) if ctl.proc else None})
            if ctl.proc is not None:
                # Up to the size read now, which becomes the next run's start: no line is lost or told twice.
                end = ctlmod.log_size(ctl.proc.log)
                lines = ctlmod.error_lines(ctl.proc.log, since=self._log_marks.get(ctl.binary, 0), until=end)
                self._log_marks[ctl.binary] = end
                lines = self._set_aside.pop(ctl.binary, []) + lines
                if lines:
                    result.controller_errors[ctl.binary] = lines

    def _mark_logs(self) -> None:
        self._set_aside.clear()
        for ctl in self.controllers:
            if ctl.proc is not None:
                self._log_marks[ctl.binary] = ctlmod.log_size(ctl.proc.log)

    # --- planted bugs ---------------------------------------------------------------------------------

    @contextmanager
    def planted(self, releases: list[Any]):
        """The installed objects changed to those of `releases` (a copy of the installed ones with a bug
        planted, or another config's render) for the body of the `with`, then put back: changed objects
        applied, removed ones deleted, new ones created; a controller whose Configuration changed is
        restarted with it (and again with the original afterwards). Yields the planted releases, which
        the scenarios of `run(..., releases=...)` read. Raises PlantRefused if the API server refuses
        the planted change (the test would not test what it says)."""
        if self.cp is None or self.installer is None:
            raise RuntimeError("the rehearsal cluster is not installed")
        self.settle()
        planted = [r for r in releases if r.rendered]
        before, after = _installed_objects(self.releases), _installed_objects(planted)
        changed = [k for k in after if k in before and after[k][1] != before[k][1]]
        added = [k for k in after if k not in before]
        removed = [k for k in before if k not in after]
        restart = _config_changes(self.controllers, planted)
        # A controller whose permissions changed is restarted on the way back: its watches may have given up.
        rbac = {k[1] for k in changed + added + removed} & RBAC_KINDS
        touched = {after.get(k, before.get(k))[0] for k in changed + added + removed}
        try:
            refused = self._apply_set(after, changed + added, removed)
            if refused:
                raise PlantRefused("; ".join(refused))
            for ctl, config in restart:
                self._restart(ctl, config)
            yield planted
        finally:
            problems = []
            # The controllers first (a controller the plant stopped would refuse the restore through its
            # webhook), then the objects, then those whose permissions changed (their watches may have given up).
            for ctl, _ in restart:
                problems += self._restart(ctl, self._installed_config[ctl.binary])
            problems += self._apply_set(before, changed + removed, added)
            if rbac:
                problems += [p for c in self.controllers if c.release in touched and c.status != "not-built"
                             for p in self._restart(c, self._installed_config[c.binary])]
            self._mark_logs()
            if problems:
                # Later runs on this cluster would test a half-restored install: each reports this instead.
                self.base.error = f"the cluster was not restored after a planted run: {'; '.join(problems)}"
                raise PlantRefused(self.base.error)

    def settle(self) -> None:
        """The cluster as the scenarios expect to find it: the example TrainJob gone (its quota free) and every
        node of the model there (a drill that deleted one gives it back itself; this is the safety net)."""
        ctx = Context(self.cp.client, self.releases, self.model, self.placements, {c.binary: c for c in self.controllers},
                      timeout=self.timeout, plan=self.plan, cfg=self.cfg)
        release_example(ctx)
        restore_model_nodes(ctx)
        down = [f"{c.binary} {c.status} {c.problem}".strip() for c in self.controllers if c.status not in ("running", "not-built")]
        if down:
            raise PlantRefused(f"a controller is not running before the plant: {'; '.join(down)}")

    def _apply_set(self, objects: dict, apply: list, delete: list) -> list[str]:
        """Delete `delete`, apply `apply` (objects[key]); returns what the API server refused."""
        client, refused = self.cp.client, []
        for key in delete:
            api_version, kind, ns, name = key
            try:
                client.delete(api_version, kind, name, ns)
            except (ApiError, UnknownKind) as exc:
                refused.append(f"delete {kind} {ns or ''}/{name}: {exc}")
        for key in apply:
            release, obj = objects[key]
            try:
                try:
                    client.apply(self.installer.rewrite(obj))
                except ApiError as exc:
                    if "immutable" not in exc.message:
                        raise
                    # A field the API refuses to change in place (a LocalQueue's clusterQueue): replace the object.
                    client.delete(key[0], key[1], key[3], key[2])
                    wait_for(f"{key[1]} {key[3]} to be deleted", lambda: client.get(key[0], key[1], key[3], key[2]) is None, 60)
                    client.apply(self.installer.rewrite(obj))
            except (ApiError, UnknownKind, TimeoutError) as exc:
                refused.append(f"{key[1]} {key[2] or ''}/{key[3]} ({release}): {exc}")
        if any(key[1] in ADMISSION_KINDS for key in [*apply, *delete]):
            # kube-apiserver reads admission policies and webhook configurations through informers and says
            # nothing when it has: give it the moment it needs before a scenario relies on the change.
            time.sleep(ADMISSION_SETTLE_S)
        return refused

    def _restart(self, ctl, config: Optional[dict]) -> list[str]:
        """Stop the controller, start it again with `config` (same webhook port), wait until it serves;
        returns what went wrong (empty when it serves again)."""
        if ctl.status == "not-built" or self.cp is None:
            return []
        if ctl.proc is not None:
            old, ctl.proc = ctl.proc, None
            self.cp.procs.stop(old)
            if old in self.cp.procs.procs:
                self.cp.procs.procs.remove(old)
            self._restarts += 1
            # What it logged since the last snapshot is read now: the new process starts a log of its own (a
            # scenario that restarts Kueue, as the never-ready drill does, must not hide the errors before it).
            unread = ctlmod.error_lines(old.log, since=self._log_marks.get(ctl.binary, 0))
            if unread:
                self._set_aside.setdefault(ctl.binary, []).extend(unread)
            if old.log.exists():  # each restart keeps the log it ends
                old.log.rename(old.log.with_name(f"{ctl.binary}.before-restart-{self._restarts}.log"))
        ctl.config, ctl.status, ctl.problem = config, "pending", ""
        self._log_marks[ctl.binary] = 0
        run_dir = Path(self.cp.tmp)
        try:
            ctlmod.start(ctl, self.cp.client, self.cp.server, self.cp.ca_file, self.cp.procs, run_dir, self.cert_dir)
        except (ApiError, OSError) as exc:
            ctl.status, ctl.problem = "failed", f"could not restart: {exc}"
        else:
            ctlmod.wait_ready(ctl, str(run_dir / "webhook-ca.crt"))
        return [f"{ctl.binary}: {ctl.problem}"] if ctl.status != "running" else []


class PlantRefused(RuntimeError):
    """The API server refused a planted change."""


RBAC_KINDS = {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}
ADMISSION_KINDS = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicy",
                   "MutatingAdmissionPolicyBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"}
ADMISSION_SETTLE_S = 3.0


def _installed_objects(releases: list[Any]) -> dict[tuple, tuple[str, dict]]:
    """(apiVersion, kind, namespace, name) -> (release, object) for what the installer applies: every
    object of the installed releases but hook Jobs and Pods (which it never applies). Rendered objects
    carry their namespace (the installer applies them as they are)."""
    out = {}
    for rel in order_releases(releases):
        for obj in rel.objects:
            if hooks_of(obj) and obj.get("kind") in ("Job", "Pod"):
                continue
            meta = obj.get("metadata") or {}
            out[(obj.get("apiVersion"), obj.get("kind"), meta.get("namespace"), meta.get("name"))] = (rel.name, obj)
    return out


def _config_changes(controllers: list, planted: list[Any]) -> list[tuple[Any, Optional[dict]]]:
    """(controller, its planted Configuration) for each running controller whose Configuration differs."""
    found = {c.binary: c for c in ctlmod.find_controllers(planted)}
    return [(ctl, found[ctl.binary].config) for ctl in controllers
            if ctl.status == "running" and ctl.binary in found and found[ctl.binary].config != ctl.config]


def rehearse(stack: str, cfg, plan, releases: list[Any], model, placements: list[dict], out: Path,
             timeout: float = 90.0, scenarios=ALL_SCENARIOS, chart_dirs: Optional[list[Path]] = None) -> Rehearsal:
    """Run the rehearsal; never raises for a cluster problem (it is in the result), raises
    binaries.MissingBinaries when the control plane cannot be built from the cache."""
    with StackCluster(stack, cfg, plan, releases, model, placements, out, timeout, chart_dirs) as cluster:
        result = cluster.run(scenarios)
    write_report(result, out)
    return result


def write_report(result: Rehearsal, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / REPORT
    path.write_text(json.dumps(result.to_json(), indent=2, sort_keys=True, default=str) + "\n")
    return path
