"""Names as people and models spell them: near-miss suggestions and SQL identifier quoting.

The one place for "did you mean" hints (registries, config errors, tool errors) and for
quoting identifiers into SQL. A leaf module (standard library only), so the exception
hierarchy, the registries and the tools can all import it without importing each other.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence

_SIMPLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# SQLite's 147 keywords, from https://sqlite.org/lang_keywords.html (= sqlite3_keyword_name in SQLite 3.40).
SQLITE_KEYWORDS = frozenset(
    """
    ABORT ACTION ADD AFTER ALL ALTER ALWAYS ANALYZE AND AS ASC ATTACH AUTOINCREMENT BEFORE BEGIN
    BETWEEN BY CASCADE CASE CAST CHECK COLLATE COLUMN COMMIT CONFLICT CONSTRAINT CREATE CROSS
    CURRENT CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP DATABASE DEFAULT DEFERRABLE DEFERRED
    DELETE DESC DETACH DISTINCT DO DROP EACH ELSE END ESCAPE EXCEPT EXCLUDE EXCLUSIVE EXISTS
    EXPLAIN FAIL FILTER FIRST FOLLOWING FOR FOREIGN FROM FULL GENERATED GLOB GROUP GROUPS HAVING
    IF IGNORE IMMEDIATE IN INDEX INDEXED INITIALLY INNER INSERT INSTEAD INTERSECT INTO IS ISNULL
    JOIN KEY LAST LEFT LIKE LIMIT MATCH MATERIALIZED NATURAL NO NOT NOTHING NOTNULL NULL NULLS OF
    OFFSET ON OR ORDER OTHERS OUTER OVER PARTITION PLAN PRAGMA PRECEDING PRIMARY QUERY RAISE RANGE
    RECURSIVE REFERENCES REGEXP REINDEX RELEASE RENAME REPLACE RESTRICT RETURNING RIGHT ROLLBACK
    ROW ROWS SAVEPOINT SELECT SET TABLE TEMP TEMPORARY THEN TIES TO TRANSACTION TRIGGER UNBOUNDED
    UNION UNIQUE UPDATE USING VACUUM VALUES VIEW VIRTUAL WHEN WHERE WINDOW WITH WITHOUT
    """.split()
)


def close_matches(name: str, choices: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` of ``choices`` close to ``name``, best first, compared case-insensitively
    and returned in their own spelling.

    >>> close_matches("Scool", ["schools", "satscores", "frpm"])
    ['schools']
    """
    lowered = {c.lower(): c for c in choices}
    return [lowered[c] for c in difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.6)]


def did_you_mean(name: str, choices: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices``, or ``""`` when none is close
    (made to follow a message: ``f"unknown agent {name!r}{did_you_mean(name, names)}"``).

    >>> did_you_mean("trustsq", ["dualsql", "trustsql"])
    "; did you mean 'trustsql'?"
    """
    close = close_matches(name, choices, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def list_hint(what: str, names: Sequence[str], limit: int = 20) -> str:
    """``"the tables are: a, b, …"``, at most ``limit`` names (for when nothing is close)."""
    shown = ", ".join(names[:limit]) + (", …" if len(names) > limit else "")
    return f"the {what} are: {shown}"


def quote_identifier(name: str, *, only_if_needed: bool = False) -> str:
    """``name`` as a SQL identifier in double quotes (inner quotes doubled), so any table or
    column name is safe to paste into SQL. ``only_if_needed`` leaves plain names bare, for
    text people and models read (schema listings); see ``needs_quotes``.

    >>> print(quote_identifier('a"b'), quote_identifier("frpm", only_if_needed=True))
    "a""b" frpm
    >>> print(quote_identifier("order", only_if_needed=True), quote_identifier("2nd", only_if_needed=True))
    "order" "2nd"
    """
    if only_if_needed and not needs_quotes(name):
        return name
    return '"' + name.replace('"', '""') + '"'


def needs_quotes(name: str) -> bool:
    """Whether SQLite needs ``name`` quoted: anything but ASCII letters, digits and ``_``
    (not leading with a digit), or a keyword in any case. SQLite parses some keywords bare
    as names, but not all, and not always as the column (bare ``current_date`` is the date),
    so every keyword is quoted."""
    return _SIMPLE_NAME.fullmatch(name) is None or name.upper() in SQLITE_KEYWORDS
