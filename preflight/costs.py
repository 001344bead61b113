"""The cost part of preflight: the stack's estimate, cost.json and the comparison chart.

The chart is drawn in a child process (`python -m preflight.costs`, the estimate piped in) so that
matplotlib's import and rendering run on the other core while the policy pack is analysed."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from components.config import StackConfig


class CostReport:
    def __init__(self, cfg: "StackConfig", out: Path):
        from costs import report
        from costs.catalog import load_catalog
        from costs.estimator import StackShape, estimate

        self.estimate = estimate(StackShape.from_config(cfg), load_catalog(cfg.catalog_overrides() or None))
        self.json_path = report.write_cost_json(self.estimate, out / "cost.json")
        self.png_path = out / "cost.png"
        self.summary = report.render_cost_summary(self.estimate)
        self._chart = subprocess.Popen([sys.executable, "-m", "preflight.costs", str(self.png_path)],
                                       stdin=subprocess.PIPE, stderr=subprocess.PIPE)
        self._chart.stdin.write(pickle.dumps(self.estimate))
        self._chart.stdin.close()

    def finish(self) -> str:
        """Wait for the chart; raise if it could not be drawn."""
        err = self._chart.stderr.read().decode()
        if self._chart.wait() != 0:
            raise RuntimeError(f"drawing {self.png_path} failed:\n{err}")
        return f"Wrote {self.json_path} and {self.png_path}"


def _draw_from_stdin(png: str) -> None:
    from costs import report

    est = pickle.load(sys.stdin.buffer)
    report.draw_cost_chart(est, report.default_alternatives(est), png)


if __name__ == "__main__":
    _draw_from_stdin(sys.argv[1])
