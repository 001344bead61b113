"""The platform's controllers outrank user pods on the system nodes (platform review #4).

Before: no pod of the platform named a PriorityClass, so every pod ran at priority 0. The system
nodes also run what Kueue does not count (CPU notebooks, unqueued pipeline steps): once users filled
them, a Kueue replica or the Prometheus operator rescheduled after a drain waited as Pending next to
user pods, with Kueue's fail-closed webhooks (no submission in the queue's namespaces) or the alerts
down. Now a PriorityClass `gpu-platform-controllers` is set through each pinned chart's documented value
(Kueue controllerManager.manager.priorityClassName; kube-prometheus-stack prometheusOperator,
prometheus.prometheusSpec, alertmanager.alertmanagerSpec, grafana, kube-state-metrics), so the scheduler
preempts user pods to place them. Checked on the REAL pinned charts' rendered objects."""

from __future__ import annotations

import kubernetes_validate
import pytest

from gpu_platform.components.platform import versions
from gpu_platform.components.platform.common import (
    KUEUE_NAMESPACE, MONITORING_NAMESPACE, PLATFORM_PRIORITY, PLATFORM_PRIORITY_CLASS, render_priority_class,
)
from gpu_platform.components.platform.monitoring import RELEASE, kube_prometheus_stack_values
from gpu_platform.components.platform.queue import kueue_values
from tests.test_platform_charts import render

WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


def _pod_priority(obj: dict) -> object:
    if obj["kind"] in ("Prometheus", "Alertmanager"):  # the operator makes their StatefulSets from the spec
        return obj["spec"].get("priorityClassName")
    return obj["spec"]["template"]["spec"].get("priorityClassName")


def test_the_priority_class_outranks_user_pods_and_is_no_default() -> None:
    pc = render_priority_class()
    kubernetes_validate.validate(pc, "1.33", strict=True)
    assert pc["metadata"]["name"] == PLATFORM_PRIORITY_CLASS and pc["value"] == PLATFORM_PRIORITY
    assert 0 < pc["value"] < 1_000_000_000  # above user pods (0); values above 1e9 are reserved for system-*
    assert pc["globalDefault"] is False and pc["preemptionPolicy"] == "PreemptLowerPriority"


def test_kueue_runs_at_the_platform_priority() -> None:
    objs = render("kueue", versions.KUEUE.version, kueue_values(), "kueue", KUEUE_NAMESPACE)
    [manager] = [o for o in objs if o["kind"] == "Deployment" and "controller-manager" in o["metadata"]["name"]]
    assert _pod_priority(manager) == PLATFORM_PRIORITY_CLASS


def test_the_monitoring_controllers_run_at_the_platform_priority_and_node_exporter_does_not() -> None:
    objs = render("kube-prometheus-stack", versions.KUBE_PROMETHEUS_STACK.version,
                  kube_prometheus_stack_values("standard", ["ops@example.com"], None), RELEASE, MONITORING_NAMESPACE)
    pods = {(o["kind"], o["metadata"]["name"]): _pod_priority(o) for o in objs
            if o["kind"] in WORKLOADS + ("Prometheus", "Alertmanager")}
    wanted = [k for k in pods if k[0] != "DaemonSet"]
    assert {k[0] for k in wanted} >= {"Deployment", "Prometheus", "Alertmanager"}
    assert len([k for k in wanted if k[0] == "Deployment"]) >= 3  # operator, grafana, kube-state-metrics
    for key in wanted:
        assert pods[key] == PLATFORM_PRIORITY_CLASS, key
    # node-exporter runs on GPU nodes too: a higher priority there could preempt a training pod
    daemonsets = [k for k in pods if k[0] == "DaemonSet"]
    assert daemonsets and all(pods[k] != PLATFORM_PRIORITY_CLASS for k in daemonsets)


@pytest.mark.parametrize("stack", ["linode-dev", "aws-prod"])
def test_the_plan_creates_the_class_before_the_releases_that_name_it(stack: str) -> None:
    from tests.fit_support import stack_plan

    plan = stack_plan(stack)
    [pc] = [r for r in plan.resources if r.type == "kubernetes:scheduling.k8s.io/v1:PriorityClass"]
    assert pc.inputs["metadata"]["name"] == PLATFORM_PRIORITY_CLASS
    releases = {r.name: r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release"}
    for part in ("kueue", "kube-prometheus-stack"):
        [rel] = [r for n, r in releases.items() if n.endswith(f"-{part}")]
        assert pc.urn in rel.dependencies, part
