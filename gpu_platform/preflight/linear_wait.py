"""A linear `wait_for_rpcs` for preflight's mock runs (the installed SDK's is quadratic in the outputs).

The Pulumi Python SDK (pulumi/runtime/stack.py `wait_for_rpcs`, 3.272.0; upstream pulumi/pulumi#22411) ends
every program by waiting for its outstanding outputs like this: take every task in `SETTINGS.outputs`,
`asyncio.wait(them, FIRST_COMPLETED)`, await the finished ones, put the rest back, repeat. Each round adds and
removes a done-callback on every pending task, and a round ends as soon as one task finishes, so a program
with n pending outputs whose applies finish a few at a time costs n x rounds callbacks: a shipped stack's
plan waited ~230 rounds on ~500 tasks, 115,000 add_done_callback calls, about a third of the plan's time.

`wait_for_rpcs` here does the same with one done-callback per task: finished tasks queue up in the order they
finish and are awaited there. Same semantics: the RPCs are drained exactly as the SDK does (its own code);
outputs added while waiting are waited for too; a finished task is awaited, so a failed or cancelled output
raises its own exception and the wait stops there, leaving the tasks not yet finished out of `SETTINGS.outputs`
as the SDK does; the RPC/outputs cycle repeats until no RPC remains. One difference, in an order the SDK leaves
undefined: when several outputs fail in the same round the SDK raises whichever comes first in a Python set
(memory-address order); this raises the one that finished first.

Used only inside `runner.run_program` (`linear_output_wait()`), restored after; an installed SDK whose
`wait_for_rpcs` is not the one read here (SDK_SOURCE_SHA256) is left as it is, and
tests/test_linear_wait.py fails until someone reads the new one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import hashlib
import inspect
from typing import Iterator

# The SDK this was read against (requirements.txt pins it) and the sha256 of
# inspect.getsource(pulumi.runtime.stack.wait_for_rpcs) there.
SDK_VERSION = "3.272.0"
SDK_SOURCE_SHA256 = "c0f9027f85ad09255ded0a1908033b490f76d303a3e40b50d3cf47a69265469d"


@functools.lru_cache(maxsize=1)
def sdk_source_sha256() -> str:
    from pulumi.runtime import stack

    return hashlib.sha256(inspect.getsource(stack.wait_for_rpcs).encode()).hexdigest()


async def _await_outputs() -> None:
    """Wait until SETTINGS.outputs has no pending task, including tasks added meanwhile; await each one as
    it finishes (a failed one raises). One done-callback per task."""
    from pulumi.runtime.settings import SETTINGS

    loop = asyncio.get_running_loop()
    finished: collections.deque[asyncio.Future] = collections.deque()
    watching: set[asyncio.Future] = set()
    wake: list[asyncio.Future] = []

    def on_done(task: asyncio.Future) -> None:
        finished.append(task)
        if wake and not wake[0].done():
            wake[0].set_result(None)

    while True:
        with SETTINGS.lock:
            # As the SDK does: take the set and clear it, so outputs added while we wait show up in it.
            fresh = list(SETTINGS.outputs)
            SETTINGS.outputs.clear()
        for task in fresh:
            if task not in watching:
                watching.add(task)
                task.add_done_callback(on_done)
        if not watching:
            return
        if not finished:
            wake.append(loop.create_future())
            try:
                await wake[0]
            finally:
                wake.clear()
        # Every task that has finished by now, as the SDK's round would see it, in the order they finished.
        while finished:
            task = finished.popleft()
            if task in watching:
                watching.discard(task)
                await task  # a failed or cancelled output raises here


async def wait_for_rpcs(await_all_outstanding_tasks: bool = True) -> None:
    """pulumi.runtime.stack.wait_for_rpcs (SDK 3.272.0) with the outputs waited for linearly."""
    from pulumi import log
    from pulumi.runtime import settings

    log.debug("Waiting for outstanding RPCs to complete")

    rpc_manager = settings._get_rpc_manager()
    while True:
        # The SDK's own RPC drain, unchanged.
        while len(rpc_manager.rpcs) > 0:
            await asyncio.sleep(0)
            if settings.excessive_debug_output:
                log.debug(f"waiting for quiescence; {len(rpc_manager.rpcs)} RPCs outstanding")
            try:
                await rpc_manager.rpcs.pop()
            except Exception as exn:
                if rpc_manager.unhandled_exception is not None:
                    cause = rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)
                    raise exn from cause
                raise

        if rpc_manager.unhandled_exception is not None:
            raise rpc_manager.unhandled_exception.with_traceback(rpc_manager.exception_traceback)

        log.debug("RPCs successfully completed")

        if await_all_outstanding_tasks:
            await _await_outputs()
            log.debug("All outstanding outputs completed.")

        if len(rpc_manager.rpcs) == 0:
            break


@contextlib.contextmanager
def linear_output_wait() -> Iterator[None]:
    """For the block only: the SDK's stack module ends a program with this module's wait_for_rpcs (its
    run_pulumi_func looks the name up when it runs). An SDK whose wait_for_rpcs is not the one this was read
    against keeps its own."""
    from pulumi.runtime import stack

    original = getattr(stack, "wait_for_rpcs", None)
    if original is None or sdk_source_sha256() != SDK_SOURCE_SHA256:
        yield
        return
    stack.wait_for_rpcs = wait_for_rpcs
    try:
        yield
    finally:
        stack.wait_for_rpcs = original
