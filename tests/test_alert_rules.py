"""Every alerting and recording rule a stack installs, run by the real `promtool test rules` (issue 34
item 6): the kube-prometheus-stack chart's default rules as the pinned chart renders them with the
stack's values, and the platform's own (gpu-idle, gpu-spend-run-rate, the Linode token expiry).

The input series are shaped like the exporters' real metric names and labels: kube-state-metrics'
kube_node_* / kube_pod_* / kube_resourcequota (job kube-state-metrics, resource/unit labels as v2
exports them), dcgm-exporter's DCGM_FI_DEV_GPU_UTIL (gpu, UUID, Hostname, exported pod labels as the
ServiceMonitor relabels them), and `up` for every scrape job the rules name. The cluster they
describe is built from the stack itself: its system nodes at their minimum size, with the allocatable
the catalog and the cloud's reservations give them, running every pod the stack renders that lands
there (preflight's own pod model: effective requests, placement), its GPU pools at zero, and its
ResourceQuotas.

`an idle healthy cluster` must stay silent: every alert the stack installs is checked not to fire
(Watchdog excepted: it always fires, by design, to prove the pipeline). Before: KubeCPUOvercommit,
KubeMemoryOvercommit and the quota-overcommit alerts fired for ever on aws-prod, whose platform pods ask
more than one of its two system nodes has (the rules want room for a node failure, which a cluster
that scales its pools does not keep), and whose training quota is sized to the GPU pools at full size
while they sit at zero."""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterable

import pytest
import yaml

from gpu_platform.components.capacity import parse_quantity
from gpu_platform.components.cluster import POOL_LABEL
from gpu_platform.components.platform.monitoring import IDLE_RULE_NAME, POOL_METRIC_LABEL, SPEND_RULE_NAME
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.nodes import cluster_model
from gpu_platform.preflight.fit.pods import effective_requests, pod_templates
from gpu_platform.preflight.runner import load_stack
from tests.fit_support import need_charts, rendered, stack_plan

STACKS = ("aws-prod", "gcp-prod", "linode-dev")
ALWAYS_FIRING = {"Watchdog"}  # kube-prometheus-stack's dead man's switch
KSM = "kube-state-metrics"


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: apt-get install prometheus (Debian's package ships it; see .ci/run)")
    return path


def stack_rules(stack: str) -> list[dict]:
    """Every rule group of every PrometheusRule the stack installs."""
    groups = []
    for release in rendered(stack):
        for obj in release.objects:
            if obj.get("kind") == "PrometheusRule":
                groups.extend(copy.deepcopy(obj["spec"]["groups"]))
    return groups


def groups_for(groups: list[dict], names: set[str]) -> list[dict]:
    """The groups holding the rules named (alerts or records) and every group whose recording rules they read,
    transitively: what promtool needs to evaluate those rules and nothing else."""
    records = {r["record"]: g["name"] for g in groups for r in g["rules"] if "record" in r}
    wanted = {g["name"] for g in groups for r in g["rules"] if (r.get("alert") or r.get("record")) in names}
    while True:
        exprs = " ".join(r["expr"] for g in groups if g["name"] in wanted for r in g["rules"])
        more = {group for record, group in records.items()
                if re.search(rf"(?<![\w:]){re.escape(record)}(?![\w:])", exprs)}
        if more <= wanted:
            return [g for g in groups if g["name"] in wanted]
        wanted |= more


def alert_names(groups: Iterable[dict]) -> list[str]:
    return sorted({r["alert"] for g in groups for r in g["rules"] if "alert" in r})


def _series(name: str, labels: dict[str, Any], values: str) -> dict[str, str]:
    body = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{body}}}", "values": values}


def scrape_jobs(groups: Iterable[dict]) -> set[str]:
    """The scrape jobs the rules name (job="..."): what the chart's ServiceMonitors produce."""
    jobs = set()
    for g in groups:
        for r in g["rules"]:
            jobs.update(re.findall(r'job="([^"=~]+)"', r["expr"]))
    return jobs


