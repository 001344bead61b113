"""Hostile arguments to the preflight command (the adversarial review of the CLI): a --job file that is
nested thousands of levels deep, empty, of a kind the cluster does not serve, or thousands of objects; a
--base folder whose plan/cost/policy JSON is malformed or huge; a file name that would forge an output
line. Each ends in one clear message naming the file and the documented exit code, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.conftest import stack_config
from tests.fit_support import need_charts
from tests.test_hostile_input import run_main

FORGED = "preflight linode-dev: PASS in 3.1s"
GPU_JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "probe", "namespace": "training",
                                                                  "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
           "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
               {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
PYTORCH_JOB = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "huge", "namespace": "training"},
               "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 100_000_000, "template": {"spec": {
                   "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}}}


def _stack_file(folder: Path, name: str = "demo") -> Path:
    path = folder / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": stack_config("linode-dev")}, sort_keys=False))
    return path


def _run(tmp_path: Path, capsys, *extra: str, stack: Path | None = None) -> tuple[int, str]:
    stack = stack or _stack_file(tmp_path)
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "--no-policies",
                              "--out", str(tmp_path / "build"), *extra], capsys)
    assert "Traceback" not in text
    return code, text


def _docs(*objs: dict) -> str:
    # libyaml's dumper: a Pod of 5,000 containers is built at collection, in every worker
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return "".join("---\n" + yaml.dump(o, Dumper=dumper, sort_keys=False) for o in objs)


# --- --job -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("content, expected", [
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply"),
    ("", "holds no Kubernetes object"),
    ("# only a comment\n---\n", "holds no Kubernetes object"),
    (_docs(PYTORCH_JOB), "holds no job preflight can check: PyTorchJob (kubeflow.org/v1)"),
    (_docs(*[GPU_JOB] * 101), "more than 100 Kubernetes objects"),
    (_docs(*[GPU_JOB] * 2000), "more than 100 Kubernetes objects"),
], ids=["nested-5000", "empty", "comment-only", "pytorchjob", "101-jobs", "2000-jobs"])
def test_a_job_file_preflight_cannot_check_is_a_config_error_naming_it(tmp_path, capsys, content, expected):
    job = tmp_path / "job.yaml"
    job.write_text(content)
    code, text = _run(tmp_path, capsys, "--job", str(job))
    assert code == 2, text
    assert f"--job {job}" in text and expected in text, text
    assert "preflight demo: CONFIG-ERROR" in text
    if "PyTorchJob" in expected or "no Kubernetes object" in expected:
        assert "TrainJob (trainer.kubeflow.org/v1alpha1)" in text  # the kinds it does check


@pytest.mark.parametrize("target, expected", [("/dev/zero", "not a regular file"), ("dir", "a directory"),
                                              ("missing", "no such file")])
def test_a_job_path_that_is_not_a_file_says_what_it_is(tmp_path, capsys, target, expected):
    path = {"dir": str(tmp_path), "missing": str(tmp_path / "gone.yaml")}.get(target, target)
    code, text = _run(tmp_path, capsys, "--job", path)
    assert code == 4, text
    assert f"--job {path}: {expected}" in text


def test_a_job_kind_the_cluster_does_not_serve_is_a_fit_violation(tmp_path, capsys):
    """Training Operator v1's PyTorchJob beside a Job: the platform installs Trainer v2, so the API server
    refuses it (no CRD serves kubeflow.org/v1); it was silently skipped and the run passed."""
    need_charts()
    job = tmp_path / "job.yaml"
    job.write_text(_docs(PYTORCH_JOB, GPU_JOB))
    code, text = _run(tmp_path, capsys, "--job", str(job))
    assert code == 3, text
    assert "PyTorchJob/training/huge" in text and "no API the cluster serves has kind PyTorchJob in kubeflow.org/v1" in text


# --- --base ----------------------------------------------------------------------------------------


def _write_base(folder: Path, case: str) -> None:
    folder.mkdir(parents=True)
    plan = {"stack": "demo", "resources": [], "outputs": {}}
    files = {
        "plan-list": {"plan.json": "[]"},
        "plan-no-urn": {"plan.json": json.dumps({"resources": [{}]})},
        "plan-resources-int": {"plan.json": json.dumps({"resources": 5})},
        "plan-deep": {"plan.json": "[" * 200_000 + "]" * 200_000},
        "plan-not-json": {"plan.json": "{"},
        "cost-str": {"plan.json": json.dumps(plan),
                     "cost.json": json.dumps({"fullMonthlyUsd": "x", "idleMonthlyUsd": 1, "fullGpus": 1})},
        "policy-no-status": {"plan.json": json.dumps(plan),
                             "policy.json": json.dumps({"policies": [{"name": "gpu-count-ceiling"}]})},
    }.get(case)
    if files is not None:
        for name, text in files.items():
            (folder / name).write_text(text)
    elif case == "plan-huge":
        with open(folder / "plan.json", "wb") as f:  # sparse: the size alone refuses it
            f.truncate(17 * 1024 * 1024)
    elif case == "cost-fifo":
        (folder / "plan.json").write_text(json.dumps(plan))
        os.mkfifo(folder / "cost.json")  # reading it would wait for ever


@pytest.mark.parametrize("case, file, expected", [
    ("plan-list", "plan.json", "not a preflight plan"),
    ("plan-no-urn", "plan.json", "resources[0]: not a resource"),
    ("plan-resources-int", "plan.json", "not a preflight plan"),
    ("plan-deep", "plan.json", "nested deeper than"),
    ("plan-not-json", "plan.json", "not JSON"),
    ("plan-huge", "plan.json", "17.0 MiB, larger than the 16 MiB"),
    ("cost-str", "cost.json", "fullMonthlyUsd: \"x\" is not a number"),
    ("cost-fifo", "cost.json", "not a regular file"),
    ("policy-no-status", "policy.json", "policies[0]: not a policy result"),
])
def test_a_malformed_base_run_is_a_usage_error_naming_the_file_before_the_run(tmp_path, capsys, case, file, expected):
    base = tmp_path / "base"
    _write_base(base / "demo", case)
    code, text = _run(tmp_path, capsys, "--base", str(base))
    assert code == 4, text
    assert f"--base: {base / 'demo' / file}: {expected}" in text, text
    assert not (tmp_path / "build" / "demo" / "plan.json").exists()  # refused before the program ran


def test_a_base_run_of_another_stack_is_refused_naming_both(tmp_path, capsys):
    """Adopter review of 94425ce: `--base build/linode-dev` on a gcp-prod run was compared without a word, though
    the base's plan.json records "stack": "linode-dev": the review listed every difference of two stacks as the
    pull request's change. Refused (exit 4) before the program runs, naming both stacks."""
    base = tmp_path / "base" / "linode-dev"
    base.mkdir(parents=True)
    (base / "plan.json").write_text(json.dumps({"stack": "linode-dev", "resources": [], "outputs": {}}))
    code, text = _run(tmp_path, capsys, "--base", str(base))
    assert code == 4, text
    assert "that run planned stack 'linode-dev', this one plans 'demo'" in text, text
    assert not (tmp_path / "build" / "demo" / "plan.json").exists()  # refused before the program ran


