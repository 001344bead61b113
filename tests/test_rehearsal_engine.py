"""The Pulumi engine the rehearsal builds (issue 36 item 2): the CLI, the Python language host and the
Kubernetes provider in rehearsal/components.lock.toml, how rehearsal/build.py builds the two that need
more than a wrapper module (a tarball with a go.mod overlay and an installed shim; a provider whose main
package embeds what its `go generate` writes), and, once built (`python3 rehearsal/build.py pulumi
pulumi-language-python pulumi-resource-kubernetes`), the binaries themselves run offline."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_rehearsal_build import refused

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("rehearsal_build_engine", ROOT / "rehearsal" / "build.py")
build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(build)

BY_NAME = {c["name"]: c for c in build.load_lock()}
CLI, HOST, PROVIDER = BY_NAME["pulumi"], BY_NAME["pulumi-language-python"], BY_NAME["pulumi-resource-kubernetes"]
ENGINE = (CLI, HOST, PROVIDER)
BUILD_COMMAND = "`make engine-build` (python3 rehearsal/build.py pulumi pulumi-language-python pulumi-resource-kubernetes)"
ENV = {"GOVERSION": "go1.26.8", "GOOS": "linux", "GOARCH": "amd64"}


def _go_mod_json(folder: Path) -> dict:
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH: go.mod files are read with Go's own parser (`go mod edit -json`)")
    return json.loads(subprocess.run(["go", "mod", "edit", "-json"], cwd=folder, check=True,
                                     capture_output=True, text=True).stdout)


def _requires(mod: dict) -> dict[str, str]:
    return {r["Path"]: r["Version"] for r in mod.get("Require") or []}


def _provider_release() -> str:
    """The provider release the lock builds, as its version variable is set (upstream: the release tag)."""
    (value,) = PROVIDER["ldflags_x"].values()
    return value


# --- the lock ----------------------------------------------------------------------------------------------

def test_engine_components_are_pinned_built_with_the_rest_and_one_pulumi_release():
    for comp in ENGINE:  # the engine's tests are in `make test`: `make rehearsal-build` (CI's) builds it
        assert not comp.get("on_demand"), f"{comp['name']}: the engine tests would skip in CI"
    # The CLI and its language host ship together upstream: one tag, the language host's (the tarball's) one.
    assert CLI["version"] == HOST["version"] == "v3.259.0"
    assert CLI["module"] == "github.com/pulumi/pulumi/pkg/v3" and CLI["package"] == CLI["module"] + "/cmd/pulumi"
    assert HOST["source"] == f"pulumi/pulumi-language-python-{HOST['version']}.tar.gz"
    assert re.fullmatch(r"[0-9a-f]{64}", HOST["sha256"]) and re.fullmatch(r"[0-9a-f]{40}", HOST["commit"])
    # Both report the release they are (upstream's goreleaser -X of sdk/v3's version.Version).
    for comp in (CLI, HOST):
        assert comp["ldflags_x"] == {"github.com/pulumi/pulumi/sdk/v3/go/common/version.Version": "{version}"}
    # The provider: the one the proxy serves, v4.25.0's commit; its schema and its version say 4.25.0.
    assert PROVIDER["version"].endswith("-f47bc2d6f199")
    assert _provider_release() == "v4.25.0" and PROVIDER["generate"] == {"VERSION": "4.25.0"}


def test_the_wrappers_pin_the_release_and_its_dependencies():
    cli = _go_mod_json(ROOT / "rehearsal" / "go" / CLI["wrapper"])
    assert _requires(cli)["github.com/pulumi/pulumi/sdk/v3"] == CLI["version"], "pkg/v3 replaces sdk/v3 with the same tag's"
    # pkg/v3's own replace of atotto/clipboard, which a dependency's go.mod cannot carry.
    assert {(r["Old"]["Path"], r["New"]["Path"]) for r in cli.get("Replace") or []} == {
        ("github.com/atotto/clipboard", "github.com/tgummerer/clipboard")}
    provider = _go_mod_json(ROOT / "rehearsal" / "go" / PROVIDER["wrapper"])
    # The provider replaces its SDK with ../sdk (same commit); the proxy serves that SDK at the release tag.
    assert _requires(provider)["github.com/pulumi/pulumi-kubernetes/sdk/v4"] == _provider_release()
    assert not provider.get("Replace")


def test_the_engine_runs_the_program_in_its_own_environment():
    """No second requirements file: the engine runs the program with requirements.txt (pulumi-kubernetes 4.34.2,
    what a user's `pulumi up` runs) and the built provider v4.25.0 on $PATH, which the engine takes whatever release
    the SDK names (pulumi/pulumi v3.259.0 sdk/go/common/workspace/plugins.go GetPluginPath). The pair is safe as long
    as every input the program sends is one the provider knows: test_every_input_the_program_sends_..._schema."""
    assert not (ROOT / "requirements-engine.txt").exists()
    pins = dict(line.split("==") for line in (ROOT / "requirements.txt").read_text().splitlines()
                if "==" in line and not line.lstrip().startswith("#"))
    assert pins["pulumi-kubernetes"].split()[0] != _provider_release().lstrip("v")  # the skew the test below guards


def test_an_engine_runs_temporary_files_stay_in_its_own_folder(tmp_path):
    """The provider's kubeconfig files (bearer tokens; it never removes them) and Helm's temporary files go where the
    run's other files go: TMPDIR is a folder of the run, made before the CLI starts. Before this, each test session
    left dozens of kubeconfigs in /tmp (test_the_built_engine_previews_a_kubernetes_object_with_the_programs_sdk_offline
    shows the provider writing one there)."""
    from gpu_platform.rehearsal import engine

    (tmp_path / "run").mkdir()
    env = engine.EngineRun("onprem-dev", None, None, tmp_path / "run", ROOT, tmp_path).env(tmp_path / "kubeconfig")
    assert Path(env["TMPDIR"]).is_dir() and Path(env["TMPDIR"]).is_relative_to(tmp_path / "run"), env["TMPDIR"]


def test_the_engines_provider_waits_for_a_slow_api_server_as_long_as_the_rehearsal_does(tmp_path):
    """CI (2026-11-29): with four engine runs on two cores, the provider gave up fetching the OpenAPI document after
    client-go's 32 s discovery timeout. The engine's environment sets the provider's own knob, at least as long as the
    suite's rehearsal waits (180 s); where the provider's pinned source is in Go's module cache, it reads that name."""
    from gpu_platform.rehearsal import engine

    (tmp_path / "run").mkdir()
    env = engine.EngineRun("onprem-dev", None, None, tmp_path / "run", ROOT, tmp_path).env(tmp_path / "kubeconfig")
    assert int(env["PULUMI_K8S_CLIENT_TIMEOUT"]) >= 180
    if shutil.which("go") is None:
        return
    cache = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True).stdout.strip()
    source = Path(cache) / f"{PROVIDER['module']}@{PROVIDER['version']}" / "pkg" / "provider" / "provider.go"
    if source.is_file():
        assert 'os.Getenv("PULUMI_K8S_CLIENT_TIMEOUT")' in source.read_text()


