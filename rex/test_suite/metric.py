"""The ``test_suite`` execution metric: EX on the original database and on every neighbour.

Registered in ``rex.scorer.METRICS``; its ``suite`` attribute makes ``ExecScorer.score``
finish the score here. The neighbours run only when the prediction matches on the
original; the gold result on each neighbour is cached by the scorer like any gold result
(per database content hash and SQL), and whether a neighbour can judge the gold query
(``rex.test_suite.build.judged_gold``: it runs there and its LIMIT cuts no tie) is
cached here once per neighbour and query.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from rex.metrics import ex_score, execution_match
from rex.scorer import ExecScore, register_metric
from rex.sql import normalize_sql
from rex.tables import Failure, Table, as_outcome
from rex.test_suite.reader import limit_cuts_tie, tie_probe
from rex.test_suite.suites import require_sqlite, suite_for_scoring

if TYPE_CHECKING:
    from rex.scorer import ExecScorer
    from tools import Backend

_JUDGES: OrderedDict[tuple[str, str], bool] = OrderedDict()
_JUDGES_LOCK = threading.Lock()
JUDGES_KEPT = 100_000


@register_metric("test_suite")
def test_suite_metric(gold: Table, pred: Table, ordered: bool | None, outcome: str) -> tuple[float, dict[str, Any]]:
    """EX on the original database; ``ExecScorer.score`` then runs the neighbours (``suite``)."""
    return ex_score(outcome), {}


def check_on_suite(
    scorer: ExecScorer, db: Backend, gold_sql: str, pred_sql: str | None, scored: ExecScore
) -> ExecScore:
    """``scored`` (EX on the original) confirmed or overturned on ``db``'s neighbours.

    Not a match on the original: returned as it is (nothing more runs). A match: the
    prediction runs on each neighbour that judges the gold query; the first neighbour where
    it does not match sets the score to 0 with ``suite_rejected: True``,
    ``suite_neighbour`` (its index) and ``suite_outcome`` in the details. ``ex_match``
    and ``outcome`` stay EX's on the original. A prediction that is the gold query itself
    (after ``normalize_sql``) is not run again. A database other than SQLite is a
    ``ConfigError`` whatever the prediction (``require_sqlite``)."""
    require_sqlite(db)
    if scored.score < 1.0 or pred_sql is None:
        return scored
    suite = suite_for_scoring(db, gold_sql)
    details = dict(scored.details)
    if normalize_sql(pred_sql) == normalize_sql(gold_sql):  # the same query returns the same rows anywhere
        details.update(suite_rejected=False, suite_judged=0, suite_size=len(suite.neighbours), suite_same_sql=True)
        return dataclasses.replace(scored, details=details)
    judged = 0
    for index, neighbour in enumerate(suite.neighbours):
        gold = scorer.gold(neighbour, gold_sql)
        if not _judges(scorer, neighbour, gold_sql, gold.result):
            continue
        judged += 1
        outcome = execution_match(gold.result, scorer.execute(neighbour, pred_sql))
        if outcome != "match":
            details.update(suite_rejected=True, suite_neighbour=index, suite_outcome=outcome, suite_judged=judged)
            return dataclasses.replace(scored, score=0.0, details=details)
    details.update(suite_rejected=False, suite_judged=judged, suite_size=len(suite.neighbours))
    return dataclasses.replace(scored, details=details)


def _judges(scorer: ExecScorer, neighbour: Backend, gold_sql: str, gold: Any) -> bool:
    if isinstance(as_outcome(gold), Failure):
        return False
    key = (neighbour.content_hash, normalize_sql(gold_sql))
    with _JUDGES_LOCK:
        known = _JUDGES.get(key)
    if known is not None:
        return known
    probe = tie_probe(gold_sql)
    ok = probe is None or not limit_cuts_tie(as_outcome(scorer.execute(neighbour, probe[0])), probe[1], probe[2])
    with _JUDGES_LOCK:
        _JUDGES[key] = ok
        while len(_JUDGES) > JUDGES_KEPT:
            _JUDGES.popitem(last=False)
    return ok


test_suite_metric.suite = check_on_suite  # type: ignore[attr-defined]  # read by ExecScorer.score
