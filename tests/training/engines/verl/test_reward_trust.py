"""Reward-trust flags on the veRL path: they travel with the reward breakdown, reach the
step record (``reward/suspect_positive_rate``, ``reward/unscored_rate``) and samples.jsonl,
and ``flagged_positive_as_unknown`` changes the replay buffer's group classification."""

from __future__ import annotations

from typing import Any

import pytest

from agents.types import RewardBreakdown
from training.engines.verl.shared import EPISODE_KEY, REWARD_KEY, DynamicSampling
from training.engines.verl.workers import replay_buffer as S
from training.engines.verl.workers import reward_adapter as R
from training.engines.verl.workers.row_advantages import step_record


def breakdown(exec_score: float, flags: tuple[str, ...] = (), error: str | None = None) -> dict[str, Any]:
    return R.breakdown_to_json(RewardBreakdown(exec_score, {"exec": exec_score}, {"full": exec_score}, error, flags))


def test_flags_travel_with_the_breakdown() -> None:
    b = RewardBreakdown(1.0, {"exec": 1.0}, {"full": 1.0}, flags=("gold_empty", "set_not_bag"))
    data = R.breakdown_to_json(b)
    assert data["flags"] == ["gold_empty", "set_not_bag"] and R.breakdown_from_json(data) == b


def test_the_step_record_counts_suspect_positives_and_unscored_rewards() -> None:
    rewards = [
        breakdown(1.0, ("gold_one_row",)),
        breakdown(1.0),
        breakdown(1.0),
        breakdown(0.0, ("gold_one_row",)),  # not positive: not counted
        breakdown(0.0, error="example 'q1': gold SQL failed (gold_timeout: timeout: 30 s)"),
    ]
    records = [{"role": "agent", "final_sql": "SELECT 1", "num_turns": 1}] * len(rewards)
    out = step_record(records, rewards)
    assert out["reward/suspect_positive_rate"] == pytest.approx(1 / 3)
    assert out["reward/unscored_rate"] == pytest.approx(1 / 5) and out["reward/unscored/gold_timeout"] == 1.0


class _Rows:
    """``transfer_queue.kv_batch_get`` over fixed rows (key -> extra_fields)."""

    def __init__(self, rows: dict[str, dict[str, Any]]) -> None:
        self.rows = rows

    def __call__(self, keys: list[str], partition_id: str, select_fields: list[str]) -> dict[str, list[Any]]:
        return {"extra_fields": [self.rows[k] for k in keys]}


def _row(exec_score: float, flags: tuple[str, ...]) -> dict[str, Any]:
    b = breakdown(exec_score, flags)
    return {
        EPISODE_KEY: {"dropped": False},
        REWARD_KEY: b,
        "reward_extra_info": R.flat_extra_info(b, R.extra_info_keys()),
    }


@pytest.mark.parametrize("as_unknown, informative", [(False, {"a", "b"}), (True, {"b"})])
def test_flagged_positives_as_unknown_in_the_replay_buffer(
    monkeypatch: pytest.MonkeyPatch, as_unknown: bool, informative: set[str]
) -> None:
    # group a varies only through a flagged positive, group b through an unflagged one
    rows = {
        "a_0_0": _row(1.0, ("gold_empty",)),
        "a_1_0": _row(0.0, ("gold_empty",)),
        "a_2_0": _row(0.0, ("gold_empty",)),
        "b_0_0": _row(1.0, ()),
        "b_1_0": _row(0.0, ()),
        "b_2_0": _row(0.0, ()),
    }
    monkeypatch.setattr(S.tq, "kv_batch_get", _Rows(rows))
    buffer = S.SqlAgentReplayBuffer.__new__(S.SqlAgentReplayBuffer)
    buffer.partitions = {"train": dict.fromkeys(rows)}
    buffer.dynamic = DynamicSampling(enable=True, flagged_positive_as_unknown=as_unknown)
    values = buffer._group_values("train", {"a", "b"})
    assert {uid for uid, v in values.items() if S.informative(v, 1e-6)} == informative


def test_the_option_reaches_the_workers_settings() -> None:
    from training.config import TrainConfig, compose_tree
    from training.engines.verl.config.translate import verl_config_for

    for value in (True, False):
        raw = compose_tree(
            "config",
            ["recipe=retoolsql", "engine=verl", f"algorithm.dynamic_sampling.flagged_positive_as_unknown={value}"],
        )
        cfg = verl_config_for(TrainConfig.from_mapping(raw), model_path="m")
        assert cfg.sqlagent.dynamic_sampling.flagged_positive_as_unknown is value
        assert DynamicSampling.from_mapping(cfg.sqlagent.dynamic_sampling).flagged_positive_as_unknown is value