def idle_cluster(stack: str, steps: int) -> list[dict[str, str]]:
    """Series of `stack` idle and healthy for `steps` minutes: its system nodes at their minimum size, the
    pods the stack renders placed on them, GPU pools at zero, every scrape target up."""
    cfg = parse_config(load_stack(stack).raw, stack)
    model = cluster_model(cfg, stack_plan(stack))
    releases = [r for r in rendered(stack) if r.rendered and r.source != "example"]
    flat = f"1x{steps}"
    out: list[dict[str, str]] = []
    nodes = []
    for g in model.node_groups:
        count = g.min_nodes if g.role != "control-plane" else max(g.min_nodes, 1)
        for i in range(count):
            name = f"{g.key.replace('/', '-')}-{i}"
            nodes.append((name, g))
            base = {"job": KSM, "node": name}
            a = g.allocatable
            out.append(_series("kube_node_info", {**base, "kubelet_version": "v1.35.0"}, flat))
            out.append(_series("kube_node_status_allocatable", {**base, "resource": "cpu", "unit": "core"},
                               f"{a.cpu_millis / 1000}x{steps}"))
            out.append(_series("kube_node_status_allocatable", {**base, "resource": "memory", "unit": "byte"},
                               f"{a.memory_bytes}x{steps}"))
            out.append(_series("kube_node_status_allocatable", {**base, "resource": "pods", "unit": "integer"},
                               f"{a.pods}x{steps}"))
            for cond, healthy in (("Ready", "true"), ("MemoryPressure", "false"), ("DiskPressure", "false"),
                                  ("PIDPressure", "false")):
                for status in ("true", "false", "unknown"):
                    out.append(_series("kube_node_status_condition", {**base, "condition": cond, "status": status},
                                       f"{1 if status == healthy else 0}x{steps}"))
            labels = {**base}
            pool = g.labels.get(POOL_LABEL)
            if pool:
                labels[POOL_METRIC_LABEL] = pool
            out.append(_series("kube_node_labels", labels, flat))
            out.append(_series("kube_node_spec_unschedulable", base, f"0x{steps}"))
    # Pods: where preflight places them (system groups), each with its effective requests.
    report = check_fit(model, releases)
    by_group: dict[str, list[str]] = {}
    for name, g in nodes:
        by_group.setdefault(g.key, []).append(name)
    templates = {pt.owner: pt for pt in pod_templates(releases)[0]}
    seen: dict[str, int] = {}
    for p in report.placements:
        pt = templates.get(p.object)
        hosts = by_group.get(p.group_key) or []
        if pt is None or not hosts or pt.job or pt.hook:
            continue
        req = effective_requests(pt.spec)
        kind, _, rest = p.object.partition("/")
        ns = pt.namespace or "default"
        n_pods = len(hosts) if pt.daemonset else p.pods
        for i in range(n_pods):
            seen[p.object] = seen.get(p.object, 0) + 1
            pod = f"{rest.split('/')[-1]}-{seen[p.object]}"
            node = hosts[i % len(hosts)]
            pl = {"job": KSM, "namespace": ns, "pod": pod}
            out.append(_series("kube_pod_info", {**pl, "node": node, "created_by_kind": kind}, flat))
            out.append(_series("kube_pod_status_phase", {**pl, "phase": "Running"}, flat))
            out.append(_series("kube_pod_status_phase", {**pl, "phase": "Pending"}, f"0x{steps}"))
            out.append(_series("kube_pod_status_ready", {**pl, "condition": "true"}, flat))
            out.append(_series("kube_pod_container_status_restarts_total", {**pl, "container": "main"}, f"0x{steps}"))
            for res, unit, scale in (("cpu", "core", 1000), ("memory", "byte", 1)):
                if req.get(res):
                    out.append(_series("kube_pod_container_resource_requests",
                                       {**pl, "node": node, "container": "main", "resource": res, "unit": unit},
                                       f"{req[res] / scale}x{steps}"))
    # ResourceQuotas, nothing used (an idle cluster).
    for r in releases:
        for obj in r.objects:
            if obj.get("kind") != "ResourceQuota":
                continue
            for res, hard in ((obj.get("spec") or {}).get("hard") or {}).items():
                value = float(parse_quantity(str(hard)))  # kube-state-metrics exports base units (cores, bytes)
                q = {"job": KSM, "namespace": obj["metadata"]["namespace"], "resourcequota": obj["metadata"]["name"],
                     "resource": res}
                out.append(_series("kube_resourcequota", {**q, "type": "hard"}, f"{value}x{steps}"))
                out.append(_series("kube_resourcequota", {**q, "type": "used"}, f"0x{steps}"))
    for job in sorted(scrape_jobs(stack_rules(stack))):
        out.append(_series("up", {"job": job, "instance": f"{job}:443", "namespace": "monitoring"}, flat))
    for path in ("/metrics", "/metrics/cadvisor", "/metrics/probes"):
        for name, _ in nodes:
            out.append(_series("up", {"job": "kubelet", "metrics_path": path, "node": name, "instance": name,
                                      "namespace": "kube-system"}, flat))
    return out


