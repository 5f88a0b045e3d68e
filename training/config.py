"""Typed configuration of a training run: dataclasses that mirror ``recipes/`` one to one.

Hydra composes the YAML (``recipes/config.yaml`` + groups + a recipe); ``TrainConfig
.from_mapping`` converts the composed tree once, checking every value against its field's
annotation (and ``choices``) first - the key, the expected type and the allowed values
are named - and each ``__post_init__`` then checks its own values with a message that
says how to fix a bad one. Algorithm settings (G, clip, KL
schedule, turns, temperatures) live here once and both engines read them.

Agent and reward options differ per design: their group files hold ``name`` plus the
design's keyword options, which are kept in ``options`` and passed to ``make_agent`` /
``get_reward`` as they are (a typo is caught by Hydra's struct mode, a wrong option by the
factory's signature).

A name that picks a plugin (agent, reward, execution metric, advantage estimator) is
checked against its registry when the value is checked, so a plugin a user registered
is accepted exactly like a built-in one (``training/config_fields.py``). The field helpers,
the ``stage``/``supervised`` groups and the laptop profile live in ``config_fields``,
``config_stage`` and ``config_laptop``; every public name is importable from here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from tools.errors import ConfigError
from training.config_fields import (
    _f,
    _need,
    _type_hints,
    agent_names,
    checked_value,
    data_kind_names,
    describe_type,
    engine_names,
    estimator_names,
    exec_metric_names,
    need_choice,
    reward_names,
)
from training.config_laptop import LaptopProfile, apply_laptop_profile
from training.config_stage import CHAINS, STAGES, StageConfig, SupervisedConfig, WarmStartConfig

__all__ = [
    "CHAINS",
    "STAGES",
    "AdvantageConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "DataConfig",
    "DynamicSamplingConfig",
    "EngineConfig",
    "EvaluationConfig",
    "LaptopProfile",
    "ModelConfig",
    "OptimConfig",
    "RewardConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "StageConfig",
    "SupervisedConfig",
    "TrainConfig",
    "TrainerConfig",
    "WarmStartConfig",
    "apply_laptop_profile",
    "checked_value",
    "describe_type",
    "list_recipes",
    "to_yaml_tree",
    "warmup_steps",
]
from training.hardware import HardwareConfig

EX_RULES = ("ex", "spider")  # a dataset's official execution match: BIRD's set rule | Spider's
GROUP_BY = ("role", "question")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum")
KL_TYPES = ("low_var_kl", "k3", "kl", "k1", "mse", "k2", "abs")
LOGGERS = ("console", "jsonl", "wandb")


def list_recipes() -> list[str]:
    """The recipe names: one YAML file per design under ``recipes/recipe/``."""
    folder = resources.files("recipes") / "recipe"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


@dataclass
class AgentConfig:
    """``agent`` group: which design drives the episodes, and its options."""

    name: str = _f("retoolsql", "registered agent name (agents.list_agents())", agent_names)
    options: dict[str, Any] = _f({}, "keyword options for agents.make_agent, from the group file")

    def __post_init__(self) -> None:
        _need(bool(self.name), f"agent.name is empty; pick one with agent=<{'|'.join(agent_names())}>")
        need_choice("agent.name", self.name, agent_names, " (or register one with agents.register_agent)")
        for key, value in self.options.items():
            if "max_turns" in key:
                _need(
                    isinstance(value, int) and value >= 1, f"agent.{key}={value!r}: a turn budget is a positive integer"
                )

    def turn_budget_keys(self) -> list[str]:
        """Option names that are turn budgets (the laptop profile caps them)."""
        return [k for k in self.options if "max_turns" in k]


@dataclass
class RewardConfig:
    """``reward`` group: the reward function and its execution metric."""

    name: str = _f("composite", "registered reward name (training.rewards.list_rewards())", reward_names)
    exec_metric: str = _f(
        "ex",
        "execution score inside the reward: a registered metric - ex | rex | qatch | "
        "spider, or one added with rex.register_metric",
        exec_metric_names,
    )
    options: dict[str, Any] = _f({}, "other keyword options for training.rewards.get_reward")

    def __post_init__(self) -> None:
        need_choice("reward.name", self.name, reward_names, " (or register one with training.rewards.register_reward)")
        need_choice(
            "reward.exec_metric", self.exec_metric, exec_metric_names, " (or register one with rex.register_metric)"
        )


@dataclass
class AdvantageConfig:
    """``advantage`` group: how rewards become per-token advantages."""

    estimator: str = _f(
        "grpo",
        "a registered estimator: grpo (one track) | two_track (TRUST-SQL phase-aware), "
        "or one added with training.advantages.register_estimator",
        estimator_names,
    )
    epsilon: float = _f(1e-6, "added to the group std before dividing")
    norm_by_std: bool = _f(True, "divide by the group std (False = Dr.GRPO, mean-centred only)")
    group_by: str = _f(
        "role",
        "role: one group per (question, role) - DualSQL's linker and "
        "generator groups; question: one group per question",
        GROUP_BY,
    )
    clamp: float | None = _f(None, "clamp advantages to +-clamp (TRUST-SQL: 10); null = no clamp")
    schema_weight: float = _f(0.25, "two_track: lambda in loss = lambda*PG_schema + PG_full")
    schema_track: str = _f("schema", "two_track: the reward track normalised on the phase prefix")

    def __post_init__(self) -> None:
        need_choice(
            "advantage.estimator",
            self.estimator,
            estimator_names,
            " (or the group: advantage=grpo / advantage=two_track)",
        )
        _need(self.group_by in GROUP_BY, f"advantage.group_by={self.group_by!r}; choose one of {GROUP_BY}")
        _need(self.epsilon > 0, f"advantage.epsilon={self.epsilon}: must be > 0 (it guards a division)")
        _need(self.clamp is None or self.clamp > 0, f"advantage.clamp={self.clamp}: positive or null")
        _need(self.schema_weight >= 0, f"advantage.schema_weight={self.schema_weight}: must be >= 0")


@dataclass
class EngineConfig:
    """``engine`` group: where the update runs."""

    name: str = _f(
        "auto", "auto | local | verl (a registered engine); auto picks verl with CUDA + vLLM, else local", engine_names
    )
    device: str = _f("auto", "local engine device: auto | cpu | cuda | cuda:N")
    laptop_profile: str = _f("auto", "auto (on for the local engine on CPU) | on | off", ("auto", "on", "off"))
    cache_check: str = _f(
        "refuse",
        "engine=verl with trainer.nnodes > 1: training databases whose tool caches are "
        "not built (python -m tools build-cache) refuse | warn | off",
        ("refuse", "warn", "off"),
    )
    node_check: bool = _f(
        True,
        "engine=verl with trainer.nnodes > 1: probe every Ray node first (the sqlagent_rl "
        "plugin and agent loop resolve; databases, run_dir and caches visible)",
    )

    def __post_init__(self) -> None:
        need_choice("engine.name", self.name, engine_names)
        _need(
            self.laptop_profile in ("auto", "on", "off"),
            f"engine.laptop_profile={self.laptop_profile!r}; choose auto, on or off",
        )
        _need(
            self.cache_check in ("refuse", "warn", "off"),
            f"engine.cache_check={self.cache_check!r}; choose refuse, warn or off",
        )


@dataclass
class ModelConfig:
    """``model`` group: the policy's starting weights."""

    path: str | None = _f(None, "HF model directory or hub name; null = the embedded SmolLM2-135M-Instruct")
    autocast: str = _f(
        "auto", "auto (bf16 where native) | bf16 | off; master weights stay fp32", ("auto", "bf16", "off")
    )
    generation_dtype: str = _f(
        "auto",
        "weights generate runs on: auto (a bf16 copy where bf16 is native) | bf16 | fp32",
        ("auto", "bf16", "fp32"),
    )
    decode_attention: str = _f(
        "auto",
        "auto: on CPU, generate with sdpa prefill + plain-matmul one-token decode "
        "(3x faster decode, same math up to bf16 rounding; training/cpu_attention.py) | off",
        ("auto", "off"),
    )
    gradient_checkpointing: bool = _f(False, "trade compute for memory in the update")
    trust_remote_code: bool = _f(False, "passed to transformers from_pretrained")
    attn_implementation: str = _f(
        "sdpa",
        "engine=verl actor attention: sdpa (packed-sequence mask) | "
        "flash_attention_2 (opt-in: needs the flash-attn wheel) | eager",
    )
    context_factor: float | None = _f(
        None,
        "engine=verl: > 1 trains on a derived model directory with YaRN rope "
        "scaling and max_position_embeddings x factor; null = native context",
    )
    base_url: str | None = _f(
        None,
        "eval.run: score an OpenAI-compatible endpoint (http://HOST:PORT/v1) instead "
        "of loading weights; the tokenizer of model.path carries its text",
    )
    name: str | None = _f(None, "the endpoint's served model name (with model.base_url)")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable holding the endpoint's API key")
    concurrency: int = _f(
        32,
        "with model.base_url: requests in flight at once; each episode sends its next turn "
        "as soon as its tool call ran (1 = one request at a time)",
    )
    timeout_s: float = _f(
        300.0, "with model.base_url: seconds one request may take before it is retried (then counted as failed)"
    )

    def __post_init__(self) -> None:
        _need(
            self.attn_implementation in ("sdpa", "flash_attention_2", "eager"),
            f"model.attn_implementation={self.attn_implementation!r}; sdpa, flash_attention_2 or eager",
        )
        _need(
            self.context_factor is None or self.context_factor > 1,
            f"model.context_factor={self.context_factor}: null (native context) or a factor > 1",
        )
        _need(
            self.base_url is None or bool(self.name),
            f"model.base_url={self.base_url!r} needs model.name=<the served model name>",
        )
        _need(
            isinstance(self.concurrency, int) and self.concurrency >= 1,
            f"model.concurrency={self.concurrency!r}: the most requests in flight, a positive integer",
        )
        _need(self.timeout_s > 0, f"model.timeout_s={self.timeout_s}: a positive number of seconds")
        _need(self.autocast in ("auto", "bf16", "off"), f"model.autocast={self.autocast!r}; auto, bf16 or off")
        _need(
            self.generation_dtype in ("auto", "bf16", "fp32"),
            f"model.generation_dtype={self.generation_dtype!r}; auto, bf16 or fp32",
        )
        _need(
            self.decode_attention in ("auto", "off"), f"model.decode_attention={self.decode_attention!r}; auto or off"
        )


