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
    # The first with gRPC's API tracer on: its INFO lines reach the terminal unless preflight quiets gRPC's core.
    return [(run("linode-ha", "--out", str(out), env={"GRPC_TRACE": "api"} if i == 0 else None), out)
            for i, out in enumerate(outs)]


def test_grpc_core_logs_nothing_to_the_terminal(two_runs):
    """gRPC's core logs at INFO by default: a run that stopped its policy pack once printed `I1201 ...
    chttp2_transport.cc:1403] ... Got goaway` under its message (startup.quiet_grpc_core)."""
    (first, _), _ = two_runs
    assert first.returncode == 0, first.stderr[-2000:]
    assert not re.search(r"^[IWEF]\d{4} \d\d:\d\d", first.stderr, re.M), first.stderr[:2000]


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


def test_a_document_off_the_schema_is_refused_naming_the_field_and_a_broken_schema_is_refused_itself(
        tmp_path, monkeypatch):
    """verdict.validate checks the schema once per process (then only documents): a document off the schema still
    fails naming its field, and a schema that is itself invalid fails as jsonschema.validate would have."""
    doc = verdict.document("gcp-prod", None, 0)
    verdict.validate(doc)
    with pytest.raises(jsonschema.ValidationError) as refused:
        verdict.validate({**doc, "verdict": "maybe"})
    assert list(refused.value.path) == ["verdict"] and "'maybe' is not one of" in refused.value.message
    broken = tmp_path / "preflight.schema.json"
    broken.write_text(json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "no-such-type"}))
    monkeypatch.setattr(verdict, "SCHEMA_PATH", broken)
    verdict._validator.cache_clear()
    try:
        with pytest.raises(jsonschema.SchemaError):
            verdict.validate(doc)
    finally:
        verdict._validator.cache_clear()


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


# Ctrl-C at a chosen point of the run, not after a fixed time (on a fast machine a whole preflight of gcp-prod takes
# 2.5 s, and 5 s "while rendering" came after the end): the command is started with the function named replaced by
# one that first sends SIGINT to the whole process group, as a terminal's Ctrl-C does (the policy pack and the cost
# chart's child get it too), or to preflight alone, as `timeout`, a CI runner or `kill -INT` do: then only preflight
# can stop its children.
_INTERRUPT_AT = """
import importlib, os, signal, sys

module, name = {where!r}
module = importlib.import_module(module)
real = getattr(module, name)

def interrupted(*args, **kwargs):
    if not sent:
        sent.append(os.killpg(os.getpgrp(), signal.SIGINT) if {group!r} else os.kill(os.getpid(), signal.SIGINT))
    return real(*args, **kwargs)

sent = []

setattr(module, name, interrupted)
sys.argv = ["-m", "gcp-prod", "--out", {out!r}]
import runpy; runpy.run_module("gpu_platform.preflight", run_name="__main__", alter_sys=False)
"""


@pytest.mark.parametrize("where,group", [
    (("gpu_platform.preflight.runner", "run_program"), True),
    (("gpu_platform.preflight.fit.render", "render_chart"), True),
    (("gpu_platform.preflight.fit.render", "render_chart"), False),
], ids=["while the program runs", "while rendering and analysing", "preflight alone, while its children run"])
def test_ctrl_c_ends_quietly_and_leaves_no_process_running(tmp_path, where, group):
    import time

    code = _INTERRUPT_AT.format(where=where, group=group, out=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k != "GPU_PLATFORM_NO_CHART"}  # the chart's child runs too
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env=env)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err == "preflight: interrupted (SIGINT); stopping the policy pack and removing temporary files\n"
    deadline = time.monotonic() + 10
    while True:  # the policy pack and the chart child die with it (exited children may linger as zombies)
        ps = subprocess.run(["ps", "-o", "stat=,args=", "-g", str(proc.pid)], capture_output=True, text=True).stdout
        alive = [line for line in ps.splitlines() if line.strip() and not line.lstrip().startswith("Z")]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not alive


