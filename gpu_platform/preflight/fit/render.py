"""Render what the cluster will really run: every Helm release, kustomize install and plain object the
program registers, plus the example TrainJob, as fully rendered Kubernetes objects.

Helm charts are rendered by Helm's own Go SDK (PyPI `helm-python-sdk`, the `helm template` engine:
values coalesced with the chart's defaults, values.schema.json enforced, subchart conditions applied,
`lookup` returning nothing as in `helm template`), with the stack's Kubernetes version and the API
versions the cluster will serve as capabilities. Charts come from local chart directories
(`NAME-VERSION.tgz`, OCI references by their last path element); kustomize remote targets map to the
pre-built YAML in `<chart dir>/kustomize/`. Nothing here touches the network.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import stat
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

import yaml

from gpu_platform import private_files
from gpu_platform.data.chart import kustomize_file_name  # noqa: F401 (also pull.py's, through this module)
from gpu_platform.preflight.fit.errors import ChartError
from gpu_platform.private_files import read_private, read_private_json, write_private  # noqa: F401 (tests reach them)
from gpu_platform.preflight.runner import (SECRET_SIG, SIG_KEY, RESOURCE_SIG, UNKNOWN, Plan, PlannedResource,
                                           whole_numbers)

RELEASE_TYPE = "kubernetes:helm.sh/v3:Release"
KUSTOMIZE_TYPES = ("kubernetes:kustomize/v2:Directory", "kubernetes:kustomize:Directory")
# Resources of the kubernetes provider that are not objects in the cluster.
NOT_OBJECTS = {"pulumi:providers:kubernetes", "kubernetes:helm.sh/v3:Chart", "kubernetes:helm.sh/v4:Chart",
               "kubernetes:yaml/v2:ConfigGroup", "kubernetes:yaml/v2:ConfigFile", *KUSTOMIZE_TYPES, RELEASE_TYPE}
# Server-side-apply patches of an object another resource (a Helm release) creates, e.g.
# `kubernetes:apps/v1:DeploymentPatch`: folded into that object (apply_patch_resources), not objects themselves.
PATCH_SUFFIX = "Patch"
# The example TrainJob checked for queue fit, relative to the project (when it has one).
EXAMPLE_TRAINJOB = Path("examples") / "training" / "trainjob-checkpointed.yaml"
EXAMPLE_NAMESPACE = "training"

# Stand-ins for values preflight cannot or must not know: secrets never reach rendered files.
SECRET_PLACEHOLDER = "preflight-secret-value"
UNKNOWN_PLACEHOLDER = "preflight-unknown-value"

SOURCES = ("helm", "kustomize", "manifest", "addon", "example")
# The cloud's managed add-ons whose pods fit models (data/eks_addon_pods.py): not objects the program applies.
ADDON_TYPE = "aws:eks/addon:Addon"
# Built-in kinds that are not namespaced (kubectl api-resources --namespaced=false, Kubernetes 1.33).
CLUSTER_SCOPED_KINDS = frozenset({
    "Namespace", "Node", "PersistentVolume", "ComponentStatus", "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding", "CustomResourceDefinition", "APIService",
    "TokenReview", "SelfSubjectAccessReview", "SelfSubjectRulesReview", "SubjectAccessReview",
    "SelfSubjectReview", "CertificateSigningRequest", "ClusterTrustBundle", "FlowSchema",
    "PriorityLevelConfiguration", "IngressClass", "RuntimeClass", "ClusterRole", "ClusterRoleBinding",
    "PriorityClass", "CSIDriver", "CSINode", "StorageClass", "VolumeAttachment", "VolumeAttributesClass",
    "DeviceClass", "ResourceSlice", "IPAddress", "ServiceCIDR", "StorageVersionMigration",
})
# Hooks that `helm install/upgrade` (and so a Pulumi Release) never runs: only `helm test` does.
TEST_HOOKS = frozenset({"test", "test-success", "test-failure"})


@dataclass
class RenderedRelease:
    name: str  # Helm release name / kustomize or manifest set name
    resource_name: str  # Pulumi logical name
    urn: str
    source: str  # helm | kustomize | manifest | example
    chart: Optional[str]
    version: Optional[str]
    namespace: Optional[str]
    objects: list[dict[str, Any]]  # namespace filled in for namespaced kinds, hooks kept (annotation)
    depends_on: frozenset[str] = frozenset()  # URNs this release waits for (transitively)
    rendered: bool = True  # False: chart allowed to be missing (--allow-missing-chart), objects empty
    # The YAML text each object was parsed from, where preflight did not change it (None where it did):
    # written verbatim, which spares re-serialising megabytes of CRDs.
    texts: list[Optional[str]] = field(default_factory=list, repr=False, compare=False)
    # The release's values coalesced with the chart's defaults, for charts whose pods are not in any
    # manifest (JupyterHub's user servers come from the hub's KubeSpawner config): see fit/pods.py.
    values: Optional[dict[str, Any]] = field(default=None, repr=False, compare=False)

    def to_yaml(self) -> str:
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        texts = self.texts if len(self.texts) == len(self.objects) else [None] * len(self.objects)
        docs = []
        for obj, text in zip(self.objects, texts):
            body = text if text is not None else yaml.dump(obj, Dumper=dumper, sort_keys=True, default_flow_style=False)
            docs.append("---\n" + body.strip("\n") + "\n")
        return "".join(docs)


# ---------------------------------------------------------------------------------------------
# Values as the program registered them
# ---------------------------------------------------------------------------------------------


def _stand_ins(v: Any, text: str) -> Any:
    """Same structure, every scalar leaf replaced by `text` (a secret map stays a map)."""
    if isinstance(v, dict):
        return {k: _stand_ins(x, text) for k, x in v.items() if k != SIG_KEY}
    if isinstance(v, list):
        return [_stand_ins(x, text) for x in v]
    return text


def plain_values(v: Any) -> Any:
    """Wire value -> what the chart sees, with secrets and unknowns replaced by fixed stand-in strings."""
    if isinstance(v, dict) and v.get(SIG_KEY) == SECRET_SIG:
        inner = v.get("value")
        return _stand_ins(inner, SECRET_PLACEHOLDER) if inner != UNKNOWN else SECRET_PLACEHOLDER
    if isinstance(v, dict) and v.get(SIG_KEY) == RESOURCE_SIG:
        return v.get("urn")
    if v == UNKNOWN:
        return UNKNOWN_PLACEHOLDER
    if isinstance(v, dict):
        return {k: plain_values(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain_values(x) for x in v]
    return v


def _auto_name(resource_name: str, urn: str) -> str:
    """pulumi-kubernetes autonaming (`<resource name>-<8 hex>`, random there): a stable suffix here."""
    return f"{resource_name}-{hashlib.sha256(urn.encode()).hexdigest()[:8]}"


# ---------------------------------------------------------------------------------------------
# Dependencies
# ---------------------------------------------------------------------------------------------


class _Deps:
    """What each resource waits for: its dependencies and property dependencies, transitively; a
    dependency on a component means its whole subtree (the SDK expands components to children)."""

    def __init__(self, plan: Plan):
        self.by_urn = {r.urn: r for r in plan.resources}
        self.children: dict[str, list[str]] = {}
        for r in plan.resources:
            if r.parent:
                self.children.setdefault(r.parent, []).append(r.urn)
        self._memo: dict[str, frozenset[str]] = {}

    def direct(self, r: PlannedResource) -> set[str]:
        out = set(r.dependencies)
        for urns in r.property_dependencies.values():
            out.update(urns)
        return out

    def subtree(self, urn: str) -> set[str]:
        out, todo = set(), [urn]
        while todo:
            u = todo.pop()
            if u in out:
                continue
            out.add(u)
            todo.extend(self.children.get(u, ()))
        return out

    def of(self, urns: Iterable[str]) -> frozenset[str]:
        seen: set[str] = set()
        todo = list(urns)
        while todo:
            u = todo.pop()
            for v in self.subtree(u):
                if v in seen:
                    continue
                seen.add(v)
                r = self.by_urn.get(v)
                if r is not None:
                    todo.extend(self.direct(r))
        return frozenset(seen)


# ---------------------------------------------------------------------------------------------
# Charts
# ---------------------------------------------------------------------------------------------


def chart_file_name(chart: str, version: str) -> str:
    """`oci://host/path/NAME`, `repo/NAME` or `NAME` at `version` -> `NAME-VERSION.tgz`."""
    return f"{chart.rstrip('/').rsplit('/', 1)[-1]}-{version}.tgz"


def local_chart_archive(chart: str) -> Optional[Path]:
    """`chart` when it is an absolute path to an existing archive or chart folder: what the program passes a
    Release with $GPU_PLATFORM_LOCAL_CHARTS set (components/helm.py local_chart). A chart name never is."""
    path = Path(chart)
    return path if path.is_absolute() and path.exists() else None


def chart_name(chart: str, version: str) -> str:
    """The chart's own name: the last element of `NAME`, `repo/NAME` or `oci://host/path/NAME`, and of a local
    archive `.../NAME-VERSION.tgz`."""
    last = chart.rstrip("/").rsplit("/", 1)[-1]
    return last.removesuffix(f"-{version}.tgz") if local_chart_archive(chart) else last


def find_chart(chart: str, version: str, chart_dirs: list[Path]) -> Optional[Path]:
    local = local_chart_archive(chart)
    if local is not None:
        return local
    name = chart_file_name(chart, version)
    for d in chart_dirs:
        for candidate in (d / name, d / name[: -len(".tgz")]):
            if candidate.exists():
                return candidate
    return None


@dataclass
class ChartInfo:
    """What preflight needs of a chart archive besides rendering it, read once per process from a
    pristine load (helm-c's render drops disabled subcharts from the loaded chart it is given, so a
    loaded chart is never rendered twice: every render loads the archive afresh)."""

    path: Path
    data: Optional[bytes]  # archive bytes; None for an unpacked chart folder
    name: str
    version: str
    dependencies: list[dict[str, Any]]  # Chart.yaml `dependencies` (name, condition)
    crds: list[tuple[str, list[dict[str, Any]], list[Optional[str]]]]  # (file in the archive, objects, texts)
    # what templates (subcharts included) ask .Capabilities.APIVersions.Has; None: not only literals
    api_version_queries: Optional[list[str]]
    digest: Optional[str] = None  # sha256 of the archive; None for a folder (its files can change under one stat)

    def load(self):
        import helm_python

        return helm_python.Chart.load_archive(self.data) if self.data is not None else helm_python.Chart.load(self.path)


_CHARTS: dict[tuple[Path, int, int], ChartInfo] = {}


def _read_chart(path: Path, data: Optional[bytes], release: str) -> dict[str, Any]:
    """Metadata, crds/ files and whether templates ask for API versions, from a pristine load."""
    import helm_python

    try:
        chart = helm_python.Chart.load_archive(data) if data is not None else helm_python.Chart.load(path)
    except helm_python.HelmError as exc:
        raise ChartError(release, f"chart at {path} does not load: {exc}") from None
    with chart:
        meta = chart.metadata
        return {"name": str(meta.get("name", "")), "version": str(meta.get("version", "")),
                "dependencies": list(meta.get("dependencies") or []),
                "crds": [[c.get("filename") or c["name"], c["data"]]
                         for c in sorted(chart.crds, key=lambda c: c.get("filename") or c["name"])],
                "apiVersionQueries": api_version_queries(path, data)}


def _chart_facts_shape(facts: Any) -> bool:
    """Whether chart facts read back are what _read_chart writes (else the chart is read again)."""
    return (isinstance(facts, dict) and isinstance(facts.get("name"), str) and isinstance(facts.get("version"), str)
            and isinstance(facts.get("dependencies"), list) and all(isinstance(d, dict) for d in facts["dependencies"])
            and isinstance(facts.get("crds"), list)
            and all(isinstance(c, list) and len(c) == 2 and all(isinstance(x, str) for x in c) for c in facts["crds"])
            and (facts.get("apiVersionQueries") is None or (isinstance(facts["apiVersionQueries"], list)
                                                            and all(isinstance(q, str) for q in facts["apiVersionQueries"]))))


_HAS = re.compile(r'APIVersions\.Has\s+"([^"]+)"')


def api_version_queries(path: Path, data: Optional[bytes]) -> Optional[list[str]]:
    """The API versions the chart's templates (subcharts included) ask `.Capabilities.APIVersions.Has`
    about, when every use is such a literal; None when some template uses APIVersions otherwise."""
    import io
    import tarfile

    texts: list[str] = []
    if data is not None:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                if member.isfile() and "/templates/" in member.name:
                    texts.append(tar.extractfile(member).read().decode("utf-8", "replace"))
    else:
        texts = [f.read_text(errors="replace") for f in path.rglob("*") if f.is_file() and "templates" in f.parts]
    found: set[str] = set()
    for text in texts:
        literal = _HAS.findall(text)
        if text.count("APIVersions") != len(literal):
            return None
        found.update(literal)
    return sorted(found)


def chart_info(path: Path, release: str) -> ChartInfo:
    st = path.stat()
    key = (path.resolve(), st.st_mtime_ns, st.st_size)
    if key not in _CHARTS:
        data = path.read_bytes() if path.is_file() else None
        facts = None
        folder = _CACHE_DIR[0]
        cache = folder / f"chart-v2-{hashlib.sha256(data).hexdigest()}.json" if folder is not None and data is not None else None
        text = read_private(cache, RENDER_MEMO_BYTES) if cache is not None else None
        if text is not None:
            try:
                facts = json.loads(text)
            except (ValueError, RecursionError):
                facts = None
            if not _chart_facts_shape(facts):
                facts = None
        if facts is None:
            facts = _read_chart(path, data, release)
            if cache is not None:
                write_private(cache, json.dumps(facts))
        crds = []
        for fname, text in facts["crds"]:
            texts: list[Optional[str]] = []
            crds.append((fname, _load_docs(text, release, fname, texts), texts))
        digest = hashlib.sha256(data).hexdigest() if data is not None else None
        _CHARTS[key] = ChartInfo(path, data, facts["name"], facts["version"], facts["dependencies"], crds,
                                 facts["apiVersionQueries"], digest)
    return _CHARTS[key]


def _subchart_enabled(condition: Optional[str], values: dict[str, Any]) -> bool:
    """Helm's dependency `condition`: the first path that resolves to a bool decides; none -> enabled."""
    for path in (condition or "").split(","):
        node: Any = values
        for part in path.strip().split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, bool):
            return node
    return True


