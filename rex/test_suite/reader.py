"""Running a query on a plain read-only connection with a deadline (the build's own runs:
candidate neighbours are not ``tools.Database`` objects), and the ORDER BY ... LIMIT tie probe
shared by the build and the metric."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from sqlglot import exp

from rex.metrics import execution_match
from rex.tables import Failure, Table
from rex.test_suite.mutations import DIALECT, parse

PROGRESS_STEPS = 2000


class Reader:
    """A read-only connection to ``path`` whose queries stop after ``timeout_s`` seconds each."""

    def __init__(self, path: str | Path, timeout_s: float) -> None:
        self.conn = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        self.conn.text_factory = lambda b: b.decode("utf-8", "replace")
        self.conn.execute("PRAGMA query_only=ON")
        self.timeout_s = timeout_s

    def close(self) -> None:
        self.conn.close()

    def run(self, sql: str) -> Table | Failure:
        """The whole result of ``sql``, or a ``Failure`` (an error or the deadline)."""
        return _run(self.conn, sql, self.timeout_s)


def _run(conn: sqlite3.Connection, sql: str, timeout_s: float) -> Table | Failure:
    deadline = time.monotonic() + timeout_s
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), PROGRESS_STEPS)
    try:
        cursor = conn.execute(sql)
        rows = cursor.fetchall()
        return Table(tuple(d[0] for d in cursor.description or ()), tuple(rows))
    except sqlite3.OperationalError as err:
        kind = "timeout" if "interrupted" in str(err) else "other"
        return Failure(kind, str(err))
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as err:
        return Failure("other", str(err))
    finally:
        conn.set_progress_handler(None, 0)


def same(gold: Table | Failure, pred: Table | Failure) -> bool:
    """EX's match (``rex.metrics.execution_match``)."""
    return execution_match(gold, pred) == "match"


def tie_probe(sql: str) -> tuple[str, int, int] | None:
    """For a query whose top-level ORDER BY ... LIMIT n decides which rows come back: the
    query with its order keys appended to the projection and LIMIT n+1, n, and the number
    of keys; None for any other query. When rows n and n+1 of the probe share their keys,
    the LIMIT cuts through a tie: an equivalent query may return other rows there."""
    tree = parse(sql)
    if not isinstance(tree, exp.Select) or tree.args.get("order") is None or tree.args.get("limit") is None:
        return None
    if tree.args.get("distinct") is not None:
        return None
    limit = tree.args["limit"].expression
    if not (isinstance(limit, exp.Literal) and not limit.is_string and str(limit.this).isdigit()):
        return None
    n = int(limit.this)
    keys = [o.this.copy() for o in tree.args["order"].expressions]
    probe = tree.copy()
    probe.set("expressions", [*probe.expressions, *keys])
    probe.set("limit", exp.Limit(expression=exp.Literal.number(n + 1)))
    return probe.sql(dialect=DIALECT), n, len(keys)


def limit_cuts_tie(result: Table | Failure, n: int, keys: int) -> bool:
    """Whether the probe's rows n and n+1 (1-based) tie on the order keys."""
    if isinstance(result, Failure) or n < 1 or len(result.rows) <= n:
        return False
    return result.rows[n - 1][-keys:] == result.rows[n][-keys:]
