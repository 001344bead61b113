"""The CI files a user relies on: workflows valid against the GitHub workflow schema, .ci/run calling
the README's test command, and the README's first two commands being the ones that work."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_workflow_passes_the_github_workflows_schema(workflow):
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          str(workflow)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps: nope\n")
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          str(bad)], capture_output=True, text=True)
    assert run.returncode != 0


def test_workflows_preflight_and_preview_every_shipped_stack():
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    for name in ("ci.yml", "preview.yml"):
        doc = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
        job = next(iter(doc["jobs"].values())) if name == "preview.yml" else doc["jobs"]["preflight"]
        assert sorted(job["strategy"]["matrix"]["stack"]) == stacks, name


def test_preview_runs_only_for_same_repository_pull_requests():
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "preview.yml").read_text())
    job = doc["jobs"]["preview"]
    assert job["if"] == "github.event.pull_request.head.repo.full_name == github.repository"
    step = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert step["with"]["command"] == "preview" and step["with"]["comment-on-pr"] is True


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```(?:sh|bash|console)?\n(.*?)```", text, re.S)
    assert block, "README starts with a code block of the two commands"
    return [line.strip() for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_readme_opens_with_exactly_the_two_commands_and_ci_runs_the_test_one():
    commands = readme_commands()
    assert len(commands) == 2, commands
    preflight_cmd, test_cmd = commands
    assert "preflight" in preflight_cmd and "test" in test_cmd
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci.splitlines(), f".ci/run must run {test_cmd!r}"