# What `pulumi up` printed on CI (2026-11-30) when a Helm release's error stopped the engine, shortened: the end of the
# output (the stack's outputs) no longer held the release's error, only the Directory cut off as the engine stopped.
FAILED_UP = (
    " +  kubernetes:helm.sh/v3:Release platform-monitoring-kube-prometheus-stack **creating failed** error: context "
    "deadline exceeded\n"
    " +  pulumi:pulumi:Stack gpu-platform-linode-dev **creating failed (193s)** 2 errors; 5 warnings; 71 messages\n"
    "Diagnostics:\n"
    "  kubernetes:helm.sh/v3:Release (platform-monitoring-kube-prometheus-stack):\n"
    "    error: context deadline exceeded\n\n"
    "  pulumi:pulumi:Stack (gpu-platform-linode-dev):\n"
    "    Traceback (most recent call last):\n"
    "      File \"/root/.cache/gpu-platform/rehearsal/bin/pulumi-language-python-exec\", line 232, in <module>\n"
    "    KeyboardInterrupt\n\n"
    "    error: update failed\n"
    "    error: kubernetes:kustomize/v2:Directory resource 'platform-kubeflow-pipelines-cluster-scoped' has a problem: "
    "grpc: the client connection is closing\n\n"
    "  kubernetes:helm.sh/v3:Release (platform-kubeflow-trainer):\n"
    "    warning: the error: word in a warning is not an error\n\n"
    "Outputs:\n" + "".join(f"    output{i:03d}: \"{'x' * 60}\"\n" for i in range(120)) +
    "\nResources:\n    + 66 created\n    2 errored\n\nDuration: 3m24s\n"
)


def test_a_failed_commands_error_names_the_error_that_stopped_it_however_long_the_output_after_it():
    from gpu_platform.rehearsal import engine

    message = engine.failure_message("up --yes", 255, FAILED_UP)
    head = message.split("\nthe end of its output:\n", 1)[0]
    assert head.splitlines() == [
        "pulumi up --yes exited 255; its errors:",
        "  kubernetes:helm.sh/v3:Release (platform-monitoring-kube-prometheus-stack): error: context deadline exceeded",
        "  pulumi:pulumi:Stack (gpu-platform-linode-dev): error: update failed",
        "  pulumi:pulumi:Stack (gpu-platform-linode-dev): error: kubernetes:kustomize/v2:Directory resource "
        "'platform-kubeflow-pipelines-cluster-scoped' has a problem: grpc: the client connection is closing"], head
    assert message.endswith("Duration: 3m24s\n") and "context deadline exceeded" not in FAILED_UP[-4000:]
    # An error of several lines is kept whole (a program's traceback: its last line is the cause; a provider's joined
    # errors), up to its first 5 and last 15 lines; a warning after it is not part of it.
    frames = "".join(f"      File \"/p/m{i}.py\", line {i}, in f{i}\n        f{i + 1}()\n" for i in range(30))
    program = ("Diagnostics:\n  pulumi:pulumi:Stack (gpu-platform-onprem-dev):\n"
               "    error: Program failed with an unhandled exception:\n    Traceback (most recent call last):\n"
               f"{frames}    RuntimeError: the cause\n"
               "    warning: a warning after it\n    and its second line\n\n"
               "  kubernetes:core/v1:Secret (s):\n    error: Server-Side Apply field conflict detected.\n"
               "    conflict with \"kubectl\": .data.x\n\nResources:\n    1 errored\n")
    head = engine.failure_message("up", 255, program).split("\nthe end of its output:\n", 1)[0].splitlines()
    assert head[:3] == ["pulumi up exited 255; its errors:",
                        "  pulumi:pulumi:Stack (gpu-platform-onprem-dev): error: Program failed with an unhandled "
                        "exception:", "      Traceback (most recent call last):"], head
    assert head[6] == "      [43 lines]" and len(head) == 24 and head[-3:] == [
        "      RuntimeError: the cause",
        "  kubernetes:core/v1:Secret (s): error: Server-Side Apply field conflict detected.",
        "      conflict with \"kubectl\": .data.x"], head
    # A command that failed before the engine ran (no Diagnostics block) keeps the end of its output.
    assert engine.failure_message("stack init x", 1, "error: no Pulumi.yaml project file found\n") == (
        "pulumi stack init x exited 1\nthe end of its output:\nerror: no Pulumi.yaml project file found\n")


