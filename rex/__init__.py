"""Comparing query results (EX, REX, QATCH) and reading SQL (sqlglot, SQLite dialect).

``rex.metrics`` holds pure functions on result tables, ``rex.sql`` reads SQL text,
``rex.scorer.ExecScorer`` executes gold and predicted SQL through ``tools.execute`` and
scores them. ``python -m rex compare --db PATH --gold SQL --pred SQL`` prints one JSON
object. See docs/INTERFACES.md.
"""

from __future__ import annotations

from rex.metrics import (
    OUTCOMES,
    QatchScores,
    RexResult,
    ex_score,
    execution_match,
    qatch_scores,
    rex_compare,
    rex_score,
)
from rex.scorer import (
    METRICS,
    ExecMetric,
    ExecScore,
    ExecScorer,
    check_metric,
    get_metric,
    register_metric,
    score_results,
)
from rex.sql import (
    SqlReference,
    extract_sql,
    has_top_level_order_by,
    is_select_only,
    normalize_sql,
    referenced_schema,
)
from rex.tables import Failure, MetricInputError, Table
from rex.test_suite import metric as _test_suite_metric  # noqa: F401  # registers ``test_suite`` in METRICS

__all__ = [
    "METRICS",
    "OUTCOMES",
    "ExecMetric",
    "ExecScore",
    "ExecScorer",
    "Failure",
    "MetricInputError",
    "QatchScores",
    "RexResult",
    "SqlReference",
    "Table",
    "check_metric",
    "ex_score",
    "execution_match",
    "extract_sql",
    "get_metric",
    "has_top_level_order_by",
    "is_select_only",
    "normalize_sql",
    "qatch_scores",
    "referenced_schema",
    "register_metric",
    "rex_compare",
    "rex_score",
    "score_results",
]