@dataclass
class DataConfig:
    """``data`` group (written with eval.data): which examples train and evaluate."""

    kind: str = _f(
        "minibird", "eval.data.load_examples kind: minibird | bird | spider | jsonl (eval.data.KINDS)", data_kind_names
    )
    root: str | None = _f(None, "dataset root; null = the loader's default (minibird builds its own)")
    split: str = _f("train", "split the policy trains on")
    eval_split: str = _f("dev", "held-out split for validation and before/after EX")
    drop_failing_gold: bool = _f(True, "skip examples whose gold SQL fails to execute")
    limit: int | None = _f(None, "use at most this many training examples")
    train_ids: str | None = _f(
        None,
        "a JSON file of training question ids narrowing the split (the RL filter of stage=sft_rl "
        "writes supervised/rl_filter/questions.json); null = the whole split",
    )
    eval_limit: int | None = _f(None, "evaluate on a fixed subset of this many held-out examples")
    ex_metric: str = _f(
        "ex",
        "the dataset's official execution match, used for the reported EX and by the "
        "EX-based reward groups: ex (BIRD: set of rows) | spider (Spider: multiset, "
        "ordered with ORDER BY, column permutation); data=spider sets spider",
    )

    def __post_init__(self) -> None:
        need_choice("data.kind", self.kind, data_kind_names)
        _need(self.ex_metric in EX_RULES, f"data.ex_metric={self.ex_metric!r}; choose one of {', '.join(EX_RULES)}")
        for key in ("limit", "eval_limit"):
            value = getattr(self, key)
            _need(value is None or value >= 1, f"data.{key}={value}: a positive integer or null")
        _need(
            self.split != self.eval_split or self.kind == "jsonl",
            f"data.split and data.eval_split are both {self.split!r}: validation must be held out",
        )


