"""Spot and scale-in terminations: NTH's heartbeats outlive the trainers' checkpoint grace, the
lifecycle hook agrees with them, and no rule makes NTH drain on a mere rebalance recommendation.
The values are rendered through the pinned chart (../shared/charts) to prove they reach NTH."""

from __future__ import annotations


import helm_python
import pytest
import yaml

from gpu_platform.data import aws_versions as versions
from gpu_platform.components.aws.gpu_asg import CAPACITY_REBALANCE
from gpu_platform.components.aws.nth import (EVENT_RULES, GLOBAL_TIMEOUT_SECONDS, HEARTBEAT_INTERVAL_RANGE, HEARTBEAT_UNTIL_RANGE,
                                HOOK_TIMEOUT_RANGE, event_rules, handler_policy, helm_values, termination_timing)
from tests.fit_support import chart_archive



def render(values: dict) -> list[dict]:
    chart = helm_python.Chart.load_archive(chart_archive(versions.NTH_CHART, versions.NTH_CHART_VERSION).read_bytes())
    out = chart.render(values, name="aws-node-termination-handler", namespace="kube-system")
    return [d for name, text in out.items() if name.endswith(".yaml") for d in yaml.safe_load_all(text) if d]


def deployment_env(values: dict) -> dict[str, str]:
    docs = render(values)
    kinds = {d["kind"] for d in docs}
    assert "DaemonSet" not in kinds, "queue-processor mode runs as a Deployment only"
    (dep,) = [d for d in docs if d["kind"] == "Deployment"]
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in c["env"]}


@pytest.mark.parametrize("grace", [30, 600, 3600, 7200])
def test_timing_covers_the_checkpoint_within_nth_and_auto_scaling_limits(grace):
    t = termination_timing(grace)
    assert t.drain_timeout_seconds > grace  # NTH's drain gives up only after the pods' own grace
    assert t.heartbeat_until_seconds > t.drain_timeout_seconds  # heartbeats last the whole drain
    assert t.hook_timeout_seconds > t.heartbeat_interval_seconds  # a heartbeat renews the hook before it lapses
    assert HEARTBEAT_INTERVAL_RANGE[0] <= t.heartbeat_interval_seconds <= HEARTBEAT_INTERVAL_RANGE[1]
    assert HEARTBEAT_UNTIL_RANGE[0] <= t.heartbeat_until_seconds <= HEARTBEAT_UNTIL_RANGE[1]
    assert HOOK_TIMEOUT_RANGE[0] <= t.hook_timeout_seconds <= HOOK_TIMEOUT_RANGE[1]
    assert t.longest_wait_seconds <= min(GLOBAL_TIMEOUT_SECONDS, 100 * t.hook_timeout_seconds)


def test_default_covers_a_ten_minute_checkpoint_which_the_old_hook_cut():
    t = termination_timing(600)
    assert (t.drain_timeout_seconds, t.heartbeat_interval_seconds, t.heartbeat_until_seconds, t.hook_timeout_seconds) == (
        660, 60, 720, 300)
    # Without heartbeats the instance would go after the hook timeout alone (300 s), mid-checkpoint.
    assert t.hook_timeout_seconds < 600 < t.heartbeat_until_seconds


def test_the_pinned_chart_passes_the_heartbeat_and_drain_settings_to_nth():
    values = helm_values("https://sqs.us-east-1.amazonaws.com/1/q", "us-east-1", "arn:aws:iam::1:role/nth", termination_timing(600))
    env = deployment_env(values)
    assert env["ENABLE_SQS_TERMINATION_DRAINING"] == "true" and env["QUEUE_URL"] == values["queueURL"]
    assert env["HEARTBEAT_INTERVAL"] == "60" and env["HEARTBEAT_UNTIL"] == "720"
    assert env["NODE_TERMINATION_GRACE_PERIOD"] == "660" and env["POD_TERMINATION_GRACE_PERIOD"] == "-1"
    assert env["MANAGED_TAG"] == "aws-node-termination-handler/managed" and env["CHECK_TAG_BEFORE_DRAINING"] == "true"