# Charts whose pods the cluster-fit check builds from their values rather than from a manifest.
VALUES_NEEDED = frozenset({"jupyterhub"})


def coalesced_values(info: ChartInfo, values: dict[str, Any]) -> dict[str, Any]:
    """The values Helm renders with: the release's over the chart's defaults."""
    from helm_python import HelmError

    try:
        with info.load() as chart:
            return chart.merge_values(values)
    except HelmError as exc:
        raise ChartError(info.name, f"chart {info.name} {info.version}: values do not merge: {exc}") from None


# Releases rendered in this process, as JSON text of (objects, texts), keyed by everything a render reads: the chart
# archive's bytes, the values and Helm's render options. Rendering is most of a plan's chart work (the archive loaded
# afresh, Helm's template engine, then every document parsed); a process that renders the same release again reads
# it back instead: the differential check's cases (variants of the shipped stacks' pools and quotas, most releases
# unchanged between them; rehearsal/differential.py) and a test session's many preflights of the same stacks. Kept
# as text, so every caller gets objects of its own to fill in; the least recently used go first past
# RENDER_MEMO_BYTES. A chart folder is not kept: its files can change under one stat.
RENDER_MEMO_BYTES = 256 * 1024 * 1024
_RENDERED: "OrderedDict[str, str]" = OrderedDict()
_RENDERED_SIZE = [0]
_RENDERED_LOCK = threading.Lock()


