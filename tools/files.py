"""Writing files so that no reader ever sees half of one: every cache, record and marker
file of the project is written through here (a temporary file beside the target, then a
rename, which is atomic on one file system; records grow by whole lines).

A write that finds its disk full (``ENOSPC``, or ``EDQUOT``: the quota spent) raises
``DiskFullError`` naming the directory, the bytes free there and the bytes the write
needed; what was there before stays as it was and no temporary file or half line is left.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from tools.errors import DiskFullError

FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
_FULL_TEXTS = (
    "no space left on device",
    "disk quota exceeded",
    "database or disk is full",
    "os error 28",
    "os error 122",
)
SQLITE_FULL = 13
LOW_SPACE_BYTES = 1 << 20
"""Below this many free bytes a writer's error that names no cause is taken for a full disk
(``torch.save`` reports one only as "unexpected pos ..." from its C++ stream)."""
DEFAULT_HINT = "free space there, or write to a disk with room"


def free_bytes(directory: str | Path) -> int | None:
    """Bytes free for this user in ``directory`` (None when it cannot be read)."""
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def disk_is_full(err: BaseException, directory: str | Path | None = None) -> bool:
    """Whether ``err`` (or an error it was raised from or while handling) is a full disk or
    a spent quota; with ``directory``, a ``RuntimeError`` that names no cause counts too when
    that disk has under ``LOW_SPACE_BYTES`` left (measure before removing the partial file)."""
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, DiskFullError):
            return True
        if isinstance(cause, OSError) and cause.errno in FULL_ERRNOS:
            return True
        if getattr(cause, "sqlite_errorcode", None) == SQLITE_FULL:
            return True
        if any(text in str(cause).lower() for text in _FULL_TEXTS):
            return True
        cause = cause.__cause__ or cause.__context__
    if directory is not None and isinstance(err, RuntimeError):
        free = free_bytes(directory)
        return free is not None and free < LOW_SPACE_BYTES
    return False


def size_text(count: int | None) -> str:
    """``1,234,567 bytes (1.2 MiB)``; "an unknown number of bytes" for None."""
    if count is None:
        return "an unknown number of bytes"
    value, unit = float(count), "bytes"
    for name in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    return f"{count:,} bytes" + (f" ({value:.1f} {unit})" if unit != "bytes" else "")


def disk_full_error(
    directory: str | Path, what: str, needed: int | None, hint: str = "", at_least: bool = False, basis: str = ""
) -> DiskFullError:
    """The ``DiskFullError`` of a write of ``what`` into ``directory`` that needed ``needed``
    bytes (``at_least``: only a lower bound is known; ``basis``: where the figure comes from),
    with the free bytes measured now."""
    free = free_bytes(directory)
    if at_least and (needed or 0) <= (free or 0):  # it wrote no more than is free now: "more" is all that is known
        need = "more than that"
    else:
        need = ("at least " if at_least else "") + size_text(needed) + (f" ({basis})" if basis else "")
    error = DiskFullError(
        f"no space left in {directory} to write {what}: {size_text(free)} free there, the write needs {need}; "
        f"{hint or DEFAULT_HINT}",
        directory=str(directory),
        free=free,
        needed=needed,
    )
    error.errno = errno.ENOSPC
    return error


def _size_of(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


@contextlib.contextmanager
def atomic_path(path: str | Path, hint: str = "", needed: int | None = None) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; fill it inside the ``with`` block (any
    writer: text, ``torch.save``, a SQLite build) and it replaces ``path`` when the block
    ends without an error. On an error it is removed and ``path`` is left as it was.

    Each call gets its own temporary name, so concurrent writers never write into one file;
    the last rename wins. The file gets the usual permissions (umask), unlike ``mkstemp``'s.
    A full disk raises ``DiskFullError`` (``needed``: the bytes the write takes, when known;
    ``hint``: where to make room).
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    except Exception as err:
        if isinstance(err, DiskFullError) or not disk_is_full(err, target.parent):
            raise
        written = _size_of(tmp)
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}-journal").unlink(missing_ok=True)  # a SQLite build's rollback journal
        known = needed is not None
        basis = "" if known else "what it had written when the disk filled"
        raise disk_full_error(target.parent, target.name, needed if known else written, hint, not known, basis) from err
    finally:
        tmp.unlink(missing_ok=True)  # only left after a failure


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8", hint: str = "") -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_path``); returns ``path``."""
    data = text.encode(encoding)
    with atomic_path(path, hint, needed=len(data)) as tmp:
        tmp.write_bytes(data)
    return Path(path)


class LineFile:
    """A records file that grows by whole lines: each ``append`` is written with one
    ``os.write`` of the encoded text, and one that fails (a full disk) is cut back to where
    the file ended, so no half line stays for a reader or a later append to meet."""

    def __init__(self, path: str | Path, hint: str = "") -> None:
        self.path, self.hint = Path(path), hint
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def append(self, text: str) -> None:
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        data = text.encode("utf-8")
        end = os.fstat(self._fd).st_size
        try:
            view = memoryview(data)
            while view:  # a disk filling up mid-write returns a short count first
                view = view[os.write(self._fd, view) :]
        except OSError as err:
            os.ftruncate(self._fd, end)  # shrinking needs no space
            if disk_is_full(err):
                raise disk_full_error(self.path.parent, self.path.name, len(data), self.hint) from err
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def append_text(path: str | Path, text: str, hint: str = "") -> None:
    """Append ``text`` (whole lines) to ``path`` as one write (see ``LineFile``)."""
    out = LineFile(path, hint)
    try:
        out.append(text)
    finally:
        out.close()
