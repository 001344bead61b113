"""Which policy the pack is running right now, so a hung rule can be named.

preflight gives every analyzer call a deadline; when one passes it sends the pack SIGUSR1 and reads
the line this module prints to stderr (`gpu-platform-policy-running: <names>`) before killing the
pack. Under the Pulumi CLI nothing sends the signal and the wrapper only records names.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any, Sequence

MARKER = "gpu-platform-policy-running:"
_running: dict[int, str] = {}  # thread id -> the policy that thread is validating


def _wrap(name: str, validate: Any) -> Any:
    def tracked(args: Any, report_violation: Any) -> Any:
        me = threading.get_ident()
        _running[me] = name
        try:
            return validate(args, report_violation)
        finally:
            _running.pop(me, None)

    return tracked


def _report(_signum: int, _frame: Any) -> None:
    print(f"{MARKER} {', '.join(sorted(set(_running.values()))) or '(none)'}", file=sys.stderr, flush=True)


def track(policies: Sequence[Any]) -> list[Any]:
    """Wrap each policy's validate (an instance attribute shadows the method pulumi_policy calls)."""
    for p in policies:
        p.validate = _wrap(p.name, p.validate)
    if hasattr(signal, "SIGUSR1") and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGUSR1, _report)
    return list(policies)
