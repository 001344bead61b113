"""Cluster fit, rendering half: every Helm release, kustomize install and plain object of every shipped
stack rendered with the real pinned charts (Helm's Go SDK), and the errors a user can hit."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from gpu_platform.preflight.fit import kustomize, render
from gpu_platform.preflight.fit.errors import ChartError
from gpu_platform.preflight.fit.render import RenderedRelease, render_plan, write_rendered
from gpu_platform.preflight.runner import SECRET_SIG, SIG_KEY, UNKNOWN, Plan, PlannedResource
from tests.conftest import ROOT
from tests.fit_support import (
    CHARTS, STACKS, make_chart, need_charts, release_resource, rendered, stack_plan,
)

RELEASE = "kubernetes:helm.sh/v3:Release"
DIRECTORY = "kubernetes:kustomize/v2:Directory"


@pytest.fixture(autouse=True)
def _charts() -> None:
    need_charts()


def by_name(stack: str) -> dict[str, RenderedRelease]:
    return {r.name: r for r in rendered(stack)}


# --- every shipped stack ---------------------------------------------------------------------------


@pytest.mark.parametrize("stack", STACKS)
def test_every_release_and_kustomize_install_of_the_stack_renders(stack: str) -> None:
    plan = stack_plan(stack)
    releases = rendered(stack)
    helm = [r for r in releases if r.source == "helm"]
    assert sorted(r.urn for r in helm) == sorted(r.urn for r in plan.by_type(RELEASE))
    assert sorted(r.urn for r in releases if r.source == "kustomize") == sorted(r.urn for r in plan.by_type(DIRECTORY))
    for rel in helm:
        assert rel.rendered and rel.objects, rel.name
        kinds = {o["kind"] for o in rel.objects}
        assert kinds & {"Deployment", "DaemonSet", "StatefulSet"}, (rel.name, kinds)
    for rel in releases:
        for obj in rel.objects:
            assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"], (rel.name, obj)
    assert all(r.rendered for r in releases)
    assert [r.source for r in releases].count("example") == 1


@pytest.mark.parametrize("stack", STACKS)
def test_plain_objects_are_grouped_by_component_and_namespaced(stack: str) -> None:
    plan = stack_plan(stack)
    # *Patch resources (e.g. the Trainer's DeploymentPatches) are folded into the object they patch
    plain = [r for r in plan.resources if r.custom and r.type.startswith("kubernetes:")
             and r.type not in (RELEASE, DIRECTORY) and not r.type.endswith("Patch")]
    manifests = [r for r in rendered(stack) if r.source == "manifest"]
    assert sum(len(m.objects) for m in manifests) == len(plain)
    by_parent = {m.urn: m for m in manifests}
    for r in plain:
        group = by_parent[r.parent]
        kind = r.type.rsplit(":", 1)[1]
        assert any(o["kind"] == kind and o["metadata"]["name"] == (r.plain_inputs.get("metadata") or {}).get("name", o["metadata"]["name"])
                   for o in group.objects)
    objs = [o for m in manifests for o in m.objects]
    namespaced = [o for o in objs if o["kind"] in ("ConfigMap", "LimitRange", "ResourceQuota", "LocalQueue")]
    assert namespaced and all(o["metadata"].get("namespace") for o in namespaced)
    cluster = [o for o in objs if o["kind"] in ("Namespace", "ClusterQueue", "ResourceFlavor")]
    assert cluster and not any("namespace" in o["metadata"] for o in cluster)


def test_release_names_and_namespaces_are_what_the_program_passes() -> None:
    gcp = by_name("gcp-prod")
    assert gcp["kueue"].namespace == "kueue-system"
    deployments = [o for o in gcp["kueue"].objects if o["kind"] == "Deployment"]
    assert deployments and all(o["metadata"]["namespace"] == "kueue-system" for o in deployments)
    assert any(o["metadata"]["name"].startswith("kueue-") for o in deployments)
    # Linode add-ons pass no release name: pulumi-kubernetes autonames `<resource name>-<8 hex>`.
    dev = [r for r in rendered("linode-dev") if r.resource_name.endswith("addons-ccm")][0]
    assert re.fullmatch(r"gpu-dev-addons-ccm-[0-9a-f]{8}", dev.name)
    again = render_plan(stack_plan("linode-dev"), [CHARTS])
    assert dev.name in {r.name for r in again}


def test_values_reach_the_chart_exactly() -> None:
    plan = stack_plan("gcp-prod")
    values = plan.one(RELEASE, "dcgm-exporter").plain_inputs["values"]
    ds = [o for o in by_name("gcp-prod")["dcgm-exporter"].objects if o["kind"] == "DaemonSet"][0]
    pod = ds["spec"]["template"]["spec"]
    assert pod["affinity"] == values["affinity"]
    container = [c for c in pod["containers"] if c["name"] == "exporter"][0]
    assert container["resources"] == values["resources"]


def test_release_dependencies_are_transitive() -> None:
    releases = {r.resource_name: r for r in rendered("gcp-prod")}
    plan = stack_plan("gcp-prod")
    ns = plan.one("kubernetes:core/v1:Namespace", "queue-namespace").urn
    assert ns in releases["platform-queue-kueue"].depends_on
    pipelines = releases["platform-kubeflow-pipelines"].depends_on
    assert releases["platform-kubeflow-pipelines-cluster-scoped"].urn in pipelines
    assert releases["platform-kubeflow-pipelines-cluster-scoped"].urn not in releases["platform-queue-kueue"].depends_on
    # Whatever a dependency waits for, the dependent waits for too.
    by_urn = {r.urn: r for r in releases.values()}
    checked = 0
    for rel in releases.values():
        for urn in rel.depends_on & set(by_urn):
            assert by_urn[urn].depends_on <= rel.depends_on, (rel.name, urn)
            checked += 1
    assert checked


def test_dependency_on_a_component_means_its_children() -> None:
    comp = PlannedResource("urn:c", "gpu-platform:x:Comp", "comp", None, False, None, [], {})
    child = PlannedResource("urn:c-child", "kubernetes:core/v1:Namespace", "child", "urn:c", True, None, ["urn:far"], {})
    far = PlannedResource("urn:far", "kubernetes:core/v1:Namespace", "far", None, True, None, [], {})
    user = PlannedResource("urn:u", "kubernetes:core/v1:Namespace", "u", None, True, None, [], {},
                           property_dependencies={"metadata": ["urn:c"]})
    deps = render._Deps(Plan("t", [comp, child, far, user], {}))
    assert deps.of(deps.direct(user)) == {"urn:c", "urn:c-child", "urn:far"}


def test_crds_of_disabled_subcharts_are_not_installed(tmp_path: Path) -> None:
    def crds(values):
        plan = Plan("t", [release_resource("kps", "kube-prometheus-stack", "88.5.3", "monitoring", values, "kps")], {})
        rel = render_plan(plan, [CHARTS], kubernetes_version="1.33", example=None)[0]
        return [o for o in rel.objects if o["kind"] == "CustomResourceDefinition"]

    assert {c["spec"]["group"] for c in crds({})} == {"monitoring.coreos.com"}
    assert crds({"crds": {"enabled": False}}) == []


# --- synthetic charts: capabilities, hooks, secrets, errors ------------------------------------------

CAPS = {"cm.yaml": """\
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: {{ .Release.Name }}-caps
    data:
      kube: {{ .Capabilities.KubeVersion.Version | quote }}
      monitoring: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" | quote }}
      apps: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}
      token: {{ .Values.token | quote }}
      later: {{ .Values.later | quote }}
    """,
        "hooks.yaml": """\
    apiVersion: batch/v1
    kind: Job
    metadata:
      name: {{ .Release.Name }}-pre-install
      annotations: {"helm.sh/hook": "pre-install,pre-upgrade"}
    spec:
      template:
        spec:
          restartPolicy: Never
          containers: [{name: x, image: busybox}]
    ---
    apiVersion: v1
    kind: Pod
    metadata:
      name: {{ .Release.Name }}-test
      annotations: {"helm.sh/hook": "test"}
    spec:
      containers: [{name: x, image: busybox}]
    """,
        "NOTES.txt": "installed {{ .Release.Name }}\n"}


def _crd(group: str, kind: str, plural: str, version: str = "v1") -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced", "names": {"kind": kind, "plural": plural},
                     "versions": [{"name": version, "served": True, "storage": True,
                                   "schema": {"openAPIV3Schema": {"type": "object"}}}]}}


def _crd_resource(crd: dict) -> PlannedResource:
    return PlannedResource("urn:crd", "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition", "crd",
                           None, True, None, [], crd)


def test_capabilities_secrets_unknowns_and_hooks(tmp_path: Path) -> None:
    make_chart(tmp_path, "caps", "1.0.0", CAPS)
    values = {"token": {SIG_KEY: SECRET_SIG, "value": "s3cr3t"}, "later": UNKNOWN}
    rel_res = release_resource("caps-release", "oci://example.org/charts/caps", "1.0.0", "team", values, "caps")

    plain = render_plan(Plan("t", [rel_res], {}), [tmp_path], kubernetes_version="1.33", example=None)[0]
    cm = [o for o in plain.objects if o["kind"] == "ConfigMap"][0]
    assert cm["metadata"] == {"name": "caps-caps", "namespace": "team"}
    assert cm["data"] == {"kube": "v1.33.0", "monitoring": "false", "apps": "true",
                          "token": render.SECRET_PLACEHOLDER, "later": render.UNKNOWN_PLACEHOLDER}
    jobs = [o for o in plain.objects if o["kind"] == "Job"]
    assert jobs and jobs[0]["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert not [o for o in plain.objects if o["kind"] == "Pod"], "test hooks never run on install"
    assert "s3cr3t" not in json.dumps([o for o in plain.objects])

    # With the ServiceMonitor CRD in the plan, capability-gated templates render as on the cluster.
    crd = _crd_resource(_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"))
    with_crd = render_plan(Plan("t", [crd, rel_res], {}), [tmp_path], kubernetes_version="1.34", example=None)
    cm = [o for r in with_crd for o in r.objects if o["kind"] == "ConfigMap"][0]
    assert cm["data"]["monitoring"] == "true" and cm["data"]["kube"] == "v1.34.0"


def test_missing_chart_names_the_release_the_chart_and_the_dirs(tmp_path: Path) -> None:
    plan = Plan("t", [release_resource("x", "oci://example.org/charts/nothere", "1.2.3", "ns", {}, "my-release")], {})
    with pytest.raises(ChartError) as err:
        render_plan(plan, [tmp_path], example=None)
    msg = str(err.value)
    assert err.value.release == "my-release"
    assert "nothere-1.2.3.tgz" in msg and str(tmp_path) in msg and "charts pull" in msg
    # Allowed: reported as not rendered, never silently dropped.
    rel = render_plan(plan, [tmp_path], allow_missing=["nothere"], example=None)[0]
    assert not rel.rendered and rel.name == "my-release"


def test_a_template_failure_names_the_release(tmp_path: Path) -> None:
    plan = Plan("t", [release_resource("ccm", "ccm-linode", "v0.7.1", "kube-system", {}, "ccm")], {})
    with pytest.raises(ChartError) as err:
        render_plan(plan, [CHARTS], example=None)
    assert err.value.release == "ccm" and "apiToken required" in str(err.value)


def test_values_the_schema_rejects_name_the_release(tmp_path: Path) -> None:
    schema = json.dumps({"type": "object", "properties": {"replicas": {"type": "integer", "minimum": 1}}})
    make_chart(tmp_path, "strict", "0.1.0", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
               values="replicas: 1\n", schema=schema)
    ok = Plan("t", [release_resource("s", "strict", "0.1.0", "ns", {"replicas": 2}, "strict-ok")], {})
    assert render_plan(ok, [tmp_path], example=None)[0].objects
    bad = Plan("t", [release_resource("s", "strict", "0.1.0", "ns", {"replicas": 0}, "strict-bad")], {})
    with pytest.raises(ChartError) as err:
        render_plan(bad, [tmp_path], example=None)
    assert err.value.release == "strict-bad" and "/replicas" in str(err.value) and "minimum" in str(err.value)


def test_rendered_files_are_deterministic(tmp_path: Path, fresh_render_memo) -> None:
    releases = list(rendered("gcp-prod"))
    files = write_rendered(releases, tmp_path / "a")
    render._RENDERED.clear()  # the second render is Helm's own, not the first read back
    render._RENDERED_SIZE[0] = 0
    write_rendered(list(render_plan(stack_plan("gcp-prod"), [CHARTS], kubernetes_version="1.33")), tmp_path / "b")
    assert {p.name for p in files} == {p.name for p in (tmp_path / "b").iterdir()}
    assert "kueue.yaml" in {p.name for p in files}
    for p in files:
        assert p.read_bytes() == (tmp_path / "b" / p.name).read_bytes(), p.name
    # Each file reads back (with the YAML library Helm and kubectl use) as exactly the release's objects:
    # sources written verbatim where preflight changed nothing, re-serialised where it did.
    names = render.release_file_names(releases)
    for p in files:
        docs = [value for _, value in render.parse_yaml_docs(p.read_text())]
        assert docs == names[p.name].objects, p.name


# --- a release rendered again in the same process --------------------------------------------------------

SIZED = {"cm.yaml": """\
    apiVersion: v1
    kind: ConfigMap
    metadata:
      name: {{ .Release.Name }}
    data:
      size: {{ .Values.size | quote }}
    """}


@pytest.fixture
def fresh_render_memo(monkeypatch) -> None:
    """An empty memo of rendered releases, so that each render in the test is Helm's own."""
    _as_a_new_process(monkeypatch)