@dataclass
class DynamicSamplingConfig:
    """DAPO dynamic sampling: oversample, keep groups whose reward varies."""

    enable: bool = _f(False, "filter out groups whose metric has zero variance")
    oversample: int = _f(12, "K: draw B*K candidate questions per step")
    metric: str = _f("exec", "reward component (or 'total') whose group std decides")
    min_std: float = _f(1e-6, "keep a group only if std(metric) >= min_std")
    refill: bool = _f(
        False,
        "false: draw B*K once, keep up to B groups, zero-mask the rest (SPEC, the papers); "
        "true: veRL's filter_groups, which draws new batches until B groups are kept",
    )
    return_unkept: str = _f(
        "varying",
        "candidates drawn but not kept, back to the pool (drawn again next): "
        "varying (varied but beyond the B kept) | all (zero-variance too) | none; "
        "local engine (veRL's DAPO filter draws new batches until B are kept)",
    )

    def __post_init__(self) -> None:
        _need(self.oversample >= 1, f"algorithm.dynamic_sampling.oversample={self.oversample}: must be >= 1")
        _need(self.min_std >= 0, f"algorithm.dynamic_sampling.min_std={self.min_std}: must be >= 0")
        _need(
            self.return_unkept in ("none", "varying", "all"),
            f"algorithm.dynamic_sampling.return_unkept={self.return_unkept!r}; choose none, varying or all",
        )


