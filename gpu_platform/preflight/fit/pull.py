"""`python -m gpu_platform.preflight charts pull [--dest DIR] [--mirror URL] [--only NAME]`: fill a chart cache.

Pulls every chart the project pins (gpu_platform/data/platform_versions.py, gpu_platform/data/linode_versions.py,
gpu_platform/data/aws_versions.py) at its pinned version with Helm's Go SDK (helm_python.pull: classic
repositories through their index.yaml, `oci://` references from the registry), into DIR as
`NAME-VERSION.tgz`, the layout `--charts DIR` reads. `--mirror URL` pulls every chart by name from one
classic Helm repository instead (an internal mirror, or a local one in tests). A chart already in DIR
whose Chart.yaml matches is kept. The pinned kustomize remote targets (gpu_platform/data/platform_versions.py
KUSTOMIZE_SOURCES) are built into DIR/kustomize/REPO-REF-NAME.yaml with `kubectl kustomize` (or
`kustomize build`, `--kustomize CMD` to choose); Helm has no kustomize. Exit 0 when everything is
there, 1 when anything could not be pulled or built.

`charts ensure` (run by `make preflight`) makes a fresh clone work without the shared folder: when no
chart folder is named (`$GPU_PLATFORM_CHARTS` unset, no `../shared/charts` beside the project) and the
user cache lacks pinned charts, it pulls them there once; when that fails (no network) it says which
folders it looked in and how to fill one, and exits 1. A named folder is never written to.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from gpu_platform.preflight.fit.render import chart_file_name, kustomize_file_name


@dataclass(frozen=True)
class PinnedChart:
    chart: str  # chart name or oci:// reference
    version: str
    repo: Optional[str]  # classic repository URL; None for OCI

    @property
    def name(self) -> str:
        return self.chart.rstrip("/").rsplit("/", 1)[-1]

    @property
    def file_name(self) -> str:
        return chart_file_name(self.chart, self.version)


def pinned_charts() -> list[PinnedChart]:
    """Every chart pin of the three version modules (Chart objects, and the AWS module's name/version
    constants), each once, sorted by name."""
    from gpu_platform.data import aws_versions as aws
    from gpu_platform.data.chart import Chart
    from gpu_platform.data import linode_versions as linode
    from gpu_platform.data import platform_versions as platform

    found: dict[tuple[str, str], PinnedChart] = {}
    for module in (platform, linode, aws):
        for value in vars(module).values():
            # A Chart, or a mapping of Chart tuples (linode.CNI_CHARTS: one pin per CNI minor).
            charts = ([c for group in value.values() if isinstance(group, tuple) for c in group]
                      if isinstance(value, dict) else [value])
            for chart in charts:
                if isinstance(chart, Chart):
                    found[(chart.chart, chart.version)] = PinnedChart(chart.chart, chart.version, chart.repo)
    found[(aws.NTH_CHART, aws.NTH_CHART_VERSION)] = PinnedChart(aws.NTH_CHART, aws.NTH_CHART_VERSION, None)
    found[(aws.CLUSTER_AUTOSCALER_CHART, aws.CLUSTER_AUTOSCALER_CHART_VERSION)] = PinnedChart(
        aws.CLUSTER_AUTOSCALER_CHART, aws.CLUSTER_AUTOSCALER_CHART_VERSION, aws.CLUSTER_AUTOSCALER_REPO)
    return sorted(found.values(), key=lambda c: (c.name, c.version))


def _matches(path: Path, pin: PinnedChart) -> bool:
    import helm_python

    try:
        with helm_python.Chart.load(path) as chart:
            return chart.name == pin.name and chart.version == pin.version
    except helm_python.HelmError:
        return False


def pull_chart(pin: PinnedChart, dest: Path, mirror: Optional[str] = None) -> Path:
    """Pull one chart into dest; raises helm_python.HelmError or RuntimeError."""
    import helm_python

    target = dest / pin.file_name
    if target.exists() and _matches(target, pin):
        return target
    # Pull into a scratch folder first: a failed or foreign download never lands in the cache.
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        if mirror:
            helm_python.pull(pin.name, repo_url=mirror, version=pin.version, destination=tmp)
        elif pin.repo:
            helm_python.pull(pin.name, repo_url=pin.repo, version=pin.version, destination=tmp)
        else:
            helm_python.pull(pin.chart, version=pin.version, destination=tmp)
        got = sorted(Path(tmp).glob("*.tgz"))
        if len(got) != 1 or not _matches(got[0], pin):
            raise RuntimeError(f"the download is not chart {pin.name} {pin.version}: {[p.name for p in got]}")
        got[0].replace(target)
    return target


def pinned_kustomize_targets() -> list[str]:
    from gpu_platform.data import platform_versions as versions

    return sorted(set(versions.KUSTOMIZE_SOURCES.values()))


def default_kustomize() -> Optional[list[str]]:
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    return None


def build_kustomize(target: str, dest: Path, command: list[str]) -> Path:
    """`<command> https://<target>` into dest/kustomize/<file>; raises RuntimeError."""
    fname = kustomize_file_name(target)
    if fname is None:
        raise RuntimeError(f"{target} is not a github.com/ORG/REPO/PATH?ref=REF target")
    out = dest / "kustomize" / fname
    if out.exists() and out.stat().st_size:
        return out
    url = target if target.startswith("https://") else f"https://{target}"
    proc = subprocess.run([*command, url], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise RuntimeError(f"{' '.join(command)} {url} failed: {proc.stderr.strip()[-500:]}")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(proc.stdout)
    tmp.replace(out)
    return out


def missing_from(dirs: list[Path]) -> tuple[list[PinnedChart], list[str]]:
    """The pinned charts and kustomize targets none of `dirs` holds (by the file names preflight reads)."""
    from gpu_platform.preflight.fit.render import find_chart

    charts = [p for p in pinned_charts() if find_chart(p.chart, p.version, dirs) is None]
    targets = [t for t in pinned_kustomize_targets()
               if not any((d / "kustomize" / str(kustomize_file_name(t))).exists() for d in dirs)]
    return charts, targets


def where_charts_come_from(project_root: Optional[Path] = None) -> str:
    """The folders preflight reads charts from, in order, each with whether it is there."""
    import os

    from gpu_platform.preflight.fit.run import CHARTS_ENV, USER_CACHE

    env = os.environ.get(CHARTS_ENV)
    lines = [f"  ${CHARTS_ENV}: {env if env else 'not set'}"]
    if project_root is not None:
        shared = project_root.parent / "shared" / "charts"
        lines.append(f"  {shared}: {'present' if shared.is_dir() else 'absent'}")
    lines.append(f"  {USER_CACHE} (the user cache): {'present' if USER_CACHE.is_dir() else 'absent'}")
    return "\n".join(lines)


HOW_TO_FILL = ("Fill one of them: `.venv/bin/python -m gpu_platform.preflight charts pull` (needs the network: the "
               "charts' Helm repositories and OCI registries, and kubectl for the kustomize installs), or copy the "
               "files `charts list` names into a folder and set GPU_PLATFORM_CHARTS to it, or check out the "
               "shared folder so that ../shared/charts exists beside this checkout.")


def ensure(project_root: Optional[Path]) -> int:
    """`charts ensure`: see the module's docstring."""
    from gpu_platform.preflight.fit.run import USER_CACHE, default_chart_dirs

    dirs = default_chart_dirs(project_root)
    if dirs != [USER_CACHE]:
        return 0  # a named folder ($GPU_PLATFORM_CHARTS, ../shared/charts): preflight reports what it lacks
    charts, targets = missing_from(dirs)
    if not charts and not targets:
        return 0
    print(f"preflight: no chart folder holds the pinned charts ({len(charts)} charts and {len(targets)} kustomize "
          f"installs missing). Looked in:\n{where_charts_come_from(project_root)}\n"
          f"Pulling them into {USER_CACHE} (once; needs the network) ...", file=sys.stderr)
    # One chart first: offline, that fails in a fraction of a second and nothing else is tried.
    rc = main(["pull", "--dest", str(USER_CACHE), "--only", charts[0].name]) if charts else 0
    if rc == 0:
        rc = main(["pull", "--dest", str(USER_CACHE), "--stop-at-first-failure"])
    if rc != 0:
        print(f"preflight: could not fill {USER_CACHE} (above: what failed; offline, nothing can be pulled).\n"
              f"{HOW_TO_FILL}", file=sys.stderr)
    return rc


