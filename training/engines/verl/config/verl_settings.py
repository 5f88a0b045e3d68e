"""What the verl engine takes from the project config, in veRL's terms (``VerlSettings``).

The config builder (:mod:`.builder`) fills it from the project config and writes veRL's tree
from it, one section per module (:mod:`.sections`, :mod:`.hardware_keys`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError

if TYPE_CHECKING:
    from training.algorithm.kl import KLSchedule
    from training.config.hardware import Sizing


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
    reward: str = ""
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
    kl_schedule: tuple[tuple[int, float], ...] = ((0, 0.0),)  # ((from_step, beta), ...), training.algorithm.kl
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
    dynamic_sampling: bool = False  # the papers' DAPO filter (algorithm.dynamic_sampling.enable)
    refill: bool = False  # True: veRL's filter_groups refill; False: the papers' draw BxK once
    filter_metric: str = "exec"
    filter_min_std: float = 1e-6
    flagged_positive_as_unknown: bool = False  # flagged positive exec rewards take no part in the filter
    return_unkept: str = "varying"  # one draw: questions drawn but not kept back to the pool (none|varying|all)
    oversample: int = 4  # K
    advantage: str = "grpo"  # "grpo" | "two_track" (the training.algorithm.advantages estimator name)
    schema_weight: float = 0.25  # lambda of the schema track
    schema_track: str = "schema"
    advantage_clip: float | None = None
    advantage_epsilon: float = 1e-6
    norm_by_std: bool = True
    group_by: str = "role"  # "role": one GRPO group per (question, role); "question"
    total_epochs: int = 1  # enough passes for total_training_steps (data_files.epochs_for)
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
    sizing: Sizing | None = None  # the hardware group's row for this model (hardware_keys); None: generic sizes
    agent_workers: int = 8
    project_name: str = "sqlagent-rl"
    experiment_name: str = "run"  # unique per sweep job (training.runs.sweep.verl_runtime_env)
    wandb_env: Mapping[str, str] = field(default_factory=dict)  # WANDB_RUN_GROUP / WANDB_TAGS of a sweep job
    samples_per_step: int = 0  # rollouts per step the trainer writes to samples.jsonl
    trainer_mode: str = "sync"  # trainer.mode: sync | colocate_async | separate_async (shared.TRAINER_MODES)
    staleness: int = 1  # trainer.staleness: weight versions a rollout may lag (max_off_policy_threshold - 1)
    stale_rollouts: str = "drop"  # trainer.stale_rollouts -> max_off_policy_strategy
    warmup_batches: float = 1.0  # trainer.warmup_batches -> trainer.v1.<mode>.num_warmup_batches
    async_correction: str | None = "token"  # IS level written when the run has no rollout_correction of its own
    has_rollout_correction: bool = False  # algorithm.rollout_correction is on (its own IS / rejection)
    rollout_gpus: int = 0  # separate_async: standalone rollout GPUs per node
    rollout_nodes: int = 1  # separate_async: standalone rollout nodes
    output_dir: str = "outputs/verl"
    resume: str = (
        "never"  # never | auto | must (training/runs/resume_policy.py); prepare() points veRL at the exact step
    )
    loggers: tuple[str, ...] = ("console", "file")
    seed: int = 0
    trust_remote_code: bool = False
    lora_rank: int = 0  # model.lora.rank -> actor_rollout_ref.model.lora_rank (0 = full fine-tuning)
    lora_alpha: int = 32  # model.lora.alpha -> lora_alpha
    lora_target_modules: str | tuple[str, ...] = "all-linear"  # model.lora.target_modules -> target_modules
    lora_dropout: float = 0.0  # model.lora.dropout: veRL's FSDP LoRA builds its LoraConfig without one

    def __post_init__(self) -> None:
        if not self.agent or not self.reward:
            raise ConfigError(f"agent={self.agent!r}, reward={self.reward!r}: the recipe names both (recipe=<name>)")
        check_positive("group_size", self.group_size, "G, the rollouts per question (>= 2 for GRPO)")
        if self.group_size < 2:
            raise ConfigError(f"group_size={self.group_size}: GRPO needs G >= 2 rollouts per question")
        check_positive("train_batch_size", self.train_batch_size, "questions per step")
        if self.ppo_mini_batch_size is not None:
            check_positive("ppo_mini_batch_size", self.ppo_mini_batch_size, "questions per update")
            if self.train_batch_size % self.ppo_mini_batch_size:
                raise ConfigError(
                    f"ppo_mini_batch_size={self.ppo_mini_batch_size} must divide "
                    f"train_batch_size={self.train_batch_size}"
                )
        if not 0.0 <= self.clip_ratio_low <= 1.0 or not 0.0 <= self.clip_ratio_high <= 1.0:
            raise ConfigError(
                f"clip ratios must lie in [0, 1]: got low={self.clip_ratio_low}, high={self.clip_ratio_high}"
            )
        _ = self.schedule  # validates the pairs (training.algorithm.kl.KLSchedule says how to fix them)
        if self.advantage not in ("grpo", "two_track"):
            raise ConfigError(f"advantage={self.advantage!r}: the verl engine supports 'grpo' and 'two_track'")
        if self.attn_implementation not in ATTENTION:
            raise ConfigError(f"model.attn_implementation={self.attn_implementation!r}; choose one of {ATTENTION}")
        check_positive("prompt_length", self.prompt_length, "tokens")
        check_positive("response_length", self.response_length, "tokens")
        check_positive("n_gpus_per_node", self.n_gpus_per_node, "GPUs per node")
        check_positive("total_epochs", self.total_epochs, "passes over the training prompts")
        check_lora(self)

    @property
    def schedule(self) -> KLSchedule:
        from training.algorithm.kl import KLSchedule

        return KLSchedule.from_pairs(self.kl_schedule)

    @property
    def uses_kl(self) -> bool:
        """True when any step of the run has a positive beta (the reference pass is needed)."""
        return self.schedule.needs_reference(0)

    @property
    def max_model_len(self) -> int:
        return self.prompt_length + self.response_length


def check_positive(name: str, value: int, what: str) -> None:
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{name}={value!r}: expected a positive integer ({what})")


VLLM_MAX_LORA_RANK = 512
"""vLLM's largest ``max_lora_rank`` (``MaxLoRARanks``); veRL's ``get_vllm_max_lora_rank`` refuses more."""


def check_lora(s: VerlSettings) -> None:
    """LoRA settings veRL 0.9.1 would reject or silently ignore, refused with the key to change."""
    if s.lora_rank <= 0:
        defaults = VerlSettings.__dataclass_fields__
        unused = [
            f"model.lora.{key}={value if isinstance(value, str | int) else '[' + ','.join(value) + ']'}"
            for key, value, default in (
                ("alpha", s.lora_alpha, defaults["lora_alpha"].default),
                ("target_modules", s.lora_target_modules, defaults["lora_target_modules"].default),
            )
            if value != default
        ]
        if unused:
            raise ConfigError(
                f"{' and '.join(unused)} with model.lora.rank={s.lora_rank}: rank 0 trains every weight, no adapter, "
                "so veRL ignores them. Set model.lora.rank to a positive rank (e.g. model.lora.rank=32) to train "
                "LoRA adapters, or leave model.lora.* at their defaults"
            )
        return
    if s.lora_rank > VLLM_MAX_LORA_RANK:
        raise ConfigError(
            f"model.lora.rank={s.lora_rank}: vLLM serves LoRA adapters up to rank {VLLM_MAX_LORA_RANK} "
            f"(veRL refuses more); set model.lora.rank <= {VLLM_MAX_LORA_RANK}"
        )
    if s.lora_dropout:
        raise ConfigError(
            f"model.lora.dropout={s.lora_dropout:g}: veRL's FSDP actor builds its LoRA without dropout "
            "(workers/engine/fsdp/transformer_impl.py), so it would be ignored; set model.lora.dropout=0 on engine=verl"
        )