def _memo_get(key: Optional[str]) -> Optional[str]:
    if key is None:
        return None
    with _RENDERED_LOCK:
        text = _RENDERED.get(key)
        if text is not None:
            _RENDERED.move_to_end(key)
        return text


def _memo_put(key: str, objects: list[dict[str, Any]], texts: list[Optional[str]]) -> None:
    try:
        text = json.dumps([objects, texts])
    except (TypeError, ValueError, RecursionError):  # not plain JSON (nothing Helm renders is), or too deep: not kept
        return
    _memo_keep(key, text)


def _memo_keep(key: str, text: str) -> None:
    if len(text) > RENDER_MEMO_BYTES:
        return
    with _RENDERED_LOCK:
        if key in _RENDERED:
            return
        _RENDERED[key] = text
        _RENDERED_SIZE[0] += len(text)
        while _RENDERED_SIZE[0] > RENDER_MEMO_BYTES:
            _, dropped = _RENDERED.popitem(last=False)
            _RENDERED_SIZE[0] -= len(dropped)


# The same renders kept on disk too, in the cache folder preflight is given (`run_fit`: `build/.cache/parsed-yaml`,
# or $GPU_PLATFORM_PREFLIGHT_CACHE), for the next process: a second preflight of a stack, or of a variant of it, reads
# back every release whose chart and values did not change (linode-ha's charts: 1.4 CPU-seconds in a new process,
# about 0.1 s read back). On disk the key also holds the code that rendered it (this module's source, read as it is
# imported, and the Helm library that was loaded: its versions and the file itself): a render kept by other code is
# not found. A folder anyone else can write to is not used (renders decide the verdict); files are the user's own
# (0600: charts render their own random passwords and tokens). At most RENDER_DISK_BYTES of renders; past that the
# least recently used go first.
RENDER_DISK_BYTES = 512 * 1024 * 1024
_RENDER_SOURCE = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
_RENDER_CODE: list[Optional[str]] = [None]
_LEFT_BEHIND_SECONDS = 3600  # a temporary file older than this was left by a process that was killed


def _helm_library() -> list[str]:
    """What identifies the loaded Helm library: its own versions, and the file ($HELM_C_LIB can name a build of
    one's own under the same version)."""
    from helm_python import _native

    st = os.stat(_native.library_path)
    return [_native.helm_c_version(), _native.helm_sdk_version(), str(_native.library_path), str(st.st_size),
            str(st.st_mtime_ns), str(st.st_ino)]


def _render_code() -> str:
    """What a render kept on disk was made by."""
    if _RENDER_CODE[0] is None:
        _RENDER_CODE[0] = hashlib.sha256("\0".join([_RENDER_SOURCE, *_helm_library()]).encode()).hexdigest()
    return _RENDER_CODE[0]


def private_folder(folder: Optional[Path]) -> Optional[Path]:
    """`folder` when only this user can write to it (private_files.private_folder); else None, said once on stderr:
    renders decide the verdict."""
    return private_files.private_folder(
        folder, refusal="preflight: not keeping renders in {folder} ({why}); charts are rendered afresh "
                        "(docs/preflight.md, What preflight keeps between runs)")


def _disk_path(folder: Path, key: str) -> Path:
    return folder / f"render-{hashlib.sha256((key + _render_code()).encode()).hexdigest()}.json"


def _disk_get(folder: Optional[Path], key: Optional[str]) -> Optional[tuple[list[dict[str, Any]], list[Optional[str]]]]:
    """A render another process kept, or None (none kept, unreadable, or not what render_chart keeps)."""
    if folder is None or key is None:
        return None
    path = _disk_path(folder, key)
    text, kept = read_private_json(path, RENDER_MEMO_BYTES)
    if not (isinstance(kept, list) and len(kept) == 2 and all(isinstance(part, list) for part in kept)
            and len(kept[0]) == len(kept[1]) and all(t is None or isinstance(t, str) for t in kept[1])
            and all(isinstance(o, dict) for o in kept[0])):
        return None
    try:
        for o in kept[0]:
            _object_header_problem(o, "", str(path))  # what _load_docs holds every rendered object to
    except ChartError:
        return None
    try:
        os.utime(path)  # used: the last to go when the folder is over its bound
    except OSError:
        pass
    _memo_keep(key, text)  # this process reads it from memory next time
    return kept[0], kept[1]


def _disk_put(folder: Optional[Path], key: Optional[str], only_if_missing: bool = False) -> bool:
    """Write the render this process keeps for `key` into the folder (whole, or not at all)."""
    if folder is None or key is None:
        return False
    path = _disk_path(folder, key)
    if only_if_missing:
        try:
            os.utime(path, follow_symlinks=False)  # there already: used now
            return False
        except OSError:
            pass
    text = _memo_get(key)
    return text is not None and write_private(path, text)


def prune_renders(folder: Path, bound: Optional[int] = None) -> None:
    """Keep the renders in `folder` within `bound` bytes (RENDER_DISK_BYTES), the least recently used going first;
    temporary files a killed process left behind go too."""
    import time

    bound = RENDER_DISK_BYTES if bound is None else bound
    kept = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            if st.st_mtime < time.time() - _LEFT_BEHIND_SECONDS:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
        elif entry.name.startswith("render-") and entry.name.endswith(".json"):
            kept.append((st.st_mtime_ns, st.st_size, entry.path))
    total = sum(size for _, size, _ in kept)
    for _, size, path in sorted(kept):
        if total <= bound:
            break
        try:
            os.unlink(path)
        except OSError:
            pass  # another process took it first
        total -= size


