"""The CI workflows' Pulumi commands run against the built CLI (issue 36 item 4): every `pulumi/actions` step
and every `pulumi ...` line of .github/workflows/*.yml, read from the YAML (tests/workflow_commands.py turns
the action's inputs into the CLI invocations the pinned action makes), with the workflow's expressions
evaluated for each `matrix.stack`, run by the CLI `make engine-build` builds, offline: a file backend, a
passphrase, a PULUMI_HOME of the test's own, no update check, no plugin download. So a workflow cannot call a
flag, a stack, a config key or a path that the CLI refuses.

What differs from CI, and why: the login goes to the test's file backend (CI logs in to Pulumi Cloud with
PULUMI_ACCESS_TOKEN), the stacks are created first (they exist in CI's backend), secrets are stand-in values,
and the CLI is v3.259.0 (the release the Go module proxy serves; the workflows install 3.272.0). A command that
runs the program (preview, up) runs it for real once per workflow, on gcp-prod: the CLI reads the project, the
stack file and its config, loads the policy pack with its config, runs the program and the pack, and stops at
the first GCP resource, the Google provider being the one plugin that cannot be built here. The other stacks'
program commands differ from gcp-prod's only in `--stack`, which the test checks, and each stack's `stack
select` and `config set-all` run for real."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import workflow_commands as wc
from tests.conftest import ROOT
from tests.test_rehearsal_engine import _engine_bin, _offline_env

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
REAL_RUN_STACK = "gcp-prod"
# The one error a program command may end with here: a cloud provider plugin the Go module proxy does not serve.
MISSING_CLOUD_PLUGIN = re.compile(r"^error: no resource plugin 'pulumi-resource-(gcp|aws|linode|tls|random|command|docker-build)' "
                                  r"found in the workspace at version v[\d.]+ or on your \$PATH$")
POLICY_PACK = "gpu-platform-guardrails"


def _project(tmp_path: Path, root: Path = ROOT) -> Path:
    """A copy of the project as a checkout holds it: its stack files copied (`config set-all` writes them),
    everything else linked, and the program's virtualenv (.venv) as the workflows build it."""
    project = tmp_path / "project"
    project.mkdir()
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    for top in sorted({p.split("/", 1)[0] for p in tracked}):
        if top == ".venv":
            continue
        if top == "stacks":
            shutil.copytree(root / top, project / top)
        elif top == "Pulumi.yaml":
            shutil.copy(root / top, project / top)
        else:
            (project / top).symlink_to(root / top)
    (project / ".venv").symlink_to((root / ".venv").resolve())
    return project


def _env(tmp_path: Path, project: Path) -> dict[str, str]:
    env = _offline_env(tmp_path, _engine_bin())
    # preview.yml puts the program's virtualenv first on PATH: the policy pack runs on that python.
    env["PATH"] = f"{project / '.venv' / 'bin'}:{env['PATH']}"
    return env


def _cli(argv: list[str], env: dict, project: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(_engine_bin() / "pulumi"), *argv], env=env, cwd=project, capture_output=True,
                          text=True, timeout=timeout)


def _errors(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("error:")]


def check_step(step: wc.PulumiStep, env: dict, project: Path, real_run: bool, created: set[str]) -> list[str]:
    """What the CLI refused of one step's invocations, as messages naming the step ([] if it took them all).
    Program commands run only when `real_run`: then their only allowed error is a missing cloud plugin, and a
    policy pack they name must have run."""
    problems = []
    if step.stack is not None and step.stack not in created:
        proc = _cli(["stack", "init", step.stack, "--non-interactive"], env, project)  # CI's backend has it
        if proc.returncode == 0:
            created.add(step.stack)
    if real_run:
        for script, step_env in wc.writers_of(step):
            proc = subprocess.run(["bash", "-e", "-c", script], cwd=project, env={**env, **step_env},
                                  capture_output=True, text=True, timeout=300)
            if proc.returncode != 0:
                problems.append(f"{step.name}: the step writing {step.files_read} failed:\n{proc.stderr[-2000:]}")
    for inv in step.invocations:
        if inv.runs_program and not real_run:
            continue
        proc = _cli(inv.argv, env, project, timeout=600)
        out = proc.stdout + proc.stderr
        said = f"{inv.source}: `pulumi {' '.join(inv.argv)}`"
        if inv.runs_program:
            others = [e for e in _errors(out) if not MISSING_CLOUD_PLUGIN.match(e)]
            if others or (proc.returncode != 0 and not _errors(out)):
                problems.append(f"{said} was refused (exit {proc.returncode}):\n" + "\n".join(others)
                                + f"\n--- the output's end:\n{out[-3000:]}")
                continue
            packs = [inv.argv[i + 1] for i, a in enumerate(inv.argv) if a == "--policy-pack"]
            for pack in packs:
                # preview's table ("<name>|local|<path>  <version>"), up's summary ("<name>@v<version> (local: <path>)")
                if not re.search(rf"{POLICY_PACK}(\|local\|| *@v[\d.]+(?:-[\w.]+)? \(local: ){re.escape(pack)}\b", out):
                    problems.append(f"{said}: the policy pack {pack} did not run:\n{out[-3000:]}")
        elif proc.returncode != 0:
            problems.append(f"{said} exited {proc.returncode}:\n{out[-3000:]}")
    return problems


