"""Local processes of the rehearsal: each in its own process group, its output in a log file, all
stopped (SIGTERM to the group, then SIGKILL) when the rehearsal ends, however it ends."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

# util-linux's setpriv (Debian: essential) sets the parent-death signal and execs the component: if the
# rehearsal itself is killed (SIGKILL), the kernel ends its children too. (No preexec_fn: the rehearsal
# has threads when it starts the controllers.)
_SETPRIV = shutil.which("setpriv")


# Ports this process handed out. The kernel may give a port it gave before once that socket closed: two
# controllers got the same webhook port in one rehearsal (one failed to listen), so never repeat one.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 that this process has not handed out before."""
    for _ in range(1000):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise OSError("no free TCP port on 127.0.0.1 that was not handed out already")


@dataclass
class Proc:
    name: str
    argv: list[str]
    log: Path
    popen: subprocess.Popen
    started: float = field(default_factory=time.monotonic)

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class ProcessGroup:
    """Starts processes and stops them all, newest first."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.procs: list[Proc] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def start(self, name: str, argv: list[str], env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None) -> Proc:
        log = self.log_dir / f"{name}.log"
        fh = open(log, "wb")
        try:
            prefix = [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []
            popen = subprocess.Popen(prefix + [str(a) for a in argv], stdout=fh, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, env=env, cwd=cwd)
        finally:
            fh.close()
        proc = Proc(name, [str(a) for a in argv], log, popen)
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, grace: float = 5.0) -> None:
        if proc.popen.poll() is None:
            try:
                os.killpg(proc.popen.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.popen.wait(grace)
            except subprocess.TimeoutExpired:
                pass
        try:  # the group too: a child it started must not outlive it
            os.killpg(proc.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.popen.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def stop_all(self) -> None:
        # Controllers first, then the control plane: the reverse of the start order.
        for proc in reversed(self.procs):
            self.stop(proc, grace=3.0)

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.procs]
