"""`python -m gpu_platform.preflight <stack>`: what a stack creates, whether it passes policy, what it costs.

Offline and without credentials: the real program runs under Pulumi's mocks (preview mode), the
policy pack runs in its own process through the analyzer protocol, every chart is rendered and
checked against a model of the cluster's nodes, and costs come from the catalog. The verdict comes
first, then the bill; `-v` adds the policy table and the cluster fit (always shown when they fail),
`-vv` the resource tree;
`--format json` prints one document (gpu_platform/preflight/preflight.schema.json) instead.
Exit codes: 0 ok, 2 a wrong stack config / policy config / chart, 3 a mandatory policy violated or a
workload that would not fit, 4 usage (unknown stack, missing file or folder, bad arguments),
1 an internal error.

This command line is a layer of its own (README ## Layout, `cli`), above preflight and the rehearsal:
it offers `--rehearse`, so the rehearsal (which reads preflight's plan) is imported from here and
nothing else in preflight imports it.
"""

from __future__ import annotations

from gpu_platform.preflight.startup import STOP_SIGNALS, end_quietly_until_started, quiet_grpc_core

if __name__ == "__main__":  # before the imports below, which take seconds on a loaded machine
    end_quietly_until_started()
    quiet_grpc_core()

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator, Optional

from gpu_platform import command_name
from gpu_platform.config.approvals import one_line
from gpu_platform.config.base import ConfigError
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight import artifacts
from gpu_platform.preflight.report import render_plan
from gpu_platform.project import python_m
from gpu_platform.preflight.runner import (ProgramError, ProjectFileError, ProjectNotFound, StackFileError, StackNotFound,
                                           find_project, load_stack, load_stack_file, run_program)

EXIT_CONFIG = 2
EXIT_POLICY = 3
EXIT_USAGE = 4  # a stack or file that does not exist, bad arguments
# The whole command: a stack that makes any step run away (a pack rule, a chart) ends with a message.
DEFAULT_TIMEOUT_S = 900.0
# With --rehearse: the rehearsal boots a control plane and runs every scenario, each with its own hang guard;
# linode-dev's took 765-800 s on a loaded 2-core machine (2026-11-29), too close to the plain default.
DEFAULT_REHEARSE_TIMEOUT_S = 2700.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2, which here means a bad stack config
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class BackgroundAnalyzer:
    """Starts the policy pack in a thread so its start-up overlaps the program run."""

    def __init__(self, stack: str, stack_config: dict[str, str], project: str):
        from gpu_platform.preflight.analyzer import Analyzer

        # pulumi imports itself in a cycle (pulumi/__init__ -> automation -> runtime.proto): the thread
        # importing runtime.proto while the program run imports pulumi can see it half-initialised. Import
        # it whole here, before the thread starts (the stack config no longer imports it on the way).
        import pulumi  # noqa: F401

        self.analyzer = Analyzer(stack=stack, project=project, stack_config=stack_config)
        self.error: BaseException | None = None
        self.where: str | None = None
        self.thread = threading.Thread(target=self._start, daemon=True)
        self.thread.start()

    def _start(self) -> None:
        try:
            self.analyzer.start()
        except BaseException as exc:  # noqa: BLE001 re-raised in analyze()
            self.error = exc

    def analyze(self, plan, policy_config):
        self.thread.join()
        try:
            if self.error is not None:
                raise self.error
            return self.analyzer.analyze(plan, policy_config, where=self.where or f"policy config of stack {plan.stack}")
        finally:
            self.close()

    def close(self) -> None:
        self.thread.join()
        self.analyzer.close()


