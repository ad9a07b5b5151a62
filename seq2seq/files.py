"""What a path given as an input file is, when it is not a regular file; what an output
path may replace.

A directory, a FIFO or a device given where a file is read must be named as what it is
("data file not found" for a folder that exists misleads), and a FIFO must never be opened
where the whole file is read at once: ``open`` blocks until a writer comes, forever. An
output is written atomically (a temporary file renamed over the name), and a rename replaces
whatever the name is: a device node, a pipe, or one of the command's own inputs, so
:func:`check_output` says which names an output may take; :func:`write_atomic` is that write
(:func:`save_atomic` for ``torch.save``).
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, BinaryIO

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


def check_output(path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = (),
                 force: bool = False, what: str = "output") -> Path:
    """``path`` if a command may write its output there, else a one-line ``ValueError``
    naming ``what`` and the path. Free names are fine; an existing name only when it is a
    regular file (never a folder, FIFO, device or socket, even with ``force``) that is none
    of ``inputs`` (the same file by inode: a hard link or symlink to an input counts, even
    with ``force``), and only with ``force``."""
    kind = kind_of(path)
    if kind == "missing":
        return Path(path)
    if kind is not None:
        raise ValueError(f"{what} {path}: is {kind}; an output is only ever written to a regular "
                         "file: give a file name")
    for source in inputs:
        try:
            same = os.path.samefile(path, source)
        except OSError:  # an input that is not there is not this file
            same = False
        if same:
            also = "" if os.path.abspath(path) == os.path.abspath(source) else f" ({source})"
            raise ValueError(f"{what} {path}: is one of the inputs{also}; writing it "
                             "would destroy that input: choose another file name")
    if not force:
        raise ValueError(f"{what} {path}: exists; --force replaces it, or choose another name")
    return Path(path)


# How much of a text input is looked at before anything runs, and how many invalid UTF-8
# sequences in it are still "a few stray bytes" (replaced, with a warning) and not another
# encoding or a binary file.
SNIFF_BYTES = 1 << 16
STRAY_BYTES = 8
_MAGIC = ((b"PK\x03\x04", "a zip archive (a checkpoint, a .docx, ...)"),
          (b"\x1f\x8b", "gzip-compressed data"), (b"%PDF", "a PDF document"),
          (b"\x89PNG", "a PNG image"))


def not_text(path: str | os.PathLike[str]) -> str | None:
    """What the start of the regular file ``path`` looks like when it is not UTF-8 text
    (a NUL byte, a UTF-16/32 byte-order mark, more than ``STRAY_BYTES`` invalid UTF-8
    sequences in its first ``SNIFF_BYTES``), with what to do; ``None`` for text."""
    with open(path, "rb") as f:
        head = f.read(SNIFF_BYTES)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return ("UTF-16 text (it starts with a UTF-16 byte-order mark); convert it to UTF-8 "
                "first: iconv -f UTF-16 -t UTF-8")
    if b"\x00" in head:
        kind = next((name for magic, name in _MAGIC if head.startswith(magic)), "a binary file")
        return f"{kind}, not text (it holds NUL bytes); give a UTF-8 text file"
    bad, pos = 0, 0
    while pos < len(head):
        try:
            head[pos:].decode("utf-8")
            break
        except UnicodeDecodeError as e:
            if e.end == len(head) - pos and len(head) == SNIFF_BYTES:
                break  # a character cut by the end of the sample
            bad, pos = bad + 1, pos + e.end
        if bad > STRAY_BYTES:
            return (f"not UTF-8 text (over {STRAY_BYTES} invalid UTF-8 sequences in its first "
                    f"{min(len(head), SNIFF_BYTES):,} bytes: Latin-1, Windows-1252 or another "
                    "encoding?); convert it first, e.g. iconv -f LATIN1 -t UTF-8")
    return None


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


def new_file_mode() -> int:
    """The mode ``open()`` gives a new file: 0o666 less the umask (``mkstemp`` gives 0o600)."""
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return 0o666 & ~mask


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def stale_temporaries(folder: str | os.PathLike, name: str = "*") -> list[Path]:
    """Temporary files :func:`save_atomic` left in ``folder`` (for target ``name``) when it
    was killed mid-write: ``.NAME.PID.XXXX.tmp`` whose writer process is gone (a write in
    progress in another process is left alone)."""
    stale = []
    for p in Path(folder).glob(f".{name}.*.tmp"):
        pid = p.name.removesuffix(".tmp").split(".")[-2]
        if not (pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid))):
            stale.append(p)
    return sorted(stale)


def write_atomic(path: str | os.PathLike, write: Callable[[BinaryIO], Any],
                 mode: int | None = None) -> None:
    """``write(f)`` into a temporary file in the same folder, fsync, then rename over
    ``path``: a crash leaves either the old file or the new one, never half of one.
    Temporary files of an earlier write of ``path`` that was killed (kill -9 skips cleanup)
    are removed. ``mode``: the file's permission bits (default: what ``open()`` gives)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write {path}: it is a directory")
    for stale in stale_temporaries(path.parent, path.name):
        stale.unlink(missing_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp makes it owner-only; give it open()'s mode (or the file's it replaces)
        os.chmod(tmp, new_file_mode() if mode is None else mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_atomic(obj: Any, path: str | os.PathLike, mode: int | None = None) -> None:
    """``torch.save(obj)`` to ``path`` through :func:`write_atomic`."""
    def write(f: BinaryIO) -> None:
        import torch  # after the path checks: they serve commands before torch is imported

        torch.save(obj, f)

    write_atomic(path, write, mode)
