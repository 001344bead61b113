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
