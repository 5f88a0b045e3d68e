"""Executing gold and predicted SQL for a metric, with a gold-result cache.

Every execution goes through ``tools.execute`` (the one read-only connection helper) with
``tools.PRESETS["metric"]``: no row cap, so metrics see whole results, a result budget (a
result past it is ``pred_too_large`` / ``gold_too_large``) and a wall-clock timeout (30 s by
default). Gold results are cached per (database content hash,
normalised SQL): a GRPO group scores G samples against the same gold query, and an
evaluation scores many runs against the same benchmark.

The execution metrics live in the ``METRICS`` registry (``@register_metric(name)``); every
reward's ``exec_metric`` and the config's ``reward.exec_metric`` accept any registered name.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from rex.metrics import ex_score, execution_match, qatch_scores, rex_compare
from rex.spider import official_execution_match, official_sql_pair, order_matters, spider_execution_match
from rex.sql import has_top_level_order_by, normalize_sql
from rex.tables import Failure, Table, as_outcome
from rex.trust import SUITE_KEY, GoldFacts, gold_facts, trust_flags
from tools.db.limits import METRIC_MAX_RESULT_BYTES, METRIC_MAX_RESULT_ROWS, check_result_budget
from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry
from tools.spelling import did_you_mean

if TYPE_CHECKING:
    from tools import Backend, QueryLimits, QueryResult, ToolError

OrderRule = Callable[[str], bool]
"""Gold SQL -> whether row order matters for the metric (read once per cached gold query)."""
MetricFn = Callable[[Table, Table, "bool | None", str], "tuple[float, dict[str, Any]]"]
SqlRewrite = Callable[[str, str], "tuple[str, str]"]
"""(gold SQL, predicted SQL) -> the pair the metric executes (Spider's official pipeline
rewrites both before running them)."""


class ExecMetric(Protocol):
    """A registered execution metric: ``(gold, pred, ordered, outcome) -> (score, details)``.

    Called only when both queries ran (a failure scores 0 without calling it). ``gold`` and
    ``pred`` are whole result tables, ``ordered`` is ``order_rule(gold_sql)`` (None when the
    metric has no order rule), ``outcome`` the EX outcome already computed. ``score`` is in
    [0, 1]; ``details`` (its working) is merged into ``ExecScore.details``.
    """

    order_rule: OrderRule | None
    rewrite: SqlRewrite | None  # applied by ``ExecScorer.score`` before executing; None: SQL as written

    def __call__(
        self, gold: Table, pred: Table, ordered: bool | None, outcome: str
    ) -> tuple[float, dict[str, Any]]: ...


METRICS: Registry[ExecMetric] = Registry("execution metric", plugins=DESIGN_GROUP)
"""The execution-metric knob of every reward (docs/designs.md "One execution-metric knob"): ``ex``,
``rex``, ``qatch``, ``spider`` (Spider's official execution match, ``evaluation.py``'s SQL
rewrite included: the EX rule of ``data=spider``), ``spider_strict`` (its comparison on the
SQL as written) and ``test_suite`` (EX on the database and its neighbours,
``rex.test_suite``), plus any metric registered with :func:`register_metric`."""


def register_metric(
    name: str, order_rule: OrderRule | None = None, replace: bool = False, rewrite: SqlRewrite | None = None
) -> Callable[[MetricFn], MetricFn]:
    """Decorator: register an execution metric (see :class:`ExecMetric`) as ``name``.

    ``order_rule`` (e.g. ``has_top_level_order_by``) makes the scorer work out, once per
    gold query, whether row order matters and pass it as ``ordered``; ``rewrite`` (see
    :data:`SqlRewrite`) makes :meth:`ExecScorer.score` run a rewritten pair instead::

        @register_metric("same_row_count")
        def same_row_count(gold, pred, ordered, outcome):
            return float(len(gold.rows) == len(pred.rows)), {}
    """

    def wrap(fn: MetricFn) -> MetricFn:
        fn.order_rule = order_rule  # type: ignore[attr-defined]  # read by the scorer (ExecMetric)
        fn.rewrite = rewrite  # type: ignore[attr-defined]
        METRICS.register(name, replace=replace)(fn)  # type: ignore[arg-type]
        return fn

    return wrap


def get_metric(metric: str) -> ExecMetric:
    """The metric registered as ``metric``, else a ``ConfigError`` listing the registered ones."""
    if metric not in METRICS:
        names = METRICS.names()
        raise ConfigError(
            f"exec_metric={metric!r} is not a registered execution metric{did_you_mean(metric, names) or ';'} "
            f"registered: {', '.join(names)} (add one with rex.register_metric)"
        )
    return METRICS.get(metric)


def check_metric(metric: str) -> str:
    """``metric`` if it is registered in ``METRICS``, else a ``ConfigError`` saying which are."""
    get_metric(metric)
    return metric


@register_metric("ex")
def ex_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """BIRD's EX: 1 when the sets of rows match."""
    return ex_score(outcome), {}


