"""`python -m gpu_platform.rehearsal.bench [stack ...]`: the wall time of `preflight STACK --rehearse`
per stack, in a fresh process, once (a rehearsal takes minutes). Target (issue 20): under 3 minutes per
stack on a 2-core machine with the components built. Without the components it says so and times nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from gpu_platform.preflight.runner import stack_names
from gpu_platform.rehearsal import binaries

ROOT = Path(__file__).resolve().parents[2]
TARGET_S = 180.0


def main(stacks: list[str]) -> int:
    gone = binaries.missing(binaries.CONTROL_PLANE + binaries.CONTROLLERS)
    if gone:
        print(f"rehearsal bench: not timed: {binaries.MissingBinaries(gone)}")
        return 0
    stacks = stacks or stack_names(ROOT / "stacks")
    out = ROOT / "build" / "bench-rehearsal"
    print(f"{'stack':<16} {'rehearsal':>10}  exit  scenarios  target {TARGET_S:.0f}s")
    slow = 0
    for stack in stacks:
        start = time.perf_counter()
        code = subprocess.run([sys.executable, "-m", "gpu_platform.preflight", stack, "--rehearse", "--no-policies", "--quiet",
                               "--out", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        seconds = time.perf_counter() - start
        try:
            doc = json.loads((out / stack / "rehearsal.json").read_text())
            verdicts = " ".join(f"{s['name']}={s['status']}" for s in doc["scenarios"])
        except (OSError, ValueError, KeyError):
            verdicts = "(no report)"
        ok = seconds < TARGET_S
        slow += not ok
        print(f"{stack:<16} {seconds:>9.1f}s  {code:>4}  {verdicts}  {'ok' if ok else 'SLOW'}")
    return 1 if slow else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
