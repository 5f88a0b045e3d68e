"""The one interface every database engine gives the tools, rewards and metrics.

A backend is one database: ``tools.db.connection.Database`` (a SQLite file) or
``tools.db.duckdb_backend.DuckDBDatabase`` (a DuckDB file); ``tools.get_database`` picks one
by the file's first bytes, else its suffix (``dialect_of``). Every backend gives what the
layers above use, and only that:

* ``run(sql, limits, as_written)``: one read-only statement under ``QueryLimits`` (row cap,
  cell cap, result budget, wall-clock deadline, and a work budget where the engine has one),
  returning a ``QueryResult`` or a ``ToolError`` and never raising on SQL text. Cells are the
  Python values SQLite returns (``int``, ``float``, ``str``, ``bytes``, ``None``): a backend
  whose driver returns other types (``Decimal``, ``date``, ``bool``) converts them, so every
  metric compares values the same way whatever the engine;
* ``schema()``: ``{table: [column, ...]}`` in declaration order;
* ``query_internal`` / ``iter_internal``: the toolkit's own read-only queries (metadata,
  profiles, value search), raising ``DataError`` on failure;
* ``content_hash``: a fingerprint of the content, the key of every cache (gold results,
  profiles, search indexes);
* ``profile()``: the column profile (``tools.schema.profile``);
* ``dialect``: the SQL dialect the engine runs (``"sqlite"``, ``"duckdb"``, ``"postgres"``);
* ``locator``: what ``tools.get_database`` opens it from again (a path, or a server URI).

The server backend (``tools.db.postgres_backend.PostgresDatabase``, one schema of a
PostgreSQL database, opened from a ``postgresql://…#schema`` locator) fits the same shape:
``content_hash`` from the catalogue and the tables' statistics instead of file bytes,
``path`` beside the folder of the dataset's description files.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from tools.db.limits import DEFAULT_LIMITS, PRESETS, QueryLimits
from tools.db.results import QueryResult, ToolError

if TYPE_CHECKING:
    from tools.schema.profile import DatabaseProfile

BACKEND_SUFFIXES: dict[str, str] = {".duckdb": "duckdb"}
"""File suffixes read by a backend other than SQLite, for a file whose first bytes say
neither (a file not written yet): every other such file is read as SQLite."""
SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite 3 database file."""
DUCKDB_MAGIC = b"DUCK"
"""DuckDB's file signature, at byte 8 of the file."""


def dialect_of(path: str | Path) -> str:
    """The dialect of the database file at ``path``, ``"duckdb"`` or ``"sqlite"``: by its first
    bytes (SQLite's header, DuckDB's signature), so a DuckDB file named ``.db`` opens as DuckDB;
    by its suffix when they say neither (no such file yet, an empty or foreign one, whose
    backend then names the problem)."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except OSError:  # missing, a folder, unreadable: the backend's own check says which
        head = b""
    if head == SQLITE_HEADER:
        return "sqlite"
    if head[8:12] == DUCKDB_MAGIC:
        return "duckdb"
    return BACKEND_SUFFIXES.get(Path(path).suffix.lower(), "sqlite")


class Backend(ABC):
    """One database behind the read-only tool layer (see the module docstring)."""

    dialect: ClassVar[str]
    path: Path
    db_id: str

    @property
    def locator(self) -> str:
        """What ``tools.get_database`` opens this database from again: the file's path, or a
        server's ``postgresql://…#schema`` locator (``tools.db.postgres_backend``)."""
        return str(self.path)

    @property
    @abstractmethod
    def content_hash(self) -> str:
        """A fingerprint of the database's content (hex); it changes when the content does."""

    @abstractmethod
    def run(self, sql: str, limits: QueryLimits, as_written: bool = False) -> QueryResult | ToolError:
        """Run one read-only statement under ``limits``; ``as_written``: the text exactly as
        the engine's driver would run it (no trimming), as an official evaluation does."""

    @abstractmethod
    def query_internal(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        """The toolkit's own read-only query, every row; ``DataError`` on failure."""

    @abstractmethod
    def iter_internal(self, sql: str, params: Iterable[Any] = (), chunk: int = 10_000) -> Iterator[tuple[Any, ...]]:
        """Like ``query_internal`` but streams the rows."""

    @abstractmethod
    def schema(self) -> dict[str, list[str]]:
        """``{table: [column, ...]}`` for every table and view, in declaration order."""

    # set by each backend's __init__: the profile cache and the lock its builds take
    _profile: tuple[str, DatabaseProfile] | None
    _profile_lock: threading.Lock

    def profile(self) -> DatabaseProfile:
        """The database profile (``tools.schema.profile``), cached in memory and on disk by
        content hash; threads wait for one build instead of each building."""
        from tools.schema.profile import load_or_build_profile

        digest = self.content_hash
        with self._profile_lock:
            cached = self._profile
            if cached is not None and cached[0] == digest:
                return cached[1]
            profile = load_or_build_profile(self)
            self._profile = (digest, profile)
            return profile

    def execute(self, sql: str, limits: QueryLimits | str = DEFAULT_LIMITS) -> QueryResult | ToolError:
        """``run(sql, limits)``; ``limits`` may name a registered preset."""
        return self.run(sql, PRESETS[limits] if isinstance(limits, str) else limits)
