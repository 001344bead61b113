"""Install what the program installs, in the program's order, server-side: the namespaces, every CRD
(established before anything uses them), then each rendered release and kustomize install in the
order of the program's dependencies, each in Helm's kind order with its hooks around it. Every object
the API server refuses is recorded with its message.

The one rewrite: each webhook configuration's and CRD conversion's `clientConfig` pointing at a
controller's Service is pointed at the controller's local process instead (url
https://127.0.0.1:<port>/<path>, the rehearsal's CA bundle). Webhooks of a controller that does not
run here are removed and reported NOT REHEARSED."""

from __future__ import annotations

import base64
import copy
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from gpu_platform.rehearsal.controllers import Controller
from gpu_platform.rehearsal.kube import ApiError, Client, UnknownKind, wait_for

HOOK = "helm.sh/hook"
# Helm's install order (pkg/release/util/kind_sorter.go InstallOrder); kinds not listed go last.
INSTALL_ORDER = ["PriorityClass", "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodSecurityPolicy",
                 "PodDisruptionBudget", "ServiceAccount", "Secret", "SecretList", "ConfigMap", "StorageClass",
                 "PersistentVolume", "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole",
                 "ClusterRoleList", "ClusterRoleBinding", "ClusterRoleBindingList", "Role", "RoleList", "RoleBinding",
                 "RoleBindingList", "Service", "DaemonSet", "Pod", "ReplicationController", "ReplicaSet", "Deployment",
                 "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress", "APIService",
                 "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"]
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
REWRITTEN = "webhook clientConfig rewritten to local process"
# Objects of one kind rank go to the API server in parallel (they do not depend on each other: Helm
# sends them in one batch too); ranks stay in order.
PARALLEL = 6


def hooks_of(obj: dict) -> set[str]:
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    return {h.strip() for h in str(ann.get(HOOK, "")).split(",") if h.strip()}


def _kind_rank(obj: dict) -> int:
    kind = obj.get("kind", "")
    return INSTALL_ORDER.index(kind) if kind in INSTALL_ORDER else len(INSTALL_ORDER) - 2  # CRs before webhooks


def order_releases(releases: list[Any]) -> list[Any]:
    """Dependencies first (a release's depends_on holds the URNs it waits for, transitively); ties
    keep preflight's order."""
    pending = [r for r in releases if r.rendered and r.source != "example"]
    urns = {r.urn for r in pending}
    done: set[str] = set()
    out = []
    while pending:
        ready = [r for r in pending if not ((r.depends_on & urns) - done - {r.urn})]
        if not ready:  # a cycle cannot come from Pulumi; take the rest as they are
            ready = pending[:1]
        # The program's own objects (StorageClasses, namespaces' quotas, ...) before the charts that may
        # use them, as far as the dependencies allow: an operator that finds no StorageClass may give up.
        own = [r for r in ready if r.source == "manifest"]
        ready = own or ready
        for r in ready:
            out.append(r)
            done.add(r.urn)
        pending = [r for r in pending if r.urn not in done]
    return out


def _key(obj: dict) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{ns + '/' if ns else ''}{meta.get('name')}"


@dataclass
class InstallLog:
    applied: int = 0
    refused: list[dict] = field(default_factory=list)
    hooks: list[dict] = field(default_factory=list)
    webhooks: list[dict] = field(default_factory=list)
    namespaces_created: list[str] = field(default_factory=list)
    # CRDs a controller registers itself (not in any chart), and where they came from.
    registered: list[str] = field(default_factory=list)

    def refuse(self, release: str, obj: dict, message: str) -> None:
        meta = obj.get("metadata") or {}
        self.refused.append({"release": release, "kind": obj.get("kind"), "name": meta.get("name"),
                             "namespace": meta.get("namespace"), "message": message})


