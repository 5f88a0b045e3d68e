"""``sqlite_peek``: a column profiler over at most 5,000 rows (ReToolSQL).

It answers the questions that break queries: how values are stored (numbers as text,
percent vs fraction, date formats), how many are NULL, which values are common.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from tools.db.backend import Backend
from tools.db.connection import execute
from tools.db.limits import QueryLimits
from tools.db.names import resolve_columns, resolve_table
from tools.db.results import QueryResult, ToolError, json_cell
from tools.schema.profile_sql import dialect_of, table_info_sql
from tools.spelling import quote_identifier

PEEK_SCAN_ROWS = 5000
PEEK_LIMITS = QueryLimits(max_rows=PEEK_SCAN_ROWS, timeout_s=5.0, max_vm_steps=15_000_000)
MAX_PEEK_LIMIT = 50
PREFIX_CHARS = 3

_DATE_LIKE = re.compile(
    r"^(\d{4}[-/.]\d{1,2}([-/.]\d{1,2})?([ T]\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?)?"
    r"|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4}( \d{1,2}:\d{2}(:\d{2})?)?"
    r"|\d{1,2}:\d{2}(:\d{2})?)$"
)
_PERCENT_LIKE = re.compile(r"^[+-]?\d+([.,]\d+)?\s*%$")
_NUMBER_LIKE = re.compile(r"^[+-]?(\d+([.,]\d+)?|\.\d+)([eE][+-]?\d+)?$")


def char_class(value: Any) -> str:
    """digits / letters / mixed / date-like / percent-like / other (what a cell looks like)."""
    if isinstance(value, (int, float)):
        return "digits"
    if isinstance(value, bytes):
        return "other"
    text = str(value).strip()
    if _DATE_LIKE.match(text):
        return "date-like"
    if _PERCENT_LIKE.match(text):
        return "percent-like"
    if _NUMBER_LIKE.match(text):
        return "digits"
    has_alpha = any(ch.isalpha() for ch in text)
    has_digit = any(ch.isdigit() for ch in text)
    if has_alpha and has_digit:
        return "mixed"
    if has_alpha:
        return "letters"
    return "other"


def _as_number(text: str) -> int | float | None:
    stripped = text.strip()
    if not _NUMBER_LIKE.match(stripped) or "," in stripped:
        return None
    number = float(stripped)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def _storage(value: Any) -> str:
    if isinstance(value, bool) or isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "real"
    if isinstance(value, bytes):
        return "blob"
    return "text"


_RANK = {"integer": 0, "real": 0, "text": 1, "blob": 2}


def _sqlite_order(value: Any) -> tuple[int, Any]:
    """SQLite's cross-type order: numbers < text < blobs."""
    return (_RANK[_storage(value)], value)


def profile_values(values: Sequence[Any], declared_type: str, limit: int) -> dict[str, Any]:
    """Statistics of one column's scanned values (None = NULL)."""
    present = [v for v in values if v is not None]
    counts = Counter(present)
    out: dict[str, Any] = {
        "declared_type": declared_type or "",
        "nulls": len(values) - len(present),
        "non_null": len(present),
        "distinct": len(counts),
    }
    if not present:
        return out
    ordered = sorted(counts, key=_sqlite_order)
    out["min"], out["max"] = json_cell(ordered[0]), json_cell(ordered[-1])
    out["storage"] = dict(Counter(_storage(v) for v in present).most_common())
    out["char_classes"] = dict(Counter(char_class(v) for v in present).most_common())
    texts = [v for v in present if isinstance(v, str)]
    if texts:
        lengths = [len(t) for t in texts]
        out["text_length"] = {"min": min(lengths), "max": max(lengths)}
        prefixes = Counter(t[:PREFIX_CHARS] for t in texts if len(t) > PREFIX_CHARS)
        out["common_prefixes"] = [[p, n] for p, n in prefixes.most_common(5) if n > 1]
        numeric = [_as_number(t) for t in texts]
        if all(n is not None for n in numeric):
            # Numbers stored as text compare as text in SQL ('980' > '1200'): say so.
            out["numbers_stored_as_text"] = {"min": min(numeric), "max": max(numeric)}  # type: ignore[type-var]
    out["top_values"] = [[json_cell(v), n] for v, n in counts.most_common(limit)]
    out["samples"] = [json_cell(v) for v in list(counts)[:limit]]
    return out


def sqlite_peek(
    db: Backend, table: str, columns: Sequence[str] | None = None, limit: int = 10, where: str | None = None
) -> dict[str, Any] | ToolError:
    """Profile ``columns`` of ``table`` (all when empty) over at most 5,000 rows matching
    the optional SQL predicate ``where`` (run under the same read-only guard)."""
    real_table = resolve_table(db, table)
    if isinstance(real_table, ToolError):
        return real_table
    real_columns = resolve_columns(db, real_table, list(columns or ()))
    if isinstance(real_columns, ToolError):
        return real_columns
    limit = max(1, min(int(limit), MAX_PEEK_LIMIT))
    condition = f" WHERE ({where})" if where and where.strip() else ""
    select = ", ".join(quote_identifier(c) for c in real_columns)
    scanned = execute(
        db, f"SELECT {select} FROM {quote_identifier(real_table)}{condition} LIMIT {PEEK_SCAN_ROWS}", PEEK_LIMITS
    )
    if isinstance(scanned, ToolError):
        return scanned
    types = {row[0]: row[1] for row in db.query_internal(table_info_sql(dialect_of(db)), (real_table,))}
    return {
        "table": real_table,
        "where": where or None,
        "rows_scanned": len(scanned.rows),
        "scan_capped": len(scanned.rows) >= PEEK_SCAN_ROWS,
        "table_rows": _table_rows(db, real_table),
        "columns": {
            col: profile_values([row[i] for row in scanned.rows], types.get(col, ""), limit)
            for i, col in enumerate(real_columns)
        },
    }


def _table_rows(db: Backend, table: str) -> int | None:
    counted = execute(db, f"SELECT COUNT(*) FROM {quote_identifier(table)}", PEEK_LIMITS)
    return int(counted.rows[0][0]) if isinstance(counted, QueryResult) else None