@pytest.fixture
def helm_renders(monkeypatch, fresh_render_memo) -> list[str]:
    """The releases Helm's template engine renders from now on (the native call render_chart makes)."""
    from helm_python import _native

    real, calls = _native.call_string, []

    def counting(name: str, *args):
        if name == "helm_render":
            calls.append(json.loads(args[2])["name"])
        return real(name, *args)

    monkeypatch.setattr(_native, "call_string", counting)
    return calls


def _sized(release: str, size: int, namespace: str = "team") -> Plan:
    return Plan("t", [release_resource(release, "sized", "1.0.0", namespace, {"size": size}, release)], {})


def test_a_release_rendered_again_in_one_process_is_read_back_as_objects_of_its_own(tmp_path: Path, helm_renders) -> None:
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    first = render_plan(_sized("a", 2), [tmp_path], example=None)[0]
    first.objects[0]["data"]["size"] = "changed by its caller"  # what fill_namespaces and masking do to theirs
    second = render_plan(_sized("a", 2), [tmp_path], example=None)[0]
    assert helm_renders == ["a"]
    assert second.objects == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "team"},
                               "data": {"size": "2"}}]
    assert second.texts == render_plan(_sized("a", 2), [tmp_path], example=None)[0].texts
    # Anything a render reads is part of what it is kept by: the values, the release's name and namespace, the
    # Kubernetes version, the API versions the plan serves, the chart archive's bytes.
    render_plan(_sized("a", 3), [tmp_path], example=None)
    render_plan(_sized("b", 2), [tmp_path], example=None)
    render_plan(_sized("a", 2, "other"), [tmp_path], example=None)
    render_plan(_sized("a", 2), [tmp_path], kubernetes_version="1.34", example=None)
    crd = _crd_resource(_crd("monitoring.coreos.com", "ServiceMonitor", "servicemonitors"))
    render_plan(Plan("t", [crd, *_sized("a", 2).resources], {}), [tmp_path], example=None)
    assert helm_renders == ["a", "a", "b", "a", "a", "a"]
    shutil.rmtree(tmp_path / "src")
    make_chart(tmp_path, "sized", "1.0.0", {"cm.yaml": SIZED["cm.yaml"].replace("size:", "rows:")}, values="size: 1\n")
    changed = render_plan(_sized("a", 2), [tmp_path], example=None)[0]
    assert helm_renders[-1] == "a" and len(helm_renders) == 7 and changed.objects[0]["data"] == {"rows": "2"}


