"""Every Linode API token the cluster holds has a visible expiry: the CCM/CSI token
(`linode.apiTokenExpires`) and the node-group provider's (`linode.nodeGroups.apiTokenExpires`), each
validated, rendered into a PrometheusRule whose alerts fire 30 and 7 days before it (checked and
unit-tested by the real promtool), warned about by preflight within 30 days, a past date refused; a
rotated provider token restarts the provider."""

from __future__ import annotations

import copy
import datetime
import shutil
import subprocess

import pytest
import yaml

from gpu_platform.components.linode import addons

EXPIRES = datetime.date(2027, 11, 20)
NODE_GROUPS_EXPIRES = datetime.date(2027, 5, 3)
IMAGE = "ghcr.io/example/gpu-platform-linode-node-groups@sha256:" + "ab" * 32
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)")


def _rules_file(tmp_path, rule=None):
    rule = rule or addons.token_expiry_rule(EXPIRES, NODE_GROUPS_EXPIRES)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


@needs_promtool
def test_the_rule_passes_promtool(tmp_path):
    for rule in (addons.token_expiry_rule(EXPIRES), addons.token_expiry_rule(None, NODE_GROUPS_EXPIRES),
                 addons.token_expiry_rule(EXPIRES, NODE_GROUPS_EXPIRES)):
        proc = subprocess.run(["promtool", "check", "rules", str(_rules_file(tmp_path, rule))],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def _day(date: datetime.date) -> int:
    return int(datetime.datetime.combine(date, datetime.time(), tzinfo=datetime.timezone.utc).timestamp()) // 86400


@needs_promtool
@pytest.mark.parametrize("token,expires", [(addons.CLUSTER_TOKEN, EXPIRES), (addons.NODE_GROUPS_TOKEN, NODE_GROUPS_EXPIRES)],
                         ids=["ccm-csi", "node-groups"])
def test_alerts_fire_30_and_7_days_before_each_tokens_expiry_and_not_earlier(tmp_path, token, expires):
    """Both tokens in one rule (as the program renders it): each token's alerts follow its own date only."""
    rules = _rules_file(tmp_path)
    day = _day(expires)
    annotations = {r["alert"]: r["annotations"] for r in
                   addons.token_expiry_rule(EXPIRES, NODE_GROUPS_EXPIRES)["spec"]["groups"][0]["rules"] if "alert" in r}

    def at(days_before: int, firing: list[str]) -> list[dict]:
        # The description says how long is left, humanised by Prometheus' template.
        def expected(name: str) -> dict:
            a = annotations[name]
            return {"summary": a["summary"], "description": a["description"].replace(
                "{{ $value | humanizeDuration }}", f"{days_before}d 0h 0m 0s")}
        return [{"eval_time": f"{day - days_before}d", "alertname": name,
                 "exp_alerts": [{"exp_labels": {"severity": severity, "token": token.namespace},
                                 "exp_annotations": expected(name)}]
                 if name in firing else []}
                for name, _, severity in token.alerts]

    soon, very_soon = (name for name, _, _ in token.alerts)
    test = {"rule_files": [str(rules)], "evaluation_interval": "1d", "tests": [{
        "interval": "1d", "input_series": [],
        "alert_rule_test": at(31, []) + at(29, [soon]) + at(6, [soon, very_soon])}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_each_alert_names_its_token_and_its_expiry_key():
    rules = addons.token_expiry_rule(EXPIRES, NODE_GROUPS_EXPIRES)["spec"]["groups"][0]["rules"]
    for token in (addons.CLUSTER_TOKEN, addons.NODE_GROUPS_TOKEN):
        for name, _, _ in token.alerts:
            [alert] = [r for r in rules if r.get("alert") == name]
            assert f'token="{token.namespace}"' in alert["expr"]
            assert f"{token.namespace}:token" in alert["annotations"]["description"]
            assert token.expiry_key in alert["annotations"]["description"]


def _cfg(expires, node_groups_expires=None, image=None, node_groups_token=None):
    from tests.conftest import stack_config

    cfg = copy.deepcopy(stack_config("linode-dev"))
    if expires is None:
        cfg["gpu-platform:linode"].pop("apiTokenExpires", None)
    else:
        cfg["gpu-platform:linode"]["apiTokenExpires"] = expires
    groups = {}
    if image is not None:
        groups["image"] = image
    if node_groups_expires is not None:
        groups["apiTokenExpires"] = node_groups_expires
    if groups:
        cfg["gpu-platform:linode"]["nodeGroups"] = groups
    if node_groups_token is not None:
        cfg["linode-node-groups:token"] = node_groups_token
    return cfg


def _parse(cfg):
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.runner import stack_input_from_mapping

    return parse_config(stack_input_from_mapping("linode-dev", cfg).raw, "linode-dev")


@pytest.mark.parametrize("value,fragment", [
    ("2026-11-01", "the CCM/CSI token has expired"),
    ("next year", "linode.apiTokenExpires"),
    ("2027-13-01", "linode.apiTokenExpires"),
])
def test_a_past_or_malformed_date_is_refused_naming_the_key(monkeypatch, value, fragment):
    from gpu_platform.config.base import ConfigError

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    with pytest.raises(ConfigError) as err:
        _parse(_cfg(value))
    assert fragment in str(err.value) and "apiTokenExpires" in str(err.value)


@pytest.mark.parametrize("value,expect", [
    ("2026-12-10", "expires in 16 day(s), on 2026-12-10"),
    ("2027-06-01", None),
])
def test_preflight_warns_within_30_days(monkeypatch, value, expect):
    from gpu_platform.config.stack import config_warnings

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    warnings = [w for w in config_warnings(_parse(_cfg(value))) if "linode-cluster:token" in w]
    assert warnings == [] if expect is None else (len(warnings) == 1 and expect in warnings[0]), warnings


def test_the_program_applies_the_rule_in_the_monitoring_namespace():
    from tests.conftest import plan_config

    plan = plan_config(_cfg("2027-11-20"), "linode-dev")
    [rule] = [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
              if r.inputs["metadata"]["name"] == addons.TOKEN_EXPIRY_RULE]
    assert rule.inputs["metadata"]["namespace"] == "monitoring"
    assert "vector(1826668800)" in str(rule.inputs["spec"])


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha"])
def test_every_shipped_linode_stack_alerts_before_its_token_expires(stack):
    from tests.conftest import plan_stack

    plan = plan_stack(stack)
    assert [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
            if r.inputs["metadata"]["name"] == addons.TOKEN_EXPIRY_RULE]


def test_a_linode_stack_without_the_token_expiry_is_a_config_error(monkeypatch):
    """Unset, nothing warned before the CCM/CSI token stopped working (LoadBalancers, volumes and node
    lifecycle with it): it was a warning and no alert. Now a config error naming the key."""
    from gpu_platform.config.base import ConfigError

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    with pytest.raises(ConfigError) as err:
        _parse(_cfg(None))
    text = str(err.value)
    assert "linode.apiTokenExpires" in text and "linode-cluster:token" in text and "Cloud Manager" in text, text


def test_a_provider_without_its_token_expiry_is_a_config_error(monkeypatch):
    from gpu_platform.config.base import ConfigError

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    with pytest.raises(ConfigError) as err:
        _parse(_cfg("2027-06-01", None, image=IMAGE))
    assert "linode.nodeGroups.apiTokenExpires" in str(err.value) and "linode-node-groups:token" in str(err.value)
    # No provider (no image): its token is not in the cluster, nothing to state.
    _parse(_cfg("2027-06-01", None, image=None))


@pytest.mark.parametrize("value,fragment", [
    ("2026-11-24", "the node-group provider's token has expired"),
    ("2026-01-01", "the node-group provider's token has expired"),
    ("soon", "linode.nodeGroups.apiTokenExpires"),
])
def test_a_past_or_malformed_provider_token_date_is_refused_naming_the_key(monkeypatch, value, fragment):
    from gpu_platform.config.base import ConfigError

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    with pytest.raises(ConfigError) as err:
        _parse(_cfg("2027-06-01", value, image=IMAGE))
    assert fragment in str(err.value) and "nodeGroups.apiTokenExpires" in str(err.value)


@pytest.mark.parametrize("image,value,expect", [
    (IMAGE, "2026-12-01", "expires in 7 day(s), on 2026-12-01 (linode.nodeGroups.apiTokenExpires)"),
    (IMAGE, "2027-06-01", None),
    # No published image: the provider is still deployed, from the image built into linode.imageRegistry.
    (None, "2026-12-01", "expires in 7 day(s), on 2026-12-01 (linode.nodeGroups.apiTokenExpires)"),
    # No autoscaled pool: no provider, no token of its own in the cluster, nothing to warn about.
    ("fixed pool", None, None),
])
def test_preflight_warns_about_the_providers_token(monkeypatch, image, value, expect):
    from gpu_platform.config.stack import config_warnings

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-11-24")
    cfg = _cfg("2027-06-01", value, image=None if image == "fixed pool" else image)
    if image == "fixed pool":
        cfg["gpu-platform:gpuPools"][0].update(minNodes=1, maxNodes=1)
    warnings = [w for w in config_warnings(_parse(cfg)) if "linode-node-groups:token" in w]
    assert warnings == [] if expect is None else (len(warnings) == 1 and expect in warnings[0]), warnings


def test_the_program_alerts_on_the_providers_token_too():
    from tests.conftest import plan_config

    plan = plan_config(_cfg("2027-11-20", "2027-05-03", image=IMAGE), "linode-dev")
    [rule] = [r for r in plan.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
              if r.inputs["metadata"]["name"] == addons.TOKEN_EXPIRY_RULE]
    spec = str(rule.inputs["spec"])
    assert "vector(1826668800)" in spec and "vector(1809302400)" in spec
    assert "LinodeNodeGroupsTokenExpiresSoon" in spec


def _provider_template(token: str) -> dict:
    from gpu_platform.components.linode import node_groups
    from tests.conftest import plan_config

    plan = plan_config(_cfg("2027-11-20", "2027-05-03", image=IMAGE, node_groups_token=token), "linode-dev")
    [dep] = [r for r in plan.by_type("kubernetes:apps/v1:Deployment") if r.plain_inputs["metadata"]["name"] == node_groups.NAME]
    return dep.plain_inputs["spec"]["template"]


def test_a_rotated_provider_token_restarts_the_provider():
    """The provider reads LINODE_TOKEN from its environment at start: the Secret changing in place would
    restart nothing, so the pod template must change with the token (and only with it)."""
    from gpu_platform.components.linode import node_groups

    old, new = _provider_template("old-token-aaaa"), _provider_template("new-token-bbbb")
    assert old["metadata"]["annotations"][node_groups.TOKEN_DIGEST_ANNOTATION] != \
        new["metadata"]["annotations"][node_groups.TOKEN_DIGEST_ANNOTATION]
    again = _provider_template("old-token-aaaa")
    assert again == old
    assert "old-token-aaaa" not in str(old)


def test_the_provider_never_runs_on_the_ccm_csi_token():
    """It used to fall back to linode-cluster:token (Linodes, NodeBalancers, Volumes, VPCs, IPs) with a warning,
    whose expiry alert said the CCM and CSI read it. Now `pulumi up` stops before any resource, naming the key."""
    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping

    stack_input = stack_input_from_mapping("linode-dev", _cfg("2027-11-20", "2027-05-03", image=IMAGE))
    # Preflight plans the run-time credentials as unknown secrets; `pulumi up` without it:
    del stack_input.config["linode-node-groups:token"]
    with pytest.raises(Exception) as err:
        plan = run_program(stack_input)
        assert not plan.resources, "stopped before registering anything"
    assert "linode-node-groups:token is not set" in str(err.value) and "Linodes: Read/Write" in str(err.value)
