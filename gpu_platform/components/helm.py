"""Pinned Helm charts and the one way this project installs them (Linode add-ons, the ML platform)."""

from __future__ import annotations

from typing import Any, Optional

import pulumi

from gpu_platform.data.chart import Chart


def helm_release(name: str, chart: Chart, namespace: str, values: Any, opts: pulumi.ResourceOptions, *,
                 release_name: Optional[str] = None, create_namespace: bool = False, atomic: bool = False,
                 timeout_s: int = 900) -> Any:
    """A helm.v3.Release of a pinned chart (v3.Release, not v4.Chart: several charts rely on Helm hooks
    and `helm upgrade` semantics). Failed installs are cleaned up and history is bounded."""
    import pulumi_kubernetes as k8s

    return k8s.helm.v3.Release(
        name,
        name=release_name,
        chart=chart.chart,
        version=chart.version,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo) if chart.repo else None,
        namespace=namespace,
        create_namespace=create_namespace,
        values=values,
        atomic=atomic,
        cleanup_on_fail=True,
        max_history=5,
        timeout=timeout_s,
        opts=opts,
    )
