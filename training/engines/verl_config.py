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
   rules veRL only asserts later live in :mod:`training.engines.verl_checks`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from training.engines.verl_common import (
    AGENT_LOOP_NAME,
    PROJECT_NAMESPACE,
    REWARD_FUNCTION_MODULE,
    REWARD_FUNCTION_NAME,
    TRAINER_MODE,
    AdvantageSettings,
    DynamicSampling,
    WorkerSettings,
    plain,
)
from training.engines.verl_sizing import episode_cap, hardware_fields, sizing_values

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.config import TrainConfig
    from training.hardware import Sizing
    from training.kl import KLSchedule

log = logging.getLogger(__name__)

PPO_CONFIG_MODULE = "verl.trainer.config"
PPO_CONFIG_NAME = "ppo_trainer"
VERL_LOGGERS = {"console": "console", "jsonl": "file", "wandb": "wandb"}
ATTENTION = ("sdpa", "flash_attention_2", "eager")


@dataclass(frozen=True)
class VerlSettings:
    """Everything the verl engine takes from the project config, in veRL's terms.

    One field per setting the engine writes into veRL's tree or into the ``sqlagent``
    namespace; :func:`settings_from_project` fills it from the typed project config so
    the mapping lives in one place and both engines read the same algorithm settings.
    """

    model_path: str
    train_files: str
    val_files: str
    agent: str
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    reward: str = "composite"
    reward_options: Mapping[str, Any] = field(default_factory=dict)
    attn_implementation: str = "sdpa"  # flash_attention_2 is an opt-in (needs the flash-attn wheel)
    group_size: int = 16  # G -> actor_rollout_ref.rollout.n
    train_batch_size: int = 16  # questions per step (B)
    ppo_mini_batch_size: int | None = None  # questions per optimizer step; None = one pass
    ppo_epochs: int = 1
    lr: float = 1e-6
    betas: tuple[float, float] = (0.9, 0.999)
    warmup_ratio: float = 0.03
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float = 3.0
    entropy_coeff: float = 0.0
    loss_agg_mode: str = "token-mean"
    kl_schedule: tuple[tuple[int, float], ...] = ((0, 0.0),)  # ((from_step, beta), ...), training.kl
    kl_loss_type: str = "low_var_kl"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    val_temperature: float = 0.0
    val_top_p: float = 1.0
    val_n: int = 1
    prompt_length: int = 4096
    response_length: int = 8192  # whole multi-turn response (policy + observation tokens)
    max_new_tokens_per_turn: int | None = None
    observation_max_tokens: int | None = None
    dynamic_sampling: bool = False  # SPEC's DAPO filter (algorithm.dynamic_sampling.enable)
    refill: bool = False  # True: veRL's filter_groups refill; False: SPEC's draw BxK once
    filter_metric: str = "exec"
    filter_min_std: float = 1e-6
    oversample: int = 4  # K
    advantage: str = "grpo"  # "grpo" | "two_track" (the training.advantages estimator name)
    schema_weight: float = 0.25  # lambda of the schema track
    schema_track: str = "schema"
    advantage_clip: float | None = None
    advantage_epsilon: float = 1e-6
    norm_by_std: bool = True
    group_by: str = "role"  # "role": one GRPO group per (question, role); "question"
    total_epochs: int = 1  # enough passes for total_training_steps (verl_data.epochs_for)
    total_training_steps: int | None = None
    save_freq: int = -1
    keep_checkpoints: int | None = None  # None = keep every checkpoint
    save_weights: bool = True  # an HF copy in each checkpoint, the last one as run_dir/final
    test_freq: int = -1
    val_before_train: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 1
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.6
    fsdp_offload: bool = False  # actor + reference parameters (and the actor's optimizer) on CPU between passes
    sizing: Sizing | None = None  # the hardware group's row for this model (verl_sizing); None: generic sizes
    agent_workers: int = 8
    project_name: str = "sqlagent-rl"
    experiment_name: str = "run"  # unique per sweep job (training.sweep.verl_runtime_env)
    wandb_env: Mapping[str, str] = field(default_factory=dict)  # WANDB_RUN_GROUP / WANDB_TAGS of a sweep job
    samples_per_step: int = 0  # rollouts per step the trainer writes to samples.jsonl
    output_dir: str = "outputs/verl"
    resume: bool = False  # continue from the latest checkpoint under output_dir/checkpoints
    loggers: tuple[str, ...] = ("console", "file")
    seed: int = 0
    trust_remote_code: bool = False

    def __post_init__(self) -> None:
        _check_positive("group_size", self.group_size, "G, the rollouts per question (>= 2 for GRPO)")
        if self.group_size < 2:
            raise ConfigError(f"group_size={self.group_size}: GRPO needs G >= 2 rollouts per question")
        _check_positive("train_batch_size", self.train_batch_size, "questions per step")
        if self.ppo_mini_batch_size is not None:
            _check_positive("ppo_mini_batch_size", self.ppo_mini_batch_size, "questions per update")
            if self.train_batch_size % self.ppo_mini_batch_size:
                raise ConfigError(
                    f"ppo_mini_batch_size={self.ppo_mini_batch_size} must divide "
                    f"train_batch_size={self.train_batch_size}"
                )
        if not 0.0 <= self.clip_ratio_low <= 1.0 or not 0.0 <= self.clip_ratio_high <= 1.0:
            raise ConfigError(
                f"clip ratios must lie in [0, 1]: got low={self.clip_ratio_low}, high={self.clip_ratio_high}"
            )
        _ = self.schedule  # validates the pairs (training.kl.KLSchedule says how to fix them)
        if self.advantage not in ("grpo", "two_track"):
            raise ConfigError(f"advantage={self.advantage!r}: the verl engine supports 'grpo' and 'two_track'")
        if self.attn_implementation not in ATTENTION:
            raise ConfigError(f"model.attn_implementation={self.attn_implementation!r}; choose one of {ATTENTION}")
        _check_positive("prompt_length", self.prompt_length, "tokens")
        _check_positive("response_length", self.response_length, "tokens")
        _check_positive("n_gpus_per_node", self.n_gpus_per_node, "GPUs per node")
        _check_positive("total_epochs", self.total_epochs, "passes over the training prompts")

    @property
    def schedule(self) -> KLSchedule:
        from training.kl import KLSchedule

        return KLSchedule.from_pairs(self.kl_schedule)

    @property
    def uses_kl(self) -> bool:
        """True when any step of the run has a positive beta (the reference pass is needed)."""
        return self.schedule.needs_reference(0)

    @property
    def max_model_len(self) -> int:
        return self.prompt_length + self.response_length


