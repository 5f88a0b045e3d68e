"""The shared leaf module: the worker settings round-trip through OmegaConf, and examples through rows."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from agents.types import Example
from training.engines.verl import shared as C


def test_worker_settings_round_trip_through_the_veRL_config() -> None:
    settings = C.WorkerSettings(
        agent="trustsql",
        agent_options={"max_turns": 4},
        reward="trustsql",
        reward_options={"exec_metric": "ex"},
        max_new_tokens_per_turn=64,
        observation_max_tokens=32,
        advantage=C.AdvantageSettings(estimator="two_track", clamp=5.0),
        kl_schedule=((0, 0.005), (2, 0.0)),
        dynamic_sampling=C.DynamicSampling(enable=True, metric="exec", min_std=0.1, refill=True, oversample=3),
        run_dir="/tmp/run",
        final_dir="/tmp/run/final",
        exec_metric="ex",
        eval_after=True,
        few_shot_pool="/tmp/train.parquet",
    )
    cfg = OmegaConf.create({C.PROJECT_NAMESPACE: settings.to_dict()})  # what the driver writes
    back = C.WorkerSettings.from_config(cfg)
    assert back == settings
    assert back.schema_track == "schema" and back.filter_metric == "exec"


def test_defaults_come_from_the_dataclass_and_unknown_keys_are_refused() -> None:
    back = C.WorkerSettings.from_dict({"agent": {"name": "retoolsql"}, "reward": {"name": "composite"}})
    assert back.dynamic_sampling == C.DynamicSampling() and back.filter_metric is None
    assert back.advantage == C.AdvantageSettings() and back.kl_schedule == ((0, 0.0),)
    legacy = C.WorkerSettings.from_dict({"agent": {"name": "x"}, "reward": {"name": "y"}, "filter_metric": "exec"})
    assert legacy.filter_metric == "exec" and not legacy.dynamic_sampling.refill
    with pytest.raises(ValueError, match="min_std"):
        C.DynamicSampling(min_std=-1.0)
    with pytest.raises(ValueError, match="estimatr"):
        C.WorkerSettings.from_dict({"agent": {"name": "x"}, "reward": {"name": "y"}, "advantage": {"estimatr": "grpo"}})
    with pytest.raises(ValueError, match="agent.name"):
        C.WorkerSettings.from_dict({"agent": {}})
    with pytest.raises(ValueError, match="reward.name is empty"):
        C.WorkerSettings.from_dict({"agent": {"name": "x"}})
    with pytest.raises(ValueError, match="training.run"):
        C.WorkerSettings.from_config(OmegaConf.create({}))


def test_example_survives_a_prompt_row() -> None:
    ex = Example(
        id="q1",
        db_id="db",
        db_path="/x.sqlite",
        question="How many?",
        evidence="",
        gold_sql="SELECT 1",
        gold_tables=("t",),
        gold_columns=("t.a",),
    )
    row = C.example_to_row(ex, 3)
    assert row["agent_name"] == C.AGENT_LOOP_NAME and row["extra_info"]["index"] == 3
    assert C.example_from_row(row["extra_info"]) == ex
    with pytest.raises(ValueError, match="extra_info.example"):
        C.example_from_row({})
