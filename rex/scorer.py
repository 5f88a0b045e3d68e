"""Executing gold and predicted SQL for a metric, with a gold-result cache.

Every execution goes through ``tools.execute`` (the one read-only connection helper) with
``tools.PRESETS["metric"]``: no row cap, so metrics see whole results, and a wall-clock
timeout (30 s by default). Gold results are cached per (database content hash,
normalised SQL): a GRPO group scores G samples against the same gold query, and an
evaluation scores many runs against the same benchmark.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from rex.metrics import ex_score, execution_match, qatch_scores, rex_compare
from rex.spider import order_matters, spider_execution_match
from rex.sql import has_top_level_order_by, normalize_sql
from rex.tables import Failure, as_outcome
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Database, QueryLimits, QueryResult, ToolError

METRICS: tuple[str, ...] = ("ex", "rex", "qatch", "spider")
"""The execution-metric knob of every reward (SPEC.md "One execution-metric knob"); ``spider``
is Spider's official execution match (``rex.spider``), the EX rule of ``data=spider``."""


def check_metric(metric: str) -> str:
    """``metric`` if it is one of ``METRICS``, else a ``ConfigError`` saying which are."""
    if metric not in METRICS:
        raise ConfigError(f"exec_metric={metric!r} is not a metric; use one of {', '.join(METRICS)}")
    return metric


@dataclass(frozen=True)
class ExecScore:
    """The execution score of one prediction against its gold query.

    ``score`` is in [0, 1] under ``metric`` (EX: 1/0, REX: its score, QATCH: the mean
    of CP, CR, TC) and is 0 whenever either query failed. ``outcome`` is the EX outcome
    (six values, see ``rex.metrics.OUTCOMES``). ``pred_executed``: the prediction ran;
    ``pred_nonempty``: it ran and returned at least one non-NULL cell. ``details`` holds
    the metric's working (``rex``, ``qatch``), ``ordered`` (REX only: gold has a top-level ORDER
    BY), row counts and error messages (``gold_error``, ``pred_error``).
    """

    metric: str
    score: float
    outcome: str
    pred_executed: bool
    pred_nonempty: bool
    ex_match: bool
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def gold_failed(self) -> bool:
        """True when the gold query itself failed: the example cannot be scored."""
        return self.outcome in ("gold_error", "gold_timeout")


class _Gold:
    """A cached gold result; ``ordered`` (a sqlglot parse) is worked out on first use,
    since only REX needs it."""

    def __init__(self, result: Any, sql: str) -> None:
        self.result = result  # QueryResult | ToolError
        self.sql = sql
        rows = getattr(result, "rows", ())
        self.cells = len(rows) * (len(rows[0]) if rows else 0)

    @cached_property
    def ordered(self) -> bool:
        return has_top_level_order_by(self.sql)

    @cached_property
    def spider_ordered(self) -> bool:
        return order_matters(self.sql)

    def ordered_for(self, metric: str) -> bool | None:
        """What ``score_results`` needs for ``metric``: REX's and Spider's order rules differ."""
        return self.ordered if metric == "rex" else self.spider_ordered if metric == "spider" else None


