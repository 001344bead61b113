"""Every command in the README, docs/ and the examples' READMEs either runs offline here or is marked
as needing a cloud (or the network), and every command of this repository is checked by its own argument
parser: a wrong flag, subcommand or file in a doc fails here.

The rules, for fenced `sh`/`bash` blocks:
- A block whose info string says `cloud` (```sh cloud) or `network` holds commands that need an account
  or the internet (`pulumi up`, `gcloud`, `pip install`, `charts pull`); they are not run, but the
  repository's own commands in them are still parsed.
- Anything else must be one of this repository's commands, written to run from a checkout without an
  activated virtualenv: `make <target>`, `.venv/bin/python -m gpu_platform...`,
  `.venv/bin/gpu-platform-preflight`/`-costs`, `.venv/bin/python -m pytest <existing file>`.
- A bare `python -m gpu_platform...` fails: without the virtualenv it is `ModuleNotFoundError: pulumi`.
- `.venv/bin/python -m gpu_platform.X ARGS` is run with argparse stopped right after parsing: the flags
  are the real parser's verdict, nothing is planned. `make TARGET VARS` is checked with `make -n`, and the
  preflight command it would run is parsed the same way (so `PREFLIGHT_FLAGS=--typo` fails).
- The parses of a test's commands run in one child interpreter, one module run after another (each run
  imports the modules again costs 0.4 CPU-s: 40 commands were a tenth of `make check`'s test time).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
BLOCK = re.compile(r"^(\s*)```(sh|bash|console)([^\n]*)\n(.*?)^\s*```", re.M | re.S)
MARKS = {"cloud", "network"}
VENV_PY = ".venv/bin/python"
CONSOLE_SCRIPTS = {".venv/bin/gpu-platform-preflight": "gpu_platform.preflight",
                   ".venv/bin/gpu-platform-costs": "gpu_platform.costs"}
# Placeholders the docs use, replaced by a value the parsers accept.
PLACEHOLDERS = {"<stack>": "gcp-prod", "<env>": "dev", "F.json": "tests/data/aws-describe-spot-price-history.json",
                "F": "tests/data/linode-types-response.json"}
# Run each module named on stdin ([[module, [args...]], ...]) with argparse stopped after its first successful
# parse, one after another in this one interpreter; print, for each, whether its parser accepted the arguments
# and, if not, the last line it printed. A module run does nothing but parse: the parse is its first step.
PARSE_MANY = """
import argparse, contextlib, io, json, runpy, sys, traceback
class Accepted(BaseException):
    pass
_parse = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    _parse(self, args, namespace)
    raise Accepted
argparse.ArgumentParser.parse_args = parse_args
stdout, results = sys.stdout, []
for module, args in json.load(sys.stdin):
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [module, *args]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
            code = 0
        except Accepted:
            code = None
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
    text = (err.getvalue() or out.getvalue()).strip()
    results.append(None if code is None else text.splitlines()[-1] if text else f"exit {code}")
json.dump(results, stdout)
"""

# (module, args) -> None when the module's parser accepts args, else its message; filled by parse_all.
_PARSED: dict[tuple[str, tuple[str, ...]], str | None] = {}
# While not None, parse_only records what it would parse here instead of parsing (see checked()).
_WANTED: list[tuple[str, tuple[str, ...]]] | None = None


def parse_all(keys) -> None:
    """Parse every (module, args) not parsed yet, in one child interpreter."""
    todo = [k for k in dict.fromkeys(keys) if k not in _PARSED]
    if not todo:
        return
    run = subprocess.run([str(ROOT / VENV_PY), "-c", PARSE_MANY], cwd=ROOT, input=json.dumps(todo), capture_output=True,
                         text=True, timeout=300, env={**os.environ, "NO_COLOR": "1"})
    assert run.returncode == 0, run.stderr
    _PARSED.update(zip(todo, json.loads(run.stdout)))


def blocks(page: Path) -> list[tuple[set[str], str]]:
    """(marks, body) of each shell block."""
    return [(set(info.split()) & MARKS, body) for _, _, info, body in BLOCK.findall(page.read_text())]


def commands(body: str) -> list[str]:
    """One logical line per command: continuations joined, comments and blank lines dropped."""
    out, pending = [], ""
    for line in body.splitlines():
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        words = shlex.split(line, comments=True) if line else []
        if words:
            out.append(line)
    return out


def _words(command: str) -> list[str]:
    words = shlex.split(command, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):  # VAR=value prefixes
        words.pop(0)
    out = []
    for w in words:
        if w.startswith("[--") or (w.endswith("]") and "[" not in w):  # usage notation: [--from-file F]
            w = w.lstrip("[").rstrip("]")
        out.append(PLACEHOLDERS.get(w, w))
    return out


def parse_only(module: str, args: list[str]) -> str | None:
    """None when the module's own argument parser accepts args; else its message."""
    key = (module, tuple(args))
    if _WANTED is not None:
        _WANTED.append(key)
        return None
    parse_all([key])
    return _PARSED[key]


