"""The gold SQL of a dataset read once per database and cached on disk: which tables and
columns each query references (``Example.gold_tables`` / ``gold_columns``) and whether it
executes (``drop_failing_gold``), used by ``eval.data.loaders``."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from tools.files import atomic_write_text

log = logging.getLogger(__name__)


class GoldCache:
    """What one database's gold SQL references, and whether it executes, cached on disk.

    Reading SQL with sqlglot costs a few ms per query and executing BIRD's gold SQL takes
    minutes, both repeated at every training start, so results are kept in
    ``cache_root()/eval-data/gold-<db hash>-<reader hash>.json``: keyed by the database's
    content hash and by the source of ``rex.sql`` and the sqlglot version, so a change to
    either is a cache miss. Timeouts are never cached (they depend on the machine's load).
    """

    def __init__(self, db: Any) -> None:
        self.db = db
        self.schema = db.schema()
        self.path = _refs_dir() / f"gold-{db.content_hash[:20]}-{_reader_hash()}.json"
        try:
            entries = json.loads(self.path.read_text(encoding="utf-8"))
            self.entries: dict[str, dict[str, Any]] = entries if isinstance(entries, dict) else {}
        except (OSError, ValueError):
            self.entries = {}
        self.dirty = False

    def _entry(self, sql: str) -> dict[str, Any]:
        entry = self.entries.get(sql)
        if not isinstance(entry, dict) or not {"tables", "columns", "error"} <= set(entry):
            from rex.sql import referenced_schema

            ref = referenced_schema(sql, self.schema)
            entry = {
                "tables": list(ref.tables),
                "columns": list(ref.columns),
                "error": None if ref.parsed else (ref.error or "unknown parse error"),
            }
            self.entries[sql] = entry
            self.dirty = True
        return entry

    def reference(self, sql: str) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
        """(gold tables, gold columns, parse error or None)."""
        entry = self._entry(sql)
        return tuple(entry["tables"]), tuple(entry["columns"]), entry["error"]

    def execution_error(self, sql: str) -> str | None:
        """None when the SQL executes under the ``metric`` limits, else "kind: message"."""
        from tools import PRESETS, ToolError, execute

        entry = self._entry(sql)
        if "executes" not in entry:
            result = execute(self.db, sql, PRESETS["metric"])
            verdict = f"{result.kind}: {result.message}" if isinstance(result, ToolError) else None
            if isinstance(result, ToolError) and result.kind in ("timeout", "step_limit", "too_large"):
                return verdict
            entry["executes"] = verdict
            self.dirty = True
        return entry["executes"]

    def flush(self) -> None:
        """Write new entries (atomically: temp file + rename)."""
        if not self.dirty:
            return
        try:
            atomic_write_text(self.path, json.dumps(self.entries, ensure_ascii=False))
            self.dirty = False
        except OSError as err:  # a read-only cache only costs speed
            log.debug("could not write %s: %s", self.path, err)


def _refs_dir() -> Path:
    from tools.cache import cache_root

    folder = cache_root() / "eval-data"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _reader_hash() -> str:
    import hashlib

    import sqlglot

    import rex.sql

    digest = hashlib.sha256(Path(rex.sql.__file__).read_bytes())
    digest.update(sqlglot.__version__.encode())
    return digest.hexdigest()[:12]