ROLLOUT_IS_LEVELS = ("token", "sequence")


def _is_threshold(value: float | str) -> bool:
    """veRL's thresholds: a number, or ``'lower_upper'`` (two numbers joined by ``_``).

    >>> _is_threshold(2.0), _is_threshold("0.5_2.0"), _is_threshold("abc")
    (True, True, False)
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return True
    parts = str(value).split("_")
    try:
        return len(parts) == 2 and all(float(part) >= 0 for part in parts)
    except ValueError:
        return False


@dataclass
class RolloutCorrectionConfig:
    """Importance-sampling correction for the generation/training mismatch (the local
    engine generates with a bf16 copy and trains fp32 weights; veRL: vLLM vs FSDP). Names
    and defaults are veRL's ``algorithm.rollout_correction`` (off by default there too);
    the local engine calls veRL's own ``compute_rollout_correction_and_rejection_mask``."""

    rollout_is: str | None = _f(None, "IS weight level: token | sequence | null (off)")
    rollout_is_threshold: float | str = _f(
        2.0, "upper clamp of the IS weights (TIS), or 'lower_upper' (IcePop: weights outside are zeroed)"
    )
    rollout_is_batch_normalize: bool = _f(False, "normalise the IS weights to mean 1 over the batch")
    rollout_rs: str | None = _f(
        None,
        "rejection sampling: veRL's options (token_k1, seq_sum_k1, seq_mean_k3, ...; comma separated) or null (off)",
    )
    rollout_rs_threshold: float | str | None = _f(None, "rejection threshold(s); k1 options take 'lower_upper'")

    def __post_init__(self) -> None:
        key = "algorithm.rollout_correction."
        _need(
            _is_threshold(self.rollout_is_threshold),
            f"{key}rollout_is_threshold={self.rollout_is_threshold!r}: expected a number or text "
            "'lower_upper' with two numbers (e.g. 2.0 or '0.5_2.0')",
        )
        _need(
            self.rollout_rs_threshold is None or _is_threshold(self.rollout_rs_threshold),
            f"{key}rollout_rs_threshold={self.rollout_rs_threshold!r}: expected a number or text or null; "
            "text is 'lower_upper' with two numbers (e.g. '0.5_2.0')",
        )
        _need(
            self.rollout_is is None or self.rollout_is in ROLLOUT_IS_LEVELS,
            f"algorithm.rollout_correction.rollout_is={self.rollout_is!r}; choose token, sequence or null",
        )
        _need(
            self.rollout_rs is None or self.rollout_rs_threshold is not None,
            f"algorithm.rollout_correction.rollout_rs={self.rollout_rs!r} needs rollout_rs_threshold "
            "(e.g. '0.5_2.0' for a k1 option)",
        )

    @property
    def enabled(self) -> bool:
        return self.rollout_is is not None or self.rollout_rs is not None


