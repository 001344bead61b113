"""Monitoring and cost alerts: kube-prometheus-stack, the DCGM exporter scrape, idle-GPU alerts, a
GPU spend run-rate alert against the monthly budget, e-mail to `alertEmails`, a Grafana GPU dashboard.

The run-rate alert (`gpu-spend-run-rate`) works on every cloud, including Linode, which has no
billing API: it multiplies the GPU nodes running now (per pool, from kube-state-metrics) by the
pool's $/hour from the price catalog, and fires when that rate over a month (x730 h) passes 50 %
and 100 % of `monthlyBudgetUsd`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import pulumi

from gpu_platform.components.cluster import POOL_LABEL, ClusterHandle, GpuPoolSpec
from gpu_platform.data import platform_versions as versions
from gpu_platform.components.platform.common import (
    GPU_NAMESPACE, MANAGED_BY, MONITORING_NAMESPACE, PLATFORM_PRIORITY_CLASS, apply_object, helm_release, k8s_opts,
    render_namespace,
)
from gpu_platform.config.platform import AlertSmtp
from gpu_platform.components.platform.gpu import DCGM_SERVICE_LABELS

if TYPE_CHECKING:
    from gpu_platform.costs.catalog import Catalog

HOURS_PER_MONTH = 730
MONITORING_API = "monitoring.coreos.com/v1"
SPEND_RULE_NAME = "gpu-spend-run-rate"  # the policy pack recognises this as the Linode budget guardrail
IDLE_RULE_NAME = "gpu-idle"
SPEND_RECORD = "gpu_platform:gpu_spend_usd_per_hour"
SPEND_THRESHOLDS = (50, 100)  # percent of monthlyBudgetUsd
# Grafana's admin login: the kube-prometheus-stack chart's grafana subchart (12.11.1 in 88.5.3) generates it when
# `admin.existingSecret` is empty: templates/secret.yaml renders the Secret `<release>-grafana` with
# `admin-user` and `admin-password`, a randAlphaNum 40 that its `grafana.password` helper keeps across upgrades
# by `lookup` of the Secret already there, and the pods read it from that Secret. The password is made in
# the cluster by Helm (the Release resource runs Helm as a library), so it is never in the Pulumi state, as it
# was when the program generated it (RandomPassword) and wrote it to a Secret of its own.
GRAFANA_ADMIN_SECRET = "kube-prometheus-stack-grafana"
RELEASE = "kube-prometheus-stack"


def ksm_label(label_key: str) -> str:
    """How kube-state-metrics names a Kubernetes label in kube_*_labels: label_<sanitized>."""
    return "label_" + re.sub(r"[^A-Za-z0-9_]", "_", label_key)


POOL_METRIC_LABEL = ksm_label(POOL_LABEL)


# ---------------------------------------------------------------------------------------------
# Prices and rules
# ---------------------------------------------------------------------------------------------


def pool_hourly_prices(cloud: str, pools: Sequence[GpuPoolSpec],
                       overrides: Optional[Mapping[str, Mapping[str, Any]]] = None,
                       catalog: Optional["Catalog"] = None, region: Optional[str] = None) -> dict[str, float]:
    """$/hour of one node of each pool at its capacity type, from the price catalog (or `catalog`: the stack's own
    node types on cloud kubernetes), in `region` where the catalog prices it there (the bill's price: AWS Spot of
    p4d has eu-west-1's price and none in the reference us-east-1), else the reference price."""
    from gpu_platform.costs.catalog import RegionalPriceMissing, load_catalog

    catalog = catalog if catalog is not None else load_catalog(dict(overrides) if overrides else None)
    prices: dict[str, float] = {}
    for p in pools:
        itype = catalog.instance(cloud, p.instance_type)
        if itype is not None and region:
            try:
                itype, _ = catalog.in_region(cloud, p.instance_type, p.capacity, region)
            except RegionalPriceMissing:
                # The bill and the policy pack's cost rule refuse the stack (no price there; priceOverrides prices
                # it). Nothing to deploy, so no rule to render: the reference price, or the pool left out of it.
                if itype.price(p.capacity) is None and itype.priced_somewhere(p.capacity):
                    continue
        price = itype.price(p.capacity) if itype is not None else None
        if price is None:
            raise ValueError(f"GPU pool {p.name}: no {p.capacity} price for {cloud}/{p.instance_type} in the catalog")
        prices[p.name] = price.usd_per_hour
    return prices


def unpriced_pools(cluster: ClusterHandle) -> list[str]:
    """The GPU pools without a price for their capacity on a cluster whose node types are the stack's own (cloud
    kubernetes: prices are all or none, checks/kubernetes.py); empty elsewhere (the catalog prices every type)."""
    if cluster.catalog is None:
        return []
    out = []
    for p in cluster.gpu_pools:
        t = cluster.catalog.instance(cluster.cloud, p.instance_type)
        if t is None or t.price(p.capacity) is None:
            out.append(p.name)
    return out


def spend_expression(prices: Mapping[str, float]) -> str:
    """PromQL: $/hour of the GPU nodes running now (nodes per pool x the pool's hourly price)."""
    if not prices:
        raise ValueError("no GPU pools to price")
    terms = [f'(count(kube_node_labels{{{POOL_METRIC_LABEL}="{name}"}}) or vector(0)) * {price:g}'
             for name, price in sorted(prices.items())]
    return "\n+ ".join(terms)


def render_spend_rule(prices: Mapping[str, float], monthly_budget_usd: float,
                      namespace: str = MONITORING_NAMESPACE) -> dict[str, Any]:
    """PrometheusRule `gpu-spend-run-rate`: a recording rule for the GPU $/hour and one alert per
    threshold when that rate, kept up for a month, passes the share of the budget."""
    if monthly_budget_usd <= 0:
        raise ValueError("monthly_budget_usd must be positive")
    rules: list[dict[str, Any]] = [{"record": SPEND_RECORD, "expr": spend_expression(prices)}]
    for pct in SPEND_THRESHOLDS:
        limit = monthly_budget_usd * pct / 100
        rules.append({
            "alert": f"GpuSpendRunRateOver{pct}Percent",
            "expr": f"{SPEND_RECORD} * {HOURS_PER_MONTH} > {limit:g}",
            "for": "15m",
            "labels": {"severity": "critical" if pct >= 100 else "warning", "budget_percent": str(pct)},
            "annotations": {
                "summary": f"GPU spend is running at over {pct}% of the monthly budget",
                "description": (
                    "GPU nodes running now cost {{ $value | humanize }} USD per month at this rate "
                    f"({HOURS_PER_MONTH} h); {pct}% of the {monthly_budget_usd:g} USD budget is {limit:g} USD. "
                    "Scale GPU pools down or stop idle jobs and notebooks."),
            },
        })
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": SPEND_RULE_NAME, "namespace": namespace,
                     "labels": {**MANAGED_BY, "gpu-platform.io/guardrail": "budget"}},
        "spec": {"groups": [{"name": SPEND_RULE_NAME, "interval": "1m", "rules": rules}]},
    }