class ExecScorer:
    """Scores predicted SQL against gold SQL on a database under one metric.

    Thread-safe; holds no connection (``tools.Database`` gives each thread its own).
    Picklable for process pools (the cache is not carried over).

    ``timeout_s`` bounds each query; ``gold_cache_size`` is the number of gold results
    kept (least recently used first out) and ``gold_cache_cells`` bounds the cells they
    hold together (a few huge gold results cannot fill memory). Gold failures are cached too, timeouts
    included, so a slow gold query is not re-run for every sample of its GRPO group;
    a new scorer retries them.
    """

    def __init__(
        self, timeout_s: float = 30.0, gold_cache_size: int = 4096, gold_cache_cells: int = 20_000_000
    ) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ConfigError(f"ExecScorer timeout_s={timeout_s!r}; use a positive number of seconds")
        if not (isinstance(gold_cache_size, int) and gold_cache_size >= 0):
            raise ConfigError(f"ExecScorer gold_cache_size={gold_cache_size!r}; use an int >= 0")
        if not (isinstance(gold_cache_cells, int) and gold_cache_cells >= 0):
            raise ConfigError(f"ExecScorer gold_cache_cells={gold_cache_cells!r}; use an int >= 0")
        self.timeout_s = float(timeout_s)
        self.gold_cache_size = gold_cache_size
        self.gold_cache_cells = gold_cache_cells
        self._cache: OrderedDict[tuple[str, str], _Gold] = OrderedDict()
        self._cached_cells = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __getstate__(self) -> dict[str, Any]:
        return {"timeout_s": self.timeout_s, "gold_cache_size": self.gold_cache_size,
                "gold_cache_cells": self.gold_cache_cells}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["timeout_s"], state["gold_cache_size"], state["gold_cache_cells"])  # type: ignore[misc]

    @cached_property
    def limits(self) -> QueryLimits:
        """``tools.PRESETS["metric"]`` (no row cap) with this scorer's timeout."""
        from tools import PRESETS

        return dataclasses.replace(PRESETS["metric"], timeout_s=self.timeout_s)

    def execute(self, db: Database, sql: str) -> QueryResult | ToolError:
        """Run ``sql`` (normalised: comments and trailing semicolons stripped) read-only."""
        from tools import ToolError, execute

        text = normalize_sql(sql) if isinstance(sql, str) else ""
        if not text:
            return ToolError("syntax", "no SQL to execute", "answer with one SELECT statement")
        return execute(db, text, self.limits)

    def gold(self, db: Database, gold_sql: str) -> _Gold:
        """The gold result and ordering, cached per (database content hash, SQL)."""
        key = (db.content_hash, normalize_sql(gold_sql) if isinstance(gold_sql, str) else "")
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return hit
            self.misses += 1
        entry = _Gold(self.execute(db, gold_sql), key[1])
        if self.gold_cache_size and entry.cells <= self.gold_cache_cells:
            with self._lock:
                if key not in self._cache:
                    self._cache[key] = entry
                    self._cached_cells += entry.cells
                while len(self._cache) > self.gold_cache_size or self._cached_cells > self.gold_cache_cells:
                    _, old = self._cache.popitem(last=False)
                    self._cached_cells -= old.cells
        return entry

    def score(
        self, db: Database, gold_sql: str, pred_sql: str | None, metric: str = "ex"
    ) -> ExecScore:
        """Execute both queries and score the prediction under ``metric``.

        ``pred_sql`` None (the model gave no SQL) scores like a failing prediction
        (outcome ``pred_error``). Never raises on SQL text; an unknown ``metric`` is a
        ``ConfigError``.
        """
        check_metric(metric)
        gold = self.gold(db, gold_sql)
        pred = self.execute(db, pred_sql) if pred_sql is not None else None
        return score_results(gold.result, pred, metric, gold.ordered_for(metric))


def score_results(gold: Any, pred: Any | None, metric: str, ordered: bool | None) -> ExecScore:
    """Score two already-executed results (``pred`` None = no SQL) under ``metric``.
    ``ordered`` (gold has a top-level ORDER BY) is needed only by REX."""
    check_metric(metric)
    if metric == "rex" and ordered is None:
        raise ConfigError("score_results with metric='rex' needs ordered=True/False (has_top_level_order_by(gold_sql))")
    if metric == "spider" and ordered is None:
        raise ConfigError("score_results with metric='spider' needs ordered=True/False (rex.spider.order_matters)")
    g = as_outcome(gold)
    p: Any = as_outcome(pred) if pred is not None else Failure("syntax", "no SQL in the answer")
    outcome = execution_match(g, p)
    details: dict[str, Any] = {} if ordered is None else {"ordered": ordered}
    if isinstance(g, Failure):
        details["gold_error"] = f"{g.kind}: {g.message}"
    else:
        details["gold_rows"] = len(g.rows)
    if isinstance(p, Failure):
        details["pred_error"] = f"{p.kind}: {p.message}"
        details["pred_error_kind"] = p.kind
    else:
        details["pred_rows"] = len(p.rows)
    executed = not isinstance(p, Failure)
    nonempty = executed and any(v is not None for row in p.rows for v in row)
    score = 0.0
    if not isinstance(g, Failure) and executed:
        if metric == "ex":
            score = ex_score(outcome)
        elif metric == "spider":
            score = 1.0 if spider_execution_match(g, p, bool(ordered)) else 0.0
            details["spider_match"] = bool(score)
        elif metric == "rex":
            rex = rex_compare(g, p, bool(ordered))
            details["rex"] = rex.to_json()
            score = rex.score
        else:
            qatch = qatch_scores(g, p)
            details["qatch"] = qatch.to_json()
            score = qatch.mean
    return ExecScore(
        metric=metric,
        score=float(score),
        outcome=outcome,
        pred_executed=executed,
        pred_nonempty=nonempty,
        ex_match=outcome == "match",
        details=details,
    )
