"""A small real file system for the full-disk tests: a size-limited tmpfs mounted for one
test and unmounted after it (CI runs the tests as root), and a filler file that leaves a
chosen number of bytes free on it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_disk(where: Path, size: int) -> Iterator[Path]:
    """``where`` as a tmpfs of ``size`` bytes; skips the test where mounting is not allowed."""
    where.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        pytest.skip("no mount command here: the full-disk tests mount a small tmpfs (as root, as in CI)")
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs at {where} ({proc.stderr.strip() or 'mount failed'}): the full-disk "
            "tests need root, as CI runs them"
        )
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)  # a file still open: detach


def fill_leaving(folder: Path, free: int) -> Path:
    """Allocate a filler file in ``folder`` so that about ``free`` bytes stay free on its
    disk (tmpfs counts whole pages); delete it to make room again."""
    filler = folder / "filler.bin"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        grow = shutil.disk_usage(folder).free - free
        if grow > 0:
            os.posix_fallocate(fd, os.fstat(fd).st_size, grow)
    finally:
        os.close(fd)
    return filler