def render_chart(info: ChartInfo, release: str, values: dict[str, Any], namespace: str,
                 kube_version: Optional[str], api_versions: list[str],
                 cache_dir: Optional[Path] = None) -> tuple[list[dict[str, Any]], list[Optional[str]]]:
    """The objects `helm install` creates: crds/ of the chart and its enabled subcharts, then the
    rendered templates (hooks included, test hooks left out), namespace filled in by the caller.
    `cache_dir`: a folder where renders are kept for other processes too (see RENDER_DISK_BYTES)."""
    from helm_python import HelmError, _native

    opts: dict[str, Any] = {"name": release, "namespace": namespace, "is_install": True, "api_versions": api_versions}
    if kube_version:
        opts["kube_version"] = kube_version
    values_json, opts_json = json.dumps(values), json.dumps(opts)
    key = hashlib.sha256("\0".join((info.digest, values_json, opts_json)).encode()).hexdigest() if info.digest else None
    kept = _memo_get(key)
    if kept is not None:
        try:
            objects, texts = json.loads(kept)
        except RecursionError:  # read back from a deeper stack than it was parsed at: rendered again, as before
            pass
        else:
            _disk_put(cache_dir, key, only_if_missing=True)  # rendered here before, for a run without the folder
            return objects, texts
    else:
        from_disk = _disk_get(cache_dir, key)
        if from_disk is not None:
            return from_disk
    try:
        with info.load() as chart:
            # Chart.render has no capabilities arguments; the native call takes them (helm-c render options).
            manifests = json.loads(_native.call_string("helm_render", chart._raw(), values_json, opts_json))
            merged = chart.merge_values(values) if info.crds else {}
    except HelmError as exc:
        raise ChartError(release, f"chart {info.name} {info.version} does not render: {exc}") from None

    objects: list[dict[str, Any]] = []
    texts: list[Optional[str]] = []
    enabled = {d["name"]: _subchart_enabled(d.get("condition"), merged) for d in info.dependencies}
    for fname, objs, crd_texts in info.crds:
        parts = fname.split("/")
        if "charts" in parts and not enabled.get(parts[parts.index("charts") + 1], True):
            continue
        objects.extend({**o, "metadata": dict(o.get("metadata") or {})} for o in objs)
        texts.extend(crd_texts)
    for path in sorted(manifests):
        base = path.rsplit("/", 1)[-1]
        if base == "NOTES.txt" or base.startswith("_"):
            continue
        doc_texts: list[Optional[str]] = []
        for obj, text in zip(_load_docs(manifests[path], release, path, doc_texts), doc_texts):
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            hooks = {h.strip() for h in str(annotations.get("helm.sh/hook", "")).split(",") if h.strip()}
            if hooks and hooks <= TEST_HOOKS:
                continue
            objects.append(obj)
            texts.append(text)
    if key is not None:
        _memo_put(key, objects, texts)
        _disk_put(cache_dir, key)
    return objects, texts


_DOC_SEPARATOR = re.compile(r"(?m)^---(?:[ \t].*)?$")


# Parsed big documents (CRDs: megabytes of schema, the same text every run), content-addressed.
BIG_DOC = 32 * 1024
_PARSED: dict[str, str] = {}  # sha256 of the text -> JSON, this process
_CACHE_DIR: list[Optional[Path]] = [None]  # and on disk when render_plan is given a cache folder


def _parse_doc(doc: str) -> Any:
    import helm_python

    if len(doc) < BIG_DOC:
        return helm_python.values_from_yaml(doc)
    key = hashlib.sha256(doc.encode()).hexdigest()
    cached = _PARSED.get(key)
    folder = _CACHE_DIR[0]
    if cached is None and folder is not None:
        cached = read_private(folder / f"{key}.json", RENDER_MEMO_BYTES)
    if cached is not None:
        try:
            return json.loads(cached)
        except (ValueError, RecursionError):
            pass  # a damaged cache file: parse again
    parsed = helm_python.values_from_yaml(doc)
    _PARSED[key] = text = json.dumps(parsed)
    if folder is not None:
        write_private(folder / f"{key}.json", text)
    return parsed


def parse_yaml_docs(text: str) -> list[tuple[str, Any]]:
    """Multi-document YAML parsed by Go's YAML library (the one Helm and kubectl use, through
    helm-c), returned as JSON: ~20x faster than PyYAML on the multi-megabyte CRDs, and the same
    scalar typing the API server sees. (document text, value) pairs; empty documents are dropped.
    Big documents are parsed once and kept by content hash (each call returns a fresh copy)."""
    out = []
    for doc in _DOC_SEPARATOR.split(text):
        if doc.strip():
            parsed = _parse_doc(doc)
            if parsed:
                out.append((doc, parsed))
    return out


def _object_header_problem(doc: dict[str, Any], release: str, where: str) -> None:
    """kind and apiVersion are non-empty strings (the API server's TypeMeta); a list or a number there is
    refused by kubectl ("cannot unmarshal array into Go struct field") and crashed the fit check."""
    from gpu_platform.config.approvals import one_line

    for key in ("kind", "apiVersion"):
        value = doc.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ChartError(release, f"{where} holds an object whose {key} is {one_line(json.dumps(value))[:60]}: "
                                      f"a Kubernetes object's {key} is a non-empty string (e.g. kind: Job, apiVersion: batch/v1)")


def _load_docs(text: str, release: str, where: str, texts: Optional[list] = None) -> list[dict[str, Any]]:
    """The Kubernetes objects of a YAML stream (List kinds flattened); `texts` gets each one's source."""
    from helm_python import HelmError

    try:
        docs = parse_yaml_docs(text)
    except HelmError as exc:
        raise ChartError(release, f"{where} is not a YAML mapping of a Kubernetes object: {exc}") from None
    except RecursionError:  # Go's YAML parser reads thousands of levels; Python's JSON decoder does not
        raise ChartError(release, f"{where} is nested too deeply to read (thousands of levels): "
                                  "not a Kubernetes object") from None
    out: list[dict[str, Any]] = []
    for doc_text, doc in docs:
        if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
            raise ChartError(release, f"{where} holds something that is not a Kubernetes object")
        _object_header_problem(doc, release, where)
        if doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
            items = [i for i in doc["items"] if i]
            for item in items:
                if not isinstance(item, dict):
                    raise ChartError(release, f"{where}: a {doc['kind']}'s items must be Kubernetes objects")
                _object_header_problem(item, release, where)
            out.extend(items)
            if texts is not None:
                texts.extend([None] * len(items))
        else:
            out.append(doc)
            if texts is not None:
                texts.append(doc_text)
    return out


# ---------------------------------------------------------------------------------------------
# The jobs checked for queue fit (--job FILE)
# ---------------------------------------------------------------------------------------------

