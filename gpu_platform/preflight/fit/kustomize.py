"""The part of `kustomize build` a local overlay in this repository uses: `resources` (pinned remote
targets or local YAML files), `namespace`, and `patches` / `patchesStrategicMerge` /
`patchesJson6902` (strategic merge incl. `$patch: delete|replace`, and RFC 6902 JSON patches).

Anything else in a kustomization is refused with a clear error rather than silently ignored.
Semantics follow the kustomize docs (kubectl.docs.kubernetes.io, "patches") and the Kubernetes
strategic-merge-patch conventions (lists of named items merge by `name`).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Callable, Optional

import yaml

from gpu_platform.preflight.fit.errors import ChartError
from gpu_platform.preflight.fit.yaml_text import python_yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "patches", "patchesStrategicMerge", "patchesJson6902"}
# Merge keys of the lists a platform patch touches (Kubernetes' patchMergeKey for these fields).
MERGE_KEYS = {"containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
              "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name", "args": None}


def _parse(text: str, where: Any, release: str, *, documents: bool = False) -> Any:
    """A kustomization, resource file or patch as data (`documents`: every non-empty document of a stream); one that
    does not parse is a ChartError naming it. PyYAML's pure-Python parser on purpose: libyaml's recurses in C and
    crashes the process on text nested some 50,000 levels deep, where this one raises RecursionError."""
    try:
        return [d for d in python_yaml(text, documents=True) if d] if documents else python_yaml(text)
    except RecursionError:
        raise ChartError(release, f"{where} is nested too deeply to read (thousands of levels)") from None
    except yaml.MarkedYAMLError as exc:  # where and what only: PyYAML's own text quotes the line (a token in a patch)
        mark = exc.problem_mark or exc.context_mark
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise ChartError(release, f"{where} is not valid YAML ({at}{exc.problem or exc.context})") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: a date out of range
        raise ChartError(release, f"{where} is not valid YAML ({type(exc).__name__}: {exc})") from None


def build(kfile: Path, release: str, load_remote: Callable[[str, list], list[dict[str, Any]]],
          texts: Optional[list] = None) -> list[dict[str, Any]]:
    """The overlay's objects; `texts` gets each one's source YAML where no patch changed it (else None).
    `load_remote(target, texts)` returns freshly parsed objects of a pinned remote target."""
    doc = _parse(kfile.read_text(), kfile, release) or {}
    unknown = sorted(set(doc) - SUPPORTED)
    if unknown:
        raise ChartError(release, f"{kfile}: kustomization fields {unknown} are not supported by preflight (supported: {sorted(SUPPORTED)})")
    objects: list[dict[str, Any]] = []
    sources: list[Optional[str]] = []
    for res in doc.get("resources") or []:
        local = kfile.parent / res
        if local.is_file():
            loaded = _parse(local.read_text(), local, release, documents=True)
            objects.extend(loaded)
            sources.extend([None] * len(loaded))
        else:
            res_texts: list = []
            loaded = load_remote(res, res_texts)
            objects.extend(loaded)
            sources.extend(res_texts if len(res_texts) == len(loaded) else [None] * len(loaded))
    source_of = {id(o): t for o, t in zip(objects, sources)}
    touched: set[int] = set()

    patches: list[tuple[Any, dict[str, Any] | None]] = []  # (patch body, target selector)
    inline = f"{kfile} (an inline patch)"

    def patch_of(entry: dict) -> Any:
        """A `patches` or `patchesJson6902` entry's patch: inline, or the file its `path` names."""
        if "patch" in entry:
            return _parse(entry["patch"], inline, release)
        return _parse((kfile.parent / entry["path"]).read_text(), kfile.parent / entry["path"], release)

    for p in doc.get("patches") or []:
        patches.append((patch_of(p), p.get("target")))
    for p in doc.get("patchesStrategicMerge") or []:
        path = kfile.parent / p
        patches.append((_parse(path.read_text(), path, release) if path.is_file() else _parse(p, inline, release), None))
    for p in doc.get("patchesJson6902") or []:
        patches.append((patch_of(p), p.get("target")))

    for body, target in patches:
        try:
            objects = apply_patch(objects, body, target, touched)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ChartError(release, f"{kfile}: a patch does not apply: {exc}") from None
    if doc.get("namespace"):
        for o in objects:
            if o.get("kind") not in ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
                o.setdefault("metadata", {})["namespace"] = doc["namespace"]
                touched.add(id(o))
    if texts is not None:
        texts.extend(None if id(o) in touched else source_of.get(id(o)) for o in objects)
    return objects


