"""The platform's Helm values rendered with the REAL pinned charts (../shared/charts, Helm's Go SDK via
helm_python): what the cluster would run, not what we pass. Each test names the defect it guards."""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from pathlib import Path
from typing import Any, Optional

import pytest
import yaml

from gpu_platform.components.cluster import POOL_LABEL, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    GPU_NAMESPACE, JUPYTERHUB_NAMESPACE, KUEUE_NAMESPACE, MONITORING_NAMESPACE, TRAINER_NAMESPACE, render_namespace,
)
from gpu_platform.config.platform import AlertSmtp
from gpu_platform.components.platform.gpu import dcgm_exporter_values
from gpu_platform.components.platform.monitoring import RELEASE as KPS_RELEASE
from gpu_platform.components.platform.monitoring import kube_prometheus_stack_values
from gpu_platform.components.platform.notebooks import jupyterhub_values, render_notebooks_namespace
from gpu_platform.components.platform.queue import LOCAL_QUEUE, QUEUE_NAME_LABEL, kueue_values
from gpu_platform.components.paths import PACKAGE_DIR
from gpu_platform.components.platform.training import render_training_namespace
from tests.fit_support import CHARTS, chart_archive, no_charts, without_charts

ROOT = Path(__file__).resolve().parent.parent
POOLS = [GpuPoolSpec("rtx", "g1-gpu-rtx6000-1", "Quadro RTX 6000", 1, 0, 2, "on-demand", {POOL_LABEL: "rtx"})]
SMTP = AlertSmtp(smarthost="smtp.example.com:587", from_address="alerts@example.com")


def render(chart: str, version: str, values: dict[str, Any], name: str, namespace: str) -> list[dict[str, Any]]:
    helm_python = pytest.importorskip("helm_python")
    archive = chart_archive(chart, version)
    out = helm_python.Chart.load_archive(archive.read_bytes()).render(values, name=name, namespace=namespace)
    return [doc for path, text in sorted(out.items()) if path.endswith((".yaml", ".yml"))
            for doc in yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if doc]


@lru_cache(maxsize=None)
def _kueue() -> tuple:
    return tuple(render("kueue", versions.KUEUE.version, kueue_values(), "kueue", KUEUE_NAMESPACE))


@lru_cache(maxsize=None)
def _hub() -> tuple:
    values = jupyterhub_values(POOLS, "standard", queue_name=LOCAL_QUEUE)
    return tuple(render("jupyterhub", versions.JUPYTERHUB.version, values, "jupyterhub", JUPYTERHUB_NAMESPACE))


def kueue() -> list[dict[str, Any]]:
    return list(_kueue())


def hub() -> list[dict[str, Any]]:
    return list(_hub())


# --- label selectors and network policies, as the API server / CNI evaluate them -------------------


def selector_matches(selector: Optional[dict[str, Any]], labels: dict[str, str]) -> bool:
    """metav1.LabelSelector semantics; an absent selector matches everything."""
    if selector is None:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e["key"], e["operator"], e.get("values") or []
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and key in labels and labels[key] in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def ns_labels(ns: dict[str, Any]) -> dict[str, str]:
    """A Namespace's labels as the API server holds them (it adds kubernetes.io/metadata.name)."""
    return {**ns["metadata"]["labels"], "kubernetes.io/metadata.name": ns["metadata"]["name"]}


def egress_allows(policy: dict[str, Any], ip: str, port: int, protocol: str = "TCP") -> bool:
    """Whether `policy` (selecting the pod, policyTypes Egress) lets it open ip:port to an address
    outside the cluster's pods (ipBlock peers only)."""
    addr = ipaddress.ip_address(ip)
    for rule in policy["spec"].get("egress") or []:
        ports = rule.get("ports")
        if ports and not any(p.get("port") in (port, None) and p.get("protocol", "TCP") == protocol for p in ports):
            continue
        peers = rule.get("to")
        if not peers:
            return True
        for peer in peers:
            block = peer.get("ipBlock")
            if block and addr in ipaddress.ip_network(block["cidr"]) and not any(
                    addr in ipaddress.ip_network(x) for x in block.get("except") or []):
                return True
    return False


# --- 1. Kueue's webhooks only see the queue's namespaces ---------------------------------------------


PLATFORM_NAMESPACES = [render_namespace(n, "baseline") for n in
                       (GPU_NAMESPACE, MONITORING_NAMESPACE, TRAINER_NAMESPACE, "kubeflow", "default")]