# A job file holds one job and what it needs (a ConfigMap, a PVC): far below these. The caps keep a
# hostile or mistaken file (a log, thousands of generated Jobs) from taking minutes or gigabytes: the
# fit check runs per object against every node group and the rendered releases.
MAX_JOB_BYTES = 1024 * 1024
MAX_JOB_OBJECTS = 100
MAX_JOB_DEPTH = 64
# Kinds whose pods the fit check builds (fit/pods.py pod_templates): (apiVersion prefix, kind).
JOB_KINDS = (("trainer.kubeflow.org/", "TrainJob"), ("jobset.x-k8s.io/", "JobSet"), ("batch/", "Job"),
             ("batch/", "CronJob"), ("v1", "Pod"), ("apps/", "Deployment"), ("apps/", "StatefulSet"),
             ("apps/", "ReplicaSet"), ("apps/", "DaemonSet"))
JOB_KINDS_TEXT = ("TrainJob (trainer.kubeflow.org/v1alpha1), JobSet (jobset.x-k8s.io/v1alpha2), Job or CronJob "
                  "(batch/v1), Pod (v1), Deployment/StatefulSet/ReplicaSet/DaemonSet (apps/v1)")


def shown_path(path: "Path | str") -> str:
    """A path inside one message line: control characters (newlines included) escaped, so that a file
    name cannot forge or erase output lines."""
    from gpu_platform.config.approvals import one_line

    return one_line(str(path))


def is_job_kind(obj: dict[str, Any]) -> bool:
    api, kind = str(obj.get("apiVersion", "")), obj.get("kind")
    return any(kind == k and (api == p if p == "v1" else api.startswith(p)) for p, k in JOB_KINDS)


def nested_deeper_than(obj: Any, limit: int) -> bool:
    """Whether a parsed document nests dicts/lists deeper than `limit` (walked without recursion)."""
    todo = [(obj, 0)]
    while todo:
        v, depth = todo.pop()
        if depth > limit:
            return True
        if isinstance(v, dict):
            todo.extend((x, depth + 1) for x in v.values())
        elif isinstance(v, list):
            todo.extend((x, depth + 1) for x in v)
    return False


# What the API server refuses in a job's object (Kubernetes apimachinery ValidateObjectMeta and
# pkg/apis/core/validation): names are DNS-1123 subdomains of at most 253 characters, namespaces DNS-1123
# labels of at most 63; a Job's name becomes its pods' batch.kubernetes.io/job-name label value (at most 63),
# a CronJob's gets 11 characters of suffix for its Jobs (at most 52); quantities are not negative; an
# extended resource (nvidia.com/gpu) is a whole number, and its request equals its limit when both are given
# (Kubernetes docs, "Managing Resources for Containers", "Extended resources": they cannot be overcommitted).
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_NAME_MAX = {("batch/", "Job"): 63, ("batch/", "CronJob"): 52}


