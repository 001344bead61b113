"""`python -m gpu_platform.preflight charts pull [--dest DIR] [--mirror URL] [--only NAME]`: fill a chart cache.

Pulls every chart the project pins (gpu_platform/data/platform_versions.py, gpu_platform/data/linode_versions.py,
gpu_platform/data/aws_versions.py) at its pinned version with Helm's Go SDK (helm_python.pull: classic
repositories through their index.yaml, `oci://` references from the registry), into DIR as
`NAME-VERSION.tgz`, the layout `--charts DIR` reads. `--mirror URL` pulls every chart by name from one
classic Helm repository instead (an internal mirror, or a local one in tests). A chart already in DIR
whose Chart.yaml matches is kept. The pinned kustomize remote targets (gpu_platform/data/platform_versions.py
KUSTOMIZE_SOURCES) are built into DIR/kustomize/REPO-REF-NAME.yaml with `kubectl kustomize` (or
`kustomize build`, `--kustomize CMD` to choose); Helm has no kustomize. A run pulls into a staging folder
beside DIR and moves what it got into DIR only when every chart and target asked for came: a failed pull
(offline, one repository down) leaves DIR as it was, never half filled. `charts list` prints every pinned
install, charts and kustomize targets, with where it comes from. `-C DIR` (before or after `charts`) takes
the project there, as the main command does: the default folder is found from it, not from the working
directory.

Exit codes (EXIT_TEXT): 0 everything asked for is in DIR; 1 something could not be pulled or built (each
named on stderr; nothing new in DIR); 2 a usage error (an unknown --only name, a bad option).

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
from gpu_platform.project import python_m


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


EXIT_TEXT = ("exit codes: 0 everything asked for is in the folder, 1 something could not be pulled or built "
             "(named above; the folder is left as it was), 2 usage")


def pinned_installs() -> list[tuple[str, str]]:
    """(file preflight reads, where it comes from) of every pinned install: each chart (`NAME-VERSION.tgz`
    from its classic repository or OCI reference) and each kustomize target (`kustomize/FILE.yaml`, built from
    its github.com URL)."""
    out = []
    for p in pinned_charts():
        out.append((p.file_name, f"chart {p.name} {p.version} from {p.repo}" if p.repo else f"chart {p.chart} {p.version}"))
    for t in pinned_kustomize_targets():
        out.append((f"kustomize/{kustomize_file_name(t)}", f"kustomize build https://{t}" if not t.startswith("https://")
                    else f"kustomize build {t}"))
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

    from gpu_platform.preflight.fit.run import CHARTS_ENV, USER_CACHE, shared_chart_candidates

    env = os.environ.get(CHARTS_ENV)
    lines = [f"  ${CHARTS_ENV}: {env if env else 'not set'}"]
    if project_root is not None:
        for shared in shared_chart_candidates(project_root):
            lines.append(f"  {shared}: {'present' if shared.is_dir() else 'absent'}")
    lines.append(f"  {USER_CACHE} (the user cache): {'present' if USER_CACHE.is_dir() else 'absent'}")
    return "\n".join(lines)


HOW_TO_FILL = (f"Fill one of them: `{python_m('gpu_platform.preflight')} charts pull` (needs the network: the "
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


def _split_cwd(argv: list[str]) -> tuple[Optional[str], list[str]]:
    """`-C DIR` / `--cwd DIR` / `--cwd=DIR` anywhere in a `charts` command line, and the rest."""
    rest, cwd, i = [], None, 0
    while i < len(argv):
        a = argv[i]
        if a in ("-C", "--cwd") and i + 1 < len(argv):
            cwd, i = argv[i + 1], i + 2
            continue
        if a.startswith("--cwd="):
            cwd = a.split("=", 1)[1]
        else:
            rest.append(a)
        i += 1
    return cwd, rest


def main(argv: list[str], cwd: Optional[str] = None) -> int:
    from gpu_platform.preflight.fit.run import default_chart_dirs
    from gpu_platform.project import ProjectFileError, ProjectNotFound, find_project

    found, argv = _split_cwd(list(argv))
    cwd = found or cwd
    root: Optional[Path] = None
    if cwd is not None:
        try:
            root = find_project(cwd).root
        except (ProjectNotFound, ProjectFileError) as exc:
            from gpu_platform.config.approvals import one_line

            print(f"preflight charts: -C {one_line(cwd)}: {one_line(str(exc))}", file=sys.stderr)
            return 2
    else:
        try:
            root = find_project().root
        except (ProjectNotFound, ProjectFileError):
            root = None
    parser = argparse.ArgumentParser(prog="python -m gpu_platform.preflight charts", description="the chart cache preflight renders from",
                                     epilog=EXIT_TEXT)
    sub = parser.add_subparsers(dest="command", required=True)
    pull = sub.add_parser("pull", help="pull every pinned chart at its pinned version", epilog=EXIT_TEXT)
    pull.add_argument("--dest", help=f"cache folder (default: the first of {', '.join(map(str, default_chart_dirs(root)))})")
    pull.add_argument("--mirror", help="pull every chart by name from this classic Helm repository URL instead")
    pull.add_argument("--only", action="append", default=[], metavar="NAME", help="only this chart (repeatable)")
    pull.add_argument("--kustomize", metavar="CMD",
                      help="command that builds a kustomize URL to stdout (default: `kubectl kustomize`, else `kustomize build`)")
    pull.add_argument("--stop-at-first-failure", action="store_true",
                      help="stop at the first chart that cannot be pulled (offline, the rest would fail too)")
    sub.add_parser("list", help="list every pinned install (charts and kustomize targets) and where it comes from")
    sub.add_parser("ensure", help="pull the pinned charts into the user cache when no chart folder is named "
                                  "and the cache lacks them (what `make preflight` runs first)", epilog=EXIT_TEXT)
    args = parser.parse_args(argv)
    if args.command == "ensure":
        return ensure(root)
    if args.command == "list":
        for name, source in pinned_installs():
            print(f"{name:<56} {source}")
        return 0
    pins = pinned_charts()
    unknown = sorted(set(args.only) - {p.name for p in pins})
    if unknown:
        print(f"preflight charts pull: --only {', '.join(unknown)}: not a pinned chart; pinned: "
              f"{', '.join(p.name for p in pins)}", file=sys.stderr)
        return 2
    dest = Path(args.dest) if args.dest else default_chart_dirs(root)[0]
    return _pull_all(args, pins, dest)


def _pull_all(args: argparse.Namespace, pins: list[PinnedChart], dest: Path) -> int:
    """Pull into a staging folder beside `dest`; move the files into `dest` only when nothing failed."""
    import helm_python

    created = not dest.exists()
    dest.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.pulling-", dir=dest.parent))
    failed: list[PinnedChart] = []
    failed_targets: list[str] = []
    try:
        if not args.only:
            command = shlex.split(args.kustomize) if args.kustomize else default_kustomize()
            for target in pinned_kustomize_targets():
                try:
                    if command is None:
                        raise RuntimeError("neither kubectl nor kustomize is on PATH (--kustomize CMD)")
                    kept = dest / "kustomize" / str(kustomize_file_name(target))
                    if not (kept.exists() and kept.stat().st_size):
                        build_kustomize(target, staging, command)
                    print(f"ok      {kept}")
                except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                    failed_targets.append(target)
                    print(f"FAILED  {target}: {exc}", file=sys.stderr)
        for pin in pins:
            if args.only and pin.name not in args.only:
                continue
            if args.stop_at_first_failure and (failed or failed_targets):
                break
            try:
                kept = dest / pin.file_name
                if not (kept.exists() and _matches(kept, pin)):
                    pull_chart(pin, staging, args.mirror)
                print(f"ok      {kept}")
            except (helm_python.HelmError, RuntimeError, OSError) as exc:
                failed.append(pin)
                print(f"FAILED  {pin.file_name}: {exc}", file=sys.stderr)
        if failed or failed_targets:
            print(f"preflight charts pull: not pulled: {', '.join([p.file_name for p in failed] + failed_targets)}; "
                  f"nothing was added to {dest} (a cache is filled whole or not at all)", file=sys.stderr)
            return 1
        for got in sorted(staging.rglob("*")):
            if got.is_file():
                target = dest / got.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                got.replace(target)
        dest.mkdir(parents=True, exist_ok=True)
        return 0
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and dest.is_dir() and not any(dest.iterdir()):
            dest.rmdir()
