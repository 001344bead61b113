"""The first moments of `gpu-platform-preflight` / `python -m gpu_platform.preflight`, before it has started.

Importing the command takes a third of a second on an idle 2-core machine and seconds on a loaded one
(the cloud SDKs' models, pydantic's validators). A Ctrl-C in that window met Python's default handler
and printed a KeyboardInterrupt traceback from deep inside an import. Nothing has been started or
written yet, so the handler installed here ends the process at once, quietly, with 128+N; the
command replaces it with its own (which stops the policy pack and removes temporary files) as soon
as it starts. Standard library only, so it is in place before anything heavy is imported.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
from typing import Any

# What a terminal's Ctrl-C, a closed terminal/SSH session and `kill` send.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _before_start(signum: int, _frame: Any) -> None:
    try:
        sys.stderr.write(f"preflight: interrupted ({signal.Signals(signum).name}) while starting; nothing was run or written\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed stderr must not turn into a traceback either
        pass
    os._exit(128 + signum)


def end_quietly_until_started() -> None:
    """Until the command installs its own handlers: any stop signal ends the process, quietly, with 128+N."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _before_start)


def quiet_grpc_core() -> None:
    """gRPC's core logs at absl's default INFO level unless told otherwise: a run that stopped its policy pack printed
    `I1201 ... chttp2_transport.cc:1403] ... Got goaway [2]` under its one-line message. Read once, when grpc is
    first imported: `__main__` calls it before its own imports, under `python -m` and the console script alike (which
    runs that module); a GRPC_VERBOSITY the user set is kept."""
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")


def command() -> None:
    """The console script: the handlers first, then the command exactly as `python -m` runs it."""
    end_quietly_until_started()
    runpy.run_module("gpu_platform.preflight", run_name="__main__", alter_sys=False)