@dataclass
class AlgorithmConfig:
    """GRPO settings shared by both engines."""

    group_size: int = _f(16, "G: trajectories per question (per role for DualSQL)")
    batch_size: int = _f(16, "B: questions per step")
    clip_ratio_low: float = _f(0.2, "epsilon_low of the clipped ratio")
    clip_ratio_high: float = _f(0.28, "epsilon_high (clip-higher)")
    clip_ratio_c: float = _f(3.0, "dual-clip bound for negative advantages (> 1)")
    loss_agg_mode: str = _f("token-mean", "veRL agg_loss mode", LOSS_AGG_MODES)
    mini_batches: int = _f(1, "optimizer steps per rollout buffer (1 = one pass, on-policy)")
    kl_schedule: list[list[float]] = _f([[0, 0.0]], "[[from_step, beta], ...]: beta holds from that step")
    kl_type: str = _f("low_var_kl", "veRL kl_penalty estimator", KL_TYPES)
    entropy_coeff: float = _f(0.0, "entropy bonus coefficient")
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)

    def __post_init__(self) -> None:
        _need(
            isinstance(self.group_size, int) and self.group_size >= 2,
            f"algorithm.group_size={self.group_size}: GRPO needs G >= 2 - the advantage is the "
            "reward minus its group mean, so a group of one has no baseline and learns nothing",
        )
        _need(self.batch_size >= 1, f"algorithm.batch_size={self.batch_size}: must be >= 1")
        _need(0 < self.clip_ratio_low < 1, f"algorithm.clip_ratio_low={self.clip_ratio_low}: in (0, 1)")
        _need(self.clip_ratio_high > 0, f"algorithm.clip_ratio_high={self.clip_ratio_high}: must be > 0")
        _need(self.clip_ratio_c > 1, f"algorithm.clip_ratio_c={self.clip_ratio_c}: must be > 1")
        _need(
            self.loss_agg_mode in LOSS_AGG_MODES,
            f"algorithm.loss_agg_mode={self.loss_agg_mode!r}; choose one of {LOSS_AGG_MODES}",
        )
        _need(self.mini_batches >= 1, f"algorithm.mini_batches={self.mini_batches}: must be >= 1")
        _need(self.kl_type in KL_TYPES, f"algorithm.kl_type={self.kl_type!r}; choose one of {KL_TYPES}")
        from training.kl import KLSchedule

        KLSchedule.from_pairs(self.kl_schedule)  # raises ConfigError with the fix


@dataclass
class RolloutConfig:
    """Sampling and length limits of the rollout driver."""

    temperature: float = _f(1.0, "sampling temperature in training")
    top_p: float = _f(1.0, "nucleus sampling")
    top_k: int = _f(0, "top-k sampling; 0 = off")
    max_new_tokens: int = _f(2048, "tokens per generation call (one turn)")
    max_response_tokens: int = _f(8000, "policy + observation tokens per episode")
    max_prompt_tokens: int = _f(8192, "longer prompts are dropped, never truncated (per design: ReToolSQL 15,500)")
    observation_max_tokens: int | None = _f(
        None,
        "tool observations are cut to this many tokens; null = no "
        "token cap (the tools' own limits) - per design, SPEC 'Turn formats'",
    )
    eval_temperature: float = _f(0.0, "validation / before-after decoding; 0 = greedy")

    def __post_init__(self) -> None:
        _need(self.temperature > 0, f"rollout.temperature={self.temperature}: GRPO samples, use > 0")
        _need(0 < self.top_p <= 1, f"rollout.top_p={self.top_p}: in (0, 1]")
        _need(self.top_k >= 0, f"rollout.top_k={self.top_k}: 0 (off) or positive")
        for key in ("max_new_tokens", "max_response_tokens", "max_prompt_tokens"):
            _need(getattr(self, key) >= 1, f"rollout.{key}={getattr(self, key)}: must be >= 1")
        _need(
            self.observation_max_tokens is None or self.observation_max_tokens >= 1,
            f"rollout.observation_max_tokens={self.observation_max_tokens}: a positive integer or null (no cap)",
        )
        _need(self.eval_temperature >= 0, f"rollout.eval_temperature={self.eval_temperature}: >= 0")


