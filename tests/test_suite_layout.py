"""How the suite is laid out over pytest-xdist's workers (`--dist loadgroup`; `make check`: one worker more than
the cores, `make test`: four).

tests/conftest.py gives each test an xdist group: a stack's rehearsal tests share one, so one worker boots
that stack's cluster once (tests/rehearsal_support.py); every other test goes with its module, so a
module-scoped fixture runs on one worker. With pytest 9.2, pytest-xdist 3.8.0 silently dropped the groups
(pytest-dev/pytest-xdist#1386): both workers booted linode-dev's cluster and every module fixture ran
twice, with every test still passing. These tests run the real pytest and pytest-xdist on a small suite.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

SUITE = {
    # The project's own grouping hooks, imported (not copied) from tests/conftest.py.
    "conftest.py": "from tests.conftest import pytest_collection_modifyitems, pytest_itemcollected  # noqa: F401\n",
    "ran.py": "import os\n\ndef ran(group):\n    with open(os.environ['RAN_FILE'], 'a') as f:\n"
              "        f.write(f\"RAN {group} {os.environ['PYTEST_XDIST_WORKER']}\\n\")\n",
    "test_a.py": "import pytest\nfrom ran import ran\n\n@pytest.mark.rehearsal(stack='s1')\n@pytest.mark.parametrize('i', range(4))\n"
                 "def test_s1(i):\n    ran('s1')\n\n"
                 "@pytest.mark.parametrize('i', range(4))\ndef test_plain_a(i):\n"
                 "    ran('a')\n\n"
                 "@pytest.mark.rehearsal(group='e1')\n@pytest.mark.parametrize('i', range(3))\ndef test_e1(i):\n"
                 "    \"\"\"On its engine run's own control plane.\"\"\"\n    ran('e1')\n",
    "test_b.py": "import pytest\nfrom ran import ran\n\n@pytest.mark.rehearsal(stack='s1')\ndef test_s1_elsewhere():\n"
                 "    ran('s1')\n\n"
                 "@pytest.mark.parametrize('i', range(4))\ndef test_plain_b(i):\n"
                 "    ran('b')\n\n"
                 "@pytest.mark.rehearsal(group='e1')\ndef test_e1_elsewhere():\n"
                 "    \"\"\"On its engine run's own control plane.\"\"\"\n    ran('e1')\n",
}


def test_a_stacks_rehearsal_tests_and_each_module_run_on_one_worker(tmp_path: Path) -> None:
    """The conftest's grouping, under the pytest and pytest-xdist this project pins: every test of stack s1
    (in two files) on one worker, every test of an engine run's group e1 (a control plane of its own, in two
    files) on one worker, each other module's tests on one worker."""
    (tmp_path / "suite").mkdir()
    for name, text in SUITE.items():
        (tmp_path / "suite" / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    rehearsal(stack=None, group=None): x\n    sidevenv: x\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAN_FILE": str(tmp_path / "ran.txt")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-s", "-q", "-p", "no:cacheprovider",
                           "suite"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran: dict[str, set[str]] = {}
    for group, worker in re.findall(r"RAN (\w+) (gw\d)", (tmp_path / "ran.txt").read_text()):
        ran.setdefault(group, set()).add(worker)
    assert set(ran) == {"s1", "e1", "a", "b"}, ran
    assert all(len(workers) == 1 for workers in ran.values()), ran


CLUSTERS = {
    # The project's hooks (tests/conftest.py) and its cluster registry (tests/rehearsal_support.py `_OPEN`, emptied by
    # `close_all`), with a stand-in cluster whose close() is recorded instead of a control plane's.
    "conftest.py": "from tests.conftest import pytest_collection_modifyitems, pytest_itemcollected, pytest_runtest_teardown  # noqa: F401\n",
    "use.py": "import os, tempfile, types\nfrom pathlib import Path\nfrom tests import rehearsal_support as rs\n\n"
              "def note(what):\n    with open(os.environ['RAN_FILE'], 'a') as f:\n"
              "        f.write(f\"{os.environ['PYTEST_XDIST_WORKER']} {what}\\n\")\n\n"
              "class Closer:\n    def __init__(self, group):\n        self.group = group\n\n"
              "    def close(self):\n        note(f'close {self.group}')\n\n"
              "def use(group):\n    if group not in rs._OPEN:\n        rs.close_all()\n        note(f'boot {group}')\n"
              "        rs._OPEN[group] = types.SimpleNamespace(cluster=Closer(group), out=Path(tempfile.mkdtemp()))\n"
              "    note(f'test {group}')\n",
    "test_a.py": "import pytest\nfrom use import use\n\n@pytest.mark.rehearsal(stack='s1')\n@pytest.mark.parametrize('i', range(3))\n"
                 "def test_s1(i):\n    use('s1')\n\n@pytest.mark.parametrize('i', range(3))\ndef test_plain_a(i):\n    pass\n\n"
                 "@pytest.mark.rehearsal(stack='s2')\ndef test_s2():\n    use('s2')\n",
    "test_b.py": "import pytest\nfrom use import use\n\n@pytest.mark.rehearsal(stack='s1')\ndef test_s1_elsewhere():\n    use('s1')\n\n"
                 "@pytest.mark.parametrize('i', range(3))\ndef test_plain_b(i):\n    pass\n\n"
                 "@pytest.mark.rehearsal(stack='s2')\n@pytest.mark.parametrize('i', range(2))\ndef test_s2_elsewhere(i):\n    use('s2')\n",
}


def test_a_shared_cluster_stops_after_its_groups_last_test_and_boots_once(tmp_path: Path) -> None:
    """Under the real pytest-xdist: each stack's cluster (a stand-in recording its close) is booted once, and closed
    right after the last test of its group on that worker, before the worker runs anything else. Left open, idle
    control planes piled up late in a run (seven API servers on two cores, 44 tests failed on slow answers)."""
    (tmp_path / "suite").mkdir()
    for name, text in CLUSTERS.items():
        (tmp_path / "suite" / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    rehearsal(stack=None, group=None): x\n    sidevenv: x\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAN_FILE": str(tmp_path / "ran.txt")}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
                           "suite"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    by_worker: dict[str, list[str]] = {}
    for line in (tmp_path / "ran.txt").read_text().splitlines():
        worker, what = line.split(" ", 1)
        by_worker.setdefault(worker, []).append(what)
    for worker, seen in by_worker.items():
        for group in ("s1", "s2"):
            if f"test {group}" not in seen:
                continue
            assert seen.count(f"boot {group}") == 1, (worker, seen)
            last = max(i for i, what in enumerate(seen) if what == f"test {group}")
            assert seen[last + 1:last + 2] == [f"close {group}"], (worker, seen)
    assert sum(seen.count("test s1") for seen in by_worker.values()) == 4
    assert sum(seen.count("test s2") for seen in by_worker.values()) == 3


@pytest.mark.parametrize("marker", ["rehearsal", "sidevenv", "gobuild"])
def test_make_check_leaves_out_what_needs_go_or_a_side_virtualenv(marker: str) -> None:
    make = (ROOT / "Makefile").read_text()
    check = re.search(r"^check:.*\n\t(.*)$", make, re.M)
    assert check and f"not {marker}" in check.group(1) and "pytest" in make


def _mark_names(decorators: list[ast.expr]) -> set[str]:
    """The NAMEs of `pytest.mark.NAME` or `pytest.mark.NAME(...)` among decorators (or a `pytestmark` value)."""
    names = set()
    for deco in decorators:
        target = deco.func if isinstance(deco, ast.Call) else deco
        if isinstance(target, ast.Attribute) and ast.unparse(target.value) == "pytest.mark":
            names.add(target.attr)
    return names


def _module_marks(tree: ast.Module) -> set[str]:
    """The marks of a module's `pytestmark = pytest.mark.X` (or a list of them)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            value = node.value
            return _mark_names(list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value])
    return set()


GO_COMPILES = {"build", "generate", "install", "run", "test", "vet"}  # `go` subcommands that compile


def _compiles_go(func: ast.AST) -> bool:
    """Whether a test runs the real Go toolchain on code: the build's entry points (`build.build_all`,
    `build.build`, `build.main`) given Go's own environment (an argument or keyword that is or contains
    `build.go_env()`, directly or through a name assigned from it), or a command line `["go", "build", ...]`."""
    from_go_env = set()
    for node in ast.walk(func):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if targets and node.value is not None and "build.go_env()" in ast.unparse(node.value):
            from_go_env |= {t.id for t in targets if isinstance(t, ast.Name)}
    for node in ast.walk(func):
        if not isinstance(node, ast.Call):
            continue
        if ast.unparse(node.func) in ("build.build_all", "build.build", "build.main"):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                text = ast.unparse(arg)
                if "build.go_env()" in text or (isinstance(arg, ast.Name) and arg.id in from_go_env):
                    return True
        for arg in node.args[:1]:
            if (isinstance(arg, (ast.List, ast.Tuple)) and len(arg.elts) > 1
                    and all(isinstance(e, ast.Constant) for e in arg.elts[:2])
                    and arg.elts[0].value == "go" and arg.elts[1].value in GO_COMPILES):
                return True
    return False


def _tests_that_compile_go(tree: ast.Module) -> list[tuple[str, set[str]]]:
    """(name, marks) of each test function, in a class or not, that compiles Go."""
    found = []
    for node in tree.body:
        scope_marks = set()
        funcs = [node]
        if isinstance(node, ast.ClassDef):
            scope_marks, funcs = _mark_names(node.decorator_list), node.body
        for func in funcs:
            if (isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)) and func.name.startswith("test_")
                    and _compiles_go(func)):
                found.append((func.name, _mark_names(func.decorator_list) | scope_marks))
    return found


@pytest.mark.parametrize("source, compiles", [
    ("def test_a():\n    env = build.go_env()\n    rc = build.build_all([c], env, r, set(), jobs=1)\n    assert rc == 1\n", True),
    ("def test_a():\n    assert not build.build_all([c], env={**build.go_env()}, root=r)\n", True),
    ("def test_a():\n    env: dict = build.go_env()\n    build.build(c, env, r)\n", True),
    ("async def test_a():\n    subprocess.run(['go', 'build', './...'], check=True)\n", True),
    ("class TestA:\n    def test_a(self):\n        build.main(['--env', build.go_env()])\n", True),
    ("def test_a():\n    subprocess.run(['go', 'mod', 'edit', '-json'])\n", False),
    ("def test_a():\n    assert build.build_all([c], ENV, r, set(), jobs=1) == 1\n", False),
])
def test_the_go_compile_finder_sees_each_way_a_test_can_compile(source: str, compiles: bool) -> None:
    assert bool(_tests_that_compile_go(ast.parse(source))) == compiles


def test_every_test_that_compiles_go_is_marked_gobuild() -> None:
    """`make check` needs no Go and runs in minutes: a test that compiles with the real toolchain (17 to 37 s each
    on a fresh machine, Go's build cache empty) is marked `gobuild`, so that it runs in `make test` only."""
    compiling, unmarked = [], []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks = _module_marks(tree)
        for name, marks in _tests_that_compile_go(tree):
            compiling.append(name)
            if not {"gobuild", "rehearsal"} & (marks | module_marks):
                unmarked.append(f"{path.name}::{name}")
    assert len(compiling) >= 4, f"the finder no longer sees the known Go builds (found {compiling}): see _compiles_go"
    assert not unmarked, f"compile Go without @pytest.mark.gobuild (make check would run them): {unmarked}"


HEAVY_TEST = (
    "import os, time\nfrom pathlib import Path\nfrom tests.rehearsal_support import heavy\n\n"
    "def test_heavy():\n"
    "    log = Path(os.environ['HEAVY_LOG'])\n"
    "    with open(log, 'a') as f:\n        f.write('start\\n')\n"
    "    with heavy(interval=0.05):\n"
    "        with open(log, 'a') as f:\n            f.write('in\\n')\n"
    "        deadline = time.monotonic() + 60\n"
    "        # Held until every test has started (or a minute), and a second more: with the slots working, the\n"
    "        # third waits outside; without them, all three are in here together.\n"
    "        while log.read_text().count('start') < 3 and time.monotonic() < deadline:\n            time.sleep(0.05)\n"
    "        time.sleep(1)\n"
    "        with open(log, 'a') as f:\n            f.write('out\\n')\n"
)


def _three_heavy_tests(tmp_path: Path, test: str) -> Path:
    """`test` as test_a, test_b and test_c under the real pytest-xdist (three workers, two heavy slots, the folder
    conftest.py's pytest_configure makes for the workers); the log they write, once all three passed."""
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems, pytest_configure, pytest_itemcollected  # noqa: F401\n")
    for name in ("a", "b", "c"):
        (tmp_path / "suite" / f"test_{name}.py").write_text(test)
    log = tmp_path / "heavy.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HEAVY_LOG": str(log), "GPU_PLATFORM_TEST_HEAVY_SLOTS": "2",
           "TMPDIR": str(tmp_path)}
    env.pop("GPU_PLATFORM_TEST_HEAVY_DIR", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-q", "-p", "no:cacheprovider",
                           "suite"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return log


def test_no_more_heavy_phases_run_at_once_than_there_are_slots(tmp_path: Path) -> None:
    """rehearsal_support.heavy under the real pytest-xdist, with the folder conftest.py's pytest_configure makes for
    the workers: three workers, two slots; each test holds its slot until all three have started, so without the
    slots all three would be inside at once. The folder is gone after the session."""
    log = _three_heavy_tests(tmp_path, HEAVY_TEST)
    inside, most = 0, 0
    for line in log.read_text().split():
        inside += {"in": 1, "out": -1}.get(line, 0)
        most = max(most, inside)
    assert log.read_text().split().count("out") == 3 and most == 2, log.read_text()
    assert not list(tmp_path.glob("gpu-platform-heavy-slots-*")), "the session's slot folder was left behind"


ALONE_TEST = (
    "import os, time\nfrom pathlib import Path\nfrom tests.rehearsal_support import ENGINE_RUN, heavy\n\n"
    "def test_heavy():\n"
    "    log, me = Path(os.environ['HEAVY_LOG']), Path(__file__).stem\n"
    "    deadline = time.monotonic() + 60\n"
    "    def until(*lines):\n"
    "        while not all(line in log.read_text() for line in lines) and time.monotonic() < deadline:\n"
    "            time.sleep(0.05)\n"
    "    with open(log, 'a') as f:\n        f.write(f'start {me}\\n')\n"
    "    if me == 'test_c':  # the cluster install comes last: after one engine run is in and the other waits\n"
    "        until('start test_a', 'start test_b')\n"
    "        while 'in test_' not in log.read_text() and time.monotonic() < deadline:\n            time.sleep(0.05)\n"
    "        time.sleep(0.5)\n"
    "    with heavy(interval=0.05, alone=None if me == 'test_c' else ENGINE_RUN):\n"
    "        with open(log, 'a') as f:\n            f.write(f'in {me}\\n')\n"
    "        until('in test_c')  # held until the install is in too (a minute at most): it must not wait for a turn\n"
    "        time.sleep(0.2)\n"
    "        with open(log, 'a') as f:\n            f.write(f'out {me}\\n')\n"
)


def test_engine_runs_take_turns_and_one_waiting_for_its_turn_holds_no_slot(tmp_path: Path) -> None:
    """Two engine runs at once failed CI twice (2026-11-29: the API server's 504 for the OpenAPI document; 2026-11-30:
    Helm's fixed 60 s wait for kube-prometheus-stack's CRDs). Under the real pytest-xdist, two slots, three workers:
    a and b are `heavy(alone="engine-run")`, c a cluster's install. a and b are never inside together, and the one
    waiting for its turn holds no slot: c, started once one of them is in and the other waits for its turn, gets in
    while the first is still in (with the slot taken before the turn, c waits a minute for it)."""
    log = _three_heavy_tests(tmp_path, ALONE_TEST)
    events = [tuple(line.split()) for line in log.read_text().splitlines()]
    inside: set[str] = set()
    for what, who in events:
        if what == "in":
            inside.add(who)
            assert not {"test_a", "test_b"} <= inside, events
        elif what == "out":
            inside.discard(who)
    assert [w for w, _ in events].count("out") == 3, events
    first_out = next(i for i, (what, _) in enumerate(events) if what == "out")
    assert ("in", "test_c") in events[:first_out], events


def test_an_engine_run_entered_without_its_turn_fails_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """conftest.py's guard (on for every session with workers): an engine run entered outside heavy(alone=ENGINE_RUN)
    fails before it starts anything, naming what to do; inside it, the run starts (its start stood in for here)."""
    from gpu_platform.rehearsal import engine
    from tests.conftest import HEAVY_SLOTS_DIR_ENV, guard_engine_turns
    from tests.rehearsal_support import ENGINE_RUN, heavy

    monkeypatch.setenv(HEAVY_SLOTS_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(engine.EngineRun, "__enter__", lambda self: "started")
    undo = guard_engine_turns(engine.EngineRun)
    try:
        run = engine.EngineRun("onprem-dev", None, None, tmp_path / "run", ROOT, tmp_path)
        with pytest.raises(RuntimeError, match=r"engine run \(onprem-dev\) entered without its turn: .*heavy\(alone=ENGINE_RUN\)"):
            run.__enter__()
        with heavy(interval=0.01):  # a slot is not the turn
            with pytest.raises(RuntimeError, match="without its turn"):
                run.__enter__()
        with heavy(interval=0.01, alone=ENGINE_RUN):
            assert run.__enter__() == "started"
        with pytest.raises(RuntimeError, match="without its turn"):  # the turn ends with the block
            run.__enter__()
    finally:
        undo()
    assert run.__enter__() == "started"


def test_a_turn_asked_for_inside_a_heavy_phase_that_did_not_take_it_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                                tmp_path: Path) -> None:
    """A heavy(alone=...) nested in a plain heavy() takes no lock (one inside another holds nothing more), so it
    would run without its turn: refused, naming the fix. Nested in the same turn it is fine."""
    from tests.conftest import HEAVY_SLOTS_DIR_ENV
    from tests.rehearsal_support import ENGINE_RUN, heavy, holds_turn

    monkeypatch.setenv(HEAVY_SLOTS_DIR_ENV, str(tmp_path))
    with heavy(interval=0.01):
        with pytest.raises(RuntimeError, match="would run without it: take the turn in the outer heavy"):
            with heavy(interval=0.01, alone=ENGINE_RUN):
                pass
    with heavy(interval=0.01, alone=ENGINE_RUN), heavy(interval=0.01, alone=ENGINE_RUN):
        assert holds_turn(ENGINE_RUN)
    assert not holds_turn(ENGINE_RUN)


def test_the_number_of_heavy_slots_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.conftest import HEAVY_SLOTS_ENV, heavy_slots
    from tests.rehearsal_support import heavy

    monkeypatch.setenv(HEAVY_SLOTS_ENV, "3")
    assert heavy_slots() == 3
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv(HEAVY_SLOTS_ENV, bad)
        with pytest.raises(ValueError, match=f"{HEAVY_SLOTS_ENV}='{bad}': a whole number of at least 1"):
            heavy_slots()
    monkeypatch.delenv(HEAVY_SLOTS_ENV)
    assert heavy_slots() == len(os.sched_getaffinity(0))
    monkeypatch.delenv("GPU_PLATFORM_TEST_HEAVY_DIR", raising=False)
    with heavy():  # a session without workers: nothing to share, nothing waits
        pass


def test_a_heavy_phase_inside_another_takes_no_second_slot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With one slot, a heavy() nested in another of the same process would wait forever for the slot its caller
    holds; it holds nothing more. A folder that is gone (a process outliving its session) makes nothing wait."""
    import threading

    from tests.conftest import HEAVY_SLOTS_ENV
    from tests.rehearsal_support import heavy

    monkeypatch.setenv(HEAVY_SLOTS_ENV, "1")
    monkeypatch.setenv("GPU_PLATFORM_TEST_HEAVY_DIR", str(tmp_path))
    done = threading.Event()

    def nested():
        with heavy(interval=0.01), heavy(interval=0.01):
            pass
        with heavy(interval=0.01):  # and the slot is free again afterwards
            done.set()

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(10)
    assert done.is_set(), "a nested heavy() waited for the slot its caller holds"
    monkeypatch.setenv("GPU_PLATFORM_TEST_HEAVY_DIR", str(tmp_path / "gone"))
    with heavy():
        pass


def test_light_modules_come_between_the_heavy_groups_the_slots_cannot_take_yet() -> None:
    """With two slots the first two heavy groups start at once; a third taken before one of them ends would wait with
    its worker idle, so light modules come first, in equal shares before each further heavy group and at the end.
    Every group comes once and the heavy ones keep their order."""
    from tests.conftest import GROUP_ORDER, interleaved

    heavy, light = list(GROUP_ORDER), [f"tests/test_{i}.py" for i in range(26)]
    order = interleaved(heavy, light, 2)
    assert sorted(order) == sorted(heavy + light) and [g for g in order if g in heavy] == heavy
    assert order[:2] == heavy[:2] and order[-1] in light
    gaps = [order.index(b) - order.index(a) - 1 for a, b in zip(heavy[1:], heavy[2:])]
    assert min(gaps) >= 2 and max(gaps) - min(gaps) <= 1, gaps
    assert interleaved(heavy[:1], light[:2], 2) == heavy[:1] + light[:2]
    assert interleaved(heavy, [], 2) == heavy
