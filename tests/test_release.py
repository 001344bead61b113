"""A release you can pin (issue 37 item 7): the tag, the version, the pack's manifest and the CHANGELOG agree
(tools/release.py, which .github/workflows/release.yml runs before it builds anything), the notes are the
version's CHANGELOG section with its upgrade note, and the workflow publishes only from a release tag."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import gpu_platform
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import release  # noqa: E402


def _copy(tmp_path: Path) -> Path:
    for rel in ("gpu_platform/__init__.py", "gpu_platform/policies/PulumiPolicy.yaml", "CHANGELOG.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def test_this_tree_is_between_releases_and_the_0_3_1_release_still_passes(tmp_path):
    """Between releases (docs/architecture.md, Releasing): the version is the next release's .dev0 and CHANGELOG
    opens with [Unreleased], so a v0.3.2 tag is refused naming both things to change; the 0.3.1 release
    commit's files (this tree's [Unreleased] section taken out, version 0.3.1) still pass as v0.3.1."""
    assert gpu_platform.__version__ == "0.3.2.dev0"
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "release.py"), "check", "v0.3.2"], capture_output=True,
                         text=True)
    assert run.returncode == 1
    assert "__version__ is 0.3.2.dev0, not 0.3.2" in run.stderr
    assert "newest section is [Unreleased]" in run.stderr
    assert release.problems("0.3.2") == ["'0.3.2' is not a release tag (vX.Y.Z)"]
    root = _copy_released(tmp_path, "0.3.1")
    assert release.problems("v0.3.1", root) == []
    assert release.problems("v0.3.2", root) != []
    assert release.problems("v0.3.0", _copy_released(tmp_path / "0.3.0", "0.3.0")) == []


@pytest.mark.parametrize("edit, expected", [
    (lambda root: _sub(root / "gpu_platform/policies/PulumiPolicy.yaml", "version: 0.3.0", "version: 0.3.0-dev.0"),
     "PulumiPolicy.yaml's version is 0.3.0-dev.0"),
    (lambda root: _sub(root / "CHANGELOG.md", "## [0.3.0] — 2026-11-28", "## [Unreleased]\n\n## [0.3.0] — 2026-11-28"),
     "newest section is [Unreleased]"),
    (lambda root: _sub(root / "CHANGELOG.md", "## [0.3.0] — 2026-11-28", "## [0.3.0]"), "heading has no date"),
])
def test_each_disagreement_is_named(tmp_path, edit, expected):
    root = _copy_released(tmp_path, "0.3.0")  # the release commit's files: each edit breaks one agreement
    edit(root)
    found = release.problems("v0.3.0", root)
    assert any(expected in p for p in found), found


def _copy_released(tmp_path: Path, version: str) -> Path:
    """This tree's version files as they were at the `version` release: CHANGELOG's newer sections taken out,
    the version set in gpu_platform/__init__.py and the pack's manifest."""
    root = _copy(tmp_path)
    text = (root / "CHANGELOG.md").read_text()
    first, at = text.index("\n## ["), text.index(f"\n## [{version}]")
    (root / "CHANGELOG.md").write_text(text[:first] + text[at:])
    _sub_re(root / "gpu_platform/__init__.py", r'__version__ = "[^"]+"', f'__version__ = "{version}"')
    _sub_re(root / "gpu_platform/policies/PulumiPolicy.yaml", r"(?m)^version: \S+", f"version: {version}")
    return root


def _sub_re(path: Path, pattern: str, new: str) -> None:
    text, n = re.subn(pattern, new, path.read_text(), count=1)
    assert n == 1, pattern
    path.write_text(text)


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_notes_are_the_versions_section_with_its_upgrade_note_and_the_images():
    notes = release.notes("0.3.0")
    assert notes.startswith("### Upgrading from 0.2.0\n") and "## [0.2.0]" not in notes
    assert "gpu-platform-scale-in" in notes and "gpu-platform-linode-node-groups" in notes
    notes = release.notes("0.3.1")
    assert notes.startswith("### Upgrading from 0.3.0\n") and "## [0.3.0]" not in notes and "docker login" in notes
    with pytest.raises(SystemExit, match=r"no \[9.9.9\] section"):
        release.notes("9.9.9")