def render_idle_rules(idle_minutes: int, util_percent: int, namespace: str = MONITORING_NAMESPACE) -> dict[str, Any]:
    """PrometheusRule `gpu-idle`: a GPU held by a pod but under `util_percent` % for `idle_minutes`,
    and a GPU node on which no running pod requests a GPU for `idle_minutes`."""
    held_idle = f'DCGM_FI_DEV_GPU_UTIL{{exported_pod!=""}} < {util_percent}'
    gpu_pods_per_node = (
        'sum by (node) (kube_pod_container_resource_requests{resource="nvidia_com_gpu"}'
        ' * on (namespace, pod) group_left() max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running"} == 1))'
    )
    node_without_pods = (
        f'max by (node) (kube_node_labels{{{POOL_METRIC_LABEL}!=""}})'
        f"\nunless on (node)\n({gpu_pods_per_node} > 0)"
    )
    return {
        "apiVersion": MONITORING_API,
        "kind": "PrometheusRule",
        "metadata": {"name": IDLE_RULE_NAME, "namespace": namespace,
                     "labels": {**MANAGED_BY, "gpu-platform.io/guardrail": "idle-gpu"}},
        "spec": {"groups": [{"name": IDLE_RULE_NAME, "interval": "1m", "rules": [
            {
                "alert": "GpuIdleWhileAllocated",
                "expr": held_idle,
                "for": f"{idle_minutes}m",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": "A GPU held by a pod has been idle",
                    "description": (
                        "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} is held by pod "
                        "{{ $labels.exported_namespace }}/{{ $labels.exported_pod }} but has run below "
                        f"{util_percent}% utilisation for {idle_minutes} minutes. Stop the pod or the notebook."),
                },
            },
            {
                "alert": "GpuNodeWithoutGpuPods",
                "expr": node_without_pods,
                "for": f"{idle_minutes}m",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": "A GPU node runs without any GPU pod",
                    "description": (
                        "Node {{ $labels.node }} (a GPU pool node) has had no pod requesting a GPU for "
                        f"{idle_minutes} minutes. Scale its pool down."),
                },
            },
        ]}]},
    }


