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
