"""Cilium's CustomResourceDefinitions for stacks that install Cilium.

No chart renders them: cilium-operator registers them when it starts, from YAML embedded in its Go code
(github.com/cilium/cilium pkg/k8s/apis/cilium.io/client.CreateCustomResourceDefinitions). Nothing runs
Cilium in the rehearsal, so `make rehearsal-build` builds, per pinned Cilium chart, a small program that
calls that function of github.com/cilium/cilium at the chart's version (rehearsal/go/cilium-crds-<version>)
and prints the CRDs it made. The rehearsal applies them before the platform's objects, so the API server
validates the platform's Cilium objects (the metadata deny policy) against Cilium's own schema."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Optional

from gpu_platform.rehearsal import binaries

CHART = "cilium"
MODULE = "github.com/cilium/cilium"
GROUP = "cilium.io"
# The program waits, as the operator does, for each CRD to be Established (Cilium's poller: 0.5 s each).
TIMEOUT = 120.0


class CiliumCrdsError(Exception):
    """The CRD program failed or printed something that is not a List of cilium.io CRDs."""


def cilium_release(releases: list[Any]) -> Optional[Any]:
    """The rendered Cilium Helm release, if the stack installs Cilium."""
    return next((r for r in releases if r.source == "helm" and r.chart == CHART and r.rendered), None)


def binary_name(chart_version: str) -> str:
    return f"cilium-crds-{chart_version.lstrip('v')}"


def source(chart_version: str) -> str:
    """Where the CRDs come from, for the report."""
    return (f"{MODULE}@v{chart_version.lstrip('v')} pkg/k8s/apis/cilium.io/client.CreateCustomResourceDefinitions "
            f"(what cilium-operator registers at start), built as {binary_name(chart_version)}")


def parse(text: str, name: str) -> list[dict[str, Any]]:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise CiliumCrdsError(f"{name} printed no JSON: {exc}") from None
    items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
    if not items:
        raise CiliumCrdsError(f"{name} printed no List of CustomResourceDefinitions")
    for item in items:
        if item.get("kind") != "CustomResourceDefinition" or (item.get("spec") or {}).get("group") != GROUP:
            raise CiliumCrdsError(f"{name} printed {item.get('kind')} {(item.get('metadata') or {}).get('name')}, "
                                  f"not a {GROUP} CustomResourceDefinition")
    return items


def operator_crds(chart_version: str, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """The CRDs cilium-operator of `chart_version` registers (raises binaries.MissingBinaries when its
    program is not built, CiliumCrdsError when it fails)."""
    name = binary_name(chart_version)
    path = binaries.find(name)
    if path is None:
        raise binaries.MissingBinaries([name])
    try:
        proc = subprocess.run([str(path)], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CiliumCrdsError(f"{name} did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise CiliumCrdsError(f"{name} exited with code {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return parse(proc.stdout, name)
