"""Shared fixtures: run the real program under preflight's mocks and look at what it registered."""

from __future__ import annotations

import copy
import functools
import gc
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Compiled files are kept (in the __pycache__ folders .gitignore leaves out) even where the environment says
# PYTHONDONTWRITEBYTECODE=1, as the project's shared 2-core machine does: there every pytest worker rewrote
# and compiled all 130 test modules again (collection 9.1 -> 4.3 CPU-s a worker once they are kept), and every
# process the suite starts (a preflight, a policy pack, a worker) compiled the package from source again.
# Set before the package and the test modules are imported; the processes the suite starts inherit it.
if sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"):
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Preflight's runner (the Pulumi SDK, the config's models) is imported where a plan is made: the small suites of
# tests/test_suite_layout.py load this file in a dozen pytest processes of their own that make none.
if TYPE_CHECKING:
    from gpu_platform.preflight.runner import Plan

# Version support moves with the calendar: tests judge the shipped stacks on the day they were reviewed, so a
# later run does not fail for the date alone (preflight and `pulumi up` use the real date).
os.environ.setdefault("GPU_PLATFORM_TODAY", "2026-11-23")
# No cost chart (cost.png) in the ~70 preflight runs that never look at it: each drew it in a child that imports
# matplotlib, a second of CPU a run (80 CPU-s of the quick lane's 640). The chart is still drawn where it is
# checked: tests/test_costs_preflight.py (every shipped stack's, and the CLI's) and tests/test_costs_report.py.
os.environ.setdefault("GPU_PLATFORM_NO_CHART", "1")


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


# The cyclic collector, tuned for a test process: with CPython's default thresholds (700, 10, 10) a test process
# holding the SDKs, charts and shared plans spent a third of its CPU collecting (1.5 s of every 5 in
# tests/test_gcp_plan.py with tests/test_linode.py, measured with gc.callbacks); a first generation of 10,000 objects
# cut that to a tenth for 3 % more peak memory. What the collector finds is unchanged, only how often it looks.
gc.set_threshold(10_000, 20, 20)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything imported to collect the tests (the SDKs, pydantic models, test modules) lives for the whole
    session: frozen, the collector stops walking it on each full collection."""
    gc.collect()
    gc.freeze()


# `make check` sets GPU_PLATFORM_TEST_LANE=check: there the property tests draw a quarter of their examples (at
# least 10), derandomized like the rest; `make test`, what CI runs, draws every one.
QUICK_LANE = os.environ.get("GPU_PLATFORM_TEST_LANE") == "check"


def lane_examples(full: int) -> int:
    """A property test's example count in this lane."""
    return max(10, full // 4) if QUICK_LANE else full


# libyaml where PyYAML has it: the pure-Python loader was a tenth of the quick lane's time.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=None)
def _stack_file(stack: str, mtime_ns: int) -> dict[str, Any]:
    return yaml.load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text(), Loader=YAML_LOADER)


def stack_config(stack: str) -> dict[str, Any]:
    """The `config:` mapping of a shipped stack file (a fresh copy to mutate in a test)."""
    path = ROOT / "stacks" / f"Pulumi.{stack}.yaml"
    return copy.deepcopy(_stack_file(stack, path.stat().st_mtime_ns)["config"])


@functools.lru_cache(maxsize=None)
def shipped_plan(stack: str, today: str | None = None) -> Plan:
    """The shipped stack's plan, computed once per test process (and date): shared, read it only."""
    from gpu_platform.preflight.runner import load_stack, run_program

    return run_program(load_stack(stack))


def plan_stack(stack: str) -> Plan:
    """The shipped stack's plan, a copy of its own for the caller (the program runs once per process per
    stack: a plan takes seconds). A test that changes what the program sees (a mock, a module attribute)
    runs the program itself: run_program(load_stack(stack))."""
    return copy.deepcopy(shipped_plan(stack, os.environ.get("GPU_PLATFORM_TODAY")))


def plan_config(config: dict[str, Any], stack: str = "test") -> Plan:
    """Run the program for a config mapping written like a stack file's `config:`."""
    from gpu_platform.preflight.runner import run_program, stack_input_from_mapping

    return run_program(stack_input_from_mapping(stack, config))


@pytest.fixture(scope="session")
def linode_dev_plan() -> Plan:
    return plan_stack("linode-dev")


# --- the rehearsal tests: one cluster per stack per test process (tests/rehearsal_support.py) ----------------

# A stack's planted drills (each its own `rehearse` with something planted) run on a second cluster of the stack,
# on another worker (`@pytest.mark.rehearsal(stack=..., group=...)`): they read nothing of the shipped run, and
# with them one stack's group was the suite's critical path.
LINODE_DEV_DRILLS = "linode-dev-drills"
AWS_PROD_DRILLS = "aws-prod-drills"

