"""Every ServiceMonitor/PodMonitor selects a Service (pod) the pinned charts really render, with the
port it names (issue 22 item 8). Before: renaming the DCGM Service's label left every test green while
Prometheus got no DCGM target and the idle-GPU alerts no data. Checked on the releases each shipped
stack renders with the real pinned charts, in a test and in preflight's fit checks."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from gpu_platform.preflight.fit.checks import check_fit
from gpu_platform.preflight.fit.scrape import scrape_findings
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.nodes import cluster_model
from gpu_platform.preflight.runner import load_stack
from tests.fit_support import STACKS, need_charts, rendered, stack_plan


def objects(releases):
    return [(r.name, o) for r in releases for o in r.objects if isinstance(o, dict)]


def monitors(releases):
    return [o for _r, o in objects(releases) if o.get("kind") in ("ServiceMonitor", "PodMonitor")]


@pytest.mark.parametrize("stack", STACKS)
def test_every_monitor_of_every_stack_finds_its_targets(stack: str) -> None:
    need_charts()
    releases = rendered(stack)
    assert any(m["metadata"]["name"] == "dcgm-exporter" for m in monitors(releases))
    assert scrape_findings(objects(releases)) == []


def _mutated(releases, change):
    out = []
    for r in releases:
        objs = [copy.deepcopy(o) for o in r.objects]
        for o in objs:
            if isinstance(o, dict):
                change(o)
        out.append(replace(r, objects=objs))
    return out


def _is_dcgm_service(o) -> bool:
    return o.get("kind") == "Service" and (o.get("metadata") or {}).get("labels", {}).get(
        "app.kubernetes.io/name") == "dcgm-exporter"


def test_a_renamed_dcgm_service_label_is_caught_in_preflight() -> None:
    need_charts()

    def rename(o):
        if _is_dcgm_service(o):
            o["metadata"]["labels"]["app.kubernetes.io/name"] = "nvidia-dcgm-exporter"

    releases = _mutated(rendered("aws-prod"), rename)
    found = scrape_findings(objects(releases))
    assert [f.object for f in found] == ["ServiceMonitor/monitoring/dcgm-exporter"], found
    cfg = parse_config(load_stack("aws-prod").raw, "aws-prod")
    report = check_fit(cluster_model(cfg, stack_plan("aws-prod")), releases)
    assert [p.object for p in report.by_check("scrape")] == ["ServiceMonitor/monitoring/dcgm-exporter"]


def test_a_renamed_port_is_caught() -> None:
    need_charts()

    def rename_port(o):
        if _is_dcgm_service(o):
            for p in o["spec"]["ports"]:
                p["name"] = "http"

    found = scrape_findings(objects(_mutated(rendered("gcp-prod"), rename_port)))
    assert found and "'metrics'" in found[0].reason and found[0].object == "ServiceMonitor/monitoring/dcgm-exporter"


def test_a_service_whose_target_port_no_container_declares_is_caught() -> None:
    need_charts()

    def retarget(o):
        if _is_dcgm_service(o):
            for p in o["spec"]["ports"]:
                p["targetPort"] = "not-a-port"

    found = scrape_findings(objects(_mutated(rendered("gcp-prod"), retarget)))
    assert found and "not-a-port" in found[0].reason
