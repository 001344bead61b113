"""Files a process keeps for the next one, where only this user can write: what is read back decides a verdict.

Preflight's renders (preflight/fit/render.py) and the price catalog parsed from its YAML (costs/catalog.py) are
kept this way. A folder another user owns or others can write to is not used; a file is read only when it is this
user's own regular file that nobody else can write (not a link, a pipe or a device: a file planted there must not
hang or exhaust the process), and written whole or not at all, readable by this user only.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import threading
from pathlib import Path
from typing import Any, Callable, Optional

_REFUSED: set[str] = set()  # folders already named on stderr, this process


def user_cache_home() -> Optional[Path]:
    """$XDG_CACHE_HOME, or ~/.cache where it is unset, empty or relative (the XDG Base Directory spec: a relative
    path there is invalid and is ignored); None where there is no home to find (no $HOME and no passwd entry, as a
    container's arbitrary user)."""
    env = os.environ.get("XDG_CACHE_HOME")
    if env and os.path.isabs(env):
        return Path(env)
    try:
        return Path.home() / ".cache"
    except (RuntimeError, KeyError):
        return None


def _made_private(stat_of: Callable[[], os.stat_result], chmod: Callable[[int], None]) -> os.stat_result:
    """A folder's status, after closing it to group and others where it is this user's own (an earlier version made
    it 0755, its files 0644 with chart-generated passwords in them, or 0775 under a umask of 002)."""
    st = stat_of()
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
        chmod(stat.S_IMODE(st.st_mode) & 0o7700)
        st = stat_of()
    return st


def _why_not_private(st: os.stat_result) -> Optional[str]:
    """Why a folder with this status may not be used, or None: it is this user's, and nobody else can write to it."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    if st.st_uid != os.getuid():
        return "another user's folder"
    if st.st_mode & 0o022:
        return "others can write to it"
    return None


def open_private_folder(folder: Optional[Path]) -> Optional[int]:
    """A descriptor of `folder` (made if missing) when it is this user's own and only this user can write to it (made
    0700 if it is not yet); else None. What is then read, written and removed goes through the descriptor (`dir_fd`):
    the folder that was checked, even if a path above it, or the folder's own name, is swapped for a link meanwhile.
    The folder itself is not followed if it is a link."""
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if _why_not_private(_made_private(lambda: os.fstat(fd), lambda mode: os.fchmod(fd, mode))) is None:
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def private_folder(folder: Optional[Path], refusal: Optional[str] = None) -> Optional[Path]:
    """`folder`, made if missing and made 0700 if it is this user's, when only this user can write to it; else
    None: not used, and `refusal` (formatted with `folder` and `why`) said once on stderr where given. A folder an
    earlier version made 0755 (its files 0644, chart-generated passwords in them) or 0775 under a umask of 002 is
    closed; what others may have put in it is not read either way, as read_private reads only this user's own
    files."""
    if folder is None:
        return None
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        why = _why_not_private(_made_private(lambda: os.stat(folder), lambda mode: os.chmod(folder, mode)))
    except OSError as exc:
        why = "not a folder" if isinstance(exc, (FileExistsError, NotADirectoryError)) else (exc.strerror or str(exc))
    if why is None:
        return folder
    if refusal is not None and str(folder) not in _REFUSED:
        _REFUSED.add(str(folder))
        sys.stderr.write(refusal.format(folder=folder, why=why) + "\n")
    return None


def write_private(path: Path, text: str, dir_fd: Optional[int] = None) -> bool:
    """`text` into `path` (a name in the folder `dir_fd` opens, where given) whole or not at all, readable by this
    user only; False where the disk refuses."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.{os.urandom(4).hex()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        return True
    except OSError:  # a read-only or full disk only costs speed
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        return False


def read_private(path: Path, limit: int, dir_fd: Optional[int] = None) -> Optional[str]:
    """The text of `path` (a name in the folder `dir_fd` opens, where given) if it is this user's own regular file,
    writable by nobody else, of at most `limit` bytes (not a link, a pipe or a device: a file planted there must not
    hang or exhaust the process); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022 or st.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(st.st_size + 1)  # not the whole bound: a buffer that size would be set aside
        return data.decode("utf-8") if len(data) <= min(st.st_size, limit) else None
    except (OSError, UnicodeDecodeError, MemoryError):
        return None
    finally:
        os.close(fd)


def read_private_json(path: Path, limit: int, dir_fd: Optional[int] = None) -> tuple[Optional[str], Any]:
    """read_private's text and what it parses to as JSON; (None, None) where there is none or it does not parse (a
    kept file is only ever a cache: the caller computes it again)."""
    text = read_private(path, limit, dir_fd=dir_fd)
    if text is None:
        return None, None
    try:
        return text, json.loads(text)
    except (ValueError, RecursionError, MemoryError):
        return None, None
