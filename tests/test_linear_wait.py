"""Preflight's linear wait for outstanding outputs (gpu_platform/preflight/linear_wait.py) plans exactly what the
SDK's own wait_for_rpcs plans, and is read against the SDK that requirements.txt pins."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import os
import re
import subprocess
import sys
import textwrap
from typing import Any, Iterator

import pulumi
import pytest
from pulumi.runtime import stack as sdk_stack

from gpu_platform.preflight import linear_wait
from gpu_platform.preflight.runner import Plan, ProgramError, load_stack, run_program, stack_input_from_mapping
from tests.conftest import ROOT, shipped_plan

SHIPPED_STACKS = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in (ROOT / "stacks").glob("Pulumi.*.yaml"))

SDK_WAIT = sdk_stack.wait_for_rpcs


@contextlib.contextmanager
def sdk_wait() -> Iterator[None]:
    """run_program with the SDK's own wait_for_rpcs (the linear wait's context manager made a no-op)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(linear_wait, "linear_output_wait", contextlib.nullcontext)
        yield


def everything(plan: Plan) -> dict[str, Any]:
    """All a plan records, in an order that does not depend on when each registration's outputs resolved."""
    return {
        "json": plan.to_json(),
        "warnings": sorted(plan.warnings),
        "resources": sorted(
            ({"urn": r.urn, "type": r.type, "name": r.name, "parent": r.parent, "custom": r.custom,
              "provider": r.provider, "dependencies": sorted(r.dependencies),
              "property_dependencies": {k: sorted(v) for k, v in r.property_dependencies.items()},
              "wire_inputs": r.wire_inputs, "outputs": r.outputs, "options": r.options}
             for r in plan.resources), key=lambda r: r["urn"]),
        "outputs": plan.outputs,
    }


def test_the_installed_sdk_is_the_one_read() -> None:
    """An SDK upgrade (requirements.txt) stops here until someone reads its wait_for_rpcs again: the linear
    wait copies its RPC drain and mirrors its outputs loop. Until then run_program keeps the SDK's own."""
    pinned = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.in").read_text(), re.M)
    assert pinned, "requirements.in pins no pulumi version"
    assert pinned.group(1) == importlib.metadata.version("pulumi") == linear_wait.SDK_VERSION, (
        f"requirements.in pins pulumi {pinned.group(1)}, .venv has {importlib.metadata.version('pulumi')}, "
        f"gpu_platform/preflight/linear_wait.py was read against {linear_wait.SDK_VERSION}: read the new SDK's "
        "pulumi/runtime/stack.py wait_for_rpcs, bring linear_wait.py in line, then update SDK_VERSION and "
        "SDK_SOURCE_SHA256")
    assert linear_wait.sdk_source_sha256() == linear_wait.SDK_SOURCE_SHA256, (
        "pulumi.runtime.stack.wait_for_rpcs is not the one gpu_platform/preflight/linear_wait.py was read "
        "against: read it, bring linear_wait.py in line, then update SDK_SOURCE_SHA256")


@pytest.mark.parametrize("stack", SHIPPED_STACKS)
def test_a_shipped_stack_plans_the_same_with_the_sdks_wait(stack: str) -> None:
    """Every resource, input, option, dependency and stack output of the shipped stack, and every warning,
    the same with the SDK's wait as with the linear one (the session's shared plan, planned with it)."""
    linear = everything(shipped_plan(stack, os.environ.get("GPU_PLATFORM_TODAY")))
    with sdk_wait():
        sdk = everything(run_program(load_stack(stack)))
    assert sdk == linear


def test_the_linear_wait_is_used_only_during_the_run() -> None:
    seen = []

    def program() -> None:
        seen.append(sdk_stack.wait_for_rpcs)

    run_program(stack_input_from_mapping("wait-test", {"gpu-platform:cloud": "gcp"}), program=program)
    assert seen == [linear_wait.wait_for_rpcs]
    assert sdk_stack.wait_for_rpcs is SDK_WAIT

    def failing() -> None:
        raise pulumi.RunError("refused")

    with pytest.raises(ProgramError, match="refused"):
        run_program(stack_input_from_mapping("wait-test", {"gpu-platform:cloud": "gcp"}), program=failing)
    assert sdk_stack.wait_for_rpcs is SDK_WAIT


def test_a_changed_sdk_keeps_its_own_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    monkeypatch.setattr(linear_wait, "SDK_SOURCE_SHA256", "0" * 64)
    run_program(stack_input_from_mapping("wait-test", {"gpu-platform:cloud": "gcp"}),
                program=lambda: seen.append(sdk_stack.wait_for_rpcs))
    assert seen == [SDK_WAIT]


LATE_APPLIES: list[str] = []


