"""Scoring one question: execute its gold SQL once and every sample's SQL once, pick the
prediction (greedy/pass@k: sample 0; sc: the vote), and write one plain JSON record.

Every execution goes through ``ExecScorer`` (``tools.execute`` with the metric preset):
the gold result is cached per (database content hash, SQL), each sample runs once, and
EX / REX / QATCH are computed from those results with ``rex.score_results``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.types import Example, SchemaSelection, Trajectory, final_sql
from eval.voting import unique_sql, vote
from rex import ExecScorer, get_metric, score_results
from rex.bird_ex import official_ex
from rex.linking import LEVELS, gold_sets, link_score, linked_sets
from tools import get_database

MODES = ("greedy", "sc", "passk")
MISSING = "missing"
"""Outcome of a question the predictions file has no SQL for (its gold SQL ran)."""


@dataclass(frozen=True)
class Sample:
    """One sampled answer to a question and what producing it cost."""

    sql: str | None
    turns: int = 0
    tool_calls: int = 0
    policy_tokens: int = 0
    response_tokens: int = 0
    prompt_tokens: int = 0
    end_reason: str = ""
    episodes: int = 0
    flags: dict[str, Any] = field(default_factory=dict)
    last_turn: str = ""  # the last assistant turn as kept (cut to LAST_TURN_CHARS), to read what the model wrote
    # what the design's linking step selected, {"tables": [...], "columns": [...]} as written
    # (empty lists: it selected nothing); None: the design has no linking step
    linked_schema: dict[str, list[str]] | None = None


LAST_TURN_CHARS = 2000


def sample_from_trajectories(
    trajectories: Sequence[Trajectory], linked_schema: Callable[..., SchemaSelection | None] | None = None
) -> Sample:
    """One sample = the episodes of one request (DualSQL: linker then generator); its SQL is
    ``agents.types.final_sql``, as in training's held-out EX. ``linked_schema``: the design's
    hook (``agents.designs.Design.linked_schema``) that reads what its linking step selected
    from the episodes' results; None for a design without one."""
    turns = [turn for t in trajectories for turn in t.result.turns]
    flags: dict[str, Any] = {}
    for t in trajectories:
        flags.update({f"{t.role}.{k}": v for k, v in t.result.flags.items()})
    return Sample(
        sql=final_sql(trajectories),
        turns=len(turns),
        tool_calls=sum(turn.tool_name is not None for turn in turns),
        policy_tokens=sum(t.num_policy_tokens for t in trajectories),
        response_tokens=sum(len(t.response_ids) for t in trajectories),
        prompt_tokens=sum(len(t.prompt_ids) for t in trajectories),
        end_reason=trajectories[-1].result.end_reason if trajectories else "",
        episodes=len(trajectories),
        flags=flags,
        last_turn=turns[-1].text[:LAST_TURN_CHARS] if turns else "",
        linked_schema=_linked(linked_schema, trajectories) if linked_schema is not None else None,
    )


def _linked(read: Callable[..., SchemaSelection | None], trajectories: Sequence[Trajectory]) -> dict[str, list[str]]:
    selection = read([t.result for t in trajectories])
    if selection is None:
        return {"tables": [], "columns": []}
    return {"tables": list(selection.tables), "columns": list(selection.columns)}


def linking_record(example: Example, linked: Mapping[str, Sequence[str]], db: Any) -> dict[str, Any]:
    """A question's schema linking (``rex.linking``): the linked and gold sets, normalised
    against the database schema, and per level (``tables``, ``columns``) precision, recall,
    F1 and ``complete`` (every gold element linked), or None where the gold SQL names
    nothing at that level (docs/evaluation.md "Schema linking")."""
    schema = db.schema()
    pred = linked_sets(linked.get("tables", ()), linked.get("columns", ()), schema)
    gold = gold_sets(example.gold_tables, example.gold_columns, example.gold_sql, schema)
    record: dict[str, Any] = {}
    for level, g, p in zip(LEVELS, gold, pred, strict=True):
        scored = link_score(g, p)
        record[level] = scored.to_json() if scored is not None else None
    record["linked"] = {level: sorted(p) for level, p in zip(LEVELS, pred, strict=True)}
    record["gold"] = {level: sorted(g) for level, g in zip(LEVELS, gold, strict=True)}
    return record


def _outcome(gold: Any, result: Any, ex_metric: str) -> str:
    """The EX outcome under the dataset's rule: BIRD's (``rex.OUTCOMES``); under ``spider`` a run
    that executed is match / mismatch by Spider's execution match instead of BIRD's."""
    bird = score_results(gold.result, result, "ex", None)
    if ex_metric == "ex" or bird.outcome not in ("match", "mismatch"):
        return bird.outcome
    official = score_results(gold.result, result, ex_metric, gold.ordered_for(ex_metric))
    return _rule_outcome(official)


def _rule_outcome(scored: Any) -> str:
    """Match / mismatch by the metric's score where both queries ran; the failure otherwise."""
    if scored.outcome not in ("match", "mismatch"):
        return scored.outcome
    return "match" if scored.score == 1.0 else "mismatch"