# What the non-interactive `pulumi up` prints as steps start and end (rows from onprem-dev's engine run, 2026-11-30):
# the Deployment and the Helm release are still in flight where the output stops; the Services finished (the second's
# row follows the progress dots on their line, as after a quiet spell), the Secret failed, and the stack and the
# components (the program's, the provider's kustomize Directory) get no row when they end.
IN_FLIGHT_UP = (
    "Updating (onprem-dev):\n@ updating....\n"
    " +  pulumi:pulumi:Stack gpu-platform-onprem-dev creating (0s) warning: using pulumi-resource-kubernetes\n"
    " +  gpu-platform:platform:Kubeflow platform-kubeflow creating (0s) \n"
    " +  kubernetes:kustomize/v2:Directory platform-kubeflow-pipelines creating (0s) \n"
    " +  kubernetes:core/v1:Service platform-kubeflow-pipelines:kubeflow/mysql creating (0s) [1/3] Finding Pods to "
    "direct traffic to\n"
    " +  kubernetes:apps/v1:Deployment platform-kubeflow-pipelines:kubeflow/ml-pipeline creating (0s) \n"
    " +  kubernetes:helm.sh/v3:Release platform-queue-kueue creating (3s) \n"
    " +  kubernetes:core/v1:Secret platform-notebooks-auth creating (0s) \n"
    "@ updating.....\n"
    " +  kubernetes:apps/v1:Deployment platform-kubeflow-pipelines:kubeflow/ml-pipeline creating (12s) Waiting for app "
    "ReplicaSet to be available (0/1 Pods available)\n"
    " +  kubernetes:core/v1:Service platform-kubeflow-pipelines:kubeflow/mysql created (10s) \n"
    " +  kubernetes:core/v1:Secret platform-notebooks-auth **creating failed** error: conflict\n"
    " ~  kubernetes:core/v1:ConfigMap gpu-dev-node-groups updating (0s) [diff: ~data]\n"
    " ~  kubernetes:core/v1:ConfigMap gpu-dev-node-groups updated (0.05s) [diff: ~data]\n"
    " +  kubernetes:core/v1:Service platform-kueue-webhook creating (0s) \n"
    "@ updating........ +  kubernetes:core/v1:Service platform-kueue-webhook created (11s) \n"
    "@ updating........\n"
)


def test_what_a_command_killed_at_its_timeout_was_waiting_for_is_read_from_its_rows():
    from gpu_platform.rehearsal import engine

    assert engine.unfinished_steps(IN_FLIGHT_UP) == [
        "kubernetes:apps/v1:Deployment platform-kubeflow-pipelines:kubeflow/ml-pipeline: Waiting for app ReplicaSet to "
        "be available (0/1 Pods available)",
        "kubernetes:helm.sh/v3:Release platform-queue-kueue"]
    # A destroy's rows the same way; nothing in flight once every row has ended.
    assert engine.unfinished_steps(" -  kubernetes:apps/v1:Deployment planted-web deleting (0s) Resource scheduled "
                                   "for deletion\n") == ["kubernetes:apps/v1:Deployment planted-web: Resource "
                                                          "scheduled for deletion"]
    assert engine.unfinished_steps(IN_FLIGHT_UP + " +  kubernetes:apps/v1:Deployment platform-kubeflow-pipelines:"
                                   "kubeflow/ml-pipeline created (40s) \n + kubernetes:helm.sh/v3:Release "
                                   "platform-queue-kueue created (51s) \n") == []


