"""The reward adapter: breakdown <-> veRL's reward dict, and veRL's reward manager path.

The agent loop scores episodes with the project's reward and ships the breakdown in the
output's extra fields. Any configuration that routes rewards through veRL's reward
manager loads ``reward.custom_reward_function`` (our ``compute_score``) by path; it must
return the same numbers.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from agents.types import RewardBreakdown
from training.engines.verl.config.translate import VerlSettings, build_verl_config
from training.engines.verl.workers import reward_adapter as R


def test_doctests() -> None:
    failures, _ = doctest.testmod(R)
    assert failures == 0


def test_breakdown_round_trip_and_fixed_keys() -> None:
    b = RewardBreakdown(2.3, {"exec": 1.0, "format": 0.2, "length": -0.05}, {"full": 2.3, "schema": 1.0})
    data = R.breakdown_to_json(b)
    assert R.breakdown_from_json(data) == b
    keys = R.extra_info_keys("format")
    assert R.flat_extra_info(data, keys) == {"score": 2.3, "exec": 1.0, "reward_error": 0.0, "format": 0.2}
    failed = R.breakdown_to_json(RewardBreakdown(0.0, {}, {"full": 0.0}, error="gold SQL timed out"))
    assert R.flat_extra_info(failed, R.extra_info_keys()) == {"score": 0.0, "exec": 0.0, "reward_error": 1.0}
    with pytest.raises(ValueError, match="no component 'tables'"):
        R.flat_extra_info(data, R.extra_info_keys("tables"))
    assert R.extra_info_keys("total") == ["score", "exec", "reward_error"]  # 'total' is veRL's 'score'


def test_veRLs_reward_manager_loads_our_function_and_returns_the_breakdown() -> None:
    from verl.protocol import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    from tests.helpers.tiny_model import tiny_tokenizer

    cfg = build_verl_config(
        VerlSettings(model_path="m", train_files="t", val_files="v", agent="trustsql", reward="trustsql")
    )
    manager = load_reward_manager(cfg, tiny_tokenizer())
    breakdown = R.breakdown_to_json(RewardBreakdown(1.1, {"exec": 1.0, "format": 0.1}, {"full": 1.1, "schema": 1.0}))
    responses = torch.tensor([[5, 6, 7, 0]])
    data = DataProto.from_dict(
        tensors={
            "responses": responses,
            "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]]),
            "prompts": torch.tensor([[3, 4]]),
        },
        non_tensors={
            "data_source": np.array(["sqlagent"], dtype=object),
            "reward_model": np.array([{"ground_truth": "SELECT 1"}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
            "tool_extra_fields": np.array([{R.REWARD_KEY: breakdown}], dtype=object),
        },
    )
    result = manager.loop.run_until_complete(manager.run_single(data))  # the loop veRL bound it to
    assert result["reward_score"] == pytest.approx(1.1)
    assert result["reward_extra_info"] == {"score": 1.1, "exec": 1.0, "reward_error": 0.0}
