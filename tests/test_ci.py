"""The CI files a user relies on: workflows valid against the GitHub workflow schema, .ci/run calling
the README's test command, and the README's first two commands being the ones that work."""

from __future__ import annotations

import copy
import fnmatch
import os
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
ZIZMOR = str(Path(sys.executable).parent / "zizmor")  # requirements-dev.txt: the binary wheel


@pytest.fixture(scope="module")
def workflow_schema_check(tmp_path_factory) -> dict:
    """check-jsonschema's verdict on every workflow and on a broken one, in one run (--output-format json):
    which files passed, each error with its file. One process instead of one per file (0.4 CPU-s each)."""
    bad = tmp_path_factory.mktemp("schema") / "bad.yml"
    bad.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps: nope\n")
    run = subprocess.run([sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows",
                          "--output-format", "json", "-v", *map(str, WORKFLOWS), str(bad)], capture_output=True, text=True)
    assert run.returncode in (0, 1), run.stdout + run.stderr  # 1: a file failed (the broken one, at least)
    return {"bad": str(bad), "run": run, **json.loads(run.stdout)}


def _schema_verdict(result: dict, path: str) -> tuple[bool, list]:
    errors = [e for e in result["errors"] + result["parse_errors"] if e.get("filename") == path]
    return path in result["successes"] and not errors, errors


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=[w.name for w in WORKFLOWS])
def test_workflow_passes_the_github_workflows_schema(workflow, workflow_schema_check):
    passed, errors = _schema_verdict(workflow_schema_check, str(workflow))
    assert passed, errors or workflow_schema_check["run"].stdout + workflow_schema_check["run"].stderr


def test_the_schema_check_rejects_a_broken_workflow(workflow_schema_check):
    passed, errors = _schema_verdict(workflow_schema_check, workflow_schema_check["bad"])
    assert not passed and errors and workflow_schema_check["run"].returncode != 0


def shipped_stacks() -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))


def stack_cloud(stack: str) -> str:
    return (yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"] or {})["gpu-platform:cloud"]


def drift_stacks() -> list[str]:
    """What drift.yml checks: every shipped stack but the `cloud: kubernetes` ones (docs/ci.md, "Drift": their
    provider's kubeconfig is an input, the read-only identity's differs from the deploy's)."""
    return [s for s in shipped_stacks() if stack_cloud(s) != "kubernetes"]


def workflow(name: str) -> dict:
    return yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())


CLOUD_WORKFLOWS = ["preview.yml", "deploy.yml", "drift.yml"]


def stack_matrix_problem(name: str, listed: list[str], shipped: list[str]) -> str | None:
    """What a user must edit when a workflow's stack list and stacks/Pulumi.*.yaml differ (docs/ci.md)."""
    missing, extra = sorted(set(shipped) - set(listed)), sorted(set(listed) - set(shipped))
    if not missing and not extra:
        return None
    files = ", ".join(f".github/workflows/{w}" for w in CLOUD_WORKFLOWS)
    left_out = [s for s in extra if name == "drift.yml" and s in shipped_stacks()]  # cloud: kubernetes stacks
    extra = [s for s in extra if s not in left_out]
    said = [f"lacks {missing}" if missing else "", f"lists {extra}, which have no stacks/Pulumi.<stack>.yaml" if extra else "",
            f"lists {left_out}, `cloud: kubernetes` stacks it leaves out (docs/ci.md, \"Drift\")" if left_out else ""]
    return (f".github/workflows/{name}: its `matrix.stack` {' and '.join(s for s in said if s)}. The stack list is "
            f"written out in three files; edit each: {files} (drift.yml: not the `cloud: kubernetes` stacks; "
            f"docs/ci.md, \"Adding a stack\")")


@pytest.mark.parametrize("name", CLOUD_WORKFLOWS)
def test_cloud_workflows_cover_every_shipped_stack(name):
    job = next(iter(workflow(name)["jobs"].values()))
    expected = drift_stacks() if name == "drift.yml" else shipped_stacks()
    problem = stack_matrix_problem(name, job["strategy"]["matrix"]["stack"], expected)
    assert problem is None, problem


def test_a_missing_stack_names_the_three_files_to_edit():
    problem = stack_matrix_problem("preview.yml", ["aws-prod"], ["aws-prod", "team-x"])
    assert "lacks ['team-x']" in problem and "Adding a stack" in problem
    assert all(f".github/workflows/{w}" in problem for w in CLOUD_WORKFLOWS)
    assert "lists ['old']" in stack_matrix_problem("deploy.yml", ["aws-prod", "old"], ["aws-prod"])
    assert stack_matrix_problem("drift.yml", ["b", "a"], ["a", "b"]) is None
    assert "lists ['onprem-dev'], `cloud: kubernetes` stacks it leaves out" in stack_matrix_problem(
        "drift.yml", [*drift_stacks(), "onprem-dev"], drift_stacks())


def test_one_preflight_job_plans_every_stack_and_writes_the_summary():
    steps = workflow("ci.yml")["jobs"]["preflight"]["steps"]
    runs = [s.get("run", "") for s in steps]
    assert 'make preflight-ci BASE="$BASE"' in runs and any("preflight summary build" in r and "GITHUB_STEP_SUMMARY" in r for r in runs)
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
    sdk = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.in").read_text(), re.M).group(1)
    versions = re.findall(r"pulumi-version:\s*(\S+)", "".join(wf.read_text() for wf in WORKFLOWS))
    assert versions and set(versions) == {sdk}