def _check_positive(name: str, value: int, what: str) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}={value!r}: expected a positive integer ({what})")


# ----------------------------------------------------------------------------- composition


def compose_ppo_trainer() -> DictConfig:
    """veRL's own ``ppo_trainer`` config, composed with Hydra from its package.

    Inside the project's ``@hydra.main`` entry point Hydra's global state is already
    initialised (with the project's search path); it is set aside for this composition
    and restored afterwards, so the two configs never mix.
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=PPO_CONFIG_MODULE, version_base=None):
            return compose(config_name=PPO_CONFIG_NAME)
    finally:
        restore_gh_from_backup(backup)


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


def max_tokens_per_gpu(s: VerlSettings) -> int:
    """Per-GPU token budget of a packed micro-batch (dynamic batch size: multi-turn
    responses vary a lot in length, so micro-batches are packed by tokens, not rows).

    With flash-attn the varlen kernel needs no mask: two full-length sequences per GPU.
    With sdpa, transformers builds a block-diagonal boolean mask over the packed row,
    ``budget**2`` bytes (more where a kernel converts it to the compute dtype): one
    full-length sequence per GPU keeps it at ``max_model_len**2`` - 1.7 GB for DualSQL's
    40,960 (tests/training/verl/test_packed_sdpa.py shows the packed mask is exact).
    """
    per_sequence = s.max_model_len
    return per_sequence if s.attn_implementation == "sdpa" else 2 * per_sequence


def model_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "actor_rollout_ref.model.path": s.model_path,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.override_config": {"attn_implementation": s.attn_implementation},
        "actor_rollout_ref.model.trust_remote_code": s.trust_remote_code,
        "actor_rollout_ref.model.enable_gradient_checkpointing": True,  # long multi-turn sequences
        "data.trust_remote_code": s.trust_remote_code,
    }


def actor_values(s: VerlSettings) -> dict[str, Any]:
    """Optimizer (schedule sized on the steps that run), clip-higher PPO loss, token-mean
    aggregation, KL loss (beta at step 0), checkpoint contents."""
    prefix = "actor_rollout_ref.actor"
    contents = ["model", "optimizer", "extra"] + (["hf_model"] if s.save_weights else [])
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


def rollout_values(s: VerlSettings) -> dict[str, Any]:
    """vLLM in async mode behind our agent loop; G samples per prompt; greedy validation."""
    prefix = "actor_rollout_ref.rollout"
    values = {
        "name": "vllm",
        "mode": "async",
        "n": s.group_size,
        "temperature": s.temperature,
        "top_p": s.top_p,
        "top_k": s.top_k,
        "val_kwargs.temperature": s.val_temperature,
        "val_kwargs.top_p": s.val_top_p,
        "val_kwargs.n": s.val_n,
        "val_kwargs.do_sample": s.val_temperature > 0,
        "prompt_length": s.prompt_length,
        "response_length": s.response_length,
        "max_model_len": s.max_model_len,
        "tensor_model_parallel_size": s.tensor_parallel_size,
        "gpu_memory_utilization": s.gpu_memory_utilization,
        "calculate_log_probs": True,
        "multi_turn.enable": True,
        "agent.default_agent_loop": AGENT_LOOP_NAME,
        "agent.num_workers": s.agent_workers,
        "log_prob_use_dynamic_bsz": True,
        "log_prob_max_token_len_per_gpu": max_tokens_per_gpu(s),
    }
    out = {f"{prefix}.{key}": value for key, value in values.items()}
    out["actor_rollout_ref.ref.log_prob_use_dynamic_bsz"] = True
    out["actor_rollout_ref.ref.log_prob_max_token_len_per_gpu"] = max_tokens_per_gpu(s)
    return out


def data_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "data.train_files": s.train_files,
        "data.val_files": s.val_files,
        "data.train_batch_size": s.train_batch_size,
        "data.max_prompt_length": s.prompt_length,
        "data.max_response_length": s.response_length,
        "data.return_raw_chat": True,
        "data.filter_overlong_prompts": False,  # the agent builds the real prompt; the driver drops long ones
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": s.seed,
    }


def algorithm_values(s: VerlSettings) -> dict[str, Any]:
    """GRPO (the trainer subclass computes it), dynamic sampling, our reward function.

    veRL's ``filter_groups`` refills a step with new batches until B groups have reward
    variance; that is only switched on with ``algorithm.dynamic_sampling.refill=true``.
    The default (SPEC's DAPO as the papers ran it: draw B x K once, keep up to B groups,
    zero-mask the rest) is the trainer subclass's, from the ``sqlagent`` namespace.
    """
    return {
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": s.norm_by_std,
        "algorithm.use_kl_in_reward": False,
        "algorithm.filter_groups.enable": s.dynamic_sampling and s.refill,
        "algorithm.filter_groups.metric": "score" if s.filter_metric == "total" else s.filter_metric,
        "algorithm.filter_groups.max_inflight_gen_batches": s.oversample,
        "reward.custom_reward_function.path": _module_file(REWARD_FUNCTION_MODULE),
        "reward.custom_reward_function.name": REWARD_FUNCTION_NAME,
    }


def trainer_values(s: VerlSettings) -> dict[str, Any]:
    return {
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": TRAINER_MODE,
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
        "trainer.resume_mode": "auto" if s.resume else "disable",
        "trainer.logger": list(s.loggers),
        "trainer.critic_warmup": 0,
    }


SECTIONS: tuple[Callable[[VerlSettings], dict[str, Any]], ...] = (
    model_values, actor_values, rollout_values, data_values, algorithm_values, trainer_values, sizing_values,
)
"""The mapping from project settings to veRL keys, one plain function per part of the tree."""


def checkpoint_dir(run_dir: str | Path) -> Path:
    """veRL's ``trainer.default_local_dir`` for a run (absolute: Ray actors do not share
    the driver's working directory)."""
    return Path(run_dir).resolve() / "checkpoints"