def _program_argv_modulo_stack(step: wc.PulumiStep) -> list[list[str]]:
    return [[a for a in inv.argv if a != step.stack] for inv in step.invocations if inv.runs_program]


@dataclass
class Checked:
    problems: list[str]
    steps: list[wc.PulumiStep]
    env: dict[str, str] = field(default_factory=dict)
    project: Path | None = None


def check_workflow(path: Path, tmp_path: Path, root: Path = ROOT, stacks: set[str] | None = None,
                   real_runs: bool = True) -> Checked:
    """Every CLI step of one workflow, each matrix stack (or those in `stacks`), in a project copy and backend
    of its own; the program commands run for real once per step when `real_runs`."""
    try:
        steps = wc.pulumi_steps(path, f"file://{tmp_path / 'state'}")  # _offline_env's backend
    except wc.WorkflowCommandError as exc:
        return Checked([str(exc)], [])
    steps = [s for s in steps if stacks is None or s.stack in stacks]
    if not steps:
        return Checked([], [])
    tmp_path.mkdir(parents=True)
    project = _project(tmp_path, root)
    env = _env(tmp_path, project)
    assert env["PULUMI_BACKEND_URL"] == f"file://{tmp_path / 'state'}"
    problems, created = [], set()
    by_job: dict[str, list[wc.PulumiStep]] = {}
    for step in steps:
        by_job.setdefault(f"{step.job}#{step.index}", []).append(step)
    for group in by_job.values():
        real = next((s for s in group if s.stack == REAL_RUN_STACK), group[0])
        shapes = {str(_program_argv_modulo_stack(s)) for s in group}
        if len(shapes) > 1:
            problems.append(f"{group[0].name}: the program commands differ between stacks beyond --stack; run each")
        for step in group:
            problems += check_step(step, env, project, real_runs and step is real, created)
    return Checked(problems, steps, env, project)


@pytest.fixture(scope="module")
def engine():
    return _engine_bin()


@pytest.mark.rehearsal
def test_every_workflow_pulumi_command_is_accepted_by_the_built_cli(engine, tmp_path):
    """Runs no control plane, only the built CLI and language host: each workflow in a thread of its own."""
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(WORKFLOWS)) as pool:
        results = dict(zip(WORKFLOWS, pool.map(lambda w: check_workflow(w, tmp_path / w.stem), WORKFLOWS)))
    problems = [p for checked in results.values() for p in checked.problems]
    assert not problems, "\n\n".join(problems)
    steps = {w.name: checked.steps for w, checked in results.items()}
    # What the workflows run today, so that a step this test stopped seeing is noticed: preview, drift and deploy
    # each run the CLI for every stack.
    shipped = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))
    from tests.test_ci import drift_stacks  # drift.yml: all but the `cloud: kubernetes` stacks (docs/ci.md, "Drift")

    for name, command in (("preview.yml", "preview"), ("drift.yml", "preview"), ("deploy.yml", "up")):
        assert sorted(s.stack for s in steps[name]) == (drift_stacks() if name == "drift.yml" else shipped), name
        assert all(s.invocations[-1].argv[0] == command for s in steps[name]), name
    # config-map: a Linode stack's read-only token went in as a secret.
    preview = results[ROOT / ".github" / "workflows" / "preview.yml"]
    out = _cli(["config", "--stack", "linode-dev", "--json"], preview.env, preview.project)
    assert '"linode:token"' in out.stdout and '"secret": true' in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - t0 < 300