# The order the rehearsal's groups start in. Engine runs take turns (rehearsal_support.ENGINE_RUN): they are a chain,
# most of `make test` one after another (2026-11-30, this order, each fixture's set-up with its wait for the turn:
# onprem-dev with its plants 492 s, linode-dev 237, aws-prod 195, linode-ha 188, gcp-prod 160; the last ended 2
# minutes before the run did). onprem-dev's starts first and the others each after a cluster's group (one runs at a
# time anyway), so that the worker that takes the next one waits for its turn while the others test clusters; the
# last two end the list, being the shortest. The clusters' groups mostly wait on their
# controllers (linode-dev 636 s, aws-prod's drills about 640, aws-prod 510, linode-dev's drills about 460, gcp-prod
# 450, linode-ha 355): the longest start first. In the order before, linode-ha's cluster came after the last engine
# run and the run ended on it alone, four minutes at 5 to 10 % CPU (1,658 s; this order 1,576 s). A group not listed
# starts after these.
GROUP_ORDER = ("engine-onprem-dev", "linode-dev", AWS_PROD_DRILLS, "aws-prod", "engine-linode-dev", LINODE_DEV_DRILLS,
               "gcp-prod", "engine-linode-ha", "linode-ha", "engine-gcp-prod", "engine-aws-prod")


def rehearsal_stack(item: pytest.Item) -> str | None:
    """The stack whose shared rehearsal cluster a test uses: `@pytest.mark.rehearsal(stack=...)` or its
    `stack` parameter; None for a test that is not a rehearsal test or starts a control plane of its own."""
    mark = item.get_closest_marker("rehearsal")
    if mark is None:
        return None
    if "stack" in mark.kwargs:
        return mark.kwargs["stack"]
    callspec = getattr(item, "callspec", None)
    return callspec.params.get("stack") if callspec is not None else None


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each test's xdist group, set as it is collected (pytest-xdist reads the groups in its own
    pytest_collection_modifyitems, which may run before ours): a stack's rehearsal tests go to one worker
    together (`--dist loadgroup`), so each worker boots a stack's cluster once; every other test goes with
    its module, so a module-scoped fixture (a preflight run, a rendered chart) is computed by one worker."""
    if item.config.pluginmanager.hasplugin("xdist"):
        heavy, group = group_of(item)
        item.add_marker(pytest.mark.xdist_group(f"rehearsal-{group}" if heavy else group))


def group_of(item: pytest.Item) -> tuple[bool, str]:
    """(heavy, name): a rehearsal test's group (rehearsal_group), else its module's path."""
    group = rehearsal_group(item)
    return (True, group) if group is not None else (False, item.nodeid.split("::")[0])


def rehearsal_group(item: pytest.Item) -> str | None:
    """A rehearsal test's xdist group: its `group=` (a stack's drills on a second cluster; an engine run's tests on
    that run's own control plane, so each run goes to a worker of its own), else its stack; None otherwise."""
    mark = item.get_closest_marker("rehearsal")
    if mark is None:
        return None
    return mark.kwargs.get("group") or rehearsal_stack(item)


