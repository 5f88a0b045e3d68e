"""Where every package keeps its on-disk caches (indexes, profiles, minibird, models), and
how a cached file earns trust when it is loaded.

Every cache written through here gets a manifest: beside a cached file ``x`` as
``x.manifest.json``, inside a cached folder as ``manifest.json``, holding each file's size,
modification time and SHA-256. ``check_cached`` compares a cache with its manifest:

- every file's size, always (a ``stat``);
- the SHA-256 of every file up to ``HASH_ALWAYS_BYTES`` (1 MiB: a profile, an index's
  metadata; well under a millisecond). A larger file is hashed only when its modification
  time differs from its manifest's, as it does after any write that damaged it: hashing on
  every load would cost 20 ms on a 21 MB BM25 index (7% of its 0.33 s load) and 0.4-0.6 s on
  the converted model's 538 MB of weights (loading the whole model takes about 0.4 s),
  where the stat-only check costs 0.1-0.3 ms. Damage that leaves the time alone (bit rot) is left to the loader;
- once per process: a cache checked here is checked again only when a file's size or
  modification time changes (``fts_search`` opens its index on every query: 20 us then).

``load_checked`` loads a cache that passes; one that fails, or whose loader raises, is
removed with a ``CacheDamagedWarning`` naming the file and what was wrong, and the caller
rebuilds it: a damaged cache is never trusted and never fatal. A cache written before
manifests existed (none beside it) is trusted once its loader (or a structural check) reads
it without error, and its manifest is written then, so no working cache is rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, TypeVar

from tools.errors import DiskFullError
from tools.files import atomic_path, atomic_write_text, disk_full_error, disk_is_full

CACHE_ENV = "SQLAGENT_RL_CACHE"
CACHE_FULL_HINT = (
    f"free space there, or point ${CACHE_ENV} at a disk with room (the caches are built again there on first use)"
)
MANIFEST_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
FOLDER_MANIFEST = "manifest.json"
HASH_ALWAYS_BYTES = 1 << 20
UNRECORDED = "it has no manifest (written before caches had one)"
_SETTLED_NS = 2_000_000_000
"""A file changed this close to its check may share its modification time with a later
write (file times tick in milliseconds), so the check is not remembered for it."""

T = TypeVar("T")


def cache_root() -> Path:
    """``$SQLAGENT_RL_CACHE`` or ``~/.cache/sqlagent-rl``; created on first use."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "sqlagent-rl")
    root.mkdir(parents=True, exist_ok=True)
    return root


class CacheDamagedWarning(UserWarning):
    """A cached file failed its manifest check or its load; it is rebuilt."""


class CacheProblem(NamedTuple):
    """What is wrong with a cache: the file and what."""

    file: Path
    what: str


def manifest_path(path: str | Path) -> Path:
    """The manifest of a cached file (beside it) or folder (inside it)."""
    path = Path(path)
    return path / FOLDER_MANIFEST if path.is_dir() else path.with_name(path.name + MANIFEST_SUFFIX)


def _members(path: Path) -> dict[str, Path]:
    if not path.is_dir():
        return {path.name: path}
    return {
        p.relative_to(path).as_posix(): p
        for p in sorted(path.rglob("*"))
        if p.is_file() and p != path / FOLDER_MANIFEST
    }


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def record_cached(path: str | Path) -> Path:
    """Write the manifest of the cached file or folder ``path`` as it is now; returns it. A
    folder gets it before it is renamed into place, a file right after."""
    path = Path(path)
    files = {}
    for name, member in _members(path).items():
        stat = member.stat()
        files[name] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": _sha256(member)}
    target = manifest_path(path)
    atomic_write_text(target, json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=1), hint=CACHE_FULL_HINT)
    _VERIFIED.pop(str(path), None)
    return target


@contextlib.contextmanager
def writing_cache_file(path: str | Path, needed: int | None = None) -> Iterator[Path]:
    """``atomic_path`` for a cache file: fill the yielded temporary path; it replaces
    ``path`` and gets its manifest. A full disk raises ``DiskFullError`` naming the cache
    directory, the bytes free there and ``needed`` (when known), and ``$SQLAGENT_RL_CACHE``."""
    with atomic_path(path, CACHE_FULL_HINT, needed) as tmp:
        yield tmp
    record_cached(path)


@contextlib.contextmanager
def writing_cache_folder(folder: str | Path, what: str) -> Iterator[Path]:
    """Fill the yielded temporary folder beside ``folder``; it gets its manifest and is
    renamed into place (when another process got there first, theirs stays). On an error it
    is removed; a full disk raises ``DiskFullError`` naming the cache directory, the bytes
    free there and those written (``what``: the cache, for the message)."""
    folder = Path(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".building-{folder.name}-"))
    try:
        yield tmp
        record_cached(tmp)
    except BaseException as err:
        full = isinstance(err, Exception) and not isinstance(err, DiskFullError) and disk_is_full(err, folder.parent)
        written = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        shutil.rmtree(tmp, ignore_errors=True)
        if full:
            raise disk_full_error(
                folder.parent,
                what,
                written,
                CACHE_FULL_HINT,
                at_least=True,
                basis="what it had written when the disk filled",
            ) from err
        raise
    try:
        os.replace(tmp, folder)  # atomic: readers see a whole folder or none
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process finished first


