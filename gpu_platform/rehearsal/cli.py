"""`gpu-platform-preflight STACK --rehearse`: after preflight, the rehearsal of the same plan, rendered
releases and node model. Exit 0 if every check passed, 3 on any failure or a component not built."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpu_platform.rehearsal import binaries

EXIT_FAILED = 3


def rehearse_after_preflight(stack: str, cfg: Any, plan: Any, fit_result: Any, out: Path, console: Any,
                             timeout: float = 90.0) -> int:
    from gpu_platform.rehearsal.report import render
    from gpu_platform.rehearsal.run import rehearse

    try:
        result = rehearse(stack, cfg, plan, fit_result.releases, fit_result.model,
                          fit_result.report.to_json()["placements"], out, timeout=timeout)
    except binaries.MissingBinaries as exc:
        print(f"preflight: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("preflight: rehearsal interrupted; the control plane is stopped", file=sys.stderr)
        return 130
    doc = result.to_json()
    console.print()
    render(doc, console)
    console.print(f"  report: {out / 'rehearsal.json'}", highlight=False)
    return EXIT_FAILED if result.failed else 0


def rehearse_with_engine(stack: str, cfg: Any, fit_result: Any, out: Path, console: Any, root: Path,
                         charts: Path, policy_config: Any = None) -> int:
    """`--rehearse --engine pulumi` (`make rehearse STACK=... ENGINE=pulumi`): the stack's Kubernetes layer deployed
    by the real `pulumi up` onto a throwaway control plane with the stack's nodes (gpu_platform/rehearsal/engine.py;
    a cloud stack's cluster from its shim, shims.py), a second `up` that must change nothing, `destroy`, and what is
    left. Writes engine.json: every resource as the engine reported it, the parts not deployed with their reasons.
    Exit 3 when a step fails, the second `up` changes something, an object is left or the pack refuses the stack."""
    import json

    from gpu_platform.rehearsal import engine

    from gpu_platform.rehearsal.binaries import ENGINE

    missing = [p for p in (*(engine.engine_bin() / name for name in ENGINE), root / ".venv" / "bin" / "python")
               if not p.exists()]
    if missing:
        print(f"preflight: the engine is not built: {', '.join(map(str, missing))} missing "
              "(`make engine-build venv`)", file=sys.stderr)
        return EXIT_FAILED
    policy_file = None
    if getattr(cfg, "cloud", None) == "kubernetes":  # the pack judges a cloud's node pools, which a shim does not make
        policy_file = out / "policy-config.json"
        policy_file.write_text(json.dumps(policy_config or {}, sort_keys=True, default=str) + "\n")
    failures: list[str] = []
    run = engine.EngineRun(stack, cfg, fit_result.model, out / "engine", root, charts, policy_config=policy_file)
    try:
        with run:
            if run.policy_preview is not None and run.policy_preview.returncode != 0:
                failures.append("the policy preview failed: " + "; ".join(run.report.policy_violations or ["see logs"]))
            run.up()
            second = run.second_up()
            if second.returncode != 0:
                failures.append(f"the second `pulumi up` proposed changes: {run.report.second_up}")
            run.destroy()
            if run.report.left_behind:
                failures.append(f"{len(run.report.left_behind)} object(s) left after destroy")
    except engine.EngineError as exc:
        failures.append(str(exc).splitlines()[0])
    except KeyboardInterrupt:
        print("preflight: engine run interrupted; the control plane is stopped", file=sys.stderr)
        return 130
    if run.report.taken_over:
        failures.append("`pulumi up` took over object(s) the cluster already had, where users' provider (pulumi-kubernetes "
                        "4.29 and later) fails with AlreadyExists: " + ", ".join(run.report.taken_over))
    if run.report.claims_unprovisioned:  # filled when the run closes (its provisioner stops)
        failures.append("claim(s) no provisioner takes, which stay Pending on a cluster: "
                        + ", ".join(run.report.claims_unprovisioned))
    doc = {**run.report.to_json(), "failures": failures, "logs": str(run.log_dir / "pulumi.log")}
    (out / "engine.json").write_text(json.dumps(doc, indent=1) + "\n")
    console.print()
    console.print(f"Engine run of {stack} (pulumi up / up --expect-no-changes / destroy): "
                  f"{'FAILED' if failures else 'passed'}", highlight=False)
    for r in run.report.resources:
        if r["type"] == "kubernetes:helm.sh/v3:Release":
            console.print(f"  release {r['name']}: {Path(str(r.get('chart'))).name} {r.get('status')}", highlight=False)
    kinds: dict[str, int] = {}
    for r in run.report.resources:
        kinds[r["type"]] = kinds.get(r["type"], 0) + 1
    console.print(f"  {len(run.report.resources)} resources: " + ", ".join(f"{n} {t}" for t, n in sorted(kinds.items())),
                  highlight=False)
    for part, why in run.report.not_deployed.items():
        console.print(f"  NOT DEPLOYED {part}: {why}", highlight=False)
    for what in run.report.stood_in:
        console.print(f"  STOOD IN: {what}", highlight=False)
    if run.report.left_by_helm:
        console.print(f"  kept by `helm uninstall` by design (a namespace Helm created, a chart's crds/): "
                      f"{', '.join(run.report.left_by_helm)}", highlight=False)
    console.print(f"  the built provider (pulumi-kubernetes {engine.SKEW_REVIEWED_FOR[0]}) differs from users' "
                  f"({engine.SKEW_REVIEWED_FOR[1]}) in {len(engine.PROVIDER_SKEW)} known ways: providerSkew in the report",
                  highlight=False)
    for line in failures:
        console.print(f"  FAILED: {line}", highlight=False)
    console.print(f"  report: {out / 'engine.json'}", highlight=False)
    return EXIT_FAILED if failures else 0
