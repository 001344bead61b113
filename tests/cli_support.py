"""Preflight's command line, run in the test's own process.

Each `python -m gpu_platform.preflight` starts an interpreter that imports the cloud SDKs again (a third of
a run's CPU on 2 cores). A test about what the command prints, writes or exits with calls `main(argv)` here
instead: the same argument parsing, exit code, stdout and stderr, with the environment and working folder
the test asks for, both restored afterwards. Tests of the process itself keep a subprocess: signals, a closed
pipe, colour on a terminal, two processes writing the same bytes (hash seeds differ between processes, not
within one), the installed wheel and its console script.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping, Optional


# Modules loaded from these stay loaded: the interpreter's own and its packages (the SDKs), and this package.
_KEPT = tuple(str(Path(p).resolve()) for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}) + (
    str(Path(__file__).resolve().parent.parent / "gpu_platform"),)


def _from_another_project(file: Optional[str]) -> bool:
    return bool(file) and not str(Path(file).resolve()).startswith(_KEPT)


def preflight_in_process(*args: str, env: Optional[Mapping[str, Optional[str]]] = None,
                         cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """`gpu-platform-preflight ARGS` as a CompletedProcess (returncode, stdout, stderr), run by main(). `env`
    sets variables, or unsets those given None. Whatever a run adds to sys.path and sys.modules (`-C DIR` runs
    another project's program from its folder) is taken away again, so a later test imports what it would in
    a process of its own."""
    from gpu_platform.preflight.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_path, saved_modules = list(sys.path), set(sys.modules)
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's own exits (--help)
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for name in set(sys.modules) - saved_modules:
            if _from_another_project(getattr(sys.modules[name], "__file__", None)):
                del sys.modules[name]
    return subprocess.CompletedProcess(["gpu-platform-preflight", *args], code, out.getvalue(), err.getvalue())