def main(argv: list[str]) -> int:
    from gpu_platform.preflight.fit.run import default_chart_dirs

    parser = argparse.ArgumentParser(prog="python -m gpu_platform.preflight charts", description="the chart cache preflight renders from")
    sub = parser.add_subparsers(dest="command", required=True)
    pull = sub.add_parser("pull", help="pull every pinned chart at its pinned version")
    pull.add_argument("--dest", help=f"cache folder (default: the first of {', '.join(map(str, default_chart_dirs()))})")
    pull.add_argument("--mirror", help="pull every chart by name from this classic Helm repository URL instead")
    pull.add_argument("--only", action="append", default=[], metavar="NAME", help="only this chart (repeatable)")
    pull.add_argument("--kustomize", metavar="CMD",
                      help="command that builds a kustomize URL to stdout (default: `kubectl kustomize`, else `kustomize build`)")
    pull.add_argument("--stop-at-first-failure", action="store_true",
                      help="stop at the first chart that cannot be pulled (offline, the rest would fail too)")
    sub.add_parser("list", help="list the pinned charts")
    sub.add_parser("ensure", help="pull the pinned charts into the user cache when no chart folder is named "
                                  "and the cache lacks them (what `make preflight` runs first)")
    args = parser.parse_args(argv)
    if args.command == "ensure":
        from gpu_platform.project import ProjectFileError, ProjectNotFound, find_project

        try:
            root: Optional[Path] = find_project().root
        except (ProjectNotFound, ProjectFileError):
            root = None
        return ensure(root)

    pins = pinned_charts()
    if args.command == "list":
        for p in pins:
            print(f"{p.file_name:<48} {p.repo or p.chart}")
        return 0
    unknown = sorted(set(args.only) - {p.name for p in pins})
    if unknown:
        print(f"preflight charts pull: --only {', '.join(unknown)}: not a pinned chart; pinned: "
              f"{', '.join(p.name for p in pins)}", file=sys.stderr)
        return 2
    dest = Path(args.dest) if args.dest else default_chart_dirs()[0]
    dest.mkdir(parents=True, exist_ok=True)
    import helm_python

    failed = []
    failed_targets = []
    if not args.only:
        command = shlex.split(args.kustomize) if args.kustomize else default_kustomize()
        for target in pinned_kustomize_targets():
            try:
                if command is None:
                    raise RuntimeError("neither kubectl nor kustomize is on PATH (--kustomize CMD)")
                print(f"ok      {build_kustomize(target, dest, command)}")
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                failed_targets.append(target)
                print(f"FAILED  {target}: {exc}", file=sys.stderr)
    for pin in pins:
        if args.only and pin.name not in args.only:
            continue
        if args.stop_at_first_failure and failed:
            break
        try:
            path = pull_chart(pin, dest, args.mirror)
            print(f"ok      {path}")
        except (helm_python.HelmError, RuntimeError, OSError) as exc:
            failed.append(pin)
            print(f"FAILED  {pin.file_name}: {exc}", file=sys.stderr)
    if failed or failed_targets:
        print(f"preflight charts pull: not pulled: {', '.join([p.file_name for p in failed] + failed_targets)}",
              file=sys.stderr)
        return 1
    return 0