def _matches(obj: dict[str, Any], target: dict[str, Any]) -> bool:
    meta = obj.get("metadata") or {}
    group, _, version = obj.get("apiVersion", "").rpartition("/")
    checks = {"kind": obj.get("kind"), "name": meta.get("name"), "namespace": meta.get("namespace"),
              "group": group, "version": version}
    for key, want in target.items():
        if key in checks and checks[key] != want:
            return False
        if key == "labelSelector":
            labels = meta.get("labels") or {}
            for term in str(want).split(","):
                k, _, v = term.partition("=")
                if labels.get(k.strip()) != v.strip():
                    return False
    return True


def apply_patch(objects: list[dict[str, Any]], body: Any, target: dict[str, Any] | None,
                touched: Optional[set[int]] = None) -> list[dict[str, Any]]:
    """Apply one patch in place (JSON 6902 list, or strategic merge); ids of changed objects go to `touched`."""
    touched = set() if touched is None else touched
    if isinstance(body, list):  # JSON 6902: applies to every object the target selects
        if not target:
            raise ValueError("a JSON 6902 patch needs a target")
        hits = [o for o in objects if _matches(o, target)]
        if not hits:
            raise ValueError(f"target {target} selects no object")
        for o in hits:
            json6902(o, body)
            touched.add(id(o))
        return objects
    # Strategic merge: the patch names its object (kind + metadata.name), a target may widen it.
    sel = dict(target or {})
    if not target:
        sel = {"kind": body["kind"], "name": body["metadata"]["name"]}
        if (body.get("metadata") or {}).get("namespace"):
            sel["namespace"] = body["metadata"]["namespace"]
    hits = [o for o in objects if _matches(o, sel)]
    if not hits:
        raise ValueError(f"{sel} selects no object")
    if body.get("$patch") == "delete":
        return [o for o in objects if not any(o is h for h in hits)]
    for o in hits:
        patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")} if target else body
        if target:  # a targeted patch must not rename the objects it selects
            patch = {**patch, "metadata": {k: v for k, v in (patch.get("metadata") or {}).items() if k != "name"}}
        merged = strategic_merge(o, patch)
        o.clear()
        o.update(merged)
        touched.add(id(o))
    return objects


def strategic_merge(base: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(patch, dict) and isinstance(base, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        out = dict(base)
        for k, v in patch.items():
            if k == "$patch":
                continue
            if v is None:
                out.pop(k, None)
            elif k in out:
                out[k] = strategic_merge(out[k], v, k)
            else:
                out[k] = _strip(v)
        return out
    if isinstance(patch, list) and isinstance(base, list):
        key = MERGE_KEYS.get(field or "", "name")
        if key is None or not all(isinstance(x, dict) and key in x for x in base + [p for p in patch if isinstance(p, dict) and p.get("$patch") != "replace"]):
            return _strip(patch)  # atomic list: replaced
        out = [copy.deepcopy(x) for x in base]
        for item in patch:
            if item.get("$patch") == "replace":
                return [_strip(x) for x in patch if x.get("$patch") != "replace"]
            idx = next((i for i, x in enumerate(out) if x.get(key) == item.get(key)), None)
            if item.get("$patch") == "delete":
                if idx is not None:
                    out.pop(idx)
            elif idx is None:
                out.append(_strip(item))
            else:
                out[idx] = strategic_merge(out[idx], item, field)
        return out
    return _strip(patch)


def _strip(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if k != "$patch"}
    if isinstance(v, list):
        return [_strip(x) for x in v]
    return copy.deepcopy(v)


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ValueError(f"JSON pointer {path!r} must start with /")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> tuple[Any, str]:
    node = doc
    for p in parts[:-1]:
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node, parts[-1]


def json6902(doc: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """RFC 6902 add/remove/replace/move/copy/test, in place."""
    for op in ops:
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "test":
            node = doc
            for p in parts:
                node = node[int(p)] if isinstance(node, list) else node[p]
            if node != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
            continue
        if kind in ("move", "copy"):
            src_parent, src_key = _parent(doc, _pointer(op["from"]))
            value = src_parent[int(src_key)] if isinstance(src_parent, list) else src_parent[src_key]
            value = copy.deepcopy(value)
            if kind == "move":
                json6902(doc, [{"op": "remove", "path": op["from"]}])
            json6902(doc, [{"op": "add", "path": op["path"], "value": value}])
            continue
        parent, key = _parent(doc, parts)
        if kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(key))
            else:
                del parent[key]
        elif kind in ("add", "replace"):
            value = copy.deepcopy(op["value"])
            if isinstance(parent, list):
                if kind == "replace":
                    parent[int(key)] = value
                elif key == "-":
                    parent.append(value)
                else:
                    parent.insert(int(key), value)
            else:
                if kind == "replace" and key not in parent:
                    raise KeyError(f"replace of missing {op['path']}")
                parent[key] = value
        else:
            raise ValueError(f"unknown JSON patch op {kind!r}")
