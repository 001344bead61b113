"""Budget alerts that reach someone (issue 37 round 3, item 1): on Linode and on cloud kubernetes the only budget
alert is the platform's gpu-spend-run-rate Prometheus rule, and it leaves the cluster only as Alertmanager's e-mail,
which Alertmanager sends only through `platform.alertSmtp` (components/platform/monitoring.py, alertmanager_config).
A stack there without a relay fails the mandatory `budget-alerts-required`, naming the key and what to add; on GCP
and AWS, whose own budgets mail `alertEmails`, a missing relay changes nothing. Run through the real pack process."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from gpu_platform.components.platform.monitoring import alertmanager_config
from gpu_platform.config.platform import AlertSmtp
from gpu_platform.preflight.analyzer import Analyzer
from gpu_platform.preflight.runner import stack_input_from_mapping
from tests.conftest import shipped_plan, stack_config
from tests.test_policy_pack import assert_violates

MISSING = "but its budget alerts reach no one: gpu-platform:platform has no alertSmtp"
FIX = "Add to gpu-platform:platform: alertSmtp: {smarthost: <host>:<port>, from: <sender address>}"


def without_relay(stack: str) -> dict[str, Any]:
    cfg = stack_config(stack)
    platform = copy.deepcopy(cfg["gpu-platform:platform"])
    del platform["alertSmtp"]
    cfg["gpu-platform:platform"] = platform
    return cfg


def analyze(stack: str, cfg: dict[str, Any]):
    with Analyzer(stack=stack, stack_config=stack_input_from_mapping(stack, cfg).config) as a:
        return a.analyze(shipped_plan(stack))


def messages(report, policy: str = "budget-alerts-required") -> str:
    return "\n".join(m.message for m in report.result(policy).messages)


def test_the_claim_alertmanager_mails_nobody_without_a_relay():
    """What the policy stands on: with alertEmails but no relay the rendered Alertmanager config has the null
    receiver only, so every route (the spend alert's warning and critical ones too) ends there."""
    cfg = alertmanager_config(["ml-platform-alerts@example.com"], None)
    assert cfg["receivers"] == [{"name": "null"}]
    assert {r["receiver"] for r in cfg["route"]["routes"]} | {cfg["route"]["receiver"]} == {"null"}
    relayed = alertmanager_config(["ml-platform-alerts@example.com"],
                                  AlertSmtp.model_validate({"smarthost": "smtp.example.com:587",
                                                            "from": "gpu-alerts@example.com"}))
    assert [r["name"] for r in relayed["receivers"]] == ["null", "email"]


def test_the_reviewers_linode_stack_without_a_relay_fails_preflight_naming_the_key(tmp_path):
    """The adopter's stack: Linode, alertEmails set, no platform.alertSmtp. Before: PASS with a warning."""
    from tests.cli_support import preflight_in_process

    stack = tmp_path / "Pulumi.cv-linode.yaml"
    stack.write_text(yaml.safe_dump({"config": without_relay("linode-dev")}, sort_keys=False))
    result = preflight_in_process("--stack-file", str(stack), "--out", str(tmp_path / "build"))
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout.startswith("preflight cv-linode (linode): FAIL (exit 3)"), result.stdout
    policy = json.loads((tmp_path / "build" / "cv-linode" / "policy.json").read_text())
    (alerts,) = [p for p in policy["policies"] if p["name"] == "budget-alerts-required"]
    assert alerts["status"] == "mandatory"
    (violation,) = alerts["violations"]
    assert MISSING in violation["message"] and FIX in violation["message"]
    assert "Linode has no budget or billing-alert API" in violation["message"]
    # The config's warning, which --no-policies still prints, says what the pack does.
    assert "platform.alertSmtp is not set" in result.stdout
    assert "(the policy pack's budget-alerts-required fails such a stack)" in result.stdout


@pytest.mark.parametrize("stack,where", [("linode-ha", "Linode"), ("onprem-dev", "cloud kubernetes")])
def test_a_stack_whose_only_budget_alert_is_alertmanagers_mail_needs_a_relay(stack, where):
    report = analyze(stack, without_relay(stack))
    assert_violates(report, "budget-alerts-required", "mandatory", f"GPU capacity on {where} {MISSING}", FIX)
    assert report.mandatory_violations == 1, report.render()  # that policy only, once
    assert len(report.result("budget-alerts-required").messages) == 1


@pytest.mark.parametrize("stack", ["linode-dev", "linode-ha", "onprem-dev", "gcp-prod", "aws-prod"])
def test_the_shipped_stacks_set_a_relay_and_pass(stack):
    assert stack_config(stack)["gpu-platform:platform"]["alertSmtp"]["smarthost"]
    assert analyze(stack, stack_config(stack)).result("budget-alerts-required").status == "pass"


@pytest.mark.parametrize("stack", ["gcp-prod", "aws-prod"])
def test_on_gcp_and_aws_the_clouds_own_budget_mails_and_a_missing_relay_changes_nothing(stack):
    report = analyze(stack, without_relay(stack))
    assert report.result("budget-alerts-required").status == "pass", report.render()


def test_the_relay_is_read_from_a_partial_config_too(monkeypatch):
    """A pack handed a config that does not validate as a whole (the tests' partial configs) reads the platform
    section alone: a relay there counts, none is none, and an unreadable one is said, not taken for none."""
    from gpu_platform.policies import stack_settings as ss

    def settings(**values: Any) -> ss.StackSettings:
        return ss._parse(json.dumps({f"gpu-platform:{k}": v for k, v in values.items()}))

    relay = {"alertSmtp": {"smarthost": "smtp.example.com:587", "from": "gpu-alerts@example.com"}}
    assert settings(cloud="linode", platform=json.dumps(relay)).alert_smtp.smarthost == "smtp.example.com:587"
    assert settings(cloud="linode", platform=json.dumps({"monitoring": True})).alert_smtp is None
    assert settings(cloud="linode").alert_smtp is None and settings(cloud="linode").platform_problem is None
    bad = settings(cloud="linode", platform=json.dumps({"alertSmtp": {"smarthost": "smtp.example.com:99999"}}))
    assert bad.alert_smtp is None and bad.platform_problem.startswith("gpu-platform:platform")

