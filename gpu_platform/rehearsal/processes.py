"""Local processes of the rehearsal: each in its own process group, its output in a log file, all
stopped (SIGTERM to the group, then SIGKILL) when the rehearsal ends, however it ends."""

from __future__ import annotations

import errno
import fcntl
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import threading
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
# So ports come from outside that range (a band the kernel never picks for connections), and each is reserved by
# a lock on its own byte of one lock file, shared by every process of this user and held until the process ends
# (the kernel drops a process's locks then, however it ends). A port is never handed out twice by one process: two
# controllers of one rehearsal got the same webhook port when ports were only probed.
PORT_LOCKS = Path(tempfile.gettempdir()) / f"gpu-platform-ports-{os.getuid()}.lock"
_BAND_SIZE = 16384
_HELD: set[int] = set()
_LOCK_FDS: dict[Path, int] = {}  # a lock file's one descriptor: closing any descriptor of it drops every lock
_PICKING = threading.Lock()  # the byte locks are the process's: threads of one process are kept apart here


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


def _lock_file(path: Path) -> int:
    """The descriptor of this user's port lock file, opened once. Refused, naming the file, when it is anything but
    a regular file of this user's that no one else can write: it is in a shared folder, and the rehearsal runs as
    root in CI (a planted link must not make it create or lock a file elsewhere)."""
    fd = _LOCK_FDS.get(path)
    if fd is not None:
        return fd
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NOCTTY, 0o600)
    except OSError as exc:
        what = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise OSError(f"cannot open the rehearsal's port lock file {path} ({what}): remove it") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_nlink != 1:
        os.close(fd)
        raise OSError(f"the rehearsal's port lock file {path} is not a regular file of this user's (uid {os.getuid()}) "
                      f"that only it can write, under one name (owner uid {st.st_uid}, mode "
                      f"{stat.filemode(st.st_mode)}, {st.st_nlink} links): remove it")
    os.utime(fd)  # a temporary-file cleaner ages files by time: the file in use is never an old one
    _LOCK_FDS[path] = fd
    return fd


def _listenable(port: int) -> bool:
    """Nothing listens on or is bound to the port on any address: some components listen on every interface (the
    Trainer's status server), IPv6 included. SO_REUSEADDR, as Go's and Python's listeners: a port in TIME_WAIT is free."""
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError:  # no IPv6 on this machine
            continue
        with s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                if exc.errno != errno.EADDRNOTAVAIL:  # "::" where IPv6 has no address
                    return False
    return True


def free_port(band: Optional[range] = None) -> int:
    """A TCP port that nothing is bound to, outside the kernel's range for outgoing connections, reserved for this
    process until it ends: no other process of this user and no later call here gets it."""
    band = band if band is not None else port_band()
    with _PICKING:
        fd = _lock_file(PORT_LOCKS)
        start = random.SystemRandom().randrange(len(band))  # workers start apart and seldom meet each other's locks
        for k in range(len(band)):
            port = band[(start + k) % len(band)]
            if port in _HELD:
                continue
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, port, os.SEEK_SET)
            except OSError as exc:
                if exc.errno in (errno.EACCES, errno.EAGAIN):  # another process holds it
                    continue
                raise OSError(f"cannot lock in the rehearsal's port lock file {PORT_LOCKS}: {exc.strerror} (its "
                              f"file system must support POSIX record locks)") from None
            if _listenable(port):
                _HELD.add(port)
                return port
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, port, os.SEEK_SET)  # in use by something else
    raise OSError(f"no free TCP port in {band.start}-{band.stop - 1} that no other rehearsal holds (locks: {PORT_LOCKS})")


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