EVAL_MODES = ("greedy", "sample", "sc", "passk")


@dataclass
class EvaluationConfig:
    """The paper's evaluation decoding, per recipe (``python -m eval.run`` uses it; ``eval.*``
    on the command line overrides it). Training's own before/after EX stays greedy."""

    mode: str = _f("greedy", "greedy | sample (one sampled answer) | sc (self-consistency vote) | passk")
    samples: int = _f(16, "answers per question for sc / passk (sample: 1)")
    temperature: float = _f(1.0, "sampling temperature for sample / sc / passk")
    top_p: float = _f(1.0, "nucleus sampling for sample / sc / passk")
    top_k: int = _f(0, "top-k for sample / sc / passk; 0 = off")
    max_new_tokens: int | None = _f(None, "tokens per generation call; null = rollout.max_new_tokens")
    max_response_tokens: int | None = _f(None, "tokens per episode; null = rollout.max_response_tokens")

    def __post_init__(self) -> None:
        _need(self.mode in EVAL_MODES, f"evaluation.mode={self.mode!r}; choose one of {', '.join(EVAL_MODES)}")
        _need(isinstance(self.samples, int) and self.samples >= 1, f"evaluation.samples={self.samples!r}: >= 1")
        _need(self.temperature > 0, f"evaluation.temperature={self.temperature}: > 0 (greedy is mode=greedy)")
        _need(0 < self.top_p <= 1, f"evaluation.top_p={self.top_p}: in (0, 1]")
        _need(self.top_k >= 0, f"evaluation.top_k={self.top_k}: 0 (off) or positive")
        for key in ("max_new_tokens", "max_response_tokens"):
            value = getattr(self, key)
            _need(value is None or value >= 1, f"evaluation.{key}={value}: a positive integer or null")


@dataclass
class OptimConfig:
    """AdamW with linear warmup then constant, and gradient clipping."""

    lr: float = _f(1e-6, "learning rate")
    weight_decay: float = _f(0.01, "AdamW weight decay")
    betas: list[float] = _f([0.9, 0.999], "AdamW betas")
    warmup_ratio: float = _f(0.03, "fraction of total steps with linear warmup")
    grad_clip: float = _f(1.0, "max gradient norm")
    micro_batch_size: int = _f(4, "trajectories per forward/backward (gradient accumulation)")

    def __post_init__(self) -> None:
        _need(self.lr > 0, f"optim.lr={self.lr}: must be > 0")
        _need(0 <= self.warmup_ratio < 1, f"optim.warmup_ratio={self.warmup_ratio}: in [0, 1)")
        _need(self.grad_clip > 0, f"optim.grad_clip={self.grad_clip}: must be > 0")
        _need(self.micro_batch_size >= 1, f"optim.micro_batch_size={self.micro_batch_size}: >= 1")
        _need(len(self.betas) == 2, f"optim.betas={self.betas}: two numbers")


@dataclass
class TrainerConfig:
    """Steps, checkpoints, validation and logging."""

    total_steps: int | None = _f(None, "optimizer steps; null = one epoch over the training split")
    save_every: int = _f(10, "checkpoint every N steps (and at the end)")
    keep_checkpoints: int = _f(2, "how many step checkpoints to keep")
    val_every: int = _f(0, "greedy validation EX every N steps; 0 = only before and after")
    eval_before_after: bool = _f(True, "greedy EX on the held-out subset before and after training")
    project: str = _f("sqlagent-rl", "wandb project")
    save_weights: bool = _f(True, "write model weights into checkpoints")
    shared_run_dir_check: bool = _f(True, "engine=verl with nnodes > 1: refuse a run_dir only this node sees")
    samples_per_step: int = _f(16, "rollouts per step written to samples.jsonl with their masks (0 = none)")

    def __post_init__(self) -> None:
        _need(
            self.total_steps is None or self.total_steps >= 1,
            f"trainer.total_steps={self.total_steps}: a positive integer or null",
        )
        _need(self.save_every >= 1, f"trainer.save_every={self.save_every}: must be >= 1")
        _need(self.keep_checkpoints >= 1, f"trainer.keep_checkpoints={self.keep_checkpoints}: >= 1")
        _need(self.val_every >= 0, f"trainer.val_every={self.val_every}: 0 or positive")
        _need(self.samples_per_step >= 0, f"trainer.samples_per_step={self.samples_per_step}: 0 or positive")