def test_a_kept_render_too_deep_to_read_back_where_it_is_asked_for_is_rendered_again(tmp_path: Path, helm_renders) -> None:
    """Read back from a deeper stack than it was first parsed at, a deeply nested render gets what a fresh one
    gets (here: the chart error naming the release), never a traceback."""
    import inspect

    depth = 150
    nested = "{a: " * depth + "x" + "}" * depth
    make_chart(tmp_path, "deep", "1.0.0", {"cm.yaml": f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: d}}\ndata: {nested}\n"})
    plan = Plan("t", [release_resource("deep", "deep", "1.0.0", "ns", {}, "deep")], {})
    assert render_plan(plan, [tmp_path], example=None)[0].objects[0]["data"]["a"]["a"]
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 100)  # room for preflight's frames, not for 150 levels of JSON
    try:
        with pytest.raises(ChartError) as err:
            render_plan(plan, [tmp_path], example=None)
    finally:
        sys.setrecursionlimit(limit)
    assert err.value.release == "deep" and "nested too deeply" in str(err.value)
    assert helm_renders == ["deep", "deep"]


def test_a_chart_folder_is_rendered_every_time(tmp_path: Path, helm_renders) -> None:
    """Its files can change without the folder's own stat changing: nothing of it is kept."""
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    folder = tmp_path / "sized-1.0.0"
    shutil.copytree(tmp_path / "src" / "sized", folder)
    (tmp_path / "sized-1.0.0.tgz").unlink()
    assert render_plan(_sized("a", 2), [tmp_path], example=None)[0].objects[0]["data"] == {"size": "2"}
    (folder / "templates" / "cm.yaml").write_text((folder / "templates" / "cm.yaml").read_text().replace("size:", "rows:"))
    assert render_plan(_sized("a", 2), [tmp_path], example=None)[0].objects[0]["data"] == {"rows": "2"}
    assert helm_renders == ["a", "a"]


