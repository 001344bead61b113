"""Scrape targets: does every ServiceMonitor/PodMonitor find what it is meant to scrape?

Prometheus Operator turns a ServiceMonitor into Kubernetes service discovery over the Endpoints of the
Services its `selector` matches in the namespaces of its `namespaceSelector` (default: its own
namespace; `any: true`: all), keeping the endpoint whose Service port is named `port` (or whose
`targetPort` is the pod port). A PodMonitor selects pods and keeps the container port named `port`.
A selector that matches nothing, or a port name that no matched object has, is silent: no target,
no error, and every alert on those metrics never fires (prometheus-operator Documentation/api-reference:
ServiceMonitorSpec, Endpoint, PodMonitorSpec, PodMetricsEndpoint).

Pure: objects in, findings out. Services the cluster itself provides (the API server's `kubernetes`
Service, the kubelet Service the operator maintains) are modelled here since no release renders them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional

MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")

# Services that exist without any release rendering them, with the labels and port names they carry:
# the API server's Service (kube-apiserver: default/kubernetes, port "https"); the kubelet Service that
# prometheus-operator keeps in kube-system (--kubelet-service, kube-prometheus-stack
# prometheusOperator.kubeletService: ports https-metrics, http-metrics, cadvisor).
CLUSTER_SERVICES: tuple[dict[str, Any], ...] = (
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
     "spec": {"ports": [{"name": "https", "port": 443}]}},
    {"apiVersion": "v1", "kind": "Service",
     "metadata": {"name": "kube-prometheus-stack-kubelet", "namespace": "kube-system",
                  "labels": {"app.kubernetes.io/name": "kubelet", "k8s-app": "kubelet"}},
     "spec": {"ports": [{"name": "https-metrics", "port": 10250}, {"name": "http-metrics", "port": 10255},
                        {"name": "cadvisor", "port": 4194}]}},
)


@dataclass(frozen=True)
class ScrapeFinding:
    release: str
    object: str  # Kind/namespace/name of the monitor
    reason: str
    fix: str


def _selector_matches(selector: Optional[dict], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics (an empty selector matches everything)."""
    selector = selector or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != str(v):
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), [str(v) for v in e.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _namespaces_ok(monitor: dict, namespace: Optional[str]) -> bool:
    ns_sel = (monitor.get("spec") or {}).get("namespaceSelector") or {}
    if ns_sel.get("any"):
        return True
    names = ns_sel.get("matchNames")
    if names:
        return namespace in names
    return namespace == (monitor.get("metadata") or {}).get("namespace")


def _pod_templates(objects: Iterable[tuple[str, dict]]) -> list[tuple[str, dict, dict]]:
    """(namespace, pod labels, pod spec) of every workload's pod template."""
    out = []
    for _release, obj in objects:
        kind, spec = obj.get("kind"), obj.get("spec") or {}
        ns = (obj.get("metadata") or {}).get("namespace")
        if kind in ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"):
            tpl = spec.get("template") or {}
            out.append((ns, dict((tpl.get("metadata") or {}).get("labels") or {}), tpl.get("spec") or {}))
        elif kind == "Pod":
            out.append((ns, dict((obj.get("metadata") or {}).get("labels") or {}), spec))
        elif kind in ("Prometheus", "Alertmanager"):
            # the operator makes the StatefulSet: pods labelled app.kubernetes.io/name=<kind lower>
            # and <kind lower>=<name>, with the web port "http-web" and the reloader's "reloader-web"
            name = (obj.get("metadata") or {}).get("name")
            lower = kind.lower()
            ports = [{"name": spec.get("portName") or "http-web", "containerPort": 9090 if lower == "prometheus" else 9093},
                     {"name": "reloader-web", "containerPort": 8080}]
            out.append((ns, {"app.kubernetes.io/name": lower, lower: name}, {"containers": [{"name": lower, "ports": ports}]}))
    return out


def _container_ports(pod_spec: dict) -> list[dict]:
    return [p for c in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or [])
            for p in c.get("ports") or []]