# Ctrl-C while the command is still importing (seconds on a loaded machine; CI's run of stop 45 hit it at 1.5 s and
# printed a KeyboardInterrupt traceback from inside pydantic). The signal is sent from an import hook the moment the
# stack config's module is first imported, so the test hits that window every time, for both ways of starting it.
_INTERRUPT_WHILE_IMPORTING = """
import importlib.abc, os, signal, sys

class Interrupt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "gpu_platform.config.stack":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
sys.argv = [{argv0!r}, "gcp-prod", "--out", {out!r}]
{start}
"""


@pytest.mark.parametrize("argv0,start", [
    ("-m", "import runpy; runpy.run_module('gpu_platform.preflight', run_name='__main__', alter_sys=False)"),
    ("gpu-platform-preflight", "from gpu_platform.preflight.startup import command; command()"),
], ids=["python -m", "console script"])
def test_ctrl_c_while_the_command_still_imports_ends_quietly(tmp_path, argv0, start):
    code = _INTERRUPT_WHILE_IMPORTING.format(argv0=argv0, out=str(tmp_path / "out"), start=start)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr
    assert "interrupted (SIGINT) while starting" in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing was written


def test_the_console_script_starts_the_command_as_python_m_does():
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["gpu-platform-preflight"] == "gpu_platform.preflight.startup:command"


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


# --- the pull request's comment (issue 37 round 3 item 2) --------------------------------------------


def _write_docs(tmp_path, docs):
    for doc in docs:
        verdict.validate(doc)
        (tmp_path / doc["stack"]).mkdir()
        (tmp_path / doc["stack"] / verdict.DOCUMENT).write_text(json.dumps(doc))


def _review(settings=None, file=None):
    return {"headroom": [{"policy": "gpu-count-ceiling", "setting": "maxGpus", "value": 2, "limit": 64.0,
                          "from": "pack default", "text": "2 of 64 GPUs"}],
            "policyConfig": {"file": file, "settings": settings or {}},
            "kubernetes": {"version": "1.35", "text": "1.35, standard support until 2027-02-28 (91 days)"},
            "apiExposure": {"private": False, "adminCidrs": ["203.0.113.0/24"],
                            "text": "public endpoint, open to 203.0.113.0/24 only"}}


def test_the_comment_of_a_passing_stack_carries_its_warnings_and_the_reviewers_block(two_runs):
    """Before: "✅ pass" and nothing else for a stack that passes with warnings, and no "For the reviewer"."""
    (_, out), _ = two_runs
    doc = json.loads((out / "linode-ha" / verdict.DOCUMENT).read_text())
    assert doc["verdict"] == "pass" and doc["warnings"], "linode-ha plans with warnings (its example.com address)"
    comment = run("summary", "--comment", str(out)).stdout
    notes = list(dict.fromkeys([*doc["warnings"], *doc["cost"]["priceNotes"]]))
    # Prices older than the catalog's limit are a warning of their own (linode-ha's Linode prices, dated by the types
    # API answer they were checked against).
    age = doc["cost"]["catalogAge"]
    if age.get("stale"):
        assert comment.count("STALE PRICES: ") == 1 and f"up to {age['ageDays']} days old" in comment
    assert f"| linode-ha (linode) | ✅ pass, {len(notes) + bool(age.get('stale'))} warning" in comment
    for warning in notes:
        assert comment.count(verdict.md_text(warning)) == 1, warning
    block = comment.split("**For the reviewer**\n", 1)[1]
    # What `-v` prints under "For the reviewer", line for line.
    from gpu_platform.preflight.review import render_review

    printed = render_review(doc["review"]).splitlines()
    assert printed[0] == "For the reviewer" and len(printed) >= 5
    for line in printed[1:]:
        assert f"- {line[2:15].strip()}: {verdict.md_text(line[16:])}\n" in block, line
    assert "- headroom: 2 of 64 GPUs (gpu-count-ceiling.maxGpus, pack default)" in block
    assert "- API access: public endpoint, open to 203.0.113.0/24, 2001:db8::/48 only" in block


