"""Local processes of the rehearsal: each in its own process group, its output in a log file, all
stopped (SIGTERM to the group, then SIGKILL) when the rehearsal ends, however it ends."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

# util-linux's setpriv (Debian: essential) sets the parent-death signal and execs the component: if the
# rehearsal itself is killed (SIGKILL), the kernel ends its children too. (No preexec_fn: the rehearsal
# has threads when it starts the controllers.)
_SETPRIV = shutil.which("setpriv")


# Ports for the rehearsal's listeners. A port handed out is not bound until its component starts, seconds or
# minutes later (a controller starts after its release is applied), and in that window two things once took it:
# - the kernel, for the local end of an outgoing connection (a client to the API server): it picks those from
#   net.ipv4.ip_local_port_range, the same range bind(0) picks from; jobset-manager then failed to listen on
#   127.0.0.1:33309 ("address already in use") in a full run;
# - another test worker's rehearsal, which asked the kernel for a free port in the same window.
# So ports come from below that range (a band the kernel never picks for connections), and each is reserved by an
# exclusive lock on a file of its own, shared by every process of this user and held until the process ends (the
# kernel drops the lock then, however the process ends). A port is never handed out twice by one process: two
# controllers of one rehearsal got the same webhook port when ports were only probed.
PORT_LOCKS = Path(tempfile.gettempdir()) / f"gpu-platform-ports-{os.getuid()}"
_BAND_SIZE = 16384
_HELD: dict[int, int] = {}  # port -> the descriptor holding its lock


def port_band(local_range: str = "/proc/sys/net/ipv4/ip_local_port_range") -> range:
    """The ports free_port hands out: the largest band outside the kernel's range for connections' own ends."""
    try:
        low, high = (int(v) for v in Path(local_range).read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    below, above = range(max(1024, low - _BAND_SIZE), low), range(high + 1, min(65536, high + 1 + _BAND_SIZE))
    band = max(below, above, key=len)
    if len(band) < 1024:  # a machine that gives connections (almost) every port: the locks still keep workers apart
        return range(1024, 65536)
    return band


def _listenable(port: int) -> bool:
    """Nothing listens on or is bound to 127.0.0.1:port (SO_REUSEADDR, as Go's listeners: a port in TIME_WAIT is free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(band: Optional[range] = None) -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to, outside the kernel's range for outgoing connections,
    reserved for this process until it ends: no other process of this user and no later call here gets it."""
    band = band if band is not None else port_band()
    PORT_LOCKS.mkdir(mode=0o700, parents=True, exist_ok=True)
    start = random.SystemRandom().randrange(len(band))  # workers start apart, so they seldom try each other's locks
    for k in range(len(band)):
        port = band[(start + k) % len(band)]
        if port in _HELD:
            continue
        fd = os.open(PORT_LOCKS / str(port), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process holds it
            os.close(fd)
            continue
        if _listenable(port):
            _HELD[port] = fd
            return port
        os.close(fd)  # in use by something else: the lock goes with the descriptor
    raise OSError(f"no free TCP port on 127.0.0.1 in {band.start}-{band.stop - 1} that no other rehearsal holds "
                  f"(locks in {PORT_LOCKS})")


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
