"""Preflight as a pull-request reviewer reads it: `--base DIR` shows what changed against the base
branch's run (resources, cost, policies); `-v` adds the policy headroom, the policy config applied, the
Kubernetes version with its end of standard support and who can reach the API; another cloud's policies
are n/a; the standing notes (not modelled, stale prices) come once per stack, not on every run; and the
verdict's cost line says when prices are another region's."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.cli_support import preflight_in_process
from tests.conftest import ROOT
from tests.fit_support import need_charts


def preflight(*args: str) -> subprocess.CompletedProcess:
    """What the reviewer reads: the command's text and files (run in-process, tests/cli_support.py)."""
    return preflight_in_process(*args, env={"NO_COLOR": "1"})


@pytest.fixture(scope="module")
def base_and_head(tmp_path_factory) -> tuple[Path, Path, subprocess.CompletedProcess]:
    """gcp-prod as on the base branch, and a pull request that halves the A100 pool."""
    need_charts()
    tmp = tmp_path_factory.mktemp("pr")
    base = preflight("gcp-prod", "--out", str(tmp / "base"))
    assert base.returncode == 0, base.stdout + base.stderr
    head_dir = tmp / "head"
    head_dir.mkdir()
    text = (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text()
    assert "maxNodes: 8" in text
    (head_dir / "Pulumi.gcp-prod.yaml").write_text(text.replace("maxNodes: 8", "maxNodes: 4"))
    head = preflight("--stack-file", str(head_dir / "Pulumi.gcp-prod.yaml"), "--out", str(tmp / "out"),
                     "--base", str(tmp / "base"), "--format", "json")
    return tmp / "base", tmp / "out", head


def test_base_shows_the_resource_cost_and_policy_diff(base_and_head):
    _, out, head = base_and_head
    assert head.returncode == 0, head.stderr
    doc = json.loads(head.stdout)
    diff = doc["baseDiff"]
    assert any(u.endswith("::gpu-prod-gpu-a100") for u in diff["resources"]["changed"]), diff["resources"]
    assert not diff["resources"]["added"] and not diff["resources"]["removed"]
    assert diff["cost"]["fullGpus"] == {"base": 8, "head": 4}
    assert diff["cost"]["fullMonthlyUsd"]["head"] < diff["cost"]["fullMonthlyUsd"]["base"]
    assert diff["policies"] == []  # nothing changed verdict
    assert json.loads((out / "gcp-prod" / "preflight.json").read_text())["baseDiff"] == diff


def test_the_text_report_leads_with_the_changes(base_and_head):
    base, _, _ = base_and_head
    text = preflight("gcp-prod", "--out", str(base.parent / "again"), "--base", str(base)).stdout
    after_verdict = text.split("\n\n", 1)[1]
    assert after_verdict.startswith(f"Changes against the base ({base / 'gcp-prod'})")
    assert "+0 added, -0 removed, ~0 changed" in after_verdict and "policies      no result changed" in after_verdict


def test_verbose_shows_headroom_policy_config_version_and_api_exposure(base_and_head):
    base, _, _ = base_and_head
    text = preflight("gcp-prod", "-v", "--out", str(base.parent / "verbose")).stdout
    review = text.split("For the reviewer", 1)[1].split("\n\n", 1)[0]
    assert "8 of 16 GPUs (gpu-count-ceiling.maxGpus, policy config)" in review
    assert "$11.8k of $15.0k a month at full capacity" in review
    assert "stacks/policy.gcp-prod.yaml" in review and '"maxGpus": 16' in review
    assert "1.35, standard support until 2027-" in review
    assert "public endpoint, open to 203.0.113.0/24 only" in review
    assert "aws-imdsv2-encrypted-volumes  mandatory  n/a (AWS resources; this is a GCP stack)" in text
    assert "linode-disk-encryption        mandatory  n/a" in text
    assert "gke-node-hardening            mandatory  pass" in text


def test_standing_notes_come_once_per_stack(tmp_path):
    need_charts()
    first = preflight("aws-prod", "--no-policies", "--out", str(tmp_path)).stdout
    second = preflight("aws-prod", "--no-policies", "--out", str(tmp_path)).stdout
    verbose = preflight("aws-prod", "--no-policies", "--out", str(tmp_path), "-v").stdout
    assert "- internet egress and cross-zone traffic" in first
    assert "- internet egress and cross-zone traffic" not in second and "as on the last run" in second
    assert "- internet egress and cross-zone traffic" in verbose


def test_the_verdict_says_when_prices_are_another_regions(tmp_path):
    need_charts()
    text = (ROOT / "stacks" / "Pulumi.gcp-prod.yaml").read_text()
    eu = (text.replace("region: us-central1", "region: europe-west4").replace("us-central1-a", "europe-west4-a")
          .replace("us-central1-b", "europe-west4-b").replace("      - us-central1-c\n", ""))
    stack = tmp_path / "Pulumi.gcp-eu.yaml"
    stack.write_text(eu)
    run = preflight("--stack-file", str(stack), "--out", str(tmp_path / "out"), "--no-policies")
    cost_row = next(line for line in run.stdout.splitlines() if line.startswith("  cost "))
    assert "us-central1 reference prices; europe-west4 may differ" in cost_row, run.stdout[:2000]
