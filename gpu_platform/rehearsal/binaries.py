"""Where the rehearsal finds the Kubernetes components: built from pinned Go modules by
`make rehearsal-build` into `$GPU_PLATFORM_REHEARSAL_CACHE/bin` (default ~/.cache/gpu-platform/rehearsal/bin),
with bin/VERSIONS.json naming the module and version of each. Nothing is downloaded here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional

CACHE_ENV = "GPU_PLATFORM_REHEARSAL_CACHE"
# Without these there is no cluster to rehearse on.
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# The platform's controllers: one missing is rehearsed without (its webhooks removed, reported NOT REHEARSED).
CONTROLLERS = ("kueue-manager", "jobset-manager", "trainer-manager", "prometheus-operator")
# The real Pulumi engine (`--engine pulumi`, engine.py): the CLI, its Python language host, the Kubernetes provider.
ENGINE = ("pulumi", "pulumi-language-python", "pulumi-resource-kubernetes")
BUILD_COMMAND = "make rehearsal-build"


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "gpu-platform" / "rehearsal"


def bin_dir() -> Path:
    return cache_dir() / "bin"


def find(name: str) -> Optional[Path]:
    path = bin_dir() / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def missing(names=CONTROL_PLANE) -> list[str]:
    return [n for n in names if find(n) is None]


def versions() -> dict[str, dict]:
    """bin/VERSIONS.json: {name: {module, version, package}}; {} when absent or unreadable."""
    try:
        doc = json.loads((bin_dir() / "VERSIONS.json").read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


class MissingBinaries(Exception):
    def __init__(self, names: list[str]):
        self.names = list(names)
        super().__init__(f"rehearsal: component(s) not built: {', '.join(names)} (looked in {bin_dir()}); "
                         f"build them from their pinned Go modules with `{BUILD_COMMAND}` "
                         f"(or point ${CACHE_ENV} at a cache that has bin/)")


def require_control_plane() -> dict[str, Path]:
    gone = missing(CONTROL_PLANE)
    if gone:
        raise MissingBinaries(gone)
    return {n: find(n) for n in CONTROL_PLANE}  # type: ignore[misc]