def test_the_release_workflow_checks_builds_and_publishes_only_from_a_tag():
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    on = doc.get("on", doc.get(True))
    assert on == {"push": {"tags": ["v*"]}} and doc["permissions"] == {}
    check, publish = doc["jobs"]["check"], doc["jobs"]["publish"]
    runs = [s.get("run", "") for s in check["steps"]]
    assert runs.index('python3 tools/release.py check "$TAG"') < runs.index("make dist")
    assert any("tests/test_package.py" in r for r in runs) and check["permissions"] == {"contents": "read"}
    assert publish["needs"] == "check" and publish["permissions"] == {"contents": "write"}
    assert any("gh release create" in s.get("run", "") and "dist/*.whl" in s["run"] for s in publish["steps"])
    # The images come from the same tag.
    for wf in ("controller-image.yml", "linode-node-groups-image.yml", "training-image.yml"):
        image = yaml.safe_load((ROOT / ".github" / "workflows" / wf).read_text())
        assert "v*" in image.get("on", image.get(True))["push"]["tags"], wf


PUBLISHERS = {"release.yml": "check", "controller-image.yml": "publish", "linode-node-groups-image.yml": "publish",
              "training-image.yml": "publish"}


@pytest.mark.parametrize("wf", sorted(PUBLISHERS))
def test_a_release_tag_publishes_only_a_commit_of_main_after_a_reviewer_approves(wf):
    """Adopter review (issue 37 brief), item 2: any `v*` tag on any commit created a release and pushed images to
    GHCR. Each job that may write runs in the protected `release` environment, and the tag's commit must be on
    main (checked before anything is built or written), with main fetched by the checkout."""
    doc = yaml.safe_load((ROOT / ".github" / "workflows" / wf).read_text())
    for name, job in doc["jobs"].items():
        if any(v == "write" for v in (job.get("permissions") or {}).values()):
            assert job.get("environment") == "release", f"{wf}:{name} writes outside the release environment"
    gate = doc["jobs"][PUBLISHERS[wf]]
    steps = gate["steps"]
    checkout = next(i for i, s in enumerate(steps) if str(s.get("uses", "")).startswith("actions/checkout@"))
    assert steps[checkout]["with"].get("fetch-depth") == 0, "origin/main is fetched only with fetch-depth: 0"
    on_main = next(i for i, s in enumerate(steps) if s.get("run") == "bash .github/tag-on-main.sh")
    assert checkout < on_main
    first_effect = next(i for i, s in enumerate(steps) if i > checkout and i != on_main and (
        "make" in s.get("run", "") or "docker/" in str(s.get("uses", ""))))
    assert on_main < first_effect, f"{wf}: the main check comes before anything is built or pushed"
    if wf == "release.yml":
        assert doc["jobs"]["publish"]["needs"] == "check"
    docs = re.sub(r"\s+", " ", (ROOT / "docs" / "ci.md").read_text())
    assert "A `release` environment and a tag ruleset for `v*`." in docs


def _git(cwd, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-C", str(cwd), *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_main_check_refuses_a_tag_of_a_commit_main_lacks(tmp_path):
    origin, clone = tmp_path / "origin", tmp_path / "clone"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    _git(origin, "commit", "-q", "--allow-empty", "-m", "on main")
    on_main = _git(origin, "rev-parse", "HEAD")
    _git(origin, "checkout", "-q", "-b", "side")
    _git(origin, "commit", "-q", "--allow-empty", "-m", "never reviewed")
    side = _git(origin, "rev-parse", "HEAD")
    subprocess.run(["git", "clone", "-q", str(origin), str(clone)], check=True)

    def check(sha, cwd=clone):
        return subprocess.run(["bash", str(ROOT / ".github" / "tag-on-main.sh")], cwd=cwd, capture_output=True,
                              text=True, env={"PATH": os.environ["PATH"], "GITHUB_SHA": sha, "GITHUB_REF_NAME": "v9.9.9"})

    assert check(on_main).returncode == 0
    refused = check(side)
    assert refused.returncode == 1 and f"v9.9.9 points at {side}, which is not on main" in refused.stderr
    shallow = tmp_path / "shallow"  # a checkout without fetch-depth: 0 has no origin/main: refused, not passed
    _git(tmp_path, "init", "-q", "shallow")
    assert check(on_main, shallow).returncode == 1