@register_metric("spider", order_rule=order_matters, rewrite=official_sql_pair)
def spider_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """Spider's official execution match: ``evaluation.py``'s SQL rewrite (DISTINCT dropped,
    ``> =`` joined, ``value`` filled) and its comparison (``rex.spider``)."""
    match = official_execution_match(gold, pred, bool(ordered))
    return (1.0 if match else 0.0), {"spider_match": match}


@register_metric("spider_strict", order_rule=order_matters)
def spider_strict_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """The project's stricter Spider rule: Spider's comparison on the SQL as written."""
    match = spider_execution_match(gold, pred, bool(ordered))
    return (1.0 if match else 0.0), {"spider_match": match}


@register_metric("rex", order_rule=has_top_level_order_by)
def rex_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """REX: partial credit on the cell level (``rex.metrics.rex_compare``)."""
    rex = rex_compare(gold, pred, bool(ordered))
    return rex.score, {"rex": rex.to_json()}


@register_metric("qatch")
def qatch_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """QATCH: the mean of cell precision, cell recall and tuple cardinality."""
    qatch = qatch_scores(gold, pred)
    return qatch.mean, {"qatch": qatch.to_json()}


@dataclass(frozen=True)
class ExecScore:
    """The execution score of one prediction against its gold query.

    ``score`` is in [0, 1] under ``metric`` (EX: 1/0, REX: its score, QATCH: the mean
    of CP, CR, TC) and is 0 whenever either query failed. ``outcome`` is the EX outcome
    (see ``rex.metrics.OUTCOMES``). ``pred_executed``: the prediction ran;
    ``pred_nonempty``: it ran and returned at least one non-NULL cell. ``details`` holds
    the metric's working (``rex``, ``qatch``), ``ordered`` (REX only: gold has a top-level ORDER
    BY), row counts, error messages (``gold_error``, ``pred_error``) and ``trust_flags``
    (see ``flags``).
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
        """True when the gold query itself failed (or its result is past the result
        budget): the example cannot be scored."""
        return self.outcome in ("gold_error", "gold_timeout", "gold_too_large")

    @property
    def flags(self) -> tuple[str, ...]:
        """The reward-trust flags of this sample (``rex.trust.FLAGS``); ``suite_rejected``
        also when the test-suite verdict was added to ``details`` after scoring."""
        flags = tuple(self.details.get("trust_flags", ()))
        late = self.details.get(SUITE_KEY) and SUITE_KEY not in flags
        return (*flags, SUITE_KEY) if late else flags


class _Gold:
    """A cached gold result; ``ordered`` (a sqlglot parse) is worked out on first use,
    since only REX needs it."""

    def __init__(self, result: Any, sql: str) -> None:
        self.result = result  # QueryResult | ToolError
        self.sql = sql
        rows = getattr(result, "rows", ())
        self.cells = len(rows) * (len(rows[0]) if rows else 0)
        self._orders: dict[OrderRule, bool] = {}
        self._facts: GoldFacts | None = None

    def facts(self, db: Backend) -> GoldFacts:
        """The gold facts the trust flags need (``rex.trust.gold_facts``), worked out once."""
        if self._facts is None:
            self._facts = gold_facts(db, self.sql, as_outcome(self.result))
        return self._facts

    def order(self, rule: OrderRule) -> bool:
        """``rule(gold_sql)``, worked out once per rule (two threads may both work it out)."""
        if rule not in self._orders:
            self._orders[rule] = rule(self.sql)
        return self._orders[rule]

    @property
    def ordered(self) -> bool:
        """REX's order rule: the gold query has a top-level ORDER BY."""
        return self.order(has_top_level_order_by)

    @property
    def spider_ordered(self) -> bool:
        return self.order(order_matters)

    def ordered_for(self, metric: str) -> bool | None:
        """What ``score_results`` needs for ``metric``: its order rule on the gold SQL (REX's
        and Spider's differ), or None when the metric ignores row order."""
        rule = get_metric(metric).order_rule
        return None if rule is None else self.order(rule)


