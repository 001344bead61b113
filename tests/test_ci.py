"""The CI files a user relies on: workflows valid against the GitHub workflow schema, .ci/run calling
the README's test command, and the README's first two commands being the ones that work."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ZIZMOR = str(Path(sys.executable).parent / "zizmor")  # requirements-dev.txt: the binary wheel


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


def shipped_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def workflow(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


@pytest.mark.parametrize("name", ["preview.yml", "deploy.yml", "drift.yml"])
def test_cloud_workflows_cover_every_shipped_stack(name):
    job = next(iter(workflow(name)["jobs"].values()))
    assert sorted(job["strategy"]["matrix"]["stack"]) == shipped_stacks(), name


def test_one_preflight_job_plans_every_stack_and_writes_the_summary():
    steps = workflow("ci.yml")["jobs"]["preflight"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert "make preflight-ci" in runs and any("preflight summary build" in r and "GITHUB_STEP_SUMMARY" in r for r in runs)
    makefile = (ROOT / "Makefile").read_text()
    assert "STACKS := $(patsubst stacks/Pulumi.%.yaml,%,$(wildcard stacks/Pulumi.*.yaml))" in makefile
    target = makefile.split("preflight-ci: venv", 1)[1].split("\n\n", 1)[0]
    assert "charts pull" in target and "for s in $(STACKS)" in target


def uses_lines() -> list[tuple[str, str]]:
    out = []
    for wf in WORKFLOWS:
        for line in wf.read_text().splitlines():
            line = line.strip().removeprefix("- ")
            if line.startswith("uses:"):
                out.append((wf.name, line.split("uses:", 1)[1].split("#")[0].strip()))
    return out


def test_every_action_is_pinned_by_commit_sha():
    refs = uses_lines()
    assert refs
    unpinned = [(wf, ref) for wf, ref in refs if not ref.startswith("./") and not re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref)]
    assert not unpinned, unpinned


def test_no_workflow_holds_a_long_lived_cloud_key():
    forbidden = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "GOOGLE_CREDENTIALS", "GOOGLE_APPLICATION_CREDENTIALS",
                 "credentials_json", "LINODE_TOKEN:")
    for wf in WORKFLOWS:
        text = wf.read_text()
        assert not [f for f in forbidden if f in text], wf.name
    for name in ("preview.yml", "deploy.yml", "drift.yml"):
        job = next(iter(workflow(name)["jobs"].values()))
        assert job["permissions"]["id-token"] == "write", name  # OIDC to AWS and GCP
        assert "environment" in job, name  # secrets live in a GitHub Environment per stack


def test_pulumi_cli_matches_the_sdk_pin():
    sdk = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    versions = re.findall(r"pulumi-version:\s*(\S+)", "".join(wf.read_text() for wf in WORKFLOWS))
    assert versions and set(versions) == {sdk}


def test_zizmor_finds_nothing_in_the_workflows():
    """zizmor (static analysis for GitHub Actions, offline audits): unpinned actions, excessive
    permissions, template injection, credential persistence, Dependabot cooldown."""
    run = subprocess.run([ZIZMOR, "--offline", "--no-progress", str(ROOT / ".github")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_zizmor_catches_an_unpinned_action(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\npermissions: {}\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps:\n"
                   "      - uses: actions/checkout@v4\n        with: {persist-credentials: false}\n")
    run = subprocess.run([ZIZMOR, "--offline", "--no-progress", str(bad)], capture_output=True, text=True)
    assert run.returncode != 0 and "unpinned" in run.stdout + run.stderr


def test_dependabot_config_is_valid():
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.dependabot",
                          str(ROOT / ".github" / "dependabot.yml")], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


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
