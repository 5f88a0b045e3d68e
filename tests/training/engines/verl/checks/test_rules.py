"""The start-up rules (checks.rules) and the settings that must reach veRL, per recipe.

Each rule is driven through the real config path (Hydra composition of the project
config, then veRL's composed ``ppo_trainer`` filled and validated) and checked against a
model card from the cited backbone table, a local ``config.json`` or nothing at all.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tools.errors import ConfigError
from training.config import TrainConfig, compose_tree, list_recipes
from training.engines.verl import launch as L
from training.engines.verl.checks.backbones import BACKBONES, ModelCard, model_card
from training.engines.verl.checks.rules import check_run
from training.engines.verl.config import translate as C

MINIBIRD_TRAIN = 660  # questions in the bundled training split (steps per epoch below)


def project_config(recipe: str, *overrides: str) -> TrainConfig:
    return TrainConfig.from_mapping(compose_tree("config", [f"recipe={recipe}", "engine=verl", *overrides]))


def verl_cfg(recipe: str, *overrides: str, examples: int = MINIBIRD_TRAIN):
    return C.verl_config_for(project_config(recipe, *overrides), num_train_examples=examples)


def card_of(recipe: str) -> ModelCard:
    return L.expected_card(project_config(recipe))


# ----------------------------------------------------------------------------- every recipe, 1 and 8 GPUs


@pytest.mark.parametrize("recipe", list_recipes())
def test_each_recipe_trains_its_papers_backbone_within_its_context(recipe: str) -> None:
    cfg = project_config(recipe)
    backbone = BACKBONES[cfg.gpu_backbone]  # every recipe names a backbone of the table
    assert C.policy_path(cfg) == backbone.hub_name  # engine=verl with model.path null trains it
    group = Path(__file__).resolve().parents[5] / "recipes" / "model" / f"{backbone.group}.yaml"
    assert OmegaConf.load(group).path == backbone.hub_name  # model=<group> selects the same model
    verl = C.verl_config_for(cfg, num_train_examples=MINIBIRD_TRAIN)
    assert verl.actor_rollout_ref.model.path == backbone.hub_name
    assert verl.actor_rollout_ref.rollout.tensor_model_parallel_size == backbone.tensor_parallel_size
    assert verl.actor_rollout_ref.rollout.max_model_len <= backbone.max_position_embeddings
    offload = verl.actor_rollout_ref.actor.fsdp_config
    assert offload.param_offload == offload.optimizer_offload == (recipe == "retoolsql")  # 31B on 8x80 GB
    assert verl.actor_rollout_ref.ref.fsdp_config.param_offload == (recipe == "retoolsql")
    report = check_run(verl, card_of(recipe))
    assert report.failures == () and report.unchecked == ()


def test_each_design_has_its_own_prompt_budget() -> None:
    budgets = {r: project_config(r).rollout.max_prompt_tokens for r in list_recipes()}
    assert budgets == {"retoolsql": 15500, "think2sql": 8192, "trustsql": 8192, "dualsql": 8192}
    dual = project_config("dualsql")
    assert dual.rollout.max_prompt_tokens + dual.rollout.max_response_tokens == 40_960  # Qwen3's native context


@pytest.mark.parametrize("recipe", list_recipes())
@pytest.mark.parametrize("gpus", [1, 8])
def test_the_gpu_smoke_test_sizes_pass_on_1_and_8_gpus(recipe: str, gpus: int, tmp_path: Path) -> None:
    from tests.gpu.smoke_setup import SIZES, save_tiny_policy

    model = save_tiny_policy(tmp_path / "policy")
    cfg = verl_cfg(
        recipe,
        *SIZES,
        f"model.path={model}",
        "trainer.total_steps=3",
        f"+verl.trainer.n_gpus_per_node={gpus}",
        examples=4,
    )
    report = check_run(cfg, model_card(str(model)))
    assert report.failures == () and report.unchecked == () and report.notes == ()
    assert (cfg.trainer.total_epochs, cfg.trainer.total_training_steps) == (2, 3)  # the resume's third step


# ----------------------------------------------------------------------------- each rule, with its fix


def test_mini_batch_rows_that_do_not_split_over_the_gpus_get_a_note() -> None:
    """veRL's worker asserts ``ppo_mini_batch_size x n % dp == 0``; the project's trainer
    sizes each update in (padded) rows instead, so such a run works and wastes GPU work."""
    cfg = verl_cfg("trustsql", "algorithm.batch_size=2", "algorithm.group_size=2")
    report = check_run(cfg, card_of("trustsql"))
    assert report.failures == ()
    (note,) = report.notes
    assert "2 questions x G=2 = 4 rows does not split over 8 data-parallel GPU(s)" in note
    assert "padded to 8 rows (4 no-op)" in note and "algorithm.group_size=4" in note
    one_gpu = verl_cfg(
        "trustsql", "algorithm.batch_size=2", "algorithm.group_size=2", "+verl.trainer.n_gpus_per_node=1"
    )
    assert check_run(one_gpu, card_of("trustsql")).notes == ()
    odd = verl_cfg(
        "trustsql",
        "+verl.trainer.n_gpus_per_node=6",
        "+verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=4",
        "model.attn_implementation=flash_attention_2",
    )
    (failure,) = check_run(odd, card_of("trustsql")).failures
    assert "6 GPU(s) cannot be split into Ulysses groups of 4" in failure


def test_max_model_len_above_the_context_names_the_numbers_and_the_opt_in() -> None:
    cfg = verl_cfg("dualsql", "rollout.max_prompt_tokens=15500")
    (failure,) = check_run(cfg, card_of("dualsql")).failures
    assert "max_model_len 48268 = rollout.max_prompt_tokens 15500 + rollout.max_response_tokens 32768" in failure
    assert "Qwen/Qwen3-8B, 40960 tokens" in failure and "model.context_factor=2" in failure
    longer = project_config("dualsql", "rollout.max_prompt_tokens=15500", "model.context_factor=2")
    assert check_run(cfg, L.expected_card(longer)).failures == ()  # 81,920 positions with YaRN


def test_tensor_and_sequence_parallel_sizes_must_fit_the_heads() -> None:
    gemma = card_of("retoolsql")  # 32 heads, 16 KV heads, TP 4
    two = verl_cfg("retoolsql", "+verl.trainer.n_gpus_per_node=2")
    assert any("tensor parallel size 4 does not divide the 2 GPU(s)" in f for f in check_run(two, gemma).failures)
    coder = card_of("think2sql")  # 28 heads, 4 KV heads
    tp8 = verl_cfg("think2sql", "+verl.actor_rollout_ref.rollout.tensor_model_parallel_size=8")
    failures = check_run(tp8, coder).failures
    assert any("does not divide Qwen/Qwen2.5-Coder-7B-Instruct's 28 attention heads" in f for f in failures)
    sp = verl_cfg("trustsql", "+verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2")
    (failure,) = check_run(sp, card_of("trustsql")).failures
    assert "works only with flash-attn" in failure and "model.attn_implementation=flash_attention_2" in failure
    flash = verl_cfg(
        "trustsql",
        "model.attn_implementation=flash_attention_2",
        "+verl.actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",
    )
    assert check_run(flash, card_of("trustsql")).failures == ()  # 32 heads, 8 KV heads, 4 data-parallel groups


def test_token_budgets_hold_one_full_sequence() -> None:
    cfg = verl_cfg("trustsql", "+verl.actor_rollout_ref.actor.ppo_max_token_len_per_gpu=4096")
    (failure,) = check_run(cfg, card_of("trustsql")).failures
    assert "ppo_max_token_len_per_gpu=4096 is below one full sequence (24576" in failure


def test_a_model_nobody_knows_is_reported_unchecked_not_failed() -> None:
    cfg = verl_cfg("trustsql", "model.path=someone/unknown-model")
    report = check_run(cfg, model_card("someone/unknown-model"))
    assert report.failures == ()
    assert report.unchecked and "someone/unknown-model" in report.unchecked[0] and "unchecked" in report.unchecked[0]


def test_prepare_raises_every_failure_in_one_message() -> None:
    cfg = verl_cfg(
        "dualsql", "rollout.max_prompt_tokens=15500", "+verl.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=100"
    )
    with pytest.raises(
        ConfigError, match=r"max_model_len 48268 .*and 1 more: .*ref.log_prob_max_token_len_per_gpu=100"
    ):
        check_run(cfg, card_of("dualsql")).raise_first()


# ----------------------------------------------------------------------------- settings that reach veRL


def test_attention_defaults_to_sdpa_with_a_budget_sized_for_its_mask() -> None:
    sdpa = verl_cfg("trustsql")
    assert sdpa.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert sdpa.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 8192 + 16384  # one sequence: mask = n^2 bytes
    flash = verl_cfg("trustsql", "model.attn_implementation=flash_attention_2")
    assert flash.actor_rollout_ref.model.override_config.attn_implementation == "flash_attention_2"
    assert flash.actor_rollout_ref.actor.ppo_max_token_len_per_gpu == 2 * (8192 + 16384)


def test_epochs_cover_total_steps_and_the_lr_schedule_is_sized_on_them() -> None:
    per_epoch = MINIBIRD_TRAIN // 12  # 55 steps of ReToolSQL's B = 12 questions
    cfg = verl_cfg("retoolsql", "trainer.total_steps=150")
    assert (cfg.trainer.total_epochs, cfg.trainer.total_training_steps) == (3, 150)
    assert cfg.actor_rollout_ref.actor.optim.total_training_steps == 150
    recipe = verl_cfg("retoolsql")  # the recipe's own 120 steps run the beta = 0 phase (steps 80-119)
    assert (recipe.trainer.total_epochs, recipe.trainer.total_training_steps) == (3, 120)
    one = verl_cfg("retoolsql", "trainer.total_steps=null")  # null = one epoch
    assert (one.trainer.total_epochs, one.trainer.total_training_steps) == (1, per_epoch)
    with pytest.raises(ConfigError, match="3 training example.* algorithm.batch_size=12"):
        verl_cfg("retoolsql", examples=3)


def test_checkpoint_optimizer_and_sampling_settings_reach_verl(tmp_path: Path) -> None:
    cfg = verl_cfg(
        "retoolsql",
        f"run_dir={tmp_path}",
        "trainer.keep_checkpoints=3",
        "optim.betas=[0.9,0.95]",
        "algorithm.dynamic_sampling.min_std=0.01",
    )
    assert cfg.trainer.max_actor_ckpt_to_keep == 3
    assert list(cfg.actor_rollout_ref.actor.optim.betas) == [0.9, 0.95]
    assert "hf_model" in cfg.actor_rollout_ref.actor.checkpoint.save_contents  # trainer.save_weights=true
    assert cfg.sqlagent.final_dir == str(tmp_path.resolve() / "final")
    assert cfg.sqlagent.dynamic_sampling.min_std == pytest.approx(0.01)
    no_weights = verl_cfg("retoolsql", f"run_dir={tmp_path}", "trainer.save_weights=false")
    assert "hf_model" not in no_weights.actor_rollout_ref.actor.checkpoint.save_contents
    # without veRL's hf_model copy the run still ends with final/: veRL's merger writes it (training/export.py)
    assert no_weights.sqlagent.final_dir == str(tmp_path.resolve() / "final")


@pytest.mark.parametrize(
    "netrc, mode", [("machine api.wandb.ai\n  login user\n  password k\n", "online"), (None, "offline")]
)
def test_wandb_is_online_for_users_logged_in_through_netrc(
    netrc: str | None, mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for key in ("WANDB_MODE", "WANDB_API_KEY", "VERL_FILE_LOGGER_PATH", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR"):
        monkeypatch.setenv(key, "")  # recorded, so the values the engine sets are undone after the test
        monkeypatch.delenv(key)
    if netrc:
        (tmp_path / ".netrc").write_text(netrc)
    cfg = verl_cfg("think2sql", "logger=[console,wandb]")
    L._set_logging_env(cfg, str(tmp_path / "run"))
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE == mode


def test_prepare_checks_a_hub_model_against_the_table_when_the_hub_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for key in ("VERL_FILE_LOGGER_PATH", "WANDB_MODE"):
        monkeypatch.setenv(key, "restored-after-test")
    sizes = ("algorithm.batch_size=2", "data.limit=2", "data.eval_limit=1", "logger=[console,jsonl]")
    said: list[str] = []
    verl, summary = L.prepare(
        project_config("dualsql", f"run_dir={tmp_path}", *sizes), say=said.append, check_devices=False
    )
    assert summary["model_path"] == "Qwen/Qwen3-8B" == verl.actor_rollout_ref.model.path  # veRL downloads it
    assert any("could not read Qwen/Qwen3-8B's config.json from the hub" in line for line in said)
    too_long = project_config("dualsql", f"run_dir={tmp_path / 'b'}", "rollout.max_prompt_tokens=9000", *sizes)
    with pytest.raises(ConfigError, match="exceeds the context of Qwen/Qwen3-8B, 40960 tokens"):
        L.prepare(too_long, say=said.append, check_devices=False)
