"""The rehearsal's ports (gpu_platform/rehearsal/processes.py free_port): a port handed out stays its component's
until that component binds it, minutes later for a controller, whatever else runs on the machine meanwhile. A full
run once failed eight tests when jobset-manager could not listen on 127.0.0.1:33309, a port from the kernel's own
range for outgoing connections."""

from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpu_platform.rehearsal import processes
from tests.conftest import ROOT


@pytest.fixture
def own_locks(tmp_path, monkeypatch):
    """free_port with a lock file and a held-port table of this test's own."""
    monkeypatch.setattr(processes, "PORT_LOCKS", tmp_path / "ports.lock")
    monkeypatch.setattr(processes, "_HELD", set())
    monkeypatch.setattr(processes, "_LOCK_FDS", {})
    yield tmp_path / "ports.lock"
    for fd in processes._LOCK_FDS.values():
        os.close(fd)


def _kernel_range() -> tuple[int, int]:
    low, high = (int(v) for v in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return low, high


def _quiet_band(n: int) -> range:
    """n consecutive ports that nothing on this machine is bound to now, outside both the kernel's range and the
    band the rehearsals of other test workers take theirs from (so none of them binds one meanwhile)."""
    low, high = _kernel_range()
    taken = processes.port_band()
    quiet = [p for p in range(1024, 65536) if p not in taken and not low <= p <= high]
    start = random.randrange(len(quiet)) if quiet else 0  # two test sessions at once seldom pick the same ports
    run: list[int] = []
    for port in quiet[start:] + quiet[:start]:
        run = run + [port] if (not run or run[-1] == port - 1) and processes._listenable(port) else []
        if len(run) == n:
            return range(run[0], run[-1] + 1)
    pytest.skip(f"no {n} consecutive free ports outside the rehearsals' {taken.start}-{taken.stop - 1} and the "
                f"kernel's {low}-{high} on this machine")


@pytest.mark.parametrize(("kernel_range", "band"), [
    ("32768\t60999\n", range(16384, 32768)),  # Linux's default: the 16,384 ports below it
    ("10000 40000", range(40001, 56385)),     # more room above than below
    ("1024 65000", range(1024, 65536)),        # no room on either side: every port, the locks keep workers apart
    ("not numbers", range(16384, 32768)),      # unreadable: Linux's default range assumed
])
def test_the_band_lies_outside_the_kernels_range_for_outgoing_connections(tmp_path, kernel_range, band):
    f = tmp_path / "ip_local_port_range"
    f.write_text(kernel_range)
    assert processes.port_band(str(f)) == band
    assert processes.port_band(str(tmp_path / "absent")) == range(16384, 32768)


def test_a_port_handed_out_is_one_the_kernel_never_gives_a_connection(own_locks):
    low, high = _kernel_range()
    band = processes.port_band()
    if band.start <= high and low < band.stop:
        pytest.skip(f"this machine gives connections {low}-{high}: the band is every port, the locks keep workers apart")
    ports = [processes.free_port() for _ in range(20)]
    assert not [p for p in ports if low <= p <= high], (ports, low, high)
    assert len(set(ports)) == 20


def test_a_port_is_never_handed_out_twice_by_one_process(own_locks):
    """Two controllers of one rehearsal once got the same webhook port: the kernel repeats a probed port."""
    band = _quiet_band(3)
    assert sorted(processes.free_port(band) for _ in range(3)) == list(band)
    with pytest.raises(OSError, match=f"no free TCP port in {band.start}-{band.stop - 1}"):
        processes.free_port(band)


@pytest.mark.parametrize("address", ["127.0.0.1", "0.0.0.0", "127.0.0.2", "::", "::1 (IPv6 only)"])
def test_a_port_something_listens_on_is_never_handed_out(own_locks, address):
    """Whatever the address: the Trainer's status server listens on every interface, IPv6 included."""
    band = _quiet_band(2)
    host, _, v6only = address.partition(" ")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        listener = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        pytest.skip("no IPv6 on this machine")
    with listener:
        if v6only:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            listener.bind((host, band.start))
        except OSError as exc:
            if exc.errno == errno.EADDRNOTAVAIL:
                pytest.skip(f"no address {host} on this machine")
            raise
        listener.listen()
        assert [processes.free_port(band)] == [band.start + 1]
        with pytest.raises(OSError, match="no free TCP port"):
            processes.free_port(band)


def test_threads_of_one_process_asking_at_once_never_get_the_same_port(own_locks):
    band = _quiet_band(24)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda _: processes.free_port(band), range(24)))
    assert sorted(got) == list(band)


