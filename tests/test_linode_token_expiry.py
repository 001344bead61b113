"""The CCM/CSI Linode API token's expiry is visible: `linode.apiTokenExpires` (validated) renders a
PrometheusRule whose alerts fire 30 and 7 days before it (checked and unit-tested by the real promtool),
preflight warns within 30 days and refuses a date already past."""

from __future__ import annotations

import copy
import datetime
import shutil
import subprocess

import pytest
import yaml

from gpu_platform.components.linode import addons

EXPIRES = datetime.date(2027, 11, 20)
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian package prometheus)")


def _rules_file(tmp_path):
    rule = addons.token_expiry_rule(EXPIRES)
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    return path


@needs_promtool
def test_the_rule_passes_promtool(tmp_path):
    proc = subprocess.run(["promtool", "check", "rules", str(_rules_file(tmp_path))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_alerts_fire_30_and_7_days_before_the_expiry_and_not_earlier(tmp_path):
    rules = _rules_file(tmp_path)
    day = int(datetime.datetime.combine(EXPIRES, datetime.time(), tzinfo=datetime.timezone.utc).timestamp()) // 86400

    annotations = {r["alert"]: r["annotations"] for r in addons.token_expiry_rule(EXPIRES)["spec"]["groups"][0]["rules"]
                   if "alert" in r}

    def at(days_before: int, firing: list[str]) -> list[dict]:
        # The description says how long is left, humanised by Prometheus' template.
        def expected(name: str) -> dict:
            a = annotations[name]
            return {"summary": a["summary"], "description": a["description"].replace(
                "{{ $value | humanizeDuration }}", f"{days_before}d 0h 0m 0s")}
        return [{"eval_time": f"{day - days_before}d", "alertname": name,
                 "exp_alerts": [{"exp_labels": {"severity": severity}, "exp_annotations": expected(name)}]
                 if name in firing else []}
                for name, _, severity in addons.TOKEN_EXPIRY_ALERTS]

    test = {"rule_files": [str(rules)], "evaluation_interval": "1d", "tests": [{
        "interval": "1d", "input_series": [],
        "alert_rule_test": at(31, []) + at(29, ["LinodeApiTokenExpiresSoon"])
        + at(6, ["LinodeApiTokenExpiresSoon", "LinodeApiTokenExpiresVerySoon"])}]}
    path = tmp_path / "test.yaml"
    path.write_text(yaml.safe_dump(test))
    proc = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _cfg(expires):
    from tests.conftest import stack_config

    cfg = copy.deepcopy(stack_config("linode-dev"))
    if expires is not None:
        cfg["gpu-platform:linode"]["apiTokenExpires"] = expires
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
    (None, "linode.apiTokenExpires is not set"),
    ("2026-12-10", "expires in 16 day(s), on 2026-12-10"),
    ("2027-06-01", None),
])
def test_preflight_warns_within_30_days_and_when_unset(monkeypatch, value, expect):
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
    unset = plan_config(_cfg(None), "linode-dev")
    assert not [r for r in unset.by_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
                if r.inputs["metadata"]["name"] == addons.TOKEN_EXPIRY_RULE]
