"""Collecting traces: k samples per question with any source, scored and stored as they finish.

``collect`` runs ``samples`` episodes per question with a generation source (the policy,
a local model or an endpoint; ``training/generation/sources.py``), a few questions at a time, and
appends to the stage directory, per question: its traces (``traces.jsonl``, keyed by
(question id, sample index, source)) and then its record (``questions.jsonl``: how many
samples ran, how many were right, the band). A question with a record is never redone;
one killed half-way is redone without duplicating a trace.

A trace keeps each episode's conversation in the design's exact turn format (tool
observations in place), its assistant turns with their phase and format verdict, the
final SQL and whether it matches gold by execution (BIRD EX).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.types import Example, Trajectory
from training.supervised.store import KeyedJsonl, StageDir

BANDS = ("all_wrong", "partly_solved", "all_solved")


def band(correct: int, samples: int) -> str:
    if samples == 0 or correct == 0:
        return "all_wrong"
    return "all_solved" if correct == samples else "partly_solved"


def trace_key(row: dict[str, Any]) -> tuple[str, int, str]:
    return (row["question_id"], int(row["sample"]), row["source"])


def question_key(row: dict[str, Any]) -> tuple[str, str]:
    return (row["question_id"], row["source"])


@dataclass
class Collection:
    traces: KeyedJsonl
    questions: KeyedJsonl

    def pass_at(self, source_prefix: str = "") -> dict[str, dict[str, Any]]:
        """Per question id: its record (samples, correct, band) for sources with this prefix."""
        return {r["question_id"]: r for r in self.questions.rows() if r["source"].startswith(source_prefix)}


def open_collection(stage: StageDir) -> Collection:
    return Collection(stage.records("traces.jsonl", trace_key), stage.records("questions.jsonl", question_key))


def trace_record(
    ex: Example, sample: int, source: str, episodes: Sequence[Trajectory], correct: bool, keep_messages: bool
) -> dict[str, Any]:
    return {
        "question_id": ex.id,
        "sample": sample,
        "source": source,
        "db_id": ex.db_id,
        "question": ex.question,
        "difficulty": ex.difficulty,
        "correct": correct,
        "final_sql": episodes[-1].result.final_sql if episodes else None,
        "episodes": [
            {
                "role": t.result.role,
                "end_reason": t.result.end_reason,
                "turns": [
                    {"text": turn.text, "phase": turn.phase, "format_ok": turn.format_ok} for turn in t.result.turns
                ],
                "messages": t.messages if keep_messages else None,
            }
            for t in episodes
        ],
    }


def collect(
    stage: StageDir,
    examples: Sequence[Example],
    run: Callable[[list[Example], int], Any],
    samples: int,
    source: str,
    is_correct: Callable[[Example, Sequence[Trajectory]], bool],
    chunk: int = 4,
    say: Callable[[str], None] = print,
) -> Collection:
    """Run ``run(questions, samples)`` (an ``EpisodeBatch``) for every question without a record."""
    store = open_collection(stage)
    pending = [ex for ex in examples if (ex.id, source) not in store.questions]
    if len(pending) < len(examples):
        say(f"[{stage.name}] {source}: {len(examples) - len(pending)} of {len(examples)} questions already done")
    for start in range(0, len(pending), chunk):
        questions = pending[start : start + chunk]
        batch = run(questions, samples)
        grouped: dict[tuple[str, int], list[Trajectory]] = {}
        for t in batch.trajectories:
            grouped.setdefault((t.example_id, t.sample_index), []).append(t)
        failed = set(batch.failed)
        for ex in questions:
            rows, right = [], 0
            for s in range(samples):
                if (ex.id, s) in failed:
                    rows.append(
                        {
                            "question_id": ex.id,
                            "sample": s,
                            "source": source,
                            "failed": True,
                            "correct": False,
                            "episodes": [],
                        }
                    )
                    continue
                episodes = grouped.get((ex.id, s), [])
                ok = bool(episodes) and is_correct(ex, episodes)
                right += ok
                rows.append(trace_record(ex, s, source, episodes, ok, keep_messages=ok))
            store.traces.append(rows)
            ran = samples - sum((ex.id, s) in failed for s in range(samples))
            store.questions.append(
                [
                    {
                        "question_id": ex.id,
                        "source": source,
                        "samples": ran,
                        "correct": right,
                        "failed": samples - ran,
                        "band": band(right, ran),
                        "difficulty": ex.difficulty,
                    }
                ]
            )
        say(f"[{stage.name}] {source}: {start + len(questions)}/{len(pending)} questions")
    return store


def execution_match(scorer: Any) -> Callable[[Example, Sequence[Trajectory]], bool]:
    """Right when the last episode's final SQL matches gold by execution (BIRD EX)."""
    from tools import get_database

    def check(ex: Example, episodes: Sequence[Trajectory]) -> bool:
        sql = episodes[-1].result.final_sql if episodes else None
        if not sql:
            return False
        return bool(scorer.score(get_database(ex.db_path), ex.gold_sql, sql, "ex").ex_match)

    return check