def test_the_kept_renders_stay_within_their_bound_the_least_recently_used_going_first(tmp_path: Path, helm_renders,
                                                                                        monkeypatch) -> None:
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    render_plan(_sized("a", 1), [tmp_path], example=None)
    one = render._RENDERED_SIZE[0]
    monkeypatch.setattr(render, "RENDER_MEMO_BYTES", 2 * one + one // 2)  # room for two
    for size in (2, 1, 3):  # 1 is used again before 3 comes: 2 is the least recently used
        render_plan(_sized("a", size), [tmp_path], example=None)
    assert len(render._RENDERED) == 2 and render._RENDERED_SIZE[0] <= render.RENDER_MEMO_BYTES
    assert render._RENDERED_SIZE[0] == sum(len(t) for t in render._RENDERED.values())
    render_plan(_sized("a", 1), [tmp_path], example=None)
    render_plan(_sized("a", 2), [tmp_path], example=None)
    assert helm_renders == ["a", "a", "a", "a"], "1 and 3 kept, 2 rendered again"
    kept = dict(render._RENDERED)
    monkeypatch.setattr(render, "RENDER_MEMO_BYTES", one - 1)  # a render bigger than the bound is not kept at all
    render_plan(_sized("a", 9), [tmp_path], example=None)
    render_plan(_sized("a", 9), [tmp_path], example=None)
    assert len(helm_renders) == 6 and render._RENDERED == kept


# --- renders kept on disk for the next process -------------------------------------------------------------

def _kept_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("render-*.json"))


def _as_a_new_process(monkeypatch) -> None:
    """What a new process starts with: nothing rendered in memory."""
    from collections import OrderedDict

    monkeypatch.setattr(render, "_RENDERED", OrderedDict())
    monkeypatch.setattr(render, "_RENDERED_SIZE", [0])


def test_a_release_rendered_by_one_process_is_read_back_by_the_next_from_the_cache_folder(
        tmp_path: Path, helm_renders, monkeypatch) -> None:
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    first = render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0]
    assert helm_renders == ["a"] and len(_kept_files(cache)) == 1
    first.objects[0]["data"]["size"] = "changed by its caller"
    _as_a_new_process(monkeypatch)
    second = render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0]
    assert helm_renders == ["a"], "read back from the folder, not rendered again"
    assert len(render._RENDERED) == 1, "and kept in this process's memory for the next read"
    assert {oct(f.stat().st_mode & 0o777) for f in cache.iterdir()} == {"0o600"}, "the user's own files"
    assert second.objects == [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "team"},
                               "data": {"size": "2"}}]
    second.objects[0]["data"]["size"] = "changed by the second caller"
    assert render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0].objects[0]["data"] == {"size": "2"}
    assert helm_renders == ["a"], "the second read comes from this process's memory"
    # Rendered in this process for a run without the folder, then asked for with it: kept there too.
    render_plan(_sized("b", 2), [tmp_path], example=None)
    render_plan(_sized("b", 2), [tmp_path], example=None, cache_dir=cache)
    assert helm_renders == ["a", "b"] and len(_kept_files(cache)) == 2
    # Other values, or another folder, or a changed chart archive: Helm renders.
    _as_a_new_process(monkeypatch)
    render_plan(_sized("a", 3), [tmp_path], example=None, cache_dir=cache)
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=tmp_path / "elsewhere")
    assert helm_renders == ["a", "b", "a", "a"] and len(_kept_files(cache)) == 3
    shutil.rmtree(tmp_path / "src")
    make_chart(tmp_path, "sized", "1.0.0", {"cm.yaml": SIZED["cm.yaml"].replace("size:", "rows:")}, values="size: 1\n")
    _as_a_new_process(monkeypatch)
    assert render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0].objects[0]["data"] == {"rows": "2"}
    assert len(helm_renders) == 5


PLANTED = {"text": "not json {", "object": '{"a": 1}', "lengths": "[[{}], []]", "not-objects": '[["x"], [null]]',
           "no-kind": '[[{"apiVersion": "v1", "kind": ""}], [null]]', "deep": "[" * 100_000, "folder": None,
           "fifo": None, "link-to-dev-zero": None, "bigger-than-a-render-is-kept": None}


@pytest.mark.parametrize("damage", list(PLANTED))
def test_a_damaged_or_planted_render_in_the_cache_folder_is_rendered_again(tmp_path: Path, helm_renders, monkeypatch,
                                                                           damage: str) -> None:
    """Read back only when it is a regular file, small enough and the shape render_chart keeps (Kubernetes objects
    with a kind): a pipe would hang the read, /dev/zero or a huge file exhaust the memory, an empty object pass the
    fit check with pods missing."""
    import os

    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    [kept] = _kept_files(cache)
    kept.unlink()
    if damage == "folder":
        kept.mkdir()
    elif damage == "fifo":
        os.mkfifo(kept)
    elif damage == "link-to-dev-zero":
        kept.symlink_to("/dev/zero")
    elif damage == "bigger-than-a-render-is-kept":
        with open(kept, "wb") as f:  # sparse: no disk used
            f.truncate(render.RENDER_MEMO_BYTES + 1)
    else:
        kept.write_text(PLANTED[damage])
    _as_a_new_process(monkeypatch)
    again = render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0]
    assert helm_renders == ["a", "a"] and again.objects[0]["data"] == {"size": "2"}
    if PLANTED[damage] is not None or damage == "bigger-than-a-render-is-kept":
        assert json.loads(kept.read_text())[0][0]["data"] == {"size": "2"}, "replaced by the render"
        assert not list(cache.glob(".*.tmp"))


def test_a_render_kept_by_other_code_is_not_read_back(tmp_path: Path, helm_renders, monkeypatch) -> None:
    """render.py's own source and Helm's version are part of the key on disk: a fix to the render, or another
    Helm, is not hidden by what the code before it kept."""
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    _as_a_new_process(monkeypatch)
    monkeypatch.setattr(render, "_RENDER_CODE", ["the next version of render.py"])
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    assert helm_renders == ["a", "a"] and len(_kept_files(cache)) == 2
    # What the code is: render.py's source, the Helm library's versions, and the library file itself.
    from helm_python import _native

    def code(*changes) -> str:
        with monkeypatch.context() as m:
            for where, name, value in changes:
                m.setattr(where, name, value)
            m.setattr(render, "_RENDER_CODE", [None])
            return render._render_code()

    monkeypatch.setattr(render, "_RENDER_CODE", [None])
    assert render._RENDER_SOURCE == hashlib.sha256(Path(render.__file__).read_bytes()).hexdigest()
    other_library = tmp_path / "libhelm_c.so"
    other_library.write_bytes(b"a build of one's own")
    now = code()
    assert now == code() and len({now, code((render, "_RENDER_SOURCE", "edited")),
                                  code((_native, "helm_c_version", lambda: "9.9.9")),
                                  code((_native, "helm_sdk_version", lambda: "v9.9.9")),
                                  code((_native, "library_path", other_library))}) == 5