def interleaved(heavy: list[str], light: list[str], slots: int) -> list[str]:
    """The order xdist hands out the groups: as many heavy (rehearsal) groups as there are heavy slots, then each
    further heavy group after an equal share of the light ones (a module each), the last share at the end. A worker
    that takes a heavy group while every slot is held waits idle (rehearsal_support.heavy); one that takes light work
    meanwhile does not, and the heavy groups still start in GROUP_ORDER."""
    first, rest = heavy[:slots], heavy[slots:]
    shares = len(rest) + 1
    cuts = [round(i * len(light) / shares) for i in range(shares + 1)]
    order = list(first)
    for i, group in enumerate(rest):
        order += light[cuts[i]:cuts[i + 1]] + [group]
    return order + light[cuts[-2]:]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each group's tests together, the groups in interleaved() order: the rehearsal's in GROUP_ORDER (engine runs
    from the start, mostly after a cluster's group); a rehearsal test without a stack must say why it needs its own
    control plane."""
    rank = {group: i for i, group in enumerate(GROUP_ORDER)}
    for item in items:
        if rehearsal_stack(item) is None and item.get_closest_marker("rehearsal") is not None:
            doc = getattr(getattr(item, "function", None), "__doc__", None) or ""
            if "own control plane" not in doc and "no control plane" not in doc:
                raise pytest.UsageError(
                    f"{item.nodeid}: a rehearsal test names its stack (@pytest.mark.rehearsal(stack=...)) to use the "
                    "session's shared cluster, or says in its docstring why it needs its own control plane (or that "
                    "it runs no control plane, only a Go component)")

    groups = list(dict.fromkeys(group_of(item) for item in items))  # first appearance: the collection order
    heavy = sorted((g for is_heavy, g in groups if is_heavy), key=lambda g: rank.get(g, len(rank)))  # stable
    position = {g: i for i, g in enumerate(interleaved(heavy, [g for is_heavy, g in groups if not is_heavy], heavy_slots()))}
    items.sort(key=lambda item: position[group_of(item)[1]])  # stable: within a group the collection order stays


HEAVY_SLOTS_DIR_ENV = "GPU_PLATFORM_TEST_HEAVY_DIR"
HEAVY_SLOTS_ENV = "GPU_PLATFORM_TEST_HEAVY_SLOTS"


def heavy_slots() -> int:
    """How many test processes may be in a heavy phase at once (tests/rehearsal_support.py heavy):
    $GPU_PLATFORM_TEST_HEAVY_SLOTS, else the machine's CPUs. On two cores (2026-11-29) four at once failed on CI (the
    engine's provider and the rehearsal's own client timed out on their API servers), and so did three at once here
    (three clusters installing: a request to one API server unanswered after 30 s)."""
    value = os.environ.get(HEAVY_SLOTS_ENV, "")
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(f"{HEAVY_SLOTS_ENV}={value!r}: a whole number of at least 1 is allowed")
        return int(value)
    return len(os.sched_getaffinity(0))


def pytest_configure(config: pytest.Config) -> None:
    """In the process that controls xdist's workers: the session's folder of heavy slots (rehearsal_support.heavy),
    named in the environment the workers are started with. In the first process of a session: one folder for every
    preflight's parsed charts and renders (fit.run.CACHE_ENV), the workers' and the preflights they start: each
    preflight writes into an output folder of its own, and beside each it would render every chart again (about 1.4
    CPU-seconds in a new process). A folder the environment already names is kept."""
    from gpu_platform.preflight.fit.run import CACHE_ENV

    if not hasattr(config, "workerinput") and not os.environ.get(CACHE_ENV):
        cache = tempfile.mkdtemp(prefix="gpu-platform-preflight-cache-")
        os.environ[CACHE_ENV] = cache

        def drop_cache() -> None:
            shutil.rmtree(cache, ignore_errors=True)
            os.environ.pop(CACHE_ENV, None)

        config.add_cleanup(drop_cache)
    if not hasattr(config, "workerinput") and (config.getoption("numprocesses", None) or 0):
        folder, before = tempfile.mkdtemp(prefix="gpu-platform-heavy-slots-"), os.environ.get(HEAVY_SLOTS_DIR_ENV)
        os.environ[HEAVY_SLOTS_DIR_ENV] = folder

        def cleanup() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            if before is None:
                os.environ.pop(HEAVY_SLOTS_DIR_ENV, None)
            else:
                os.environ[HEAVY_SLOTS_DIR_ENV] = before

        config.add_cleanup(cleanup)


def ends_its_group(item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Whether `item` is the last test of its rehearsal group on this process: xdist hands a group to one
    worker whole and runs a test only once it knows the next (`nextitem`: None at the end)."""
    heavy, group = group_of(item)
    return heavy and (nextitem is None or group_of(nextitem) != (heavy, group))


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """A shared rehearsal cluster stops once its group's last test has run. Left up while its worker went on to
    light modules, each idle control plane (API server, etcd, Kueue and the rest) kept about a third of a core busy:
    late in a 2-core run seven API servers were up, the load average was 12 and 44 tests failed on slow answers."""
    support = sys.modules.get("tests.rehearsal_support")
    if support is not None and ends_its_group(item, nextitem):
        support.close_all()


def guard_engine_turns(engine_run: type) -> Any:
    """Make entering `engine_run` (rehearsal.engine.EngineRun) fail at once unless this process holds the engine
    run's turn (tests/rehearsal_support.py heavy(alone=ENGINE_RUN)): two engine runs at once failed CI twice, and a
    new engine test that forgot the turn would only show it by chance, under load. Returns what undoes it."""
    enter = engine_run.__enter__

    def entered_in_turn(self):
        from tests.rehearsal_support import ENGINE_RUN, holds_turn

        if not holds_turn(ENGINE_RUN):
            raise RuntimeError(f"an engine run ({self.stack}) entered without its turn: enter it inside "
                               "`with heavy(alone=ENGINE_RUN)` (tests/rehearsal_support.py), as the engine tests do")
        return enter(self)

    engine_run.__enter__ = entered_in_turn
    return lambda: setattr(engine_run, "__enter__", enter)


@pytest.fixture(scope="session", autouse=True)
def _engine_runs_take_their_turn():
    """Under workers (the session's heavy-slot folder set), every engine run holds its turn: guard_engine_turns."""
    if not os.environ.get(HEAVY_SLOTS_DIR_ENV):
        yield
        return
    from gpu_platform.rehearsal.engine import EngineRun

    undo = guard_engine_turns(EngineRun)
    yield
    undo()


@pytest.fixture(scope="session", autouse=True)
def _close_rehearsal_clusters():
    """Stop the shared rehearsal clusters (if any test started one) when the session ends."""
    yield
    support = sys.modules.get("tests.rehearsal_support")
    if support is not None:
        support.close_all()


