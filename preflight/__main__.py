"""`python -m preflight <stack>`: what a stack creates, whether it passes policy, what it costs.

Offline and without credentials: the real program runs under Pulumi's mocks (preview mode), the
policy pack runs in its own process through the analyzer protocol, and costs come from the
catalog. Exit codes: 0 ok, 2 bad stack config, 3 a mandatory policy violated, 1 anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from components.config import ConfigError, parse_config
from preflight import artifacts
from preflight.report import render_plan
from preflight.runner import ROOT, ProgramError, load_stack, load_stack_file, run_program

EXIT_CONFIG = 2
EXIT_POLICY = 3


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

    try:
        plan = run_program(stack_input)
    except ProgramError as exc:
        print(f"preflight: the program failed: {exc}", file=sys.stderr)
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

    from preflight.costs import cost_section

    print(cost_section(cfg, out))

    status = 0
    if not args.no_policies:
        from preflight.analyzer import analyze_plan, load_policy_config

        policy_config = load_policy_config(args.stack, args.policy_config)
        report = analyze_plan(plan, policy_config)
        print()
        print(report.render())
        if report.mandatory_violations:
            print(f"preflight: {report.mandatory_violations} mandatory policy violation(s)", file=sys.stderr)
            status = EXIT_POLICY

    print(f"\npreflight {args.stack}: {'OK' if status == 0 else 'FAILED'} in {time.monotonic() - started:.2f}s")
    return status


if __name__ == "__main__":
    sys.exit(main())
