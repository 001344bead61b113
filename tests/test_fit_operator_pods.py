"""Pods the Prometheus operator makes (gpu_platform.preflight.fit.pods.operator_pods): the Prometheus and
Alertmanager StatefulSets of kube-prometheus-stack, which no manifest shows, take a node's room like any
other pod. Without them cluster fit reported linode-dev's system node with over 1 GiB of memory left
where the rehearsal's real operator and scheduler left about 180 MiB, and the CPU notebook stayed Pending."""

from __future__ import annotations

import re

from gpu_platform.components.capacity import MI, parse_quantity
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.nodes import cluster_model
from gpu_platform.preflight.fit.pods import effective_requests, pod_templates
from gpu_platform.preflight.fit.render import render_plan
from gpu_platform.preflight.runner import load_stack, run_program, stack_input_from_mapping
from tests.conftest import stack_config
from tests.fit_support import CHART_DIRS, need_charts, rendered, rendered_copy
from tests.test_fit_checks import rel

PROM = "StatefulSet/monitoring/prometheus-kube-prometheus-stack-prometheus"
AM = "StatefulSet/monitoring/alertmanager-kube-prometheus-stack-alertmanager"


def _operator(args: list[str]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "op", "namespace": "monitoring"},
            "spec": {"template": {"spec": {"containers": [{"name": "op", "args": ["--prometheus-config-reloader=img", *args]}]}}}}


def _cr(kind: str, **spec) -> dict:
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": kind, "metadata": {"name": "k", "namespace": "monitoring"},
            "spec": spec}


def test_operator_defaults_reloader_sidecars_and_alertmanager_memory():
    """v0.93.1: config-reloader and init-config-reloader at 10m/50Mi unless the operator's flags say
    otherwise; Alertmanager gets a 200Mi memory request when it sets none; replicas x shards."""
    pts, _ = pod_templates([rel("kps", [_operator([]), _cr("Alertmanager"),
                                        _cr("Prometheus", replicas=2, shards=2, resources={"requests": {"cpu": "1", "memory": "2Gi"}})])])
    by_owner = {pt.owner: pt for pt in pts}
    am = by_owner["StatefulSet/monitoring/alertmanager-k"]
    assert effective_requests(am.spec) == {"memory": 250 * MI, "cpu": 10}
    assert [c["name"] for c in am.spec["initContainers"]] == ["init-config-reloader"]
    prom = [pt for pt in pts if pt.owner.startswith("StatefulSet/monitoring/prometheus-k")]
    assert sorted(pt.owner for pt in prom) == ["StatefulSet/monitoring/prometheus-k", "StatefulSet/monitoring/prometheus-k-shard-1"]
    assert all(pt.replicas == 2 and effective_requests(pt.spec) == {"cpu": 1010, "memory": 2048 * MI + 50 * MI} for pt in prom)
    # "0" disables a request (kube-prometheus-stack sets all four to 0 by default).
    pts, _ = pod_templates([rel("kps", [_operator(["--config-reloader-cpu-request=0", "--config-reloader-memory-request=0",
                                                   "--config-reloader-cpu-limit=0", "--config-reloader-memory-limit=0"]),
                                        _cr("Alertmanager", resources={"requests": {"memory": "64Mi", "cpu": "50m"}})])])
    assert effective_requests(pts[-1].spec) == {"memory": 64 * MI, "cpu": 50}


def test_shipped_prometheus_and_alertmanager_are_packed():
    need_charts()
    pts, _ = pod_templates([r for r in rendered("linode-dev") if r.rendered])
    by_owner = {pt.owner: pt for pt in pts}
    assert effective_requests(by_owner[PROM].spec) == {"cpu": 200, "memory": 1024 * MI}
    assert effective_requests(by_owner[AM].spec) == {"cpu": 50, "memory": 64 * MI}


def test_linode_dev_one_system_node_cannot_hold_the_operator_pods_and_a_notebook():
    """The stack as it shipped (one g6-standard-4 system node): fit now says the node runs out of memory;
    the shipped stack has two and fits the CPU notebook with room to spare."""
    need_charts()
    config = stack_config("linode-dev")
    config["gpu-platform:linode"]["systemPool"].update(minNodes=1, maxNodes=1)
    stack_input = stack_input_from_mapping("linode-dev", config)
    cfg = parse_config(stack_input.raw, "linode-dev")
    plan = run_program(stack_input)
    releases = [r for r in render_plan(plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version) if r.rendered]
    report = check_fit(cluster_model(cfg, plan), releases)
    # Since CPU notebooks are queued (LocalQueue cpu-queue, ClusterQueue cpu-work), Kueue already refuses
    # the CPU notebook: the system flavor's quota (one node less the platform's reserve) has no memory left.
    # And the node itself could not hold it either: what is left after the platform is below its request.
    refused = [p for p in report.problems if p.check in ("admission", "queue-fit") and "profile cpu" in p.object]
    if refused:
        asked = [m for p in refused for m in re.findall(r"memory in flavor system, request > maximum capacity "
                                                         r"\(([0-9.]+[KMGT]i) > ", p.reason)]
        assert asked, refused
        assert report.headroom["system"]["memoryBytes"] < parse_quantity(asked[0])
    else:
        assert any(p.check == "packing" for p in report.problems), report.problems
        assert report.headroom["system"]["memoryBytes"] < 256 * MI
    shipped_cfg = parse_config(load_stack("linode-dev").raw, "linode-dev")
    from tests.fit_support import stack_plan

    shipped = check_fit(cluster_model(shipped_cfg, stack_plan("linode-dev")),
                        rendered_copy("linode-dev"))
    assert shipped.ok, shipped.problems
    assert {p.group for p in shipped.placements if p.object in (PROM, AM) or "(profile cpu)" in p.object} == {"system"}
    assert shipped.headroom["system"]["memoryBytes"] > 4 * 1024 * MI
