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


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")
DEPENDS_ON = "config.kubernetes.io/depends-on"


def _pod_needs(pod: dict) -> set[tuple[str, str]]:
    """(kind, name) of what a pod cannot start without: its ServiceAccount (the API server refuses the pod), the
    ConfigMaps, Secrets and claims its volumes and env name (the kubelet starts no container before they exist)."""
    refs = set()
    if pod.get("serviceAccountName") or pod.get("serviceAccount"):
        refs.add(("ServiceAccount", pod.get("serviceAccountName") or pod.get("serviceAccount")))
    for v in pod.get("volumes") or []:
        for kind, key, name in (("ConfigMap", "configMap", "name"), ("Secret", "secret", "secretName"),
                                ("PersistentVolumeClaim", "persistentVolumeClaim", "claimName")):
            if v.get(key):
                refs.add((kind, v[key][name]))
        for src in (v.get("projected") or {}).get("sources") or []:
            for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if src.get(key):
                    refs.add((kind, src[key]["name"]))
    for c in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        for e in c.get("envFrom") or []:
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if e.get(key):
                    refs.add((kind, e[key]["name"]))
        for e in c.get("env") or []:
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if (e.get("valueFrom") or {}).get(key):
                    refs.add((kind, e["valueFrom"][key]["name"]))
    return refs


@pytest.mark.parametrize("key", ["katib-standalone", "pipelines-platform-agnostic"])
def test_each_workload_of_an_install_waits_for_what_its_pod_needs_from_the_same_install(key):
    """`pulumi up` runs at most 4 x CPUs operations at once and awaits each Deployment's readiness for 10 minutes;
    without the order, eight Pipelines Deployments held all eight slots of a 2-CPU run waiting for pods the API server
    refused (their ServiceAccounts not created yet, and never: no slot was left), and `up` failed (seen under the
    engine, 2026-11-29). Each workload's `config.kubernetes.io/depends-on` names exactly the objects of the same install
    its pod cannot start without, so the provider's Directory registers it after them."""
    need_charts()
    objs = load_kustomize(str(PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS[key]), key, [CHARTS])
    have = {(o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"]) for o in objs}
    workloads = [o for o in objs if o["kind"] in WORKLOADS]
    assert workloads
    for o in workloads:
        ns = o["metadata"]["namespace"]
        needs = sorted(r for r in _pod_needs(o["spec"]["template"]["spec"]) if (r[0], ns, r[1]) in have)
        declared = ((o["metadata"].get("annotations") or {}).get(DEPENDS_ON) or "").split(",")
        assert sorted(d for d in declared if d) == [f"/namespaces/{ns}/{kind}/{name}" for kind, name in needs], \
            (o["metadata"]["name"], declared, needs)


@pytest.mark.parametrize("key", sorted(versions.KUSTOMIZE_OVERLAYS))
def test_no_object_of_an_install_carries_an_empty_map_the_api_server_drops(key):
    """Katib's webhook certificate Secret shipped `data: {}`: the API server stores no `data`, so after `pulumi up
    --refresh` the program's input differed from what it read back and the engine's second `up` proposed replacing the
    Secret (seen 2026-11-29), as drift.yml's --expect-no-changes would on every cluster. The overlay drops it."""
    need_charts()
    objs = load_kustomize(str(PACKAGE_DIR / versions.KUSTOMIZE_OVERLAYS[key]), key, [CHARTS])
    empty = [f"{o['kind']} {o['metadata']['name']}: {field}" for o in objs if o["kind"] in ("Secret", "ConfigMap")
             for field in ("data", "stringData", "binaryData") if o.get(field) == {}]
    assert empty == []
