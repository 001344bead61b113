"""The rehearsal clusters of a test session: one per stack, booted and installed once, kept up while the
tests of that stack run (tests are ordered by stack, conftest.py), then closed.

What a test reads comes from one of two places:
- the shipped run: every scenario (run.ALL_SCENARIOS), in order, on the stack as shipped, run once, when a
  test first reads it (the first test of a stack's group does). A test of the shipped stack reads its
  scenarios from that run: the same scenarios in the same order on the same cluster, so running them again
  would only repeat the work;
- a planted run: the test's scenarios on the same cluster with a bug planted (StackCluster.planted
  changes the installed objects, restarts a controller whose Configuration changed, and puts everything
  back afterwards). The scenarios run in the platform's own namespaces (the policies they test are bound
  to them) and delete what they create, as they do when they follow each other in one rehearsal.

A test that needs a control plane of its own (one that checks start-up or shutdown) starts it itself
and says why in its docstring. `@pytest.mark.rehearsal(stack=..., group=...)` puts a stack's planted tests
in an xdist group of their own (conftest.py): another worker boots a second cluster of the stack for them
and, reading nothing of the shipped run, never runs it (linode-dev's autoscaler drills: the stack's tests
would otherwise take twice as long as any other stack's on one worker).
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import fcntl
import functools
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from tests.conftest import HEAVY_SLOTS_DIR_ENV, ROOT, heavy_slots, plan_stack

if TYPE_CHECKING:
    from gpu_platform.rehearsal.run import Rehearsal, StackCluster

# The rehearsal and preflight modules are imported where they are used, not here: tests/test_suite_layout.py's small
# suites import this module for its slots and cluster registry in a dozen pytest processes of their own (a second of
# CPU each to import the rehearsal).


def _prepare(stack: str, config: Optional[dict], out: Path, example: Optional[Path] = None):
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.run import run_fit
    from gpu_platform.preflight.runner import load_stack, run_program, stack_input_from_mapping
    from tests.fit_support import CHARTS, need_charts

    need_charts()
    stack_input = stack_input_from_mapping(stack, config) if config is not None else load_stack(stack)
    cfg = parse_config(stack_input.raw, stack)
    plan = run_program(stack_input) if config is not None else plan_stack(stack)
    out.mkdir(parents=True, exist_ok=True)
    extra = {"example": example} if example is not None else {}
    fit = run_fit(cfg, plan, out, [CHARTS], base=ROOT, **extra)
    return cfg, plan, fit


@functools.lru_cache(maxsize=None)
def prepared(stack: str):
    """The shipped stack's config, plan and fit, computed once per test process (read-only: copy to change).
    Fit's output folder lives as long as the cache, the whole process: it is removed when the process exits."""
    out = Path(tempfile.mkdtemp(prefix=f"rehearsal-test-{stack}-"))
    atexit.register(shutil.rmtree, out, True)
    return _prepare(stack, None, out)


_PREPARED_CONFIGS: dict[str, Any] = {}


def _prepared_config(stack: str, config: dict):
    """Another config's config, plan and fit (a planted render), computed once per test process for each
    distinct config (two autoscaler tests plant the same 4-GPU pool): read-only, as prepared()'s."""
    key = json.dumps([stack, config], sort_keys=True, default=repr)
    if key not in _PREPARED_CONFIGS:
        out = Path(tempfile.mkdtemp(prefix=f"rehearsal-test-{stack}-"))
        atexit.register(shutil.rmtree, out, True)
        _PREPARED_CONFIGS[key] = _prepare(stack, copy.deepcopy(config), out)
    return _PREPARED_CONFIGS[key]


class Shared:
    """A stack's cluster of this test process and its shipped run: every scenario on the stack as shipped,
    run the first time a test reads it (a worker that only runs planted tests of the stack, a second group
    of them, never runs it)."""

    def __init__(self, cluster: StackCluster, out: Path):
        self.cluster, self.out = cluster, out
        self._shipped: Optional[Rehearsal] = None

    @property
    def shipped(self) -> Rehearsal:
        from gpu_platform.rehearsal.run import ALL_SCENARIOS

        if self._shipped is None:
            self._shipped = self.cluster.run(ALL_SCENARIOS)
        return self._shipped


# --- heavy slots: how many test processes boot and install a platform at once ---------------------------------
# A cluster's boot and install (hundreds of objects, Kubeflow's CRDs: kube-apiserver rebuilds its OpenAPI
# document after each) and an engine run's `pulumi up` are the suite's CPU-heaviest, most time-sensitive phases.
# Four of them at once on two cores (the first four groups of GROUP_ORDER on four workers) left the API servers
# answering too slowly for their clients: on CI (2026-11-29) the engine's provider gave up fetching the OpenAPI
# document after 32 s and 39 CRDs took over a minute to be served. A worker waits here for a slot instead; what
# runs on a cluster once it is installed (the scenarios, the autoscaler drills) is not held back.
_heavy_depth = 0  # this process's heavy() blocks open: one inside another takes no second slot


# Two engine runs at once (each `pulumi up` creating Kubeflow's, Argo's and kube-prometheus-stack's CRDs while the
# provider fetches the OpenAPI document again after each) failed twice on CI, never one beside a cluster's install:
# on 2026-11-29 the API server's 60 s request timeout; on 2026-11-30 Helm's fixed 60 s wait for kube-prometheus-stack's
# CRDs to be established (helm v3.18.6 pkg/action/install.go installCRDs) ran out while the other run's Argo CRDs took
# up to 104 s each to be created. Engine runs therefore take turns (ENGINE_RUN, below).
ENGINE_RUN = "engine-run"


_turns: set[str] = set()  # the kinds of phase (`alone`) whose turn this process holds


