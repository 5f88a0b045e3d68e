"""Statement text checks every backend shares (``tools.db.connection`` for SQLite,
``tools.db.duckdb_backend`` for DuckDB): trimming, the first keyword, the up-front refusal of
non-SELECT statements, cutting long text cells, and a file's content fingerprint."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from tools.db.limits import OTHER_STATEMENT_KEYWORDS, SELECT_KEYWORDS, QueryLimits
from tools.db.results import ToolError

_COMMENT_OR_SPACE = re.compile(r"(?:\s+|--[^\n]*(?:\n|$)|/\*.*?(?:\*/|$))", re.DOTALL)
_FIRST_WORD = re.compile(r"[A-Za-z_]+")


def strip_sql(sql: str) -> str:
    """Drop trailing whitespace and semicolons (``SELECT 1;;`` is still one statement)."""
    return sql.strip().rstrip(";").rstrip()


def first_keyword(sql: str) -> str:
    """The first word after comments and whitespace, upper-cased."""
    pos = 0
    while True:
        match = _COMMENT_OR_SPACE.match(sql, pos)
        if not match or match.end() == pos:
            break
        pos = match.end()
    word = _FIRST_WORD.match(sql, pos)
    return word.group(0).upper() if word else sql[pos : pos + 10]


def check_statement_kind(keyword: str, limits: QueryLimits) -> ToolError | None:
    """Refuse a non-SELECT statement by its first keyword, with a clear message."""
    if not limits.select_only or keyword in SELECT_KEYWORDS or keyword not in OTHER_STATEMENT_KEYWORDS:
        return None
    if keyword == "PRAGMA" and limits.allowed_pragmas:
        return None
    kinds = "SELECT/WITH" + (" or a metadata PRAGMA" if limits.allowed_pragmas else "")
    return ToolError(
        "forbidden",
        f"only {kinds} statements are allowed here (got {keyword or 'nothing'}); the database is read-only",
        "rewrite the request as a single SELECT query",
    )


def cut_cell(value: Any, limit: int) -> Any:
    """A text cell longer than ``limit`` characters, cut with a marker saying how much is left."""
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}…[+{len(value) - limit} chars]"
    return value


def sha256_file(path: Path) -> str:
    """sha256 hex of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
