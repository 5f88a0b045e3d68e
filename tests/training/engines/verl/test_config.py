"""Hydra compose + veRL ``validate_config`` for every recipe, overrides, and the dry run.

The project config is composed in-process from ``pkg://recipes`` exactly as
``training.run`` does; veRL's ``ppo_trainer`` is composed separately by the engine. One
subprocess test runs ``python -m training.run ... dry_run=true`` from a temporary
directory and parses the printed YAML.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree, list_recipes
from training.engines.verl import launch as L
from training.engines.verl import shared as common
from training.engines.verl.config import data_files as D
from training.engines.verl.config import translate as C

REPO = Path(__file__).resolve().parents[4]


def project_config(recipe: str, *overrides: str) -> TrainConfig:
    """The typed project config for ``recipe`` with engine=verl (as training.run builds it)."""
    raw = compose_tree("config", [f"recipe={recipe}", "engine=verl", *overrides])
    return TrainConfig.from_mapping(raw)


@pytest.mark.parametrize("recipe", list_recipes())
def test_every_recipe_composes_and_validates(recipe: str, tmp_path: Path) -> None:
    cfg = project_config(recipe, f"run_dir={tmp_path}")
    verl_cfg = C.verl_config_for(cfg, model_path="/models/policy")
    arr = verl_cfg.actor_rollout_ref
    assert arr.model.path == "/models/policy"
    assert arr.rollout.n == cfg.algorithm.group_size
    assert arr.actor.optim.lr == pytest.approx(cfg.optim.lr)
    assert arr.actor.clip_ratio_low == pytest.approx(cfg.algorithm.clip_ratio_low)
    assert arr.actor.clip_ratio_high == pytest.approx(cfg.algorithm.clip_ratio_high)
    assert arr.actor.loss_agg_mode == cfg.algorithm.loss_agg_mode  # think2sql: seq-mean-token-mean (eq. 5)
    assert arr.rollout.temperature == pytest.approx(cfg.rollout.temperature)
    assert arr.rollout.top_p == pytest.approx(cfg.rollout.top_p)
    assert arr.rollout.top_k == (cfg.rollout.top_k if cfg.rollout.top_k > 0 else -1)
    assert arr.rollout.response_length == cfg.rollout.max_response_tokens
    assert arr.rollout.prompt_length == cfg.rollout.max_prompt_tokens
    assert arr.rollout.agent.default_agent_loop == common.AGENT_LOOP_NAME
    assert verl_cfg.data.train_batch_size == cfg.algorithm.batch_size
    assert verl_cfg.trainer.v1.trainer_mode == common.TRAINER_MODE
    assert verl_cfg.trainer.n_gpus_per_node == 8
    # the reward function under reward.*, not the legacy top-level key the v1 trainer ignores
    assert verl_cfg.reward.custom_reward_function.name == "compute_score"
    assert verl_cfg.reward.custom_reward_function.path.endswith("training/engines/verl/workers/reward_adapter.py")
    assert all(v is None for v in verl_cfg.custom_reward_function.values())
    # the project's own namespace carries what the Ray workers need
    ns = verl_cfg.sqlagent
    assert ns.agent.name == cfg.agent.name and ns.reward.name == cfg.reward.name
    assert ns.reward.options.exec_metric == cfg.reward.exec_metric
    assert ns.advantage.estimator == cfg.advantage.estimator
    # the project config never leaks into veRL's own sections
    assert "group_size" not in verl_cfg.algorithm and "sqlagent" not in verl_cfg.data


def test_recipe_specific_values() -> None:
    retool = C.verl_config_for(project_config("retoolsql"), model_path="m")
    # the papers' dynamic sampling (draw B x K once, keep up to B groups) is the trainer's, not veRL's refill
    ds = retool.sqlagent.dynamic_sampling
    assert (ds.enable, ds.refill, ds.oversample, ds.metric, ds.min_std) == (True, False, 12, "exec", 1e-6)
    assert retool.algorithm.filter_groups.enable is False
    refill = C.verl_config_for(project_config("retoolsql", "algorithm.dynamic_sampling.refill=true"), model_path="m")
    assert refill.algorithm.filter_groups.enable is True and refill.sqlagent.dynamic_sampling.refill is True
    assert refill.algorithm.filter_groups.metric == "exec"
    assert refill.algorithm.filter_groups.max_inflight_gen_batches == 12  # K = 12 candidate batches
    assert retool.actor_rollout_ref.actor.use_kl_loss is True
    assert retool.actor_rollout_ref.actor.kl_loss_coef == pytest.approx(0.005)
    assert retool.actor_rollout_ref.actor.kl_loss_type == "low_var_kl"
    assert [list(p) for p in retool.sqlagent.kl_schedule] == [[0, 0.005], [40, 0.001], [80, 0.0]]
    assert retool.actor_rollout_ref.rollout.temperature == pytest.approx(1.2)

    trust = C.verl_config_for(project_config("trustsql"), model_path="m")
    assert trust.actor_rollout_ref.rollout.n == 8
    assert trust.actor_rollout_ref.actor.use_kl_loss is False
    assert trust.algorithm.filter_groups.enable is False
    assert trust.sqlagent.advantage.estimator == "two_track"
    assert trust.sqlagent.advantage.schema_weight == pytest.approx(0.25)
    assert trust.sqlagent.advantage.clamp == pytest.approx(10.0)

    dual = C.verl_config_for(project_config("dualsql"), model_path="m")
    assert dual.actor_rollout_ref.rollout.top_k == 20
    assert dual.sqlagent.advantage.group_by == "role"
    assert dual.sqlagent.reward.options.exec_metric == "rex"
    # the recipe's verl: block - sequence-level masked importance sampling (veRL's Seq-MIS)
    corr = dual.algorithm.rollout_correction
    assert (corr.rollout_is, corr.rollout_rs, corr.rollout_rs_threshold) == ("sequence", "seq_sum_k1", "0.5_2.0")
    assert trust.algorithm.rollout_correction.rollout_is is None  # other recipes keep veRL's default


def test_project_overrides_flow_into_verl() -> None:
    cfg = project_config("trustsql", "algorithm.group_size=4", "optim.lr=3e-6", "reward.exec_metric=rex")
    verl_cfg = C.verl_config_for(cfg, model_path="m")
    assert verl_cfg.actor_rollout_ref.rollout.n == 4
    assert verl_cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(3e-6)
    assert verl_cfg.sqlagent.reward.options.exec_metric == "rex"


def test_verl_block_then_command_line_overrides() -> None:
    cfg = project_config(
        "think2sql",
        "+verl.trainer.save_freq=7",
        "+verl.actor_rollout_ref.rollout.gpu_memory_utilization=0.4",
    )
    verl_cfg = C.verl_config_for(cfg, model_path="m")
    assert verl_cfg.trainer.save_freq == 7
    assert verl_cfg.actor_rollout_ref.rollout.gpu_memory_utilization == pytest.approx(0.4)
    # dotted strings (the form a user types) apply on top of the block
    C.apply_verl_overrides(
        verl_cfg,
        {"trainer": {"save_freq": 3}},
        ["verl.trainer.save_freq=5", "verl.actor_rollout_ref.actor.optim.lr=2e-6"],
    )
    assert verl_cfg.trainer.save_freq == 5
    assert verl_cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(2e-6)  # parsed as a float, not "2e-6"


def test_unknown_verl_key_names_the_closest_one() -> None:
    cfg = project_config("think2sql", "+verl.trainer.save_frq=7")
    with pytest.raises(ConfigError, match=r"verl\.trainer\.save_frq.*did you mean verl\.trainer\.save_freq"):
        C.verl_config_for(cfg, model_path="m")


def test_invalid_values_fail_in_validate_config() -> None:
    # 16 questions x 8 samples = 128 rows cannot be split over 7 GPUs' static micro-batches
    cfg = project_config(
        "trustsql",
        "+verl.trainer.n_gpus_per_node=7",
        "+verl.actor_rollout_ref.actor.use_dynamic_bsz=false",
        "+verl.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
    )
    with pytest.raises(ConfigError, match="veRL rejected"):
        C.verl_config_for(cfg, model_path="m")
    with pytest.raises(ConfigError, match="trainer_mode"):
        C.verl_config_for(project_config("trustsql", "+verl.trainer.v1.trainer_mode=sync"), model_path="m")


def test_bad_settings_are_rejected_with_the_fix() -> None:
    with pytest.raises(ConfigError, match="must divide"):
        C.verl_config_for(project_config("trustsql", "algorithm.mini_batches=3"), model_path="m")
    with pytest.raises(ConfigError, match="write verl.<path>=<value>"):
        C.apply_verl_overrides(C.compose_ppo_trainer(), None, ["trainer.save_freq=2"])


def test_each_composition_of_verls_tree_is_the_callers_own_copy() -> None:
    """veRL's tree is composed once per process: a caller changing its copy changes no other."""
    from omegaconf import OmegaConf

    first = C.compose_ppo_trainer()
    fresh = first.trainer.save_freq
    C.apply_verl_overrides(first, None, [f"verl.trainer.save_freq={fresh + 7}", "verl.sqlagent.probe=1"])
    second = C.compose_ppo_trainer()
    assert second.trainer.save_freq == fresh and "sqlagent" not in second
    assert OmegaConf.is_struct(second) and second is not first
    assert first.trainer.save_freq == fresh + 7