def render_dcgm_service_monitor(namespace: str = MONITORING_NAMESPACE) -> dict[str, Any]:
    """Scrape of the DCGM exporter. Its pod/namespace labels (the pod holding the GPU) arrive as
    exported_pod/exported_namespace; the node name is added from service discovery."""
    return {
        "apiVersion": MONITORING_API,
        "kind": "ServiceMonitor",
        "metadata": {"name": "dcgm-exporter", "namespace": namespace, "labels": dict(MANAGED_BY)},
        "spec": {
            "selector": {"matchLabels": dict(DCGM_SERVICE_LABELS)},
            "namespaceSelector": {"matchNames": [GPU_NAMESPACE]},
            "endpoints": [{
                "port": "metrics",
                "interval": "15s",
                "honorLabels": False,
                "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                 "targetLabel": "node", "action": "replace"}],
            }],
        },
    }


# ---------------------------------------------------------------------------------------------
# Grafana dashboard
# ---------------------------------------------------------------------------------------------


def _panel(pid: int, title: str, expr: str, legend: str, unit: str, x: int, y: int, kind: str = "timeseries") -> dict:
    return {
        "id": pid, "type": kind, "title": title,
        "datasource": {"type": "prometheus", "uid": "prometheus"},
        "gridPos": {"h": 8, "w": 12, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": "A", "expr": expr, "legendFormat": legend}],
    }


def gpu_dashboard() -> dict[str, Any]:
    return {
        "uid": "gpu-platform-gpus",
        "title": "GPU platform: GPUs, idle time and spend",
        "tags": ["gpu-platform", "gpu"],
        "timezone": "utc",
        "schemaVersion": 39,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "panels": [
            _panel(1, "GPU utilisation", "DCGM_FI_DEV_GPU_UTIL", "{{Hostname}} gpu {{gpu}} {{exported_pod}}", "percent", 0, 0),
            _panel(2, "GPU memory used", "DCGM_FI_DEV_FB_USED * 1024 * 1024", "{{Hostname}} gpu {{gpu}}", "bytes", 12, 0),
            _panel(3, "GPUs held by pods", 'count(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}) or vector(0)', "held", "short", 0, 8),
            _panel(4, "GPU nodes per pool", f"count by ({POOL_METRIC_LABEL}) (kube_node_labels{{{POOL_METRIC_LABEL}!=\"\"}})",
                   f"{{{{{POOL_METRIC_LABEL}}}}}", "short", 12, 8),
            _panel(5, "GPU spend run rate (USD / month)", f"{SPEND_RECORD} * {HOURS_PER_MONTH}", "run rate", "currencyUSD", 0, 16),
            _panel(6, "GPU power draw", "DCGM_FI_DEV_POWER_USAGE", "{{Hostname}} gpu {{gpu}}", "watt", 12, 16),
        ],
    }


def render_dashboard_configmap(namespace: str = MONITORING_NAMESPACE) -> dict[str, Any]:
    """The dashboard as a ConfigMap Grafana's sidecar loads (label grafana_dashboard=1)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "gpu-dashboard", "namespace": namespace,
                     "labels": {**MANAGED_BY, "grafana_dashboard": "1"}},
        "data": {"gpu-platform-gpus.json": json.dumps(gpu_dashboard(), indent=1, sort_keys=True)},
    }


# ---------------------------------------------------------------------------------------------
# Alertmanager and chart values
# ---------------------------------------------------------------------------------------------


def alertmanager_config(emails: Sequence[str], smtp: Optional[AlertSmtp]) -> dict[str, Any]:
    """Routing by severity: critical and warning alerts mail every address of `alertEmails`
    (critical re-sent every 4 h while firing, warning once a day); Watchdog, InfoInhibitor, info and
    severity "none" go nowhere (the null receiver), as does everything when there is no address or no
    SMTP relay to send through (config warns about the latter: platform_warnings)."""
    if smtp is None:
        emails = []
    cfg: dict[str, Any] = {"global": {"resolve_timeout": "5m"}}
    receivers: list[dict[str, Any]] = [{"name": "null"}]
    routes: list[dict[str, Any]] = [
        {"receiver": "null", "matchers": ['alertname =~ "Watchdog|InfoInhibitor"']},
        {"receiver": "null", "matchers": ['severity =~ "none|info"']},
    ]
    if emails and smtp is not None:
        cfg["global"].update({"smtp_smarthost": smtp.smarthost, "smtp_from": smtp.from_address,
                              "smtp_require_tls": smtp.require_tls})
        if smtp.username:
            cfg["global"]["smtp_auth_username"] = smtp.username
        if smtp.password_secret:
            cfg["global"]["smtp_auth_password_file"] = f"/etc/alertmanager/secrets/{smtp.password_secret}/password"
        receivers.append({"name": "email",
                          "email_configs": [{"to": e, "send_resolved": True} for e in emails]})
        routes += [
            {"receiver": "email", "matchers": ['severity = "critical"'], "repeat_interval": "4h"},
            {"receiver": "email", "matchers": ['severity = "warning"'], "repeat_interval": "24h"},
        ]
    cfg["route"] = {
        "receiver": "null",  # anything without a known severity
        "group_by": ["alertname", "namespace"],
        "group_wait": "30s", "group_interval": "5m", "repeat_interval": "24h",
        "routes": routes,
    }
    cfg["receivers"] = receivers
    cfg["inhibit_rules"] = [
        {"source_matchers": ['severity = "critical"'], "target_matchers": ['severity =~ "warning|info"'],
         "equal": ["alertname", "namespace"]},
        # kube-prometheus-stack's InfoInhibitor silences info alerts while a warning/critical fires.
        {"source_matchers": ['alertname = "InfoInhibitor"'], "target_matchers": ['severity = "info"'],
         "equal": ["namespace"]},
    ]
    return cfg


# Control-plane components kube-prometheus-stack would scrape (and alert on when it cannot).
CONTROL_PLANE_COMPONENTS = ("kubeScheduler", "kubeControllerManager", "kubeEtcd", "kubeProxy")


def control_plane_scrapes(cloud: str) -> dict[str, bool]:
    """Which control-plane scrapes (and their *Down alerts/rules) are on. None is scrapeable here:
    - gcp: GKE runs scheduler, controller-manager and etcd out of reach; Dataplane V2 has no kube-proxy;
    - aws: EKS's control plane is AWS's; the kube-proxy add-on serves metrics on 127.0.0.1:10249 only;
    - linode: kubeadm binds scheduler (10259), controller-manager (10257), etcd metrics (2381) and
      kube-proxy metrics (10249) to 127.0.0.1 by default, and the cluster keeps those defaults;
    - kubernetes: a cluster the stack does not create; whether its control plane is reachable is not known, and a
      scrape that cannot reach it raises TargetDown for ever."""
    if cloud not in ("gcp", "aws", "linode", "kubernetes"):
        raise ValueError(f"unknown cloud {cloud!r}")
    return {component: False for component in CONTROL_PLANE_COMPONENTS}


def dns_scrape(cloud: str) -> bool:
    """Whether the chart's coreDns scrape (a Service on k8s-app=kube-dns pods, port 9153) has a target:
    EKS's CoreDNS add-on and kubeadm's CoreDNS serve metrics on 9153; GKE runs kube-dns (kubedns,
    dnsmasq, sidecar containers, no :9153) or Cloud DNS, so the scrape only ever raised TargetDown. An existing
    cluster (kubernetes) is assumed to run CoreDNS, as kubeadm, EKS and most distributions do."""
    if cloud not in ("gcp", "aws", "linode", "kubernetes"):
        raise ValueError(f"unknown cloud {cloud!r}")
    return cloud != "gcp"


# kube-prometheus-stack default alerts that fire for ever on this platform's clusters (issue 34 item 6;
# tests/test_alert_rules.py runs every installed rule against an idle healthy cluster of each stack):
# - KubeCPUOvercommit / KubeMemoryOvercommit (chart 88.5.3 rules-1.14/kubernetes-resources.yaml) want the
#   pods' requests to fit the cluster minus its largest node (room for a node failure). A managed control
#   plane has no control-plane node, so the rule takes the "HA" branch; aws-prod's two system nodes
#   (m6i.large) run about 3.4 CPU of platform pods, more than one node's 1.93: it fired from the first
#   `pulumi up` and never cleared. The pools scale (cluster autoscaler, Kueue quotas, preflight's fit
#   check size them), so the N-1 headroom the rule wants is not kept on purpose.
# - KubeCPUQuotaOvercommit / KubeMemoryQuotaOvercommit compare ResourceQuota hard limits with the nodes
#   running now; `training`'s quota is sized to what the queue can admit with the GPU pools at full size
#   (training.py), while they sit at zero when idle: over 1.5x for ever.
DISABLED_DEFAULT_ALERTS = ("KubeCPUOvercommit", "KubeMemoryOvercommit", "KubeCPUQuotaOvercommit",
                           "KubeMemoryQuotaOvercommit")


# kube-prometheus-stack 88.5.3's own node-exporter arguments (values.yaml, prometheus-node-exporter.extraArgs):
# setting extraArgs replaces them, so they are repeated with the textfile collector's folder
# (tests/test_linode_etcd_backup.py compares them with the pinned chart).
NODE_EXPORTER_CHART_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs|selinuxfs|squashfs|sysfs|tracefs|erofs)$",
)
# Where the chart mounts the node's root file system in node-exporter (hostRootFsMount, on by default).
NODE_EXPORTER_HOST_ROOT = "/host/root"


def node_exporter_values(textfile_dir: Optional[str]) -> dict[str, Any]:
    values: dict[str, Any] = {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}}
    if textfile_dir:
        values["extraArgs"] = [*NODE_EXPORTER_CHART_ARGS,
                               f"--collector.textfile.directory={NODE_EXPORTER_HOST_ROOT}{textfile_dir}"]
    return values


def kube_prometheus_stack_values(storage_class: str, emails: Sequence[str], smtp: Optional[AlertSmtp],
                                 retention_days: int = 15, storage_gib: int = 50,
                                 cloud: str = "linode", textfile_dir: Optional[str] = None) -> dict[str, Any]:
    am_spec: dict[str, Any] = {"resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}}
    if smtp is not None and smtp.password_secret:
        am_spec["secrets"] = [smtp.password_secret]
    return {
        "defaultRules": {"disabled": {name: True for name in DISABLED_DEFAULT_ALERTS}},
        # enabled: false drops the component's Service/ServiceMonitor and its default rules
        **{component: {"enabled": on} for component, on in control_plane_scrapes(cloud).items()},
        "coreDns": {"enabled": dns_scrape(cloud)},
        "alertmanager": {"config": alertmanager_config(emails, smtp),
                         "alertmanagerSpec": {**am_spec, "priorityClassName": PLATFORM_PRIORITY_CLASS}},
        # The platform's priority (common.PLATFORM_PRIORITY_CLASS) for the monitoring controllers on the
        # system nodes; not node-exporter (a DaemonSet on GPU nodes too: it must never preempt a job).
        "prometheusOperator": {"priorityClassName": PLATFORM_PRIORITY_CLASS},
        "grafana": {
            "priorityClassName": PLATFORM_PRIORITY_CLASS,
            # No existingSecret: the subchart generates the admin Secret in the cluster (GRAFANA_ADMIN_SECRET).
            "admin": {"existingSecret": "", "userKey": "admin-user", "passwordKey": "admin-password"},
            "sidecar": {"dashboards": {"enabled": True, "label": "grafana_dashboard", "labelValue": "1",
                                       "searchNamespace": "ALL"}},
            "service": {"type": "ClusterIP"},
        },
        "kube-state-metrics": {"metricLabelsAllowlist": [f"nodes=[{POOL_LABEL}]"],
                               "priorityClassName": PLATFORM_PRIORITY_CLASS},
        # on every node, GPU nodes included (queue.NODE_DAEMONS counts this request)
        "prometheus-node-exporter": node_exporter_values(textfile_dir),
        "prometheus": {"prometheusSpec": {
            # Pick up every ServiceMonitor/PrometheusRule in the cluster, not only this release's.
            "serviceMonitorSelectorNilUsesHelmValues": False,
            "podMonitorSelectorNilUsesHelmValues": False,
            "ruleSelectorNilUsesHelmValues": False,
            "retention": f"{retention_days}d",
            "priorityClassName": PLATFORM_PRIORITY_CLASS,
            "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}},
            "storageSpec": {"volumeClaimTemplate": {"spec": {
                "storageClassName": storage_class,
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": f"{storage_gib}Gi"}},
            }}},
        }},
    }


# ---------------------------------------------------------------------------------------------
# Component
# ---------------------------------------------------------------------------------------------


@dataclass
class MonitoringArgs:
    cluster: ClusterHandle
    alert_emails: Sequence[str]
    alert_smtp: Optional[AlertSmtp]
    monthly_budget_usd: float
    idle_gpu_minutes: int = 120
    idle_gpu_util_percent: int = 10
    retention_days: int = 15
    storage_gib: int = 50
    price_overrides: Optional[Mapping[str, Mapping[str, Any]]] = None
    # The stack's region: the spend rule prices each pool there, as the bill does.
    region: Optional[str] = None
    # What the release installs after (the platform's PriorityClass, which its pods name).
    after: Sequence[pulumi.Resource] = ()


class Monitoring(pulumi.ComponentResource):
    def __init__(self, name: str, args: MonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:platform:Monitoring", name, None, opts)
        cluster = args.cluster
        # No node prices (cloud kubernetes without usdPerHour): no spend rule; a run rate of $0 would be invented.
        unpriced = unpriced_pools(cluster)
        prices = None if unpriced else pool_hourly_prices(cluster.cloud, cluster.gpu_pools, args.price_overrides,
                                                          cluster.catalog, args.region) or None
        ns = apply_object(f"{name}-namespace", render_namespace(MONITORING_NAMESPACE, "privileged"),
                          k8s_opts(cluster, self))
        values = kube_prometheus_stack_values(cluster.default_storage_class, args.alert_emails, args.alert_smtp,
                                              args.retention_days, args.storage_gib, cluster.cloud,
                                              textfile_dir=cluster.node_textfile_dir)
        self.stack = helm_release(f"{name}-kube-prometheus-stack", RELEASE, versions.KUBE_PROMETHEUS_STACK,
                                  MONITORING_NAMESPACE, values, k8s_opts(cluster, self, [ns, *args.after]))
        after = k8s_opts(cluster, self, [self.stack])
        self.dcgm_scrape = apply_object(f"{name}-dcgm-service-monitor", render_dcgm_service_monitor(), after)
        self.idle_rules = apply_object(f"{name}-{IDLE_RULE_NAME}",
                                       render_idle_rules(args.idle_gpu_minutes, args.idle_gpu_util_percent), after)
        self.spend_rule = None if prices is None else apply_object(
            f"{name}-{SPEND_RULE_NAME}", render_spend_rule(prices, args.monthly_budget_usd), after)
        self.cluster_rules = [apply_object(f"{name}-{rule['metadata']['name']}",
                                           {**rule, "metadata": {**rule["metadata"], "namespace": MONITORING_NAMESPACE}},
                                           after) for rule in cluster.alert_rules]
        self.dashboard = apply_object(f"{name}-gpu-dashboard", render_dashboard_configmap(), k8s_opts(cluster, self, [ns]))
        self.register_outputs({"namespace": MONITORING_NAMESPACE, "gpuPricesUsdPerHour": prices,
                               "spendRule": SPEND_RULE_NAME if prices is not None else None})