@pytest.mark.parametrize("planted", ["a link", "another user's file", "a file others can write", "a folder",
                                     "a hard link", "a named pipe"])
def test_a_lock_file_that_is_not_this_users_own_is_refused_naming_it(own_locks, tmp_path, monkeypatch, planted):
    """The lock file lies in the shared temporary folder and CI runs the suite as root: a planted link must not make
    free_port create or lock a file elsewhere, and another user's file must not decide which ports it gets."""
    victim = tmp_path / "victim"
    if planted == "a link":
        own_locks.symlink_to(victim)
    elif planted == "a folder":
        own_locks.mkdir()
    elif planted == "a hard link":  # to a file of the same user's, elsewhere: its locks would be another file's
        victim.write_text("")
        os.link(victim, own_locks)
    elif planted == "a named pipe":
        os.mkfifo(own_locks, 0o600)
    else:
        own_locks.write_text("")
        own_locks.chmod(0o666 if planted == "a file others can write" else 0o600)
        if planted == "another user's file":
            monkeypatch.setattr(processes.os, "getuid", lambda: os.stat(own_locks).st_uid + 1)
    with pytest.raises(OSError, match=f"port lock file {own_locks}.*remove it"):
        processes.free_port(_quiet_band(1))
    assert victim.exists() == (planted == "a hard link")  # a link's target is never created
    assert processes._HELD == set()


def test_a_lock_file_on_a_file_system_without_posix_locks_is_an_error_naming_it(own_locks, monkeypatch):
    """Not "no free port" after trying every port of the band: the reason, and the file."""
    def no_locks(*args):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(processes.fcntl, "lockf", no_locks)
    with pytest.raises(OSError, match=f"port lock file {own_locks}: No locks available .*POSIX record locks"):
        processes.free_port(_quiet_band(1))


_ASKER = textwrap.dedent("""
    import sys
    from pathlib import Path
    from gpu_platform.rehearsal import processes
    processes.PORT_LOCKS = Path(sys.argv[1])
    band = range(int(sys.argv[2]), int(sys.argv[3]))
    print(" ".join(str(processes.free_port(band)) for _ in range(int(sys.argv[4]))), flush=True)
    sys.stdin.read()  # the ports stay this process's until the test lets it end
""")


def _ask(locks: Path, band: range, n: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _ASKER, str(locks), str(band.start), str(band.stop), str(n)],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_asking_at_once_never_get_the_same_port_and_an_ended_ones_come_free(tmp_path):
    """Test workers run rehearsals side by side: a port one has handed out and not yet bound is not another's."""
    band, locks = _quiet_band(40), tmp_path / "ports.lock"
    first, second = _ask(locks, band, 15), _ask(locks, band, 15)
    try:
        got = [set(map(int, p.stdout.readline().split())) for p in (first, second)]
        assert [len(g) for g in got] == [15, 15], [p.stderr.read() for p in (first, second)]
        assert got[0].isdisjoint(got[1]), got
        assert got[0] | got[1] <= set(band)
        third = _ask(locks, band, 11)  # 40 - 30 ports are left while both hold theirs
        out, err = third.communicate("", timeout=60)
        assert third.returncode == 1 and "no free TCP port" in err, (out, err)
    finally:
        for p in (first, second):
            p.communicate("", timeout=60)
    again = _ask(locks, band, 40)  # the locks died with their processes
    out, err = again.communicate("", timeout=60)
    assert again.returncode == 0 and set(map(int, out.split())) == set(band), err