@functools.lru_cache(maxsize=None)
def _make_n(words: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-n", *words], cwd=ROOT, capture_output=True, text=True, timeout=60)


@functools.lru_cache(maxsize=None)
def _run_c(words: tuple[str, ...]) -> subprocess.CompletedProcess:
    return subprocess.run([str(ROOT / VENV_PY), *words], cwd=ROOT, capture_output=True, text=True, timeout=120)


def check_make(words: list[str]) -> str | None:
    run = _make_n(tuple(words[1:]))
    if run.returncode != 0:
        return run.stderr.strip() or f"make -n exit {run.returncode}"
    for line in run.stdout.splitlines():
        if line.startswith(f"{VENV_PY} -m gpu_platform.preflight ") and " charts ensure" not in line:
            problem = check(line)
            if problem:
                return f"{line}: {problem}"
    return None


def check(command: str, marks: frozenset[str] = frozenset()) -> str | None:
    """None when the command is fine for its block; else what is wrong."""
    words = _words(command)
    if not words:
        return None
    head = words[0]
    if head in ("python", "python3", "pytest", "pip", "gpu-platform-preflight", "gpu-platform-costs") and (
            any(w.startswith("gpu_platform") for w in words) or head in ("pytest", "gpu-platform-preflight", "gpu-platform-costs")):
        return f"{head}: run it as .venv/bin/{head if head != 'python3' else 'python'} (or activate the virtualenv first)"
    if head == "make":
        return check_make(words)
    if head in CONSOLE_SCRIPTS:
        return parse_only(CONSOLE_SCRIPTS[head], words[1:])
    if head == VENV_PY and words[1:2] == ["-m"] and len(words) > 2:
        module = words[2]
        if module == "pytest":
            missing = [w for w in words[3:] if w.startswith("tests/") and not (ROOT / w.split("::")[0]).exists()]
            return f"no such test file {missing}" if missing else None
        if module.startswith("gpu_platform"):
            return parse_only(module, words[3:])
    if head == VENV_PY and words[1:2] == ["-c"]:  # a one-line check: cheap, run it
        run = _run_c(tuple(words[1:]))
        return None if run.returncode == 0 else (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    if marks:
        return None  # needs a cloud or the network: not run here
    return f"{head}: not a command of this repository; mark the block ```sh cloud (or network) if it needs one"


def doc_commands() -> list[tuple[str, frozenset[str], str]]:
    out = []
    for page in PAGES:
        for marks, body in blocks(page):
            for command in commands(body):
                out.append((page.relative_to(ROOT).as_posix(), frozenset(marks), command))
    return out


def checked(cases) -> list[str | None]:
    """check() of each (command, marks), their parses run together: a first pass collects what each would
    parse, one child parses it all, a second pass judges with the answers."""
    global _WANTED
    cases = list(cases)
    _WANTED = []
    try:
        for command, marks in cases:
            check(command, marks)
        wanted = _WANTED
    finally:
        _WANTED = None
    parse_all(wanted)
    return [check(command, marks) for command, marks in cases]


@functools.lru_cache(maxsize=None)
def doc_problems() -> dict[str, list[str]]:
    """Each page's problems, every documented command checked once per test process."""
    found = doc_commands()
    problems: dict[str, list[str]] = {}
    for (doc, _, command), problem in zip(found, checked((command, marks) for _, marks, command in found)):
        if problem:
            problems.setdefault(doc, []).append(f"{command!r}: {problem}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_documented_command_runs_here_or_is_marked(page):
    where = page.relative_to(ROOT).as_posix()
    problems = doc_problems().get(where, [])
    assert not problems, f"{where}:\n" + "\n".join(problems)


def test_the_docs_say_how_to_run_commands_without_an_activated_virtualenv():
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/" in readme.split("## ", 1)[0] and ". .venv/bin/activate" in readme


def test_a_planted_wrong_flag_fails(tmp_path):
    checked((c, frozenset()) for c in (  # their parses in one child: the checks below read its answers
        ".venv/bin/python -m gpu_platform.preflight gcp-prod -v", ".venv/bin/python -m gpu_platform.preflight gcp-prod --verbosity",
        ".venv/bin/python -m gpu_platform.costs simulate examples/seed-scenario.yaml --seedz 20",
        ".venv/bin/python -m gpu_platform.preflight charts pul", "make preflight STACK=aws-prod PREFLIGHT_FLAGS=--verbose-typo",
        ".venv/bin/python -m gpu_platform.preflight gcp-prod --no-such-flag"))
    assert check(".venv/bin/python -m gpu_platform.preflight gcp-prod -v") is None
    assert check(".venv/bin/python -m gpu_platform.preflight gcp-prod --verbosity")
    assert check(".venv/bin/python -m gpu_platform.costs simulate examples/seed-scenario.yaml --seedz 20")
    assert check(".venv/bin/python -m gpu_platform.preflight charts pul")
    assert check("python -m gpu_platform.preflight gcp-prod")  # no virtualenv
    assert check("make preflight STACK=aws-prod PREFLIGHT_FLAGS=--verbose-typo")
    assert check("make preflight-everything")
    assert check("pulumi up -s gcp-prod")  # unmarked cloud command
    assert check("pulumi up -s gcp-prod", frozenset({"cloud"})) is None
    assert check(".venv/bin/python -m pytest -q tests/test_nothing_here.py")
    page = tmp_path / "doc.md"
    page.write_text("```sh cloud\npulumi up\n.venv/bin/python -m gpu_platform.preflight gcp-prod --no-such-flag\n```\n")
    (marks, body), = blocks(page)
    assert marks == {"cloud"} and [check(c, frozenset(marks)) for c in commands(body)][1]


def test_the_policy_table_lists_every_policy_the_pack_runs():
    from gpu_platform.policies import budget_rules, cost_rules, hygiene_rules, security_rules

    running = {p.name for m in (cost_rules, security_rules, hygiene_rules, budget_rules) for p in m.POLICIES}
    listed = set(re.findall(r"^\| `([a-z0-9-]+)`:", (ROOT / "docs" / "policies.md").read_text(), re.M))
    assert listed == running, f"docs/policies.md lists {sorted(listed)}; the pack runs {sorted(running)}"