def _consoles() -> tuple[Any, Any]:
    """stdout for the report, stderr for progress and messages. rich colours only a terminal and
    honours NO_COLOR; piped output is plain text."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich exits 1 here; the caller decides (the verdict's code)
            raise BrokenPipeError

    return _Console(file=sys.stdout, soft_wrap=True), _Console(file=sys.stderr, soft_wrap=True)


@contextlib.contextmanager
def _step(err: Any, label: str, enabled: bool) -> Iterator[None]:
    """A spinner on stderr while a step runs (terminals only; nothing in pipes, CI logs or JSON)."""
    if enabled and err.is_terminal:
        with err.status(label, spinner="dots"):
            yield
    else:
        yield


def policy_config_main(argv: list[str]) -> int:
    """`policy-config STACK`: stacks/policy.<stack>.yaml, checked, as the JSON the Pulumi CLI's
    `--policy-pack-config` reads; `{}` (the pack's defaults) when the stack has none. preview.yml and
    deploy.yml both run it, so `pulumi up` enforces the ceilings the pull request's preview showed."""
    from gpu_platform.preflight.analyzer import PolicyConfigError, load_policy_config
    from gpu_platform.project import ProjectFileError, ProjectNotFound, find_project

    parser = argparse.ArgumentParser(prog=f"{command_name('gpu_platform.preflight')} policy-config",
                                     description=policy_config_main.__doc__.splitlines()[0])
    parser.add_argument("stack")
    parser.add_argument("-C", dest="directory", help="the project's folder (default: found from the working directory)")
    args = parser.parse_args(argv)
    try:
        project = find_project(Path(args.directory)) if args.directory else find_project()
        config = load_policy_config(args.stack, project=project)
    except (ProjectNotFound, ProjectFileError, PolicyConfigError) as exc:
        print(f"preflight policy-config: {exc}", file=sys.stderr)
        return 2
    json.dump(config or {}, sys.stdout, sort_keys=True, default=str)  # an unquoted `until` date as text
    print()
    return 0


def image_registry_main(argv: list[str]) -> int:
    """`image-registry STACK`: where the stack's own registry is, for logging the deployer's Docker in to it before
    `pulumi up` (deploy.yml): `gcp <region>-docker.pkg.dev` (`gcloud auth configure-docker` that host) or `aws
    <region>` (`aws ecr get-login-password --region <region> | docker login ... <account>.dkr.ecr.<region>.amazonaws.com`);
    nothing for Linode (linode.imageRegistry's login is the stack's secret `linode-registry:password`) and
    cloud kubernetes. The program passes GKE and EKS builds no registry login (gpu_platform/components/images.py
    RegistryLogin), so no registry token is in their state."""
    from gpu_platform.config.stack import parse_config
    from gpu_platform.project import ProjectFileError, ProjectNotFound, find_project

    parser = argparse.ArgumentParser(prog=f"{command_name('gpu_platform.preflight')} image-registry",
                                     description=image_registry_main.__doc__.splitlines()[0])
    parser.add_argument("stack")
    parser.add_argument("-C", dest="directory", help="the project's folder (default: found from the working directory)")
    args = parser.parse_args(argv)
    try:
        project = find_project(Path(args.directory)) if args.directory else find_project()
        stack_input = load_stack(args.stack, project)
        cfg = parse_config(stack_input.raw, args.stack, source=stack_input.source,
                           secret_keys=stack_input.bare_secret_keys)
    except (ProjectNotFound, ProjectFileError, StackNotFound) as exc:
        print(f"preflight image-registry: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (StackFileError, ConfigError) as exc:
        print(f"preflight image-registry: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    if cfg.cloud == "gcp":
        from gpu_platform.components.gcp.registry import registry_host

        print(f"gcp {registry_host(cfg.gcp.region)}")
    elif cfg.cloud == "aws":
        print(f"aws {cfg.aws.region}")
    return 0


def main(argv: list[str] | None = None, deadline: bool = False) -> int:
    """`deadline`: arm --timeout for the whole process (the command; not for callers in-process)."""
    argv = sys.argv[1:] if argv is None else argv
    cwd_first = (argv[:1] in (["-C"], ["--cwd"]) and argv[2:3] == ["charts"]) or (
        argv[:1] and argv[0].startswith("--cwd=") and argv[1:2] == ["charts"])
    if argv[:1] == ["charts"] or cwd_first:  # `python -m gpu_platform.preflight [-C DIR] charts pull|list|ensure`
        from gpu_platform.preflight.fit.pull import main as charts_main

        if cwd_first:  # -C DIR before `charts`: the project there, as for a plan
            at = argv.index("charts")
            return charts_main(argv[at + 1:], cwd=argv[1] if at == 2 else argv[0].split("=", 1)[1])
        return charts_main(argv[1:])
    if argv[:1] == ["policy-config"]:  # the JSON file `pulumi preview/up --policy-pack-config` reads
        return policy_config_main(argv[1:])
    if argv[:1] == ["image-registry"]:  # the registry deploy.yml logs Docker in to before `pulumi up`
        return image_registry_main(argv[1:])
    if argv[:1] == ["summary"]:  # `python -m gpu_platform.preflight summary DIR`: Markdown of every stack's verdict
        from gpu_platform.preflight.verdict import summary_main

        return summary_main(argv[1:])
    prog = command_name("gpu_platform.preflight")
    parser = _Parser(prog=prog, description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog=("other commands (each with its own --help):\n"
                             f"  {prog} charts pull|list|ensure   the pinned Helm charts and kustomize installs "
                             "preflight renders\n"
                             f"  {prog} summary DIR               Markdown of every DIR/<stack>/preflight.json "
                             "(CI's job summary)\n"
                             f"  {prog} policy-config STACK       stacks/policy.<stack>.yaml as the JSON "
                             "`pulumi preview/up --policy-pack-config` reads\n"
                             f"  {prog} image-registry STACK      the stack's own image registry, to log Docker in to "
                             "before `pulumi up`\n\n"
                             "exit codes: 0 ok, 2 config/chart error, 3 policy or cluster-fit failure or a refused "
                             "bill, 4 usage, 1 bug"))
    parser.add_argument("stack", nargs="?", help="stack name: Pulumi.<stack>.yaml in the project's stackConfigDir")
    parser.add_argument("--stack-file", help="plan this stack file instead (its name gives the stack name)")
    parser.add_argument("-C", "--cwd", metavar="DIR",
                        help="the Pulumi project to plan (default: the nearest Pulumi.yaml from the working directory up)")
    parser.add_argument("--out", help="output folder (default: build/ in the project)")
    parser.add_argument("--no-policies", action="store_true", help="skip the policy pack")
    parser.add_argument("--policy-config", help="policy config file (default: policy.<stack>.yaml beside the stack file, if present)")
    parser.add_argument("--job", metavar="FILE",
                        help="jobs (e.g. a TrainJob) to check for queue fit (default: the project's "
                             "examples/training/trainjob-checkpointed.yaml, if present)")
    parser.add_argument("-v", "--verbose", action="count", default=0,
                        help="-v: the policy table and the cluster fit (the network flows that pass as one line); -vv: also each "
                             "passing flow and the resource tree")
    parser.add_argument("--quiet", action="store_true", help="the verdict and the bill only (the default; overrides -v)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="json: one document on stdout (schema: gpu_platform/preflight/preflight.schema.json)")
    parser.add_argument("--charts", action="append", metavar="DIR",
                        help="chart directory to render from (repeatable; default: the first of $GPU_PLATFORM_CHARTS, "
                             "../shared/charts beside the project, the user cache ~/.cache/gpu-platform/charts "
                             "($XDG_CACHE_HOME honoured); fill the cache with `charts pull`)")
    parser.add_argument("--allow-missing-chart", action="append", default=[], metavar="NAME",
                        help="report releases of this chart as NOT RENDERED instead of failing (repeatable)")
    parser.add_argument("--base", metavar="DIR",
                        help="a base branch's preflight output (its build folder, or the stack's folder in it): "
                             "show what changed (resources, cost, policies)")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help=f"give up (exit 3, no verdict) when the whole run takes longer (default {DEFAULT_TIMEOUT_S:g}; "
                             f"{DEFAULT_REHEARSE_TIMEOUT_S:g} with --rehearse)")
    parser.add_argument("--rehearse", action="store_true",
                        help="then rehearse the stack on a throwaway local Kubernetes control plane with the platform's "
                             "controllers (components built by `make rehearsal-build`; docs/rehearsal.md); exit 3 if it fails")
    parser.add_argument("--engine", choices=("rehearsal", "pulumi"), default="rehearsal",
                        help="with --rehearse: `rehearsal` (default) installs the plan with the rehearsal's own installer and "
                             "runs the scenarios; `pulumi` deploys the stack's Kubernetes layer with the real `pulumi up`, "
                             "a second up and destroy (`make engine-build`; docs/rehearsal.md)")
    args = parser.parse_args(argv)
    if args.engine != "rehearsal" and not args.rehearse:
        parser.error("--engine goes with --rehearse")
    if bool(args.stack) == bool(args.stack_file):
        parser.error("give a stack name or --stack-file, not both")
    if args.timeout is None:
        args.timeout = DEFAULT_REHEARSE_TIMEOUT_S if args.rehearse else DEFAULT_TIMEOUT_S
    if not 0 < args.timeout <= 24 * 3600:
        parser.error(f"--timeout {args.timeout:g}: a number of seconds from 1 to 86400")
    run = Run(args)
    if deadline:
        _watchdog(args.timeout, run.stack_name)
    return run.execute()


def _kubeconfig_problem(cfg: Any, stack_input: Any, project: Any) -> Optional[str]:
    """Cloud kubernetes: the kubeconfig the stack file names (a path; its content is refused in clear when the file
    is read, a `secure:` one is planned with a stand-in), read and checked now as the program would, so a wrong
    one is a config error naming the key and the file read, before the program runs."""
    from gpu_platform.config.kubernetes import KUBECONFIG_KEY, KubeconfigError, checked_kubeconfig

    value = stack_input.config.get(KUBECONFIG_KEY)
    if cfg.cloud != "kubernetes" or not value or KUBECONFIG_KEY in stack_input.secret_keys:
        return None
    shown = stack_input.source or project.shown(project.stacks_dir / f"Pulumi.{stack_input.stack}.yaml")
    # A relative path is the program's: it runs in the project's folder.
    path = value if value.startswith(("/", "~")) or "\n" in value else str(project.root / value)
    if "\n" not in value and not os.path.isfile(os.path.expanduser(path)):
        path = value
    try:
        checked_kubeconfig(path, False, cfg.kubernetes.context, shown, env={})
    except KubeconfigError as exc:
        return str(exc)
    return None


class Run:
    """One preflight run: plan, policies and cluster fit in parallel, then the verdict."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.json = args.format == "json"
        self.verbose = 0 if args.quiet else args.verbose
        self.out_console, self.err = _consoles()
        self.started = time.monotonic()
        self.details: list[str] = []
        self.warnings: list[str] = []
        self.cfg: Any = None
        self.sections: dict[str, Any] = {}
        self.costs: Any = None
        self.policy_config: Optional[dict[str, Any]] = None
        self.policy_config_file: Optional[str] = None
        self.base: Optional[dict[str, Any]] = None  # the --base run's documents (review.load_base)

    # --- messages and the end of a run ------------------------------------------------------

    def fail(self, code: int, message: str, out: Optional[Path] = None) -> int:
        from gpu_platform.preflight.safe_yaml import printable

        print(f"preflight: {printable(message)}", file=sys.stderr)
        return self.finish(code, out, error=message)

    @property
    def stack_name(self) -> str:
        """The stack's name for messages, known before the stack file is read (from --stack-file's name)."""
        if self.args.stack:
            return self.args.stack
        if self.args.stack_file:
            name = Path(self.args.stack_file).name
            return name[len("Pulumi."):-len(".yaml")] if name.startswith("Pulumi.") and name.endswith(".yaml") else name
        return "?"

    def finish(self, code: int, out: Optional[Path], error: Optional[str] = None) -> int:
        from gpu_platform.preflight import verdict

        if self.costs is not None and code not in (0, EXIT_POLICY):
            self.costs.abandon()

        from gpu_platform.preflight.safe_yaml import printable

        doc = verdict.document(self.stack_name, self.cfg, code, warnings=tuple(self.warnings), error=error,
                               **self.sections)
        verdict.validate(doc)
        if out is not None and out.is_dir():
            (out / verdict.DOCUMENT).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        try:
            if self.json:
                sys.stdout.write(json.dumps(doc, indent=2, sort_keys=True) + "\n")
            elif self.sections:
                verdict.render_summary(doc, self.out_console)
                for block in self.details:
                    self.out_console.print()
                    self.out_console.print(printable(block), highlight=False, markup=False)
            sys.stdout.flush()
        except BrokenPipeError:  # `preflight aws-prod | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        # The time goes to stderr: stdout is the same bytes for the same stack on every run.
        print(f"preflight {one_line(self.stack_name)}: {doc['verdict'].upper()} in {time.monotonic() - self.started:.1f}s",
              file=sys.stderr)
        return code

    # --- the run ------------------------------------------------------------------------------

    def execute(self) -> int:
        args = self.args
        from gpu_platform.data.versions_calendar import today_problem

        problem = today_problem()  # every date check reads it: a bad one is a usage error before anything runs
        if problem:
            return self.fail(EXIT_USAGE, problem)
        try:
            project = find_project(args.cwd)
        except ProjectNotFound as exc:  # one-line messages naming a path (-C DIR): its newlines escaped too
            return self.fail(EXIT_USAGE, one_line(str(exc)))
        except ProjectFileError as exc:
            return self.fail(EXIT_CONFIG, one_line(str(exc)))
        from gpu_platform.preflight.fit.render import EXAMPLE_TRAINJOB

        job = Path(args.job) if args.job else EXAMPLE_TRAINJOB
        if args.job:
            # Read and checked now, before the program runs: a bad job file is known in a second.
            from gpu_platform.preflight.fit.errors import ChartError
            from gpu_platform.preflight.fit.render import load_job_file

            shown = one_line(args.job)
            if not os.path.exists(args.job):
                return self.fail(EXIT_USAGE, f"--job {shown}: no such file")
            if not job.is_file():
                what = "a directory" if job.is_dir() else "not a regular file (a device, pipe or socket)"
                return self.fail(EXIT_USAGE, f"--job {shown}: {what}; give a YAML file of Kubernetes objects")
            try:
                load_job_file(job, shown)
            except ChartError as exc:
                return self.fail(EXIT_CONFIG, f"--job {exc.message}")
        if args.policy_config and not Path(args.policy_config).is_file():
            what = ("is a directory" if Path(args.policy_config).is_dir() else
                    "is a symbolic link to a file that does not exist" if os.path.islink(args.policy_config) else
                    "does not exist")
            return self.fail(EXIT_USAGE, f"--policy-config {one_line(args.policy_config)}: {what}; give a policy config file")
        problem = _out_problem(args.out) if args.out is not None else None
        if problem:
            return self.fail(EXIT_USAGE, f"--out {_shown_path(args.out)}: {problem}")
        args.out = args.out or str(project.root / "build")
        try:
            if args.stack_file:
                stack_input = load_stack_file(Path(args.stack_file), project)
                args.stack = stack_input.stack
            else:
                stack_input = load_stack(args.stack, project)
        except StackNotFound as exc:
            return self.fail(EXIT_USAGE, str(exc))
        except StackFileError as exc:
            return self.fail(EXIT_CONFIG, str(exc))
        if args.base:
            # The base run's files are read and checked now, before the program runs: a malformed or
            # oversized one (another branch's artifacts) is a bad argument, not a traceback at the end.
            from gpu_platform.preflight import review

            if not os.path.isdir(args.base):
                what = ("no such folder" if not os.path.lexists(args.base) else
                        "a symbolic link to nothing" if os.path.islink(args.base) and not os.path.exists(args.base) else
                        "not a folder")
                return self.fail(EXIT_USAGE, f"--base {one_line(args.base)}: {what}; give the output folder of an "
                                             "earlier preflight run (its --out)")
            folder = review.base_dir(Path(args.base), args.stack)
            if folder is None:
                # Nothing to compare with is a wrong path (a base job that did not run, a stack name that
                # differs), not a review that found no change: a usage error, like a missing folder.
                return self.fail(EXIT_USAGE, f"--base {one_line(args.base)}: no plan.json there or in "
                                             f"{one_line(args.stack)}/; give the output folder of an earlier preflight "
                                             "run of this stack (its --out)")
            try:
                self.base = review.load_base(folder)
            except review.BaseRunError as exc:
                return self.fail(EXIT_USAGE, f"--base: {exc}; give the output folder of an earlier preflight run")
            # Another stack's run compared with this one lists every difference of two stacks as this change.
            base_stack = self.base["plan"].get("stack")
            if isinstance(base_stack, str) and base_stack != stack_input.stack:
                return self.fail(EXIT_USAGE, f"--base {one_line(args.base)}: that run planned stack "
                                             f"{one_line(base_stack)!r}, this one plans {one_line(stack_input.stack)!r}; "
                                             "give the output folder of an earlier preflight run of this stack "
                                             f"(DIR/{one_line(stack_input.stack)}/plan.json or DIR/plan.json)")
        try:
            self.cfg = parse_config(stack_input.raw, args.stack, source=stack_input.source,
                                    secret_keys=stack_input.bare_secret_keys)
        except ConfigError as exc:
            return self.fail(EXIT_CONFIG, str(exc))
        problem = _kubeconfig_problem(self.cfg, stack_input, project)
        if problem:
            return self.fail(EXIT_CONFIG, problem)
        from gpu_platform.config.stack import config_warnings

        # Shown once, in the verdict (and the JSON document's `warnings`).
        self.warnings = list(config_warnings(self.cfg))
        if not args.job and not (project.root / job).is_file():
            # A team's own program (the wheel's gpu-platform-preflight) has no example job: say that the
            # queue fit of training jobs went unchecked, rather than pass in silence.
            self.warnings.append(f"no training job was checked for queue fit (no --job, and {one_line(str(project.root))} has no "
                                 f"{job.as_posix()}): give your job's manifest (a TrainJob, JobSet or Job) with "
                                 "--job FILE to check that Kueue admits it and a GPU pool can run it")

        policies = None
        policy_config = None
        if args.no_policies:
            self.warnings.append("the policy pack was not run (--no-policies): the verdict covers the plan, cluster "
                                 "fit and cost only")
        else:
            from gpu_platform.preflight.analyzer import PolicyConfigError, load_policy_config

            if args.stack_file and not args.policy_config:
                # As --help says: policy.<stack>.yaml beside the stack file, wherever that file is.
                beside = Path(args.stack_file).parent / f"policy.{args.stack}.yaml"
                if os.path.lexists(beside):
                    args.policy_config = str(beside)
            try:
                policy_config = load_policy_config(args.stack, args.policy_config, project=project)
            except (PolicyConfigError, FileNotFoundError) as exc:
                return self.fail(EXIT_CONFIG, str(exc))
            # The pack takes a second to start: start it now, while the program runs.
            policies = BackgroundAnalyzer(args.stack, stack_input.config, project.name)
            from gpu_platform.preflight.analyzer import policy_config_path

            # Messages about the policy config name the file read.
            shown = one_line(args.policy_config) if args.policy_config else (project.shown(policy_config_path(args.stack, project))
                                           if policy_config is not None else None)
            policies.where = f"policy config {shown}" if shown else None
            self.policy_config, self.policy_config_file = policy_config, shown

        try:
            with _step(self.err, "running the program under mocks", not self.json):
                plan = run_program(stack_input)
        except BaseException as exc:
            # Any way the program stops ends the pack too: a caller in-process (the rehearsal, the tests) would
            # otherwise keep it running until the interpreter exits.
            if policies is not None:
                policies.close()
            if isinstance(exc, ProgramError):
                return self.fail(1, f"the program failed: {exc}")
            raise
        self.sections["plan"] = plan
        # The program's own warnings (e.g. a fallback it took), once, beside the config's.
        self.warnings += [w for w in plan.warnings if w not in self.warnings]

        out = Path(args.out) / args.stack
        if out.resolve().parent != Path(args.out).resolve():  # stack names are validated; belt and braces
            return self.fail(EXIT_USAGE, f"stack name {args.stack!r} would write outside {one_line(args.out)}")
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / ".write-test").touch()
            (out / ".write-test").unlink()
        except OSError as exc:
            if policies is not None:
                policies.close()
            return self.fail(EXIT_USAGE, f"--out {one_line(args.out)}: cannot write {one_line(str(out))} ({exc.strerror or exc})")
        # Render the charts and check the fit in a thread while the policy pack analyses the plan.
        from gpu_platform.preflight.fit.run import FitWorker, default_chart_dirs, searched_chart_dirs

        chart_dirs = [Path(d) for d in args.charts] if args.charts else default_chart_dirs(project.root)
        missing_dirs = [one_line(str(d)) for d in chart_dirs if not d.is_dir()]
        if missing_dirs:
            if policies is not None:
                policies.close()
            searched = ([("--charts", Path(d)) for d in args.charts] if args.charts
                        else searched_chart_dirs(project.root))
            where = "; ".join(f"{what} {one_line(str(d))} ({'present' if d.is_dir() else 'absent'})"
                              for what, d in searched)
            return self.fail(EXIT_USAGE, f"chart directory {', '.join(missing_dirs)} does not exist; searched: {where} "
                             "(give --charts DIR or set $GPU_PLATFORM_CHARTS; fill one with "
                             f"`{python_m('gpu_platform.preflight')} charts pull --dest DIR`)",
                             out)
        from gpu_platform.preflight.costs import CostReport

        # The fit thread prices the rendered storage as soon as the charts are rendered, so the cost
        # chart is drawn (in a child process) while the policy pack is still analysing.
        costs = self.costs = CostReport(self.cfg, out, plan, repeat_notes=self.verbose >= 1, stack=args.stack)
        fit = FitWorker(self.cfg, plan, out, chart_dirs, args.allow_missing_chart,
                        then=costs.report, base=project.root, example=(Path.cwd() / job) if args.job else job)
        (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n")
        from gpu_platform.preflight.mocks import SENSITIVE

        written = artifacts.write(plan, out / "artifacts", SENSITIVE)
        if self.verbose >= 2:
            self.details.append(render_plan(plan))
        files = [f"{out / 'plan.json'}", f"{len(written)} artifact(s) under {out / 'artifacts'}"]

        status = 0
        policy_block: Optional[tuple[int, Any]] = None  # where the policy table is in self.details, and its report
        if policies is not None:
            from gpu_platform.preflight.analyzer import PolicyConfigError, PolicyPackError, PolicyPackIncomplete, PolicyTimeout
            from gpu_platform.preflight.verdict import policy_section

            # The cost ceiling judges the same bill as the cost report: it waits for the rendered charts'
            # volumes and load balancers (the render runs first in the fit thread; the fit check after it
            # still overlaps the analysis).
            fit.rendered.wait()
            policy_config = with_chart_costs(policy_config, costs)
            try:
                with _step(self.err, "analysing the plan with the policy pack", not self.json):
                    report = policies.analyze(plan, policy_config)
            except PolicyConfigError as exc:
                return self.fail(EXIT_CONFIG, str(exc), out)
            except (PolicyPackIncomplete, PolicyTimeout) as exc:  # no verdict is a failed verdict
                return self.fail(EXIT_POLICY, str(exc), out)
            except PolicyPackError as exc:
                return self.fail(1, f"the policy pack failed: {exc}", out)
            report.cloud = self.cfg.cloud
            (out / "policy.json").write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
            files.append(str(out / "policy.json"))
            self.sections["policies"] = policy_section(report)
            if report.mandatory_violations or self.verbose:
                policy_block = (len(self.details), report)
                self.details.append(report.render())
            if report.mandatory_violations:
                status = EXIT_POLICY

        from gpu_platform.preflight.fit.nodes import ModelError
        from gpu_platform.preflight.fit.errors import ChartError
        from gpu_platform.preflight.verdict import cost_section, fit_section

        try:
            with _step(self.err, "rendering the charts and checking the cluster fit", not self.json):
                fit_result = fit.result()
        except (ChartError, ModelError) as exc:
            self.details.append(costs.report(None))  # the bill without chart storage (listed as not modelled)
            costs.finish()
            self.sections["cost"] = cost_section(costs.json_path)
            return self.fail(EXIT_CONFIG, str(exc), out)
        self.sections["fit"] = fit_section(fit_result)
        if fit_result.failed or fit_result.not_rendered or self.verbose:
            self.details.append(fit_result.render(verbose=self.verbose))
        files.append(f"{len(fit_result.files)} rendered release(s) under {out / 'rendered'} and {out / 'fit.json'}")
        if fit_result.failed:
            status = EXIT_POLICY

        bill = fit.then_result()
        with _step(self.err, "drawing the cost chart", not self.json):
            files.append(costs.finish())
        self.sections["cost"] = cost_section(costs.json_path)
        if costs.refused is not None:
            # A budget verdict on another region's prices is no verdict: refused, naming the type and region.
            status = EXIT_POLICY
            if policy_block is not None:
                # The cost policies quote the same refusal: the bill below gives it in full, with the fix, once.
                at, report = policy_block
                self.details[at] = report.render(explained={str(costs.refused): "the cost estimate below"})
        # The bill is always shown, after the verdict: line by line with its assumptions, the budget
        # comparison and the catalog's age (what a finance reviewer checks).
        self.details.append(bill)
        self.review(out)
        if self.verbose:
            self.details.append("Wrote " + one_line("; ".join(files)))
        code = self.finish(status, out)
        if args.rehearse and args.engine == "pulumi":
            from gpu_platform.rehearsal.cli import rehearse_with_engine

            rehearsed = rehearse_with_engine(args.stack, self.cfg, fit_result, out,
                                             self.err if self.json else self.out_console, project.root,
                                             chart_dirs[0], getattr(self, "policy_config", None))
            return max(code, rehearsed)
        if args.rehearse:
            from gpu_platform.rehearsal.cli import rehearse_after_preflight

            # The rehearsal runs whatever preflight's verdict: where they disagree, one of them is wrong.
            rehearsed = rehearse_after_preflight(args.stack, self.cfg, plan, fit_result, out,
                                                 self.err if self.json else self.out_console)
            code = max(code, rehearsed)
        return code

    def review(self, out: Path) -> None:
        """The reviewer's block (-v or --base) and, with --base, the diff against the base run, first."""
        from gpu_platform.preflight import review

        doc = review.review(self.cfg, self.policy_config, self.policy_config_file, self.sections.get("cost"))
        self.sections["review"] = doc
        if self.args.base and self.base is not None:
            self.sections["base_diff"] = review.diff(self.base, out)
            self.details.insert(0, review.render_diff(self.sections["base_diff"]))
        if self.verbose or self.args.base:
            self.details.insert(1 if self.args.base and "base_diff" in self.sections else 0, review.render_review(doc))


def with_chart_costs(policy_config: Optional[dict[str, Any]], costs: Any) -> Optional[dict[str, Any]]:
    """The policy config with monthly-cost-ceiling's chartStorageGib and chartLoadBalancers set to what the
    rendered charts create (unchanged when the charts were not rendered). A copy; the stack's own settings
    of the policy are kept (an enforcement level alone becomes {enforcementLevel: ...})."""
    if costs.chart_storage_gib is None:
        return policy_config
    out = dict(policy_config or {})
    name = "monthly-cost-ceiling"
    entry = out.get(name)
    entry = dict(entry) if isinstance(entry, dict) else ({"enforcementLevel": entry} if isinstance(entry, str) else {})
    entry.update(chartStorageGib=round(float(costs.chart_storage_gib), 6),
                 chartLoadBalancers=int(costs.chart_load_balancers or 0))
    out[name] = entry
    return out


def _out_problem(text: str) -> Optional[str]:
    """Why --out cannot be preflight's output folder (None when it can): checked before anything runs.
    An empty or blank --out is a mistake (a shell variable that was not set), not the default build/."""
    if not text.strip():
        return "an empty folder name; give a folder, or leave --out out for build/ in the project"
    if _UNUSABLE_PATH.search(text):
        return "a folder name without control characters"
    out = Path(text)
    existing = out
    try:
        while not existing.exists():
            if existing.parent == existing:
                break
            existing = existing.parent
    except OSError as exc:  # ENAMETOOLONG, ELOOP: os.stat refuses the path itself
        return f"not a usable path ({exc.strerror or exc})"
    if existing.exists() and not existing.is_dir():
        return f"{existing} is a file, not a folder" if existing == out else f"{existing} is a file, so {out} cannot be made"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable"
    return None


def _shown_path(text: str) -> str:
    """--out as a message shows it: quoted when blank or odd (escapes visible), cut when very long."""
    shown = repr(text) if not text.strip() or _UNUSABLE_PATH.search(text) else one_line(text)
    return shown if len(shown) <= 120 else f"{shown[:100]}... ({len(text)} characters)"


# NUL cannot be in a path at all; other control characters in a folder name are a pasting accident.
_UNUSABLE_PATH = re.compile(r"[\x00-\x1f\x7f]")


def _watchdog(seconds: float, stack: str) -> None:
    """End the whole run after `seconds`, with a message, stopping the policy pack and removing its files."""
    def expire() -> None:
        print(f"preflight {one_line(stack)}: gave up after {seconds:g}s (--timeout): no verdict; a step ran away (run with -v "
              "to see which step was last), or raise --timeout", file=sys.stderr)
        _exit_now(EXIT_POLICY)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


def _on_signal(signum: int, _frame: Any) -> None:
    """SIGTERM/SIGINT/SIGHUP: stop the policy pack and the chart child, remove every temporary file, exit 128+N."""
    import signal

    name = signal.Signals(signum).name
    print(f"preflight: interrupted ({name}); stopping the policy pack and removing temporary files", file=sys.stderr)
    _exit_now(128 + signum)


def _run_cli() -> int:
    """The console entry: a closed pipe (`preflight aws-prod | head`) ends quietly, not in a traceback."""
    try:
        code = main(deadline=True)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python flushes stdout again at exit
        return 0
    except KeyboardInterrupt:  # Ctrl-C: the exit hooks stop the policy pack; no traceback
        print("preflight: interrupted", file=sys.stderr)
        return 130


def _exit_now(code: int) -> None:
    """End the process without tearing the interpreter down: freeing the SDKs' objects one by one takes
    over a second and nothing depends on it. By now every file is written and closed and the chart
    child reaped; the streams are flushed and the exit hooks (the policy pack's) run as on a normal exit.
    Idle threads (asyncio's executor) end with the process, like the daemon threads."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (BrokenPipeError, ValueError):  # a closed pipe was already handled in _run_cli
            pass
    import atexit

    atexit._run_exitfuncs()
    os._exit(code)


def cli() -> None:
    """`gpu-platform-preflight` and `python -m gpu_platform.preflight`."""
    import gc

    # The program imports the cloud SDKs (hundreds of thousands of objects): with the default
    # thresholds the collector walks that heap again and again for cycles that are never garbage
    # (over a second of a run). Fewer collections, as mypy does; only for the command, not its importers.
    gc.set_threshold(100_000, 50, 50)
    import signal

    # SIGHUP too: a closed terminal or SSH session must not leave the pack running and its files behind.
    for sig in STOP_SIGNALS:
        signal.signal(sig, _on_signal)
    _exit_now(_run_cli())


if __name__ == "__main__":
    cli()
