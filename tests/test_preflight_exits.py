"""Clean exits of the preflight command (issue 23): usage errors exit 4, the stack is named before any
message, control characters and secrets never reach the terminal, a policy config beside --stack-file is
read, and SIGTERM ends the policy pack and removes every temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, stack_config
from tests.test_hostile_input import run_main


def _stack_file(tmp_path: Path, name: str = "demo", **changes) -> Path:
    config = stack_config("linode-dev")
    config.update(changes)
    path = tmp_path / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "dangling"])
def test_a_policy_config_that_is_not_a_file_is_a_usage_error(tmp_path, capsys, kind):
    stack = _stack_file(tmp_path)
    policy = tmp_path / "policy.yaml"
    if kind == "directory":
        policy.mkdir()
    elif kind == "dangling":
        policy.symlink_to(tmp_path / "gone.yaml")
    code, text, _ = run_main(["--stack-file", str(stack), "--policy-config", str(policy), "--quiet",
                              "--out", str(tmp_path / "build")], capsys)
    assert code == 4, text
    assert f"--policy-config {policy}" in text and "preflight demo: USAGE-ERROR" in text
    assert "preflight None" not in text and "Traceback" not in text


@pytest.mark.parametrize("kind", ["directory", "dangling"])
def test_a_stack_file_that_is_not_a_file_is_a_usage_error(tmp_path, capsys, kind):
    path = tmp_path / "Pulumi.demo.yaml"
    if kind == "directory":
        path.mkdir()
    else:
        path.symlink_to(tmp_path / "gone.yaml")
    code, text, _ = run_main(["--stack-file", str(path), "--quiet", "--no-policies"], capsys)
    assert code == 4, text
    assert "preflight demo: USAGE-ERROR" in text and "preflight None" not in text


@pytest.mark.parametrize("out", ["file", "under-a-file", "unwritable"])
def test_an_out_folder_that_cannot_be_written_is_a_usage_error(tmp_path, capsys, out):
    stack = _stack_file(tmp_path)
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = {"file": blocker, "under-a-file": blocker / "sub", "unwritable": Path("/proc/gpu-platform/out")}[out]
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "--no-policies", "--out", str(target)], capsys)
    assert code == 4, text
    assert "--out" in text and "Traceback" not in text


def test_control_characters_in_keys_are_escaped(tmp_path, capsys):
    stack = _stack_file(tmp_path, **{"gpu-platform:x\x1b[2K\rgpu-platform:cloud: OK": 1})
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "--no-policies"], capsys)
    assert code == 2, text
    assert "\x1b" not in text and "\r" not in text
    assert "\\x1b[2K\\rgpu-platform:cloud: OK" in text


def test_a_secure_value_beside_other_keys_is_never_echoed(tmp_path, capsys):
    stack = _stack_file(tmp_path, **{"gpu-platform:owner": {"secure": "AAABAOWNERCIPHER", "note": "x"}})
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "--no-policies"], capsys)
    assert code == 2, text
    assert "AAABAOWNERCIPHER" not in text and "gpu-platform:owner: (a secret value)" in text


def test_a_stack_named_like_preflights_own_folders_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GPU_PLATFORM_PREFLIGHT_CACHE", raising=False)  # the cache where a user's run keeps it
    stack = _stack_file(tmp_path, name=".cache")
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "--no-policies",
                              "--out", str(tmp_path / "build")], capsys)
    assert code == 2 and "not starting with '.'" in text, text
    assert not (tmp_path / "build" / ".cache").exists()


def test_a_policy_config_beside_the_stack_file_is_read(tmp_path, capsys):
    stack = _stack_file(tmp_path)
    (tmp_path / "policy.demo.yaml").write_text("gpu-count-ceiling:\n  maxGpus: 100000\n")
    code, text, _ = run_main(["--stack-file", str(stack), "--quiet", "-v", "--out", str(tmp_path / "build")], capsys)
    assert code == 3, text
    assert "gpu-count-ceiling" in text and "is a mandatory guardrail" in text


def _children(pid: int) -> set[int]:
    out = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return out


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_mid_analysis_stops_the_pack_and_removes_temporary_files(tmp_path, sig):
    """SIGTERM (or SIGHUP: the terminal closed; the attacker review found the pack left running and the
    temporary config behind) while the policy pack runs: the command ends, the pack process with it, and
    the temporary stack-config.json (the stack's config as the pack reads it) is gone."""
    stack = _stack_file(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen([sys.executable, "-m", "gpu_platform.preflight", "--stack-file", str(stack), "--quiet",
                             "--out", str(tmp_path / "build")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    pack = set()
    while time.monotonic() < deadline and proc.poll() is None:
        # mid-analysis: the program has run (plan.json is written), the pack and the chart rendering are at work
        # (the pack deletes stack-config.json once read and preflight its folder, issue 37: the process shows it)
        if (tmp_path / "build" / "demo" / "plan.json").exists():
            pack = {c for c in _children(proc.pid) if "pulumi.policy" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")}
            if pack:
                break
        time.sleep(0.05)
    assert pack, "the policy pack never started"
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, err.decode()[-2000:]
    assert f"interrupted ({sig.name})".encode() in err and b"Traceback" not in err
    for pid in pack:
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], \
            f"policy pack {pid} still running"
    assert not list(tmp.rglob("stack-config.json")), "the temporary stack config was left behind"
    assert not list(tmp.iterdir()), f"temporary files left: {list(tmp.rglob('*'))[:10]}"


@pytest.mark.parametrize("raised", [RuntimeError, KeyboardInterrupt])
def test_a_program_stopped_by_an_unexpected_exception_in_process_ends_the_pack(tmp_path, monkeypatch, raised):
    """preflight's main() called in-process (as the rehearsal and the tests call it): a program stopped by
    anything but a ProgramError (a bug, Ctrl-C) raises on, and the policy pack started beside the program ends
    with it. It was left running until the interpreter exited (the review of the runner's exception path)."""
    import gpu_platform.preflight.__main__ as cli

    started, packs = [], []

    class Recorded(cli.BackgroundAnalyzer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    def stopped_program(_stack_input):
        started[0].thread.join(timeout=60)  # the pack is up, as it is when a real program fails
        packs.append(started[0].analyzer._proc)
        raise raised("the program stopped")

    monkeypatch.setattr(cli, "BackgroundAnalyzer", Recorded)
    monkeypatch.setattr(cli, "run_program", stopped_program)
    with pytest.raises(raised, match="the program stopped"):
        cli.main(["--stack-file", str(_stack_file(tmp_path)), "--quiet", "--out", str(tmp_path / "build")])
    assert len(packs) == 1 and packs[0] is not None, "the pack never started"
    assert packs[0].poll() is not None, f"policy pack {packs[0].pid} still running"


@pytest.mark.parametrize("which", ["stack", "policy"])
def test_one_long_string_aliased_thousands_of_times_is_refused(tmp_path, capsys, which):
    """412 KB: one 400 KB string aliased 4,000 times is few YAML nodes but 1.6 GB of text once expanded;
    the loader counts the text (safe_yaml.MAX_EXPANDED_BYTES) and refuses it before building it."""
    bomb = "x" * 400_000
    aliases = ", ".join(["*s"] * 4000)
    stack = _stack_file(tmp_path)
    if which == "stack":
        stack.write_text(stack.read_text() + f"  other:long: &s {bomb}\n  other:many: [{aliases}]\n")
        argv = ["--stack-file", str(stack), "--no-policies"]
    else:
        policy = tmp_path / "policy.yaml"
        policy.write_text(f"gpu-count-ceiling:\n  maxGpus: 8\n  note: &s {bomb}\ncost-allocation-tags: [{aliases}]\n")
        argv = ["--stack-file", str(stack), "--policy-config", str(policy)]
    code, text, _ = run_main(argv + ["--quiet", "--out", str(tmp_path / "build")], capsys)
    assert code == 2, text
    assert "aliases expand to more than 2048 KiB of text" in text


def test_the_whole_run_has_a_deadline_with_a_clear_message(tmp_path):
    """--timeout bounds the whole command: past it preflight says so, exits 3 (no verdict) and leaves no
    policy pack or temporary stack config behind."""
    stack = _stack_file(tmp_path)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "--stack-file", str(stack), "--quiet",
                          "--timeout", "1", "--out", str(tmp_path / "build")], cwd=ROOT,
                         env={**os.environ, "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=120)
    assert run.returncode == 3, run.stderr[-2000:]
    assert "preflight demo: gave up after 1s (--timeout): no verdict" in run.stderr
    assert "Traceback" not in run.stderr
    assert not list(tmp.rglob("stack-config.json"))


def test_the_charts_help_names_every_folder_preflight_looks_in():
    """--help once named $GPU_PLATFORM_CHARTS and ../shared/charts only: a fresh clone uses the user cache."""
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "--help"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "400"})
    charts = next(line for line in run.stdout.splitlines() if line.strip().startswith("--charts DIR"))
    assert all(where in charts for where in ("$GPU_PLATFORM_CHARTS", "../shared/charts", "~/.cache/gpu-platform/charts",
                                             "charts pull")), charts


def test_the_help_lists_the_other_subcommands_each_of_which_answers_help():
    """Adopter review (issue 37 brief), item 6: `preflight --help` named none of `charts`, `summary` and
    `policy-config`, so a user reading it could not find them."""
    run = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", "--help"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "COLUMNS": "400"})
    assert run.returncode == 0
    epilog = run.stdout.split("other commands", 1)[1]
    for sub in ("charts pull|list|ensure", "summary DIR", "policy-config STACK"):
        assert f"gpu_platform.preflight {sub} " in epilog, epilog
        word = sub.split()[0]
        sub_help = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", word, "--help"], cwd=ROOT,
                                  capture_output=True, text=True)
        assert sub_help.returncode == 0 and f"gpu_platform.preflight {word}" in sub_help.stdout, sub_help.stderr


@pytest.mark.parametrize("argv,armed", [
    (["linode-dev"], 900.0),
    (["linode-dev", "--rehearse"], 2700.0),  # 765-800 s measured for linode-dev's rehearsal on a loaded machine
    (["linode-dev", "--rehearse", "--timeout", "60"], 60.0),
])
def test_the_deadline_leaves_a_rehearsal_room_unless_the_user_sets_one(monkeypatch, argv, armed):
    """The whole command's deadline: 900 s for a preflight, 2,700 s when it also rehearses (the rehearsal boots a
    control plane and runs every scenario; 900 s cut linode-dev's off on a loaded 2-core machine), a given
    --timeout as given."""
    from gpu_platform.preflight import __main__ as cli

    seen = []
    monkeypatch.setattr(cli, "_watchdog", lambda seconds, stack: seen.append(seconds))
    monkeypatch.setattr(cli.Run, "execute", lambda self: 0)
    assert cli.main(argv, deadline=True) == 0
    assert seen == [armed]