@dataclass
class TrainConfig:
    """The whole project configuration (``recipes/config.yaml``)."""

    recipe_name: str | None = _f(None, "set by recipe=<name>; one of recipes/recipe/*.yaml")
    seed: int = _f(0, "seeds python, numpy and torch")
    dry_run: bool = _f(False, "print the effective configuration and exit")
    resume: bool | str = _f(
        "never", "never | auto | must: what an existing run_dir means (training/run_dir.py); true = auto, false = never"
    )
    fresh: bool = _f(False, "delete run_dir's checkpoints and start over")
    run_dir: str = _f("runs/default", "checkpoints, metrics.jsonl and the wandb run go here")
    logger: list[str] = _f(["console", "wandb"], "console | jsonl | wandb (metrics.jsonl is always written)")
    gpu_backbone: str | None = _f(
        None,
        "hub name engine=verl trains when model.path is null: the recipe's paper "
        "backbone (training/backbones.py); the local engine keeps the embedded model. "
        "Top-level, not in the model group, so model=<group> always wins whole",
    )
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)  # recipes/hardware/, training/hardware.py
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    stage: StageConfig = field(default_factory=StageConfig)
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    laptop: LaptopProfile = field(default_factory=LaptopProfile)
    verl: dict[str, Any] = _f({}, "veRL ppo_trainer overrides for engine=verl (dotted paths allowed)")
    sweep: str | None = _f(None, "the sweep this run belongs to (its wandb group); set by a Hydra multirun")
    ablation: dict[str, Any] = _f({}, "swept key -> this run's value (flat); set by a Hydra multirun")

    def __post_init__(self) -> None:
        recipes = list_recipes()
        _need(self.recipe_name is not None, f"no recipe chosen; run with recipe=<name>, one of: {', '.join(recipes)}")
        _need(self.recipe_name in recipes, f"unknown recipe {self.recipe_name!r}; available: {', '.join(recipes)}")
        bad = [name for name in self.logger if name not in LOGGERS]
        _need(not bad, f"logger={self.logger}: unknown {bad}; choose from {', '.join(LOGGERS)}")
        from training.run_dir import resume_mode

        self.resume = resume_mode(self.resume)
        _need(not (self.resume != "never" and self.fresh), f"resume={self.resume} and fresh=true contradict; pick one")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Convert a composed (resolved) config tree, rejecting unknown keys by name."""
        return _build(cls, dict(data), "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_OPTIONS_GROUPS = {AgentConfig: "options", RewardConfig: "options"}


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``; nested dataclasses recurse."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields or (cls in _OPTIONS_GROUPS and key == _OPTIONS_GROUPS[cls]):
            if cls in _OPTIONS_GROUPS:
                extra[key] = value
                continue
            raise ConfigError(f"unknown config key {prefix}{key!r}; known keys here: {', '.join(sorted(fields))}")
        hint = _type_hints(cls)[key]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{prefix}{key}={value!r}: expected a group of keys "
                    f"({', '.join(f.name for f in dataclasses.fields(hint))}), e.g. {prefix}{key}.<key>=<value>"
                )
            kwargs[key] = _build(hint, dict(value), f"{prefix}{key}.")
        else:
            kwargs[key] = checked_value(f"{prefix}{key}", value, hint, fields[key].metadata.get("choices"))
    if cls in _OPTIONS_GROUPS:
        kwargs[_OPTIONS_GROUPS[cls]] = extra
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"bad config under {prefix or 'root'}: {err}") from err


def to_yaml_tree(cfg: TrainConfig) -> dict[str, Any]:
    """The config as the YAML layout (agent/reward options flattened back into their group)."""
    data = cfg.to_dict()
    data["agent"] = {"name": cfg.agent.name, **cfg.agent.options}
    data["reward"] = {"name": cfg.reward.name, "exec_metric": cfg.reward.exec_metric, **cfg.reward.options}
    return data


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Whole warmup steps for a ratio (0 when the ratio is 0)."""
    return int(math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0
