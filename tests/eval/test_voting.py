"""Self-consistency voting on hand-made candidates, on a real database, and pass@k."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

from eval.voting import pass_at_k, pass_k_values, self_consistency, unique_sql, vote
from rex import ExecScorer
from tests.eval.conftest import make_music_db
from tools import ToolError, get_database
from tools.errors import ConfigError


def t(*rows: tuple, columns: tuple = ("a",)) -> tuple:
    return (list(columns), list(rows))


ERR = ToolError("syntax", "near FROM")
TIMEOUT = ToolError("timeout", "took too long")


def test_largest_cluster_by_result_set_wins() -> None:
    # samples 1 and 3 agree as sets (order and duplicates ignored), 0 and 2 differ
    results = [t((1,)), t((2,), (3,)), t((4,)), t((3,), (2,), (2,))]
    v = vote(["s0", "s1", "s2", "s3"], results)
    assert (v.index, v.sql, v.consensus) == (1, "s1", True)
    assert v.clusters == ((1, 3), (0,), (2,))
    assert v.support == 2


def test_tie_goes_to_the_cluster_with_the_earliest_sample() -> None:
    # clusters {1, 2} and {0, 3}: equal size; {0, 3} holds sample 0, so it wins with sample 0
    results = [t((9,)), t((5,)), t((5,)), t((9,))]
    assert vote(["a", "b", "c", "d"], results).index == 0
    # clusters {0} {1} {2}: all size 1 -> sample 0
    assert vote(["a", "b", "c"], [t((1,)), t((2,)), t((3,))]).index == 0
    # sample 0 dropped: of the tied clusters the one starting at sample 1 wins
    assert vote(["a", "b", "c"], [ERR, t((2,)), t((3,))]).index == 1


def test_errors_timeouts_empty_and_missing_sql_are_dropped() -> None:
    results = [ERR, TIMEOUT, t(), None, t((7,)), t((8,)), t((8,))]
    v = vote(["e", "t", "empty", None, "x", "y", "z"], results)
    assert v.index == 5 and v.sql == "y"
    assert dict(v.dropped) == {0: "error", 1: "timeout", 2: "empty", 3: "no_sql"}
    # an errored "cluster" of identical errors never outvotes a real result
    v = vote(["e1", "e2", "e3", "ok"], [ERR, ERR, ERR, t((1,))])
    assert v.index == 3 and v.consensus


def test_all_dropped_returns_sample_zero_without_consensus() -> None:
    v = vote(["first", "second", None], [ERR, t(), None])
    assert (v.index, v.sql, v.consensus, v.support) == (0, "first", False, 0)
    assert v.clusters == ()


def test_column_order_and_value_types_follow_ex_equality() -> None:
    # (1, 'x') vs ('x', 1): column order matters -> different clusters; 1 == 1.0 -> same cluster
    results = [t((1, "x"), columns=("a", "b")), t(("x", 1), columns=("b", "a")), t((1.0, "x"), columns=("p", "q"))]
    v = vote(["a", "b", "c"], results)
    assert v.clusters == ((0, 2), (1,))
    # '1' (text) is not 1 (integer)
    assert vote(["a", "b"], [t(("1",)), t((1,))]).clusters == ((0,), (1,))


def test_vote_input_errors() -> None:
    with pytest.raises(ConfigError, match="2 SQL strings but 1 results"):
        vote(["a", "b"], [t((1,))])
    with pytest.raises(ConfigError, match="at least one"):
        vote([], [])


def test_self_consistency_executes_on_a_real_database(tmp_path: Path) -> None:
    db = get_database(make_music_db(tmp_path / "music.sqlite"))
    sqls = [
        "SELECT name FROM singer WHERE country = 'Spain'",  # José García
        "SELECT nme FROM singer",  # error
        "SELECT name FROM singer WHERE age > 40",  # José García and Mei Chen ('unknown' > 40)
        "SELECT name FROM singer WHERE country IS NULL",  # Mei Chen
        "SELECT name FROM singer WHERE country = 'Atlantis'",  # empty
        "SELECT name FROM singer WHERE singer_id = 4 -- same row",  # José García
    ]
    v, results = self_consistency(db, sqls, ExecScorer(timeout_s=5))
    assert set(results[2].rows) == {("José García",), ("Mei Chen",)}  # text sorts after numbers in SQLite
    assert v.clusters == ((0, 5), (2,), (3,))
    assert v.index == 0 and v.sql == sqls[0] and v.consensus
    assert dict(v.dropped) == {1: "error", 4: "empty"}


def _brute_pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that a random k-subset of n samples (c correct) holds a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n,c,k", [(1, 0, 1), (1, 1, 1), (4, 1, 2), (5, 2, 3), (8, 3, 4), (6, 6, 2), (7, 0, 7)])
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(_brute_pass_at_k(n, c, k))
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


def test_pass_at_k_bad_input_and_ks() -> None:
    with pytest.raises(ConfigError, match="between 1 and n"):
        pass_at_k(4, 1, 5)
    with pytest.raises(ConfigError, match="cannot exceed"):
        pass_at_k(4, 5, 1)
    assert pass_k_values(16) == [1, 2, 4, 8, 16]
    assert pass_k_values(6) == [1, 2, 4, 6]
    assert pass_k_values(1) == [1]


def test_unique_sql_normalises_and_skips_missing() -> None:
    assert unique_sql(["SELECT a FROM t;", "SELECT  a\nFROM t -- c", "SELECT b FROM t", None, ""]) == 2
    assert unique_sql(["SELECT 'a  b'", "SELECT 'a b'"]) == 2


def test_doctests() -> None:
    import doctest

    import eval.voting

    result = doctest.testmod(eval.voting)
    assert result.attempted >= 3 and result.failed == 0
