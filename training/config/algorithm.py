"""The update settings of the typed configuration (``training.config`` builds them): the
``algorithm`` group (GRPO's group and batch sizes, clipping, loss aggregation, KL schedule,
DAPO dynamic sampling, the rollout importance-sampling correction) and the ``optim`` group
(AdamW, warmup, clipping). Both engines read them from here, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from training.config.fields import _f, _need

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum")
KL_TYPES = ("low_var_kl", "k3", "kl", "k1", "mse", "k2", "abs")


@dataclass
class DynamicSamplingConfig:
    """DAPO dynamic sampling: oversample, keep groups whose reward varies."""

    enable: bool = _f(False, "filter out groups whose metric has zero variance")
    oversample: int = _f(12, "K: draw B*K candidate questions per step")
    metric: str = _f("exec", "reward component (or 'total') whose group std decides")
    min_std: float = _f(1e-6, "keep a group only if std(metric) >= min_std")
    refill: bool = _f(
        False,
        "false: draw B*K once, keep up to B groups, zero-mask the rest (the papers); "
        "true: veRL's filter_groups, which draws new batches until B groups are kept",
    )
    return_unkept: str = _f(
        "varying",
        "candidates drawn but not kept, back to the pool (drawn again next): "
        "varying (varied but beyond the B kept) | all (zero-variance too) | none; "
        "both engines with the one draw (refill=false; veRL's filter_groups draws new batches instead)",
    )
    flagged_positive_as_unknown: bool = _f(
        False,
        "a positive execution reward that carries a reward-trust flag (empty or one-row gold, ...; "
        "docs/evaluation.md 'Reward-trust flags') is unknown: it takes no part in deciding whether "
        "its group's metric varies",
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

    group_size: int = _f(16, "G: trajectories per question (per role where a question runs several)")
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
        from training.algorithm.kl import KLSchedule

        KLSchedule.from_pairs(self.kl_schedule)  # raises ConfigError with the fix


@dataclass
class OptimConfig:
    """AdamW with linear warmup then constant, and gradient clipping."""

    lr: float = _f(1e-6, "learning rate")
    weight_decay: float = _f(0.01, "AdamW weight decay")
    betas: list[float] = _f([0.9, 0.999], "AdamW betas")
    warmup_ratio: float = _f(0.03, "fraction of total steps with linear warmup")
    grad_clip: float = _f(1.0, "max gradient norm")
    micro_batch_size: int = _f(4, "trajectories per forward/backward (gradient accumulation)")
    spill_state: bool = _f(
        False,
        "local engine: AdamW's moments wait on disk (run_dir) through each step's rollout and passes, and "
        "the warm start's SFT steps, in memory only for optimizer.step() (1 GiB of RAM on SmolLM2-135M; "
        "the laptop profile turns it on)",
    )
    share_prefix: bool = _f(
        True,
        "local engine: rows whose prompts share a long prefix (a GRPO group, demonstrations behind one "
        "system prompt) train in one packed pass with the prefix computed once, where its cost model says "
        "that is cheaper (training/engines/local/logprobs/shared_prefix.py); the same log-probs and gradients",
    )

    def __post_init__(self) -> None:
        _need(self.lr > 0, f"optim.lr={self.lr}: must be > 0")
        _need(0 <= self.warmup_ratio < 1, f"optim.warmup_ratio={self.warmup_ratio}: in [0, 1)")
        _need(self.grad_clip > 0, f"optim.grad_clip={self.grad_clip}: must be > 0")
        _need(self.micro_batch_size >= 1, f"optim.micro_batch_size={self.micro_batch_size}: >= 1")
        _need(len(self.betas) == 2, f"optim.betas={self.betas}: two numbers")


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Whole warmup steps for a ratio (0 when the ratio is 0)."""
    return int(math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0