def test_each_warning_is_shown_once_and_many_are_folded(tmp_path):
    doc = verdict.document("gcp-prod", None, 0, warnings=tuple(f"warning number {i}" for i in range(6)))
    doc["cost"] = {"idleMonthlyUsd": 1.0, "fullMonthlyUsd": 2.0, "budgetUsd": 10, "priceNotes": ["warning number 0",
                   "prices are the reference region's"]}
    _write_docs(tmp_path, [doc])
    out = run("summary", "--comment", str(tmp_path)).stdout
    assert out.count("warning number 0") == 1 and "| gcp-prod (?) | ✅ pass, 7 warnings |" in out
    folded = out.split("<details><summary>7 warnings</summary>\n\n", 1)[1].split("\n\n</details>", 1)[0]
    assert folded.splitlines() == [f"- warning: warning number {i}" for i in range(6)] + [
        "- warning: prices are the reference region's"]
    few = verdict.document("aws-prod", None, 0, warnings=("one", "two"))
    assert "<details>" not in verdict.markdown([few]) and "- warning: one\n- warning: two\n" in verdict.markdown([few])


def test_the_comment_masks_credentials_and_keeps_a_stack_files_text_inside_its_blocks():
    """The reviewer's block shows the policy config as `-v` does, a value under a key naming a credential as
    [secret]; a warning or message quoting the pull request's stack file cannot close the <details> or start a
    heading of its own, and `<host>` shows as written."""
    doc = verdict.document("gcp-prod", None, 0, warnings=tuple(f"w{i}" for i in range(4)) +
                           ("pool x</details>\n## forged heading <img src=x>",))
    doc["review"] = _review({"gpu-count-ceiling": {"maxGpus": 16, "apiToken": "hunter2-do-not-show"}},
                            "stacks/policy.gcp-prod.yaml")
    verdict.validate(doc)
    out = verdict.markdown([doc], comment=True)
    assert "hunter2" not in out and '"apiToken": "[secret]"' in out and '"maxGpus": 16' in out
    assert out.count("</details>") == 1 and "\n## forged" not in out and "<img" not in out
    assert "pool x&lt;/details>\\n## forged heading &lt;img src=x>" in out
    from gpu_platform.preflight.review import render_review
    assert "hunter2" not in render_review(doc["review"])  # `-v` masks it the same way
    # A pod name in a code span shows as written; a multi-line error keeps its lines, in a block it cannot close.
    fit = verdict.document("linode-dev", None, 3)
    fit["clusterFit"] = {"verdict": "fail", "releases": 1, "pods": 1, "notRendered": [], "problems": [
        {"check": "schedulable", "release": "jupyterhub", "object": "Pod/jupyterhub/jupyter-<user>",
         "reason": "no node group fits <it>", "fix": "add one"}]}
    error = verdict.document("aws-prod", None, 2, error="stack file: gpu-platform:cloud: mars\n```\n## forged")
    out = verdict.markdown([fit, error], comment=True)
    assert "- schedulable: `Pod/jupyterhub/jupyter-<user>` (jupyterhub): no node group fits &lt;it> — fix: add one" in out
    assert "- error:\n````text\nstack file: gpu-platform:cloud: mars\n```\n## forged\n````\n" in out


def _balanced(text: str) -> bool:
    fence = None
    for line in text.splitlines():
        if fence is not None:
            fence = None if line == fence else fence
        elif line.startswith("```"):
            fence = line[:len(line) - len(line.lstrip("`"))]
    return fence is None and text.count("<details>") == text.count("</details>")