def test_the_cache_folders_renders_stay_within_their_bound_the_least_recently_used_going_first(
        tmp_path: Path, helm_renders, monkeypatch) -> None:
    import os

    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    paths = {}
    for size in (1, 2, 3):
        render_plan(_sized("a", size), [tmp_path], example=None, cache_dir=cache)
        [paths[size]] = set(_kept_files(cache)) - set(paths.values())
        os.utime(paths[size], ns=(size * 10**9, size * 10**9))  # written in this order, a second apart
    (cache / "parsed.json").write_text("x" * 10_000)  # the folder's other files are not counted or removed
    one = paths[1].stat().st_size
    _as_a_new_process(monkeypatch)
    render_plan(_sized("a", 1), [tmp_path], example=None, cache_dir=cache)  # read back: now the most recent
    assert helm_renders == ["a", "a", "a"]
    monkeypatch.setattr(render, "RENDER_DISK_BYTES", 2 * one + one // 2)  # room for two
    render_plan(_sized("a", 4), [tmp_path], example=None, cache_dir=cache)
    assert not paths[2].exists() and not paths[3].exists() and paths[1].exists(), "2 and 3 least recently used"
    assert len(_kept_files(cache)) == 2 and (cache / "parsed.json").exists()
    render.prune_renders(cache, bound=0)
    assert _kept_files(cache) == [] and (cache / "parsed.json").exists()
    render.prune_renders(tmp_path / "no-such-folder")  # nothing there: nothing to do


@pytest.mark.parametrize("folder", ["another-users", "a-file"])
def test_a_cache_folder_others_can_write_to_or_that_is_no_folder_is_not_used(tmp_path: Path, helm_renders,
                                                                             monkeypatch, capsys, folder: str) -> None:
    """What is read back decides the verdict: a render planted by another user must not be."""
    import os

    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    if folder == "a-file":
        cache.write_text("not a folder")
    else:
        cache.mkdir()
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)
    assert render.private_folder(cache) is None
    for _ in range(2):
        _as_a_new_process(monkeypatch)
        assert render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)[0].objects[0]["data"] == {"size": "2"}
    assert helm_renders == ["a", "a"]
    assert folder == "a-file" or list(cache.iterdir()) == []
    why = {"a-file": "not a folder", "another-users": "another user's folder"}[folder]
    assert capsys.readouterr().err.count(f"preflight: not keeping renders in {cache} ({why})") == 1, "said once"
    made = tmp_path / "made" / "here"
    assert render.private_folder(made) == made and made.stat().st_mode & 0o777 == 0o700 or folder == "another-users"


def test_a_folder_of_ones_own_that_others_could_write_to_is_closed_and_what_they_planted_is_not_read(
        tmp_path: Path, helm_renders, monkeypatch) -> None:
    """As an earlier version made it (0755, or 0775 under a umask of 002), or a user made it 0777: the folder is
    closed (0700: the 0644 files an earlier version wrote hold chart-generated passwords), and a file in it that is
    not the user's own, or that others may write, is rendered again."""
    import os

    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    [kept] = _kept_files(cache)
    cache.chmod(0o777)
    kept.chmod(0o666)  # as anyone could have left it
    _as_a_new_process(monkeypatch)
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    assert cache.stat().st_mode & 0o777 == 0o700 and helm_renders == ["a", "a"]
    kept.chmod(0o600)
    real = os.getuid()
    with monkeypatch.context() as m:  # a file of another user's: the folder is this user's, the file is not
        m.setattr(os, "getuid", lambda: real)
        m.setattr(os, "fstat", lambda fd, real_fstat=os.fstat: os.stat_result(
            (*real_fstat(fd)[:4], real + 1, *real_fstat(fd)[5:])))
        _as_a_new_process(monkeypatch)
        render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    assert helm_renders == ["a", "a", "a"]
    _as_a_new_process(monkeypatch)
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    assert helm_renders == ["a", "a", "a"], "the user's own file, writable by nobody else, is read back"


@pytest.mark.parametrize("facts", ["{}", '{"name": "sized"}', "[]", '{"name": "s", "version": "1", "dependencies": [],'
                                   ' "crds": [["a.yaml"]], "apiVersionQueries": null}'])
def test_chart_facts_of_another_shape_in_the_cache_folder_are_read_from_the_chart_again(tmp_path: Path, monkeypatch,
                                                                                       facts: str) -> None:
    make_chart(tmp_path, "sized", "1.0.0", SIZED, values="size: 1\n")
    cache = tmp_path / "cache"
    render_plan(_sized("a", 2), [tmp_path], example=None, cache_dir=cache)
    [kept] = cache.glob("chart-v2-*.json")
    kept.write_text(facts)
    monkeypatch.setattr(render, "_CHARTS", {})
    _as_a_new_process(monkeypatch)
    assert render_plan(_sized("a", 3), [tmp_path], example=None, cache_dir=cache)[0].objects[0]["data"] == {"size": "3"}
    assert json.loads(kept.read_text())["name"] == "sized", "written again from the chart"


def test_temporary_files_a_killed_process_left_are_pruned_and_a_writer_leaves_none(tmp_path: Path) -> None:
    import os
    import time

    cache = tmp_path / "cache"
    cache.mkdir()
    old, fresh = cache / ".render-x.json.1.2.ab.tmp", cache / ".render-y.json.3.4.cd.tmp"
    for f in (old, fresh):
        f.write_text("half a render")
    os.utime(old, (time.time() - 2 * 3600,) * 2)
    render.prune_renders(cache)
    assert not old.exists() and fresh.exists(), "another process may still be writing the fresh one"
    assert render.write_private(cache / "render-z.json", "[[], []]")
    assert sorted(p.name for p in cache.iterdir()) == [fresh.name, "render-z.json"]
    assert not render.write_private(tmp_path / "no-such-folder" / "render-z.json", "[[], []]")
    assert not render.write_private(cache / "render-z.json" / "under-a-file", "[[], []]")
    (cache / "render-dir.json").mkdir()  # written, then not put in place: the temporary file goes
    assert not render.write_private(cache / "render-dir.json", "[[], []]")
    assert sorted(p.name for p in cache.iterdir()) == [fresh.name, "render-dir.json", "render-z.json"]


