"""Pinned Helm charts and the one way this project installs them (Linode add-ons, the ML platform)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import pulumi

from gpu_platform.data.chart import Chart


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
                              f"{chart.version}): fill it with `python -m gpu_platform.preflight charts pull --dest {folder}`, "
                              f"or unset {LOCAL_CHARTS_ENV} to install from the chart repositories")
    return str(path.resolve())


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