def worker_settings(s: VerlSettings) -> WorkerSettings:
    """The ``sqlagent`` block the Ray workers read (agent loop and trainer subclass), as
    the typed :class:`~training.engines.verl_common.WorkerSettings` they read it back into."""
    run_dir = Path(s.output_dir).resolve()
    return WorkerSettings(
        agent=s.agent,
        agent_options=plain(s.agent_options),
        reward=s.reward,
        reward_options=plain(s.reward_options),
        max_new_tokens_per_turn=s.max_new_tokens_per_turn,
        observation_max_tokens=s.observation_max_tokens,
        advantage=AdvantageSettings(
            estimator=s.advantage, group_by=s.group_by, epsilon=s.advantage_epsilon, norm_by_std=s.norm_by_std,
            clamp=s.advantage_clip, schema_weight=s.schema_weight, schema_track=s.schema_track,
        ),
        kl_schedule=tuple((int(a), float(b)) for a, b in s.kl_schedule),
        dynamic_sampling=DynamicSampling(
            enable=s.dynamic_sampling, metric=s.filter_metric, min_std=s.filter_min_std, refill=s.refill,
            oversample=s.oversample,
        ),
        run_dir=str(run_dir),
        final_dir=str(run_dir / "final") if s.save_weights else None,
        exec_metric=str(s.reward_options.get("exec_metric", "ex")),
        eval_after=s.val_before_train,
        samples_per_step=s.samples_per_step,
        max_concurrent_episodes=episode_cap(s),
    )


