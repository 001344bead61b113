"""The parsed price catalog kept for the next process (gpu_platform/costs/catalog.py `read_document`): every
preflight and every policy pack parses the three clouds' files, and a kept JSON copy reads in a fraction of that.
What is read back decides the cost policies, so it is read only where nobody else could have written it, and only
for the bytes it was parsed from."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from gpu_platform import private_files
from gpu_platform.costs import catalog

LINODE = catalog.CATALOG_DIR / "linode.yaml"


@pytest.fixture
def catalogs(tmp_path, monkeypatch) -> Path:
    """A copy of the package's catalog folder standing in for it, and an empty user cache."""
    folder = tmp_path / "catalog"
    folder.mkdir()
    shutil.copy(LINODE, folder / "linode.yaml")
    monkeypatch.setattr(catalog, "CATALOG_DIR", folder)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return folder


def _kept(tmp_path: Path) -> list[Path]:
    folder = tmp_path / "cache" / "gpu-platform" / "catalog"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def _no_parser(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the YAML was parsed again")
    monkeypatch.setattr(catalog.yaml, "load", refuse)


def test_a_second_read_is_the_kept_copy_and_the_same_document(catalogs, tmp_path, monkeypatch):
    first = catalog.read_document(catalogs / "linode.yaml")
    assert first == yaml.safe_load(LINODE.read_text())
    [kept] = _kept(tmp_path)
    assert kept.stat().st_mode & 0o777 == 0o600 and kept.parent.stat().st_mode & 0o777 == 0o700
    _no_parser(monkeypatch)
    assert catalog.read_document(catalogs / "linode.yaml") == first


def test_a_changed_file_is_parsed_afresh(catalogs, tmp_path):
    catalog.read_document(catalogs / "linode.yaml")
    doc = yaml.safe_load(LINODE.read_text())
    doc["instances"][0]["onDemand"]["usdPerHour"] = 123.0
    (catalogs / "linode.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    assert catalog.read_document(catalogs / "linode.yaml")["instances"][0]["onDemand"]["usdPerHour"] == 123.0
    assert len(_kept(tmp_path)) == 2


def test_a_file_outside_the_packages_catalog_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copy(LINODE, tmp_path / "linode.yaml")
    assert catalog.read_document(tmp_path / "linode.yaml")["cloud"] == "linode"
    assert _kept(tmp_path) == []


def _doctored(kept: Path) -> str:
    doc = json.loads(kept.read_text())
    doc["instances"][0]["onDemand"]["usdPerHour"] = 0.0001
    return json.dumps(doc)


@pytest.mark.parametrize("how", ["group-writable", "a link", "not json", "not a mapping"])
def test_a_kept_copy_anyone_else_could_have_written_or_that_does_not_read_is_not_used(catalogs, tmp_path, how):
    real = catalog.read_document(catalogs / "linode.yaml")
    [kept] = _kept(tmp_path)
    if how == "group-writable":
        kept.write_text(_doctored(kept))
        kept.chmod(0o664)
    elif how == "a link":
        planted = tmp_path / "planted.json"
        planted.write_text(_doctored(kept))
        kept.unlink()
        kept.symlink_to(planted)
    else:
        kept.write_text("{not json" if how == "not json" else "[1, 2]")
    assert catalog.read_document(catalogs / "linode.yaml") == real


def test_another_users_cache_folder_is_not_used(catalogs, tmp_path, monkeypatch):
    folder = tmp_path / "cache" / "gpu-platform" / "catalog"
    folder.mkdir(parents=True)
    real = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: real + 1)
    catalog.read_document(catalogs / "linode.yaml")
    catalog.read_document(catalogs / "linode.yaml")
    assert list(folder.iterdir()) == []


def test_a_document_json_cannot_hold_as_it_is_is_returned_as_parsed_and_not_kept(catalogs, tmp_path):
    (catalogs / "dated.yaml").write_text("cloud: linode\nwhen: 2026-11-01\n")
    (catalogs / "numbered.yaml").write_text("cloud: linode\n1: one\n")
    assert catalog.read_document(catalogs / "dated.yaml")["when"].isoformat() == "2026-11-01"
    assert catalog.read_document(catalogs / "numbered.yaml")[1] == "one"
    assert _kept(tmp_path) == []


def test_the_least_recently_used_copies_go_past_the_bound(catalogs, tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "PARSED_KEPT", 3)
    folder = tmp_path / "cache" / "gpu-platform" / "catalog"
    paths = [catalogs / f"c{i}.yaml" for i in range(4)]
    for i, path in enumerate(paths):
        path.write_text(f"cloud: linode\nn: {i}\n")
    kept = [catalog._parsed_path(folder, path.read_bytes()) for path in paths]
    for hours, path in zip((3, 2, 1), paths):  # c0 used three hours ago, c1 two, c2 one
        catalog.read_document(path)
        os.utime(kept[paths.index(path)], (kept[0].stat().st_atime, kept[0].stat().st_mtime - 3600 * hours))
    catalog.read_document(paths[0])  # read back: used now
    catalog.read_document(paths[3])  # a fourth: the least recently used, c1, goes
    assert [p.exists() for p in kept] == [True, False, True, True]
    _no_parser(monkeypatch)
    assert catalog.read_document(paths[0]) == {"cloud": "linode", "n": 0}


def test_an_unwritable_cache_costs_only_speed(catalogs, tmp_path, monkeypatch):
    (tmp_path / "cache").write_text("a file where the folder would go")
    assert catalog.read_document(catalogs / "linode.yaml")["cloud"] == "linode"
    assert catalog.read_document(catalogs / "linode.yaml")["cloud"] == "linode"


@pytest.mark.parametrize("value", ["", "relative/cache"])
def test_an_empty_or_relative_xdg_cache_home_is_ignored(monkeypatch, value):
    monkeypatch.setenv("XDG_CACHE_HOME", value)
    assert private_files.user_cache_home() == Path.home() / ".cache"