def _pod_specs(obj: dict[str, Any]) -> list[tuple[str, Any]]:
    """(path, pod spec) of every pod template in a job kind's object."""
    kind, spec = obj.get("kind"), obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    dig = lambda d, *keys: _dig(d, keys)  # noqa: E731
    if kind == "Pod":
        return [("spec", spec)]
    if kind == "CronJob":
        return [("spec.jobTemplate.spec.template.spec", dig(spec, "jobTemplate", "spec", "template", "spec"))]
    if kind == "JobSet":
        jobs = spec.get("replicatedJobs")
        return [(f"spec.replicatedJobs[{i}].template.spec.template.spec", dig(j, "template", "spec", "template", "spec"))
                for i, j in enumerate(jobs if isinstance(jobs, list) else [])]
    if kind in ("Job", "Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        return [("spec.template.spec", dig(spec, "template", "spec"))]
    return []


def _dig(d: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def _resources_problems(where: str, resources: Any) -> list[str]:
    """Every quantity of one container's (or TrainJob node's) resources the API server would refuse."""
    from decimal import Decimal

    from gpu_platform.components.capacity import parse_quantity
    from gpu_platform.config.approvals import one_line

    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [f"{where} is not a mapping of requests and limits"]
    out: list[str] = []
    amounts: dict[str, dict[str, Decimal]] = {}
    for part in ("requests", "limits"):
        values = resources.get(part) or {}
        if not isinstance(values, dict):
            out.append(f"{where}.{part} is not a mapping of resource names to quantities")
            continue
        for name, value in values.items():
            shown = one_line(json.dumps(value) if not isinstance(value, str) else value)[:40]
            try:
                q = parse_quantity(value)
            except (ValueError, ArithmeticError):
                out.append(f"{where}.{part}.{name}: {shown} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")
                continue
            if q < 0:
                out.append(f"{where}.{part}.{name}: {shown} is negative; the API server refuses it (must be 0 or more)")
                continue
            extended = "/" in str(name) and not str(name).split("/", 1)[0].endswith("kubernetes.io")
            if extended and q != q.to_integral_value():
                out.append(f"{where}.{part}.{name}: {shown} is not a whole number; {name} is an extended resource, "
                           "counted in whole devices (half a GPU is refused by the API server)")
                continue
            amounts.setdefault(part, {})[str(name)] = q
    for name, limit in (amounts.get("limits") or {}).items():
        request = (amounts.get("requests") or {}).get(name)
        if request is None:
            continue
        extended = "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")
        if extended and request != limit:
            out.append(f"{where}: {name} request {request} and limit {limit} differ; an extended resource's must be equal")
        elif request > limit:
            out.append(f"{where}: the {name} request {request} is above its limit {limit}; the API server refuses it")
    return out


def job_object_problems(obj: dict[str, Any]) -> list[str]:
    """Everything the API server would refuse in one object of a job file, as far as preflight knows (a name it
    cannot use stops there: the rest is named after it)."""
    from gpu_platform.config.approvals import one_line

    kind = str(obj.get("kind"))
    meta = obj.get("metadata")
    what = f"{kind} ({obj.get('apiVersion')})"
    if not isinstance(meta, dict):
        return [f"a {what} without metadata; give metadata.name (and metadata.namespace)"]
    out: list[str] = []
    name = meta.get("name")
    if name is None and isinstance(meta.get("generateName"), str) and meta["generateName"]:
        name = None  # kubectl create fills it in
    elif not isinstance(name, str) or not name:
        out.append(f"a {what} without metadata.name; the API server needs a name (a DNS-1123 subdomain)")
    if isinstance(name, str) and name:
        limit = next((n for (api, k), n in _NAME_MAX.items() if k == kind and str(obj.get("apiVersion", "")).startswith(api)), 253)
        if len(name) > limit or not _DNS_SUBDOMAIN.fullmatch(name):
            out.append(f"{what} metadata.name {one_line(name)[:40]!r}{'...' if len(name) > 40 else ''} ({len(name)} characters): "
                       f"a name of at most {limit} lowercase letters, digits, '-' and '.', starting and ending with a "
                       "letter or digit; the API server refuses it" + (
                           f" (a {kind}'s name ends up in a label value)" if limit < 253 else ""))
    ns = meta.get("namespace")
    if ns is not None and (not isinstance(ns, str) or len(ns) > 63 or not _DNS_LABEL.fullmatch(ns)):
        out.append(f"{what}: metadata.namespace {one_line(str(ns))[:40]!r} is not a namespace name (at most 63 "
                   "lowercase letters, digits and '-')")
    label = name if isinstance(name, str) and name else (
        str(meta.get("generateName")) + "*" if meta.get("generateName") else "(no name)")
    where_name = f"{kind}/{one_line(label)[:80]}"
    for path, pod in _pod_specs(obj):
        if not isinstance(pod, dict):
            continue
        for group in ("initContainers", "containers"):
            containers = pod.get(group)
            for i, c in enumerate(containers if isinstance(containers, list) else []):
                if isinstance(c, dict):
                    out += _resources_problems(f"{where_name} {path}.{group}[{i}].resources", c.get("resources"))
    if kind == "TrainJob":
        out += _resources_problems(f"{where_name} spec.trainer.resourcesPerNode",
                                   _dig(obj.get("spec"), ("trainer", "resourcesPerNode")))
    return out


def job_object_problem(obj: dict[str, Any]) -> Optional[str]:
    """job_object_problems as one text (None: nothing preflight knows of): every problem, `; `-separated."""
    problems = job_object_problems(obj)
    return "; ".join(problems) if problems else None


def load_job_file(path: Path, shown: Optional[str] = None) -> list[dict[str, Any]]:
    """The Kubernetes objects of a job file (--job), or ChartError("example", ...) naming the file: not a
    regular file, larger than MAX_JOB_BYTES, not YAML objects, nested deeper than MAX_JOB_DEPTH, more than
    MAX_JOB_OBJECTS objects, or no object of a kind the fit check runs (JOB_KINDS)."""
    import stat

    shown = shown or shown_path(path)
    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise ChartError("example", f"{shown} is {'a directory' if stat.S_ISDIR(mode) else 'not a regular file (a device, pipe or socket)'}; "
                                        "give a YAML file of Kubernetes objects")
        with open(path, "rb") as f:
            data = f.read(MAX_JOB_BYTES + 1)
    except OSError as exc:
        raise ChartError("example", f"{shown} cannot be read: {exc.strerror or exc}") from None
    if len(data) > MAX_JOB_BYTES:
        raise ChartError("example", f"{shown} is larger than {MAX_JOB_BYTES // 1024} KiB: a job file holds a job "
                                    "and what it needs; give one job at a time")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ChartError("example", f"{shown} is not UTF-8 text (byte {exc.start})") from None
    if len(_DOC_SEPARATOR.findall(text)) > 4 * MAX_JOB_OBJECTS:  # before parsing thousands of documents
        raise ChartError("example", f"{shown} holds more than {MAX_JOB_OBJECTS} Kubernetes objects (the most "
                                    "preflight checks from one --job file); give one job at a time")
    objs = _load_docs(text, "example", shown)
    if not objs:
        raise ChartError("example", f"{shown} holds no Kubernetes object; give a job to check: {JOB_KINDS_TEXT}")
    if len(objs) > MAX_JOB_OBJECTS:
        raise ChartError("example", f"{shown} holds more than {MAX_JOB_OBJECTS} Kubernetes objects ({len(objs)}; "
                                    f"{MAX_JOB_OBJECTS} is the most preflight checks from one --job file); "
                                    "give one job at a time")
    for obj in objs:
        if nested_deeper_than(obj, MAX_JOB_DEPTH):
            raise ChartError("example", f"{shown}: {obj.get('kind')} is nested deeper than {MAX_JOB_DEPTH} levels: "
                                        "not a Kubernetes object")
        if not isinstance(obj.get("kind"), str) or not isinstance(obj.get("apiVersion"), str):
            raise ChartError("example", f"{shown} holds something that is not a Kubernetes object (apiVersion and "
                                        "kind must be strings)")
    # Every problem of every object in one run: fixing one and running again to meet the next is what a
    # reviewer of the job file should not have to do.
    problems = [p for obj in objs for p in job_object_problems(obj)]
    if problems:
        many = f"{len(problems)} problems: " if len(problems) > 1 else ""
        raise ChartError("example", f"{shown}: {many}" + "; ".join(problems))
    if not any(is_job_kind(o) for o in objs):
        found = ", ".join(sorted({f"{o['kind']} ({o['apiVersion']})" for o in objs}))
        raise ChartError("example", f"{shown} holds no job preflight can check: {found}; the kinds it checks are "
                                    f"{JOB_KINDS_TEXT}")
    return objs


# ---------------------------------------------------------------------------------------------
# Kustomize
# ---------------------------------------------------------------------------------------------



def _project_root(base: Optional[Path]) -> Path:
    """`base`, or the working directory's project folder (where the program runs)."""
    if base is not None:
        return base
    from gpu_platform.project import find_project

    return find_project().root


def load_kustomize(target: str, release: str, chart_dirs: list[Path], base: Optional[Path] = None,
                   texts: Optional[list] = None) -> list[dict[str, Any]]:
    """A remote target from the pre-built YAML, or a local kustomization (resources + patches); a local
    path is relative to `base` (default: the project's folder, where the program runs)."""
    fname = kustomize_file_name(target)
    if fname is not None:
        for d in chart_dirs:
            if (d / "kustomize" / fname).exists():
                return _load_docs((d / "kustomize" / fname).read_text(), release, fname, texts)
        searched = ", ".join(str(d / "kustomize") for d in chart_dirs)
        raise ChartError(release, f"kustomize target {target} ({fname}) is in none of: {searched}")
    local = (_project_root(base) / target).resolve()
    kfile = next((local / n for n in ("kustomization.yaml", "kustomization.yml", "Kustomization") if (local / n).exists()), None)
    if kfile is None:
        raise ChartError(release, f"kustomize directory {target} is neither a pinned remote target nor a local kustomization")
    from gpu_platform.preflight.fit.kustomize import build

    return build(kfile, release, lambda t, tx: load_kustomize(t, release, chart_dirs, local, texts=tx), texts)


# ---------------------------------------------------------------------------------------------
# The plan -> rendered releases
# ---------------------------------------------------------------------------------------------


def _crd_scopes(objects: Iterable[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(group, kind) -> Namespaced | Cluster, from the CRDs among `objects`."""
    out = {}
    for o in objects:
        if o.get("kind") == "CustomResourceDefinition" and isinstance(o.get("spec"), dict):
            spec = o["spec"]
            out[(spec.get("group", ""), (spec.get("names") or {}).get("kind", ""))] = spec.get("scope", "Namespaced")
    return out


def crd_api_versions(objects: Iterable[dict[str, Any]]) -> list[str]:
    """`group/version` and `group/version/Kind` of every served CRD version (Helm's APIVersions forms)."""
    out = set()
    for o in objects:
        if o.get("kind") != "CustomResourceDefinition" or not isinstance(o.get("spec"), dict):
            continue
        spec = o["spec"]
        for v in spec.get("versions") or []:
            if v.get("served", True):
                gv = f"{spec.get('group')}/{v.get('name')}"
                out.update((gv, f"{gv}/{(spec.get('names') or {}).get('kind')}"))
    return sorted(out)


def _namespaced(obj: dict[str, Any], scopes: dict[tuple[str, str], str]) -> bool:
    group = obj.get("apiVersion", "").rpartition("/")[0]
    scope = scopes.get((group, obj.get("kind", "")))
    if scope is not None:
        return scope == "Namespaced"
    return obj.get("kind") not in CLUSTER_SCOPED_KINDS


def fill_namespaces(objects: list[dict[str, Any]], namespace: Optional[str], scopes) -> set[int]:
    """kubectl/Helm semantics: a namespaced object without one goes to the release's (or `default`);
    a cluster-scoped one loses a namespace it names. Returns the indexes of the objects changed."""
    changed = set()
    for i, o in enumerate(objects):
        if not isinstance(o.get("metadata"), dict):
            o["metadata"] = {}
            changed.add(i)
        meta = o["metadata"]
        if _namespaced(o, scopes):
            if not meta.get("namespace"):
                meta["namespace"] = namespace or "default"
                changed.add(i)
        elif "namespace" in meta:
            del meta["namespace"]
            changed.add(i)
    return changed


# A kubernetes.io/dockerconfigjson Secret's stand-in (the API server refuses one whose .dockerconfigjson is not
# a JSON document: core validation ValidateSecret): a registry login that names no real registry or password.
DOCKERCONFIG_STAND_IN = json.dumps({"auths": {"preflight.invalid": {
    "username": "preflight", "password": SECRET_PLACEHOLDER,
    "auth": base64.b64encode(f"preflight:{SECRET_PLACEHOLDER}".encode()).decode()}}})


def _plain_object(r: PlannedResource) -> dict[str, Any]:
    """A typed Kubernetes resource's inputs are the object; fill apiVersion/kind and the autoname. Whole numbers
    are integers, as pulumi-kubernetes sends them (the engine's wire form carries every number as a double:
    `runAsUser: 65532.0` is what a checker would otherwise read)."""
    obj = whole_numbers(plain_values(r.wire_inputs))
    api_kind = r.type.split(":", 1)[1]  # `core/v1:ConfigMap`
    group_version, kind = api_kind.rsplit(":", 1)
    obj.setdefault("apiVersion", group_version[len("core/"):] if group_version.startswith("core/") else group_version)
    obj.setdefault("kind", kind)
    meta = obj.setdefault("metadata", {})
    if not meta.get("name"):
        meta["name"] = _auto_name(r.name, r.urn)
    return obj


def render_plan(plan: Plan, chart_dirs: list[Path], *, kubernetes_version: Optional[str] = None,
                allow_missing: Iterable[str] = (), example: Optional[Path] = EXAMPLE_TRAINJOB,
                cache_dir: Optional[Path] = None, base: Optional[Path] = None) -> list[RenderedRelease]:
    """Every release the program registers, rendered. `kubernetes_version` ("1.33") sets Helm's
    capabilities; `allow_missing` names charts (chart name) whose absence is reported as not rendered
    instead of failing. `cache_dir` keeps parsed big documents and the charts' renders between runs
    (content-addressed; the renders within RENDER_DISK_BYTES).
    `base`: the project's folder (default: the working directory's project), against which local
    kustomize paths and a relative `example` (jobs checked for queue fit; skipped when absent) resolve."""
    try:
        import helm_python  # noqa: F401  (loads Helm's native library)
    except Exception as exc:  # noqa: BLE001 ImportError, or helm-c's HelmLibraryError
        raise ChartError("(none rendered)", f"Helm's SDK is not usable: {exc}; install it with "
                                            "`pip install -r requirements.txt` (helm-python-sdk)") from None
    cache_dir = private_folder(cache_dir)
    _CACHE_DIR[0] = cache_dir
    base = _project_root(base)
    chart_dirs = [Path(d) for d in chart_dirs]
    allow = set(allow_missing)
    deps = _Deps(plan)
    kube_version = f"v{kubernetes_version}.0" if kubernetes_version and kubernetes_version.count(".") == 1 else (
        f"v{kubernetes_version}" if kubernetes_version else None)
    releases: list[RenderedRelease] = []
    helm: list[tuple[RenderedRelease, Any, dict[str, Any]]] = []
    manifest_groups: dict[str, RenderedRelease] = {}
    patches: list[tuple[str, dict[str, Any]]] = []  # (resource name, patch)

    for r in plan.resources:
        if r.type.startswith("kubernetes:") and r.type.endswith(PATCH_SUFFIX) and r.custom:
            obj = _plain_object(r)  # the SDK sets the patched kind (Deployment), not DeploymentPatch
            obj["kind"] = obj["kind"].removesuffix(PATCH_SUFFIX)
            patches.append((r.name, obj))
        elif r.type == RELEASE_TYPE:
            inputs = r.plain_inputs
            name = inputs.get("name") or _auto_name(r.name, r.urn)
            chart, version = inputs.get("chart"), inputs.get("version")
            namespace = inputs.get("namespace") or "default"
            if not chart or not version:
                raise ChartError(name, f"Release {r.name} names no chart and version (chart={chart!r}, version={version!r})")
            # A local archive ($GPU_PLATFORM_LOCAL_CHARTS) is rendered as it is and reported by its chart's name,
            # which is what the rest of preflight (and the rehearsal) recognises a release by.
            short = chart_name(chart, version)
            rel = RenderedRelease(name, r.name, r.urn, "helm", short if local_chart_archive(chart) else chart, version,
                                  namespace, [], deps.of(deps.direct(r)))
            path = find_chart(chart, version, chart_dirs)
            if path is None:
                if short in allow or name in allow:
                    rel.rendered = False
                    releases.append(rel)
                    continue
                searched = ", ".join(shown_path(d) for d in chart_dirs) or "(no chart directory)"
                raise ChartError(name, f"chart {chart} {version} ({chart_file_name(chart, version)}) is in none of the "
                                       f"chart directories: {searched}; fill one with `python -m gpu_platform.preflight charts pull`")
            import helm_python

            try:
                helm_python.validate_release_name(name)
            except helm_python.HelmError as exc:
                raise ChartError(name, f"not a valid Helm release name: {exc}") from None
            info = chart_info(path, name)
            if (info.name, info.version) != (short, version):
                raise ChartError(name, f"{path} holds chart {info.name} {info.version}, not {chart} {version}")
            helm.append((rel, info, plain_values(r.wire_inputs.get("values") or {})))
            releases.append(rel)
        elif r.type in KUSTOMIZE_TYPES:
            inputs = r.plain_inputs
            target = inputs.get("directory") or ""
            texts: list[Optional[str]] = []
            objs = load_kustomize(target, r.name, chart_dirs, base, texts=texts)
            rel = RenderedRelease(r.name, r.name, r.urn, "kustomize", target, None, inputs.get("namespace"),
                                  objs, deps.of(deps.direct(r)), texts=texts)
            releases.append(rel)
        elif r.type == ADDON_TYPE:
            from gpu_platform.data.eks_addon_pods import NAMESPACE as ADDON_NAMESPACE, addon_objects

            inputs = r.plain_inputs
            try:
                configuration = json.loads(inputs.get("configurationValues") or "{}")
            except (TypeError, ValueError):
                configuration = {}
            objs = addon_objects(str(inputs.get("addonName")), configuration if isinstance(configuration, dict) else {})
            if objs:
                releases.append(RenderedRelease(f"eks-addon-{inputs.get('addonName')}", r.name, r.urn, "addon",
                                                inputs.get("addonName"), inputs.get("addonVersion"), ADDON_NAMESPACE,
                                                objs, deps.of(deps.direct(r))))
        elif r.type.startswith("kubernetes:") and r.type not in NOT_OBJECTS and r.custom:
            parent = deps.by_urn.get(r.parent) if r.parent else None
            key = parent.urn if parent is not None and not parent.custom else r.urn
            group = manifest_groups.get(key)
            if group is None:
                owner = parent if key != r.urn else r
                group = RenderedRelease(owner.name, owner.name, owner.urn, "manifest", None, None, None, [], frozenset())
                manifest_groups[key] = group
                releases.append(group)
            group.objects.append(_plain_object(r))
            group.depends_on = group.depends_on | deps.of(deps.direct(r))

    example = base / example if example is not None else None
    if example is not None and example.exists():
        objs = load_job_file(example, shown_path(example.relative_to(base) if example.is_relative_to(base) else example))
        releases.append(RenderedRelease(example.stem, example.stem, f"file:{example.name}", "example", None, None,
                                        EXAMPLE_NAMESPACE, objs, frozenset()))

    # Capabilities: Kubernetes' own API versions (Helm's defaults) plus every CRD the plan installs.
    static = [o for rel in releases for o in rel.objects]
    charts_crds = [o for _, info, _ in helm for _, objs, _ in info.crds for o in objs]
    api_versions = crd_api_versions(static + charts_crds)
    for rel, info, values in helm:
        rel.objects, rel.texts = render_chart(info, rel.name, values, rel.namespace, kube_version, api_versions,
                                              cache_dir)
        if info.name in VALUES_NEEDED:
            rel.values = coalesced_values(info, values)
    rendered_crds = [o for rel, _, _ in helm for o in rel.objects]
    extra = sorted(set(crd_api_versions(rendered_crds)) - set(api_versions))
    if extra:  # CRDs rendered from templates (not crds/): render again the charts that ask for them
        api_versions = sorted(set(api_versions) | set(extra))
        for rel, info, values in helm:
            if info.api_version_queries is None or set(info.api_version_queries) & set(extra):
                rel.objects, rel.texts = render_chart(info, rel.name, values, rel.namespace, kube_version,
                                                      api_versions, cache_dir)

    if cache_dir is not None and helm:
        prune_renders(cache_dir)
    apply_patch_resources(releases, patches)
    # The program registers resources concurrently: order what it registered by identity, not by arrival.
    for group in manifest_groups.values():
        group.objects.sort(key=lambda o: (o["apiVersion"], o["kind"], o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    releases.sort(key=lambda r: (SOURCES.index(r.source), r.name, r.namespace or ""))
    scopes = _crd_scopes(o for rel in releases for o in rel.objects)
    for rel in releases:
        changed = fill_namespaces(rel.objects, rel.namespace, scopes)
        for i, obj in enumerate(rel.objects):
            if mask_secret(obj):
                changed.add(i)
        if len(rel.texts) == len(rel.objects):
            for i in changed:
                rel.texts[i] = None
    return releases


def apply_patch_resources(releases: list[RenderedRelease], patches: list[tuple[str, dict[str, Any]]]) -> None:
    """Fold each (name, patch) into the one rendered object it names (kind, namespace, name), as the API
    server's server-side apply would merge it; a patch naming no rendered object is an error (the real one
    would fail at `pulumi up`: the object does not exist), unless a chart allowed to be missing may hold it."""
    from gpu_platform.preflight.fit.kustomize import strategic_merge

    for name, patch in patches:
        meta = patch.get("metadata") or {}
        key = (patch.get("apiVersion"), patch.get("kind"), meta.get("namespace") or "default", meta.get("name"))
        hits = [(rel, i) for rel in releases if rel.rendered for i, o in enumerate(rel.objects)
                if (o.get("apiVersion"), o.get("kind"), (o.get("metadata") or {}).get("namespace") or rel.namespace
                    or "default", (o.get("metadata") or {}).get("name")) == key]
        if not hits:
            if any(not rel.rendered for rel in releases):  # perhaps in a chart allowed to be missing
                continue
            raise ChartError(name, f"{patch.get('kind')}Patch {key[2]}/{key[3]} patches an object no rendered release creates")
        body = {k: v for k, v in patch.items() if k not in ("apiVersion", "kind")}
        body["metadata"] = {k: v for k, v in meta.items() if k in ("labels", "annotations")}
        for rel, i in hits:
            rel.objects[i] = strategic_merge(rel.objects[i], body)
            if len(rel.texts) == len(rel.objects):
                rel.texts[i] = None


_MASKED = base64.b64encode(SECRET_PLACEHOLDER.encode()).decode()


def mask_secret(obj: dict[str, Any]) -> bool:
    """Secret values never reach rendered files (charts also generate random ones, e.g. JupyterHub's
    cookie secret, which would make every render differ): keys are kept, values replaced; the same
    for checksum annotations."""
    # Pod-template `checksum/*` annotations only roll pods when config changes; JupyterHub's hash the
    # random secrets, so a stable stand-in keeps the rendered files comparable between runs.
    changed = False
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
    for meta in (obj.get("metadata"), template.get("metadata")):
        annotations = meta.get("annotations") if isinstance(meta, dict) else None
        if isinstance(annotations, dict):
            for k in annotations:
                if k.startswith("checksum/"):
                    annotations[k] = "preflight-checksum"
                    changed = True
    if obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1":
        # An image pull Secret's document must stay JSON (the API server refuses it otherwise).
        pull = {".dockerconfigjson": DOCKERCONFIG_STAND_IN} if obj.get("type") == "kubernetes.io/dockerconfigjson" else {}
        for key, stand_in in (("data", _MASKED), ("stringData", SECRET_PLACEHOLDER)):
            if isinstance(obj.get(key), dict) and obj[key]:
                obj[key] = {k: (base64.b64encode(pull[k].encode()).decode() if key == "data" else pull[k])
                            if k in pull else stand_in for k in obj[key]}
                changed = True
    return changed


def release_file_names(releases: list[RenderedRelease]) -> dict[str, RenderedRelease]:
    """`<release>.yaml`, or `<namespace>.<release>.yaml` where two releases share a name."""
    counts: dict[str, int] = {}
    for rel in releases:
        counts[rel.name] = counts.get(rel.name, 0) + 1
    out = {}
    for rel in releases:
        fname = f"{rel.name}.yaml" if counts[rel.name] == 1 else f"{rel.namespace or 'cluster'}.{rel.name}.yaml"
        out[fname] = rel
    return out


def write_rendered(releases: list[RenderedRelease], out_dir: Path) -> list[Path]:
    """build/<stack>/rendered/<release>.yaml, objects in render order; stale files removed."""
    out_dir.mkdir(parents=True, exist_ok=True)
    names = release_file_names(releases)
    for stale in out_dir.glob("*.yaml"):
        if stale.name not in names:
            stale.unlink()
    written = []
    for fname, rel in sorted(names.items()):
        path = out_dir / fname
        header = f"# {rel.source} release {rel.name}" + (f" ({rel.chart} {rel.version})" if rel.chart else "")
        if not rel.rendered:
            header += " NOT RENDERED: chart missing (--allow-missing-chart)"
        path.write_text(header + "\n" + rel.to_yaml())
        written.append(path)
    return written
