"""Where a database's suite lives, and finding, loading or building it once.

``cache_root()/test_suites/<db_id>-<key>-<golds>/`` holds ``neighbour_<i>.sqlite``,
``suite.json`` (settings, the gold queries it was chosen for, build statistics) and the
folder manifest every load checks (``tools.cache``). ``key`` hashes the database's content
hash and the settings, so a changed database never reads a stale suite; ``golds`` hashes
the gold queries the neighbours were chosen for, so a suite chosen for other queries is a
new folder (a folder, once written, never changes under a reader).

SQLite only: the neighbours are SQLite files written by mutating a copy of the database, so
a database of another dialect (a ``.duckdb`` file) is refused with a ``ConfigError``
(``require_sqlite``); held-out reports skip ``ex_test_suite`` there (``on_sqlite``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rex.test_suite.build import SuiteSettings, build_into, gold_digest, stats_json
from tools.cache import cache_root, load_checked, writing_cache_folder
from tools.db.dialects import database_dialect
from tools.errors import ConfigError

if TYPE_CHECKING:
    from rex.test_suite.build import Progress
    from tools import Backend

log = logging.getLogger(__name__)
SUITE_FILE = "suite.json"


@dataclass(frozen=True)
class Suite:
    """A loaded suite: its folder, the neighbour databases (``tools.Backend``, read-only)
    and what ``suite.json`` says."""

    folder: Path
    neighbours: tuple[Backend, ...]
    info: dict[str, Any]

    @property
    def golds(self) -> set[str]:
        return set(self.info.get("golds", ()))

    @property
    def bytes(self) -> int:
        return sum(db.path.stat().st_size for db in self.neighbours)


def on_sqlite(path: str | Path) -> bool:
    """Whether the database at ``path`` is a SQLite file, the only kind a test suite is built for."""
    return database_dialect(path) == "sqlite"


def require_sqlite(db: Backend) -> None:
    """A ``ConfigError`` when ``db`` is not SQLite: its suite's neighbours would be SQLite files."""
    if db.dialect != "sqlite":
        raise ConfigError(
            f"the test_suite metric is SQLite-only (its neighbour databases are mutated SQLite copies); "
            f"database {db.db_id!r} at {db.path} is {db.dialect}: use reward.exec_metric=ex (or spider) "
            "and trainer.eval_test_suite=false / eval.test_suite=false on this dataset"
        )


def suites_dir() -> Path:
    return cache_root() / "test_suites"


def _prefix(db: Backend, settings: SuiteSettings) -> str:
    key = hashlib.sha256(f"{settings.key()}:{db.content_hash}".encode()).hexdigest()[:20]
    return f"{db.db_id}-{key}"


def _load(folder: Path) -> Suite:
    from tools import get_database

    info = json.loads((folder / SUITE_FILE).read_text(encoding="utf-8"))
    neighbours = tuple(get_database(folder / name, f"{folder.name}/{name}") for name in info["neighbours"])
    return Suite(folder, neighbours, info)


def find_suites(db: Backend, settings: SuiteSettings) -> list[Suite]:
    """Every intact suite of ``db`` (its current content) built with ``settings``."""
    root = suites_dir()
    if not root.is_dir():
        return []
    found = []
    for folder in sorted(root.glob(_prefix(db, settings) + "-*")):
        suite = load_checked(folder, _load) if folder.is_dir() else None
        if suite is not None:
            found.append(suite)
    return found


_LOCKS: dict[str, threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()
_PINNED: dict[tuple[str, str], Suite] = {}


def _lock(db: Backend) -> threading.Lock:
    with _LOCKS_GUARD:
        return _LOCKS.setdefault(str(db.path), threading.Lock())


def ensure_suite(
    db: Backend,
    gold_sqls: Sequence[str],
    settings: SuiteSettings | None = None,
    progress: Progress | None = None,
) -> tuple[Suite, bool]:
    """The suite of ``db`` chosen for (at least) ``gold_sqls``, built when there is none;
    ``(suite, built_now)``; of several, the one chosen for the most gold queries (so that a
    run whose training and held-out questions share databases scores both with one suite).
    This process's scoring then uses it (``suite_for_scoring``)."""
    require_sqlite(db)
    settings = settings or SuiteSettings()
    wanted = set(gold_digest(gold_sqls))
    with _lock(db):
        covering = [suite for suite in find_suites(db, settings) if wanted <= suite.golds]
        if covering:
            suite = max(covering, key=lambda s: len(s.golds))
            _PINNED[(str(db.path), db.content_hash)] = suite
            return suite, False
        suite = _build(db, gold_sqls, settings, progress)
        _PINNED[(str(db.path), db.content_hash)] = suite
        return suite, True


def ensure_suites(
    questions: Iterable[tuple[str | Path, str]], settings: SuiteSettings | None = None
) -> tuple[int, int]:
    """``ensure_suite`` for every database of ``(database path, gold SQL)`` pairs, each chosen
    for the gold queries on it; ``(built now, found cached)``."""
    from tools import get_database

    golds: dict[str, list[str]] = {}
    for path, sql in questions:
        golds.setdefault(str(path), []).append(sql)
    built = sum(ensure_suite(get_database(path), sqls, settings)[1] for path, sqls in golds.items())
    return built, len(golds) - built


def suite_for_scoring(db: Backend, gold_sql: str, settings: SuiteSettings | None = None) -> Suite:
    """The suite scoring uses: the one this process built or checked (``ensure_suite``),
    else the cached one chosen for the most gold queries, else one built now for ``gold_sql``
    alone (logged: build suites beforehand with ``python -m rex suite build``)."""
    require_sqlite(db)
    pinned = _PINNED.get((str(db.path), db.content_hash))
    if pinned is not None:
        return pinned
    settings = settings or SuiteSettings()
    with _lock(db):
        pinned = _PINNED.get((str(db.path), db.content_hash))
        if pinned is not None:
            return pinned
        found = find_suites(db, settings)
        if found:
            suite = max(found, key=lambda s: len(s.golds))
        else:
            log.warning(
                "no test suite for database %s in %s: building one for a single gold query now; build them from "
                "the benchmark's questions beforehand (python -m rex suite build data=...)",
                db.db_id,
                suites_dir(),
            )
            suite = _build(db, [gold_sql], settings, None)
        _PINNED[(str(db.path), db.content_hash)] = suite
        return suite


def _build(db: Backend, gold_sqls: Sequence[str], settings: SuiteSettings, progress: Progress | None) -> Suite:
    digest = gold_digest(gold_sqls)
    folder = suites_dir() / f"{_prefix(db, settings)}-{hashlib.sha256(''.join(digest).encode()).hexdigest()[:12]}"
    with writing_cache_folder(folder, f"the test suite of {db.db_id}") as tmp:
        names, stats = build_into(tmp, db.path, gold_sqls, settings, db.content_hash, progress)
        info = {
            "version": 1,
            "db_id": db.db_id,
            "db_path": str(db.path),
            "content_hash": db.content_hash,
            "settings": json.loads(settings.key()),
            "golds": digest,
            "neighbours": names,
            "stats": stats_json(stats),
        }
        (tmp / SUITE_FILE).write_text(json.dumps(info, indent=1), encoding="utf-8")
    suite = load_checked(folder, _load)
    if suite is None:
        raise RuntimeError(f"the test suite just written to {folder} could not be read back")
    return suite


def forget_loaded() -> None:
    """Drop this process's chosen suites (tests; a new build is then looked up again)."""
    _PINNED.clear()