def holds_turn(alone: str) -> bool:
    """Whether this process is inside heavy(alone=`alone`): conftest.py's guard asks it as an engine run starts."""
    return alone in _turns


@contextlib.contextmanager
def heavy(interval: float = 0.5, alone: Optional[str] = None):
    """Held while a heavy phase runs: one of heavy_slots() lock files in the session's folder, taken with flock (freed
    by the kernel if the process dies). `alone`: a kind of phase of which only one may run at a time (ENGINE_RUN);
    its own lock is taken first, so a phase waiting for its turn holds no slot. A heavy() inside another of the same
    process holds nothing more (a second slot could be the last, or none be left); one that asks for a turn the outer
    one did not take is refused, as it would run without it. Outside a session with workers, or once its folder is
    gone, there is nothing to share and nothing waits."""
    global _heavy_depth
    if _heavy_depth and alone is not None and alone not in _turns:
        raise RuntimeError(f"heavy(alone={alone!r}) inside a heavy() that did not take that turn would run without "
                           f"it: take the turn in the outer heavy()")
    folder = os.environ.get(HEAVY_SLOTS_DIR_ENV)
    fds: list[int] = []
    took_turn = False
    try:
        if not _heavy_depth and folder and os.path.isdir(folder):
            if alone is not None:
                fds.append(os.open(Path(folder) / f"alone-{alone}", os.O_CREAT | os.O_RDWR, 0o600))
                while not _try_lock(fds[0]):
                    time.sleep(interval)
            slots: list[int] = []
            for i in range(heavy_slots()):
                fds.append(os.open(Path(folder) / f"slot-{i}", os.O_CREAT | os.O_RDWR, 0o600))
                slots.append(fds[-1])
            while not any(_try_lock(fd) for fd in slots):
                time.sleep(interval)
        if alone is not None and alone not in _turns:
            _turns.add(alone)
            took_turn = True
        _heavy_depth += 1
        try:
            yield
        finally:
            _heavy_depth -= 1
    finally:
        if took_turn:
            _turns.discard(alone)
        for fd in fds:
            os.close(fd)  # closing the descriptor releases its lock


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


_OPEN: dict[str, Shared] = {}
# How long a scenario waits for what must eventually happen (an admission, a bind, a replacement pod): a
# hang guard, not a speed target. `make test` runs four stacks' control planes, and linode-dev's autoscaler
# drill, on two cores: Kueue admitting within `preflight --rehearse`'s 90 s did not always happen there.
# A scenario that expects something not to happen does not wait it out: it ends on the controller's own
# verdict (scenarios.kueue_never_admits, scheduler_never_binds; the autoscaler drill's never_syncs and
# never_scales_for).
SHARED_TIMEOUT_S = 180.0


def shared(stack: str) -> Shared:
    """The stack's cluster of this test process, installed. One at a time: the tests come ordered by
    stack, so asking for another stack means the previous one's tests are done."""
    if stack not in _OPEN:
        from gpu_platform.rehearsal.run import StackCluster

        close_all()
        cfg, plan, fit = prepared(stack)
        out = Path(tempfile.mkdtemp(prefix=f"rehearsal-{stack}-"))
        cluster = StackCluster(stack, cfg, plan, copy.deepcopy(fit.releases), fit.model,
                               fit.report.to_json()["placements"], out, timeout=SHARED_TIMEOUT_S)
        try:
            with heavy():
                cluster.__enter__()
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
        _OPEN[stack] = Shared(cluster, out)
    return _OPEN[stack]


def close_all() -> None:
    while _OPEN:
        _, entry = _OPEN.popitem()
        entry.cluster.close()
        shutil.rmtree(entry.out, ignore_errors=True)


def _subset(result: Rehearsal, scenarios) -> Rehearsal:
    """The shipped run's result with only `scenarios` (ALL_SCENARIOS' functions, results in that order)."""
    from gpu_platform.rehearsal.run import ALL_SCENARIOS

    if result.error is None and len(result.scenarios) != len(ALL_SCENARIOS):
        raise AssertionError(f"the shipped run has {len(result.scenarios)} scenario results for {len(ALL_SCENARIOS)} scenarios")
    wanted = [ALL_SCENARIOS.index(fn) for fn in scenarios]
    view = copy.copy(result)
    view.scenarios = [result.scenarios[i] for i in wanted] if result.error is None else []
    return view


def rehearse(stack: str, tmp_path: Path, config: Optional[dict] = None,
             mutate: Optional[Callable[[list[Any]], None]] = None, scenarios=None) -> Rehearsal:
    """The stack's rehearsal with `scenarios` (all by default): read from the shipped run when nothing is
    planted; otherwise run on the shared cluster with `config`'s render and/or `mutate`'s change planted.
    The result's report goes to tmp_path/out/rehearsal.json."""
    from gpu_platform.rehearsal.run import ALL_SCENARIOS, write_report
    from gpu_platform.rehearsal.standins import restore_rendered_secrets
    from tests.fit_support import CHARTS

    entry = shared(stack)
    if config is None and mutate is None:
        result = _subset(entry.shipped, scenarios or ALL_SCENARIOS)
    else:
        releases = copy.deepcopy(entry.cluster.releases)
        if config is not None:
            cfg, plan, fit = _prepared_config(stack, config)
            releases = copy.deepcopy([r for r in fit.releases if r.rendered])
            # The installed releases carry the chart's own render of the Secrets a controller reads; so must these.
            restore_rendered_secrets(plan, releases, [CHARTS], cfg.kubernetes_version)
        if mutate is not None:
            mutate(releases)
        with entry.cluster.planted(releases) as planted:
            result = entry.cluster.run(scenarios or ALL_SCENARIOS, releases=planted)
    write_report(result, tmp_path / "out")
    return result
