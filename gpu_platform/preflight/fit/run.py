"""Preflight's cluster-fit step: render the plan, model the nodes, check the fit, write the results.

Runs in a worker thread started as soon as the plan exists, so that Helm rendering (native code in
helm-c, which releases the GIL) overlaps the policy pack's analysis in the main thread.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

CHARTS_ENV = "GPU_PLATFORM_CHARTS"
# The folder preflight keeps parsed chart files and renders in (default: `.cache/parsed-yaml` beside the stacks'
# output folders, `build/.cache/parsed-yaml`): one folder for many output folders, as a test session's preflights.
CACHE_ENV = "GPU_PLATFORM_PREFLIGHT_CACHE"


def cache_folder(out: Path) -> Path:
    """Where a preflight writing to `out` keeps what it parsed and rendered for the next run."""
    return Path(os.environ.get(CACHE_ENV) or out.parent / ".cache" / "parsed-yaml")

# Where `charts pull` puts charts when not told otherwise, and where preflight looks last.
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "gpu-platform" / "charts"


def shared_chart_candidates(project_root: Path) -> list[Path]:
    """Where this repository's offline chart copy may be: ../shared/charts beside the project, and beside
    every folder above it up to the checkout holding it (the nearest with `.git`), so that a project inside
    the repository (`-C examples/team-gke`) finds the checkout's copy as the repository root does. Outside a
    checkout, only beside the project."""
    folders = [project_root]
    for parent in project_root.parents:
        if any((f / ".git").exists() for f in folders):
            break
        folders.append(parent)
    if not any((f / ".git").exists() for f in folders):
        folders = [project_root]
    return [f.parent / "shared" / "charts" for f in folders]


def default_chart_dirs(project_root: Optional[Path] = None) -> list[Path]:
    """$GPU_PLATFORM_CHARTS (os.pathsep-separated); else the checkout's ../shared/charts (this repository's
    offline copy, shared_chart_candidates) when it exists; else the user's cache (`charts pull`'s default)."""
    env = os.environ.get(CHARTS_ENV)
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    project_root = _project_root(project_root)
    if project_root is None:  # `charts pull` outside any project
        return [USER_CACHE]
    shared = next((c for c in shared_chart_candidates(project_root) if c.is_dir()), None)
    return [shared or USER_CACHE]


def searched_chart_dirs(project_root: Optional[Path] = None) -> list[tuple[str, Path]]:
    """(what, folder) for every place preflight looks for charts, in order: the text of a 'not found' error."""
    env = os.environ.get(CHARTS_ENV)
    if env:
        return [(f"${CHARTS_ENV}", Path(p)) for p in env.split(os.pathsep) if p]
    project_root = _project_root(project_root)
    found = [] if project_root is None else [("the checkout's shared folder", c)
                                             for c in shared_chart_candidates(project_root)]
    return found + [("the user cache", USER_CACHE)]


def _project_root(project_root: Optional[Path]) -> Optional[Path]:
    if project_root is not None:
        return project_root
    from gpu_platform.project import ProjectFileError, ProjectNotFound, find_project

    try:
        return find_project().root
    except (ProjectNotFound, ProjectFileError):
        return None


@dataclass
class FitResult:
    releases: list[Any]
    files: list[Path]
    report: Any  # gpu_platform.preflight.fit.checks.FitReport
    model: Any  # gpu_platform.preflight.fit.model.ClusterModel
    not_rendered: list[Any] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.report.problems)

    def render(self, verbose: int = 0) -> str:
        text = self.report.render(verbose)
        if self.not_rendered:
            lines = [f"  NOT RENDERED (chart missing, allowed by --allow-missing-chart): {r.name} "
                     f"({r.chart} {r.version}); its workloads are NOT checked" for r in self.not_rendered]
            text = text.rstrip("\n") + "\n" + "\n".join(lines)
        return text


class FitWorker:
    """render_plan + cluster_model + check_fit in a thread; `result()` joins and re-raises. `then`, if
    given, runs in the thread on the rendered releases once the charts are rendered and the node model
    is built, before the files are written and the fit checked (pricing the rendered storage starts
    the cost chart as early as possible); `then_result()`."""

    def __init__(self, cfg, plan, out: Path, chart_dirs: list[Path], allow_missing: list[str] = (),
                 then: Optional[Callable[[list[Any]], Any]] = None, **render_args: Any):
        self.cfg, self.plan, self.out, self.render_args = cfg, plan, out, render_args
        self.chart_dirs, self.allow_missing = chart_dirs, list(allow_missing)
        self._then = then
        self._then_value: Any = None
        self._then_error: Optional[BaseException] = None
        self._result: Optional[FitResult] = None
        self._error: Optional[BaseException] = None
        # Set once `then` has run on the rendered releases, or the run ended without getting there.
        self.rendered = threading.Event()
        self.thread = threading.Thread(target=self._run, name="cluster-fit", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._result = run_fit(self.cfg, self.plan, self.out, self.chart_dirs, self.allow_missing,
                                   on_rendered=self._run_then if self._then is not None else None, **self.render_args)
        except BaseException as exc:  # noqa: BLE001 re-raised in result()
            self._error = exc
        finally:
            self.rendered.set()

    def _run_then(self, releases: list[Any], idle: Optional[dict[str, int]] = None) -> None:
        try:
            self._then_value = self._then(releases, idle)
        except BaseException as exc:  # noqa: BLE001 re-raised in then_result(); the fit goes on
            self._then_error = exc
        finally:
            self.rendered.set()

    def then_result(self) -> Any:
        self.result()
        if self._then_error is not None:
            raise self._then_error
        return self._then_value

    def result(self) -> FitResult:
        self.thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def run_fit(cfg, plan, out: Path, chart_dirs: list[Path], allow_missing: list[str] = (),
            on_rendered: Optional[Callable[[list[Any], dict[str, int]], None]] = None, **render_args: Any) -> FitResult:
    """`on_rendered`, if given, is called with the rendered releases (not those allowed missing) and the nodes
    each group keeps at idle (checks.idle_nodes) as soon as the charts are rendered and the node model is
    built, i.e. only when the run gets to check the fit.
    `render_args`: render_plan's `base` (the project's folder) and `example` (jobs to check)."""
    from gpu_platform.preflight.fit.render import release_file_names, render_plan, write_rendered
    from gpu_platform.preflight.fit.checks import check_fit, idle_nodes
    from gpu_platform.preflight.fit.nodes import cluster_model

    releases = render_plan(plan, chart_dirs, kubernetes_version=cfg.kubernetes_version, allow_missing=allow_missing,
                           cache_dir=cache_folder(out), **render_args)
    try:
        model = cluster_model(cfg, plan)
    except Exception:  # a model error comes after the rendered files are written, as it always has
        write_rendered(releases, out / "rendered")
        raise
    rendered = [r for r in releases if r.rendered]
    idle = idle_nodes(model, rendered)
    if on_rendered is not None:
        on_rendered(rendered, idle)
    files = write_rendered(releases, out / "rendered")
    report = check_fit(model, rendered)
    for key, n in idle.items():
        if key in report.headroom:
            report.headroom[key]["idleNodes"] = n
    result = FitResult(releases, files, report, model, [r for r in releases if not r.rendered])
    names = {id(rel): fname for fname, rel in release_file_names(releases).items()}
    doc = {
        "chartDirs": [str(d) for d in chart_dirs],
        "releases": [{"name": r.name, "resourceName": r.resource_name, "urn": r.urn, "source": r.source,
                      "chart": r.chart, "version": r.version, "namespace": r.namespace, "rendered": r.rendered,
                      "objects": len(r.objects), "file": f"rendered/{names[id(r)]}",
                      "dependsOn": sorted(r.depends_on)} for r in releases],
        "model": model.to_json(),
        "report": report.to_json(),
    }
    (out / "fit.json").write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    return result
