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
"""

from __future__ import annotations

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
# Run a module with argparse stopped after its first successful parse (exit 0, nothing done).
PARSE_ONLY = """
import argparse, runpy, sys
_parse = argparse.ArgumentParser.parse_args
def parse_args(self, args=None, namespace=None):
    _parse(self, args, namespace)
    print("doc-command: arguments accepted", file=sys.stderr)
    raise SystemExit(0)
argparse.ArgumentParser.parse_args = parse_args
module = sys.argv[1]
sys.argv = [module] + sys.argv[2:]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


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
    run = subprocess.run([str(ROOT / VENV_PY), "-c", PARSE_ONLY, module, *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    if run.returncode == 0 and "doc-command: arguments accepted" in run.stderr:
        return None
    return (run.stderr or run.stdout).strip().splitlines()[-1] if (run.stderr or run.stdout).strip() else f"exit {run.returncode}"


def check_make(words: list[str]) -> str | None:
    run = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
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
        run = subprocess.run([str(ROOT / VENV_PY), *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
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


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_documented_command_runs_here_or_is_marked(page):
    where = page.relative_to(ROOT).as_posix()
    problems = [f"{command!r}: {problem}" for doc, marks, command in doc_commands() if doc == where
                if (problem := check(command, marks))]
    assert not problems, f"{where}:\n" + "\n".join(problems)


def test_the_docs_say_how_to_run_commands_without_an_activated_virtualenv():
    readme = (ROOT / "README.md").read_text()
    assert ".venv/bin/" in readme.split("## ", 1)[0] and ". .venv/bin/activate" in readme


def test_a_planted_wrong_flag_fails(tmp_path):
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