def _planted(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (ROOT / ".github" / "workflows" / name).read_text()
    assert old in text, f"{name} no longer holds {old!r}: plant elsewhere"
    path = tmp_path / "workflows" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.rehearsal
def test_a_flag_the_cli_refuses_fails_the_check(engine, tmp_path):
    """Runs no control plane, only the built CLI. A `run:` line with a misspelt flag, and the action given a
    policy pack path that holds no pack: both refused by the CLI, named with their workflow and step."""
    step_line = "      - name: The pull request's comment, as text (comment.yml posts it)\n"
    planted = _planted(tmp_path, "preview.yml", step_line,
                       "      - name: Stack outputs\n        env:\n          STACK: ${{ matrix.stack }}\n"
                       "        run: pulumi stack output --show-secret --stack \"$STACK\"\n" + step_line)
    problems = check_workflow(planted, tmp_path / "flag", stacks={"onprem-dev"}, real_runs=False).problems
    assert problems and all("unknown flag: --show-secret" in p for p in problems), problems
    assert "preview.yml job preview step" in problems[0] and "(Stack outputs)" in problems[0]


@pytest.mark.rehearsal
def test_a_policy_pack_path_the_cli_refuses_fails_the_check(engine, tmp_path):
    """Runs no control plane, only the built CLI and language host."""
    planted = _planted(tmp_path, "drift.yml", "          refresh: true\n",
                       "          refresh: true\n          policyPacks: gpu_platform/policy\n")
    problems = check_workflow(planted, tmp_path / "path", stacks={REAL_RUN_STACK}).problems
    assert len(problems) == 1 and 'failed to load Pulumi policy project located at "gpu_platform/policy"' in problems[0], problems


@pytest.mark.rehearsal
def test_a_project_config_key_the_cli_requires_of_every_stack_fails_the_check(engine, tmp_path):
    """Runs no control plane, only the built CLI. Pulumi.yaml typing an optional key without a default (the
    defect nameSuffix had: the CLI requires it, so no shipped stack could be previewed)."""
    root = tmp_path / "root"
    root.mkdir()
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for top in {p.split("/", 1)[0] for p in tracked} - {"Pulumi.yaml"}:
        (root / top).symlink_to(ROOT / top)
    (root / ".venv").symlink_to((ROOT / ".venv").resolve())
    text = (ROOT / "Pulumi.yaml").read_text()
    (root / "Pulumi.yaml").write_text(text.replace("config:\n", "config:\n  nameSuffix:\n    type: string\n", 1))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    problems = check_workflow(ROOT / ".github" / "workflows" / "drift.yml", tmp_path / "key", root,
                              stacks={REAL_RUN_STACK}).problems
    assert len(problems) == 1 and "Stack 'gcp-prod' is missing configuration value 'nameSuffix'" in problems[0], problems


def test_an_action_input_the_test_does_not_translate_is_refused(tmp_path):
    planted = _planted(tmp_path, "deploy.yml", "          command: up\n", "          command: up\n          refresh-only: true\n")
    with pytest.raises(wc.WorkflowCommandError, match=r"deploy.yml job up step \d+ .*refresh-only are not translated"):
        wc.pulumi_steps(planted, "file:///nowhere")


def test_the_config_map_expression_is_evaluated_per_stack():
    steps = {s.stack: s for s in wc.pulumi_steps(ROOT / ".github" / "workflows" / "deploy.yml", "file:///x")}
    linode = next(i.argv for i in steps["linode-dev"].invocations if i.argv[:2] == ["config", "set-all"])
    assert f"linode:token={wc.secret_standin('LINODE_DEPLOY_TOKEN')}" in linode and linode.count("--secret") == 4
    onprem = next(i.argv for i in steps["onprem-dev"].invocations if i.argv[:2] == ["config", "set-all"])
    assert f"checkpoint-store:accessKeyId={wc.secret_standin('CHECKPOINT_ACCESS_KEY_ID')}" in onprem
    up = steps["gcp-prod"].invocations[-1].argv
    assert up[:3] == ["up", "--yes", "--skip-preview"] and up[-3:] == ["--stack", "gcp-prod", "--non-interactive"]
    assert ["--policy-pack", "gpu_platform/policies", "--policy-pack-config", "policy-config.json"] == \
        up[up.index("--policy-pack"):up.index("--policy-pack") + 4]
    ctx = wc.Contexts({"stack": "a"}, "here")
    assert wc.evaluate("vars.X || 'd'", ctx) == "d" and wc.evaluate("!startsWith(matrix.stack, 'A')", ctx) is False
    assert wc.substitute("x-${{ format('{{{0}}}', matrix.stack) }}", ctx) == "x-{a}"
    with pytest.raises(wc.WorkflowCommandError, match="github.event_name"):
        wc.evaluate("github.event_name == 'push'", ctx)
