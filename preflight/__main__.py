"""`python -m preflight <stack>`: what a stack creates, whether it passes policy, what it costs.

Offline and without credentials: the real program runs under Pulumi's mocks (preview mode), the
policy pack runs in its own process through the analyzer protocol, and costs come from the
catalog. Exit codes: 0 ok, 2 bad stack config, 3 a mandatory policy violated, 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from components.config import ConfigError, parse_config
from preflight import artifacts
from preflight.report import render_plan
from preflight.runner import ROOT, ProgramError, StackFileError, StackNotFound, load_stack, load_stack_file, run_program

EXIT_CONFIG = 2
EXIT_POLICY = 3
EXIT_USAGE = 4  # a stack or file that does not exist, bad arguments


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2, which here means a bad stack config
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


class BackgroundAnalyzer:
    """Starts the policy pack in a thread so its start-up overlaps the program run."""

    def __init__(self, stack: str, stack_config: dict[str, str]):
        from preflight.analyzer import Analyzer

        self.analyzer = Analyzer(stack=stack, stack_config=stack_config)
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["charts"]:  # `python -m preflight charts pull|list`: the chart cache
        from preflight.fit.pull import main as charts_main

        return charts_main(argv[1:])
    parser = _Parser(prog="python -m preflight", description=__doc__.splitlines()[0])
    parser.add_argument("stack", nargs="?", help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument("--stack-file", help="plan this stack file instead (its name gives the stack name)")
    parser.add_argument("--out", default=str(ROOT / "build"), help="output folder (default: build/)")
    parser.add_argument("--no-policies", action="store_true", help="skip the policy pack")
    parser.add_argument("--policy-config", help="policy config file (default: stacks/policy.<stack>.yaml if present)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary lines")
    parser.add_argument("--charts", action="append", metavar="DIR",
                        help="chart directory to render from (repeatable; default: $GPU_PLATFORM_CHARTS or "
                             "../shared/charts; fill one with `python -m preflight charts pull`)")
    parser.add_argument("--allow-missing-chart", action="append", default=[], metavar="NAME",
                        help="report releases of this chart as NOT RENDERED instead of failing (repeatable)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    if bool(args.stack) == bool(args.stack_file):
        parser.error("give a stack name or --stack-file, not both")

    try:
        if args.stack_file:
            stack_input = load_stack_file(Path(args.stack_file))
            args.stack = stack_input.stack
        else:
            stack_input = load_stack(args.stack)
    except StackNotFound as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except StackFileError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = parse_config(stack_input.raw, args.stack, source=stack_input.source,
                           secret_keys=stack_input.bare_secret_keys)
    except ConfigError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from components.config import config_warnings

    for warning in config_warnings(cfg):
        print(f"preflight: warning: {warning}", file=sys.stderr)

    policies = None
    if not args.no_policies:
        from preflight.analyzer import PolicyConfigError, load_policy_config

        try:
            policy_config = load_policy_config(args.stack, args.policy_config)
        except (PolicyConfigError, FileNotFoundError) as exc:
            print(f"preflight: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        # The pack takes a second to start: start it now, while the program runs.
        policies = BackgroundAnalyzer(args.stack, stack_input.config)
        from preflight.analyzer import policy_config_path

        # Messages about the policy config name the file read.
        shown = args.policy_config or (policy_config_path(args.stack) if policy_config is not None else None)
        policies.where = f"policy config {shown}" if shown else None

    try:
        plan = run_program(stack_input)
    except ProgramError as exc:
        print(f"preflight: the program failed: {exc}", file=sys.stderr)
        if policies is not None:
            policies.close()
        return 1

    out = Path(args.out) / args.stack
    if out.resolve().parent != Path(args.out).resolve():  # stack names are validated; belt and braces
        print(f"preflight: stack name {args.stack!r} would write outside {args.out}", file=sys.stderr)
        return EXIT_USAGE
    out.mkdir(parents=True, exist_ok=True)
    # Render the charts and check the fit in a thread while the policy pack analyses the plan.
    from preflight.fit.run import FitWorker, default_chart_dirs

    chart_dirs = [Path(d) for d in args.charts] if args.charts else default_chart_dirs()
    missing_dirs = [str(d) for d in chart_dirs if not d.is_dir()]
    if missing_dirs:
        print(f"preflight: chart directory {', '.join(missing_dirs)} does not exist "
              "(--charts DIR, $GPU_PLATFORM_CHARTS; fill one with `python -m preflight charts pull --dest DIR`)",
              file=sys.stderr)
        if policies is not None:
            policies.close()
        return EXIT_USAGE
    from preflight.costs import CostReport

    # Printed once the charts are rendered: the storage they request is part of the bill. The fit
    # thread prices it as soon as the charts are rendered, so the cost chart is drawn (in a child
    # process) while the policy pack is still analysing.
    costs = CostReport(cfg, out, plan)
    fit = FitWorker(cfg, plan, out, chart_dirs, args.allow_missing_chart,
                    then=lambda result: costs.report([r for r in result.releases if r.rendered]))
    (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n")
    from preflight.mocks import SENSITIVE

    written = artifacts.write(plan, out / "artifacts", SENSITIVE)
    if not args.quiet:
        print(render_plan(plan))
        print()
    print(f"Wrote {out / 'plan.json'} and {len(written)} artifact(s) under {out / 'artifacts'}")

    status = 0
    if policies is not None:
        from preflight.analyzer import PolicyConfigError, PolicyPackError, PolicyPackIncomplete, PolicyTimeout

        try:
            report = policies.analyze(plan, policy_config)
        except PolicyConfigError as exc:
            print(f"preflight: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except (PolicyPackIncomplete, PolicyTimeout) as exc:  # no verdict is a failed verdict
            print(f"preflight: {exc}", file=sys.stderr)
            return EXIT_POLICY
        except PolicyPackError as exc:
            print(f"preflight: the policy pack failed: {exc}", file=sys.stderr)
            return 1
        (out / "policy.json").write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
        print()
        print(report.render())
        if report.mandatory_violations:
            print(f"preflight: {report.mandatory_violations} mandatory policy violation(s)", file=sys.stderr)
            status = EXIT_POLICY

    from preflight.fit.nodes import ModelError
    from preflight.fit.render import ChartError

    try:
        fit_result = fit.result()
    except (ChartError, ModelError) as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        print(costs.report(None))  # the bill without chart storage (listed as not modelled)
        print(costs.finish())
        return EXIT_CONFIG
    print()
    print(fit_result.render())
    print(f"Wrote {len(fit_result.files)} rendered release(s) under {out / 'rendered'} and {out / 'fit.json'}")
    if fit_result.failed:
        print(f"preflight: {len(fit_result.report.problems)} cluster fit problem(s)", file=sys.stderr)
        status = EXIT_POLICY

    print()
    print(fit.then_result())
    print(costs.finish())
    print(f"\npreflight {args.stack}: {'OK' if status == 0 else 'FAILED'} in {time.monotonic() - started:.2f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