def _service_target_ok(svc: dict, port_name: str, pods: list[tuple[str, dict, dict]]) -> Optional[str]:
    """Whether the Service port `port_name` reaches a port of the pods the Service selects; None when it
    does (or when the pods are not rendered here), else why not."""
    port = next((p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("name") == port_name), None)
    if port is None:
        return None  # reported by the caller
    selector = (svc.get("spec") or {}).get("selector")
    if not selector:
        return None  # endpoints maintained by someone else (API server, operator)
    ns = (svc.get("metadata") or {}).get("namespace")
    matched = [spec for pns, labels, spec in pods if pns == ns and all(labels.get(k) == str(v) for k, v in selector.items())]
    if not matched:
        return None  # the pods are the cluster's own (e.g. kube-dns): not rendered, not judged here
    target = port.get("targetPort", port.get("port"))
    for spec in matched:
        ports = _container_ports(spec)
        if isinstance(target, str) and any(p.get("name") == target for p in ports):
            return None
        if isinstance(target, int) and (any(p.get("containerPort") == target for p in ports) or not ports):
            return None
    return (f"Service {ns}/{svc['metadata']['name']} port {port_name} targets {target!r}, which no container of "
            "the pods it selects declares")


def scrape_findings(objects: Iterable[tuple[str, dict]]) -> list[ScrapeFinding]:
    """`objects`: (release, manifest) pairs of everything the stack renders."""
    objects = list(objects)
    services = [o for _r, o in objects if o.get("kind") == "Service" and o.get("apiVersion") == "v1"]
    services += list(CLUSTER_SERVICES)
    pods = _pod_templates(objects)
    findings: list[ScrapeFinding] = []
    for release, mon in objects:
        kind = mon.get("kind")
        if kind not in MONITOR_KINDS or not str(mon.get("apiVersion", "")).startswith("monitoring.coreos.com/"):
            continue
        meta, spec = mon.get("metadata") or {}, mon.get("spec") or {}
        oid = f"{kind}/{meta.get('namespace')}/{meta.get('name')}"
        selector = spec.get("selector")
        if kind == "ServiceMonitor":
            matched = [s for s in services if _namespaces_ok(mon, (s.get("metadata") or {}).get("namespace"))
                       and _selector_matches(selector, dict((s.get("metadata") or {}).get("labels") or {}))]
            if not matched:
                findings.append(ScrapeFinding(release, oid, f"its selector {selector} matches no Service in "
                                              f"{spec.get('namespaceSelector') or 'its own namespace'}: "
                                              "Prometheus gets no target and alerts on these metrics never fire",
                                              "make the selector match the labels the chart puts on the Service"))
                continue
            for ep in spec.get("endpoints") or []:
                name = ep.get("port")
                if name is None:
                    continue  # targetPort endpoints address the pod port directly
                with_port = [s for s in matched if any(p.get("name") == name for p in (s.get("spec") or {}).get("ports") or [])]
                if not with_port:
                    have = sorted({p.get("name") for s in matched for p in (s.get("spec") or {}).get("ports") or []} - {None})
                    findings.append(ScrapeFinding(release, oid, f"endpoint port {name!r} is not a port of the Services "
                                                  f"it selects ({', '.join(have) or 'no named ports'})",
                                                  "name the Service port the chart renders"))
                    continue
                for s in with_port:
                    why = _service_target_ok(s, name, pods)
                    if why:
                        findings.append(ScrapeFinding(release, oid, why, "point the Service's targetPort at the container port"))
        else:
            matched_pods = [p for p in pods if _namespaces_ok(mon, p[0]) and _selector_matches(selector, p[1])]
            if not matched_pods:
                findings.append(ScrapeFinding(release, oid, f"its selector {selector} matches no pod: no target",
                                              "make the selector match the pods' labels"))
                continue
            for ep in spec.get("podMetricsEndpoints") or []:
                name = ep.get("port")
                if name and not any(p.get("name") == name for _n, _l, s in matched_pods for p in _container_ports(s)):
                    findings.append(ScrapeFinding(release, oid, f"port {name!r} is not a container port of the pods it selects",
                                                  "name the container port the chart renders"))
    return findings