def late_outputs_program() -> None:
    """Outputs that exist only once others resolve, a resource registered from an apply after a sleep, a
    chain of applies, and applies started from applies that nothing awaits (they run only if the wait sees the
    outputs added while it waits): all after the program's body has returned, so only the final wait sees them."""

    async def later(value: str) -> str:
        for _ in range(5):
            await asyncio.sleep(0)
        return value

    def register(name: str) -> str:
        pulumi.CustomResource("test:index:Late", name, {"value": name})
        return name

    chain = pulumi.Output.from_input(later("x"))
    for i in range(30):
        chain = chain.apply(lambda v, i=i: pulumi.Output.from_input(later(f"{v}{i}")))
    chain.apply(register)
    for i in range(50):
        pulumi.Output.from_input(later(f"fan-{i}")).apply(
            lambda v: pulumi.Output.from_input(later(v)).apply(register))
    async def slowly(value: str) -> str:
        await asyncio.sleep(0.02)  # longer than the SDK's shutdown handshake, during which tasks still run
        return value

    for i in range(20):
        # Each apply starts the next and returns at once: the next output is only in SETTINGS.outputs.
        def step(v: str, depth: int = 0) -> None:
            if depth < 10:
                pulumi.Output.from_input(slowly(v)).apply(lambda w: step(w, depth + 1))
            else:
                LATE_APPLIES.append(v)
        pulumi.Output.from_input(later(f"unawaited-{i}")).apply(step)
    pulumi.export("chain", chain)


def test_the_same_plan_for_outputs_added_while_waiting() -> None:
    """Resources registered and outputs created after the program's body returned are in the plan, the same
    with both waits."""
    stack_input = stack_input_from_mapping("wait-test", {"gpu-platform:cloud": "gcp"})
    LATE_APPLIES.clear()
    linear = everything(run_program(stack_input, program=late_outputs_program, preview=False))
    linear_applies = sorted(LATE_APPLIES)
    LATE_APPLIES.clear()
    with sdk_wait():
        sdk = everything(run_program(stack_input, program=late_outputs_program, preview=False))
    assert linear == sdk
    assert linear_applies == sorted(LATE_APPLIES) == sorted(f"unawaited-{i}" for i in range(20))
    assert len([r for r in linear["resources"] if r["type"] == "test:index:Late"]) == 51
    assert linear["json"]["outputs"]["chain"] == "x" + "".join(str(i) for i in range(30))


class Boom(Exception):
    pass


def failing_outputs_program(raised: type[BaseException] = Boom) -> None:
    """One output fails a few steps after the program's body returned, with many others still pending."""

    async def later(value: str, steps: int) -> str:
        for _ in range(steps):
            await asyncio.sleep(0)
        return value

    def boom(_: str) -> str:
        raise raised("the apply failed")

    for i in range(40):
        pulumi.Output.from_input(later(f"slow-{i}", 20)).apply(lambda v: v)
    pulumi.Output.from_input(later("fails", 3)).apply(boom)


@pytest.mark.parametrize("wait", ["linear", "sdk"])
def test_a_failed_output_raises_its_own_error(wait: str) -> None:
    """The wait stops at the failed output and raises its exception, with either wait; the SDK's is restored."""
    with sdk_wait() if wait == "sdk" else contextlib.nullcontext(), pytest.raises(Boom, match="the apply failed"):
        run_program(stack_input_from_mapping("wait-test", {"gpu-platform:cloud": "gcp"}),
                    program=failing_outputs_program)
    assert sdk_stack.wait_for_rpcs is SDK_WAIT


@pytest.mark.parametrize("raised", ["Boom", "KeyboardInterrupt"])
def test_a_failed_program_is_reported_once_not_again_for_each_output_it_left(raised: str) -> None:
    """A program stopped by an exception (an apply's, or Ctrl-C) leaves its other outputs pending. The process
    that ran it reports the error once: asyncio's default handler printed "Task was destroyed but it is pending!"
    for each of them once the next run let go of them (124 lines after `make check`'s last dot). The run's event
    loop is closed."""
    script = textwrap.dedent(f"""
        import asyncio
        import gc
        from gpu_platform.preflight.runner import run_program, stack_input_from_mapping
        from tests.test_linear_wait import Boom, failing_outputs_program

        loops = []
        real_new_event_loop = asyncio.new_event_loop
        asyncio.new_event_loop = lambda: loops.append(real_new_event_loop()) or loops[-1]
        try:
            run_program(stack_input_from_mapping("wait-test", {{"gpu-platform:cloud": "gcp"}}),
                        program=lambda: failing_outputs_program({raised}))
        except {raised}:
            print("failed once")
        print("pending", sum(not t.done() for t in asyncio.all_tasks(loops[0])), "closed", loops[0].is_closed())
        del loops[:]
        # As a test worker goes on: the next run lets go of what the failed one left, and it is collected.
        run_program(stack_input_from_mapping("next", {{"gpu-platform:cloud": "gcp"}}), program=lambda: None)
        gc.collect()
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "failed once"
    pending, closed = re.fullmatch(r"pending (\d+) closed (\w+)", proc.stdout.splitlines()[1]).groups()
    assert int(pending) > 40, "the program left its slow outputs pending"
    assert closed == "True"
    assert "Task was destroyed" not in proc.stderr and "never retrieved" not in proc.stderr, proc.stderr[:2000]