@pytest.fixture
def fake_cli(tmp_path, monkeypatch):
    """An EngineRun whose `pulumi` prints IN_FLIGHT_UP's rows, starts a plugin in a process group of its own (as the
    CLI starts each plugin: pulumi v3.259.0 plugin.go RegisterProcessGroup) and waits on it; the plugin's pid, its
    group's and the CLI's are written down. Yields (the run, a function reading those pids); a plugin left running
    by a failed test is killed afterwards."""
    from gpu_platform.rehearsal import engine

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rows, pids = tmp_path / "rows.txt", tmp_path / "plugin.pid"
    rows.write_text(IN_FLIGHT_UP)
    (bin_dir / "pulumi").write_text(
        f"#!{sys.executable}\nimport os, subprocess, sys\nsys.stdout.write(open({str(rows)!r}).read())\n"
        "sys.stdout.flush()\nplugin = subprocess.Popen(['sleep', '120'], process_group=0, stdout=subprocess.DEVNULL,\n"
        "                          stderr=subprocess.DEVNULL)\n"
        f"open({str(pids)!r}, 'w').write(f'{{plugin.pid}} {{os.getpgid(plugin.pid)}} {{os.getpid()}}')\n"
        "plugin.wait()\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setattr(engine, "engine_bin", lambda: bin_dir)
    (tmp_path / "run").mkdir()
    run = engine.EngineRun("onprem-dev", None, None, tmp_path / "run", ROOT, tmp_path)
    run.project.mkdir(parents=True)
    run._env = {"PATH": "/usr/bin:/bin"}

    def started() -> tuple[int, int, int]:
        plugin, group, cli = map(int, pids.read_text().split())
        assert group == plugin != cli  # the plugin led a process group of its own, as the CLI's plugins do
        return plugin, group, cli

    yield run, started
    if pids.exists() and _alive(plugin := int(pids.read_text().split()[0])):
        os.kill(plugin, 9)


def _gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def test_a_cli_command_past_its_timeout_is_stopped_with_its_plugins_and_says_what_it_waited_for(fake_cli):
    """The engine's `pulumi` is stopped at its timeout together with what it started (its plugins, the program), and
    the error names the steps still in flight; before this (CI, 2026-11-30) a hung `up` gave a bare TimeoutExpired."""
    from gpu_platform.rehearsal import engine

    run, started = fake_cli
    exited = "kueue-manager of kueue/kueue-controller-manager exited with code 1 (leader election lost); restarted in 80 s"
    run.host = SimpleNamespace(events=["an older event"] * 30 + [exited])
    with pytest.raises(engine.EngineError) as failed:
        run.pulumi("up", "--yes", timeout=3)
    lines = str(failed.value).splitlines()
    assert lines[:3] == [
        "pulumi up --yes did not finish in 3 s; still in flight:",
        "  kubernetes:apps/v1:Deployment platform-kubeflow-pipelines:kubeflow/ml-pipeline: Waiting for app ReplicaSet "
        "to be available (0/1 Pods available)",
        "  kubernetes:helm.sh/v3:Release platform-queue-kueue"], lines
    # What it ran beside: the machine's load, and the last 20 of the hosted controllers' events (a controller that
    # keeps exiting leaves its Deployment unready, and the release and the webhooks waiting on it).
    assert re.fullmatch(r"the machine's load average \(1, 5, 15 minutes\): [\d.]+, [\d.]+, [\d.]+", lines[3]), lines
    assert lines[4:25] == ["the hosted controllers: an older event"] * 19 + [f"the hosted controllers: {exited}",
                                                                            "the end of its output:"], lines
    plugin, _group, _cli = started()
    assert _gone(plugin), "the CLI's plugin outlived the command stopped at its timeout"
    assert "(exit -9)" in (run.log_dir / "pulumi.log").read_text()  # the partial output is logged as well


def test_a_cli_command_interrupted_while_it_runs_is_stopped_with_its_plugins(fake_cli):
    """Ctrl-C, or the control plane's SIGTERM handler, raising while the CLI runs: the CLI's session of its own keeps
    their signals from it, so the run stops it and its plugins itself, then lets the exception go on."""
    import signal

    run, started = fake_cli

    class Interrupted(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupted

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 2)
        with pytest.raises(Interrupted):
            run.pulumi("up", "--yes", timeout=60)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    plugin, _group, cli = started()
    assert _gone(cli) and _gone(plugin), "the interrupted CLI or its plugin is still running"


def _alive(pid: int) -> bool:
    """Whether `pid` is a process that has not exited (a zombie has: its parent is gone and init reaps it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _destroying_run(monkeypatch, left_after: list[list[str]]):
    """An EngineRun at its destroy, on a cluster that had `before` and, after each poll, what `left_after` lists
    (the last list stays), with a clock that moves one second a sleep: (the run, the sleeps it took)."""
    from types import SimpleNamespace

    from gpu_platform.rehearsal import engine

    before = {"v1 Namespace /default"}
    polls = iter(left_after)
    last: list[list[str]] = [[]]

    def snapshot(_client):
        last[0] = next(polls, last[0])
        return before | set(last[0])

    clock, sleeps = [0.0], []
    monkeypatch.setattr(engine, "snapshot", snapshot)
    # engine's own `time` only (a fake clock: the sleeps move it), not the time module every thread uses
    monkeypatch.setattr(engine, "time", SimpleNamespace(
        monotonic=lambda: clock[0], sleep=lambda s: (sleeps.append(s), clock.__setitem__(0, clock[0] + s))))
    run = object.__new__(engine.EngineRun)
    run.before, run.stack = before, "onprem-dev"
    run.cp = SimpleNamespace(client=None)
    run.report = engine.EngineReport(stack="onprem-dev")
    # A release that created its namespace: `helm uninstall` keeps the namespace (and what every namespace gets).
    run.report.resources = [{"type": "kubernetes:helm.sh/v3:Release", "name": "r", "namespace": "made",
                             "createNamespace": True, "chart": ""}]
    monkeypatch.setattr(run, "pulumi", lambda *args, **kw: None, raising=False)
    monkeypatch.setattr(run, "_delete_released_volumes", lambda: None, raising=False)
    return run, sleeps


KEPT = ["v1 Namespace /made", "v1 ConfigMap made/kube-root-ca.crt", "v1 ServiceAccount made/default"]


def test_destroy_waits_for_what_it_deleted_not_for_what_helm_keeps_by_design(monkeypatch):
    """Only what Helm keeps is left: done at the second look, a second later (the first version waited out its whole
    minute in every engine run, every run keeping a chart's CRDs). A namespace's contents going a few seconds after:
    waited for."""
    run, sleeps = _destroying_run(monkeypatch, [KEPT])
    run.destroy()
    assert sleeps == [1] and run.report.left_behind == [] and run.report.left_by_helm == sorted(KEPT)
    going = "v1 ConfigMap training/settings"
    run, sleeps = _destroying_run(monkeypatch, [KEPT + [going], KEPT + [going], KEPT])
    run.destroy()
    assert sleeps == [1, 1, 1] and run.report.left_behind == [] and run.report.timings["destroy-settle"] == 3


def test_an_object_made_again_after_destroy_seemed_done_is_left_behind(monkeypatch):
    """One look with only what Helm keeps is not the end: a controller still running (the run's hosted ones, its hook
    runner) may make something again a moment later, which is then left behind."""
    made_again = "trainer.kubeflow.org/v1alpha1 ClusterTrainingRuntime /torch-distributed"
    run, _sleeps = _destroying_run(monkeypatch, [KEPT, KEPT + [made_again]])
    run.destroy()
    assert run.report.left_behind == [made_again], run.report.left_behind


def test_what_destroy_leaves_for_good_is_reported_after_the_settle_time(monkeypatch):
    from gpu_platform.rehearsal import engine

    leak = "v1 ConfigMap training/leaked"
    run, sleeps = _destroying_run(monkeypatch, [KEPT + [leak]])
    run.destroy()
    assert len(sleeps) == engine.DESTROY_SETTLE_S + 1
    assert run.report.left_behind == [leak] and run.report.left_by_helm == sorted(KEPT)


# --- the language host: tarball + go.mod overlay + the exec shim ---------------------------------------------

def _sources_or_skip() -> Path:
    if not build.sources_dir().is_dir():
        pytest.skip(f"no shared sources folder ({build.sources_dir()}, ${build.SOURCES_ENV})")
    return build.sources_dir()


def _member(tar: tarfile.TarFile, suffix: str) -> str:
    (name,) = [n for n in tar.getnames() if n.endswith(suffix)]
    return name


def test_the_language_host_tarball_is_the_pinned_tag_and_holds_the_shim(tmp_path):
    _sources_or_skip()
    archive = build.verified_archive(HOST)  # raises, naming the file, on a hash mismatch
    with tarfile.open(archive) as tar:
        assert tar.pax_headers.get("comment") == HOST["commit"], "git archive records its commit: the lock's"
        gomod = tar.extractfile(_member(tar, "pulumi-language-python/go.mod")).read().decode()
        assert gomod.splitlines()[0] == f"module {HOST['module']}"
        main = tar.extractfile(_member(tar, "pulumi-language-python/main.go")).read().decode()
        assert 'pythonDefaultExec = "pulumi-language-python-exec"' in main
        shim = tar.getmember(_member(tar, "cmd/pulumi-language-python-exec"))
        assert shim.isfile() and shim.mode & 0o100


def test_the_overlay_is_the_tarballs_go_mod_less_the_repository_replaces(tmp_path):
    """rehearsal/go/pulumi-language-python/go.mod is the tarball's go.mod, less the two `replace`s by paths
    inside the pulumi repository, with pkg/v3 and sdk/v3 at the tag; the only other versions that differ are
    the four that pkg/v3 v3.259.0 requires newer (upstream's own go.mod has them at the pkg/v3.259.0 tag)."""
    _sources_or_skip()
    with tarfile.open(build.verified_archive(HOST)) as tar:
        (tmp_path / "go.mod").write_bytes(tar.extractfile(_member(tar, "pulumi-language-python/go.mod")).read())
    upstream, overlay = _go_mod_json(tmp_path), _go_mod_json(ROOT / "rehearsal" / "go" / HOST["overlay"])
    local = {r["Old"]["Path"] for r in upstream["Replace"] if r["New"]["Path"].startswith(".")}
    assert local == {"github.com/pulumi/pulumi/pkg/v3", "github.com/pulumi/pulumi/sdk/v3"}
    assert overlay.get("Replace") == [r for r in upstream["Replace"] if r["Old"]["Path"] not in local]
    up, ov = _requires(upstream), _requires(overlay)
    assert set(ov) == set(up)
    assert all(ov[m] == HOST["version"] for m in local)
    moved = {m for m in up if m not in local and up[m] != ov[m]}
    assert moved == {"google.golang.org/grpc", "github.com/mattn/go-runewidth",
                     "google.golang.org/genproto/googleapis/api", "google.golang.org/genproto/googleapis/rpc"}
    assert overlay["Module"] == upstream["Module"] and overlay["Go"] == upstream["Go"]


def _tarball(path: Path, files: dict[str, tuple[str, int]], top: str = "lang-1.0.0") -> str:
    with tarfile.open(path, "w:gz") as tar:
        for name, (text, mode) in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return hashlib.sha256(path.read_bytes()).hexdigest()


# Shaped like the language host's tarball: the module in cmd/lang with a go.mod whose replace points into a
# repository the tarball does not hold (so it cannot build as it is), and a shim beside the module folder.
# The SDK it imports is elsewhere in this tarball (the real overlay takes it from the module proxy instead).
LANG = {
    "cmd/lang/go.mod": ("module example.com/lang\n\ngo 1.22\n\nrequire example.com/sdk v1.0.0\n\n"
                        "replace example.com/sdk => ../../sdk\n", 0o644),
    "cmd/lang/main.go": ('package main\n\nimport (\n\t"fmt"\n\t"os"\n\t"path/filepath"\n\n\t"example.com/sdk"\n)\n\n'
                         'var Version = "dev"\n\nfunc main() {\n\texe, _ := os.Executable()\n'
                         '\t_, err := os.Stat(filepath.Join(filepath.Dir(exe), "lang-exec"))\n'
                         '\tfmt.Print(Version, " ", sdk.Name, " shim:", err == nil)\n}\n', 0o644),
    "cmd/lang/third_party/sdk/go.mod": ("module example.com/sdk\n\ngo 1.22\n", 0o644),
    "cmd/lang/third_party/sdk/sdk.go": ('package sdk\n\nconst Name = "sdk"\n', 0o644),
    "cmd/lang-exec": ("#!/bin/sh\necho shim\n", 0o755),
}


@pytest.fixture
def lang_comp(tmp_path, monkeypatch):
    sources, wrappers = tmp_path / "sources", tmp_path / "go"
    sources.mkdir()
    (wrappers / "lang").mkdir(parents=True)
    sha = _tarball(sources / "lang-1.0.0.tar.gz", LANG)
    # The overlay: the same module, its SDK replaced by a folder the tarball holds.
    (wrappers / "lang" / "go.mod").write_text("module example.com/lang\n\ngo 1.22\n\nrequire example.com/sdk v1.0.0\n\n"
                                              "replace example.com/sdk => ./third_party/sdk\n")
    (wrappers / "lang" / "go.sum").write_text("")
    monkeypatch.setenv(build.SOURCES_ENV, str(sources))
    monkeypatch.setattr(build, "WRAPPERS", wrappers)
    comp = {"name": "lang", "module": "example.com/lang", "version": "v1.0.0", "package": "example.com/lang",
            "source": "lang-1.0.0.tar.gz", "sha256": sha, "tags": [], "overlay": "lang", "files": ["../lang-exec"],
            "pin": "test", "ldflags_x": {"main.Version": "{version}"}}
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    (root / "keys").mkdir()
    return comp, root


@pytest.mark.gobuild
def test_a_tarball_builds_with_its_overlay_and_installs_its_files_offline(lang_comp, monkeypatch):
    """A real `go build` with the proxy off: the tarball's go.mod (a replace into a missing repository) would
    fail; the overlay's builds; the shim lands beside the binary, executable, and counts in the cache check."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH")
    comp, root = lang_comp
    monkeypatch.setenv("GOPROXY", "off")
    env = build.go_env()
    no_overlay = {k: v for k, v in comp.items() if k != "overlay"}
    assert build.build_all([no_overlay], env, root, set(), jobs=1) == 1, "the tarball's own go.mod must not build"
    assert build.build_all([comp], env, root, set(), jobs=1) == 0
    out = subprocess.run([str(root / "bin" / "lang")], capture_output=True, text=True, check=True).stdout
    assert out == "v1.0.0 sdk shim:true"
    assert os.access(root / "bin" / "lang-exec", os.X_OK)
    assert json.loads((root / "bin" / "VERSIONS.json").read_text())["lang"]["files"] == ["lang-exec"]
    assert sorted(p.name for p in root.iterdir()) == ["bin", "build-times.json", "keys"], "the unpacked source was removed"
    # A missing shim is not a cached build: the next run builds again.
    (root / "bin" / "lang-exec").unlink()
    monkeypatch.setattr(build, "build", lambda *a: (root / "bin" / "lang-exec").write_text("again"))
    assert build.build_all([comp], env, root, set(), jobs=1) == 0
    assert (root / "bin" / "lang-exec").read_text() == "again"


def test_the_language_host_tarball_is_refused_when_it_is_not_the_pinned_one(tmp_path, monkeypatch, capsys):
    """The real lock entry against a tarball of the same name with other bytes: refused before anything runs."""
    sources = tmp_path / "sources"
    (sources / "pulumi").mkdir(parents=True)
    fake = sources / HOST["source"]
    _tarball(fake, LANG, top="pulumi-language-python-v3.259.0")
    monkeypatch.setenv(build.SOURCES_ENV, str(sources))
    monkeypatch.setattr(build.subprocess, "run", lambda *a, **k: pytest.fail(f"ran {a}"))
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    (root / "keys").mkdir()
    assert build.build_all([HOST], ENV, root, set(), jobs=1) == 1
    err = capsys.readouterr().err
    assert str(fake) in err and HOST["sha256"] in err and "refusing" in err and "FAILED: pulumi-language-python" in err
    assert not any((root / "bin").glob("pulumi-language-python*"))


@pytest.mark.gobuild
def test_a_file_to_install_from_outside_the_tarball_fails_the_build_and_installs_nothing(lang_comp, tmp_path):
    """The package builds (a real `go build`); installing `files` that climb out of the unpacked tarball is refused."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH")
    comp, root = lang_comp
    escaping = dict(comp, files=["../../../../outside"])
    (tmp_path / "outside").write_text("not part of the tarball")
    assert build.build_all([escaping], build.go_env(), root, set(), jobs=1) == 1
    assert not (root / "bin" / "outside").exists()


def test_files_and_overlay_lock_errors_name_the_component(tmp_path):
    lock = tmp_path / "components.lock.toml"
    head = ('[[component]]\nname = "lang"\nmodule = "example.com/lang"\nversion = "v1.0.0"\npackage = "example.com/lang"\n'
            f'pin = "x"\nldflags_x = {{}}\nsource = "lang-1.0.0.tar.gz"\nsha256 = "{"a" * 64}"\ntags = []\n')
    refused(build, lock, head + 'overlay = "missing"\n', r"\(lang\): overlay rehearsal/go/missing needs a go.mod and a go.sum")
    refused(build, lock, head + 'files = "lang-exec"\n', r"\(lang\): files must be a list of paths")
    refused(build, lock, head + 'generate = { VERSION = "1" }\n', r"\(lang\): `generate` is for wrapper components")


def test_the_key_covers_the_overlay_and_the_files(lang_comp):
    comp, _ = lang_comp
    key = build.build_key(comp, ENV)
    assert build.build_key(dict(comp, files=[]), ENV) != key
    (build.WRAPPERS / "lang" / "go.sum").write_text("example.com/x v1.0.0 h1:abc=\n")
    assert build.build_key(comp, ENV) != key


def test_the_key_covers_generate():
    assert build.build_key(dict(PROVIDER, generate={"VERSION": "4.25.1"}), ENV) != build.build_key(PROVIDER, ENV)


# --- go generate before the build (the provider's embedded schema) -------------------------------------------

GENERATED = {
    "main.go": ('//go:generate go run ./generate.go\n\npackage main\n\nimport (\n\t_ "embed"\n\t"fmt"\n)\n\n'
                '//go:embed schema-embed.json\nvar schema string\n\nfunc main() { fmt.Print(schema) }\n'),
    "generate.go": ('//go:build ignore\n\npackage main\n\nimport "os"\n\nfunc main() {\n'
                    '\tos.WriteFile("schema-embed.json", []byte(`{"version":"`+os.Getenv("VERSION")+`"}`), 0o600)\n}\n'),
}


@pytest.mark.gobuild
def test_a_generated_embed_is_written_by_go_generate_in_a_copy_and_built_offline(tmp_path, monkeypatch):
    """As pulumi-kubernetes' main package: it embeds a file only its `go generate` writes (absent from the
    module). The package is copied out of the (read-only) module cache into a copy of the wrapper, generated
    with the lock's environment, built; the module cache and the wrapper are left as they were."""
    if shutil.which("go") is None:
        pytest.skip("go is not on PATH")
    module_dir = tmp_path / "modcache" / "example.com" / "prov@v1.0.0"
    pkg = module_dir / "cmd" / "prov"
    pkg.mkdir(parents=True)
    for name, text in GENERATED.items():
        (pkg / name).write_text(text)
        (pkg / name).chmod(0o444)
    pkg.chmod(0o555)
    wrappers = tmp_path / "go"
    (wrappers / "prov").mkdir(parents=True)
    (wrappers / "prov" / "go.mod").write_text("module gpu-platform.local/rehearsal/prov\n\ngo 1.22\n")
    (wrappers / "prov" / "go.sum").write_text("")
    monkeypatch.setattr(build, "WRAPPERS", wrappers)
    monkeypatch.setattr(build, "module_download", lambda comp: {"Dir": str(module_dir), "Info": str(tmp_path / "info")})
    (tmp_path / "info").write_text('{"Version": "v1.0.0", "Time": "2026-01-15T03:34:56Z"}')
    monkeypatch.setenv("GOPROXY", "off")
    comp = {"name": "prov", "module": "example.com/prov", "version": "v1.0.0", "package": "example.com/prov/cmd/prov",
            "wrapper": "prov", "generate": {"VERSION": "4.25.0"}, "pin": "test", "ldflags_x": {}}
    root = tmp_path / "cache"
    (root / "bin").mkdir(parents=True)
    (root / "keys").mkdir()
    try:
        assert build.build_all([comp], build.go_env(), root, set(), jobs=1) == 0
    finally:
        pkg.chmod(0o755)
    out = subprocess.run([str(root / "bin" / "prov")], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {"version": "4.25.0"}
    assert sorted(p.name for p in pkg.iterdir()) == ["generate.go", "main.go"], "the module cache was written to"
    assert sorted(p.name for p in (wrappers / "prov").iterdir()) == ["go.mod", "go.sum"]
    assert sorted(p.name for p in root.iterdir()) == ["bin", "build-times.json", "keys"]


# --- the built engine, offline -------------------------------------------------------------------------------

def _engine_bin() -> Path:
    """The cache's bin/ when it holds the three built from the lock as it is now (VERSIONS.json), else skip."""
    bin_dir = build.cache_dir() / "bin"
    listed = json.loads((bin_dir / "VERSIONS.json").read_text()) if (bin_dir / "VERSIONS.json").is_file() else {}
    stale = [c["name"] for c in ENGINE if listed.get(c["name"], {}).get("version") != c["version"]]
    missing = [n for n in ("pulumi", "pulumi-language-python", "pulumi-language-python-exec",
                           "pulumi-resource-kubernetes") if not (bin_dir / n).is_file()]
    if stale or missing:
        pytest.skip(f"the Pulumi engine is not built in {bin_dir} ({', '.join(sorted(set(stale + missing)))}): "
                    f"run {BUILD_COMMAND}: on demand, minutes of CPU (docs/rehearsal.md)")
    return bin_dir


def _offline_env(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    """Only the built binaries on PATH (and the system's sh/python3), a home and a file backend of the test's
    own, no update check, no plugin acquisition, and any HTTP(S) request sent to a closed port: a download
    attempt fails the test instead of succeeding quietly. No automatic log, as in an engine run."""
    from gpu_platform.rehearsal.engine import without_automatic_logs

    home = tmp_path / "pulumi-home"
    home.mkdir()
    without_automatic_logs(home)
    (tmp_path / "state").mkdir()
    (tmp_path / "tmp").mkdir()
    return {
        "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"]),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path / "tmp"),  # the provider's kubeconfig files (engine.EngineRun.env)
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "rehearsal-only-passphrase",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
    }


def _run(cmd: list[str], env: dict, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_the_built_cli_and_language_host_report_their_release(tmp_path):
    bin_dir = _engine_bin()
    env = _offline_env(tmp_path, bin_dir)
    assert _run([str(bin_dir / "pulumi"), "version"], env).stdout.strip() == CLI["version"]
    assert _run([str(bin_dir / "pulumi-language-python"), "-version"], env).stdout.strip() == HOST["version"]


def _provider_plugin_info_and_schema(tmp_path) -> tuple[str, dict]:
    """The built provider started as the engine starts one (it prints its port), asked GetPluginInfo and GetSchema
    with the Python SDK's own gRPC stubs."""
    import grpc
    from google.protobuf import empty_pb2
    from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

    bin_dir = _engine_bin()
    proc = subprocess.Popen([str(bin_dir / "pulumi-resource-kubernetes")], env=_offline_env(tmp_path, bin_dir),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline().strip())
        # The schema is 5 MB; the engine raises gRPC's 4 MB receive limit too.
        with grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.max_receive_message_length", 64 << 20)]) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = provider_pb2_grpc.ResourceProviderStub(channel)
            version = stub.GetPluginInfo(empty_pb2.Empty()).version
            return version, json.loads(stub.GetSchema(provider_pb2.GetSchemaRequest()).schema)
    finally:
        proc.kill()
        proc.wait()


def test_the_built_provider_reports_its_release_over_its_grpc_interface(tmp_path):
    """Version v4.25.0 and the generated schema's 4.25.0."""
    version, schema = _provider_plugin_info_and_schema(tmp_path)
    assert version == _provider_release()
    assert schema["name"] == "kubernetes" and schema["version"] == PROVIDER["generate"]["VERSION"]


def inputs_unknown_to(schema: dict, resources) -> tuple[set[str], set[str]]:
    """(`type key` of each top-level input of a Kubernetes resource or provider that the provider's schema does not
    list for its type, the types checked). A custom resource's type is not in the schema: the API server checks it."""
    known = {t: set(r.get("inputProperties") or {}) for t, r in schema["resources"].items()}
    known["pulumi:providers:kubernetes"] = set(schema["provider"]["inputProperties"])
    checked, unknown = set(), set()
    for r in resources:
        if r.type in known:
            checked.add(r.type)
            unknown |= {f"{r.type} {key}" for key in r.wire_inputs if key not in known[r.type]}
    return unknown, checked


def test_every_input_the_program_sends_is_in_the_built_providers_schema(tmp_path):
    """Why the program's SDK (4.34.2) may drive the built provider (4.25.0): for every shipped stack, each top-level
    input of each Kubernetes resource and provider the program registers is an input of that type in the provider's
    own schema. An option newer than 4.25.0 (Provider's `alwaysRender`, `enablePatchForce`, `upsertExistingObjects`;
    helm.v3.Release's `takeOwnership`) would reach a provider that does not know it, and the rehearsal would no
    longer be what users run: this fails naming it."""
    from gpu_platform.preflight.runner import stack_names
    from tests.conftest import shipped_plan

    _version, schema = _provider_plugin_info_and_schema(tmp_path)
    unknown, checked = inputs_unknown_to(schema, [r for stack in stack_names(ROOT / "stacks")
                                                  for r in shipped_plan(stack).resources])
    assert unknown == set(), f"inputs the built provider v4.25.0 does not know: {sorted(unknown)}"
    assert {"pulumi:providers:kubernetes", "kubernetes:helm.sh/v3:Release", "kubernetes:kustomize/v2:Directory",
            "kubernetes:core/v1:Namespace", "kubernetes:apps/v1:Deployment"} <= checked, sorted(checked)


def test_a_newer_sdks_option_fails_the_schema_check(tmp_path):
    """The check above can fail: a program passing Release's `take_ownership` (pulumi-kubernetes 4.26 on) sends
    `takeOwnership`, which the built provider's schema lacks."""
    import pulumi_kubernetes as k8s

    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping

    def program() -> None:
        k8s.helm.v3.Release("adopted", chart="/charts/kueue-0.14.4.tgz", take_ownership=True)

    _version, schema = _provider_plugin_info_and_schema(tmp_path)
    plan = run_program(stack_input_from_mapping("schema-test", {"gpu-platform:cloud": "kubernetes"}), program=program)
    unknown, _checked = inputs_unknown_to(schema, plan.resources)
    assert unknown == {"kubernetes:helm.sh/v3:Release takeOwnership"}, unknown


def test_the_built_engine_previews_an_empty_python_program_offline(tmp_path):
    """`pulumi login` to a local file backend, `stack init`, `preview` of a Python program with no resources,
    with only the built binaries on PATH: the CLI finds its language host beside itself, the host its exec
    shim, the program runs on this interpreter's environment (the SDK of requirements.txt), and nothing is
    downloaded (PULUMI_HOME's plugin folder stays empty)."""
    bin_dir = _engine_bin()
    env = _offline_env(tmp_path, bin_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        "name: engine-smoke\nruntime:\n  name: python\n  options:\n"
        f"    toolchain: pip\n    virtualenv: {sys.prefix}\n")
    (project / "__main__.py").write_text('import pulumi\n\npulumi.export("answer", 42)\n')
    pulumi = str(bin_dir / "pulumi")
    _run([pulumi, "login", env["PULUMI_BACKEND_URL"]], env, project)
    _run([pulumi, "stack", "init", "rehearsal", "--non-interactive"], env, project)
    t0 = time.monotonic()
    preview = _run([pulumi, "preview", "--non-interactive", "--diff", "--stack", "rehearsal"], env, project)
    out = preview.stdout + preview.stderr
    assert "answer: 42" in out and "pulumi:pulumi:Stack" in out and "engine-smoke-rehearsal" in out, out
    assert "using pulumi-language-python from $PATH" not in out
    assert not any((Path(env["PULUMI_HOME"]) / "plugins").glob("*")), "a plugin was installed into PULUMI_HOME"
    assert time.monotonic() - t0 < 240


PROGRAM_VENV = ROOT / ".venv"


def test_the_engines_cli_writes_no_automatic_log_unless_asked(tmp_path, monkeypatch):
    """The built CLI writes a debug log of every step's properties to $PULUMI_HOME/logs on every command, 40 % of its
    CPU in an engine run (engine.AUTOMATIC_LOGS_ENV says more). In the engine's own environment it writes none; with
    the switch it writes one, also in a PULUMI_HOME a run without the switch left (so this test notices a CLI that has
    stopped logging, or logs elsewhere, and the file in its way is no longer what stops it)."""
    from gpu_platform.rehearsal import engine

    bin_dir = _engine_bin()
    for keep in (False, True):
        case = tmp_path / "case"  # one home for both: the switch undoes what the run before it left
        (case / "run").mkdir(parents=True, exist_ok=True)
        if keep:
            monkeypatch.setenv(engine.AUTOMATIC_LOGS_ENV, "1")
        else:
            monkeypatch.delenv(engine.AUTOMATIC_LOGS_ENV, raising=False)
        run = engine.EngineRun("onprem-dev", None, None, case / "run", ROOT, case)
        env = {**run.env(case / "kubeconfig"), "PATH": os.pathsep.join([str(bin_dir), "/usr/bin", "/bin"])}
        home = Path(env["PULUMI_HOME"])
        project = case / f"project-{keep}"
        project.mkdir()
        (project / "Pulumi.yaml").write_text("name: engine-logs\nruntime: python\n")
        out = "".join(p.stdout + p.stderr for p in (
            _run([str(bin_dir / "pulumi"), "stack", "init", f"rehearsal-{keep}", "--non-interactive"], env, project),
            _run([str(bin_dir / "pulumi"), "stack", "ls", "--non-interactive"], env, project)))
        logs = sorted(p.name for p in home.rglob("*") if p.is_file() and p.name.startswith("pulumi-"))
        if keep:
            assert (home / "logs").is_dir() and logs, f"the CLI wrote no automatic log in {home}: {out}"
        else:
            assert (home / "logs").is_file() and logs == [], (logs, out)


def test_the_built_engine_previews_a_kubernetes_object_with_the_programs_sdk_offline(tmp_path):
    """The program's own environment (requirements.txt) and the built provider: a ConfigMap through an explicit
    provider whose cluster does not answer previews as a create; the provider is the built binary on PATH (the
    engine says which), and nothing is downloaded."""
    bin_dir = _engine_bin()
    env = _offline_env(tmp_path, bin_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: engine-k8s\nruntime:\n  name: python\n  options:\n    toolchain: pip\n    virtualenv: {PROGRAM_VENV}\n")
    (project / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\n"
        'clusters: [{name: nowhere, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]\n'
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: nowhere, user: u}}]\n"
        "current-context: c\n")
    (project / "__main__.py").write_text(
        "import pulumi\nimport pulumi_kubernetes as k8s\n\n"
        'provider = k8s.Provider("rehearsal", kubeconfig=open("kubeconfig").read())\n'
        'cm = k8s.core.v1.ConfigMap("smoke", metadata={"name": "smoke", "namespace": "default"}, data={"a": "b"},\n'
        "                           opts=pulumi.ResourceOptions(provider=provider))\n"
        'pulumi.export("name", cm.metadata.name)\n')
    pulumi = str(bin_dir / "pulumi")
    _run([pulumi, "login", env["PULUMI_BACKEND_URL"]], env, project)
    _run([pulumi, "stack", "init", "rehearsal", "--non-interactive"], env, project)
    preview = _run([pulumi, "preview", "--non-interactive", "--stack", "rehearsal"], env, project)
    out = preview.stdout + preview.stderr
    assert "kubernetes:core/v1:ConfigMap" in out and "+ 3 to create" in out, out
    assert f"using pulumi-resource-kubernetes from $PATH at {bin_dir / 'pulumi-resource-kubernetes'}" in out
    assert not any((Path(env["PULUMI_HOME"]) / "plugins").glob("*")), "a plugin was installed into PULUMI_HOME"
    # The provider wrote the kubeconfig it was given, token and all, to a temporary file it keeps: in TMPDIR, the
    # test's own folder (as engine.EngineRun.env has it), not /tmp.
    kept = list(Path(env["TMPDIR"]).glob("kubeconfig*"))
    assert kept and "token: x" in kept[0].read_text(), sorted(Path(env["TMPDIR"]).iterdir())


def test_the_provider_skew_was_reviewed_for_the_pair_the_engine_runs():
    """The built provider and the program's SDK differ (test_the_engine_runs_the_program_in_its_own_environment);
    engine.PROVIDER_SKEW lists what that changes, reviewed for one pair. Moving either pin fails here until the list
    is read again against pulumi-kubernetes' changes between the two (and SKEW_REVIEWED_FOR moved with it)."""
    from gpu_platform.rehearsal import engine

    sdk = next(line.split("==")[1].split()[0] for line in (ROOT / "requirements.in").read_text().splitlines()
               if line.startswith("pulumi-kubernetes=="))
    assert engine.SKEW_REVIEWED_FOR == (_provider_release().lstrip("v"), sdk)
    assert all(re.match(r"(#\d+ \(4\.\d+\.\d+\)|Helm v)", entry) for entry in engine.PROVIDER_SKEW), engine.PROVIDER_SKEW
