"""Pure rendering of the ML platform: queue, GPU enablement, notebooks, monitoring and cost rules."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from gpu_platform.components.cluster import GPU_TAINT, POOL_LABEL, GpuPoolSpec, Taint
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.data import platform_versions as versions
from gpu_platform.config.platform import AlertSmtp
from gpu_platform.components.platform.gpu import dcgm_exporter_values, device_plugin_values
from gpu_platform.components.platform.kubeflow import trainer_values
from gpu_platform.components.platform.monitoring import (
    SPEND_RECORD, SPEND_RULE_NAME, alertmanager_config, kube_prometheus_stack_values, pool_hourly_prices,
    render_dashboard_configmap, render_idle_rules, render_spend_rule,
)
from gpu_platform.components.platform.notebooks import gpu_profile, jupyterhub_values
from gpu_platform.components.platform.queue import (
    CLUSTER_QUEUE, PoolCapacity, gpu_quotas, kueue_manager_config, pool_capacities, render_cluster_queue,
    render_local_queue, render_resource_flavor,
)
from gpu_platform.components.platform.training import render_checkpoint_configmap, render_resource_quota
from gpu_platform.components.capacity import GI, MI, allocatable
from gpu_platform.components.platform.queue import NODE_DAEMONS, QUEUE_NAMESPACE_LABEL


def pool(name: str, gpus: int = 1, max_nodes: int = 2, instance: str = "g1-gpu-rtx6000-1",
         capacity: str = "on-demand") -> GpuPoolSpec:
    return GpuPoolSpec(name=name, instance_type=instance, gpu_model="Quadro RTX 6000", gpus_per_node=gpus,
                       min_nodes=0, max_nodes=max_nodes, capacity=capacity,
                       node_labels={POOL_LABEL: name, "nvidia.com/gpu.present": "true"})


TWO = [pool("rtx", gpus=1, max_nodes=3), pool("rtx4", gpus=4, max_nodes=2, instance="g1-gpu-rtx6000-4")]
SMTP = AlertSmtp(smarthost="smtp.example.com:587", from_address="alerts@example.com")


def flavor_quota(cq: dict, flavor: str, resource: str):
    (group,) = cq["spec"]["resourceGroups"]
    fl = next(f for f in group["flavors"] if f["name"] == flavor)
    return next(r["nominalQuota"] for r in fl["resources"] if r["name"] == resource)


# --- queue -------------------------------------------------------------------------------------


def test_two_pools_get_two_flavors_and_the_gpu_quota_of_both() -> None:
    flavors = [render_resource_flavor(p) for p in TWO]
    assert [f["metadata"]["name"] for f in flavors] == ["rtx", "rtx4"]
    cq = render_cluster_queue(TWO, pool_capacities("linode", TWO), gpu_quotas(TWO))
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == ["rtx", "rtx4"]
    assert flavor_quota(cq, "rtx", "nvidia.com/gpu") == "3"  # 3 nodes x 1 GPU
    assert flavor_quota(cq, "rtx4", "nvidia.com/gpu") == "8"  # 2 nodes x 4 GPUs
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {QUEUE_NAMESPACE_LABEL: "enabled"}}


def test_cpu_and_memory_quotas_come_from_allocatable_not_nominal_size() -> None:
    """Before: 8 vCPU x 3 nodes = 24 CPUs and 96Gi, more than the kubelet lets pods have."""
    cq = render_cluster_queue(TWO, pool_capacities("linode", TWO), gpu_quotas(TWO))
    alloc = allocatable("linode", "g1-gpu-rtx6000-1")  # 8 vCPU / 32 GiB nominal
    per_node_cpu = (alloc.cpu_millis - NODE_DAEMONS["cpu_millis"]) * 95 // 100
    assert flavor_quota(cq, "rtx", "cpu") == f"{per_node_cpu * 3}m"
    per_node_mem = (alloc.memory_bytes - NODE_DAEMONS["memory_bytes"]) * 95 // 100 // MI
    assert flavor_quota(cq, "rtx", "memory") == f"{per_node_mem * 3}Mi"
    assert per_node_cpu * 3 < alloc.cpu_millis * 3 < 24_000
    assert per_node_mem * MI * 3 < alloc.memory_bytes * 3 < 96 * GI


def test_a_mixed_instance_pool_is_sized_by_its_smallest_type() -> None:
    (a10g,) = [pool("a10g", gpus=1, max_nodes=8, instance="g5.xlarge")]
    big_first = pool_capacities("aws", [a10g], {"a10g": ["g5.2xlarge", "g5.xlarge"]})["a10g"]
    alone = pool_capacities("aws", [a10g])["a10g"]
    assert big_first == alone  # g5.xlarge (4 vCPU) decides, not g5.2xlarge (8 vCPU)
    assert alone.cpu_millis < allocatable("aws", "g5.xlarge").cpu_millis


def test_flavor_targets_the_pool_nodes_and_tolerates_their_taint() -> None:
    tainted = GpuPoolSpec("a100", "x", "A100", 1, 0, 1, "spot", {POOL_LABEL: "a100"},
                          taints=(GPU_TAINT, Taint("cloud.google.com/gke-spot", "true", "NoSchedule")))
    spec = render_resource_flavor(tainted)["spec"]
    assert spec["nodeLabels"] == {POOL_LABEL: "a100"}
    assert spec["nodeTaints"] == [GPU_TAINT.as_k8s(), {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}]
    assert GPU_TAINT.toleration() in spec["tolerations"] and len(spec["tolerations"]) == 2


def test_gpu_quota_override_and_unknown_pool() -> None:
    assert gpu_quotas(TWO, {"rtx4": 4}) == {"rtx": 3, "rtx4": 4}
    with pytest.raises(ValueError, match="unknown pools: nope"):
        gpu_quotas(TWO, {"nope": 1})


@pytest.mark.parametrize("strategy", ["StrictFIFO", "BestEffortFIFO"])
def test_queueing_strategy_is_configurable(strategy: str) -> None:
    caps = {p.name: PoolCapacity(8000, 32 * GI, p.gpus_per_node) for p in TWO}
    assert render_cluster_queue(TWO, caps, gpu_quotas(TWO), strategy)["spec"]["queueingStrategy"] == strategy
    with pytest.raises(ValueError):
        render_cluster_queue(TWO, caps, gpu_quotas(TWO), "FIFO")


def test_preemption_suits_interruptible_capacity() -> None:
    spec = render_cluster_queue(TWO, pool_capacities("linode", TWO), gpu_quotas(TWO))["spec"]
    assert spec["preemption"]["withinClusterQueue"] == "LowerPriority"
    assert spec["flavorFungibility"]["whenCanPreempt"] == "TryNextFlavor"


def test_kueue_requeues_evicted_jobs_and_manages_jobs_and_trainjobs() -> None:
    conf = kueue_manager_config(7, boot_minutes=8.0)
    wfpr = conf["waitForPodsReady"]
    assert wfpr["timeout"] == "15m"  # the node's boot, then podsReadyTimeoutMinutes (tests/test_retries.py)
    assert wfpr["requeuingStrategy"]["timestamp"] == "Eviction"
    assert wfpr["requeuingStrategy"]["backoffLimitCount"] == 3  # null would requeue without limit
    assert {"batch/job", "trainer.kubeflow.org/trainjob"} <= set(conf["integrations"]["frameworks"])
    assert render_local_queue()["spec"]["clusterQueue"] == CLUSTER_QUEUE


# --- GPU enablement ----------------------------------------------------------------------------


@pytest.mark.parametrize("values_fn", [device_plugin_values, dcgm_exporter_values])
def test_gpu_daemons_run_only_on_gpu_pools_and_tolerate_the_gpu_taint(values_fn) -> None:
    values = values_fn(TWO)
    terms = values["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": POOL_LABEL, "operator": "In", "values": [n]}]} for n in ("rtx", "rtx4")]
    assert values["tolerations"] == [GPU_TAINT.toleration()]


# --- notebooks ---------------------------------------------------------------------------------


def test_notebook_gpu_profile_tolerates_the_taint_and_requests_a_gpu() -> None:
    over = gpu_profile(TWO[1])["kubespawner_override"]
    assert GPU_TAINT.toleration() in over["tolerations"]
    assert over["extra_resource_limits"] == {"nvidia.com/gpu": "1"}
    assert over["node_selector"] == {POOL_LABEL: "rtx4"}


def test_jupyterhub_values_storage_profiles_and_culling() -> None:
    v = jupyterhub_values(TWO, "standard-rwo", storage_gib=50, idle_cull_minutes=45, admin_users=["alice"])
    storage = v["singleuser"]["storage"]
    assert storage["dynamic"]["storageClass"] == "standard-rwo" and storage["capacity"] == "50Gi"
    slugs = [p["slug"] for p in v["singleuser"]["profileList"]]
    assert slugs == ["cpu", "gpu-rtx", "gpu-rtx4"]
    cpu = v["singleuser"]["profileList"][0]["kubespawner_override"]
    assert "tolerations" not in cpu and "extra_resource_limits" not in cpu
    assert v["cull"]["enabled"] is True and v["cull"]["timeout"] == 45 * 60
    assert v["proxy"]["service"]["type"] == "ClusterIP"
    assert v["hub"]["config"]["NativeAuthenticator"]["open_signup"] is False


# --- monitoring and cost -----------------------------------------------------------------------


def test_spend_rule_prices_pools_from_the_catalog_and_alerts_at_half_and_full_budget() -> None:
    prices = pool_hourly_prices("linode", TWO)
    from gpu_platform.costs.catalog import load_catalog

    cat = load_catalog()
    assert prices == {"rtx": cat.instance("linode", "g1-gpu-rtx6000-1").price("on-demand").usd_per_hour,
                      "rtx4": cat.instance("linode", "g1-gpu-rtx6000-4").price("on-demand").usd_per_hour}
    rule = render_spend_rule(prices, 3000)
    assert rule["metadata"]["name"] == SPEND_RULE_NAME == "gpu-spend-run-rate"
    rules = rule["spec"]["groups"][0]["rules"]
    record = next(r for r in rules if r.get("record") == SPEND_RECORD)
    for name, price in prices.items():
        assert f'label_gpu_platform_io_pool="{name}"}}) or vector(0)) * {price:g}' in record["expr"]
    alerts = {r["alert"]: r for r in rules if "alert" in r}
    assert alerts["GpuSpendRunRateOver50Percent"]["expr"] == f"{SPEND_RECORD} * 730 > 1500"
    assert alerts["GpuSpendRunRateOver100Percent"]["expr"] == f"{SPEND_RECORD} * 730 > 3000"


def test_spend_rule_follows_price_overrides() -> None:
    prices = pool_hourly_prices("linode", TWO[:1], {"linode/g1-gpu-rtx6000-1": {"onDemand": 0.75}})
    assert prices == {"rtx": 0.75}


def test_idle_rules_use_the_configured_threshold_and_duration() -> None:
    rules = {r["alert"]: r for r in render_idle_rules(90, 15)["spec"]["groups"][0]["rules"]}
    held = rules["GpuIdleWhileAllocated"]
    assert held["expr"] == 'DCGM_FI_DEV_GPU_UTIL{exported_pod!=""} < 15' and held["for"] == "90m"
    empty = rules["GpuNodeWithoutGpuPods"]
    assert empty["for"] == "90m" and "nvidia_com_gpu" in empty["expr"] and "label_gpu_platform_io_pool" in empty["expr"]


def test_alertmanager_mails_every_alert_email() -> None:
    conf = alertmanager_config(["a@example.com", "b@example.com"], SMTP)
    email = next(r for r in conf["receivers"] if r["name"] == "email")
    assert [c["to"] for c in email["email_configs"]] == ["a@example.com", "b@example.com"]
    assert conf["global"]["smtp_smarthost"] == "smtp.example.com:587"
    # No relay: nothing can be mailed, so everything goes to the null receiver (config warns).
    no_relay = alertmanager_config(["a@example.com"], None)
    assert [r["name"] for r in no_relay["receivers"]] == ["null"] and "smtp_smarthost" not in no_relay["global"]


def amtool_route(conf: dict, labels: str, tmp_path) -> str:
    """The receiver Alertmanager's own routing tree picks (amtool, Debian prometheus-alertmanager)."""
    amtool = shutil.which("amtool")
    if amtool is None:
        pytest.fail("amtool not found: apt-get install prometheus-alertmanager (see .ci/run)")
    path = tmp_path / "alertmanager.yaml"
    path.write_text(yaml.safe_dump(conf))
    check = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    out = subprocess.run([amtool, "config", "routes", "test", f"--config.file={path}", *labels.split()],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("labels,receiver", [
    ("alertname=Watchdog severity=none", "null"),
    ("alertname=InfoInhibitor severity=none", "null"),
    ("alertname=CPUThrottlingHigh severity=info", "null"),
    ("alertname=Something", "null"),
    ("alertname=GpuSpendRunRateOver100Percent severity=critical", "email"),
    ("alertname=GpuIdleWhileAllocated severity=warning", "email"),
])
def test_alerts_are_routed_by_severity(labels: str, receiver: str, tmp_path) -> None:
    """Before: every alert (Watchdog and info included) went to e-mail."""
    assert amtool_route(alertmanager_config(["a@example.com"], SMTP), labels, tmp_path) == receiver
    assert amtool_route(alertmanager_config([], None), labels, tmp_path) == "null"


def test_critical_repeats_more_often_than_warning() -> None:
    routes = {r["matchers"][0]: r for r in alertmanager_config(["a@example.com"], SMTP)["route"]["routes"]}
    assert routes['severity = "critical"']["repeat_interval"] == "4h"
    assert routes['severity = "warning"']["repeat_interval"] == "24h"


def test_prometheus_picks_up_our_rules_and_exports_the_pool_label() -> None:
    v = kube_prometheus_stack_values("standard-rwo", [], None, retention_days=30, storage_gib=80)
    spec = v["prometheus"]["prometheusSpec"]
    assert spec["ruleSelectorNilUsesHelmValues"] is False and spec["serviceMonitorSelectorNilUsesHelmValues"] is False
    assert spec["retention"] == "30d"
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"] == "80Gi"
    assert v["kube-state-metrics"]["metricLabelsAllowlist"] == [f"nodes=[{POOL_LABEL}]"]
    assert "adminPassword" not in v["grafana"]  # from a Secret, never in values


def test_grafana_dashboard_is_labelled_for_the_sidecar() -> None:
    cm = render_dashboard_configmap()
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    import json

    dash = json.loads(next(iter(cm["data"].values())))
    assert any("DCGM_FI_DEV_GPU_UTIL" in t["expr"] for p in dash["panels"] for t in p["targets"])


# --- training namespace, Trainer, versions, config ---------------------------------------------


def test_training_quota_and_checkpoint_config() -> None:
    q = render_resource_quota(11, 40_500, 160 * GI + 512 * MI)["spec"]["hard"]
    assert q["requests.nvidia.com/gpu"] == "11" and q["requests.memory"] == "164352Mi"
    assert q["requests.cpu"] == "40500m"
    cm = render_checkpoint_configmap("s3://b", {"AWS_REGION": "us-east"})
    assert cm["data"] == {"CHECKPOINT_URL": "s3://b", "AWS_REGION": "us-east"}


def test_trainer_installs_its_default_runtimes() -> None:
    assert trainer_values()["runtimes"]["defaultEnabled"] is True


def test_versions_are_pinned_exactly() -> None:
    semver = re.compile(r"^v?\d+\.\d+\.\d+$")
    for name, chart in versions.ALL_CHARTS.items():
        assert semver.match(chart.version), name
    assert versions.KUEUE.version == "0.19.2" and versions.KUBEFLOW_TRAINER.version == "2.3.0"
    for name, url in versions.KUSTOMIZE_SOURCES.items():
        assert re.search(r"\?ref=v?\d+\.\d+\.\d+$", url), name
    for image, tag in (versions.NOTEBOOK_CPU_IMAGE, versions.NOTEBOOK_GPU_IMAGE):
        assert tag and tag != "latest"


def _raw(**platform) -> dict:
    # A minor the pinned Cilium is tested on (kubernetes-versions.yaml cni:); the default (newest) may not be.
    return {"cloud": "linode", "kubernetesVersion": "1.35", "owner": "ml", "costCenter": "r", "monthlyBudgetUsd": 1000,
            "alertEmails": ["ops@example.com"], "linode": {"region": "us-ord", "apiTokenExpires": "2027-11-20"},
            "gpuPools": [{"name": "rtx", "instanceType": "g2-gpu-rtx4000a1-m", "capacity": "on-demand",
                          "minNodes": 1, "maxNodes": 1}],
            "platform": {"alertSmtp": {"smarthost": "smtp.example.com:587", "from": "a@example.com"}, **platform}}


def test_platform_knobs_parse_from_camel_case() -> None:
    cfg = parse_config(_raw(queueingStrategy="StrictFIFO", gpuQuota={"rtx": 0}, idleGpuUtilPercent=5,
                            notebookIdleCullMinutes=30, notebookStorageGib=100), "t")
    p = cfg.platform
    assert (p.queueing_strategy, p.gpu_quota, p.idle_gpu_util_percent) == ("StrictFIFO", {"rtx": 0}, 5)
    assert (p.notebook_idle_cull_minutes, p.notebook_storage_gib) == (30, 100)


def test_platform_config_errors_name_the_key() -> None:
    with pytest.raises(ConfigError, match=r"platform\.gpuQuota\.nope"):
        parse_config(_raw(gpuQuota={"nope": 2}), "t")
    with pytest.raises(ConfigError, match=r"platform\.queueingStrategy"):
        parse_config(_raw(queueingStrategy="LIFO"), "t")



def test_alert_emails_without_smtp_plan_with_a_warning_naming_the_key() -> None:
    """Budget and billing alerts go through the cloud's own channels, so alertEmails alone is not a
    config error; what needs SMTP (Alertmanager's mail) is named in a warning instead."""
    from gpu_platform.config.stack import config_warnings

    raw = _raw()
    del raw["platform"]["alertSmtp"]
    cfg = parse_config(raw, "t")
    warnings = [w for w in config_warnings(cfg) if "platform.alertSmtp" in w]
    assert len(warnings) == 1 and "run-rate" in warnings[0] and "no billing-alert API" in warnings[0]
    assert not [w for w in config_warnings(parse_config(_raw(), "t")) if "alertSmtp" in w]  # relay set
    raw["platform"]["monitoring"] = False
    assert not [w for w in config_warnings(parse_config(raw, "t")) if "alertSmtp" in w]


# --- training LimitRange, applied as the API server applies it -------------------------------------


def admit_container(limit_range: dict, resources: dict) -> tuple[bool, dict]:
    """The API server's handling of one container against a Container LimitRange item: defaulting
    of the item (k8s.io/kubernetes pkg/apis/core/v1/defaults.go SetDefaults_LimitRangeItem: a
    missing `default` limit comes from `max`, a missing `defaultRequest` from `default`), the
    LimitRanger admission plugin (missing requests/limits filled from defaultRequest/default, then
    limit <= max), and pod validation (request <= limit)."""
    from gpu_platform.components.capacity import parse_quantity

    (item,) = limit_range["spec"]["limits"]
    default = {**item.get("max", {}), **item.get("default", {})}
    default_request = {**default, **item.get("defaultRequest", {})}
    requests = dict(resources.get("requests", {}))
    limits = dict(resources.get("limits", {}))
    for k, v in default_request.items():
        requests.setdefault(k, limits.get(k, v))
    for k, v in default.items():
        limits.setdefault(k, v)
    ok = all(parse_quantity(requests[k]) <= parse_quantity(limits[k]) for k in requests if k in limits)
    ok = ok and all(parse_quantity(limits[k]) <= parse_quantity(v) for k, v in item.get("max", {}).items())
    return ok, {"requests": requests, "limits": limits}


def test_multi_gpu_pod_setting_only_requests_is_admitted() -> None:
    """Before: default limits 4 CPU / 16Gi made a 16-CPU request invalid (request > limit)."""
    from gpu_platform.components.platform.training import render_limit_range

    caps = pool_capacities("linode", TWO)
    lr = render_limit_range(max(c.cpu_millis for c in caps.values()), max(c.memory_bytes for c in caps.values()))
    ok, applied = admit_container(lr, {"requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}})
    assert ok, applied
    assert "nvidia.com/gpu" not in applied["limits"] or applied["limits"]["nvidia.com/gpu"] == "4"
    # a container stating nothing gets the modest request and no GPU
    ok, applied = admit_container(lr, {})
    assert ok and applied["requests"] == {"cpu": "500m", "memory": "1Gi"}
    # a container no node can hold is refused (Kueue checks the LimitRange before admitting)
    ok, _ = admit_container(lr, {"requests": {"cpu": "64", "memory": "64Gi"}})
    assert not ok
    # the old LimitRange refused the multi-GPU pod
    old = {"spec": {"limits": [{"type": "Container", "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
                                "default": {"cpu": "4", "memory": "16Gi"}}]}}
    assert not admit_container(old, {"requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "4"}})[0]