def test_zizmor_pedantic_finds_nothing_in_the_workflows():
    """zizmor (static analysis for GitHub Actions, offline audits) at its strictest: unpinned actions,
    excessive or undocumented permissions, template injection, credential persistence, concurrency."""
    run = subprocess.run([ZIZMOR, "--offline", "--no-progress", "--pedantic", str(ROOT / ".github")],
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
    # The preview runs the pull request's code: it leaves its comment as an artifact, comment.yml posts it.
    assert step["with"]["command"] == "preview" and step["with"]["comment-on-pr"] is False
    assert "github-token" not in step["with"] and "pull-requests" not in job["permissions"]
    upload = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "pr-comment-preview-${{ matrix.stack }}" and upload["if"] == "always()"


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


# --- The trust model docs/ci.md states: no pull request reaches a deploy credential --------------------

# Secrets and variables that can change a cloud or a stack: they may live only in the `<stack>` environments.
DEPLOY_CREDENTIALS = ("PULUMI_DEPLOY_TOKEN", "LINODE_DEPLOY_TOKEN", "LINODE_CLUSTER_TOKEN", "LINODE_NODE_GROUPS_TOKEN",
                      "LINODE_REGISTRY_PASSWORD",
                      "AWS_DEPLOY_ROLE_ARN", "GCP_DEPLOY_SERVICE_ACCOUNT", "KUBECONFIG_DEPLOY")
SECRET_REF = re.compile(r"\$\{\{[^}]*?\b(?:secrets|vars)\.([A-Za-z_][A-Za-z0-9_]*)")


def triggers(doc: dict) -> set[str]:
    on = doc.get("on", doc.get(True))  # PyYAML reads a bare `on:` key as True
    return {on} if isinstance(on, str) else set(on or ())


def jobs_a_pull_request_starts(doc: dict) -> list[tuple[str, dict]]:
    """Jobs a pull_request (or pull_request_target) event runs: those whose `if:` does not rule it out."""
    if not triggers(doc) & {"pull_request", "pull_request_target"}:
        return []
    out = []
    for name, job in doc["jobs"].items():
        cond = str(job.get("if", ""))
        if "startsWith(github.ref, 'refs/tags/v')" in cond and not cond.lstrip("${ ").startswith("!"):
            continue  # tag-only
        if "github.event_name == 'push'" in cond:
            continue
        out.append((name, job))
    return out


def trust_problems(docs: dict[str, dict]) -> list[str]:
    """What breaks docs/ci.md's rule in these workflows (file name -> parsed workflow)."""
    problems = []
    for wf, doc in docs.items():
        if doc.get("permissions") != {}:
            problems.append(f"{wf}: workflow-level permissions must be {{}} (each job lists its own)")
        text = yaml.safe_dump(doc)
        if "secrets.PULUMI_ACCESS_TOKEN" in text:
            problems.append(f"{wf}: reads the repository-level PULUMI_ACCESS_TOKEN")
        pr_jobs = dict(jobs_a_pull_request_starts(doc))
        for name, job in doc["jobs"].items():
            env = job.get("environment")
            env_name = env.get("name") if isinstance(env, dict) else env
            refs = set(SECRET_REF.findall(yaml.safe_dump(job)))
            deploy_refs = sorted(refs & set(DEPLOY_CREDENTIALS))
            perms = job.get("permissions")
            if perms is None:
                problems.append(f"{wf}:{name}: no job-level permissions")
            if name in pr_jobs:
                writes = sorted(k for k, v in (perms or {}).items() if v == "write" and k != "id-token")
                if writes:
                    # It runs the pull request's code: a write token there is the pull request's (issue 37:
                    # the comment job ran `make venv` and the summary with `pull-requests: write`).
                    problems.append(f"{wf}:{name}: a pull request's job holds write permissions {writes}")
                if deploy_refs:
                    problems.append(f"{wf}:{name}: a pull request's job reads deploy credentials {deploy_refs}")
                if env_name and not str(env_name).startswith("preview-"):
                    problems.append(f"{wf}:{name}: a pull request's job uses environment {env_name}")
                if (perms or {}).get("packages") == "write":
                    problems.append(f"{wf}:{name}: a pull request's job may write packages")
            elif deploy_refs and not (env_name and not str(env_name).startswith(("preview-", "drift-"))):
                problems.append(f"{wf}:{name}: reads deploy credentials {deploy_refs} outside a deploy environment")
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("pulumi/actions@") and step["with"].get("policyPacks"):
                    if "policyPackConfigs" not in step["with"]:
                        problems.append(f"{wf}:{name}: runs the policy pack without the stack's policy config")
                    runs = [s.get("run", "") for s in job["steps"]]
                    if not any("preflight policy-config" in r and step["with"].get("policyPackConfigs", "?") in r for r in runs):
                        problems.append(f"{wf}:{name}: the policy config is not the one `preflight policy-config` writes")
    return problems + runner_sharing_problems(docs)


# A GitHub-hosted runner is a fresh VM per job; a self-hosted one keeps whatever a job leaves on it.
GITHUB_HOSTED_LABEL = re.compile(r"(ubuntu|windows|macos)-[\w.-]+")
RUNS_ON_VAR = re.compile(r"\bvars\.([A-Za-z_][A-Za-z0-9_]*)")


def runner_of(job: dict) -> tuple[set[str], set[str]]:
    """(repository variables a job's `runs-on` reads, self-hosted labels or group it names literally)."""
    runs_on = job.get("runs-on", "")
    variables = set(RUNS_ON_VAR.findall(yaml.safe_dump(runs_on)))
    if isinstance(runs_on, dict):
        literal = [*([runs_on["group"]] if "group" in runs_on else []), *([runs_on.get("labels")] if isinstance(
            runs_on.get("labels"), str) else runs_on.get("labels") or [])]
    else:
        literal = [runs_on] if isinstance(runs_on, str) else list(runs_on)
    labels = {str(x) for x in literal if "${{" not in str(x) and not GITHUB_HOSTED_LABEL.fullmatch(str(x))}
    return variables, labels


def runner_sharing_problems(docs: dict[str, dict]) -> list[str]:
    """A job that runs pull-request code must not share a runner with a job that holds secrets (deploy.yml's
    deploy credentials, drift.yml's preview tokens of every stack): on a persistent self-hosted runner the
    pull request could leave a process or a file behind that reads them (docs/ci.md, "Runners")."""
    pr_jobs, secret_jobs = [], []
    for wf, doc in docs.items():
        started_by_pr = dict(jobs_a_pull_request_starts(doc))
        for name, job in doc["jobs"].items():
            if name in started_by_pr:
                pr_jobs.append((f"{wf}:{name}", runner_of(job)))
            else:
                secrets = set(re.findall(r"\bsecrets\.([A-Za-z_][A-Za-z0-9_]*)", yaml.safe_dump(job))) - {"GITHUB_TOKEN"}
                if secrets:
                    secret_jobs.append((f"{wf}:{name}", runner_of(job), sorted(secrets)))
    problems = []
    for pr_job, (pr_vars, pr_labels) in pr_jobs:
        for secret_job, (s_vars, s_labels), secrets in secret_jobs:
            shared_vars = sorted(pr_vars & s_vars)
            # A runner registered with the larger label set also takes jobs asking for a subset of them.
            nested = pr_labels and s_labels and (pr_labels <= s_labels or s_labels <= pr_labels)
            if shared_vars or nested:
                via = f"variables {shared_vars}" if shared_vars else f"labels {sorted(pr_labels)} / {sorted(s_labels)}"
                problems.append(f"{pr_job} runs pull-request code on the runner ({via}) that {secret_job} uses with "
                                f"secrets {secrets}: give each its own runner variable (docs/ci.md)")
    return problems


def all_workflows() -> dict[str, dict]:
    return {wf.name: yaml.safe_load(wf.read_text()) for wf in WORKFLOWS}


def test_no_pull_request_reaches_a_deploy_credential_and_deploy_enforces_the_policy_config():
    assert not trust_problems(all_workflows())


@pytest.mark.parametrize("name", CLOUD_WORKFLOWS)
def test_a_repository_still_setting_pulumi_runs_on_is_told_of_the_split(name):
    """PULUMI_RUNS_ON is no longer read: a repository that set it would silently run on GitHub-hosted runners."""
    job = next(iter(workflow(name)["jobs"].values()))
    own = RUNS_ON_VAR.findall(str(job["runs-on"]))
    assert own and own != ["PULUMI_RUNS_ON"], job["runs-on"]
    first = job["steps"][0]
    assert first["if"] == f"vars.PULUMI_RUNS_ON != '' && vars.{own[0]} == ''" and "exit 1" in first["run"], first


def _pulumi_step(job: dict) -> dict:
    return next(s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@"))


def test_the_trust_check_catches_each_way_around(tmp_path):
    """Each edit a pull request could make to walk around a gate is caught."""
    def broken(name, edit):
        docs = copy.deepcopy(all_workflows())
        edit(docs[name])
        return trust_problems(docs)

    def deploy_token_in_preview(doc):
        _pulumi_step(doc["jobs"]["preview"])["env"]["PULUMI_ACCESS_TOKEN"] = "${{ secrets.PULUMI_DEPLOY_TOKEN }}"
    assert any("deploy credentials" in p for p in broken("preview.yml", deploy_token_in_preview))

    def repository_token(doc):
        _pulumi_step(doc["jobs"]["preview"])["env"]["PULUMI_ACCESS_TOKEN"] = "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    assert any("repository-level" in p for p in broken("preview.yml", repository_token))

    def deploy_environment(doc):
        doc["jobs"]["preview"]["environment"] = "${{ matrix.stack }}"
    assert any("uses environment" in p for p in broken("preview.yml", deploy_environment))

    def no_policy_config(doc):
        del next(s for s in doc["jobs"]["up"]["steps"] if "pulumi/actions@" in str(s.get("uses")))["with"]["policyPackConfigs"]
    assert any("without the stack's policy config" in p for p in broken("deploy.yml", no_policy_config))

    def packages_for_pull_requests(doc):
        doc["permissions"] = {"contents": "read", "packages": "write"}
        doc["jobs"]["build"]["permissions"]["packages"] = "write"
    found = broken("controller-image.yml", packages_for_pull_requests)
    assert any("may write packages" in p for p in found) and any("must be {}" in p for p in found)

    def comment_from_the_pull_request(doc):
        doc["jobs"]["preview"]["permissions"]["pull-requests"] = "write"
    assert any("holds write permissions ['pull-requests']" in p for p in broken("preview.yml", comment_from_the_pull_request))

    def preflight_comment_job(doc):
        doc["jobs"]["comment"] = {"runs-on": "ubuntu-24.04", "permissions": {"contents": "read", "pull-requests": "write"},
                                  "steps": [{"run": "make venv"}]}
    assert any("ci.yml:comment" in p and "write permissions" in p for p in broken("ci.yml", preflight_comment_job))

    def preview_on_the_deploy_runner(doc):
        doc["jobs"]["preview"]["runs-on"] = "${{ fromJSON(vars.PULUMI_DEPLOY_RUNS_ON) }}"
    assert any("deploy.yml:up" in p and "PULUMI_DEPLOY_RUNS_ON" in p for p in broken("preview.yml", preview_on_the_deploy_runner))

    def preview_on_the_drift_runner(doc):
        doc["jobs"]["preview"]["runs-on"] = "${{ fromJSON(vars.PULUMI_DRIFT_RUNS_ON || '\"ubuntu-24.04\"') }}"
    assert any("drift.yml:drift" in p for p in broken("preview.yml", preview_on_the_drift_runner))

    def literal_labels(docs_edit):
        docs = copy.deepcopy(all_workflows())
        docs["preview.yml"]["jobs"]["preview"]["runs-on"] = ["self-hosted", "gpu-admin"]
        docs["deploy.yml"]["jobs"]["up"]["runs-on"] = docs_edit
        return runner_sharing_problems(docs)
    # A deploy runner labelled self-hosted+gpu-admin+deploy still takes a job asking for self-hosted+gpu-admin.
    assert any("deploy.yml:up" in p for p in literal_labels(["self-hosted", "gpu-admin", "deploy"]))
    assert not [p for p in literal_labels(["self-hosted", "gpu-deploy"]) if "deploy.yml:up" in p]
    assert not [p for p in literal_labels("ubuntu-24.04") if "deploy.yml:up" in p]


def test_stack_files_hold_no_credentials():
    """A preview token can decrypt whatever a stack file encrypts: no provider credential lives there."""
    for path in sorted((ROOT / "stacks").glob("Pulumi.*.yaml")):
        config = yaml.safe_load(path.read_text()).get("config") or {}
        creds = [k for k in config if k.split(":", 1)[0] != "gpu-platform" and "token" in k.lower() or
                 (isinstance(config[k], dict) and "secure" in config[k])]
        assert not creds, f"{path.name}: credentials {creds} belong in the deploy environment (docs/ci.md)"


def test_docs_ci_says_what_every_token_the_workflows_read_can_do():
    table = (ROOT / "docs" / "ci.md").read_text().split("What each token can do:", 1)[1].split("\n\n", 2)[1]
    rows = {line.split("|")[1].strip().strip("`"): line for line in table.splitlines() if line.startswith("| `")}
    used = {ref for wf in WORKFLOWS for ref in SECRET_REF.findall(wf.read_text())}
    used -= {"PULUMI_RUNS_ON", "PULUMI_PREVIEW_RUNS_ON", "PULUMI_DEPLOY_RUNS_ON", "PULUMI_DRIFT_RUNS_ON", "AWS_REGION",
             "GCP_WORKLOAD_IDENTITY_PROVIDER"}  # not credentials
    missing = sorted(used - set(rows))
    assert not missing, f"docs/ci.md's token table lacks {missing}"
    for name, row in rows.items():
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert len(cells) == 5 and cells[3] and cells[4], f"{name}: say what it can and cannot do"


@pytest.mark.parametrize("ref,sha,tag", [("refs/pull/12/merge", "0123456789abcdef0123", "sha-0123456789ab"),
                                         ("refs/heads/main", "fedcba9876543210fedc", "sha-fedcba987654"),
                                         ("refs/tags/v0.2.0", "0123456789abcdef0123", "0.2.0")])
def test_the_training_image_tag_is_valid_on_every_event(ref, sha, tag):
    run = subprocess.run(["bash", str(ROOT / ".github" / "image-tag.sh")], capture_output=True, text=True,
                         env={"GITHUB_REF": ref, "GITHUB_SHA": sha, "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0 and run.stdout.strip() == f"version={tag}", run.stdout + run.stderr
    doc = workflow("training-image.yml")
    for job in doc["jobs"].values():
        tags = [s["with"]["tags"] for s in job["steps"] if "build-push-action" in str(s.get("uses"))]
        assert tags and all("steps.tag.outputs.version" in t for t in tags)
        assert any(".github/image-tag.sh" in s.get("run", "") for s in job["steps"])


def test_no_virtualenv_or_link_to_one_is_tracked():
    """Links to side virtualenvs once got committed: a fresh clone's `make test` then failed creating
    .venv-checkov ("File exists") before running any test."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "-s"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    offenders = [line.split("\t", 1)[1] for line in tracked.splitlines()
                 if line.split("\t", 1)[1].split("/")[0].startswith(".venv") or line.startswith("120000")]
    assert not offenders, f"tracked virtualenvs or symbolic links: {offenders}"


# --- .ci/run on a machine short of disk (stop 29's CI ran out of it while pip unpacked torch) ----------

def _run_ci_script(tmp_path, free_gib: int, failing_make: str = "") -> list[str]:
    """.ci/run with make, go and df replaced by recorders: what it runs, in order, and with which pip cache.
    With failing_make, the make of that first target fails, and so must .ci/run."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    repo = tmp_path / "repo"
    (repo / ".ci").mkdir(parents=True)
    shutil.copy(ROOT / ".ci" / "run", repo / ".ci" / "run")
    shutil.copy(ROOT / ".ci" / "debian-tools", repo / ".ci" / "debian-tools")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    stubs = {
        "make": f'echo "make $* PIP_NO_CACHE_DIR=${{PIP_NO_CACHE_DIR:-unset}}" >> {log}; '
                f'[ "$1" != "{failing_make}" ]',
        "go": f'echo "go $*" >> {log}; [ "$1" != env ] || echo /tmp/go-build-cache',
        "df": f'echo "Filesystem 1024-blocks Used Available Capacity Mounted on"; '
              f'echo "/dev/vda 263174212 1 {free_gib * 1048576} 50% /"',
        "apt-get": f'echo "apt-get $*" >> {log}; exit 1',
    }
    # The Debian tools .ci/run checks for: present, so it installs nothing.
    for tool in ("cloud-init", "shellcheck", "openssl", "amtool", "systemd-analyze", "etcd", "etcdctl", "promtool"):
        stubs[tool] = "exit 0"
    for name, body in stubs.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "CI": "true"}
    done = subprocess.run(["bash", str(repo / ".ci" / "run")], env=env, capture_output=True, text=True, timeout=60)
    assert (done.returncode != 0) == bool(failing_make), done.stdout + done.stderr
    assert "ci timings" in done.stdout and "GiB free" in done.stdout, done.stdout
    return log.read_text().splitlines()


def test_ci_builds_go_first_and_frees_its_build_cache_when_disk_is_short(tmp_path):
    calls = _run_ci_script(tmp_path, free_gib=9)
    makes = [c for c in calls if c.startswith("make ")]
    assert makes[0].startswith("make rehearsal-build") and makes[1].startswith("make venv checkov-venv training-venv")
    assert makes[-1].startswith("make test")
    assert calls.index("go clean -cache") < calls.index(makes[1]), calls
    # A fresh clone never reuses pip's wheel cache: a second copy of torch's CUDA wheels is what filled the disk.
    assert all(c.endswith("PIP_NO_CACHE_DIR=1") for c in makes), makes


def test_ci_keeps_go_build_cache_with_room_to_spare(tmp_path):
    calls = _run_ci_script(tmp_path, free_gib=60)
    assert "go clean -cache" not in calls
    assert calls[-1].startswith("make test")


def test_ci_builds_go_beside_the_virtualenvs_with_room_for_both(tmp_path):
    """A cold run's Go build (CPU) and pip (network, disk) overlap where the disk holds both; `make test` waits
    for both, and a failed Go build fails the run."""
    calls = _run_ci_script(tmp_path, free_gib=60)
    makes = [c.split(" PIP_NO_CACHE_DIR")[0] for c in calls if c.startswith("make ")]
    assert sorted(makes[:2]) == ["make rehearsal-build", "make venv checkov-venv training-venv jupyterhub-venv"]
    assert makes[2:] == ["make test"], makes
    failing = _run_ci_script(tmp_path / "failing", free_gib=60, failing_make="rehearsal-build")
    assert not any(c.startswith("make test") for c in failing), failing


# --- GitHub CI matches .ci/run: Go, caches keyed by the locks, the two lanes, a timeout above a cold run ----

def _ci_jobs() -> dict[str, dict]:
    return yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]


def _job_running(command: str) -> dict:
    return next(job for job in _ci_jobs().values() if any(command in str(s.get("run", "")) for s in job["steps"]))


def _uses(job: dict, action: str) -> dict:
    return next(s for s in job["steps"] if str(s.get("uses", "")).startswith(action + "@"))


def test_make_check_runs_on_every_push_and_make_test_on_pull_requests_and_main():
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    on = doc.get("on", doc.get(True))
    assert "push" in on and not (on["push"] or {}).get("branches"), "make check runs on a push to any branch"
    check = _job_running("make check")
    assert "if" not in check and any("debian-tools" in str(s.get("run", "")) for s in check["steps"])
    tests = _job_running("bash .ci/run")
    assert "github.event_name == 'pull_request'" in tests["if"] and "refs/heads/main" in tests["if"]


def test_the_full_suite_job_sets_up_go_and_caches_what_the_locks_decide():
    job = _job_running("bash .ci/run")
    go = _uses(job, "actions/setup-go")["with"]
    # Each wrapper's (or overlay's) `go` line; the language host's overlay keeps upstream's go 1.25.
    wrapper_go = {tuple(int(x) for x in re.search(r"^go (\d+)\.(\d+)", p.read_text(), re.M).groups())
                  for p in (ROOT / "rehearsal" / "go").glob("*/go.mod")}
    setup = tuple(int(x) for x in str(go["go-version"]).split("."))
    assert max(wrapper_go) == setup, "setup-go gives the Go the rehearsal's wrappers ask for"
    assert go.get("cache") is True and "rehearsal/go/" in go["cache-dependency-path"]
    components = _uses(job, "actions/cache")["with"]
    assert components["path"] == "~/.cache/gpu-platform/rehearsal"
    for decides in ("rehearsal/components.lock.toml", "rehearsal/build.py", "rehearsal/go/"):
        assert decides in components["key"], f"the component cache key must hash {decides}"
    pip = _uses(job, "actions/setup-python")["with"]
    assert pip["cache"] == "pip" and "requirements*.txt" in pip["cache-dependency-path"]
    assert "examples/training/requirements.txt" in pip["cache-dependency-path"]


def test_the_full_suite_job_may_run_longer_than_a_measured_cold_run():
    """The README records a cold `.ci/run` (make bench-tests and .ci/run's phase times); a job timeout
    below it (45 minutes with no Go set-up, before) cancels every cold run."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"[Cc]old `\.ci/run`[^:\n]*: ([\d,]+) s", text)
    assert found, "the README records a cold `.ci/run` as 'Cold `.ci/run` ...: N s'"
    cold_minutes = int(found.group(1).replace(",", "")) / 60
    assert _job_running("bash .ci/run")["timeout-minutes"] >= cold_minutes * 1.25


README_CITATION = re.compile(r'README, "([^"]+)"')
SECONDS_FIGURE = re.compile(r"(?<![\w.,])(\d{1,3}(?:,\d{3})+|\d+) s\b")


def readme_section(readme: str, heading: str) -> str | None:
    """The README section under the heading `heading` (any level), up to the next heading of its level or above."""
    found = re.search(rf"^(#+) {re.escape(heading)}\s*$", readme, re.M)
    if not found:
        return None
    rest = readme[found.end():]
    end = re.search(rf"^#{{1,{len(found.group(1))}}} ", rest, re.M)
    return rest[:end.start()] if end else rest


def workflow_readme_quote_problems(workflows: dict[str, str], readme: str) -> list[str]:
    """Workflow comments that cite the README (`README, "Section"`): the section exists, and a figure in seconds
    quoted in the same sentence is one that section gives."""
    problems = []
    for name, text in workflows.items():
        comments = " ".join(line.split("#", 1)[1].strip() for line in text.splitlines() if "#" in line)
        for cite in README_CITATION.finditer(comments):
            section = readme_section(readme, cite.group(1))
            if section is None:
                problems.append(f"{name}: cites README section {cite.group(1)!r}, which the README does not have")
                continue
            sentence = re.split(r"(?<=[.;])\s", comments[:cite.start()])[-1]
            for figure in SECONDS_FIGURE.findall(sentence):
                if not re.search(rf"(?<![\d,]){re.escape(figure)} s\b", section):
                    problems.append(f"{name}: quotes {figure} s from README, {cite.group(1)!r}, which says no such figure")
    return problems


def test_workflow_comments_quote_the_readme_as_it_is():
    """Adopter review (issue 37, round 3), B: ci.yml said a cold run "summed to 4,497 s ... (README, "Test
    times")", but that README section gives 1,439 s for a cold `.ci/run`; 4,497 s is docs/testing.md's older sum."""
    readme = (ROOT / "README.md").read_text()
    texts = {wf.name: wf.read_text() for wf in WORKFLOWS}
    assert any(README_CITATION.search(t) for t in texts.values())  # the check has something to read
    assert not workflow_readme_quote_problems(texts, readme)
    old = ('    # The whole suite (what .ci/run runs) on pull requests and main. A cold run (Go components, virtualenvs,\n'
           '    # tests) summed to 4,497 s on a loaded 2-core machine (README, "Test times"); the caches below make later\n')
    assert workflow_readme_quote_problems({"ci.yml": old}, readme) == [
        "ci.yml: quotes 4,497 s from README, 'Test times', which says no such figure"]
    cold = re.search(r"[Cc]old `\.ci/run`[^:\n]*: ([\d,]+) s", readme).group(1)
    assert not workflow_readme_quote_problems({"ci.yml": old.replace("4,497", cold)}, readme)
    assert workflow_readme_quote_problems({"ci.yml": '# see README, "Test timez"\n'}, readme)


# --- issue 37 item 5: the comments are posted by a job that runs none of the pull request's code -------------

def _comment_job() -> dict:
    return workflow("comment.yml")["jobs"]["post"]


def test_the_comment_workflow_runs_no_pull_request_code_and_holds_only_what_posting_needs():
    doc = workflow("comment.yml")
    assert triggers(doc) == {"workflow_run"}
    on = doc.get("on", doc.get(True))
    assert set(on["workflow_run"]["workflows"]) == {workflow("ci.yml")["name"], workflow("preview.yml")["name"]}
    job = _comment_job()
    assert job["permissions"] == {"actions": "read", "pull-requests": "write"}
    uses = [str(s.get("uses", "")).split("@")[0] for s in job["steps"]]
    assert uses == ["actions/download-artifact", ""], "no checkout, no other action: only the artifacts, as text"
    script = job["steps"][-1]["run"]
    assert "${{" not in script, "event fields reach the script through env, never pasted into it"
    assert "make" not in script.split() and "python" not in script and "bash " not in script and "source" not in script
    # Each PR job leaves its comment as an artifact, the only thing comment.yml reads.
    names = {s["with"]["name"] for wf in ("ci.yml", "preview.yml") for j in workflow(wf)["jobs"].values()
             for s in j["steps"] if str(s.get("uses", "")).startswith("actions/upload-artifact@")}
    assert {"pr-comment-preflight", "pr-comment-preview-${{ matrix.stack }}"} <= names
    assert "comment" not in workflow("ci.yml")["jobs"]


def _post_comments(tmp_path, artifacts: dict[str, tuple[str, str]], heads: dict[str, str],
                   existing: list[dict] | None = None) -> list[str]:
    """comment.yml's script with `gh` replaced by a recorder: artifacts {kind: (pr-number, body)}, the pull
    requests' head commits {number: sha}; the run was for commit `abc`. Returns the gh calls that write."""
    import json as _json

    work = tmp_path / "work"
    for kind, (number, body) in artifacts.items():
        d = work / "comments" / f"pr-comment-{kind}"
        d.mkdir(parents=True)
        (d / "pr-number").write_text(number)
        (d / "body.md").write_text(body)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "gh.log"
    (tmp_path / "heads.json").write_text(_json.dumps(heads))
    (tmp_path / "comments.json").write_text(_json.dumps(existing or []))
    (bin_dir / "gh").write_text(f"""#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
heads = json.load(open({str(tmp_path / "heads.json")!r}))
if args[:1] == ["api"] and "/pulls/" in args[1]:
    print(heads[args[1].rsplit("/", 1)[1]]); sys.exit(0)
if "--paginate" in args:
    jq = args[args.index("--jq") + 1]
    marker = jq.split('startswith("', 1)[1].split('")', 1)[0]
    for c in json.load(open({str(tmp_path / "comments.json")!r})):
        if c["user"] == "github-actions[bot]" and c["body"].startswith(marker):
            print(c["id"])
    sys.exit(0)
body = open(args[-1].split("@", 1)[1]).read()
open({str(log)!r}, "a").write(" ".join(a for a in args if not a.startswith("body=")) + " " + json.dumps(body) + "\\n")
""")
    (bin_dir / "gh").chmod(0o755)
    script = _comment_job()["steps"][-1]["run"]
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GH_TOKEN": "t", "REPO": "o/r", "HEAD_SHA": "abc"}
    done = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return (log.read_text().splitlines() if log.exists() else []) + [f"stdout: {done.stdout}"]


def test_the_comment_script_posts_only_to_the_pull_request_whose_head_the_run_was_for(tmp_path):
    calls = _post_comments(tmp_path, {"preflight": ("7", "## Preflight"), "preview-gcp-prod": ("8", "other pr"),
                                      "Bad_Name": ("7", "x"), "preview-aws-prod": ("7; rm -rf /", "x")},
                           heads={"7": "abc", "8": "def"})
    posts = [c for c in calls if not c.startswith("stdout")]
    assert posts == ['api repos/o/r/issues/7/comments -F "<!-- gpu-platform-comment: preflight -->\\n## Preflight"'], calls
    assert "pull request #8 is at def, not abc" in calls[-1] and "skipped an artifact named Bad_Name" in calls[-1]
    assert "preview-aws-prod: no pull-request number" in calls[-1]


def test_the_comment_script_edits_its_earlier_comment_of_the_same_kind(tmp_path):
    existing = [{"id": 41, "user": "someone", "body": "<!-- gpu-platform-comment: preflight -->\\nforged"},
                {"id": 42, "user": "github-actions[bot]", "body": "<!-- gpu-platform-comment: preflight -->\\nold"}]
    calls = _post_comments(tmp_path, {"preflight": ("7", "new")}, heads={"7": "abc"}, existing=existing)
    assert calls[0].startswith("api -X PATCH repos/o/r/issues/comments/42 -F "), calls


def test_the_preflight_comment_fits_what_comment_yml_posts_and_github_takes(tmp_path):
    """ci.yml writes the pull request's comment with `summary --comment` (at most COMMENT_MAX_BYTES, cut with a
    note and its blocks closed), so comment.yml's own `head -c` after its marker line never cuts inside it, and
    the posted body stays under GitHub's 65,536 characters (issue 37 round 3 item 2)."""
    from gpu_platform.preflight import verdict

    steps = workflow("ci.yml")["jobs"]["preflight"]["steps"]
    step = next(s for s in steps if s.get("name", "").startswith("The pull request's comment"))
    assert ".venv/bin/python -m gpu_platform.preflight summary --comment build --expect $stacks > pr-comment/body.md" in step["run"]
    script = _comment_job()["steps"][-1]["run"]
    kept = int(re.search(r'head -c (\d+) "\$dir/body.md"', script).group(1))
    longest_marker = len("<!-- gpu-platform-comment: " + "k" * 64 + " -->\n")  # kinds are [a-z0-9-]{1,64}
    assert verdict.COMMENT_MAX_BYTES <= kept and longest_marker + kept <= verdict.GITHUB_COMMENT_MAX_CHARS
    docs = [verdict.document(f"stack-{i:02d}", None, 0, warnings=tuple(f"warning {j}: " + "é" * 400 for j in range(9)))
            for i in range(30)]
    body = verdict.markdown(docs, comment=True)
    assert "**The summary stops here**" in body and len(body.encode()) <= verdict.COMMENT_MAX_BYTES
    calls = _post_comments(tmp_path, {"preflight": ("7", body)}, heads={"7": "abc"})
    posted = json.loads(calls[0].split(" -F ", 1)[1])
    assert posted == "<!-- gpu-platform-comment: preflight -->\n" + body  # whole: comment.yml's cut never bites


def test_preflight_ci_compares_each_stack_the_base_planned(tmp_path):
    """`make preflight-ci BASE=DIR` (ci.yml on a pull request, after planning the base branch in base/):
    --base for each stack with a plan there; a stack new in the branch is planned alone and said so."""
    (tmp_path / "base" / "gcp-prod").mkdir(parents=True)
    (tmp_path / "base" / "gcp-prod" / "plan.json").write_text("{}")
    py = tmp_path / "py"
    py.write_text(f"#!/bin/sh\necho \"$*\" >> {tmp_path / 'calls'}\n")
    py.chmod(0o755)
    run = subprocess.run(["make", "-s", "-o", "venv", "-o", ".venv/.installed", "preflight-ci", f"PY={py}",
                          f"BASE={tmp_path / 'base'}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert f"-m gpu_platform.preflight gcp-prod --base {tmp_path / 'base'}" in calls
    assert "-m gpu_platform.preflight aws-prod" in calls
    assert f"{tmp_path / 'base'} has no plan of aws-prod (a stack new in this branch" in run.stdout
    steps = workflow("ci.yml")["jobs"]["preflight"]["steps"]
    base = next(s for s in steps if s.get("with", {}).get("path") == "base")
    assert base["with"]["ref"] == "${{ github.event.pull_request.base.sha }}"
    assert any("make -C base preflight-ci" in s.get("run", "") for s in steps)
    assert any(s.get("run") == 'make preflight-ci BASE="$BASE"' for s in steps)


def test_docs_ci_lists_the_repository_settings_the_gates_rely_on():
    """issue 37 item 5: docs/ci.md did not say to keep "Allow GitHub Actions to create and approve pull requests"
    off. The required status checks it names must be job names ci.yml really has (a renamed job would leave a
    required check that never reports, or a gate that no longer exists)."""
    text = (ROOT / "docs" / "ci.md").read_text()
    section = text.split("## Repository settings the gates rely on", 1)[1].split("\n## ", 1)[0]
    for setting in ('"Allow GitHub Actions to create and approve pull requests" off',
                    '"Read repository contents and packages permissions"',
                    '"Require actions to be pinned to a full-length commit SHA"',
                    '"Require approval for all external contributors"', "Deployment branches"):
        assert setting in section, setting
    checks = re.search(r"status checks ((?:`[^`]+`(?:, | and )?)+) required", re.sub(r"\s+", " ", section))
    assert checks, "the ruleset names its required status checks"
    names = re.findall(r"`([^`]+)`", checks.group(1))
    jobs = {job["name"] for job in workflow("ci.yml")["jobs"].values()}
    assert names and set(names) <= jobs, (names, jobs)


def test_the_preview_comment_keeps_the_output_inside_its_block(tmp_path):
    """The preview's output (the pull request's program's) is put in a ~~~~~~~~ block; a line of eight
    tildes in it would close the block early and let the rest render as the comment's own Markdown."""
    job = workflow("preview.yml")["jobs"]["preview"]
    step = next(s for s in job["steps"] if s.get("name", "").startswith("The pull request's comment"))
    env = {"PATH": "/usr/bin:/bin", "STACK": "gcp-prod", "PR": "7", "OUTCOME": "failure",
           "OUTPUT": "Previewing\n~~~~~~~~\n## forged heading"}
    done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    body = (tmp_path / "pr-comment" / "body.md").read_text()
    assert body.startswith("## pulumi preview: gcp-prod (failure)\n")
    assert body.count("\n~~~~~~~~\n") == 1 and "## forged heading" in body.split("~~~~~~~~text\n", 1)[1].split("\n~~~~~~~~\n")[0]
    assert (tmp_path / "pr-comment" / "pr-number").read_text() == "7\n"


def preview_token_problems(docs: dict[str, dict], ci_md: str, linode_stacks: list[str]) -> list[str]:
    """Adopter review (issue 37 brief), item 1: one Pulumi team with Stack Read on every stack and its token in
    every `preview-<stack>` environment let a pull request read the token of `preview-gcp-prod` (no approval)
    and decrypt linode-dev's state. The token must be one per stack, held only by that stack's environment."""
    problems = []
    for wf, doc in docs.items():
        for name, job in doc["jobs"].items():
            if "secrets.PULUMI_PREVIEW_TOKEN" not in yaml.safe_dump(job):
                continue
            env = job.get("environment")
            env_name = str(env.get("name") if isinstance(env, dict) else env)
            if env_name != "preview-${{ matrix.stack }}":
                problems.append(f"{wf}:{name}: reads PULUMI_PREVIEW_TOKEN from environment {env_name!r}, not the "
                                f"stack's own preview-<stack>")
            for step in job.get("steps", []):
                token = (step.get("env") or {}).get("PULUMI_ACCESS_TOKEN")
                if token and token != "${{ secrets.PULUMI_PREVIEW_TOKEN }}":
                    problems.append(f"{wf}:{name}: PULUMI_ACCESS_TOKEN is {token}")
    section = re.sub(r"\s+", " ", ci_md.split("## Repository settings the gates rely on", 1)[1].split("\n## ", 1)[0])
    rule = ("team `gpu-platform-preview-<stack>` has the `Stack Read` permission set on `<stack>` and on nothing "
            "else; its team access token is `PULUMI_PREVIEW_TOKEN` in `preview-<stack>` and nowhere else")
    if rule not in section:
        problems.append("docs/ci.md's settings do not state one Pulumi team and token per stack: " + rule)
    if re.search(r"`gpu-platform-preview` with Stack Read|teams? `gpu-platform-preview`", re.sub(r"\s+", " ", ci_md)):
        problems.append("docs/ci.md still tells one shared `gpu-platform-preview` team")
    if not all(_settings_ask_reviewers_on(f"preview-{s}", ci_md) for s in linode_stacks):
        problems.append(f"docs/ci.md: the preview environments of {linode_stacks}, whose state holds deploy "
                        "credentials, need required reviewers")
    return problems


def test_each_stack_has_its_own_preview_token_and_linode_previews_need_reviewers():
    linode = [s for s in shipped_stacks()
              if (yaml.safe_load((ROOT / "stacks" / f"Pulumi.{s}.yaml").read_text())["config"] or {}).get(
                  "gpu-platform:cloud") == "linode"]
    assert linode, "the shipped Linode stacks (their state holds the Linode deploy token)"
    assert all(s.startswith("linode-") for s in linode), linode  # docs/ci.md's `preview-linode-*` covers them
    assert not preview_token_problems(all_workflows(), (ROOT / "docs" / "ci.md").read_text(), linode)


def test_the_preview_token_check_catches_a_shared_token():
    docs = all_workflows()
    shared = copy.deepcopy(docs)
    shared["preview.yml"]["jobs"]["preview"]["environment"] = "preview-gcp-prod"
    assert any("not the stack's own" in p for p in preview_token_problems(shared, (ROOT / "docs" / "ci.md").read_text(), ["linode-dev"]))
    old_docs = ("## Repository settings the gates rely on\n\n- **Environments**: `preview-linode-*` with required "
                "reviewers\n\nIn Pulumi Cloud, two teams (`gpu-platform-preview` with Stack Read, ...)\n")
    found = preview_token_problems(docs, old_docs, ["linode-dev"])
    assert any("one Pulumi team and token per stack" in p for p in found) and any("shared" in p for p in found)


def test_ci_pulls_the_charts_and_a_chart_test_without_them_fails_there():
    """Adopter review (issue 37 brief), item 3: `make check` on GitHub never fetched the charts and `make test`
    ignored a failed pull, so the chart tests skipped silently and the gate was weaker than it looked."""
    jobs = workflow("ci.yml")["jobs"]
    for name in ("check", "tests"):
        envs = [s.get("env") or {} for s in jobs[name]["steps"]]
        assert any(e.get("GPU_PLATFORM_REQUIRE_CHARTS") == "1" for e in envs), f"ci.yml:{name}"
    runs = [s.get("run", "") for s in jobs["check"]["steps"]]
    ensure = next(i for i, r in enumerate(runs) if "preflight charts ensure" in r)
    check = next(i for i, r in enumerate(runs) if r == "make check")
    assert ensure < check and jobs["check"]["steps"][check]["env"]["GPU_PLATFORM_REQUIRE_CHARTS"] == "1"
    make_test = subprocess.run(["make", "-n", "test", "GPU_PLATFORM_REQUIRE_CHARTS=1"], cwd=ROOT, capture_output=True,
                               text=True).stdout
    assert re.search(r"^\S*python\S* -m gpu_platform.preflight charts ensure$", make_test, re.M), make_test  # no `-`


@pytest.mark.parametrize("require,outcome", [("", "1 skipped"), ("1", "1 failed")])
def test_a_chart_test_without_charts_skips_offline_and_fails_when_charts_are_required(tmp_path, require, outcome):
    empty = tmp_path / "charts"
    empty.mkdir()
    probe = tmp_path / "test_probe.py"
    probe.write_text("from tests.fit_support import need_charts\n\n\ndef test_probe():\n    need_charts()\n")
    env = {**os.environ, "GPU_PLATFORM_CHARTS": str(empty), "GPU_PLATFORM_REQUIRE_CHARTS": require,
           "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-rs",
                          "--rootdir", str(tmp_path), str(probe)], cwd=tmp_path, capture_output=True, text=True, env=env)
    assert outcome in run.stdout, run.stdout + run.stderr
    assert "charts pull" in run.stdout  # either way it says how to fill the folder


@pytest.mark.parametrize("name,secret", [("preview.yml", "PULUMI_PREVIEW_TOKEN"), ("drift.yml", "PULUMI_DRIFT_TOKEN")])
def test_each_preview_checks_its_token_is_its_own_stacks_team_token(name, secret):
    """A shared token is refused at run time too: before the preview, the job asks Pulumi Cloud whose team token
    it holds and fails unless it is gpu-platform-preview-<stack>'s (docs/ci.md). drift.yml holds another token of
    that team, in its own environment."""
    job = next(iter(workflow(name)["jobs"].values()))
    steps = job["steps"]
    check = next(i for i, s in enumerate(steps) if s.get("run") == 'bash .github/pulumi-token-team.sh "$TEAM"')
    preview = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/actions@"))
    assert check < preview
    assert steps[check]["env"] == {"PULUMI_ACCESS_TOKEN": f"${{{{ secrets.{secret} }}}}",
                                   "TEAM": "gpu-platform-preview-${{ matrix.stack }}"}
    assert steps[preview]["env"]["PULUMI_ACCESS_TOKEN"] == steps[check]["env"]["PULUMI_ACCESS_TOKEN"]


@pytest.mark.parametrize("answer,ok", [('{"githubLogin": "gpu-platform-preview-gcp-prod", "tokenInfo": '
                                        '{"name": "ci", "team": "gpu-platform-preview-gcp-prod"}}', True),
                                       ('{"githubLogin": "acme", "tokenInfo": {"name": "ci", "team": '
                                        '"gpu-platform-preview"}}', False),
                                       ('{"githubLogin": "acme", "tokenInfo": {"name": "ci", "organization": "acme"}}', False),
                                       ('{"githubLogin": "jane"}', False)])
def test_the_token_check_passes_only_the_stacks_own_team(tmp_path, answer, ok):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    curl = bin_dir / "curl"
    curl.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\ncat <<'JSON'\n{answer}\nJSON\n")
    curl.chmod(0o755)
    run = subprocess.run(["bash", str(ROOT / ".github" / "pulumi-token-team.sh"), "gpu-platform-preview-gcp-prod"],
                         capture_output=True, text=True,
                         env={"PATH": f"{bin_dir}:{os.environ['PATH']}", "PULUMI_ACCESS_TOKEN": "pul-secret"})
    assert (run.returncode == 0) is ok, run.stdout + run.stderr
    assert "pul-secret" not in run.stdout + run.stderr
    assert "https://api.pulumi.com/api/user" in (tmp_path / "args").read_text()
    if not ok:
        assert "not one of the team gpu-platform-preview-gcp-prod" in run.stderr and "docs/ci.md" in run.stderr


# --- issue 37 round 3, A: the drift check runs unattended, in environments of its own -----------------------

READ_ONLY_ENV = "GPU_PLATFORM_READ_ONLY_RUN"
CHECKLIST = "## Repository settings the gates rely on"


def drift_problems(docs: dict[str, dict], ci_md: str) -> list[str]:
    """drift.yml runs every day with no one to approve it: its job names its own `drift-<stack>` environment (a
    `preview-*` one has reviewers on Linode and onprem, a deploy one holds deploy credentials and reviewers), reads
    no deploy credential, runs its preview as a read-only run, and checks every shipped stack but the
    `cloud: kubernetes` ones; deploy.yml never runs read-only. docs/ci.md's checklist creates each `drift-<stack>`
    environment with `main` only and no reviewers, and says why the `cloud: kubernetes` stacks are left out."""
    problems = []
    job = next(iter(docs["drift.yml"]["jobs"].values()))
    env = job.get("environment")
    env_name = str(env.get("name") if isinstance(env, dict) else env)
    if env_name != "drift-${{ matrix.stack }}":
        problems.append(f"drift.yml: environment {env_name!r}, not the stack's own drift-<stack> (a preview-* one "
                        "waits for a reviewer; a deploy one holds deploy credentials)")
    reads = sorted(set(SECRET_REF.findall(yaml.safe_dump(job))) & set(DEPLOY_CREDENTIALS))
    if reads:
        problems.append(f"drift.yml: reads deploy credentials {reads}")
    listed = job["strategy"]["matrix"]["stack"]
    if sorted(listed) != drift_stacks():
        problems.append(f"drift.yml: checks {sorted(listed)}, not {drift_stacks()} (every stack but the "
                        "`cloud: kubernetes` ones)")
    for wf, want in (("drift.yml", "1"), ("preview.yml", "1"), ("deploy.yml", None)):
        for step in next(iter(docs[wf]["jobs"].values()))["steps"]:
            if str(step.get("uses", "")).startswith("pulumi/actions@"):
                got = (step.get("env") or {}).get(READ_ONLY_ENV)
                if got != want:
                    problems.append(f"{wf}: its pulumi step sets {READ_ONLY_ENV}={got!r}, not {want!r}")
    flat = re.sub(r"\s+", " ", ci_md)
    checklist = re.sub(r"\s+", " ", ci_md.split(CHECKLIST, 1)[1].split("\n## ", 1)[0])
    item = re.search(r"- \*\*Environments\*\*.*?(?= - \*\*|$)", checklist)
    drift_sentences = [x for x in re.split(r"(?<=\.)\s+", item.group(0) if item else "") if "`drift-<stack>`" in x]
    said = " ".join(drift_sentences)
    for must in ('"Deployment branches and tags: Selected: `main`"', "no required reviewers", "only read-only credentials"):
        if must not in said:
            problems.append(f"docs/ci.md's checklist, Environments: the drift-<stack> sentence does not say {must}")
    for stack in listed:
        if f"`drift-{stack}`" not in said or f"`drift-{stack}`" not in checklist.split("**Create them**", 1)[-1]:
            problems.append(f"docs/ci.md's checklist does not create `drift-{stack}`")
    for stack in sorted(set(shipped_stacks()) - set(listed)):
        if f"`drift-{stack}`" in flat:
            problems.append(f"docs/ci.md names `drift-{stack}`, which drift.yml does not check")
    if "**`cloud: kubernetes` stacks are not checked.**" not in flat:
        problems.append("docs/ci.md does not say why drift.yml leaves the `cloud: kubernetes` stacks out")
    return problems


def test_the_drift_check_runs_unattended_in_environments_of_its_own():
    """Adopter review (issue 37, round 3), A: drift.yml used `preview-<stack>`, whose Linode and onprem
    environments need a reviewer, so the daily run waited for an approval; onprem-dev's preview reports its
    kubeconfig's update every day; Linode's read-only token changed inputs the deploy token had set."""
    assert not drift_problems(all_workflows(), (ROOT / "docs" / "ci.md").read_text())


def test_the_drift_check_catches_each_way_back():
    docs, ci_md = all_workflows(), (ROOT / "docs" / "ci.md").read_text()

    def broken(edit):
        changed = copy.deepcopy(docs)
        edit(changed)
        return drift_problems(changed, ci_md)

    def preview_environment(d):
        d["drift.yml"]["jobs"]["drift"]["environment"] = "preview-${{ matrix.stack }}"
    assert any("not the stack's own drift-<stack>" in p for p in broken(preview_environment))

    def deploy_environment(d):
        d["drift.yml"]["jobs"]["drift"]["environment"] = "${{ matrix.stack }}"
    assert any("not the stack's own drift-<stack>" in p for p in broken(deploy_environment))

    def onprem_again(d):
        d["drift.yml"]["jobs"]["drift"]["strategy"]["matrix"]["stack"].append("onprem-dev")
    assert any("every stack but the `cloud: kubernetes` ones" in p for p in broken(onprem_again))

    def read_only_deploy(d):
        _pulumi_step(d["deploy.yml"]["jobs"]["up"]).setdefault("env", {})[READ_ONLY_ENV] = "1"
    assert any("deploy.yml: its pulumi step sets" in p for p in broken(read_only_deploy))

    def drift_with_the_deploy_token(d):
        _pulumi_step(d["drift.yml"]["jobs"]["drift"])["env"]["PULUMI_ACCESS_TOKEN"] = "${{ secrets.PULUMI_DEPLOY_TOKEN }}"
    assert any("reads deploy credentials ['PULUMI_DEPLOY_TOKEN']" in p for p in broken(drift_with_the_deploy_token))
    changed = copy.deepcopy(docs)
    drift_with_the_deploy_token(changed)
    assert any("drift.yml:drift: reads deploy credentials" in p for p in trust_problems(changed))

    old_docs = ci_md.replace("no required reviewers", "required reviewers")
    assert any("does not say no required reviewers" in p for p in drift_problems(docs, old_docs))


# --- issue 37 follow-up: no unreviewed preview environment's token decrypts a credential ----------------------

# Secret inputs of a plan that are no credential: a GKE/EKS kubeconfig is the endpoint and CA certificate, its token
# comes from gke-gcloud-auth-plugin / aws eks get-token at run time (docs/state-and-secrets.md).
NOT_A_CREDENTIAL = {("gcp", "pulumi:providers:kubernetes", "kubeconfig"), ("aws", "pulumi:providers:kubernetes", "kubeconfig")}


def _state_credentials(stack: str) -> list[tuple[str, str]]:
    """The secret inputs of the shipped stack's plan (what its state keeps encrypted and Stack Read decrypts) that
    are credentials, as (resource type, input path)."""
    from tests.conftest import shipped_plan
    from tests.test_docs import _secret_paths

    cloud = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]["gpu-platform:cloud"]
    found = {(r.type, p) for r in shipped_plan(stack).resources for p in _secret_paths(r.inputs)}
    return sorted(f for f in found if (cloud, *f) not in NOT_A_CREDENTIAL)


def _settings_ask_reviewers_on(environment: str, ci_md: str) -> bool:
    """docs/ci.md's checklist "Repository settings the gates rely on", in its **Environments** item, asks for
    required reviewers on this environment: a sentence of that item that says "required reviewers" (and not
    "need none") names it, or a `preview-...-*` pattern that matches it. Only the checklist counts: an admin
    setting up the repository works from it, not from a remark in another section (adopter re-review of
    f294e99: the checklist named only `preview-linode-*`, while onprem-dev's state holds the checkpoint keys)."""
    section = ci_md.split("## Repository settings the gates rely on", 1)[1].split("\n## ", 1)[0]
    item = re.search(r"^- \*\*Environments\*\*.*?(?=^- |\n\n|\Z)", section, re.M | re.S)
    if not item:
        return False
    for sentence in re.split(r"(?<=\.)\s+", re.sub(r"\s+", " ", item.group(0))):
        if "required reviewers" in sentence.lower() and "need none" not in sentence:
            if any(fnmatch.fnmatchcase(environment, name) for name in re.findall(r"`(preview-[^`]+)`", sentence)):
                return True
    return False


def _preview_needs_reviewers(stack: str, ci_md: str) -> bool:
    """docs/ci.md's settings checklist asks for required reviewers on this stack's preview environment."""
    return _settings_ask_reviewers_on(f"preview-{stack}", ci_md)


@pytest.mark.parametrize("stack", ["gcp-prod", "aws-prod", "linode-dev", "linode-ha", "onprem-dev"])
def test_a_preview_environment_without_reviewers_reads_no_credential_in_its_stacks_state(stack):
    """Adopter review of 94425ce: the GKE and EKS image builds passed the deployer's OAuth access token / an ECR
    authorization token as `registries[].password`, so it was in the state that preview-gcp-prod's and
    preview-aws-prod's Stack Read token (no reviewers) decrypts, while docs/ci.md said "On AWS and GCP there is
    no credential in it". Every stack whose plan keeps a credential has reviewers on its preview environment
    in docs/ci.md, and the GKE/EKS stacks keep none, as docs/ci.md says."""
    ci_md = (ROOT / "docs" / "ci.md").read_text()
    credentials = _state_credentials(stack)
    if not _preview_needs_reviewers(stack, ci_md):
        assert not credentials, (f"{stack}: its state holds {credentials}, which preview-{stack}'s token (no required "
                                 "reviewers in docs/ci.md) decrypts")
    if stack in ("gcp-prod", "aws-prod"):
        assert "On AWS and GCP there is no credential in it" in re.sub(r"\s+", " ", ci_md)
        assert not credentials, credentials


def test_deploy_logs_docker_in_to_the_gke_and_eks_registries_before_pulumi_up():
    """The program passes GKE/EKS builds no registry login, so the deploy runner's Docker must have one: a step
    after the cloud credentials and before `pulumi up` logs in to the registry `preflight image-registry` names."""
    steps = workflow("deploy.yml")["jobs"]["up"]["steps"]
    at = {k: next(i for i, s in enumerate(steps) if pred(s)) for k, pred in {
        "gcp": lambda s: "google-github-actions/setup-gcloud@" in str(s.get("uses")),
        "aws": lambda s: "aws-actions/configure-aws-credentials@" in str(s.get("uses")),
        "login": lambda s: "gpu_platform.preflight image-registry" in s.get("run", ""),
        "up": lambda s: str(s.get("uses", "")).startswith("pulumi/actions@")}.items()}
    assert at["gcp"] < at["login"] < at["up"] and at["aws"] < at["login"], at
    login = steps[at["login"]]
    assert "gcp-" in login["if"] and "aws-" in login["if"]
    assert "gcloud auth configure-docker" in login["run"] and "docker login --username AWS --password-stdin" in login["run"]


@pytest.mark.parametrize("stack,line", [("gcp-prod", "gcp us-central1-docker.pkg.dev"), ("aws-prod", "aws us-east-1"),
                                        ("linode-dev", "")])
def test_image_registry_names_what_deploy_logs_docker_in_to(stack, line):
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "image-registry", stack], cwd=ROOT,
                         capture_output=True, text=True)
    assert (run.returncode, run.stdout.strip()) == (0, line), run.stderr


