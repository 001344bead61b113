"""A release you can pin (issue 37 item 7): the tag, the version, the pack's manifest and the CHANGELOG agree
(tools/release.py, which .github/workflows/release.yml runs before it builds anything), the notes are the
version's CHANGELOG section with its upgrade note, and the workflow publishes only from a release tag."""

from __future__ import annotations

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


def test_this_tree_is_release_0_3_0_and_a_tag_for_anything_else_is_refused():
    assert gpu_platform.__version__ == "0.3.0"
    assert release.problems("v0.3.0") == []
    run = subprocess.run([sys.executable, str(ROOT / "tools" / "release.py"), "check", "v0.3.1"], capture_output=True,
                         text=True)
    assert run.returncode == 1
    assert "__version__ is 0.3.0, not 0.3.1" in run.stderr and "newest section is [0.3.0], not [0.3.1]" in run.stderr
    assert release.problems("0.3.0") == ["'0.3.0' is not a release tag (vX.Y.Z)"]


@pytest.mark.parametrize("edit, expected", [
    (lambda root: _sub(root / "gpu_platform/policies/PulumiPolicy.yaml", "version: 0.3.0", "version: 0.3.0-dev.0"),
     "PulumiPolicy.yaml's version is 0.3.0-dev.0"),
    (lambda root: _sub(root / "CHANGELOG.md", "## [0.3.0] — 2026-11-28", "## [Unreleased]\n\n## [0.3.0] — 2026-11-28"),
     "newest section is [Unreleased]"),
    (lambda root: _sub(root / "CHANGELOG.md", "## [0.3.0] — 2026-11-28", "## [0.3.0]"), "heading has no date"),
])
def test_each_disagreement_is_named(tmp_path, edit, expected):
    root = _copy(tmp_path)
    edit(root)
    found = release.problems("v0.3.0", root)
    assert any(expected in p for p in found), found


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_the_notes_are_the_versions_section_with_its_upgrade_note_and_the_images():
    notes = release.notes("0.3.0")
    assert notes.startswith("### Upgrading from 0.2.0\n") and "## [0.2.0]" not in notes
    assert "gpu-platform-scale-in" in notes and "gpu-platform-linode-node-groups" in notes
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