# ----------------------------------------------------------------------------- checking

_VERIFIED: dict[str, tuple[int, tuple[tuple[str, int, int], ...]]] = {}
"""Caches checked in this process: path -> (when, the (name, size, mtime) of manifest and files)."""


def _signature(path: Path, names: list[str]) -> tuple[tuple[str, int, int], ...] | None:
    out = []
    for name in names:
        member = manifest_path(path) if name == "" else (path / name if path.is_dir() else path)
        try:
            stat = member.stat()
        except OSError:
            return None
        out.append((name, stat.st_size, stat.st_mtime_ns))
    return tuple(out)


def _remembered(path: Path) -> bool:
    seen = _VERIFIED.get(str(path))
    if seen is None:
        return False
    signature = seen[1]
    return _signature(path, [name for name, _, _ in signature]) == signature


def check_cached(path: str | Path) -> CacheProblem | None:
    """What is wrong with the cached file or folder ``path`` against its manifest (None:
    intact; ``what == UNRECORDED``: it has none). Rules: the module docstring."""
    path = Path(path)
    if _remembered(path):
        return None
    manifest = manifest_path(path)
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
        files = data["files"]
        if data.get("version") != MANIFEST_VERSION or not isinstance(files, dict) or not files:
            raise ValueError(f"version {data.get('version')!r} with {len(files)} files")
        for want in files.values():
            if not (isinstance(want["size"], int) and isinstance(want["mtime_ns"], int) and want["sha256"]):
                raise ValueError(f"an entry is {want}")
    except FileNotFoundError:
        return CacheProblem(path, UNRECORDED)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        return CacheProblem(manifest, f"its manifest is unreadable ({type(err).__name__}: {err})")
    moved = False
    for name, want in files.items():
        member = path / name if path.is_dir() else path
        try:
            stat = member.stat()
        except OSError:
            return CacheProblem(member, "it is missing")
        if stat.st_size != want["size"]:
            return CacheProblem(
                member, f"it holds {stat.st_size:,} bytes, its manifest says {want['size']:,} (cut short or rewritten)"
            )
        if stat.st_size > HASH_ALWAYS_BYTES and stat.st_mtime_ns == want["mtime_ns"]:
            continue  # large and untouched since its checksum was taken
        if _sha256(member) != want["sha256"]:
            return CacheProblem(member, "its SHA-256 differs from its manifest's (its bytes changed)")
        moved = moved or stat.st_mtime_ns != want["mtime_ns"]
    if moved:  # copied without its times (cp, rsync without -t): checked once, remembered on disk
        with contextlib.suppress(OSError):
            record_cached(path)
    _remember(path, ["", *files])
    return None


def _remember(path: Path, names: list[str]) -> None:
    signature = _signature(path, names)
    now = time.time_ns()
    if signature is not None and all(mtime < now - _SETTLED_NS for _, _, mtime in signature):
        _VERIFIED[str(path)] = (now, signature)


def remove_cached(path: str | Path) -> None:
    """Delete a cached file (with its manifest) or folder."""
    path = Path(path)
    _VERIFIED.pop(str(path), None)
    if path.is_dir():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
        manifest_path(path).unlink(missing_ok=True)


def load_checked(
    path: str | Path, load: Callable[[Path], T], structure: Callable[[Path], object] | None = None
) -> T | None:
    """``load(path)`` of an intact cache; None when there is none or it was damaged (then it
    is removed, with a ``CacheDamagedWarning`` naming the file and what was wrong, for the
    caller to rebuild). A cache without a manifest (written before manifests) must pass
    ``structure`` (default: ``load``) and then gets its manifest."""
    path = Path(path)
    if not path.exists():
        return None
    problem = check_cached(path)
    unrecorded = problem is not None and problem.what == UNRECORDED
    if problem is None or unrecorded:
        try:
            if unrecorded and structure is not None:
                structure(path)
            value = load(path)
        except Exception as err:  # any reader's error (JSON, numpy, SQLite, safetensors) means damage
            problem = CacheProblem(path, f"it could not be read ({type(err).__name__}: {str(err)[:200]})")
        else:
            if unrecorded:  # adopted: checked from now on
                with contextlib.suppress(OSError):
                    record_cached(path)
            return value
    warn_damaged(problem)
    remove_cached(path)
    return None


def warn_damaged(problem: CacheProblem) -> None:
    warnings.warn(
        f"damaged cache file {problem.file}: {problem.what}; rebuilding it", CacheDamagedWarning, stacklevel=3
    )
