"""Kubeflow's kustomize installs with charts from a local folder (the air-gapped option, $GPU_PLATFORM_LOCAL_CHARTS):
the program passes each shipped overlay with its pinned GitHub target replaced by the target's built YAML in the
folder's `kustomize/` (gpu_platform/components/helm.py local_kustomize), so `pulumi up` clones nothing. The engine
deploys them in tests/test_engine_deploy.py; here, offline and quick: the same objects, the same path every run,
a clear stop when the folder lacks a target."""

from __future__ import annotations

from pathlib import Path

import pulumi
import pytest
import yaml

from gpu_platform.components.helm import LOCAL_CHARTS_ENV, local_kustomize
from gpu_platform.components.paths import PACKAGE_DIR
from gpu_platform.data import platform_versions as versions
from gpu_platform.data.chart import kustomize_file_name
from gpu_platform.preflight.fit.render import load_kustomize
from tests.fit_support import CHARTS, need_charts


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "gpu-platform" / "kustomize-overlays"


def test_without_the_local_folder_the_overlays_are_passed_as_shipped(monkeypatch, cache):
    monkeypatch.delenv(LOCAL_CHARTS_ENV, raising=False)
    for path in versions.KUSTOMIZE_OVERLAYS.values():
        assert local_kustomize(PACKAGE_DIR / path) is None
    assert not cache.exists()


@pytest.mark.parametrize("key", sorted(versions.KUSTOMIZE_OVERLAYS))
def test_each_overlay_from_the_local_folder_builds_the_same_objects_and_names_no_remote_target(key, monkeypatch, cache):
    need_charts()
    monkeypatch.setenv(LOCAL_CHARTS_ENV, str(CHARTS))
    shipped = PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS[key]
    derived = local_kustomize(shipped)
    assert derived is not None and Path(derived).parent == cache
    resources = yaml.safe_load((Path(derived) / "kustomization.yaml").read_text())["resources"]
    built = CHARTS.resolve() / "kustomize" / kustomize_file_name(versions.KUSTOMIZE_SOURCES[key])
    assert resources == [str(built)]  # the pinned target's build output, by absolute path: nothing to clone
    assert not any("github.com" in r for r in resources)
    # The patches are the shipped overlay's: the objects are those the shipped overlay builds from the same YAML.
    assert load_kustomize(derived, key, [CHARTS]) == load_kustomize(str(shipped), key, [CHARTS])
    # The same folder on every run (a component input: another path would be an update at the second `up`).
    assert local_kustomize(shipped) == derived and len(list(cache.iterdir())) == 1


def test_a_target_missing_from_the_local_folder_stops_the_program_naming_folder_and_file(tmp_path, monkeypatch, cache):
    monkeypatch.setenv(LOCAL_CHARTS_ENV, str(tmp_path))
    fname = kustomize_file_name(versions.KUSTOMIZE_SOURCES["katib-standalone"])
    with pytest.raises(pulumi.RunError, match=rf"{tmp_path}, which has no kustomize/{fname} .*charts pull --dest"):
        local_kustomize(PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS["katib-standalone"])
    assert not cache.exists()
