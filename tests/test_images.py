"""Every container image this repository builds: base pinned by digest, non-root, nothing installed
at start, checkov's Dockerfile checks (failures only where
tests/data/checkov-skips.yaml justifies them), and the workflows that build them pass GitHub's workflow schema."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.test_platform_validate import checkov_bin, checkov_skips

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted(p for p in ROOT.rglob("Dockerfile") if not any(part.startswith(".venv") for part in p.parts))
IDS = [str(p.relative_to(ROOT)) for p in DOCKERFILES]


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_the_images_the_project_ships_are_all_found():
    assert {"examples/training/Dockerfile"} <= set(IDS)


@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_base_pinned_by_digest_and_runs_as_non_root(path: Path):
    ins = instructions(path)
    bases = [args.split()[0] for word, args in ins if word == "FROM"]
    assert bases and all(re.fullmatch(r"\S+:\S+@sha256:[0-9a-f]{64}", b) for b in bases), bases
    users = [args for word, args in ins if word == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:\d+)?", users[-1]), "last USER must be a numeric non-root uid"
    # Packages come in at build time: nothing in the start command installs anything.
    start = " ".join(args for word, args in ins if word in ("ENTRYPOINT", "CMD"))
    assert not re.search(r"\b(pip|apt-get|apk|uv)\b", start), start


def justified_docker_checks() -> set[str]:
    """Dockerfile checks allowed to fail (`images:` in tests/data/checkov-skips.yaml)."""
    return set(checkov_skips().get("images") or {})


@pytest.mark.sidevenv  # checkov, from .venv-checkov
@pytest.mark.parametrize("path", DOCKERFILES, ids=IDS)
def test_checkov_dockerfile_checks(path: Path):
    proc = subprocess.run([checkov_bin(), "-f", str(path), "--framework", "dockerfile", "-o", "json",
                           "--quiet", "--compact", "--skip-download"], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout or "{}")
    reports = report if isinstance(report, list) else [report]
    failed = {c["check_id"] for r in reports for c in r.get("results", {}).get("failed_checks", [])}
    passed = sum(r.get("summary", {}).get("passed", 0) for r in reports)
    assert passed > 10, "checkov did not scan the Dockerfile"
    assert not failed - justified_docker_checks(), f"unjustified checkov failures in {path}: {sorted(failed)}"


# --- what `pulumi up` builds (gpu_platform/components/images.py) ------------------------------------------

from gpu_platform.components.images import IMAGES  # noqa: E402


def copy_sources(path: Path) -> list[str]:
    """The build-context paths a Dockerfile's COPY/ADD instructions read (not those copied from a stage)."""
    out = []
    for word, args in instructions(path):
        if word in ("COPY", "ADD"):
            parts = [p for p in args.split() if not p.startswith("--chown") and not p.startswith("--chmod")]
            if any(p.startswith("--from") for p in parts):
                continue
            out += [p.rstrip("/") for p in parts[:-1] if not p.startswith("--")]
    return out


def allowed(ignore_file: Path) -> tuple[list[str], list[str]]:
    """(re-included paths, excluded patterns) of a .dockerignore that starts by excluding everything."""
    lines = [line.strip() for line in ignore_file.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [line[1:] for line in lines if line.startswith("!")], [line for line in lines if not line.startswith("!")]


@pytest.mark.parametrize("source", IMAGES, ids=[s.name for s in IMAGES])
def test_every_built_image_admits_exactly_what_its_dockerfile_copies(source):
    """The build context holds only what the Dockerfile copies: an edit elsewhere in the repository neither
    rebuilds an image (pulumi-docker-build hashes the context after its Dockerfile.dockerignore) nor sends the
    repository to the daemon; and what the image copies is all there, so the build cannot miss a file."""
    dockerfile, ignore = ROOT / source.dockerfile, ROOT / (source.dockerfile + ".dockerignore")
    included, excluded = allowed(ignore)
    assert excluded[0] == "*" and set(excluded[1:]) <= {"**/__pycache__", "**/*.pyc"}
    assert sorted(included) == sorted(source.inputs), "the ignore file and ImageSource.inputs name the same paths"
    context = ROOT / source.context
    for src in copy_sources(dockerfile):
        assert any(src == i or src.startswith(i + "/") for i in source.inputs), f"{src} is not in the build context"
        assert (context / src).exists(), src
    for i in source.inputs:
        assert (context / i).exists(), i
