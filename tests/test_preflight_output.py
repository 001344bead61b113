"""Preflight reads like a verdict (issue 16): the summary first, the same bytes on every run, integers
as integers, one JSON document that validates against the shipped schema, distinct exit codes, colour
only where asked for, and no traceback when the reader closes the pipe."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import jsonschema
import pytest

from gpu_platform.preflight import verdict
from tests.cli_support import preflight_in_process
from tests.conftest import ROOT
from tests.fit_support import CHARTS



def run(*args: str, env: dict | None = None, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_platform.preflight", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    outs = [tmp_path_factory.mktemp(f"run{i}") for i in range(2)]
    return [(run("linode-ha", "--out", str(out)), out) for out in outs]


def test_two_runs_print_the_same_text_and_write_the_same_plan(two_runs):
    (first, a), (second, b) = two_runs
    assert first.returncode == second.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    for name in ("plan.json", "preflight.json", "fit.json", "policy.json"):
        assert (a / "linode-ha" / name).read_bytes() == (b / "linode-ha" / name).read_bytes(), name


def test_the_verdict_comes_first_then_the_bill(two_runs):
    (result, _), _ = two_runs
    lines = result.stdout.splitlines()
    assert lines[0] == "preflight linode-ha (linode): PASS (exit 0)"
    labels = [line.split()[0] for line in lines[1:6]]
    assert labels == ["plan", "images", "policies", "cluster", "cost"]  # images: what `pulumi up` builds
    assert "Cost estimate for" in result.stdout and "the whole bill:" in result.stdout
    assert "Resource tree:" not in result.stdout and "POLICY" not in result.stdout  # details behind -v
    assert "\x1b[" not in result.stdout  # piped: no colour codes


def test_whole_numbers_are_integers_in_plan_json(two_runs):
    (_, out), _ = two_runs
    text = (out / "linode-ha" / "plan.json").read_text()
    assert not re.search(r'": -?\d+\.0\b', text), "an integral number written as a float"
    doc = json.loads(text)
    urns = [r["urn"] for r in doc["resources"]]
    assert urns == sorted(urns)


def test_json_document_validates_and_matches_the_written_one(tmp_path):
    result = preflight_in_process("gcp-prod", "--format", "json", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)  # stdout is the document and nothing else
    jsonschema.validate(doc, json.loads(verdict.SCHEMA_PATH.read_text()))
    assert doc["verdict"] == "pass" and doc["cloud"] == "gcp" and doc["clusterFit"]["problems"] == []
    assert doc["cost"]["fullMonthlyUsd"] > doc["cost"]["budgetUsd"]  # gcp-prod is over budget at full capacity
    assert json.loads((tmp_path / "gcp-prod" / "preflight.json").read_text()) == doc


def test_exit_codes_are_distinct(tmp_path):
    unknown = preflight_in_process("no-such-stack")
    assert unknown.returncode == 4 and "Traceback" not in unknown.stderr
    bad = tmp_path / "Pulumi.bad.yaml"
    bad.write_text("config:\n  gpu-platform:cloud: mars\n")
    config = preflight_in_process("--stack-file", str(bad), "--format", "json")
    assert config.returncode == 2 and str(bad) in config.stderr
    assert json.loads(config.stdout)["verdict"] == "config-error"
    # A chart folder that really lacks the pinned Cilium chart: a chart error (2) naming it, unless allowed.
    charts = tmp_path / "charts"
    charts.mkdir()
    for f in CHARTS.iterdir():
        if not f.name.startswith("cilium-"):
            (charts / f.name).symlink_to(f)
    missing_chart = preflight_in_process("linode-dev", "--no-policies", "--out", str(tmp_path), "--charts", str(charts))
    assert missing_chart.returncode == 2 and "cilium" in missing_chart.stderr
    allowed = preflight_in_process("linode-dev", "--no-policies", "--out", str(tmp_path), "--charts", str(charts),
                                   "--allow-missing-chart", "cilium", "-v")
    assert allowed.returncode in (0, 3) and "NOT RENDERED" in allowed.stdout + allowed.stderr, allowed.stderr
    assert preflight_in_process("linode-dev", "--no-policies", "--out", str(tmp_path), "--quiet").returncode == 0


def test_colour_only_when_asked_and_never_with_no_color(tmp_path):
    """The environment decides, read when main() builds its consoles: in this process (piped stdout either way)."""
    forced = preflight_in_process("aws-prod", "--no-policies", "--out", str(tmp_path),
                                  env={"FORCE_COLOR": "1", "TTY_COMPATIBLE": "1", "NO_COLOR": None})
    assert "\x1b[" in forced.stdout
    plain = preflight_in_process("aws-prod", "--no-policies", "--out", str(tmp_path), env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert not re.search(r"\x1b\[[0-9;]*3[0-9]m", plain.stdout)  # no colour (bold may stay, as NO_COLOR allows)


def test_a_closed_pipe_ends_quietly(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "gpu_platform.preflight", "aws-prod", "-vv", "--no-policies", "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("preflight aws-prod")
    proc.stdout.close()  # like `| head -1`
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("after_s", [1.5, 5.0])  # while the program runs; while rendering and analysing
def test_ctrl_c_ends_quietly_and_leaves_no_process_running(tmp_path, after_s):
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-m", "gpu_platform.preflight", "gcp-prod", "--out", str(tmp_path)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    time.sleep(after_s)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
    _, err = proc.communicate(timeout=120)
    assert proc.returncode in (130, 0), err  # 0: it had already finished
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    deadline = time.monotonic() + 10
    while True:  # the policy pack and the chart child die with it (exited children may linger as zombies)
        ps = subprocess.run(["ps", "-o", "stat=,args=", "-g", str(proc.pid)], capture_output=True, text=True).stdout
        alive = [line for line in ps.splitlines() if line.strip() and not line.lstrip().startswith("Z")]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive


def test_ci_summary_tabulates_every_stack(tmp_path):
    docs = []
    for stack, code in (("gcp-prod", 0), ("aws-prod", 3)):
        doc = verdict.document(stack, None, code)
        doc["clusterFit"] = {"verdict": "fail" if code else "pass", "releases": 1, "pods": 2, "notRendered": [],
                             "problems": [{"check": "schedulable", "release": "r", "object": "Pod/ns/p",
                                           "reason": "no node group", "fix": "add one"}] if code else []}
        verdict.validate(doc)
        (tmp_path / stack).mkdir()
        (tmp_path / stack / verdict.DOCUMENT).write_text(json.dumps(doc))
        docs.append(doc)
    result = run("summary", str(tmp_path))
    assert result.returncode == 3  # one stack failed
    assert "| aws-prod (?) | ❌ fail |" in result.stdout and "| gcp-prod (?) | ✅ pass |" in result.stdout
    assert "schedulable: `Pod/ns/p` (r): no node group — fix: add one" in result.stdout


def test_the_summary_carries_each_stacks_changes_against_the_base_in_a_fence_it_cannot_close(tmp_path):
    """ci.yml's pull-request comment is this summary: with --base it shows each stack's changes (issue 37
    item 3). A changed value is the pull request's text: a run of backticks in it cannot end the block."""
    doc = verdict.document("gcp-prod", None, 0)
    doc["baseDiff"] = {"base": "base/build/gcp-prod", "resources": {"added": [], "removed": [], "changed": ["u"]},
                       "changes": [{"urn": "urn:pulumi:s::p::gcp:container/nodePool:NodePool::gpu", "type": "t",
                                    "name": "gpu", "change": "changed", "category": "other",
                                    "fields": [{"path": "autoscaling.totalMaxNodeCount", "base": 8, "head": 12},
                                               {"path": "labels.x", "base": "a", "head": "````\n# forged"}]}]}
    verdict.validate(doc)
    (tmp_path / "gcp-prod").mkdir()
    (tmp_path / "gcp-prod" / verdict.DOCUMENT).write_text(json.dumps(doc))
    out = run("summary", str(tmp_path)).stdout
    section = out.split("### gcp-prod: changes against the base branch\n", 1)[1]
    fence = section.splitlines()[0].removesuffix("text")
    assert len(fence) >= 5 and "autoscaling.totalMaxNodeCount: 8 -> 12" in section
    assert "\n# forged" not in out and section.count(fence) == 2
