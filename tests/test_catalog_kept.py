"""The parsed price catalog kept for the next process (gpu_platform/costs/catalog.py `read_document`): every
preflight and every policy pack parses the three clouds' files, and a kept JSON copy reads in a fraction of that.
What is read back decides the cost policies, so it is read only where nobody else could have written it, and only
for the bytes it was parsed from."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
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
    doc["document"]["instances"][0]["onDemand"]["usdPerHour"] = 0.0001
    return json.dumps(doc)


@pytest.mark.parametrize("how", ["group-writable", "a link", "not json", "not a mapping", "another user's",
                                 "another file's copy", "over the size bound"])
def test_a_kept_copy_anyone_else_could_have_written_or_that_does_not_read_is_not_used(catalogs, tmp_path, how,
                                                                                         monkeypatch):
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
    elif how == "another user's":
        kept.write_text(_doctored(kept))
        real_uid = os.getuid()
        real_fstat = os.fstat
        # The file reads as another user's; the folder (a directory) still as this user's.
        monkeypatch.setattr(os, "fstat", lambda fd: _as_owned_by(real_fstat(fd), real_uid + 1)
                            if not stat.S_ISDIR(real_fstat(fd).st_mode) else real_fstat(fd))
    elif how == "another file's copy":  # a kept copy of another catalog, renamed to this file's name
        (catalogs / "other.yaml").write_text("cloud: linode\ninstances: []\n")
        catalog.read_document(catalogs / "other.yaml")
        other = catalog._parsed_key((catalogs / "other.yaml").read_bytes()) + ".json"
        os.replace(kept.parent / other, kept)
    elif how == "over the size bound":
        kept.write_text(_doctored(kept))
        monkeypatch.setattr(catalog, "PARSED_LIMIT", kept.stat().st_size - 1)
    else:
        kept.write_text("{not json" if how == "not json" else "[1, 2]")
    assert catalog.read_document(catalogs / "linode.yaml") == real


def _as_owned_by(st: os.stat_result, uid: int) -> os.stat_result:
    fields = list(st)
    fields[stat.ST_UID] = uid
    return os.stat_result(fields)


def test_a_cache_folder_that_is_a_link_is_not_followed(catalogs, tmp_path):
    """Someone who can write above the folder links it to a folder of theirs (or swaps it after the check): nothing
    is read from there or written there, and nothing of the user's there is removed."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    mine = [elsewhere / f"report-{i}.json" for i in range(20)]
    for p in mine:
        p.write_text("{}")
    (tmp_path / "cache" / "gpu-platform").mkdir(parents=True)
    (tmp_path / "cache" / "gpu-platform" / "catalog").symlink_to(elsewhere)
    catalog.read_document(catalogs / "linode.yaml")
    assert sorted(elsewhere.iterdir()) == sorted(mine)


def test_the_bound_removes_only_copies_this_code_named(catalogs, tmp_path, monkeypatch):
    monkeypatch.setattr(catalog, "PARSED_KEPT", 1)
    folder = tmp_path / "cache" / "gpu-platform" / "catalog"
    folder.mkdir(parents=True, mode=0o700)
    (folder / "notes.json").write_text("{}")
    for i in range(3):
        (catalogs / f"c{i}.yaml").write_text(f"cloud: linode\nn: {i}\n")
        catalog.read_document(catalogs / f"c{i}.yaml")
    assert (folder / "notes.json").exists() and len(_kept(tmp_path)) == 2  # notes.json and the newest copy


def test_the_parser_is_part_of_the_key(catalogs, tmp_path, monkeypatch):
    catalog.read_document(catalogs / "linode.yaml")
    monkeypatch.setattr(catalog.yaml, "__version__", "0.0-other")
    catalog.read_document(catalogs / "linode.yaml")
    assert len(_kept(tmp_path)) == 2


def test_without_a_home_the_catalog_is_read_and_nothing_kept(catalogs, tmp_path, monkeypatch):
    """A container's arbitrary user: no $HOME and no passwd entry (Path.home() raises)."""
    monkeypatch.delenv("XDG_CACHE_HOME")

    def no_home():
        raise RuntimeError("Could not determine home directory.")
    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    assert catalog.read_document(catalogs / "linode.yaml")["cloud"] == "linode"
    assert private_files.user_cache_home() is None


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
    kept = [folder / (catalog._parsed_key(path.read_bytes()) + ".json") for path in paths]
    now = time.time()
    for hours, path, copy in zip((3, 2, 1), paths, kept):  # c0 used three hours ago, c1 two, c2 one
        catalog.read_document(path)
        os.utime(copy, (now - 3600 * hours, now - 3600 * hours))
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
