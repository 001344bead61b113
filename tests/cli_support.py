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
from pathlib import Path
from typing import Mapping, Optional


def preflight_in_process(*args: str, env: Optional[Mapping[str, str]] = None,
                         cwd: Optional[Path] = None) -> subprocess.CompletedProcess:
    """`gpu-platform-preflight ARGS` as a CompletedProcess (returncode, stdout, stderr), run by main()."""
    from gpu_platform.preflight.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    try:
        os.environ.update(env or {})
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
    return subprocess.CompletedProcess(["gpu-platform-preflight", *args], code, out.getvalue(), err.getvalue())
