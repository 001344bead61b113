"""A fresh clone with no `../shared` beside it: `make preflight` fills the user chart cache by itself
when it can, and says which folders it looked in and how to fill one when it cannot; never a traceback.
The chart tests skip in the same words (tests/fit_support.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_platform.preflight.fit import pull
from tests.conftest import ROOT

IGNORED = shutil.ignore_patterns(".git", ".venv*", "build", "__pycache__", ".pytest_cache", "*.egg-info", ".hypothesis")


def offline_env(home: Path) -> dict[str, str]:
    """No chart folder named, an empty user cache, and every fetch refused at once (a proxy that is not
    there: Helm, git and kubectl honour it), as on a machine without the network."""
    env = {k: v for k, v in os.environ.items() if k != "GPU_PLATFORM_CHARTS"}
    dead = "http://127.0.0.1:9"
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), HTTPS_PROXY=dead, HTTP_PROXY=dead,
               https_proxy=dead, http_proxy=dead, NO_PROXY="", no_proxy="", NO_COLOR="1")
    return env


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The repository copied where nothing sits beside it, using this checkout's virtualenv."""
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    where = tmp_path_factory.mktemp("elsewhere") / "gpu-platform"
    shutil.copytree(ROOT, where, ignore=IGNORED)
    (where / ".venv").symlink_to(Path(sys.prefix))
    assert not (where.parent / "shared").exists()
    return where


def test_make_preflight_without_the_shared_folder_says_where_it_looked_and_how_to_fill_one(clone, tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # -o: the virtualenv is this checkout's; make must not rebuild it because the copy's files are newer.
    run = subprocess.run(["make", "-o", ".venv/.installed", "preflight"], cwd=clone, env=offline_env(home),
                         capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert "Traceback" not in out, out
    cache = home / ".cache" / "gpu-platform" / "charts"
    assert "$GPU_PLATFORM_CHARTS: not set" in out and f"{clone.parent / 'shared' / 'charts'}: absent" in out, out
    assert f"Pulling them into {cache}" in out and f"could not fill {cache}" in out, out
    assert "charts pull" in out and "GPU_PLATFORM_CHARTS" in out, out
    # It stopped at the first chart rather than trying each of a dozen registries while offline.
    assert out.count("FAILED") == 1, out
    assert not list(cache.glob("*.tgz")) and not list(cache.glob("tmp*")), "nothing half-pulled stays in the cache"


def test_charts_ensure_leaves_a_named_folder_alone(tmp_path, monkeypatch):
    """With $GPU_PLATFORM_CHARTS (or ../shared/charts) the folder is the user's: nothing is pulled into it."""
    named = tmp_path / "mine"
    named.mkdir()
    monkeypatch.setenv("GPU_PLATFORM_CHARTS", str(named))
    monkeypatch.setattr(pull, "main", lambda argv: pytest.fail(f"pulled into a named folder: {argv}"))
    assert pull.ensure(ROOT) == 0
    assert not any(named.iterdir())


def test_charts_ensure_does_nothing_when_the_cache_is_full(tmp_path, monkeypatch):
    """A filled user cache: no network, no message (what every later `make preflight` does)."""
    from gpu_platform.preflight.fit import run

    monkeypatch.delenv("GPU_PLATFORM_CHARTS", raising=False)
    monkeypatch.setattr(run, "USER_CACHE", tmp_path)
    for pin in pull.pinned_charts():
        (tmp_path / pin.file_name).write_bytes(b"x")
    for target in pull.pinned_kustomize_targets():
        (tmp_path / "kustomize").mkdir(exist_ok=True)
        (tmp_path / "kustomize" / str(pull.kustomize_file_name(target))).write_text("x")
    monkeypatch.setattr(pull, "main", lambda argv: pytest.fail(f"pulled with a full cache: {argv}"))
    assert pull.ensure(tmp_path / "nowhere" / "project") == 0