def _outcomes(
    example: Example, samples: Sequence[Sample], scorer: ExecScorer, db: Any, gold: Any, results: list, ex_metric: str
) -> list[str]:
    """Each sample's EX outcome. A rule that rewrites the SQL before running it (Spider's
    official pipeline: ``> =`` joined, DISTINCT dropped) decides on the rewritten pair, which
    may run where the text as written fails."""
    if getattr(get_metric(ex_metric), "rewrite", None) is None:
        return [_outcome(gold, r, ex_metric) for r in results]
    return [_rule_outcome(scorer.score(db, example.gold_sql, s.sql, ex_metric)) for s in samples]


def score_question(
    example: Example,
    samples: Sequence[Sample],
    scorer: ExecScorer,
    mode: str,
    missing: bool = False,
    ex_metric: str = "ex",
    test_suite: bool = False,
) -> dict[str, Any]:
    """The per-question record (JSON-ready). ``missing``: the predictions file had no SQL.
    ``ex_metric``: the dataset's official EX rule (``ex``: BIRD's; ``spider``: Spider's) that
    decides ``ex``, match / mismatch and pass@k. ``test_suite``: add ``ex_test_suite``, the
    ``ex`` match confirmed on every neighbour of the database (``rex.test_suite``)."""
    db = get_database(example.db_path)
    gold = scorer.gold(db, example.gold_sql)
    results = [scorer.execute(db, s.sql) if s.sql is not None else None for s in samples]
    outcomes = _outcomes(example, samples, scorer, db, gold, results, ex_metric)
    # With several samples the vote is reported in every mode (sc takes its choice as the
    # prediction; passk keeps sample 0), so one sampling run gives pass@k and SC together.
    ballot = vote([s.sql for s in samples], results) if len(samples) > 1 or mode == "sc" else None
    chosen = ballot.index if ballot is not None and mode == "sc" else 0
    ex = score_results(gold.result, results[chosen], "ex", None, gold.facts(db))
    ex_match = outcomes[chosen] == "match" if samples else ex.ex_match
    rex = score_results(gold.result, results[chosen], "rex", gold.ordered)
    qatch = score_results(gold.result, results[chosen], "qatch", None)
    outcome = outcomes[chosen] if samples else ex.outcome
    if missing and not ex.gold_failed:
        outcome = MISSING
    record: dict[str, Any] = {
        "id": example.id,
        "db_id": example.db_id,
        "difficulty": example.difficulty,
        "gold_sql": example.gold_sql,
        "sql": samples[chosen].sql,
        "outcome": outcome,
        "ex": 1 if ex_match else 0,
        # BIRD's evaluation script's own 0/1 (empty and ";;" predictions, gold failures: rex.bird_ex)
        "ex_official": official_ex(scorer, db, example.gold_sql, samples[chosen].sql, gold.result, results[chosen])
        if ex_metric == "ex"
        else (1 if ex_match else 0),
        "ex_metric": ex_metric,
        "rex": rex.score,
        "qatch": qatch.details.get("qatch", {"cp": 0.0, "cr": 0.0, "tc": 0.0, "mean": 0.0}),
        "gold_failed": ex.gold_failed,
        "missing": missing,
        "pred_executed": ex.pred_executed,
        "details": {k: v for k, v in ex.details.items() if k in ("gold_error", "pred_error", "gold_rows", "pred_rows")},
        "trust_flags": list(ex.flags),  # of the chosen prediction under EX (rex.trust.FLAGS)
        "n_samples": len(samples),
        "n_correct": sum(o == "match" for o in outcomes),
        "sample_outcomes": outcomes,
        "unique_sql": unique_sql([s.sql for s in samples]),
        "chosen": chosen,
    }
    if test_suite:
        _add_test_suite(record, scorer, db, example.gold_sql, ex)
    if ballot is not None:
        record["vote"] = {**ballot.to_json(), "match": outcomes[ballot.index] == "match"}
    linked = samples[chosen].linked_schema if samples else None
    if linked is not None:  # the design has a linking step (docs/evaluation.md "Schema linking")
        record["linking"] = linking_record(example, linked, db)
    if any(s.episodes for s in samples):
        record["samples"] = [_sample_json(s) for s in samples]
    return record


def _sample_json(sample: Sample) -> dict[str, Any]:
    """A sample as its record keeps it: no empty flags, no linked schema where none is read."""
    return {k: v for k, v in asdict(sample).items() if (k != "flags" or v) and (k != "linked_schema" or v is not None)}


def _add_test_suite(record: dict[str, Any], scorer: ExecScorer, db: Any, gold_sql: str, ex: Any) -> None:
    """``ex_test_suite``: 1 when ``ex`` is 1 and the prediction also matches on every
    neighbour that judges the question; a rejection is named in ``details``. Not added on a
    database of another dialect than SQLite (test suites are SQLite-only: ``rex.test_suite``)."""
    if db.dialect != "sqlite":
        return
    if not record["ex"]:
        record["ex_test_suite"] = 0
        return
    suite = get_metric("test_suite").suite  # type: ignore[attr-defined]
    checked = suite(scorer, db, gold_sql, record["sql"], dataclasses.replace(ex, score=1.0))
    record["ex_test_suite"] = 1 if checked.score == 1.0 else 0
    if checked.details.get("suite_rejected"):
        record["details"].update(
            {
                k: checked.details[k]
                for k in ("suite_rejected", "suite_neighbour", "suite_outcome")
                if k in checked.details
            }
        )