# --- issue 37 follow-up: every job that runs chart tests fetches the charts first ------------------------------

def _uses_charts(test_file: Path) -> bool:
    """A test module that renders the pinned charts (tests/fit_support.py's chart folder or need_charts)."""
    return test_file.is_file() and "tests.fit_support import" in test_file.read_text()


def chart_test_problems(workflows: dict[str, dict]) -> list[str]:
    """Each step that runs tests needing the pinned charts (the whole suite, `make check`, or a pytest of a module
    that imports tests/fit_support.py) must run with GPU_PLATFORM_REQUIRE_CHARTS=1 after the job fetched them
    (`preflight charts ensure|pull` in an earlier step, or `make test`/.ci/run, whose `charts ensure` fails the
    target under that variable). On a runner without ../shared/charts such a test fails (release.yml's
    tests/test_package.py did: 4 failures, so no tag could publish) or skips and the gate is weaker than it looks."""
    problems = []
    for name, doc in sorted(workflows.items()):
        for job_name, job in (doc.get("jobs") or {}).items():
            fetched = False
            for step in job.get("steps") or []:
                run = step.get("run", "") or ""
                if re.search(r"gpu_platform\.preflight charts (ensure|pull)\b", run):
                    fetched = True
                self_fetching = bool(re.search(r"(^|\s)(make test\b|bash \.ci/run\b)", run))
                files = re.findall(r"\btests/\S+\.py\b", run)
                runs_tests = self_fetching or "make check" in run or ("pytest" in run and (
                    not files or any(_uses_charts(ROOT / f) for f in files)))
                if not runs_tests:
                    continue
                where = f"{name}:{job_name}: {step.get('name') or run.splitlines()[0]}"
                if not (fetched or self_fetching):
                    problems.append(f"{where}: runs chart tests without fetching the charts first (`charts ensure`)")
                if str((step.get("env") or {}).get("GPU_PLATFORM_REQUIRE_CHARTS")) != "1":
                    problems.append(f"{where}: a chart test that lacks its chart skips (GPU_PLATFORM_REQUIRE_CHARTS not 1)")
    return problems