def test_kueue_fail_webhooks_match_only_the_queue_namespaces() -> None:
    """Before: every namespace but kube-system/kueue-system, so the other releases' pre-install hook
    Jobs (kube-prometheus-stack's admission patch Jobs, ...) were rejected until Kueue served."""
    objs = kueue()
    hooks = [w for o in objs if o["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
             for w in o["webhooks"]]
    job_hooks = [w for w in hooks if any("jobs" in r["resources"] or "pods" in r["resources"] for r in w["rules"])]
    assert {"mjob.kb.io", "vjob.kb.io", "mpod.kb.io"} <= {w["name"] for w in job_hooks}
    for w in hooks:
        if w.get("namespaceSelector") is None:
            # cluster-scoped or Kueue's own kinds only (ClusterQueue, ResourceFlavor, Workload, Cohort)
            assert all(g == "kueue.x-k8s.io" for r in w["rules"] for g in r["apiGroups"]), w["name"]
            continue
        for ns in PLATFORM_NAMESPACES:
            assert not selector_matches(w["namespaceSelector"], ns_labels(ns)), (w["name"], ns["metadata"]["name"])
        assert selector_matches(w["namespaceSelector"], ns_labels(render_training_namespace())), w["name"]
        assert selector_matches(w["namespaceSelector"], ns_labels(render_notebooks_namespace())), w["name"]


def test_kueue_manages_plain_pods_for_gpu_notebooks() -> None:
    config = next(o for o in kueue() if o["kind"] == "ConfigMap" and "manager-config" in o["metadata"]["name"])
    conf = yaml.safe_load(next(iter(config["data"].values())))
    assert "pod" in conf["integrations"]["frameworks"]
    assert conf["manageJobsWithoutQueueName"] is False


# --- 4. JupyterHub: admitted by Pod Security, metadata blocked by NetworkPolicy ----------------------


def test_no_privileged_init_container_in_user_pods() -> None:
    """Before: blockWithIptables added a privileged NET_ADMIN init container that the namespace's
    baseline Pod Security level refuses. The hub's config carries the chart's singleuser settings."""
    secret = next(o for o in hub() if o["kind"] == "Secret" and o["metadata"]["name"] == "hub")
    import base64

    data = secret.get("stringData") or {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    chart_values = yaml.safe_load(data["values.yaml"])
    assert chart_values["singleuser"]["cloudMetadata"]["blockWithIptables"] is False
    assert render_notebooks_namespace()["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"


@pytest.mark.parametrize("component", ["singleuser", "hub", "proxy"])
def test_chart_network_policies_block_the_cloud_metadata_server(component: str) -> None:
    """The metadata address is unreachable over HTTP from notebooks, the hub and the proxy (DNS on
    port 53 stays allowed, as the chart intends); the wider internet is reachable."""
    policy = next(o for o in hub() if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == component)
    assert "Egress" in policy["spec"]["policyTypes"]
    assert not egress_allows(policy, "169.254.169.254", 80)
    assert egress_allows(policy, "151.101.0.1", 443)


def test_gpu_notebook_pods_carry_the_queue_label() -> None:
    secret = next(o for o in hub() if o["kind"] == "Secret" and o["metadata"]["name"] == "hub")
    import base64

    data = secret.get("stringData") or {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    profiles = yaml.safe_load(data["values.yaml"])["singleuser"]["profileList"]
    gpu = [p for p in profiles if p["slug"].startswith("gpu-")]
    assert gpu and all(p["kubespawner_override"]["extra_labels"] == {QUEUE_NAME_LABEL: LOCAL_QUEUE} for p in gpu)
    cpu = next(p for p in profiles if p["slug"] == "cpu")
    assert "extra_labels" not in cpu["kubespawner_override"]


# --- 6. DCGM exporter on GKE --------------------------------------------------------------------------


def dcgm_container(cloud: str) -> tuple[dict[str, Any], dict[str, Any]]:
    objs = render("dcgm-exporter", versions.DCGM_EXPORTER.version, dcgm_exporter_values(POOLS, cloud),
                  "dcgm-exporter", GPU_NAMESPACE)
    ds = next(o for o in objs if o["kind"] == "DaemonSet")
    return ds["spec"]["template"]["spec"], ds["spec"]["template"]["spec"]["containers"][0]


def test_dcgm_on_gke_mounts_the_host_driver() -> None:
    """Before: no GPU request, so GKE mounted no driver and the exporter exported nothing."""
    pod, c = dcgm_container("gcp")
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    driver = next(n for n, p in host.items() if p == "/home/kubernetes/bin/nvidia")
    assert mounts[driver] == "/usr/local/nvidia"
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert env["DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE"] == "device-name"
    assert c["securityContext"]["privileged"] is True
    assert c["securityContext"].get("allowPrivilegeEscalation") is not False  # API server refuses privileged + False
    assert "/etc/dcgm-exporter/default-counters.csv" in mounts.values()  # the chart's own mount kept
    assert "nvidia.com/gpu" not in str(c["resources"])


@pytest.mark.parametrize("cloud", ["linode", "aws"])
def test_dcgm_elsewhere_keeps_the_chart_defaults(cloud: str) -> None:
    pod, c = dcgm_container(cloud)
    assert not any(v.get("hostPath", {}).get("path") == "/home/kubernetes/bin/nvidia" for v in pod["volumes"])
    assert "privileged" not in c["securityContext"]


# --- 7. kube-prometheus-stack: no control-plane scrapes that cannot work -------------------------------


CONTROL_PLANE_ALERTS = ("KubeSchedulerDown", "KubeControllerManagerDown", "KubeProxyDown", "etcdMembersDown",
                        "etcdInsufficientMembers")


@pytest.mark.parametrize("cloud", ["linode", "gcp", "aws"])
def test_no_control_plane_scrapes_or_alerts(cloud: str) -> None:
    """Before: KubeSchedulerDown/KubeControllerManagerDown/etcd alerts fired forever on every cloud."""
    values = kube_prometheus_stack_values("standard", ["ops@example.com"], SMTP, cloud=cloud)
    objs = render("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK.version, values, KPS_RELEASE,
                  MONITORING_NAMESPACE)
    alerts = {r["alert"] for o in objs if o["kind"] == "PrometheusRule"
              for g in o["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert "Watchdog" in alerts and "KubeletDown" in alerts  # the rest of the rules are there
    assert not alerts & set(CONTROL_PLANE_ALERTS)
    monitors = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceMonitor"}
    for component in ("kube-scheduler", "kube-controller-manager", "kube-etcd", "kube-proxy"):
        assert f"{KPS_RELEASE}-{component}" not in monitors
    # (Alertmanager's routing is checked with amtool in test_platform_render)


@pytest.mark.parametrize("cloud", ["linode", "gcp", "aws"])
def test_coredns_is_scraped_only_where_coredns_serves_metrics(cloud: str) -> None:
    """Before: on GKE the coredns ServiceMonitor scraped kube-dns pods on port 9153, which GKE's kube-dns
    does not serve: TargetDown mailed every day."""
    values = kube_prometheus_stack_values("standard", ["ops@example.com"], SMTP, cloud=cloud)
    objs = render("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK.version, values, KPS_RELEASE,
                  MONITORING_NAMESPACE)
    services = [o for o in objs if o["kind"] == "Service" and o["metadata"]["name"] == f"{KPS_RELEASE}-coredns"]
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor" and o["metadata"]["name"] == f"{KPS_RELEASE}-coredns"]
    if cloud == "gcp":
        assert not services and not monitors
    else:  # CoreDNS (EKS add-on, kubeadm) serves Prometheus metrics on 9153
        assert [p["targetPort"] for p in services[0]["spec"]["ports"]] == [9153] and monitors


# --- 8. Kubeflow overlays: one owner for `kubeflow`, no kubelet-serving certificate ------------------


def overlay(name: str) -> list[dict[str, Any]]:
    """The overlay as preflight renders it (resources from the pre-built upstream YAML + patches)."""
    from gpu_platform.preflight.fit.errors import ChartError
    from gpu_platform.preflight.fit.render import load_kustomize

    if not (CHARTS / "kustomize").is_dir():
        without_charts(no_charts("the pre-built kustomize YAML (kustomize/)"))
    try:
        return load_kustomize(str(PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS[name]), name, [CHARTS])
    except ChartError as e:  # pragma: no cover - the message names the overlay
        pytest.fail(str(e))


@pytest.mark.parametrize("name", sorted(versions.KUSTOMIZE_OVERLAYS))
def test_overlays_wrap_exactly_the_pinned_targets(name: str) -> None:
    kfile = PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS[name] / "kustomization.yaml"
    doc = yaml.safe_load(kfile.read_text())
    assert doc["resources"] == [versions.KUSTOMIZE_SOURCES[name]]
    objs = overlay(name)
    assert objs and not [o for o in objs if o["kind"] == "Namespace"]  # the program owns `kubeflow`


def test_pipelines_run_without_the_cache_webhook_and_its_kubelet_serving_certificate() -> None:
    """Before: cache-deployer requested a kubelet-serving-signed certificate EKS never signs."""
    objs = overlay("pipelines-cluster-scoped") + overlay("pipelines-platform-agnostic")
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert not [n for n in names if "cache" in n[1]], sorted(n for n in names if "cache" in n[1])
    assert ("Deployment", "ml-pipeline") in names and ("Deployment", "workflow-controller") in names
    # nothing left refers to what was dropped
    service_accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    for o in objs:
        if o["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for s in o.get("subjects") or []:
                if s["kind"] == "ServiceAccount" and s.get("namespace", "kubeflow") == "kubeflow":
                    assert s["name"] in service_accounts, (o["metadata"]["name"], s["name"])


def test_katib_injects_its_metrics_collector_in_training_and_leaves_kubeflow_alone() -> None:
    """Before: `training` lacked the label, so trials there got no metrics collector. The program-owned
    `kubeflow` Namespace does not carry it: Katib's pod webhook (failurePolicy Fail by default) would
    otherwise intercept Pipelines' and Katib's own pods and refuse them until Katib serves."""
    from gpu_platform.components.platform.kubeflow import render_kubeflow_namespace

    assert render_kubeflow_namespace()["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    katib_hook = next(w for o in overlay("katib-standalone") if o["kind"] == "MutatingWebhookConfiguration"
                      for w in o["webhooks"] if w["name"] == "mutator.pod.katib.kubeflow.org")
    assert katib_hook.get("failurePolicy", "Fail") == "Fail"
    assert selector_matches(katib_hook["namespaceSelector"], ns_labels(render_training_namespace()))
    assert not selector_matches(katib_hook["namespaceSelector"], ns_labels(render_kubeflow_namespace()))
