"""What a path given as an input file is, when it is not a regular file.

A directory, a FIFO or a device given where a file is read must be named as what it is
("data file not found" for a folder that exists misleads), and a FIFO must never be opened
where the whole file is read at once: ``open`` blocks until a writer comes, forever.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(path: str | os.PathLike[str]) -> str | None:
    """``None`` for a regular file (or a link to one), else what ``path`` is instead:
    ``"missing"`` when nothing is there, ``"a directory"``, ``"a named pipe (FIFO)"``, ..."""
    try:
        mode = os.stat(path).st_mode  # follows links: a link to a file is a file
    except FileNotFoundError:
        return "missing"
    except OSError as e:  # a dangling loop, a permission problem on a parent folder
        return f"not accessible ({e.strerror})"
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular_file(path: str | os.PathLike[str], what: str) -> Path:
    """``path`` if it is a regular file, else a one-line error naming ``what`` and the path:
    ``FileNotFoundError`` when nothing is there, ``ValueError`` naming what is there instead."""
    kind = kind_of(path)
    if kind == "missing":
        raise FileNotFoundError(f"{what} not found: {path}")
    if kind is not None:
        raise ValueError(f"{what} {path}: is {kind}, not a regular file")
    return Path(path)


def lock_folder(folder: str | os.PathLike[str], what: str) -> int | None:
    """An exclusive lock on ``folder`` (created if missing) for as long as the returned
    descriptor is open: released by :func:`unlock`, or by the OS when the process ends,
    even by kill -9 (``flock`` on the folder itself: no lock file to leave behind).
    A folder another process holds is a one-line ``ValueError`` naming ``what`` it is.
    ``None`` where the system has no ``flock``."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"{what} {path}: another process is using it (a training run started "
                         "earlier and still running?); wait for it to end, or choose another "
                         "folder") from None
    return fd


def unlock(fd: int | None) -> None:
    """Release a :func:`lock_folder` lock."""
    if fd is not None:
        os.close(fd)  # closing the only descriptor releases the flock
