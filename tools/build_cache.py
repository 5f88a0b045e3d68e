"""``python -m tools build-cache``: build every database's profile and search indexes once.

The tools build their caches lazily, on first use, under ``tools.cache.cache_root()``
(``$SQLAGENT_RL_CACHE``): the profile (every design's schema prompt and ``get_profile``),
the FTS5 index (DualSQL's ``fts_search``) and one BM25 index per searched column
(ReToolSQL's ``bm25_search_sqlite``, the model picks the column). On a cluster hundreds of
rollout workers would each build BIRD's large ones at step 1; this command builds them
all before training, on a cache directory every node sees.

    python -m tools build-cache data=bird data.root=/shared/bird     # data.split and data.eval_split
    python -m tools build-cache --db a.sqlite --db b.sqlite
    python -m tools build-cache data=minibird --only profile,fts      # skip the per-column BM25 indexes

Idempotent: each database gets a manifest (``cache_root()/built/``) naming its size, mtime,
content hash and the files built; a rerun finds them and reports every database cached
without reading the databases again. A database that changed is rebuilt (the caches are
keyed by content hash, so stale ones are never read). ``missing()`` is the same test for
``engine=verl``'s launch check. The indexes are written atomically (temp file + rename),
so two builders on one shared cache never leave half a file, each with a manifest of its
sizes and checksums (``tools.cache``) that every load checks; a full disk stops the build
with ``DiskFullError`` naming the cache directory and ``$SQLAGENT_RL_CACHE``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.cache import CACHE_ENV, CACHE_FULL_HINT, cache_root
from tools.errors import ConfigError
from tools.files import atomic_write_text

KINDS = ("profile", "fts", "bm25")
BM25_COLUMNS = ("all", "text")
MANIFEST_VERSION = 1
Say = Callable[[str], None]


@dataclass
class BuildReport:
    """What one ``build`` did: database paths built now, found cached, and files written."""

    built: list[str] = field(default_factory=list)
    cached: list[str] = field(default_factory=list)
    files: int = 0

    def line(self) -> str:
        total = len(self.built) + len(self.cached)
        if not self.built:
            return f"[build-cache] all {total} database(s) cached in {cache_root()} ({self.files} files); nothing to do"
        return (
            f"[build-cache] built {len(self.built)} and found {len(self.cached)} cached of {total} database(s) "
            f"in {cache_root()} ({self.files} files)"
        )


def check_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    chosen = tuple(dict.fromkeys(k.strip() for k in kinds if k.strip()))
    bad = [k for k in chosen if k not in KINDS]
    if bad or not chosen:
        raise ConfigError(f"cache kinds {bad or list(chosen)}: choose among {', '.join(KINDS)} (comma-separated)")
    return chosen


# ----------------------------------------------------------------------------- manifests


def manifest_path(db_path: str | Path) -> Path:
    """``cache_root()/built/<stem>-<hash of the resolved path>.json``."""
    resolved = Path(db_path).expanduser().resolve()
    key = hashlib.sha256(str(resolved).encode()).hexdigest()[:12]
    return cache_root() / "built" / f"{resolved.stem}-{key}.json"


def _stat_key(db_path: Path) -> dict[str, int]:
    stat = db_path.stat()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def read_manifest(db_path: str | Path) -> dict[str, Any] | None:
    """The manifest of a database when it is current (same file size and mtime, same format)."""
    path = manifest_path(db_path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    resolved = Path(db_path).expanduser().resolve()
    current = data.get("version") == MANIFEST_VERSION and data.get("db_path") == str(resolved)
    return data if current and data.get("stat") == _stat_key(resolved) else None


def missing(db_paths: Iterable[str | Path], kinds: Sequence[str] = KINDS) -> list[str]:
    """The databases whose caches of ``kinds`` are not all built (manifest absent, stale, or
    a listed file gone). Reads manifests and stats files only: no database is hashed."""
    root = cache_root()
    out = []
    for db_path in dict.fromkeys(str(Path(p).expanduser().resolve()) for p in db_paths):
        data = read_manifest(db_path)
        files = data.get("files", {}) if data else {}
        if data is None or any(k not in files or not all((root / f).exists() for f in files[k]) for k in kinds):
            out.append(db_path)
    return out


def manifest_files(db_paths: Iterable[str | Path]) -> list[str]:
    """Every cache file the current manifests of ``db_paths`` list, relative to the cache root."""
    files: list[str] = []
    for db_path in db_paths:
        data = read_manifest(db_path) or {}
        files += [f for group in data.get("files", {}).values() for f in group]
    return files


def _write_manifest(db_path: Path, content_hash: str, files: dict[str, list[str]]) -> None:
    path = manifest_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    old = read_manifest(db_path) or {}
    merged = {**old.get("files", {}), **files}
    data = {
        "version": MANIFEST_VERSION,
        "db_path": str(db_path),
        "stat": _stat_key(db_path),
        "content_hash": content_hash,
        "files": merged,
    }
    atomic_write_text(path, json.dumps(data, indent=1), hint=CACHE_FULL_HINT)  # a full disk: DiskFullError


# ----------------------------------------------------------------------------- building


def _columns(db: Any, which: str) -> list[tuple[str, str]]:
    """(table, column) pairs to index: all, or those holding text values (from the profile)."""
    if which == "all":
        return [(table, column) for table, columns in db.schema().items() for column in columns]
    return [(t.name, c.name) for t in db.profile().tables for c in t.columns if c.storage.get("text", 0) > 0]


def _relative(path: Path) -> str:
    return str(path.resolve().relative_to(cache_root().resolve()))


def build(
    db_paths: Sequence[str | Path],
    kinds: Sequence[str] = KINDS,
    bm25_columns: str = "all",
    say: Say = print,
    progress: bool = True,
) -> BuildReport:
    """Build the ``kinds`` caches of every database (skipping those already built), with a
    progress bar over the units of work (a profile, an FTS index, one BM25 index per column)."""
    from tools.db.connection import get_database
    from tools.explore.bm25 import ensure_index_on_disk
    from tools.explore.fts import ensure_fts_index
    from tools.schema.profile import load_or_build_profile, profile_cache_path

    kinds = check_kinds(kinds)
    if bm25_columns not in BM25_COLUMNS:
        raise ConfigError(f"--bm25-columns {bm25_columns!r}: choose all or text")
    paths = [Path(p) for p in dict.fromkeys(str(Path(p).expanduser().resolve()) for p in db_paths)]
    todo = set(missing(paths, kinds))
    report = BuildReport(cached=[str(p) for p in paths if str(p) not in todo])
    say(
        f"[build-cache] {len(paths)} database(s), caches {', '.join(kinds)} under {cache_root()} "
        f"(${CACHE_ENV}); {len(report.cached)} already built"
    )
    plans = []
    for path in paths:
        if str(path) in todo:
            db = get_database(path)
            columns = _columns(db, bm25_columns) if "bm25" in kinds else []
            plans.append((db, columns))
    units = sum(("profile" in kinds) + ("fts" in kinds) + len(cols) for _, cols in plans)
    bar = _bar(units) if progress and units else None
    try:
        for db, columns in plans:
            files: dict[str, list[str]] = {}
            if bar is not None:
                bar.set_postfix_str(db.db_id)
            if "profile" in kinds:  # the file on disk is checked (a damaged one rebuilt), not this process's memory
                load_or_build_profile(db)
                files["profile"] = [_relative(profile_cache_path(db))]
                _step(bar)
            if "fts" in kinds:
                files["fts"] = [_relative(ensure_fts_index(db))]
                _step(bar)
            if "bm25" in kinds:
                files["bm25"] = []
                for table, column in columns:
                    files["bm25"].append(_relative(ensure_index_on_disk(db, table, column) / "meta.json"))
                    _step(bar)
            _write_manifest(db.path, db.content_hash, files)
            report.built.append(str(db.path))
    finally:
        if bar is not None:
            bar.close()
    report.files = len(manifest_files(paths))
    say(report.line())
    return report


def _bar(total: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="build-cache", unit="index", dynamic_ncols=True)


def _step(bar: Any) -> None:
    if bar is not None:
        bar.update(1)


def main(db_paths: Sequence[str], only: str | None, bm25_columns: str) -> int:
    """The ``build-cache`` subcommand (``python -m tools``) on resolved database files."""
    kinds = check_kinds(only.split(",")) if only else KINDS
    build(list(db_paths), kinds, bm25_columns)
    return 0