def test_the_chart_default_would_not_heartbeat():
    """The defect: the chart's defaults leave heartbeats off and the drain at 120 s."""
    env = deployment_env({"enableSqsTerminationDraining": True, "queueURL": "https://q"})
    assert env["HEARTBEAT_INTERVAL"] == "-1" and env["NODE_TERMINATION_GRACE_PERIOD"] == "120"


def test_trainers_are_drained_on_interruption_notices_not_rebalance_recommendations():
    """Before: capacity rebalancing on, so every rebalance recommendation launched a replacement and
    terminated the busy GPU node through the lifecycle hook: the job was drained and requeued for a
    warning that mostly never becomes an interruption. Now: no capacity rebalancing; NTH gets the
    interruption warning (drains on the two-minute notice) and never the recommendation."""
    assert CAPACITY_REBALANCE is False
    rules = event_rules(capacity_rebalance=CAPACITY_REBALANCE)
    kinds = {p["detail-type"][0] for p in rules.values()}
    assert "EC2 Spot Instance Interruption Warning" in kinds
    assert "EC2 Instance Rebalance Recommendation" not in kinds
    assert {"asg-terminate", "state-change", "scheduled-change"} <= set(rules)
    # with capacity rebalancing the group handles both; NTH must not drain on either
    assert set(event_rules(capacity_rebalance=True)) == {"asg-terminate", "state-change", "scheduled-change"}


def test_nth_may_heartbeat_only_its_own_groups():
    arns = ["arn:aws:autoscaling:us-east-1:1:autoScalingGroup:x:autoScalingGroupName/gpu-prod-gpu-a10g"]
    st = {s["Sid"]: s for s in handler_policy("arn:q", arns)["Statement"]}
    assert st["LifecycleOnGpuGroups"]["Action"] == ["autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"]
    assert st["LifecycleOnGpuGroups"]["Resource"] == arns
    assert "autoscaling:DescribeLifecycleHooks" in st["Describe"]["Action"]


def test_nth_compatibility_is_recorded_for_the_readme():
    # The newest NTH release is the chart's app version; its tested Kubernetes minors are recorded.
    assert versions.NTH_APP_VERSION == "v1.25.6"
    assert "1.33" in versions.NTH_TESTED_KUBERNETES


def test_nth_on_an_untested_minor_is_a_recorded_decision_and_a_warning():
    """Issue 33 item 11. NTH v1.25.6, the newest release, is tested up to Kubernetes 1.33; aws-prod runs
    1.35. The decision to keep it (docs/versions.md) rests on what the pinned chart lets it do: only GA
    APIs that 1.34-1.36 keep. Before: nothing said so, and no stack was warned."""
    from gpu_platform.config.stack import config_warnings, parse_config
    from gpu_platform.preflight.runner import load_stack
    from tests.conftest import ROOT

    cfg = parse_config(load_stack("aws-prod").raw, "aws-prod")
    (w,) = [w for w in config_warnings(cfg) if "aws-node-termination-handler" in w]
    assert "kubernetesVersion 1.35" in w and "docs/versions.md" in w
    doc = (ROOT / "docs" / "versions.md").read_text()
    assert "## aws-node-termination-handler on Kubernetes 1.34+" in doc and versions.NTH_APP_VERSION in doc

    (role,) = [o for o in render({"enableSqsTerminationDraining": True}) if o.get("kind") == "ClusterRole"]
    used = {(g, r) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]}
    # core/v1 and apps/v1 are GA and removed by no release through 1.36; `extensions` daemonsets were removed
    # in 1.16, so that rule grants nothing (NTH's drain, kubectl v0.30.4, reads apps/v1).
    assert used <= {("", "nodes"), ("", "pods"), ("", "pods/eviction"), ("", "events"), ("apps", "daemonsets"),
                    ("extensions", "daemonsets")}, used