# --- names that would forge output lines -----------------------------------------------------------


def test_a_stack_file_name_cannot_forge_a_verdict_line(tmp_path, capsys):
    stack = _stack_file(tmp_path)
    forged = stack.with_name(f"Pulumi.x\n{FORGED}\n.yaml")
    stack.rename(forged)
    code, text = _run(tmp_path, capsys, stack=forged)
    assert code == 2, text
    assert FORGED not in text.splitlines()
    assert f"Pulumi.x\\n{FORGED}\\n.yaml" in text


def test_a_base_plans_urn_cannot_forge_a_line(tmp_path, capsys):
    need_charts()
    base = tmp_path / "base" / "demo"
    base.mkdir(parents=True)
    urn = f"urn:pulumi:demo::gpu-platform::t::x\n{FORGED}\x1b[2J"
    (base / "plan.json").write_text(json.dumps({"resources": [{"urn": urn, "inputs": {}}]}))
    code, text = _run(tmp_path, capsys, "--base", str(tmp_path / "base"))
    assert code == 0, text
    assert FORGED not in text.splitlines() and "\x1b" not in text
    assert f"- t x\\n{FORGED}\\x1b[2J" in text


# --- issue 37: job objects the API server refuses, a bad GPU_PLATFORM_TODAY, a missing --base --------------