class Installer:
    def __init__(self, client: Client, releases: list[Any], controllers: list[Controller], ca_bundle: bytes,
                 log: InstallLog, on_release: Optional[Callable[[Any], None]] = None):
        self.client, self.releases, self.log = client, releases, log
        self.ca_bundle = base64.b64encode(ca_bundle).decode()
        self.on_release = on_release
        self._lock = threading.Lock()
        self.controllers = controllers
        self.by_service = self._services(releases, controllers)

    @staticmethod
    def _services(releases, controllers) -> dict[tuple[str, str], Controller]:
        """(namespace, Service name) -> the controller whose pods the Service selects."""
        out = {}
        for ctl in controllers:
            rel = next((r for r in releases if r.name == ctl.release), None)
            if rel is None:
                continue
            dep = next(o for o in rel.objects if o.get("kind") == "Deployment" and o["metadata"]["name"] == ctl.deployment)
            labels = ((dep["spec"]["template"].get("metadata") or {}).get("labels")) or {}
            for svc in rel.objects:
                sel = (svc.get("spec") or {}).get("selector") if svc.get("kind") == "Service" else None
                if sel and all(labels.get(k) == v for k, v in sel.items()):
                    out[(svc["metadata"].get("namespace") or ctl.namespace, svc["metadata"]["name"])] = ctl
        return out

    # --- the rewrite ------------------------------------------------------------------------------------

    def _target(self, client_config: dict) -> tuple[Optional[Controller], str]:
        svc = client_config.get("service") or {}
        ctl = self.by_service.get((svc.get("namespace"), svc.get("name")))
        where = f"service {svc.get('namespace')}/{svc.get('name')}{svc.get('path') or ''}"
        return ctl, where

    def _local(self, ctl: Controller, client_config: dict) -> dict:
        path = (client_config.get("service") or {}).get("path") or "/"
        return {"url": f"https://127.0.0.1:{ctl.webhook_port}{path}", "caBundle": self.ca_bundle}

    def rewrite(self, obj: dict) -> dict:
        kind = obj.get("kind")
        if kind in WEBHOOK_KINDS:
            obj = copy.deepcopy(obj)
            kept = []
            for hook in obj.get("webhooks") or []:
                cc = hook.get("clientConfig") or {}
                if "service" not in cc:
                    kept.append(hook)
                    continue
                ctl, where = self._target(cc)
                entry = {"configuration": obj["metadata"]["name"], "webhook": hook.get("name"), "was": where}
                if ctl is not None and ctl.status != "not-built":
                    hook["clientConfig"] = self._local(ctl, cc)
                    entry.update(action=REWRITTEN, controller=ctl.binary, url=hook["clientConfig"]["url"])
                    kept.append(hook)
                else:
                    who = f"{ctl.binary} (not built)" if ctl is not None else "a server the rehearsal does not run"
                    entry.update(action="NOT REHEARSED: webhook removed", controller=who)
                self.log.webhooks.append(entry)
            obj["webhooks"] = kept
        elif kind == "CustomResourceDefinition":
            conv = (obj.get("spec") or {}).get("conversion") or {}
            cc = (conv.get("webhook") or {}).get("clientConfig") or {}
            if conv.get("strategy") == "Webhook" and "service" in cc:
                obj = copy.deepcopy(obj)
                ctl, where = self._target(cc)
                entry = {"configuration": obj["metadata"]["name"], "webhook": "conversion", "was": where}
                if ctl is not None and ctl.status != "not-built":
                    obj["spec"]["conversion"]["webhook"]["clientConfig"] = self._local(ctl, cc)
                    entry.update(action=REWRITTEN, controller=ctl.binary,
                                 url=obj["spec"]["conversion"]["webhook"]["clientConfig"]["url"])
                else:
                    obj["spec"]["conversion"] = {"strategy": "None"}
                    entry.update(action="NOT REHEARSED: conversion webhook removed (strategy None)",
                                 controller=f"{ctl.binary} (not built)" if ctl else "a server the rehearsal does not run")
                self.log.webhooks.append(entry)
        return obj

    # --- applying -----------------------------------------------------------------------------------------

    def apply(self, release: str, obj: dict) -> bool:
        try:
            self.client.apply(self.rewrite(obj))
            with self._lock:
                self.log.applied += 1
            return True
        except ApiError as exc:
            self.log.refuse(release, obj, exc.message)
        except UnknownKind as exc:
            self.log.refuse(release, obj, str(exc))
        return False

    def apply_all(self, release: str, objs: list[dict]) -> list[bool]:
        """Apply in Helm's kind order; objects of the same kind rank in parallel."""
        results: list[bool] = []
        with ThreadPoolExecutor(PARALLEL) as pool:
            for _, group in itertools.groupby(sorted(objs, key=_kind_rank), key=_kind_rank):
                results += list(pool.map(lambda o: self.apply(release, o), list(group)))
        return results

    def namespaces(self) -> None:
        """Every Namespace the releases declare, then those a release installs into without declaring it
        (Helm's --create-namespace / the Release's createNamespace), listed as created."""
        declared = set()
        for rel in order_releases(self.releases):
            for obj in rel.objects:
                if obj.get("kind") == "Namespace" and not hooks_of(obj):
                    declared.add(obj["metadata"]["name"])
                    self.apply(rel.name, obj)
        needed = {o["metadata"]["namespace"] for r in self.releases for o in r.objects if (o.get("metadata") or {}).get("namespace")}
        for ns in sorted(needed - declared):
            if self.client.get("v1", "Namespace", ns) is None:
                self.client.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                self.log.namespaces_created.append(ns)

    def crds(self, timeout: float = 60.0, registered: tuple[tuple[str, list[dict]], ...] = ()) -> None:
        """Every CRD the releases render, after those a controller registers itself at start
        (`registered`: (who, CRDs), e.g. cilium-operator's), each applied server-side like the rest."""
        names, applied = [], []
        sources = [(who, objs) for who, objs in registered]
        sources += [(rel.name, [o for o in rel.objects if o.get("kind") == "CustomResourceDefinition" and not hooks_of(o)])
                    for rel in order_releases(self.releases)]
        for who, crds in sources:
            for obj, ok in zip(crds, self.apply_all(who, crds)):
                if ok:
                    names.append(obj["metadata"]["name"])
                    applied.append(obj)

        # Established = served: each CRD's kinds appear in discovery (cheap; listing the CRDs themselves
        # moves megabytes per poll).
        kinds = sorted({(f"{o['spec']['group']}/{v['name']}", o["spec"]["names"]["kind"])
                        for o in applied for v in o["spec"].get("versions") or [] if v.get("served", True)})

        def established():
            waiting = []
            for api_version, kind in kinds:
                try:
                    self.client.resource(api_version, kind)
                except UnknownKind:
                    waiting.append(f"{kind} ({api_version})")
            return not waiting

        wait_for(f"{len(names)} CRDs to be served", established, timeout)
        self.client.forget()

    def release(self, rel: Any, run_hook_job: Callable[[Any, dict], Optional[str]]) -> None:
        objs = [o for o in rel.objects if o.get("kind") not in ("Namespace", "CustomResourceDefinition") or hooks_of(o)]
        pre = sorted([o for o in objs if hooks_of(o) & {"pre-install"}], key=_kind_rank)
        post = sorted([o for o in objs if hooks_of(o) & {"post-install"}], key=_kind_rank)
        main = sorted([o for o in objs if not hooks_of(o)], key=_kind_rank)
        other = [o for o in objs if hooks_of(o) and not hooks_of(o) & {"pre-install", "post-install"}]
        for obj in other:
            self.log.hooks.append({"release": rel.name, "object": _key(obj), "hook": ",".join(sorted(hooks_of(obj))),
                                   "action": "skipped: not an install hook"})
        for phase, group in (("pre-install", pre), ("install", main), ("post-install", post)):
            if phase == "install":
                self.apply_all(rel.name, group)
                if self.on_release is not None:
                    self.on_release(rel)
                continue
            for obj in group:
                if phase != "install" and obj.get("kind") in ("Job", "Pod"):
                    why = run_hook_job(rel, obj)
                    self.log.hooks.append({"release": rel.name, "object": _key(obj), "hook": phase,
                                           "action": why or "skipped: its container does the work and no container runtime runs it"})
                    continue
                ok = self.apply(rel.name, obj)
                self.log.hooks.append({"release": rel.name, "object": _key(obj), "hook": phase,
                                       "action": "applied" if ok else "refused"})
