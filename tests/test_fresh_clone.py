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


def clone_files(root: Path) -> list[str]:
    """What a clone of this checkout would hold: the files git tracks, plus new ones it does not ignore. Never what
    .gitignore names (virtualenvs, build/, uv's cache: .ci/run keeps 5 GB of it inside the checkout, and a copy of
    it filled CI's disk)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    return sorted(name for name in listed if name and (root / name).is_file())


def copy_as_a_clone(root: Path, where: Path) -> None:
    for name in clone_files(root):
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, where / name)


def offline_env(home: Path) -> dict[str, str]:
    """No chart folder named, an empty user cache, and every fetch refused at once (a proxy that is not
    there: Helm, git and kubectl honour it), as on a machine without the network."""
    # No chart folder and no preflight cache the test session keeps (tests/conftest.py): a clone starts with neither.
    env = {k: v for k, v in os.environ.items() if k not in ("GPU_PLATFORM_CHARTS", "GPU_PLATFORM_PREFLIGHT_CACHE")}
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
    copy_as_a_clone(ROOT, where)
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


def test_the_copy_holds_what_a_clone_holds_and_nothing_git_ignores(tmp_path):
    """A copy of the checkout for the fresh-clone test took every folder but a fixed list: uv's cache (.uv-cache,
    5 GB on CI, which keeps it inside the checkout) was copied whole, on the machine whose disk is the shortest."""
    root = tmp_path / "checkout"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "module.py").write_text("x = 1\n")
    (root / ".gitignore").write_text(".uv-cache/\n.venv*\nbuild/\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "."], cwd=root, check=True)
    (root / "new.txt").write_text("not yet committed\n")
    for ignored in (".uv-cache/archive-v0/wheel/torch.so", ".venv-training/lib/torch.so", "build/plan.json"):
        (root / ignored).parent.mkdir(parents=True, exist_ok=True)
        (root / ignored).write_text("large\n")
    assert clone_files(root) == [".gitignore", "new.txt", "pkg/module.py"]
    where = tmp_path / "copy"
    copy_as_a_clone(root, where)
    assert sorted(str(p.relative_to(where)) for p in where.rglob("*") if p.is_file()) == \
        [".gitignore", "new.txt", "pkg/module.py"]