def _module_file(module: str) -> str:
    """Absolute path of a module's source file (veRL loads reward functions by path)."""
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ConfigError(f"cannot locate module {module!r}; is the project installed (`pip install -e .`)?")
    return spec.origin


def apply_verl_overrides(
    cfg: DictConfig, block: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()
) -> DictConfig:
    """Apply the recipe's ``verl:`` block, then ``verl.<path>=<value>`` strings, on top.

    Keys must already exist in veRL's tree (a typo fails with the key and the closest
    existing one); the ``sqlagent`` namespace is ours and accepts any key.
    """
    if block:
        for dotted, value in _flatten(plain(block)).items():
            _set_existing(cfg, dotted, value)
    for item in overrides:
        dotted, value = _parse_override(item)
        _set_existing(cfg, dotted, value)
    return cfg


def _parse_override(item: str) -> tuple[str, Any]:
    """``verl.<path>=<value>`` -> (path, value), parsed with Hydra's override grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    text = item.strip()
    if not text.startswith("verl.") or "=" not in text:
        raise ConfigError(f"bad veRL override {item!r}: write verl.<path>=<value>, e.g. verl.trainer.save_freq=10")
    try:
        parsed = OverridesParser.create().parse_override(text)
    except HydraException as err:
        raise ConfigError(f"bad veRL override {item!r}: {err}") from err
    return parsed.key_or_group.removeprefix("verl."), plain(parsed.value())


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {"a.b.c": leaf}. Lists and empty dicts are leaves."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _set_existing(cfg: DictConfig, dotted: str, value: Any) -> None:
    from omegaconf import OmegaConf, open_dict

    if dotted.split(".", 1)[0] == PROJECT_NAMESPACE:
        with open_dict(cfg):
            OmegaConf.update(cfg, dotted, value, merge=True, force_add=True)
        return
    parent_path, _, leaf = dotted.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path) if parent_path else cfg
    if parent is None or not hasattr(parent, "keys") or leaf not in parent:
        raise ConfigError(f"verl.{dotted}: no such key in veRL's ppo_trainer config{_closest_key(cfg, dotted)}")
    OmegaConf.update(cfg, dotted, value, merge=True)


def _closest_key(cfg: DictConfig, dotted: str) -> str:
    import difflib

    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=False)
    keys = list(_flatten(container).keys()) if isinstance(container, dict) else []
    close = difflib.get_close_matches(dotted, keys, n=1, cutoff=0.6)
    return f"; did you mean verl.{close[0]}?" if close else "; see `engine=verl dry_run=true` for every key"


def validate_verl_config(cfg: DictConfig) -> None:
    """veRL's ``validate_config`` plus the conversions veRL does at start-up.

    Failures are re-raised as :class:`ConfigError` with the veRL message inside.
    """
    from hydra.errors import HydraException
    from verl.trainer.config import AlgoConfig  # noqa: F401  (registers _target_ classes)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    _check_namespace(cfg)
    chatter = io.StringIO()  # veRL prints progress lines; keep stdout for the YAML of a dry run
    try:
        with contextlib.redirect_stdout(chatter), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Disabled critic")  # GRPO needs no critic
            validate_config(
                config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
            )
        omega_conf_to_dataclass(cfg.algorithm)
        omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    except (AssertionError, ValueError, TypeError, KeyError, HydraException) as err:
        raise ConfigError(f"veRL rejected the composed config: {err}") from err
    log.debug("veRL validate_config: %s", chatter.getvalue().strip())
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.agent.default_agent_loop != AGENT_LOOP_NAME:
        log.warning("rollout.agent.default_agent_loop=%s is not the project's agent loop", rollout.agent.default_agent_loop)
    if cfg.trainer.v1.trainer_mode != TRAINER_MODE or not cfg.trainer.use_v1:
        raise ConfigError(
            f"verl.trainer.v1.trainer_mode={cfg.trainer.v1.trainer_mode!r} (use_v1={cfg.trainer.use_v1}): the "
            f"project's per-role and two-track advantages and the KL schedule live in the {TRAINER_MODE!r} "
            "trainer; leave trainer.use_v1=true and trainer.v1.trainer_mode unset"
        )
    if cfg.algorithm.filter_groups.enable and not cfg.algorithm.filter_groups.metric:
        raise ConfigError("algorithm.filter_groups.enable needs a metric (the project uses 'exec')")


def _check_namespace(cfg: DictConfig) -> None:
    """The ``sqlagent`` block reads back as the workers will read it (a ``verl.sqlagent.*``
    override with a bad key or value fails here, not in a Ray worker)."""
    try:
        WorkerSettings.from_config(cfg)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from err


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
    from training.engines.verl_data import count_examples, data_files

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
    from training.backbones import BACKBONES

    backbone = BACKBONES.get(cfg.model.path or cfg.gpu_backbone or "")
    return {
        "agent": cfg.agent.name,
        "agent_options": dict(cfg.agent.options),
        "reward": cfg.reward.name,
        "reward_options": {"exec_metric": cfg.reward.exec_metric, **cfg.reward.options},
        "attn_implementation": cfg.model.attn_implementation,
        "tensor_parallel_size": backbone.tensor_parallel_size if backbone else 1,
        "fsdp_offload": backbone.fsdp_offload if backbone else False,
        "trust_remote_code": cfg.model.trust_remote_code,
        **hardware_fields(cfg, cfg.model.path or cfg.gpu_backbone or ""),
    }


def _algorithm_fields(cfg: TrainConfig) -> dict[str, Any]:
    """GRPO, the optimizer, dynamic sampling and the advantage estimator."""
    alg, opt, adv, ds = cfg.algorithm, cfg.optim, cfg.advantage, cfg.algorithm.dynamic_sampling
    return {
        "group_size": alg.group_size,
        "train_batch_size": alg.batch_size,
        "ppo_mini_batch_size": alg.batch_size // alg.mini_batches,
        "lr": opt.lr,
        "betas": (float(opt.betas[0]), float(opt.betas[1])),
        "warmup_ratio": opt.warmup_ratio,
        "weight_decay": opt.weight_decay,
        "grad_clip": opt.grad_clip,
        "clip_ratio_low": alg.clip_ratio_low,
        "clip_ratio_high": alg.clip_ratio_high,
        "clip_ratio_c": alg.clip_ratio_c,
        "entropy_coeff": alg.entropy_coeff,
        "loss_agg_mode": alg.loss_agg_mode,
        "kl_schedule": tuple((int(a), float(b)) for a, b in alg.kl_schedule),
        "kl_loss_type": alg.kl_type,
        "dynamic_sampling": ds.enable,
        "refill": ds.refill,
        "filter_metric": ds.metric,
        "filter_min_std": ds.min_std,
        "oversample": ds.oversample,
        "advantage": adv.estimator,
        "schema_weight": adv.schema_weight,
        "schema_track": adv.schema_track,
        "advantage_clip": adv.clamp,
        "advantage_epsilon": adv.epsilon,
        "norm_by_std": adv.norm_by_std,
        "group_by": adv.group_by,
    }


def _rollout_fields(cfg: TrainConfig) -> dict[str, Any]:
    """Sampling and lengths (the prompt budget is the design's drop rule)."""
    roll = cfg.rollout
    return {
        "temperature": roll.temperature,
        "top_p": roll.top_p,
        "top_k": roll.top_k if roll.top_k > 0 else -1,
        "val_temperature": roll.eval_temperature,
        "prompt_length": roll.max_prompt_tokens,
        "response_length": roll.max_response_tokens,
        "max_new_tokens_per_turn": roll.max_new_tokens,
        "observation_max_tokens": roll.observation_max_tokens,
    }


def _run_fields(cfg: TrainConfig, num_train_examples: int) -> dict[str, Any]:
    """Steps and epochs, checkpoints, validation, logging, the run directory."""
    from training.engines.verl_data import epochs_for
    from training.sweep import verl_runtime_env

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
    from training.model import embedded_checkpoint_dir

    return str(embedded_checkpoint_dir())


def split_verl_block(block: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The project's ``verl`` node -> (nested block, dotted overrides).

    Recipes write nested YAML (``verl: {trainer: {save_freq: 5}}``); the command line's
    ``+verl.a.b=1`` arrives nested too, and a key written with dots in YAML
    (``"actor_rollout_ref.actor.optim.lr": 2e-6``) is kept as a dotted override.
    """
    nested: dict[str, Any] = {}
    dotted: list[str] = []
    for key, value in plain(block or {}).items():
        if "." in str(key):
            dotted.append(f"verl.{key}={json.dumps(value)}")
        else:
            nested[str(key)] = value
    return nested, dotted


def verl_config_for(
    cfg: TrainConfig, model_path: str | None = None, num_train_examples: int | None = None
) -> DictConfig:
    """The complete, validated veRL config for a project config."""
    settings = settings_from_project(cfg, model_path, num_train_examples)
    block, dotted = split_verl_block(cfg.verl)
    return build_verl_config(settings, block, dotted)


def resolved_tree(cfg: DictConfig) -> tuple[dict[str, Any], list[str]]:
    """The config as plain values with every interpolation resolved that can be, and the
    dotted keys of those that cannot (kept as written, e.g. a ``${oc.env:...}`` whose
    variable is unset on this machine)."""
    from omegaconf import DictConfig as _Dict
    from omegaconf import ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    unresolved: list[str] = []

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, _Dict):
            return {str(k): walk_key(node, k, f"{path}{k}") for k in node.keys()}
        if isinstance(node, ListConfig):
            return [walk_key(node, i, f"{path}{i}") for i in range(len(node))]
        return node

    def walk_key(parent: Any, key: Any, path: str) -> Any:
        try:
            value = parent[key]
        except OmegaConfBaseException:
            unresolved.append(path)
            return OmegaConf.to_container(parent, resolve=False)[key]
        return walk(value, path + ".")

    return walk(cfg, ""), unresolved


def to_yaml(cfg: DictConfig) -> str:
    """The config as YAML with interpolations resolved (what veRL will run); any that
    cannot be resolved here are listed in a comment above it."""
    import yaml

    tree, unresolved = resolved_tree(cfg)
    head = ""
    if unresolved:
        head = "# left as written (cannot be resolved here): " + ", ".join(unresolved) + "\n"
    return head + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=120)