def _job(**changes) -> dict:
    import copy

    job = copy.deepcopy(GPU_JOB)
    for path, value in changes.items():
        node = job
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        if value is None:
            node.pop(keys[-1])
        else:
            node[keys[-1]] = value
    return job


CONTAINER = "spec__template__spec__containers__0__resources"


@pytest.mark.parametrize("job, expected", [
    (_job(kind=["Job"]), 'kind is ["Job"]: a Kubernetes object\'s kind is a non-empty string'),
    (_job(kind=7), "kind is 7"),
    (_job(apiVersion={"a": 1}), "apiVersion is {\"a\": 1}"),
    (_job(**{CONTAINER: {"requests": {"cpu": "-2"}}}), "resources.requests.cpu: -2 is negative"),
    (_job(**{CONTAINER: {"limits": {"memory": -1}}}), "resources.limits.memory: -1 is negative"),
    (_job(**{CONTAINER: {"limits": {"nvidia.com/gpu": "0.5"}}}), "nvidia.com/gpu: 0.5 is not a whole number"),
    (_job(**{CONTAINER: {"limits": {"nvidia.com/gpu": "500m"}}}), "nvidia.com/gpu: 500m is not a whole number"),
    (_job(**{CONTAINER: {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 2}}}), "must be equal"),
    (_job(**{CONTAINER: {"requests": {"cpu": "4"}, "limits": {"cpu": "2"}}}), "above its limit"),
    (_job(**{CONTAINER: {"limits": {"cpu": "lots"}}}), "lots is not a Kubernetes quantity"),
    (_job(metadata__name="x" * 308), "(308 characters): a name of at most 63"),
    (_job(metadata__name="Probe_1"), "a name of at most 63 lowercase letters"),
    (_job(metadata__name=None), "without metadata.name"),
    (_job(metadata__name=""), "without metadata.name"),
    (_job(metadata__namespace="Not A Namespace"), "is not a namespace name"),
    ({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c" * 53, "namespace": "training"},
      "spec": {"schedule": "@daily", "jobTemplate": GPU_JOB["spec"] and {"spec": GPU_JOB["spec"]}}}, "at most 52"),
    ({"apiVersion": "v1", "kind": "List", "items": [5]}, "a List's items must be Kubernetes objects"),
], ids=["kind-list", "kind-int", "apiversion-map", "negative-cpu", "negative-memory", "half-gpu", "half-gpu-milli",
        "gpu-request-not-limit", "request-above-limit", "not-a-quantity", "name-308", "name-invalid", "name-missing",
        "name-empty", "namespace-invalid", "cronjob-name-53", "list-of-ints"])
def test_a_job_object_the_api_server_refuses_is_a_config_error_naming_the_file(tmp_path, capsys, job, expected):
    path = tmp_path / "job.yaml"
    path.write_text(_docs(job))
    code, text = _run(tmp_path, capsys, "--job", str(path))
    assert code == 2, text
    assert f"--job {path}" in text and expected in text, text
    assert "preflight demo: CONFIG-ERROR" in text


def test_a_job_file_with_several_problems_reports_every_one_in_one_run(tmp_path, capsys):
    """Adopter review of 94425ce: a --job file with both a negative CPU and half a GPU reported only the negative
    CPU; fixing it and running again met the half GPU. One run names both (and a second object's problem)."""
    bad = _job(**{CONTAINER: {"requests": {"cpu": "-1"}, "limits": {"nvidia.com/gpu": "0.5"}}})
    other = _job(metadata__name="Bad_Name")
    path = tmp_path / "job.yaml"
    path.write_text(_docs(bad, other))
    code, text = _run(tmp_path, capsys, "--job", str(path))
    assert code == 2, text
    assert "3 problems:" in text, text
    assert "requests.cpu: -1 is negative" in text and "limits.nvidia.com/gpu: 0.5 is not a whole number" in text, text
    assert "metadata.name 'Bad_Name'" in text, text


