"""Shared by the cluster-fit tests: each shipped stack planned and rendered once per test process."""

from __future__ import annotations

import functools
import pickle
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpu_platform.preflight.fit.pull import HOW_TO_FILL, missing_from, where_charts_come_from
from gpu_platform.preflight.fit.render import RenderedRelease, chart_file_name, find_chart, render_plan
from gpu_platform.preflight.fit.run import default_chart_dirs
from gpu_platform.preflight.runner import Plan, PlannedResource, load_stack
from tests.conftest import ROOT, shipped_plan

# Where preflight itself looks: $GPU_PLATFORM_CHARTS, else ../shared/charts (CI), else the user cache.
CHART_DIRS = default_chart_dirs(ROOT)
CHARTS = CHART_DIRS[0]
STACKS = ("linode-dev", "linode-ha", "gcp-prod", "aws-prod")
# ../shared/charts holds every pinned chart (the Linode CNIs included): shipped stacks render without
# --allow-missing-chart, which is tested with a chart folder that really lacks one.


def no_charts(what: str) -> str:
    """Why a chart test skips: what is missing, where it was looked for, how to fill a folder."""
    return (f"{what} not in {', '.join(map(str, CHART_DIRS))}. Looked in (the first present wins):\n"
            f"{where_charts_come_from(ROOT)}\n{HOW_TO_FILL}")


# CI sets it (.github/workflows/ci.yml, both test jobs, after `charts ensure`): there a missing chart is a failed
# pull, and a chart test that skipped would leave the gate weaker than it looks. Offline, the tests skip.
REQUIRE_CHARTS = "GPU_PLATFORM_REQUIRE_CHARTS"


def without_charts(why: str) -> None:
    """Skip with `why`, or fail with it where GPU_PLATFORM_REQUIRE_CHARTS=1 says the charts must be there."""
    import os

    if os.environ.get(REQUIRE_CHARTS) == "1":
        pytest.fail(f"{REQUIRE_CHARTS}=1 and a chart test lacks its charts: {why}", pytrace=False)
    pytest.skip(why)


def need_charts() -> None:
    """Skip (fail under GPU_PLATFORM_REQUIRE_CHARTS=1) unless the chart folder holds every pinned chart and
    kustomize install."""
    charts, targets = missing_from(CHART_DIRS)
    missing = [c.file_name for c in charts] + targets
    if missing:
        without_charts(no_charts(", ".join(missing)))


def chart_archive(chart: str, version: str) -> Path:
    """The pinned chart's archive from the chart folder, or a skip saying where it was looked for."""
    path = find_chart(chart, version, CHART_DIRS)
    if path is None:
        without_charts(no_charts(chart_file_name(chart, version)))
    return path


def stack_plan(stack: str) -> Plan:
    """The shipped stack's plan, shared within the test process (read it only; plan_stack gives a copy)."""
    import os

    return shipped_plan(stack, os.environ.get("GPU_PLATFORM_TODAY"))


@functools.lru_cache(maxsize=None)
def rendered(stack: str) -> tuple[RenderedRelease, ...]:
    from gpu_platform.config.stack import parse_config

    stack_input = load_stack(stack)
    cfg = parse_config(stack_input.raw, stack)
    return tuple(render_plan(stack_plan(stack), CHART_DIRS, kubernetes_version=cfg.kubernetes_version))


@functools.lru_cache(maxsize=None)
def _rendered_pickled(stack: str) -> bytes:
    return pickle.dumps(rendered(stack), protocol=pickle.HIGHEST_PROTOCOL)


def rendered_copy(stack: str) -> list[RenderedRelease]:
    """The stack's rendered releases (those that rendered), a copy of the caller's own to change: pickle's round trip
    of what rendered() keeps, a deep copy some six times faster than copy.deepcopy (the fit tests take dozens)."""
    return [r for r in pickle.loads(_rendered_pickled(stack)) if r.rendered]


def make_chart(root: Path, name: str, version: str, templates: dict[str, str], values: str = "",
               schema: str | None = None) -> Path:
    """A chart folder, packaged as NAME-VERSION.tgz into `root` with Helm's own packager."""
    import helm_python

    src = root / "src" / name
    (src / "templates").mkdir(parents=True, exist_ok=True)
    (src / "Chart.yaml").write_text(f"apiVersion: v2\nname: {name}\nversion: {version}\n")
    (src / "values.yaml").write_text(values)
    if schema is not None:
        (src / "values.schema.json").write_text(schema)
    for fname, text in templates.items():
        (src / "templates" / fname).write_text(textwrap.dedent(text))
    return Path(helm_python.package(src, destination=root))


def release_resource(name: str, chart: str, version: str, namespace: str, values: Any,
                     release_name: str | None = None, deps: tuple[str, ...] = (), parent: str | None = None) -> PlannedResource:
    """A helm.v3.Release as the recording monitor stores it (wire form inputs)."""
    inputs: dict[str, Any] = {"chart": chart, "version": version, "namespace": namespace, "values": values}
    if release_name:
        inputs["name"] = release_name
    return PlannedResource(
        urn=f"urn:pulumi:test::gpu-platform::kubernetes:helm.sh/v3:Release::{name}", type="kubernetes:helm.sh/v3:Release",
        name=name, parent=parent, custom=True, provider=None, dependencies=list(deps), wire_inputs=inputs)