def run_promtool(tmp_path: Path, groups: list[dict], tests: list[dict]) -> subprocess.CompletedProcess:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    check = subprocess.run([promtool(), "check", "rules", str(rules)], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    spec = tmp_path / "test.yaml"
    spec.write_text(yaml.safe_dump({"rule_files": [rules.name], "evaluation_interval": "1m", "tests": tests},
                                   sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", str(spec)], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)


@pytest.mark.parametrize("stack", STACKS)
def test_an_idle_healthy_cluster_raises_no_alert(stack, tmp_path):
    need_charts()
    groups = stack_rules(stack)
    names = alert_names(groups)
    assert {"GpuIdleWhileAllocated", "GpuNodeWithoutGpuPods", "GpuSpendRunRateOver100Percent", "KubePodCrashLooping",
            "Watchdog"} <= set(names), names
    steps = 180
    proc = run_promtool(tmp_path, groups, [{
        "interval": "1m",
        "input_series": idle_cluster(stack, steps),
        "alert_rule_test": [{"eval_time": f"{steps - 1}m", "alertname": a, "exp_alerts": []}
                            for a in names if a not in ALWAYS_FIRING],
    }])
    assert proc.returncode == 0, _firing(proc.stdout + proc.stderr)


def test_the_groups_for_some_rules_bring_the_recording_rules_they_read():
    groups = [{"name": "a", "rules": [{"alert": "Spend", "expr": "team:spend > 2"}]},
              {"name": "b", "rules": [{"record": "team:spend", "expr": "sum(team:spend_by_pool)"}]},
              {"name": "c", "rules": [{"record": "team:spend_by_pool", "expr": "count(up)"},
                                      {"record": "team:spend_by_pool:rate", "expr": "rate(up[5m])"}]},
              {"name": "d", "rules": [{"alert": "Other", "expr": "team:spend_by_pool:rate > 1"}]}]
    assert [g["name"] for g in groups_for(groups, {"Spend"})] == ["a", "b", "c"]
    assert [g["name"] for g in groups_for(groups, {"team:spend"})] == ["b", "c"]
    assert groups_for(groups, {"Nothing"}) == []


def _firing(text: str) -> str:
    """promtool's failures, one line per alert that fired, for the assertion message."""
    lines = [l for l in text.splitlines() if "alertname:" in l or "FAILED" in l]
    return "\n".join(lines[:60]) or text[-4000:]


def _gpu_node(name: str, pool: str, steps: int) -> list[dict[str, str]]:
    base = {"job": KSM, "node": name}
    return [_series("kube_node_info", {**base, "kubelet_version": "v1.35.0"}, f"1x{steps}"),
            _series("kube_node_labels", {**base, POOL_METRIC_LABEL: pool}, f"1x{steps}"),
            _series("kube_node_status_allocatable", {**base, "resource": "nvidia_com_gpu", "unit": "integer"},
                    f"1x{steps}")]


def test_the_platform_gpu_alerts_fire_on_the_exporters_series(tmp_path):
    """Two a10g nodes on aws-prod: a training pod holds node A's GPU at 3 % for longer than the idle window,
    node B runs no GPU pod. dcgm-exporter 4.5.3-4.8.2 labels its series gpu, UUID, pci_bus_id, device,
    modelName, Hostname (internal/pkg/rendermetrics/render_metrics.go) plus the pod holding the GPU as
    pod/namespace/container (internal/pkg/transformation/const.go), which the scrape (honorLabels false)
    turns into exported_*; the platform's ServiceMonitor adds `node`. kube-state-metrics names the GPU
    request resource="nvidia_com_gpu". Idle GPU and empty node alerts fire with those labels; the spend
    record counts both nodes at the catalog's a10g price."""
    need_charts()
    from gpu_platform.components.platform.monitoring import pool_hourly_prices

    stack, steps = "aws-prod", 200
    cfg = parse_config(load_stack(stack).raw, stack)
    idle_minutes = cfg.platform.idle_gpu_minutes
    assert idle_minutes + 10 < steps
    # Only the rules asserted below (and the records they read): all of aws-prod's 220 rules over 200 steps cost
    # promtool four CPU-seconds, and the idle test above already evaluates every rule.
    groups = groups_for(stack_rules(stack), {"GpuIdleWhileAllocated", "GpuNodeWithoutGpuPods",
                                             "gpu_platform:gpu_spend_usd_per_hour"})
    assert {g["name"] for g in groups} == {"gpu-idle", "gpu-spend-run-rate"}, [g["name"] for g in groups]
    series = idle_cluster(stack, steps) + _gpu_node("ip-10-0-1-5", "a10g", steps) + _gpu_node("ip-10-0-2-7", "a10g", steps)
    pod = {"job": KSM, "namespace": "training", "pod": "resnet-node-0-0-x7k2p"}
    series += [_series("kube_pod_status_phase", {**pod, "phase": "Running"}, f"1x{steps}"),
               _series("kube_pod_container_resource_requests",
                       {**pod, "node": "ip-10-0-1-5", "container": "node", "resource": "nvidia_com_gpu", "unit": "integer"},
                       f"1x{steps}")]
    dcgm = {"gpu": "0", "UUID": "GPU-5b4c2f0e-8d1a-4e2b-9c3d-7f6e5a4b3c2d", "pci_bus_id": "00000000:00:1E.0",
            "device": "nvidia0", "modelName": "NVIDIA A10G", "Hostname": "ip-10-0-1-5",
            "DCGM_FI_DRIVER_VERSION": "580.95.05", "exported_pod": pod["pod"], "exported_namespace": "training",
            "exported_container": "node", "namespace": "gpu-system", "pod": "dcgm-exporter-4xk9z",
            "container": "exporter", "service": "dcgm-exporter", "endpoint": "metrics", "instance": "10.0.1.5:9400",
            "job": "dcgm-exporter", "node": "ip-10-0-1-5"}
    series.append(_series("DCGM_FI_DEV_GPU_UTIL", dcgm, f"3x{steps}"))
    price = pool_hourly_prices("aws", [p for p in model_pools(stack) if p.name == "a10g"])["a10g"]
    proc = run_promtool(tmp_path, groups, [{
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": f"{idle_minutes - 5}m", "alertname": "GpuIdleWhileAllocated", "exp_alerts": []},
            {"eval_time": f"{idle_minutes + 5}m", "alertname": "GpuIdleWhileAllocated",
             "exp_alerts": [{"exp_labels": {**dcgm, "severity": "warning"}, "exp_annotations": {
                 "summary": "A GPU held by a pod has been idle",
                 "description": (f"GPU 0 on ip-10-0-1-5 is held by pod training/{pod['pod']} but has run below "
                                 f"{cfg.platform.idle_gpu_util_percent}% utilisation for {idle_minutes} minutes. "
                                 "Stop the pod or the notebook.")}}]},
            {"eval_time": f"{idle_minutes + 5}m", "alertname": "GpuNodeWithoutGpuPods",
             "exp_alerts": [{"exp_labels": {"node": "ip-10-0-2-7", "severity": "warning"}, "exp_annotations": {
                 "summary": "A GPU node runs without any GPU pod",
                 "description": (f"Node ip-10-0-2-7 (a GPU pool node) has had no pod requesting a GPU for "
                                 f"{idle_minutes} minutes. Scale its pool down.")}}]},
        ],
        "promql_expr_test": [{"expr": "gpu_platform:gpu_spend_usd_per_hour", "eval_time": f"{steps - 1}m",
                              "exp_samples": [{"labels": "gpu_platform:gpu_spend_usd_per_hour", "value": 2 * price}]}],
    }])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def model_pools(stack: str):
    """The stack's GPU pools as the cluster handle carries them."""
    from gpu_platform.components.cluster import gpu_pool_specs

    return gpu_pool_specs(parse_config(load_stack(stack).raw, stack))