def test_a_valid_job_with_generate_name_and_whole_gpus_is_read():
    from gpu_platform.preflight.fit.render import job_object_problem

    job = _job(metadata__name=None)
    job["metadata"]["generateName"] = "probe-"
    assert job_object_problem(job) is None
    assert job_object_problem(_job(**{CONTAINER: {"requests": {"nvidia.com/gpu": "1", "cpu": "500m"},
                                                  "limits": {"nvidia.com/gpu": 1, "cpu": 1}}})) is None


def test_a_job_in_a_namespace_nothing_creates_is_a_fit_violation(tmp_path, capsys):
    need_charts()
    path = tmp_path / "job.yaml"
    path.write_text(_docs(_job(metadata__namespace="nowhere")))
    code, text = _run(tmp_path, capsys, "--job", str(path))
    assert code == 3, text
    assert "Job/nowhere/probe" in text and "namespace nowhere does not exist" in text, text
    assert "training" in text  # the namespaces it could use


@pytest.mark.parametrize("value", ["tomorrow", "2026-02-30", "2026-13-01", "20261123", "0001-01-01", "9999-12-31",
                                   "2026-11-23T00:00", "٢٠٢٦-١١-٢٣"])
def test_a_gpu_platform_today_that_is_no_date_is_a_usage_error_naming_it(tmp_path, capsys, monkeypatch, value):
    monkeypatch.setenv("GPU_PLATFORM_TODAY", value)
    code, text = _run(tmp_path, capsys)
    assert code == 4, text
    assert "preflight: GPU_PLATFORM_TODAY=" in text and "a real date written YYYY-MM-DD" in text, text


def test_the_program_refuses_a_bad_gpu_platform_today_without_a_traceback(monkeypatch):
    import pulumi

    from gpu_platform.config.stack import load_from_pulumi

    monkeypatch.setenv("GPU_PLATFORM_TODAY", "2026-02-30")
    with pytest.raises(pulumi.RunError, match="GPU_PLATFORM_TODAY='2026-02-30': a real date"):
        load_from_pulumi()


@pytest.mark.parametrize("target, expected", [("missing", "no such folder"), ("file", "not a folder"),
                                              ("dangling", "a symbolic link to nothing")])
def test_a_base_that_is_not_a_folder_is_a_usage_error(tmp_path, capsys, target, expected):
    base = tmp_path / "base"
    if target == "file":
        base.write_text("{}")
    elif target == "dangling":
        base.symlink_to(tmp_path / "gone")
    code, text = _run(tmp_path, capsys, "--base", str(base))
    assert code == 4, text
    assert f"--base {base}: {expected}" in text, text
    assert not (tmp_path / "build" / "demo" / "plan.json").exists()


@pytest.mark.parametrize("layout", ["empty", "other-stack"])
def test_a_base_without_a_plan_is_a_usage_error_not_a_warning(tmp_path, capsys, layout):
    """issue 37 item 3: a --base folder with no plan.json (the base branch's job did not run, or ran another
    stack) printed a warning and a verdict with no comparison: a pull request's review could pass without
    one. It is a usage error (exit 4), before the program runs."""
    base = tmp_path / "base"
    (base / ("other" if layout == "other-stack" else "")).mkdir(parents=True, exist_ok=True)
    if layout == "other-stack":
        (base / "other" / "plan.json").write_text('{"resources": []}')
    code, text = _run(tmp_path, capsys, "--base", str(base))
    assert code == 4, text
    assert f"--base {base}: no plan.json there or in demo/" in text, text
    assert not (tmp_path / "build" / "demo" / "plan.json").exists()


# --- issue 37: preflight killed with SIGKILL leaves no config file and no policy pack behind ------------------

KILLED_PREFLIGHT = """
import json, sys, time
from gpu_platform.preflight.analyzer import Analyzer
a = Analyzer(stack="demo", stack_config={"gpu-platform:cloud": "linode", "linode:token": "PLAINTEXT-TOKEN-37"})
a.start()
print(json.dumps({"pid": a._proc.pid}), flush=True)
time.sleep(600)
"""


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except OSError:
        return False