def test_every_job_running_chart_tests_fetches_the_charts_first():
    assert not chart_test_problems(all_workflows())


def test_the_chart_test_check_catches_release_yml_as_it_was():
    """release.yml at 94425ce: `make dist`, then pytest of tests/test_package.py (which imports tests/fit_support.py)
    with no charts step and no GPU_PLATFORM_REQUIRE_CHARTS."""
    docs = all_workflows()
    old = copy.deepcopy(docs)
    steps = old["release.yml"]["jobs"]["check"]["steps"]
    steps[:] = [s for s in steps if "charts ensure" not in (s.get("run") or "")]
    for s in steps:
        (s.get("env") or {}).pop("GPU_PLATFORM_REQUIRE_CHARTS", None)
    found = chart_test_problems(old)
    assert any("release.yml:check" in p and "without fetching" in p for p in found), found
    assert any("release.yml:check" in p and "GPU_PLATFORM_REQUIRE_CHARTS" in p for p in found), found


def test_every_pulumi_run_installs_the_charts_preflight_checked_from_one_fixed_folder():
    """Adopter review of 9f3f48b: deploy.yml pulled the charts for preflight, then `pulumi up` fetched them again
    from the repositories by version (kustomize targets by tag). Every workflow that runs the Pulumi CLI sets
    $GPU_PLATFORM_LOCAL_CHARTS (components/helm.py) for the job, to one absolute path shared by all of them (the path
    is an input of each release: another one would be a diff on every run), and empties and fills it before the
    CLI runs; deploy's preflight checks that folder."""
    folders = {}
    for name, doc in all_workflows().items():
        for job_name, job in doc["jobs"].items():
            steps = job.get("steps") or []
            pulumi_at = [i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("pulumi/actions@")]
            if not pulumi_at:
                continue
            folder = (job.get("env") or {}).get("GPU_PLATFORM_LOCAL_CHARTS")
            assert folder and folder.startswith("/"), (name, job_name, job.get("env"))
            folders[name] = folder
            pulls = [i for i, s in enumerate(steps) if 'charts pull --dest "$GPU_PLATFORM_LOCAL_CHARTS"' in str(s.get("run"))]
            assert pulls and pulls[0] < pulumi_at[0], (name, job_name)
            assert 'rm -rf "$GPU_PLATFORM_LOCAL_CHARTS"' in steps[pulls[0]]["run"], (name, job_name)
            for s in steps:  # a step of its own may not point the CLI somewhere else
                assert "GPU_PLATFORM_LOCAL_CHARTS" not in (s.get("env") or {}), (name, s.get("name"))
    assert {"deploy.yml", "preview.yml", "drift.yml"} <= set(folders) and len(set(folders.values())) == 1, folders
    preflight = next(s for s in workflow("deploy.yml")["jobs"]["up"]["steps"] if str(s.get("name", "")).startswith("Preflight"))
    assert '--charts "$GPU_PLATFORM_LOCAL_CHARTS"' in preflight["run"], preflight