def test_prompt_rows_round_trip(tmp_path: Path) -> None:
    import datasets

    from agents.types import Example

    ex = Example(
        id="q1",
        db_id="shop",
        db_path=str(tmp_path / "shop.sqlite"),
        question="How many?",
        evidence="e",
        gold_sql="SELECT 1",
        difficulty="simple",
        gold_tables=("t",),
        gold_columns=("t.a",),
    )
    path = D.write_prompt_file([ex], tmp_path / "train.parquet")
    rows = datasets.Dataset.from_parquet(str(path)).to_list()
    assert rows[0]["agent_name"] == common.AGENT_LOOP_NAME
    assert rows[0]["prompt"] == [{"role": "user", "content": "How many?"}]
    assert common.example_from_json(rows[0]["extra_info"]["example"]) == ex
    with pytest.raises(ConfigError, match="no examples"):
        D.write_prompt_file([], tmp_path / "empty.parquet")


@pytest.mark.slow
def test_dry_run_prints_the_complete_verl_config(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "training.run",
        "recipe=trustsql",
        "engine=verl",
        "dry_run=true",
        f"run_dir={tmp_path / 'run'}",
        "model.path=/models/policy",
        "+verl.trainer.save_freq=4",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    start = text.index("# engine=verl")
    printed = yaml.safe_load(text[start:])
    assert printed["actor_rollout_ref"]["model"]["path"] == "/models/policy"
    assert printed["actor_rollout_ref"]["rollout"]["n"] == 8
    assert printed["trainer"]["save_freq"] == 4
    assert printed["trainer"]["v1"]["trainer_mode"] == common.TRAINER_MODE
    assert printed["sqlagent"]["agent"]["name"] == "trustsql"
    assert set(printed) >= {"actor_rollout_ref", "algorithm", "data", "reward", "trainer", "critic"}
    assert not (tmp_path / "run" / "verl_data").exists()  # a dry run writes no prompt files
    # resolved values, not ${oc.select:...}; what cannot be resolved is named
    assert "${" not in text
    assert printed["actor_rollout_ref"]["ref"]["log_prob_max_token_len_per_gpu"] == 8192 + 16384
    assert "# left as written (cannot be resolved here): reward.reward_model.rollout.name" in text
    # offline, a model path nobody knows is said to be unchecked instead of failing
    assert "# unchecked: model /models/policy" in text
    # veRL's import-time warnings stay off the console
    for noise in ("No supported accelerator", "torchtitan", "megatron engine", "WARNING"):
        assert noise not in text and noise not in proc.stderr


@pytest.mark.slow
def test_dry_run_refuses_a_config_that_would_crash(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [
        sys.executable,
        "-m",
        "training.run",
        "recipe=dualsql",
        "engine=verl",
        "dry_run=true",
        f"run_dir={tmp_path / 'run'}",
        "rollout.max_prompt_tokens=15500",
    ]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert "max_model_len 48268" in proc.stderr and "Qwen/Qwen3-8B, 40960 tokens" in proc.stderr
    assert "actor_rollout_ref" not in proc.stdout


def test_run_dir_rules_match_the_local_engine(tmp_path: Path) -> None:
    from verl.utils.checkpoint.checkpoint_manager import get_checkpoint_tracker_filename

    run = tmp_path / "run"
    ckpt = C.checkpoint_dir(run)
    (ckpt / "global_step_3").mkdir(parents=True)
    Path(get_checkpoint_tracker_filename(str(ckpt))).write_text("3")
    (run / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"resume=auto \(or resume=true\) to continue"):
        L.prepare_run_dir(run, resume="never", fresh=False)
    said: list[str] = []
    decision = L.prepare_run_dir(run, resume=True, fresh=False, say=said.append)  # an empty step: half-written
    assert "discarding half-written checkpoint" in said[0] and "global_step_3" in said[0]
    assert decision.action == "start" and "starting from step 0" in said[1] and not (ckpt / "global_step_3").exists()
    L.prepare_run_dir(run, resume=False, fresh=True)
    assert not ckpt.exists() and not (run / "metrics.jsonl").exists()
    L.prepare_run_dir(run, resume=False, fresh=False)  # nothing left to protect
    cfg = C.verl_config_for(project_config("trustsql", f"run_dir={run}", "resume=true"), model_path="m")
    assert cfg.trainer.resume_mode == "auto" and cfg.trainer.default_local_dir == str(ckpt)
    assert C.verl_config_for(project_config("trustsql"), model_path="m").trainer.resume_mode == "disable"


def test_prepare_writes_prompts_veRLs_dataset_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Everything before the Ray launch, on the bundled benchmark; veRL's RLHFDataset reads the rows."""
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    for key in ("VERL_FILE_LOGGER_PATH", "WANDB_MODE"):
        monkeypatch.setenv(key, "restored-after-test")
    model = tmp_path / "policy"
    tiny_tokenizer().save_pretrained(model)
    tiny_model().save_pretrained(model)
    run = tmp_path / "run"
    sizes = (
        "algorithm.batch_size=2",
        "algorithm.group_size=4",
        "data.limit=3",
        "data.eval_limit=2",
        "rollout.max_prompt_tokens=1024",
        "rollout.max_response_tokens=2048",
    )
    cfg = project_config("trustsql", f"run_dir={run}", f"model.path={model}", "logger=[console,jsonl]", *sizes)
    too_long = project_config("trustsql", f"run_dir={run}", f"model.path={model}", *sizes[:4])
    with pytest.raises(ConfigError, match=r"max_model_len 24576 .* exceeds the context of .*4096 tokens"):
        L.prepare(too_long, say=lambda _: None)  # the tiny model's config.json says 4,096 positions
    with pytest.raises(ConfigError, match=r"needs CUDA GPUs .* use engine=local"):
        L.prepare(cfg, say=lambda _: None)  # a CPU box fails fast, before writing anything
    assert not (run / "verl_data").exists()
    said: list[str] = []
    verl_cfg, summary = L.prepare(cfg, say=said.append, check_devices=False)
    assert summary["train_examples"] == 3 and summary["val_examples"] == 2
    assert summary["metrics"] == str((run / "metrics.jsonl").resolve())  # project format, by the trainer
    assert summary["verl_metrics"] == str((run / common.VERL_METRICS_FILE).resolve())  # veRL's own file logger
    assert verl_cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == summary["verl_metrics"]
    assert verl_cfg.sqlagent.run_dir == str(run.resolve()) and verl_cfg.sqlagent.exec_metric == "ex"
    assert verl_cfg.trainer.logger == ["file", "console"]
    assert verl_cfg.trainer.resume_mode == "disable" and summary["final_dir"] == str((run / "final").resolve())
    assert verl_cfg.sqlagent.samples_per_step == cfg.trainer.samples_per_step == 16  # the trainer's samples.jsonl
    config_records = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "config"
    ]  # the launch's effective config, as the local engine writes it
    assert len(config_records) == 1 and config_records[0]["step"] == 0
    launched = config_records[0]["config"]
    assert launched["run_dir"] == str(run) and launched["engine"]["name"] == "verl"
    dataset = RLHFDataset(data_files=[verl_cfg.data.train_files], tokenizer=tiny_tokenizer(), config=verl_cfg.data)
    item = dataset[0]
    example = common.example_from_json(item["extra_info"]["example"])
    assert item["agent_name"] == "sqlagent" and item["raw_prompt"][0]["content"] == example.question
    assert Path(example.db_path).exists() and example.gold_sql


def test_gpu_count_mismatch_names_the_override(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    cfg = C.verl_config_for(project_config("trustsql"), model_path="m")
    with pytest.raises(ConfigError, match=r"n_gpus_per_node=8 but 4 CUDA GPU.*\+verl\.trainer\.n_gpus_per_node=4"):
        L.check_gpus(cfg)
    C.apply_verl_overrides(cfg, overrides=["verl.trainer.n_gpus_per_node=4"])
    L.check_gpus(cfg)  # now consistent


def test_command_line_beats_the_recipes_verl_block() -> None:
    cfg = project_config("dualsql", "verl.algorithm.rollout_correction.rollout_is=token")
    corr = C.verl_config_for(cfg, model_path="m").algorithm.rollout_correction
    assert corr.rollout_is == "token" and corr.rollout_rs == "seq_sum_k1"  # the rest of the block stays


def test_several_nodes_refuse_a_run_dir_only_one_node_sees(tmp_path: Path) -> None:
    run = tmp_path / "run"  # under /tmp: local to each node
    cfg = project_config("trustsql", f"run_dir={run}", "+verl.trainer.nnodes=2", "data.limit=32")
    with pytest.raises(ConfigError, match=r"trainer.nnodes=2: run_dir .*, which is local to each node"):
        L.describe(cfg)
    override = project_config(
        "trustsql", f"run_dir={run}", "+verl.trainer.nnodes=2", "data.limit=32", "trainer.shared_run_dir_check=false"
    )
    assert "# warning: trainer.nnodes=2" in L.describe(override)
    assert "trainer.nnodes=" not in L.describe(project_config("trustsql", f"run_dir={run}", "data.limit=32"))
