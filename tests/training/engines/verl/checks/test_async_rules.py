"""``trainer.mode`` and the async keys through the real config path (project config ->
veRL's composed ``ppo_trainer``), and the async settings refused before launch
(checks.async_rules) by ``check_run`` and by ``dry_run=true`` (``launch.describe``)."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree, list_recipes
from training.engines.verl import launch as L
from training.engines.verl.checks.async_rules import async_rule
from training.engines.verl.config import translate as C
from training.engines.verl.shared import TRAINER_MODES

SEPARATE = ("trainer.mode=separate_async", "trainer.rollout_gpus=8")


def project_config(recipe: str, *overrides: str) -> TrainConfig:
    return TrainConfig.from_mapping(compose_tree("config", [f"recipe={recipe}", "engine=verl", *overrides]))


def verl_cfg(recipe: str, *overrides: str):
    return C.verl_config_for(project_config(recipe, *overrides), num_train_examples=660)


@pytest.mark.parametrize("recipe", list_recipes())
def test_sync_stays_the_default_and_unchanged(recipe: str) -> None:
    default, explicit = verl_cfg(recipe), verl_cfg(recipe, "trainer.mode=sync")
    assert default.trainer.v1.trainer_mode == TRAINER_MODES["sync"] == "sqlagent_sync"
    assert OmegaConf.to_container(default) == OmegaConf.to_container(explicit)
    assert async_rule(default) == []


@pytest.mark.parametrize("recipe", list_recipes())
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_each_recipe_runs_each_async_mode_with_its_documented_defaults(recipe: str, mode: str) -> None:
    extra = SEPARATE if mode == "separate_async" else (f"trainer.mode={mode}",)
    refill = ("algorithm.dynamic_sampling.refill=true",) if recipe == "retoolsql" else ()
    cfg = verl_cfg(recipe, *extra, *refill)
    assert cfg.trainer.v1.trainer_mode == TRAINER_MODES[mode]
    assert cfg.trainer.v1.sampler.max_off_policy_threshold == 2  # staleness 1
    assert cfg.trainer.v1.sampler.max_off_policy_strategy == "drop"
    assert cfg.trainer.v1[mode].num_warmup_batches == 1.0
    # DualSQL keeps its own sequence-level IS with rejection; the others get token-level IS
    corr = cfg.algorithm.rollout_correction
    assert (corr.rollout_is, corr.rollout_rs) == (
        ("sequence", "seq_sum_k1") if recipe == "dualsql" else ("token", None)
    )
    assert async_rule(cfg) == []


def test_separate_async_gets_its_own_rollout_pool_and_one_sync_per_step() -> None:
    cfg = verl_cfg("trustsql", *SEPARATE, "trainer.rollout_nodes=2", "algorithm.mini_batches=4")
    rollout = cfg.actor_rollout_ref.rollout
    assert (rollout.n_gpus_per_node, rollout.nnodes) == (8, 2)
    assert rollout.checkpoint_engine.backend == "nccl" and cfg.actor_rollout_ref.hybrid_engine is False
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 4
    assert cfg.data.train_batch_size == 4 * cfg.actor_rollout_ref.actor.ppo_mini_batch_size


def test_the_async_keys_reach_verl() -> None:
    cfg = verl_cfg(
        "think2sql",
        "trainer.mode=colocate_async",
        "trainer.staleness=3",
        "trainer.stale_rollouts=wait",
        "trainer.warmup_batches=2.5",
        "trainer.async_correction=null",
    )
    sampler = cfg.trainer.v1.sampler
    assert (sampler.max_off_policy_threshold, sampler.max_off_policy_strategy) == (4, "wait")
    assert cfg.trainer.v1.colocate_async.num_warmup_batches == 2.5
    assert cfg.algorithm.rollout_correction.rollout_is is None


@pytest.mark.parametrize(
    ("recipe", "overrides", "message"),
    [
        (
            "think2sql",
            ("trainer.mode=colocate_async", "trainer.staleness=0"),
            r"trainer.staleness=0 .*set trainer.staleness=1",
        ),
        ("retoolsql", ("trainer.mode=colocate_async",), r"refill=false.*set algorithm.dynamic_sampling.refill=true"),
        ("trustsql", ("trainer.mode=separate_async",), r"own rollout GPUs .*set trainer.rollout_gpus=N"),
        (
            "trustsql",
            (*SEPARATE, "trainer.rollout_gpus=3", "+verl.actor_rollout_ref.rollout.tensor_model_parallel_size=2"),
            r"3 GPU\(s\) do not split .*tensor parallel size 2: set trainer.rollout_gpus to a multiple of 2",
        ),
        (
            "dualsql",
            (*SEPARATE, "+verl.actor_rollout_ref.rollout.checkpoint_engine.backend=naive"),
            r"backend=naive is refused by veRL; set it to nccl",
        ),
        (
            "dualsql",
            (*SEPARATE, "+verl.trainer.v1.separate_async.parameter_sync_step=4"),
            r"train_batch_size 16 != parameter_sync_step 4 x ppo_mini_batch_size 16",
        ),
    ],
)
def test_async_settings_veRL_would_refuse_fail_before_launch(
    recipe: str, overrides: tuple[str, ...], message: str
) -> None:
    cfg = project_config(recipe, *overrides)
    failures = async_rule(C.verl_config_for(cfg, num_train_examples=660))
    assert len(failures) == 1
    with pytest.raises(ConfigError, match=message):
        L.describe(cfg)  # dry_run=true: the same checks as prepare()


def test_the_local_engine_refuses_an_async_mode() -> None:
    from training.engines.local.trainer import train

    cfg = TrainConfig.from_mapping(
        compose_tree("config", ["recipe=think2sql", "engine=local", "trainer.mode=colocate_async"])
    )
    with pytest.raises(ConfigError, match=r"trainer.mode=colocate_async: the local engine trains synchronously"):
        train(cfg)


def test_an_unknown_mode_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match=r"trainer.mode='colocate'.*colocate_async"):
        project_config("think2sql", "trainer.mode=colocate")
