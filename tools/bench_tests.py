"""`make bench-tests`: the wall time of the two test commands against their targets.

Runs `make check` (the quick lane) and `make test` (the whole suite, what CI runs) one after the other, each
in a fresh process with its prerequisites already built (make bench-tests builds them first, untimed), and
prints the time, pytest's own summary line, the date, the machine and its load average. The figures the
README gives come from here; build/bench-tests.json keeps the last run, the logs sit beside it.

Standard library only (it runs make, which builds the virtualenvs). Exit 1 if a command failed or went
over its target: targets are checked here, never in a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Targets on the project's 2-core machine (issue 31): seconds.
TARGETS = {"check": 180, "test": 1200}
SUMMARY = re.compile(r"^=*\s*(\d+ (passed|failed|error|errors|skipped|deselected).*?) in [\d.]+s", re.M)


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = None
    try:
        kib = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")).split()[1])
        mem_gib = round(kib / 1024**2, 1)
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    return {"cores": os.cpu_count(), "cpu": cpu, "memoryGiB": mem_gib, "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}"}


def run(target: str, out: Path) -> dict:
    log = out / f"{target}.log"
    load_before = os.getloadavg()
    start = time.perf_counter()
    with log.open("w") as fh:
        code = subprocess.run(["make", target], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT).returncode
    seconds = round(time.perf_counter() - start, 1)
    text = log.read_text(errors="replace")
    found = SUMMARY.findall(text)
    return {"target": target, "seconds": seconds, "targetSeconds": TARGETS[target], "exit": code,
            "pytest": found[-1][0] if found else "(no pytest summary line)",
            "loadAverageBefore": [round(x, 2) for x in load_before],
            "loadAverageAfter": [round(x, 2) for x in os.getloadavg()], "log": str(log.relative_to(ROOT))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench-tests", description=__doc__.splitlines()[0])
    parser.add_argument("targets", nargs="*", help=f"which commands to time, of {', '.join(TARGETS)} (default: both, in that order)")
    args = parser.parse_args(argv)
    unknown = [t for t in args.targets if t not in TARGETS]
    if unknown:
        parser.error(f"unknown target(s) {', '.join(unknown)}: choose from {', '.join(TARGETS)}")
    args.targets = args.targets or list(TARGETS)
    out = ROOT / "build" / "bench-tests"
    out.mkdir(parents=True, exist_ok=True)
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    info = machine()
    print(f"bench-tests {when}, {info['cores']} cores ({info['cpu']}), {info['memoryGiB']} GiB, Python {info['python']}",
          flush=True)
    results = []
    for target in args.targets:
        print(f"  make {target} ...", flush=True)
        r = run(target, out)
        results.append(r)
        over = r["seconds"] > r["targetSeconds"]
        verdict = "FAILED" if r["exit"] else ("OVER TARGET" if over else "ok")
        print(f"  make {target:<6} {r['seconds']:>7.0f} s  (target {r['targetSeconds']} s)  exit {r['exit']}  "
              f"{r['pytest']}  load {r['loadAverageBefore'][0]:.1f}->{r['loadAverageAfter'][0]:.1f}  {verdict}", flush=True)
    doc = {"date": when, "machine": info, "results": results}
    (out.parent / "bench-tests.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(f"  {out.parent / 'bench-tests.json'}")
    return 1 if any(r["exit"] or r["seconds"] > r["targetSeconds"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
