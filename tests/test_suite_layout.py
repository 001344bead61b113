"""How the suite is laid out over pytest-xdist's workers (`make check` and `make test`: `-n 2 --dist loadgroup`).

tests/conftest.py gives each test an xdist group: a stack's rehearsal tests share one, so one worker boots
that stack's cluster once (tests/rehearsal_support.py); every other test goes with its module, so a
module-scoped fixture runs on one worker. With pytest 9.2, pytest-xdist 3.8.0 silently dropped the groups
(pytest-dev/pytest-xdist#1386): both workers booted linode-dev's cluster and every module fixture ran
twice, with every test still passing. These tests run the real pytest and pytest-xdist on a small suite.
"""

from __future__ import annotations

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


@pytest.mark.parametrize("marker", ["rehearsal", "sidevenv"])
def test_make_check_leaves_out_what_needs_go_or_a_side_virtualenv(marker: str) -> None:
    make = (ROOT / "Makefile").read_text()
    check = re.search(r"^check:.*\n\t(.*)$", make, re.M)
    assert check and f"not {marker}" in check.group(1) and "pytest" in make
