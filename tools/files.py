"""Writing files so that no reader ever sees half of one: every cache, record and marker
file of the project is written through here (a temporary file beside the target, then a
rename, which is atomic on one file system)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path``; fill it inside the ``with`` block (any
    writer: text, ``torch.save``, a SQLite build) and it replaces ``path`` when the block
    ends without an error. On an error it is removed and ``path`` is left as it was.

    Each call gets its own temporary name, so concurrent writers never write into one file;
    the last rename wins. The file gets the usual permissions (umask), unlike ``mkstemp``'s.
    """
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)  # only left after a failure


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically (see ``atomic_path``); returns ``path``."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return Path(path)
