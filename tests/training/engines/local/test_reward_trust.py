"""Reward-trust flags through the local engine's real step (tiny model, scripted policy,
real SQLite): ``reward/suspect_positive_rate``, ``reward/unscored_rate``, the flags in
samples.jsonl, and dynamic sampling's ``flagged_positive_as_unknown``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from agents.types import Example
from tests.helpers.local_trainer import trainer

RECIPE = "think2sql"  # one turn per episode: the cheapest real step
EX = "reward.exec_metric=ex"  # 1/0 rewards (the recipe's QATCH gives wrong answers partial credit)


@pytest.fixture(scope="module")
def trust_examples(examples: list[Example]) -> list[Example]:
    """q0: a one-row gold (COUNT, flagged ``gold_one_row``); qc: a two-row gold, no flag;
    qx: a gold SQL that fails, so its rewards cannot be computed."""
    base = examples[0]
    clean = dataclasses.replace(
        base,
        id="qc",
        question="Which schools are in Fresno?",
        gold_sql="SELECT name FROM schools WHERE city = 'Fresno'",
        gold_columns=("schools.city", "schools.name"),
    )
    broken = dataclasses.replace(
        base, id="qx", question="What is the mascot of each school?", gold_sql="SELECT mascot FROM schools"
    )
    return [base, clean, broken]


def test_a_step_counts_suspect_positives_and_unscored_rewards(
    tmp_path: Path, trust_examples: list[Example], caplog: pytest.LogCaptureFixture
) -> None:
    good = {"q0": lambda k: k % 2 == 0, "qc": lambda k: True, "qx": lambda k: True}
    t = trainer(
        RECIPE,
        tmp_path,
        trust_examples,
        "algorithm.dynamic_sampling.enable=false",
        "algorithm.batch_size=3",
        EX,
        always_good=lambda ex, k: good[ex.id](k),
    )
    with caplog.at_level("WARNING"):
        metrics = t.train_step()
    # positives: q0's 2 (flagged gold_one_row) and qc's 4 (no flag); qx's 4 cannot be scored
    assert metrics["reward/suspect_positive_rate"] == pytest.approx(2 / 6)
    assert metrics["reward/unscored_rate"] == pytest.approx(4 / 12)
    assert metrics["reward/unscored/gold_error"] == 4.0
    assert "rewards not computed for 4 of 12 rollouts" in caplog.text and "mascot" in caplog.text
    records = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    flags = {r["example_id"]: set() for r in records}
    for r in records:
        flags[r["example_id"]].add(tuple(r["trust_flags"]))
    assert flags == {"q0": {("gold_one_row",)}, "qc": {()}, "qx": {()}}
    assert all(r["reward_error"] for r in records if r["example_id"] == "qx")


@pytest.mark.parametrize("as_unknown, kept", [(False, {"q0", "qc"}), (True, {"qc"})])
def test_flagged_positives_as_unknown_drop_a_group_that_varies_only_through_them(
    tmp_path: Path, trust_examples: list[Example], as_unknown: bool, kept: set[str]
) -> None:
    # q0: one right answer of four, flagged (one-row gold); qc: two of four, not flagged
    good = {"q0": lambda k: k == 0, "qc": lambda k: k % 2 == 0}
    t = trainer(
        RECIPE,
        tmp_path,
        trust_examples[:2],
        "algorithm.dynamic_sampling.enable=true",
        "algorithm.batch_size=2",
        "algorithm.dynamic_sampling.oversample=1",
        EX,
        f"algorithm.dynamic_sampling.flagged_positive_as_unknown={str(as_unknown).lower()}",
        always_good=lambda ex, k: good[ex.id](k),
    )
    metrics = t.train_step()
    assert {tr.example_id for tr in t.last_buffer.trajectories} == kept
    assert metrics["sampling/groups_kept"] == len(kept)
    assert metrics["reward/suspect_positive_rate"] == pytest.approx(1 / 3)  # 1 flagged of 3 positives
