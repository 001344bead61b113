"""The pack process that preflight starts ends with preflight, and keeps no stack config on disk.

Preflight (gpu_platform/preflight/analyzer.py) hands the pack the stack config in a file (an environment
string is capped at 128 KiB) and starts it with a pipe on stdin and GPU_PLATFORM_PACK_LIFELINE=1. When the
pack starts (this module is imported by gpu_platform/policies/__init__.py, which every pack imports), it
- reads the config file once into memory and deletes it (stack_settings.take_config_file), so a preflight
  killed with SIGKILL (no atexit, no cleanup) leaves no copy of the config, tokens included, in /tmp;
- watches stdin: preflight never writes to it, so end-of-file means preflight is gone, however it ended
  (SIGKILL included), and the pack exits instead of serving for ever as an orphan.
The Pulumi CLI starts packs without the variable: nothing here runs then.
"""

from __future__ import annotations

import os
import sys
import threading

LIFELINE_ENV = "GPU_PLATFORM_PACK_LIFELINE"
_installed = False


def _exit_when_parent_goes() -> None:
    try:
        while sys.stdin.buffer.read(4096):
            pass
    except (OSError, ValueError):
        pass
    os._exit(0)  # the parent is gone: nobody will call Analyze again


def install() -> None:
    global _installed
    if _installed or os.environ.get(LIFELINE_ENV) != "1":
        return
    _installed = True
    from gpu_platform.policies.stack_settings import take_config_file

    take_config_file()
    threading.Thread(target=_exit_when_parent_goes, name="gpu-platform-lifeline", daemon=True).start()
