"""Shared fixtures: run the real program under preflight's mocks and look at what it registered."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gpu_platform.preflight.runner import Plan, load_stack, run_program, stack_input_from_mapping  # noqa: E402

# Version support moves with the calendar: tests judge the shipped stacks on the day they were reviewed, so a
# later run does not fail for the date alone (preflight and `pulumi up` use the real date).
os.environ.setdefault("GPU_PLATFORM_TODAY", "2026-11-23")


def pytest_report_header(config) -> list[str]:
    """Which chart folder the chart tests read, first thing in the run (a fresh clone has none)."""
    from gpu_platform.preflight.fit.pull import HOW_TO_FILL, missing_from, where_charts_come_from
    from gpu_platform.preflight.fit.run import default_chart_dirs

    dirs = default_chart_dirs(ROOT)
    charts, targets = missing_from(dirs)
    if not charts and not targets:
        return [f"charts: {', '.join(map(str, dirs))}"]
    return [f"charts: {len(charts)} pinned charts and {len(targets)} kustomize installs missing from "
            f"{', '.join(map(str, dirs))}; tests that need them skip or fail. Looked in:",
            where_charts_come_from(ROOT), HOW_TO_FILL]


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of a shipped stack file (a fresh copy to mutate in a test)."""
    doc = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())
    return copy.deepcopy(doc["config"])


def plan_stack(stack: str) -> Plan:
    return run_program(load_stack(stack))


def plan_config(config: dict[str, Any], stack: str = "test") -> Plan:
    """Run the program for a config mapping written like a stack file's `config:`."""
    return run_program(stack_input_from_mapping(stack, config))


@pytest.fixture(scope="session")
def linode_dev_plan() -> Plan:
    return plan_stack("linode-dev")
