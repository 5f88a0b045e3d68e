"""The dataset stage's selection: every verified trace kept, or at most a cap per question."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from agents.types import Example
from training.config.stage import SupervisedConfig
from training.supervised.dataset_stage import DatasetStage


def trace(sample: int, correct: bool = True) -> dict[str, Any]:
    text = f"<think>variant {sample}</think><action>confirm_answer</action><answer>SELECT {sample}</answer>"
    return {
        "question_id": "q0",
        "sample": sample,
        "source": "teacher0-sampled",
        "db_id": "schools",
        "question": "q",
        "difficulty": "moderate",
        "final_sql": f"SELECT {sample}",
        "correct": correct,
        "episodes": [
            {
                "role": "agent",
                "end_reason": "answer",
                "turns": [{"text": text, "format_ok": True}],
                "messages": [{"role": "assistant", "content": text}],
            }
        ],
    }


def select(cap: int | None, traces: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    stage = SimpleNamespace(
        sup=SupervisedConfig(max_traces_per_question=cap),
        privileged=False,
        questions=[Example(id="q0", db_id="schools", db_path="", question="q", gold_sql="SELECT 1")],
        by_id={},
    )
    return DatasetStage.select(stage, [], traces, {})  # type: ignore[arg-type]


def test_no_cap_keeps_every_distinct_verified_trace() -> None:
    """TRUST-SQL (App. A.2) keeps a trajectory iff it is correct and every turn passes the
    format check; no per-question cap (about 7.7 kept per question, Table 7)."""
    traces = [trace(i) for i in range(9)] + [trace(0), trace(9, correct=False)]
    rows, dropped = select(None, traces)
    assert len(rows) == 9 and dropped == {"duplicate": 1, "wrong_result": 1}
    rows, dropped = select(4, traces)
    assert len(rows) == 4 and dropped == {"duplicate": 1, "wrong_result": 1, "over_cap": 5}


def test_a_cap_must_be_positive_or_null() -> None:
    from tools.errors import ConfigError

    with pytest.raises(ConfigError, match="max_traces_per_question"):
        SupervisedConfig(max_traces_per_question=0)
