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
from preflight.runner import ROOT, ProgramError, load_stack, load_stack_file, run_program

EXIT_CONFIG = 2
EXIT_POLICY = 3


class BackgroundAnalyzer:
    """Starts the policy pack in a thread so its start-up overlaps the program run."""

    def __init__(self, stack: str, stack_config: dict[str, str]):
        from preflight.analyzer import Analyzer

        self.analyzer = Analyzer(stack=stack, stack_config=stack_config)
        self.error: BaseException | None = None
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
            return self.analyzer.analyze(plan, policy_config, where=f"policy config of stack {plan.stack}")
        finally:
            self.close()

    def close(self) -> None:
        self.thread.join()
        self.analyzer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m preflight", description=__doc__.splitlines()[0])
    parser.add_argument("stack", nargs="?", help="stack name: stacks/Pulumi.<stack>.yaml")
    parser.add_argument("--stack-file", help="plan this stack file instead (its name gives the stack name)")
    parser.add_argument("--out", default=str(ROOT / "build"), help="output folder (default: build/)")
    parser.add_argument("--no-policies", action="store_true", help="skip the policy pack")
    parser.add_argument("--policy-config", help="policy config file (default: stacks/policy.<stack>.yaml if present)")
    parser.add_argument("--quiet", action="store_true", help="print only the summary lines")
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
    except FileNotFoundError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        cfg = parse_config(stack_input.raw, args.stack)
    except ConfigError as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_CONFIG

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

    try:
        plan = run_program(stack_input)
    except ProgramError as exc:
        print(f"preflight: the program failed: {exc}", file=sys.stderr)
        if policies is not None:
            policies.close()
        return 1

    out = Path(args.out) / args.stack
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan.to_json(), indent=2, sort_keys=True) + "\n")
    from preflight.mocks import SENSITIVE

    written = artifacts.write(plan, out / "artifacts", SENSITIVE)
    if not args.quiet:
        print(render_plan(plan))
        print()
    print(f"Wrote {out / 'plan.json'} and {len(written)} artifact(s) under {out / 'artifacts'}")

    from preflight.costs import CostReport

    costs = CostReport(cfg, out)
    print(costs.summary)

    status = 0
    if policies is not None:
        from preflight.analyzer import PolicyConfigError, PolicyPackError

        try:
            report = policies.analyze(plan, policy_config)
        except PolicyConfigError as exc:
            print(f"preflight: {exc}", file=sys.stderr)
            return EXIT_CONFIG
        except PolicyPackError as exc:
            print(f"preflight: the policy pack failed: {exc}", file=sys.stderr)
            return 1
        (out / "policy.json").write_text(json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")
        print()
        print(report.render())
        if report.mandatory_violations:
            print(f"preflight: {report.mandatory_violations} mandatory policy violation(s)", file=sys.stderr)
            status = EXIT_POLICY

    print(costs.finish())
    print(f"\npreflight {args.stack}: {'OK' if status == 0 else 'FAILED'} in {time.monotonic() - started:.2f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