def test_preflight_keeps_its_renders_beside_its_output_or_in_the_folder_the_environment_names(tmp_path: Path,
                                                                                             monkeypatch) -> None:
    from gpu_platform.preflight.fit.run import CACHE_ENV
    from tests.cli_support import preflight_in_process

    args = ("gcp-prod", "--no-policies", "--quiet", "--out")
    result = preflight_in_process(*args, str(tmp_path / "build"), env={CACHE_ENV: None})
    assert result.returncode == 0, result.stderr
    beside = _kept_files(tmp_path / "build" / ".cache" / "parsed-yaml")
    assert beside, "the default folder: .cache/parsed-yaml beside the stacks' output folders"
    _as_a_new_process(monkeypatch)
    result = preflight_in_process(*args, str(tmp_path / "other"), env={CACHE_ENV: str(tmp_path / "shared")})
    assert result.returncode == 0, result.stderr
    assert [p.name for p in _kept_files(tmp_path / "shared")] == [p.name for p in beside]
    assert not (tmp_path / "other" / ".cache").exists()


# --- preflight end to end: exit 2 naming the release ---------------------------------------------------


def _chart_dir_without(tmp_path: Path, *names: str) -> Path:
    d = tmp_path / "charts"
    d.mkdir()
    for p in CHARTS.glob("*.tgz"):
        if not any(p.name.startswith(f"{n}-") for n in names):
            (d / p.name).symlink_to(p)
    (d / "kustomize").symlink_to(CHARTS / "kustomize")
    return d


def _preflight(capsys, *argv: str) -> tuple[int, str, str]:
    from gpu_platform.preflight.__main__ import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_preflight_exits_2_naming_a_release_whose_chart_is_missing(tmp_path: Path, capsys) -> None:
    charts = _chart_dir_without(tmp_path, "kueue")
    code, out, err = _preflight(capsys, "gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path / "b"),
                                "--charts", str(charts))
    assert code == 2, err
    assert "release kueue" in err and "kueue-0.19.2.tgz" in err and str(charts) in err
    assert "Traceback" not in err + out


def test_preflight_exits_2_naming_a_release_whose_chart_fails_or_refuses_values(tmp_path: Path, capsys) -> None:
    charts = _chart_dir_without(tmp_path, "dcgm-exporter")
    make_chart(charts, "dcgm-exporter", "4.8.2", {"x.yaml": '{{ fail "this chart is broken" }}\n'})
    code, out, err = _preflight(capsys, "gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path / "b"),
                                "--charts", str(charts))
    assert code == 2 and "release dcgm-exporter" in err and "this chart is broken" in err, err
    assert "Traceback" not in err + out

    (charts / "dcgm-exporter-4.8.2.tgz").unlink()
    (charts / "dcgm-exporter-4.8.2.tgz").symlink_to(CHARTS / "dcgm-exporter-4.8.2.tgz")
    # A jupyterhub whose schema refuses the `cull` block the program passes.
    (charts / "jupyterhub-4.4.0.tgz").unlink()
    make_chart(charts, "jupyterhub", "4.4.0", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"},
               schema=json.dumps({"type": "object", "properties": {"cull": {"type": "string"}}}))
    code, out, err = _preflight(capsys, "gcp-prod", "--no-policies", "--quiet", "--out", str(tmp_path / "c"),
                                "--charts", str(charts))
    assert code == 2 and "release jupyterhub" in err and "/cull" in err, err
    assert "Traceback" not in err + out


# --- kustomize overlays ----------------------------------------------------------------------------------

BASE = [
    {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api", "namespace": "kubeflow"},
     "spec": {"template": {"spec": {"containers": [
         {"name": "api", "image": "a:1", "resources": {"requests": {"cpu": "1"}}},
         {"name": "sidecar", "image": "s:1"}]}}}},
    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cache-deployer", "namespace": "kubeflow"}},
]


def test_strategic_merge_patch_merges_containers_by_name_and_deletes() -> None:
    objs = json.loads(json.dumps(BASE))
    objs = kustomize.apply_patch(objs, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "api"},
                                        "spec": {"template": {"spec": {"containers": [
                                            {"name": "api", "resources": {"requests": {"cpu": "250m"}}},
                                            {"name": "sidecar", "$patch": "delete"}]}}}}, None)
    containers = objs[0]["spec"]["template"]["spec"]["containers"]
    assert containers == [{"name": "api", "image": "a:1", "resources": {"requests": {"cpu": "250m"}}}]
    objs = kustomize.apply_patch(objs, {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cache-deployer"},
                                        "$patch": "delete"}, None)
    assert [o["kind"] for o in objs] == ["Deployment"]
    with pytest.raises(ValueError):
        kustomize.apply_patch(objs, {"kind": "Job", "metadata": {"name": "nope"}, "$patch": "delete"}, None)


def test_json6902_patch() -> None:
    objs = json.loads(json.dumps(BASE))
    kustomize.apply_patch(objs, [
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "a:2"},
        {"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--x"]},
        {"op": "remove", "path": "/spec/template/spec/containers/1"},
        {"op": "test", "path": "/metadata/name", "value": "api"},
    ], {"kind": "Deployment", "name": "api"})
    assert objs[0]["spec"]["template"]["spec"]["containers"] == [
        {"name": "api", "image": "a:2", "resources": {"requests": {"cpu": "1"}}, "args": ["--x"]}]
    with pytest.raises(ValueError):
        kustomize.apply_patch(objs, [{"op": "test", "path": "/metadata/name", "value": "other"}], {"kind": "Deployment"})


