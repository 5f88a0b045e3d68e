"""The verl engine's configuration: project settings -> veRL's ``ppo_trainer`` tree.

The project config is never merged into veRL's tree: veRL's ``ppo_trainer`` already owns
``data``, ``reward``, ``model`` and ``algorithm``, and extra keys there break its
dataclasses. Instead this module

1. composes ``ppo_trainer`` on its own from ``pkg://verl.trainer.config``;
2. fills it from a typed :class:`VerlSettings` (made from the project config by
   :func:`settings_from_project`): model path, attention, G -> ``rollout.n``, optimizer,
   clip-higher, token-mean loss, KL loss, sampling, lengths, batch sizes, epochs sized to
   ``trainer.total_steps``, checkpoints, dynamic sampling, our agent loop and reward;
3. adds one top-level ``sqlagent`` namespace that the Ray workers read - a namespace
   veRL does not own;
4. applies the recipe's ``verl:`` block and ``verl.<path>=<value>`` overrides on top;
5. validates with veRL's own ``validate_config`` plus the dataclass conversions veRL runs
   at start-up, so a bad value fails here rather than minutes into a Ray launch (the
   rules veRL only asserts later live in :mod:`training.engines.verl.checks.rules`).

The settings themselves are :mod:`.settings`; composition, overrides, validation and
printing live in :mod:`.tree`; the rollout, data and algorithm sections in :mod:`.sections`;
the hardware group's sizes in :mod:`.hardware_keys` (the last section written). Their
public names import from here too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from training.engines.verl.config.hardware_keys import episode_cap, hardware_fields, sizing_values
from training.engines.verl.config.sections import (
    _algorithm_fields,
    _rollout_fields,
    algorithm_values,
    async_values,
    data_values,
    max_tokens_per_gpu,
    rollout_values,
)
from training.engines.verl.config.tree import (  # noqa: F401  (public names of this module, kept importable)
    PPO_CONFIG_MODULE,
    PPO_CONFIG_NAME,
    apply_verl_overrides,
    compose_ppo_trainer,
    resolved_tree,
    split_verl_block,
    to_yaml,
    validate_verl_config,
)
from training.engines.verl.config.verl_settings import VERL_LOGGERS, VerlSettings
from training.engines.verl.shared import (
    PROJECT_NAMESPACE,
    TRAINER_MODES,
    AdvantageSettings,
    DynamicSampling,
    WorkerSettings,
    plain,
)

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.config import TrainConfig


# ----------------------------------------------------------------------------- composition


def fill_from_settings(cfg: DictConfig, s: VerlSettings) -> DictConfig:
    """Write the project's settings into veRL's tree (in place; returns ``cfg``): the
    sections below, in order, then the ``sqlagent`` namespace."""
    from omegaconf import OmegaConf, open_dict

    for section in SECTIONS:
        for dotted, value in section(s).items():
            OmegaConf.update(cfg, dotted, value, merge=False)
    with open_dict(cfg):
        cfg[PROJECT_NAMESPACE] = OmegaConf.create(worker_settings(s).to_dict())
        if s.wandb_env:  # veRL's Tracking calls wandb.init without group or tags; wandb reads these
            runtime_env = cfg.ray_kwargs.ray_init.runtime_env
            runtime_env.env_vars = {**(runtime_env.get("env_vars") or {}), **s.wandb_env}
    return cfg


def model_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "actor_rollout_ref.model.path": s.model_path,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.override_config": {"attn_implementation": s.attn_implementation},
        "actor_rollout_ref.model.trust_remote_code": s.trust_remote_code,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,  # long multi-turn sequences
        "data.trust_remote_code": s.trust_remote_code,
        # model.lora.*: veRL's FSDP LoRA (PEFT); with a rank > 0 the reference is the actor
        # with its adapter disabled (veRL's ref_in_actor) and vLLM serves the adapter
        "actor_rollout_ref.model.lora_rank": s.lora_rank,
        "actor_rollout_ref.model.lora_alpha": s.lora_alpha,
        "actor_rollout_ref.model.target_modules": (
            s.lora_target_modules if isinstance(s.lora_target_modules, str) else list(s.lora_target_modules)
        ),
    }


def actor_values(s: VerlSettings) -> dict[str, Any]:
    """Optimizer (schedule sized on the steps that run), clip-higher PPO loss, token-mean
    aggregation, KL loss (beta at step 0), checkpoint contents."""
    prefix = "actor_rollout_ref.actor"
    # veRL's hf_model copy of a LoRA model keeps the PEFT wrapper's names (base_model.model...,
    # base_layer, lora_A), which no plain model loads: under LoRA final/ and training.export
    # use veRL's merger and merge the adapter instead (training/export.py)
    hf_copy = s.save_weights and s.lora_rank <= 0
    contents = ["model", "optimizer", "extra"] + (["hf_model"] if hf_copy else [])
    values = {
        "optim.lr": s.lr,
        "optim.betas": list(s.betas),
        "optim.lr_warmup_steps_ratio": s.warmup_ratio,
        "optim.total_training_steps": s.total_training_steps or -1,
        "optim.weight_decay": s.weight_decay,
        "grad_clip": s.grad_clip,
        "clip_ratio_low": s.clip_ratio_low,
        "clip_ratio_high": s.clip_ratio_high,
        "clip_ratio_c": s.clip_ratio_c,
        "entropy_coeff": s.entropy_coeff,
        "loss_agg_mode": s.loss_agg_mode,
        "use_kl_loss": s.uses_kl,
        "kl_loss_coef": s.schedule.beta(0),
        "kl_loss_type": s.kl_loss_type,
        "ppo_mini_batch_size": s.ppo_mini_batch_size or s.train_batch_size,
        "ppo_epochs": s.ppo_epochs,
        "use_dynamic_bsz": True,
        "ppo_max_token_len_per_gpu": max_tokens_per_gpu(s),
        "checkpoint.save_contents": contents,
        "checkpoint.load_contents": ["model", "optimizer", "extra"],
        "fsdp_config.param_offload": s.fsdp_offload,
        "fsdp_config.optimizer_offload": s.fsdp_offload,
    }
    out = {f"{prefix}.{key}": value for key, value in values.items()}
    out["actor_rollout_ref.ref.fsdp_config.param_offload"] = s.fsdp_offload
    return out


def trainer_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": TRAINER_MODES[s.trainer_mode],
        "trainer.n_gpus_per_node": s.n_gpus_per_node,
        "trainer.nnodes": s.nnodes,
        "trainer.total_epochs": s.total_epochs,
        "trainer.total_training_steps": s.total_training_steps,
        "trainer.save_freq": s.save_freq,
        "trainer.max_actor_ckpt_to_keep": s.keep_checkpoints,
        "trainer.test_freq": s.test_freq,
        "trainer.val_before_train": s.val_before_train,
        "trainer.project_name": s.project_name,
        "trainer.experiment_name": s.experiment_name,
        "trainer.default_local_dir": str(checkpoint_dir(s.output_dir)),
        "trainer.resume_mode": "disable" if s.resume == "never" else "auto",
        "trainer.logger": list(s.loggers),
        "trainer.critic_warmup": 0,
    }


SECTIONS: tuple[Callable[[VerlSettings], dict[str, Any]], ...] = (
    model_values,
    actor_values,
    rollout_values,
    data_values,
    algorithm_values,
    trainer_values,
    async_values,
    sizing_values,
)
"""The mapping from project settings to veRL keys, one plain function per part of the tree."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    """veRL's ``trainer.default_local_dir`` for a run (absolute: Ray actors do not share
    the driver's working directory)."""
    return Path(run_dir).resolve() / "checkpoints"