def test_a_preflight_killed_with_sigkill_leaves_no_token_on_disk_and_no_orphan_pack(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import ROOT

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PREFLIGHT], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp)})
    try:
        pack = json.loads(proc.stdout.readline())["pid"]
        assert _running(pack)
        # The pack has read the config and deleted it, and preflight its folder: no copy of it (the token)
        # stays on disk, even while both run.
        assert not list(tmp.iterdir()), list(tmp.rglob("*"))
        proc.send_signal(signal.SIGKILL)  # no atexit, no cleanup in preflight
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _running(pack) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _running(pack), "the policy pack outlived preflight (an orphan serving for ever)"
        assert not list(tmp.iterdir()), list(tmp.rglob("*"))  # nothing at all left behind
    finally:
        if proc.poll() is None:
            proc.kill()


# --- attacker review (0.3.0): huge objects in --job never hang or crawl ---------------------------------------

def _preflight_within(stack: str, job: Path, tmp_path: Path, limit: float) -> tuple[int, str]:
    """preflight <stack> --job <job> as a user runs it, in a process killed after `limit` seconds (a hang guard:
    how fast it answers is `make bench`'s to measure)."""
    import subprocess
    import sys

    from tests.conftest import ROOT

    try:
        done = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", stack, "--no-policies", "--quiet",
                               "--out", str(tmp_path / "build"), "--job", str(job)],
                              cwd=ROOT, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"preflight {stack} --job {job.name} still ran after {limit:.0f} s")
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text
    return done.returncode, text


def test_a_deployment_of_a_billion_replicas_is_packed_at_once_not_one_replica_at_a_time(tmp_path):
    """It hung on gcp-prod (fit's packing placed each replica on its own, over every node). Identical replicas
    fill a node at a time, and the answer names the Deployment and how many pods find no room."""
    need_charts()
    job = tmp_path / "deploy.yaml"
    job.write_text(_docs({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "big", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"replicas": 1_000_000_000, "selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}}, "spec": {"containers": [
                {"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                                               "limits": {"nvidia.com/gpu": "1"}}}]}}}}))
    code, text = _preflight_within("gcp-prod", job, tmp_path, 180)
    assert code == 3, text
    assert "Deployment/training/big" in text and "of 1000000000 pods find no room when every pod is placed" in text


def test_a_pod_of_thousands_of_containers_is_a_fit_problem_naming_the_field_not_minutes_of_cel(tmp_path):
    """A Pod of 5,000 containers kept the admission-policy evaluation (cel-python, per container) busy for
    two minutes; now fit says it evaluates at most 100 containers an object, naming the object and the field."""
    need_charts()
    job = tmp_path / "pod.yaml"
    job.write_text(_docs({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "training"},
                          "spec": {"containers": [{"name": f"c{i}", "image": "busybox",
                                                   "resources": {"requests": {"cpu": "1m"}}} for i in range(5000)]}}))
    code, text = _preflight_within("linode-dev", job, tmp_path, 180)
    assert code == 3, text
    assert "Pod/training/p" in text and "5000 containers in its pod templates (spec.containers: 5000)" in text
    assert "at most 100 containers an object" in text


def test_a_job_borrowing_a_platform_components_service_account_is_a_fit_problem_naming_it(tmp_path, capsys):
    """serviceAccountName: cluster-autoscaler in training planned clean; the platform creates that account in
    kube-system only, so the API server refuses every pod of the job. Fit says so, naming the account."""
    need_charts()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "x", "namespace": "training", "labels": {"kueue.x-k8s.io/queue-name": "gpu-queue"}},
        "spec": {"template": {"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
                              "spec": {"restartPolicy": "Never", "serviceAccountName": "cluster-autoscaler",
                                       "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                       "containers": [{"name": "c", "image": "busybox@sha256:" + "a" * 64, "resources": {
                                           "requests": {"cpu": "1", "nvidia.com/gpu": "1"},
                                           "limits": {"nvidia.com/gpu": "1"}}}]}}}}
    path = tmp_path / "job.yaml"
    path.write_text(_docs(job))
    code, text = _run(tmp_path, capsys, "--job", str(path))
    assert code == 3, text
    assert "its pods run as ServiceAccount cluster-autoscaler, which the platform creates for its own components in " \
           "kube-system, not in training" in text