class ExecScorer:
    """Scores predicted SQL against gold SQL on a database under one metric.

    Thread-safe; holds no connection (``tools.Backend`` gives each thread its own).
    Picklable for process pools (the cache is not carried over).

    ``timeout_s`` bounds each query; ``max_result_rows`` / ``max_result_bytes`` are the
    result budget of each (None: no budget; defaults: the metric preset's);
    ``gold_cache_size`` is the number of gold results kept (least recently used first
    out) and ``gold_cache_cells`` bounds the cells they hold together (a few huge gold
    results cannot fill memory). Gold failures are cached too, timeouts
    included, so a slow gold query is not re-run for every sample of its GRPO group;
    a new scorer retries them.
    """

    def __init__(
        self,
        timeout_s: float = 30.0,
        gold_cache_size: int = 4096,
        gold_cache_cells: int = 20_000_000,
        max_result_rows: int | None = METRIC_MAX_RESULT_ROWS,
        max_result_bytes: int | None = METRIC_MAX_RESULT_BYTES,
    ) -> None:
        if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
            raise ConfigError(f"ExecScorer timeout_s={timeout_s!r}; use a positive number of seconds")
        check_result_budget("ExecScorer ", max_result_rows, max_result_bytes)
        self.max_result_rows = max_result_rows
        self.max_result_bytes = max_result_bytes
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
        return {
            "timeout_s": self.timeout_s,
            "gold_cache_size": self.gold_cache_size,
            "gold_cache_cells": self.gold_cache_cells,
            "max_result_rows": self.max_result_rows,
            "max_result_bytes": self.max_result_bytes,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @cached_property
    def limits(self) -> QueryLimits:
        """``tools.PRESETS["metric"]`` (no row cap) with this scorer's timeout and result budget."""
        from tools import PRESETS

        return dataclasses.replace(
            PRESETS["metric"],
            timeout_s=self.timeout_s,
            max_result_rows=self.max_result_rows,
            max_result_bytes=self.max_result_bytes,
        )

    def execute(self, db: Backend, sql: str) -> QueryResult | ToolError:
        """Run ``sql`` (normalised: comments and trailing semicolons stripped) read-only."""
        from tools import ToolError, execute

        text = normalize_sql(sql) if isinstance(sql, str) else ""
        if not text:
            return ToolError("syntax", "no SQL to execute", "answer with one SELECT statement")
        return execute(db, text, self.limits)

    def gold(self, db: Backend, gold_sql: str) -> _Gold:
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

    def score(self, db: Backend, gold_sql: str, pred_sql: str | None, metric: str = "ex") -> ExecScore:
        """Execute both queries and score the prediction under ``metric``.

        ``pred_sql`` None (the model gave no SQL) scores like a failing prediction
        (outcome ``pred_error``). A metric with a ``rewrite`` (``spider``) executes the
        rewritten pair; one with a ``suite`` (``test_suite``) finishes the score on the
        database's neighbours (``rex.test_suite.metric.check_on_suite``). Never raises on
        SQL text; an unknown ``metric`` is a ``ConfigError``.
        """
        chosen = get_metric(metric)
        rewrite = getattr(chosen, "rewrite", None)
        if rewrite is not None and isinstance(gold_sql, str) and isinstance(pred_sql, str):
            gold_sql, pred_sql = rewrite(gold_sql, pred_sql)
        gold = self.gold(db, gold_sql)
        pred = self.execute(db, pred_sql) if pred_sql is not None else None
        scored = score_results(gold.result, pred, metric, gold.ordered_for(metric), gold.facts(db))
        suite = getattr(chosen, "suite", None)  # test_suite: the neighbour databases (rex.test_suite)
        return suite(self, db, gold_sql, pred_sql, scored) if suite is not None else scored


def score_results(
    gold: Any, pred: Any | None, metric: str, ordered: bool | None, gold_facts: GoldFacts | None = None
) -> ExecScore:
    """Score two already-executed results (``pred`` None = no SQL) under ``metric``.
    ``ordered`` (the metric's order rule on the gold SQL) is needed only by a metric with
    an order rule (REX, Spider); ``gold_facts`` (``ExecScorer.gold(...).facts(db)``) adds
    the trust flags that need the gold SQL and database."""
    scorer = get_metric(metric)
    if scorer.order_rule is not None and ordered is None:
        rule = f"{scorer.order_rule.__module__}.{scorer.order_rule.__name__}"
        raise ConfigError(f"score_results with metric={metric!r} needs ordered=True/False ({rule}(gold_sql))")
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
        score, working = scorer(g, p, ordered, outcome)
        details.update(working)
    details["trust_flags"] = trust_flags(g, p, outcome, gold_facts, scorer.order_rule, details)
    return ExecScore(
        metric=metric,
        score=float(score),
        outcome=outcome,
        pred_executed=executed,
        pred_nonempty=nonempty,
        ex_match=outcome == "match",
        details=details,
    )
