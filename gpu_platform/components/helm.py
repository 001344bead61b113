"""Pinned Helm charts and the one way this project installs them (Linode add-ons, the ML platform)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import pulumi

from gpu_platform.data.chart import Chart, kustomize_file_name
from gpu_platform.project import python_m


# A folder of pinned chart archives (`NAME-VERSION.tgz`, what `python -m gpu_platform.preflight charts pull --dest
# DIR` writes): when set, every release installs its chart from there and no chart repository is contacted (an
# air-gapped cluster; the rehearsal's `pulumi up`). Unset: the charts come from their repositories, as before.
LOCAL_CHARTS_ENV = "GPU_PLATFORM_LOCAL_CHARTS"


def local_chart(chart: Chart) -> Optional[str]:
    """The archive of `chart` in $GPU_PLATFORM_LOCAL_CHARTS, or None when the variable is unset; a folder
    without it stops the program (pulumi.RunError, no traceback) naming the folder and the file."""
    folder = os.environ.get(LOCAL_CHARTS_ENV)
    if not folder:
        return None
    path = Path(folder) / chart.archive_name
    if not path.is_file():
        raise pulumi.RunError(f"${LOCAL_CHARTS_ENV} is {folder}, which has no {chart.archive_name} (chart {chart.chart} "
                              f"{chart.version}): fill it with `{python_m('gpu_platform.preflight')} charts pull --dest {folder}`, "
                              f"or unset {LOCAL_CHARTS_ENV} to install from the chart repositories")
    return str(path.resolve())


def claims_on(storage_class: str) -> dict:
    """A kustomize patch putting every PersistentVolumeClaim of an install on `storage_class` (RFC 6902 `add`
    replaces a class upstream set): the upstream manifests leave it unset, which on a cluster without a default
    StorageClass leaves the claim Pending and its database never starts."""
    return {"target": {"kind": "PersistentVolumeClaim"},
            "patch": json.dumps([{"op": "add", "path": "/spec/storageClassName", "value": storage_class}])}


def local_kustomize(overlay: Path, storage_class: Optional[str] = None) -> Optional[str]:
    """The kustomize overlay folder `overlay` as the program should pass it when $GPU_PLATFORM_LOCAL_CHARTS is set:
    the same kustomization with each pinned remote target (`github.com/...?ref=...`, which kustomize clones at
    `pulumi up`) replaced by the absolute path of its built YAML in the folder's `kustomize/` (what `preflight charts
    pull` writes there, REPO-REF-NAME.yaml), and with `storage_class` its claims on that class (claims_on), written
    to a folder named by its content under the user cache (~/.cache/gpu-platform/kustomize-overlays: the same path
    on every run, so a second `up` changes nothing). None when the variable is unset and no class is given (the
    overlay as shipped, its targets from GitHub). A target missing from the folder stops the program
    (pulumi.RunError, no traceback) naming the folder and the file."""
    folder = os.environ.get(LOCAL_CHARTS_ENV)
    if not folder and storage_class is None:
        return None
    kfile = Path(overlay) / "kustomization.yaml"
    text = kfile.read_text()
    for target in _remote_targets(text) if folder else ():
        fname = kustomize_file_name(target)
        if fname is None:
            continue
        built = Path(folder) / "kustomize" / fname
        if not built.is_file():
            raise pulumi.RunError(
                f"${LOCAL_CHARTS_ENV} is {folder}, which has no kustomize/{fname} (the kustomize target {target} of "
                f"{kfile}): fill it with `{python_m('gpu_platform.preflight')} charts pull --dest {folder}`, or unset "
                f"{LOCAL_CHARTS_ENV} to fetch it from GitHub")
        text = text.replace(target, str(built.resolve()))
    if storage_class is not None:
        text = _with_claims_on(text, storage_class)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-platform" / "kustomize-overlays"
    dest = base / f"{Path(overlay).name}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if not (dest / "kustomization.yaml").is_file() or (dest / "kustomization.yaml").read_text() != text:
        dest.mkdir(parents=True, exist_ok=True, mode=0o700)
        with tempfile.NamedTemporaryFile("w", dir=dest, delete=False, suffix=".tmp") as tmp:
            tmp.write(text)
        os.replace(tmp.name, dest / "kustomization.yaml")  # whole or not at all: two programs may write it at once
    return str(dest)


# The overlays are the package's own files, the same text in every run of the program: parsed and written once per
# process (PyYAML's parser and emitter were 4 % of a program run under preflight). Written by PyYAML's own emitter
# still: the text names the folder, which a second `up` must find unchanged.
def _parsed(text: str) -> Any:
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.lru_cache(maxsize=64)
def _remote_targets(text: str) -> tuple[str, ...]:
    return tuple((_parsed(text) or {}).get("resources") or ())


@functools.lru_cache(maxsize=64)
def _with_claims_on(text: str, storage_class: str) -> str:
    import yaml

    doc = _parsed(text)
    doc["patches"] = [*(doc.get("patches") or []), claims_on(storage_class)]
    return yaml.safe_dump(doc, sort_keys=False)


def helm_release(name: str, chart: Chart, namespace: str, values: Any, opts: pulumi.ResourceOptions, *,
                 release_name: Optional[str] = None, create_namespace: bool = False, atomic: bool = False,
                 timeout_s: int = 900) -> Any:
    """A helm.v3.Release of a pinned chart (v3.Release, not v4.Chart: several charts rely on Helm hooks
    and `helm upgrade` semantics). Failed installs are cleaned up and history is bounded."""
    import pulumi_kubernetes as k8s

    local = local_chart(chart)
    return k8s.helm.v3.Release(
        name,
        name=release_name,
        chart=local or chart.chart,
        version=chart.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo and not local else None,
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        atomic=atomic,
        cleanup_on_fail=True,
        max_history=5,
        timeout=timeout_s,
        opts=opts,
    )