@pytest.mark.parametrize("warnings,cut_in", [(8, "<details>"), (0, "```")], ids=["in-warnings", "in-a-diff"])
def test_a_comment_over_githubs_limit_is_cut_with_a_note_and_its_blocks_closed(tmp_path, warnings, cut_in):
    """GitHub refuses a comment over 65,536 characters (comment.yml keeps 60,000 bytes of it): `--comment` stays
    under both, whole lines, the open code fence or <details> closed, and says what it left out and where it is."""
    docs = []
    for s in range(30):
        doc = verdict.document(f"stack-{s:02d}", None, 0, warnings=tuple(f"warning {i} of stack {s}: " + "é" * 300
                                                                           for i in range(warnings)))
        doc["review"] = _review()
        doc["baseDiff"] = {"base": f"base/build/stack-{s:02d}",
                           "resources": {"added": [], "removed": [], "changed": ["u"]},
                           "changes": [{"urn": f"urn:pulumi:s::p::gcp:container/nodePool:NodePool::gpu{i}",
                                        "type": "gcp:container/nodePool:NodePool", "name": f"gpu{i}",
                                        "change": "changed", "category": "other",
                                        "fields": [{"path": "labels.x", "base": "a", "head": "b" * 70}]}
                                       for i in range(15)]}
        docs.append(doc)
    _write_docs(tmp_path, docs)
    whole = run("summary", str(tmp_path)).stdout  # the job summary: all of it
    assert len(whole.encode()) > verdict.COMMENT_MAX_BYTES + 10_000 and "stops here" not in whole and _balanced(whole)
    comment = run("summary", "--comment", str(tmp_path))
    assert comment.returncode == 0, comment.stderr
    text = comment.stdout
    assert len(text.encode()) <= verdict.COMMENT_MAX_BYTES and len(text) < verdict.GITHUB_COMMENT_MAX_CHARS
    assert _balanced(text), text[-2000:]
    shown, note = text.split("\n\n**The summary stops here**: ", 1)
    left = int(note.split(" ", 1)[0].replace(",", ""))
    lines = shown.splitlines()
    closed = []
    while lines and (lines[-1] in ("", "</details>") or lines[-1].startswith("```")):
        closed.append(lines.pop())
    assert cut_in in "".join(closed) or cut_in == "<details>" and "</details>" in closed
    kept = "\n".join(lines) + "\n"
    assert whole.startswith(kept) and len(whole.encode()) - len(kept.encode()) >= left > 0
    assert note.endswith("more bytes of it are left out (a GitHub comment holds 65,536 characters). The rest is in this "
                         "run's job summary and, for each stack, `preflight.json` in the run's `preflight` artifact.\n")
    assert "| stack-29 (?) | ✅ pass" in text  # the table comes first and whole


def test_a_stack_whose_config_is_refused_is_a_failed_row_of_the_pull_requests_comment(tmp_path):
    """Adopter check of ef513ce: a stack file refused before the plan (a config error) writes no verdict (bad input
    writes nothing: tests/test_hostile_input.py), so `summary --comment` (ci.yml's pull-request comment) listed
    only the other stacks, all ✅. ci.yml names the stacks it expects (`--expect`): one without a verdict is a
    failed row saying why."""
    import yaml

    from tests.cli_support import preflight_in_process as run  # the command in this process: no new interpreter

    good = run("gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path))
    assert good.returncode == 0, good.stderr
    doc = yaml.safe_load((ROOT / "stacks" / "Pulumi.linode-dev.yaml").read_text())
    doc["config"]["gpu-platform:linode"]["nodeGroups"]["joinDeadlineMinutes"] = 5  # under the pool's boot
    bad = tmp_path / "Pulumi.linode-dev.yaml"
    bad.write_text(yaml.safe_dump(doc))
    refused = run("--stack-file", str(bad), "--no-policies", "--quiet", "--out", str(tmp_path))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert not (tmp_path / "linode-dev").exists()
    assert "linode-dev" not in run("summary", "--comment", str(tmp_path)).stdout  # what the comment was
    comment = run("summary", "--comment", str(tmp_path), "--expect", "gcp-prod", "linode-dev")
    assert "| linode-dev (?) | ❌ error |" in comment.stdout, comment.stdout
    assert verdict.NO_VERDICT.split(":")[0] in comment.stdout and "| gcp-prod (gcp) | ✅ pass" in comment.stdout
    assert comment.returncode != 0


def test_ci_names_every_shipped_stack_to_the_summary():
    """The --expect list ci.yml builds (run here as the job runs it) is every stack file's, which `make
    preflight-ci` plans, and both summaries (the job's and the comment's) are given it."""
    import yaml as _yaml

    job = _yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    runs = [s["run"] for j in job.values() for s in j.get("steps", []) if "preflight summary" in str(s.get("run"))]
    assert len(runs) == 2 and all("--expect $stacks" in r for r in runs), runs
    for script in runs:
        line = next(ln.strip() for ln in script.splitlines() if ln.strip().startswith("stacks="))
        got = subprocess.run(["bash", "-c", f'{line}; echo $stacks'], cwd=ROOT, capture_output=True, text=True, check=True)
        want = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
        assert got.stdout.split() == want, got.stdout