def test_local_overlay_of_a_pinned_remote_target(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["github.com/kubeflow/katib.git/manifests/v1beta1/installs/katib-standalone?ref=v0.19.0"],
        "patches": [
            {"path": "drop-ui.yaml"},
            {"target": {"kind": "Deployment", "name": "katib-controller"},
             "patch": yaml.safe_dump([{"op": "add", "path": "/metadata/labels/patched", "value": "yes"}])},
        ]}))
    (overlay / "drop-ui.yaml").write_text(yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment",
                                                          "metadata": {"name": "katib-ui", "namespace": "kubeflow"},
                                                          "$patch": "delete"}))
    base = render.load_kustomize("github.com/kubeflow/katib.git/manifests/v1beta1/installs/katib-standalone?ref=v0.19.0",
                                 "katib", [CHARTS])
    objs = render.load_kustomize(str(overlay), "katib", [CHARTS], base=tmp_path)
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert ("Deployment", "katib-ui") in {(o["kind"], o["metadata"]["name"]) for o in base}
    assert ("Deployment", "katib-ui") not in names and len(objs) == len(base) - 1
    ctrl = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "katib-controller"][0]
    assert ctrl["metadata"]["labels"]["patched"] == "yes"

    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({"resources": [], "replacements": []}))
    with pytest.raises(ChartError, match="replacements"):
        render.load_kustomize(str(overlay), "katib", [CHARTS], base=tmp_path)


@pytest.mark.parametrize("where, text, says", [
    ("kustomization.yaml", "resources: [a\n", "kustomization.yaml is not valid YAML"),
    ("patch.yaml", "kind: Deployment\n  metadata: {\n", "patch.yaml is not valid YAML"),
    ("patch.yaml", "[" * 50_000 + "]" * 50_000, "patch.yaml is nested too deeply"),
    ("objects.yaml", "a: 2026-13-45\n", "objects.yaml is not valid YAML"),
    ("patch.yaml", "token: ghp_S3CRETvalue123\n  bad: [\n", "patch.yaml is not valid YAML (line 2, column"),
])
def test_an_overlay_file_that_does_not_parse_is_a_chart_error_naming_it(tmp_path: Path, where, text, says) -> None:
    """A local overlay's kustomization, resource file or patch that is not YAML stops the release with a chart error
    naming the file and the line (preflight exits 2), not a traceback and not the line's text (a token in a patch),
    and text nested 50,000 levels deep does not crash the process (libyaml's parser, which recurses in C, did)."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    files = {"kustomization.yaml": yaml.safe_dump({"resources": ["objects.yaml"], "patches": [{"path": "patch.yaml"}]}),
             "objects.yaml": yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}),
             "patch.yaml": yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
                                           "data": {"k": "v"}})}
    files[where] = text
    for name, body in files.items():
        (overlay / name).write_text(body)
    script = f"""
import sys
from pathlib import Path
from gpu_platform.preflight.fit import kustomize
from gpu_platform.preflight.fit.errors import ChartError
try:
    kustomize.build(Path({str(overlay / "kustomization.yaml")!r}), "katib", lambda target, texts: [])
except ChartError as exc:
    print(exc)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.startswith("release katib: ") and says in done.stdout, done.stdout
    # Where and what only, on one line: PyYAML's own message quotes the file's line (a token, a password).
    assert done.stdout.count("\n") == 1 and "S3CRET" not in done.stdout, done.stdout


def test_unknown_kustomize_target_names_the_release(tmp_path: Path) -> None:
    with pytest.raises(ChartError) as err:
        render.load_kustomize("github.com/kubeflow/katib.git/manifests/v1beta1/installs/other?ref=v9", "katib", [tmp_path])
    assert err.value.release == "katib" and "katib-v9-other.yaml" in str(err.value)


# --- charts pull -----------------------------------------------------------------------------------


@pytest.fixture
def local_repo(tmp_path: Path):
    """A classic Helm repository on localhost made from ../shared/charts (index by Helm itself)."""
    import helm_python

    repo = tmp_path / "repo"
    repo.mkdir()
    for p in CHARTS.glob("*.tgz"):
        shutil.copy(p, repo / p.name)
    helm_python.repo_index_generate(repo)
    handler = functools.partial(_QuietHandler, directory=str(repo))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # noqa: D401
        pass


def test_charts_pull_fills_a_cache_at_the_pinned_versions(tmp_path: Path, local_repo: str, capsys) -> None:
    from gpu_platform.preflight.fit.pull import pinned_charts

    dest = tmp_path / "cache"
    # Stands in for `kubectl kustomize URL` offline: prints the pre-built YAML of the target it is given.
    fake = tmp_path / "fake_kustomize.py"
    fake.write_text("import sys\nfrom pathlib import Path\nfrom gpu_platform.preflight.fit.render import kustomize_file_name\n"
                    f"print((Path({str(CHARTS / 'kustomize')!r}) / kustomize_file_name(sys.argv[1])).read_text())\n")
    kustomize = f"env PYTHONPATH={ROOT} {sys.executable} {fake}"
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(dest), "--mirror", local_repo,
                                "--kustomize", kustomize)
    pins = {p.file_name for p in pinned_charts()}
    assert code == 0, err
    assert "FAILED" not in err, err
    assert {p.name for p in dest.glob("*.tgz")} == pins
    for p in dest.glob("*.tgz"):
        assert p.read_bytes() == (CHARTS / p.name).read_bytes()
    assert sorted(p.name for p in (dest / "kustomize").iterdir()) == sorted(p.name for p in (CHARTS / "kustomize").iterdir())
    # The pulled cache renders a stack.
    releases = render_plan(stack_plan("aws-prod"), [dest], kubernetes_version="1.33")
    assert all(r.rendered for r in releases)
    # A second run keeps what is there; --only limits; an unknown name is a usage error.
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(dest), "--mirror", local_repo, "--only", "kueue")
    assert code == 0 and "kueue-0.19.2.tgz" in out
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(dest), "--only", "nosuch")
    assert code == 2 and "nosuch" in err
    # A kustomize build that fails is reported by target, not skipped.
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(tmp_path / "other"), "--mirror", local_repo,
                                "--kustomize", "false")
    assert code == 1 and "FAILED  github.com/kubeflow/katib.git" in err, err


def test_pinned_charts_cover_every_release_the_stacks_install() -> None:
    from gpu_platform.preflight.fit.pull import pinned_charts

    pins = {(p.name, p.version) for p in pinned_charts()}
    for stack in STACKS:
        for r in stack_plan(stack).by_type(RELEASE):
            i = r.plain_inputs
            assert (i["chart"].rsplit("/", 1)[-1], i["version"]) in pins, (stack, r.name)