def worker_settings(s: VerlSettings) -> WorkerSettings:
    """The ``sqlagent`` block the Ray workers read (agent loop and trainer subclass), as
    the typed :class:`~training.engines.verl.shared.WorkerSettings` they read it back into."""
    run_dir = Path(s.output_dir).resolve()
    return WorkerSettings(
        agent=s.agent,
        agent_options=plain(s.agent_options),
        reward=s.reward,
        reward_options=plain(s.reward_options),
        max_new_tokens_per_turn=s.max_new_tokens_per_turn,
        observation_max_tokens=s.observation_max_tokens,
        advantage=AdvantageSettings(
            estimator=s.advantage,
            group_by=s.group_by,
            epsilon=s.advantage_epsilon,
            norm_by_std=s.norm_by_std,
            clamp=s.advantage_clip,
            schema_weight=s.schema_weight,
            schema_track=s.schema_track,
        ),
        kl_schedule=tuple((int(a), float(b)) for a, b in s.kl_schedule),
        dynamic_sampling=DynamicSampling(
            enable=s.dynamic_sampling,
            metric=s.filter_metric,
            min_std=s.filter_min_std,
            refill=s.refill,
            flagged_positive_as_unknown=s.flagged_positive_as_unknown,
            oversample=s.oversample,
            return_unkept=s.return_unkept,
        ),
        run_dir=str(run_dir),
        final_dir=str(run_dir / "final"),  # every run ends with final/ (training/export.py without hf_model)
        exec_metric=str(s.reward_options.get("exec_metric", "ex")),
        eval_after=s.val_before_train,
        samples_per_step=s.samples_per_step,
        max_concurrent_episodes=episode_cap(s),
    )


def build_verl_config(
    settings: VerlSettings, block: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()
) -> DictConfig:
    """Compose, fill, override and validate: the complete veRL config for one run."""
    cfg = compose_ppo_trainer()
    fill_from_settings(cfg, settings)
    apply_verl_overrides(cfg, block, overrides)
    validate_verl_config(cfg)
    return cfg


# ----------------------------------------------------------------------------- from the project config


