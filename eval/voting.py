"""Self-consistency voting, pass@k and unique-SQL counts (docs/evaluation.md "Self-consistency and
majority voting").

Voting works on already-executed results so that it is a pure function (tested on
hand-made candidates); ``self_consistency`` executes the candidates first, read-only,
through the same ``ExecScorer`` (the one connection helper, the metric timeout) that
scores them.

The rule: drop candidates whose SQL is missing, errored, timed out, returned more than the
result budget or returned no rows;
cluster the rest by result set with EX equality (``rex.execution_match``: row sets equal,
duplicates and order ignored, column order kept); the largest cluster wins; between equal
clusters the one whose earliest sample comes first; the winner's earliest sample's SQL
is returned. If nothing survives, sample 0's SQL is returned and the question counts as
"no consensus". Empty means zero rows (a row of NULLs is a result, e.g. ``MAX`` of an
empty column, and stays in the vote).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rex import execution_match
from rex.sql import normalize_sql
from rex.tables import Failure, as_outcome
from tools.errors import ConfigError

if TYPE_CHECKING:
    from rex import ExecScorer
    from tools import Backend


@dataclass(frozen=True)
class VoteResult:
    """The outcome of one vote.

    ``index`` is the chosen sample (0 when there was no consensus); ``clusters`` lists the
    sample indices of each cluster, largest first (ties: earliest first); ``dropped`` the
    sample indices that did not enter the vote and why (``error``, ``timeout``,
    ``too_large``: past the result budget, ``empty``, ``no_sql``).
    """

    index: int
    sql: str | None
    consensus: bool
    clusters: tuple[tuple[int, ...], ...]
    dropped: tuple[tuple[int, str], ...]

    @property
    def support(self) -> int:
        """Samples agreeing with the chosen one (0 without consensus)."""
        return len(self.clusters[0]) if self.consensus else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "consensus": self.consensus,
            "support": self.support,
            "clusters": [list(c) for c in self.clusters],
            "dropped": [list(d) for d in self.dropped],
        }


def _why_dropped(sql: str | None, result: Any) -> str | None:
    """Why a candidate cannot vote, or None when it can."""
    if sql is None or result is None:
        return "no_sql"
    outcome = as_outcome(result)
    if isinstance(outcome, Failure):
        return "timeout" if outcome.timeout else "too_large" if outcome.too_large else "error"
    if not outcome.rows:
        return "empty"
    return None


def vote(sqls: Sequence[str | None], results: Sequence[Any]) -> VoteResult:
    """Vote among executed candidates (``results[i]`` is sample i's QueryResult / ToolError,
    or None when sample i produced no SQL).

    >>> vote(["a", "b", "c"], [(["x"], [(1,)]), (["x"], [(2,)]), (["y"], [(2,), (2,)])]).index
    1
    """
    if len(sqls) != len(results):
        raise ConfigError(f"vote got {len(sqls)} SQL strings but {len(results)} results; pass one result per sample")
    if not sqls:
        raise ConfigError("vote needs at least one candidate")
    dropped: list[tuple[int, str]] = []
    clusters: list[list[int]] = []
    for i, (sql, result) in enumerate(zip(sqls, results, strict=True)):
        why = _why_dropped(sql, result)
        if why is not None:
            dropped.append((i, why))
            continue
        for cluster in clusters:
            if execution_match(results[cluster[0]], result) == "match":
                cluster.append(i)
                break
        else:
            clusters.append([i])
    # Clusters are created in sample order, so their first member is their earliest sample:
    # a stable sort on size alone breaks ties by the earliest sample.
    ordered = sorted(clusters, key=lambda c: -len(c))
    if not ordered:
        return VoteResult(0, sqls[0], False, (), tuple(dropped))
    winner = ordered[0][0]
    return VoteResult(winner, sqls[winner], True, tuple(tuple(c) for c in ordered), tuple(dropped))


def self_consistency(db: Backend, sqls: Sequence[str | None], scorer: ExecScorer) -> tuple[VoteResult, list[Any]]:
    """Execute every candidate read-only (``scorer.execute``: metric preset, its timeout) and
    vote; returns the vote and the executed results (None where there was no SQL), so the
    caller can score the winner without running it again."""
    results = [scorer.execute(db, sql) if sql is not None else None for sql in sqls]
    return vote(sqls, results), results


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., 2021):
    1 - C(n-c, k) / C(n, k), computed as a stable product.

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 4), pass_at_k(4, 0, 2)
    (0.25, 1.0, 0.0)
    >>> round(pass_at_k(5, 2, 2), 4)
    0.7
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if not isinstance(value, int) or value < 0:
            raise ConfigError(f"pass_at_k {name}={value!r}: a non-negative integer")
    if c > n:
        raise ConfigError(f"pass_at_k: c={c} correct samples out of n={n}; c cannot exceed n")
    if not 1 <= k <= n:
        raise ConfigError(f"pass_at_k: k={k} must be between 1 and n={n} (draw at least k samples)")
    if n - c < k:
        return 1.0
    # C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i)
    fail = 1.0
    for i in range(n - c + 1, n + 1):
        fail *= 1.0 - k / i
    return 1.0 - fail


def pass_k_values(n: int) -> list[int]:
    """The k reported for n samples: powers of two below n, and n itself."""
    ks = [1 << e for e in range(int(math.log2(n)) + 1) if (1 << e) < n] if n >= 1 else []
    return ks + [n] if n >= 1 else []


def unique_sql(sqls: Sequence[str | None]) -> int:
    """Distinct final SQL strings among the samples (normalised: comments, trailing
    semicolons and whitespace outside quotes collapsed); a missing SQL does not count."""
    seen = {normalize_sql(s) for s in sqls if s}
    seen.discard("")
    return len(seen)
