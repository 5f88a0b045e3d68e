"""A neighbour whose rows tie at a gold query's LIMIT does not judge that query: an
equivalent query may return the other tied row there."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from rex.test_suite.build import judged_gold
from rex.test_suite.reader import Reader, tie_probe


def scores_db(path: Path, rows: list[tuple[str, int]]) -> Path:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE s (name TEXT, points INTEGER)")
    con.executemany("INSERT INTO s VALUES (?, ?)", rows)
    con.commit()
    con.close()
    return path


TOP = "SELECT name FROM s ORDER BY points DESC LIMIT 1"


def test_the_probe_appends_the_order_keys_and_one_more_row() -> None:
    assert tie_probe(TOP) == ("SELECT name, points FROM s ORDER BY points DESC LIMIT 2", 1, 1)
    assert tie_probe("SELECT name FROM s ORDER BY points") is None  # no LIMIT: the set is the same
    assert tie_probe("SELECT name FROM s LIMIT 1") is None


def test_a_tie_at_the_limit_leaves_the_query_unjudged(tmp_path: Path) -> None:
    tied = Reader(scores_db(tmp_path / "tied.sqlite", [("a", 5), ("b", 5), ("c", 1)]), 5.0)
    clear = Reader(scores_db(tmp_path / "clear.sqlite", [("a", 5), ("b", 4), ("c", 4)]), 5.0)
    try:
        assert judged_gold(tied, TOP) is None
        result = judged_gold(clear, TOP)
        assert result is not None and result.rows == (("a",),)
        assert judged_gold(clear, "SELECT nope FROM s") is None  # a gold that fails there is not judged either
    finally:
        tied.close()
        clear.close()