def test_crds_rendered_from_another_charts_templates_reach_capability_checks(tmp_path: Path) -> None:
    crd = yaml.safe_dump(_crd("example.org", "Widget", "widgets"))
    make_chart(tmp_path, "provider", "1.0.0", {"crd.yaml": crd})
    make_chart(tmp_path, "consumer", "1.0.0", {"cm.yaml": """\
        apiVersion: v1
        kind: ConfigMap
        metadata: {name: consumer}
        data:
          widgets: {{ .Capabilities.APIVersions.Has "example.org/v1/Widget" | quote }}
        """})
    plan = Plan("t", [release_resource("c", "consumer", "1.0.0", "ns", {}, "consumer"),
                      release_resource("p", "provider", "1.0.0", "ns", {}, "provider")], {})
    releases = {r.name: r for r in render_plan(plan, [tmp_path], kubernetes_version="1.33", example=None)}
    assert [o["kind"] for o in releases["provider"].objects] == ["CustomResourceDefinition"]
    assert releases["consumer"].objects[0]["data"]["widgets"] == "true"
    alone = Plan("t", [release_resource("c", "consumer", "1.0.0", "ns", {}, "consumer")], {})
    assert render_plan(alone, [tmp_path], example=None)[0].objects[0]["data"]["widgets"] == "false"


def test_without_helms_sdk_rendering_stops_with_a_chart_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "helm_python", None)  # `import helm_python` raises ImportError
    plan = Plan("t", [release_resource("x", "kueue", "0.19.2", "ns", {}, "kueue")], {})
    with pytest.raises(ChartError, match="helm-python-sdk"):
        render_plan(plan, [CHARTS], example=None)


def test_an_archive_holding_another_chart_is_refused(tmp_path: Path) -> None:
    built = make_chart(tmp_path, "other", "1.0.0", {"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"})
    built.rename(tmp_path / "wanted-1.0.0.tgz")
    plan = Plan("t", [release_resource("w", "wanted", "1.0.0", "ns", {}, "wanted")], {})
    with pytest.raises(ChartError, match="holds chart other 1.0.0, not wanted 1.0.0"):
        render_plan(plan, [tmp_path], example=None)


# --- issue 37, item 4: offline charts that work ----------------------------------------------------------


def test_a_failed_pull_leaves_no_half_filled_cache(tmp_path: Path, local_repo: str, capsys) -> None:
    """Every chart came from the mirror but one kustomize build failed: nothing lands in the cache (it was
    half filled, and `charts ensure` then took it for a cache)."""
    fresh = tmp_path / "fresh"
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(fresh), "--mirror", local_repo, "--kustomize", "false")
    assert code == 1, err
    assert "nothing was added to" in err and "FAILED  github.com/kubeflow/katib.git" in err
    assert not fresh.exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "note.txt").write_text("mine")
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(kept), "--mirror", local_repo, "--kustomize", "false")
    assert code == 1 and [p.name for p in kept.iterdir()] == ["note.txt"]
    assert not [p for p in tmp_path.iterdir() if ".pulling-" in p.name]  # no staging folder left behind
    code, out, err = _preflight(capsys, "charts", "pull", "--dest", str(kept), "--mirror", "http://127.0.0.1:9/",
                                "--only", "kueue")
    assert code == 1 and [p.name for p in kept.iterdir()] == ["note.txt"], err


def test_charts_list_names_every_pinned_install_and_where_it_comes_from(capsys) -> None:
    from gpu_platform.preflight.fit.pull import pinned_charts, pinned_kustomize_targets

    code, out, err = _preflight(capsys, "charts", "list")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == len(pinned_charts()) + len(pinned_kustomize_targets())
    for p in pinned_charts():
        assert any(ln.startswith(p.file_name) and (p.repo or p.chart) in ln for ln in lines), p
    for t in pinned_kustomize_targets():
        assert any(ln.startswith(f"kustomize/{render.kustomize_file_name(t)}") and f"kustomize build https://{t}" in ln
                   for ln in lines), t


@pytest.mark.parametrize("before", [True, False], ids=["-C-then-charts", "charts-then-C"])
def test_charts_with_c_dir_finds_the_project_from_any_directory(tmp_path: Path, monkeypatch, capsys, before) -> None:
    monkeypatch.chdir(tmp_path)  # no project here
    monkeypatch.delenv("GPU_PLATFORM_CHARTS", raising=False)
    from gpu_platform.preflight.fit.run import default_chart_dirs

    argv = ["-C", str(ROOT), "charts", "pull", "--help"] if before else ["charts", "-C", str(ROOT), "pull", "--help"]
    with pytest.raises(SystemExit) as done:
        _preflight(capsys, *argv)
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert str(default_chart_dirs(ROOT)[0]) in " ".join(out.split()).replace("- ", "-"), out
    assert "exit codes: 0" in " ".join(out.split())
    code, out, err = _preflight(capsys, "-C", str(tmp_path / "nowhere"), "charts", "list")
    assert code == 2 and "-C" in err and "no such folder" in err


def test_grafanas_admin_secret_is_the_subcharts_own_and_its_pods_read_it_from_there() -> None:
    """issue 37 item 5: with `admin.existingSecret` empty, the pinned chart's grafana subchart renders its own
    Secret (`admin-user`, `admin-password`, kept across upgrades by `lookup`) and the Grafana container reads
    the login from it: nothing of the password is a Pulumi resource."""
    from gpu_platform.components.platform.monitoring import GRAFANA_ADMIN_SECRET, kube_prometheus_stack_values

    need_charts()
    values = kube_prometheus_stack_values("standard-rwo", ["ops@example.com"], None, cloud="gcp")
    plan = Plan("t", [release_resource("kps", "kube-prometheus-stack", "88.5.3", "monitoring", values,
                                       "kube-prometheus-stack")], {})
    rel = render_plan(plan, [CHARTS], kubernetes_version="1.35", example=None)[0]
    secret = next(o for o in rel.objects if o["kind"] == "Secret" and o["metadata"]["name"] == GRAFANA_ADMIN_SECRET)
    assert set(secret["data"]) >= {"admin-user", "admin-password"}
    grafana = next(o for o in rel.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == GRAFANA_ADMIN_SECRET)
    env = {e["name"]: e for c in grafana["spec"]["template"]["spec"]["containers"] for e in c.get("env", [])}
    ref = env["GF_SECURITY_ADMIN_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == (GRAFANA_ADMIN_SECRET, "admin-password")