def settings_from_project(
    cfg: TrainConfig, model_path: str | None = None, num_train_examples: int | None = None
) -> VerlSettings:
    """Map the typed project config onto :class:`VerlSettings` (the one place that does).

    ``model_path`` is the resolved model directory; without it :func:`policy_path` names
    it. ``num_train_examples`` sizes the epochs (veRL stops at ``trainer.total_epochs``
    even when steps remain); without it the training split is counted.
    """
    from training.engines.verl.config.data_files import count_examples, data_files

    _refuse_local_only(cfg)
    if num_train_examples is None:
        num_train_examples = count_examples(cfg.data, cfg.data.split, cfg.data.limit)
    train_file, val_file = data_files(cfg.run_dir)
    return VerlSettings(
        model_path=str(model_path or policy_path(cfg)),
        train_files=str(train_file),
        val_files=str(val_file),
        **_model_fields(cfg),
        **_algorithm_fields(cfg),
        **_rollout_fields(cfg),
        **_run_fields(cfg, num_train_examples),
    )


def _model_fields(cfg: TrainConfig) -> dict[str, Any]:
    """Agent, reward and the model's parallelism (from the backbone table when it is one)."""
    from training.engines.verl.checks.backbones import BACKBONES

    backbone = BACKBONES.get(cfg.model.path or cfg.gpu_backbone or "")
    lora = cfg.model.lora
    return {
        "agent": cfg.agent.name,
        "agent_options": dict(cfg.agent.options),
        "reward": cfg.reward.name,
        "reward_options": {"exec_metric": cfg.reward.exec_metric, **cfg.reward.options},
        "attn_implementation": cfg.model.attn_implementation,
        "tensor_parallel_size": backbone.tensor_parallel_size if backbone else 1,
        "fsdp_offload": backbone.fsdp_offload if backbone else False,
        "trust_remote_code": cfg.model.trust_remote_code,
        "lora_rank": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_target_modules": lora.target_modules
        if isinstance(lora.target_modules, str)
        else tuple(lora.target_modules),
        "lora_dropout": lora.dropout,
        **hardware_fields(cfg, cfg.model.path or cfg.gpu_backbone or ""),
    }


def _run_fields(cfg: TrainConfig, num_train_examples: int) -> dict[str, Any]:
    """Steps and epochs, checkpoints, validation, logging, the run directory."""
    from training.engines.verl.config.data_files import epochs_for
    from training.runs.sweep import verl_runtime_env

    tr = cfg.trainer
    wandb_env, experiment = verl_runtime_env(cfg.sweep, cfg.ablation, cfg.recipe_name or "run", cfg.run_dir)
    epochs, steps = epochs_for(tr.total_steps, num_train_examples, cfg.algorithm.batch_size)
    loggers = ["file"] + [VERL_LOGGERS[name] for name in cfg.logger if VERL_LOGGERS[name] != "file"]
    return {
        "total_epochs": epochs,
        "total_training_steps": steps,
        "save_freq": tr.save_every,
        "keep_checkpoints": tr.keep_checkpoints,
        "save_weights": tr.save_weights,
        "test_freq": tr.val_every if tr.val_every > 0 else -1,
        "val_before_train": tr.eval_before_after,
        "project_name": tr.project,
        "experiment_name": experiment,
        "wandb_env": wandb_env,
        "samples_per_step": tr.samples_per_step,
        "trainer_mode": tr.mode,
        "staleness": tr.staleness,
        "stale_rollouts": tr.stale_rollouts,
        "warmup_batches": tr.warmup_batches,
        "async_correction": tr.async_correction,
        "has_rollout_correction": cfg.algorithm.rollout_correction.enabled,
        "rollout_gpus": tr.rollout_gpus,
        "rollout_nodes": tr.rollout_nodes,
        "output_dir": cfg.run_dir,
        "resume": cfg.resume,
        "loggers": tuple(loggers),
        "seed": cfg.seed,
    }


def _refuse_local_only(cfg: TrainConfig) -> None:
    alg = cfg.algorithm
    if cfg.stage.warm_start.enable:
        raise ConfigError(
            "stage.warm_start.enable=true runs on the local engine only; on veRL, fine-tune first "
            "(engine=local, or veRL's SFT trainer) and pass the result as stage.init_from=<dir>"
        )
    if alg.batch_size % alg.mini_batches:
        raise ConfigError(
            f"algorithm.mini_batches={alg.mini_batches} must divide algorithm.batch_size={alg.batch_size} "
            "on the verl engine (veRL splits a step into equal mini-batches of questions)"
        )


def policy_path(cfg: TrainConfig) -> str:
    """The model the verl engine trains: ``stage.init_from``, else ``model.path``, else the
    recipe's GPU backbone (``gpu_backbone``, a hub name), else the embedded default's
    checkpoint directory (not converted here, so a dry run never downloads anything)."""
    path = cfg.stage.init_from or cfg.model.path or cfg.gpu_backbone
    if path:
        return str(path)
    from training.generation.loading import embedded_checkpoint_dir

    return str(embedded_checkpoint_dir())


def verl_config_for(
    cfg: TrainConfig, model_path: str | None = None, num_train_examples: int | None = None
) -> DictConfig:
    """The complete, validated veRL config for a project config."""
    settings = settings_from_project(cfg, model_path, num_train_examples)
    block, dotted = split_verl_block(cfg.verl)
    return build_verl_config(settings, block, dotted)
