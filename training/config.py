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
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Mapping, Sequence

from tools.errors import ConfigError

EXEC_METRICS = ("ex", "rex", "qatch", "spider")
EX_RULES = ("ex", "spider")  # a dataset's official execution match: BIRD's set rule | Spider's
ADVANTAGE_ESTIMATORS = ("grpo", "two_track")
GROUP_BY = ("role", "question")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "token-sum")
KL_TYPES = ("low_var_kl", "k3", "kl", "k1", "mse", "k2", "abs")
LOGGERS = ("console", "jsonl", "wandb")
STAGES = ("rl", "data", "sft", "sft_rl")  # training/stages/: the supervised stages
CHAINS = ("auto", "mine", "annotate")


def _f(default: Any, help: str, choices: Sequence[Any] | None = None) -> Any:
    """A dataclass field with a help string (TRL's ``GRPOConfig`` style) and, for a field
    with a fixed set of values, ``choices`` (checked with the types in ``_build``)."""
    metadata: dict[str, Any] = {"help": help}
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if isinstance(default, (list, dict)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=default, metadata=metadata)


def list_recipes() -> list[str]:
    """The recipe names: one YAML file per design under ``recipes/recipe/``."""
    folder = resources.files("recipes") / "recipe"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def _need(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


@dataclass
class AgentConfig:
    """``agent`` group: which design drives the episodes, and its options."""

    name: str = _f("retoolsql", "registered agent name (agents.list_agents())")
    options: dict[str, Any] = _f({}, "keyword options for agents.make_agent, from the group file")

    def __post_init__(self) -> None:
        _need(bool(self.name), "agent.name is empty; pick one with agent=<retoolsql|think2sql|trustsql|dualsql>")
        for key, value in self.options.items():
            if "max_turns" in key:
                _need(isinstance(value, int) and value >= 1,
                      f"agent.{key}={value!r}: a turn budget is a positive integer")

    def turn_budget_keys(self) -> list[str]:
        """Option names that are turn budgets (the laptop profile caps them)."""
        return [k for k in self.options if "max_turns" in k]


@dataclass
class RewardConfig:
    """``reward`` group: the reward function and its execution metric."""

    name: str = _f("composite", "registered reward name (training.rewards.list_rewards())")
    exec_metric: str = _f("ex", "execution score inside the reward: ex | rex | qatch", EXEC_METRICS)
    options: dict[str, Any] = _f({}, "other keyword options for training.rewards.get_reward")

    def __post_init__(self) -> None:
        _need(self.exec_metric in EXEC_METRICS,
              f"reward.exec_metric={self.exec_metric!r}; choose one of {', '.join(EXEC_METRICS)}")


@dataclass
class AdvantageConfig:
    """``advantage`` group: how rewards become per-token advantages."""

    estimator: str = _f("grpo", "grpo (one track) | two_track (TRUST-SQL phase-aware)", ADVANTAGE_ESTIMATORS)
    epsilon: float = _f(1e-6, "added to the group std before dividing")
    norm_by_std: bool = _f(True, "divide by the group std (False = Dr.GRPO, mean-centred only)")
    group_by: str = _f("role", "role: one group per (question, role) - DualSQL's linker and "
                               "generator groups; question: one group per question", GROUP_BY)
    clamp: float | None = _f(None, "clamp advantages to +-clamp (TRUST-SQL: 10); null = no clamp")
    schema_weight: float = _f(0.25, "two_track: lambda in loss = lambda*PG_schema + PG_full")
    schema_track: str = _f("schema", "two_track: the reward track normalised on the phase prefix")

    def __post_init__(self) -> None:
        _need(self.estimator in ADVANTAGE_ESTIMATORS,
              f"advantage.estimator={self.estimator!r}; choose one of {', '.join(ADVANTAGE_ESTIMATORS)} "
              "(or the group: advantage=grpo / advantage=two_track)")
        _need(self.group_by in GROUP_BY, f"advantage.group_by={self.group_by!r}; choose one of {GROUP_BY}")
        _need(self.epsilon > 0, f"advantage.epsilon={self.epsilon}: must be > 0 (it guards a division)")
        _need(self.clamp is None or self.clamp > 0, f"advantage.clamp={self.clamp}: positive or null")
        _need(self.schema_weight >= 0, f"advantage.schema_weight={self.schema_weight}: must be >= 0")


@dataclass
class EngineConfig:
    """``engine`` group: where the update runs."""

    name: str = _f("auto", "auto | local | verl; auto picks verl with CUDA + vLLM, else local")
    device: str = _f("auto", "local engine device: auto | cpu | cuda | cuda:N")
    laptop_profile: str = _f("auto", "auto (on for the local engine on CPU) | on | off", ("auto", "on", "off"))

    def __post_init__(self) -> None:
        _need(self.laptop_profile in ("auto", "on", "off"),
              f"engine.laptop_profile={self.laptop_profile!r}; choose auto, on or off")


@dataclass
class ModelConfig:
    """``model`` group: the policy's starting weights."""

    path: str | None = _f(None, "HF model directory or hub name; null = the embedded SmolLM2-135M-Instruct")
    autocast: str = _f("auto", "auto (bf16 where native) | bf16 | off; master weights stay fp32",
                       ("auto", "bf16", "off"))
    generation_dtype: str = _f("auto", "weights generate runs on: auto (a bf16 copy where bf16 is native) | bf16 | fp32",
                               ("auto", "bf16", "fp32"))
    decode_attention: str = _f("auto", "auto: on CPU, generate with sdpa prefill + plain-matmul one-token decode "
                                       "(3x faster decode, same math up to bf16 rounding; training/cpu_attention.py) | off",
                               ("auto", "off"))
    gradient_checkpointing: bool = _f(False, "trade compute for memory in the update")
    trust_remote_code: bool = _f(False, "passed to transformers from_pretrained")
    attn_implementation: str = _f("sdpa", "engine=verl actor attention: sdpa (packed-sequence mask) | "
                                          "flash_attention_2 (opt-in: needs the flash-attn wheel) | eager")
    context_factor: float | None = _f(None, "engine=verl: > 1 trains on a derived model directory with YaRN rope "
                                            "scaling and max_position_embeddings x factor; null = native context")
    base_url: str | None = _f(None, "eval.run: score an OpenAI-compatible endpoint (http://HOST:PORT/v1) instead "
                                    "of loading weights; the tokenizer of model.path carries its text")
    name: str | None = _f(None, "the endpoint's served model name (with model.base_url)")
    api_key_env: str = _f("OPENAI_API_KEY", "environment variable holding the endpoint's API key")

    def __post_init__(self) -> None:
        _need(self.attn_implementation in ("sdpa", "flash_attention_2", "eager"),
              f"model.attn_implementation={self.attn_implementation!r}; sdpa, flash_attention_2 or eager")
        _need(self.context_factor is None or self.context_factor > 1,
              f"model.context_factor={self.context_factor}: null (native context) or a factor > 1")
        _need(self.base_url is None or bool(self.name),
              f"model.base_url={self.base_url!r} needs model.name=<the served model name>")
        _need(self.autocast in ("auto", "bf16", "off"), f"model.autocast={self.autocast!r}; auto, bf16 or off")
        _need(self.generation_dtype in ("auto", "bf16", "fp32"),
              f"model.generation_dtype={self.generation_dtype!r}; auto, bf16 or fp32")
        _need(self.decode_attention in ("auto", "off"), f"model.decode_attention={self.decode_attention!r}; auto or off")


@dataclass
class DataConfig:
    """``data`` group (written with eval.data): which examples train and evaluate."""

    kind: str = _f("minibird", "eval.data.load_examples kind: minibird | bird | spider | jsonl")
    root: str | None = _f(None, "dataset root; null = the loader's default (minibird builds its own)")
    split: str = _f("train", "split the policy trains on")
    eval_split: str = _f("dev", "held-out split for validation and before/after EX")
    drop_failing_gold: bool = _f(True, "skip examples whose gold SQL fails to execute")
    limit: int | None = _f(None, "use at most this many training examples")
    eval_limit: int | None = _f(None, "evaluate on a fixed subset of this many held-out examples")
    ex_metric: str = _f("ex", "the dataset's official execution match, used for the reported EX and by the "
                              "EX-based reward groups: ex (BIRD: set of rows) | spider (Spider: multiset, "
                              "ordered with ORDER BY, column permutation); data=spider sets spider")

    def __post_init__(self) -> None:
        _need(self.ex_metric in EX_RULES, f"data.ex_metric={self.ex_metric!r}; choose one of {', '.join(EX_RULES)}")
        for key in ("limit", "eval_limit"):
            value = getattr(self, key)
            _need(value is None or value >= 1, f"data.{key}={value}: a positive integer or null")
        _need(self.split != self.eval_split or self.kind == "jsonl",
              f"data.split and data.eval_split are both {self.split!r}: validation must be held out")


@dataclass
class WarmStartConfig:
    """``stage.warm_start``: SFT on demonstrations of the design's protocol before GRPO
    (training/warm_start.py). Off in the recipes; the CPU laptop profile turns it on,
    because a 135M model writes no design's format and GRPO then sees only zero rewards."""

    enable: bool = _f(False, "fine-tune on demonstrations before RL (local engine)")
    examples: int = _f(48, "training questions to demonstrate (a seeded fixed subset)")
    epochs: int = _f(1, "passes over the demonstrations")
    lr: float = _f(2.0e-4, "AdamW learning rate (linear warmup, then constant)")
    batch_size: int = _f(4, "demonstrations per optimizer step")
    micro_batch_size: int = _f(2, "demonstrations per forward/backward")
    warmup_ratio: float = _f(0.1, "share of the steps spent warming the learning rate up")
    eval_after: bool = _f(True, "greedy EX on the held-out subset after the warm start")

    def __post_init__(self) -> None:
        for key in ("examples", "epochs", "batch_size", "micro_batch_size"):
            _need(getattr(self, key) >= 1, f"stage.warm_start.{key}={getattr(self, key)}: must be >= 1")
        _need(self.lr > 0, f"stage.warm_start.lr={self.lr}: must be > 0")
        _need(0 <= self.warmup_ratio < 1, f"stage.warm_start.warmup_ratio={self.warmup_ratio}: in [0, 1)")


@dataclass
class SupervisedConfig:
    """``supervised`` (top level, set per design by the recipes; not in the ``stage`` group so that
    ``stage=<name>`` only picks what runs): the papers' supervised stages (training/stages/): traces from
    the policy and teachers, filters, an SFT dataset, SFT, then (sft_rl) RL."""

    chain: str = _f("auto", "auto (retoolsql/dualsql: mine; trustsql/think2sql: annotate) | mine | annotate", CHAINS)
    questions: int | None = _f(None, "training questions to draw traces for (a seeded fixed subset); null = all")
    samples: int = _f(16, "mine: k samples per question with the current policy (pass@k, bands)")
    temperature: float = _f(1.0, "mine: sampling temperature of the policy")
    teachers: list[dict[str, Any]] = _f([], "teachers: {base_url, model, ...} (OpenAI-compatible) or {path} "
                                            "(a local HF model); empty = the policy itself")
    teacher_greedy: bool = _f(True, "one greedy trace per teacher and question")
    teacher_samples: int = _f(4, "sampled traces per teacher and question (0 = none)")
    teacher_temperature: float = _f(0.7, "teachers' sampling temperature")
    privileged: bool | None = _f(None, "teachers see the gold SQL as guidance; null = on for chain=mine")
    leak_filter: bool = _f(True, "drop privileged traces whose reasoning reveals the gold SQL or guidance")
    leak_similarity: float = _f(0.9, "leak filter: normalised SQL at least this alike counts as the gold")
    max_traces_per_question: int = _f(4, "keep at most this many distinct traces per question")
    dataset: str | None = _f(None, "bring your own SFT JSONL (skips trace collection)")
    drop_phases: list[str] = _f([], "phases removed before SFT (TRUST-SQL ablation: [propose_schema])")
    epochs: int = _f(2, "SFT passes over the dataset")
    lr: float = _f(1.0e-4, "SFT AdamW learning rate")
    batch_size: int = _f(8, "SFT conversations per optimizer step")
    micro_batch_size: int = _f(2, "SFT conversations per forward/backward")
    warmup_ratio: float = _f(0.1, "SFT warmup share")
    rl_filter: bool = _f(False, "RL only on questions the SFT policy solves less than rl_filter_pass of "
                                "rl_filter_samples times (TRUST-SQL: 6 of 8)")
    rl_filter_samples: int = _f(8, "samples per question for the RL filter")
    rl_filter_pass: int = _f(6, "keep a question for RL when its correct samples < this")
    passk_after: bool = _f(False, "pass@k under the SFT policy too (and before SFT on annotate chains): "
                                  "hard questions gained")
    policy_endpoint: dict[str, Any] | None = _f(None, "mine the initial policy through a served copy of it: "
                                                      "{base_url, model, ...} of an OpenAI-compatible server "
                                                      "(vLLM on GPU); null = the local model")

    def __post_init__(self) -> None:
        _need(self.chain in CHAINS, f"supervised.chain={self.chain!r}; choose one of {', '.join(CHAINS)}")
        for key in ("samples", "epochs", "batch_size", "micro_batch_size", "max_traces_per_question",
                    "rl_filter_samples"):
            _need(isinstance(getattr(self, key), int) and getattr(self, key) >= 1,
                  f"supervised.{key}={getattr(self, key)!r}: a positive integer")
        _need(self.questions is None or self.questions >= 1,
              f"supervised.questions={self.questions}: a positive integer or null")
        _need(self.teacher_samples >= 0, f"supervised.teacher_samples={self.teacher_samples}: >= 0")
        _need(self.temperature > 0 and self.teacher_temperature > 0,
              "supervised.temperature / teacher_temperature: sampling needs > 0")
        _need(self.lr > 0 and 0 <= self.warmup_ratio < 1, "supervised.lr > 0 and warmup_ratio in [0, 1)")
        _need(0 < self.leak_similarity <= 1, f"supervised.leak_similarity={self.leak_similarity}: in (0, 1]")
        _need(1 <= self.rl_filter_pass <= self.rl_filter_samples,
              f"supervised.rl_filter_pass={self.rl_filter_pass}: between 1 and rl_filter_samples")
        _need(self.policy_endpoint is None or (isinstance(self.policy_endpoint, Mapping)
                                               and "base_url" in self.policy_endpoint
                                               and "model" in self.policy_endpoint),
              f"supervised.policy_endpoint={self.policy_endpoint!r}: give base_url and model (the served "
              "policy, e.g. {base_url: 'http://HOST:8000/v1', model: NAME}) or null")
        for i, teacher in enumerate(self.teachers):
            _need(isinstance(teacher, Mapping) and (("base_url" in teacher and "model" in teacher) or "path" in teacher),
                  f"supervised.teachers[{i}]={teacher!r}: give base_url + model (an OpenAI-compatible "
                  "endpoint) or path (a local HF model)")


@dataclass
class StageConfig:
    """``stage`` group: what this run trains."""

    name: str = _f("rl", "rl: GRPO from model.path (or init_from) | data: traces + filters + SFT dataset | "
                         "sft: data, then SFT | sft_rl: data, SFT, then RL from the SFT weights", STAGES)
    init_from: str | None = _f(None, "start from this checkpoint directory (e.g. an SFT output)")
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)

    def __post_init__(self) -> None:
        _need(self.name in STAGES, f"stage.name={self.name!r}; available stages: {', '.join(STAGES)}")


@dataclass
class DynamicSamplingConfig:
    """DAPO dynamic sampling: oversample, keep groups whose reward varies."""

    enable: bool = _f(False, "filter out groups whose metric has zero variance")
    oversample: int = _f(12, "K: draw B*K candidate questions per step")
    metric: str = _f("exec", "reward component (or 'total') whose group std decides")
    min_std: float = _f(1e-6, "keep a group only if std(metric) >= min_std")
    refill: bool = _f(False, "false: draw B*K once, keep up to B groups, zero-mask the rest (SPEC, the papers); "
                             "true: veRL's filter_groups, which draws new batches until B groups are kept")
    return_unkept: str = _f("varying", "candidates drawn but not kept, back to the pool (drawn again next): "
                                       "varying (varied but beyond the B kept) | all (zero-variance too) | none; "
                                       "local engine (veRL's DAPO filter draws new batches until B are kept)")

    def __post_init__(self) -> None:
        _need(self.oversample >= 1, f"algorithm.dynamic_sampling.oversample={self.oversample}: must be >= 1")
        _need(self.min_std >= 0, f"algorithm.dynamic_sampling.min_std={self.min_std}: must be >= 0")
        _need(self.return_unkept in ("none", "varying", "all"),
              f"algorithm.dynamic_sampling.return_unkept={self.return_unkept!r}; choose none, varying or all")


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
    rollout_is_threshold: float | str = _f(2.0, "upper clamp of the IS weights (TIS), or 'lower_upper' "
                                                "(IcePop: weights outside are zeroed)")
    rollout_is_batch_normalize: bool = _f(False, "normalise the IS weights to mean 1 over the batch")
    rollout_rs: str | None = _f(None, "rejection sampling: veRL's options (token_k1, seq_sum_k1, seq_mean_k3, "
                                      "...; comma separated) or null (off)")
    rollout_rs_threshold: float | str | None = _f(None, "rejection threshold(s); k1 options take 'lower_upper'")

    def __post_init__(self) -> None:
        key = "algorithm.rollout_correction."
        _need(_is_threshold(self.rollout_is_threshold),
              f"{key}rollout_is_threshold={self.rollout_is_threshold!r}: expected a number or text "
              "'lower_upper' with two numbers (e.g. 2.0 or '0.5_2.0')")
        _need(self.rollout_rs_threshold is None or _is_threshold(self.rollout_rs_threshold),
              f"{key}rollout_rs_threshold={self.rollout_rs_threshold!r}: expected a number or text or null; "
              "text is 'lower_upper' with two numbers (e.g. '0.5_2.0')")
        _need(self.rollout_is is None or self.rollout_is in ROLLOUT_IS_LEVELS,
              f"algorithm.rollout_correction.rollout_is={self.rollout_is!r}; choose token, sequence or null")
        _need(self.rollout_rs is None or self.rollout_rs_threshold is not None,
              f"algorithm.rollout_correction.rollout_rs={self.rollout_rs!r} needs rollout_rs_threshold "
              "(e.g. '0.5_2.0' for a k1 option)")

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
        _need(isinstance(self.group_size, int) and self.group_size >= 2,
              f"algorithm.group_size={self.group_size}: GRPO needs G >= 2 - the advantage is the "
              "reward minus its group mean, so a group of one has no baseline and learns nothing")
        _need(self.batch_size >= 1, f"algorithm.batch_size={self.batch_size}: must be >= 1")
        _need(0 < self.clip_ratio_low < 1, f"algorithm.clip_ratio_low={self.clip_ratio_low}: in (0, 1)")
        _need(self.clip_ratio_high > 0, f"algorithm.clip_ratio_high={self.clip_ratio_high}: must be > 0")
        _need(self.clip_ratio_c > 1, f"algorithm.clip_ratio_c={self.clip_ratio_c}: must be > 1")
        _need(self.loss_agg_mode in LOSS_AGG_MODES,
              f"algorithm.loss_agg_mode={self.loss_agg_mode!r}; choose one of {LOSS_AGG_MODES}")
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
    observation_max_tokens: int | None = _f(None, "tool observations are cut to this many tokens; null = no "
                                                  "token cap (the tools' own limits) - per design, SPEC 'Turn formats'")
    eval_temperature: float = _f(0.0, "validation / before-after decoding; 0 = greedy")

    def __post_init__(self) -> None:
        _need(self.temperature > 0, f"rollout.temperature={self.temperature}: GRPO samples, use > 0")
        _need(0 < self.top_p <= 1, f"rollout.top_p={self.top_p}: in (0, 1]")
        _need(self.top_k >= 0, f"rollout.top_k={self.top_k}: 0 (off) or positive")
        for key in ("max_new_tokens", "max_response_tokens", "max_prompt_tokens"):
            _need(getattr(self, key) >= 1, f"rollout.{key}={getattr(self, key)}: must be >= 1")
        _need(self.observation_max_tokens is None or self.observation_max_tokens >= 1,
              f"rollout.observation_max_tokens={self.observation_max_tokens}: a positive integer or null (no cap)")
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
    samples_per_step: int = _f(16, "rollouts per step written to samples.jsonl with their masks (0 = none)")

    def __post_init__(self) -> None:
        _need(self.total_steps is None or self.total_steps >= 1,
              f"trainer.total_steps={self.total_steps}: a positive integer or null")
        _need(self.save_every >= 1, f"trainer.save_every={self.save_every}: must be >= 1")
        _need(self.keep_checkpoints >= 1, f"trainer.keep_checkpoints={self.keep_checkpoints}: >= 1")
        _need(self.val_every >= 0, f"trainer.val_every={self.val_every}: 0 or positive")
        _need(self.samples_per_step >= 0, f"trainer.samples_per_step={self.samples_per_step}: 0 or positive")


@dataclass
class LaptopProfile:
    """CPU demo sizes applied on the local engine (FACTS.md "CPU demo profile").

    Each value replaces the recipe's unless that key was set on the command line; the
    recipe's paper-size numbers stay in the YAML for GPU runs.
    """

    group_size: int = _f(4, "-> algorithm.group_size")
    batch_size: int = _f(2, "-> algorithm.batch_size")
    oversample: int = _f(1, "caps algorithm.dynamic_sampling.oversample (rollouts dominate CPU time)")
    dynamic_sampling_metric: str = _f("total", "-> algorithm.dynamic_sampling.metric (a 135M model "
                                               "rarely gets EX right: exec-filtered groups would all drop)")
    max_turns: int = _f(3, "caps every agent.*max_turns")
    max_new_tokens: int = _f(128, "caps rollout.max_new_tokens")
    observation_max_tokens: int = _f(256, "caps rollout.observation_max_tokens")
    max_response_tokens: int = _f(512, "caps rollout.max_response_tokens")
    max_prompt_tokens: int = _f(4096, "caps rollout.max_prompt_tokens")
    total_steps: int = _f(2, "-> trainer.total_steps")
    save_every: int = _f(2, "-> trainer.save_every")
    val_every: int = _f(0, "-> trainer.val_every")
    eval_limit: int = _f(8, "-> data.eval_limit (the fixed before/after subset; eval.run's count on CPU)")
    eval_mode: str = _f("greedy", "-> evaluation.mode (eval.run on CPU: one greedy answer per question)")
    eval_samples: int = _f(4, "caps evaluation.samples (eval.mode=sc / passk on CPU: 4 answers, not 16)")
    lr: float = _f(1e-5, "-> optim.lr (1e-6 moves a 135M model too little in a few steps)")
    micro_batch_size: int = _f(2, "-> optim.micro_batch_size")
    warm_start: bool = _f(True, "-> stage.warm_start.enable (SFT on demonstrations first: without it "
                                "the 135M model writes no protocol and every reward is 0)")
    warm_start_examples: int = _f(32, "caps stage.warm_start.examples (SFT time grows with prompt length)")
    supervised_questions: int = _f(16, "caps supervised.questions (traces per question cost rollouts)")
    supervised_samples: int = _f(4, "caps supervised.samples and rl_filter_samples (k on CPU)")
    agent_options: dict[str, Any] = _f({}, "agent options set where the agent accepts them "
                                            "(shorter prompts: schema_format=compact, num_few_shot=1)")


@dataclass
class TrainConfig:
    """The whole project configuration (``recipes/config.yaml``)."""

    recipe_name: str | None = _f(None, "set by recipe=<name>; one of recipes/recipe/*.yaml")
    seed: int = _f(0, "seeds python, numpy and torch")
    dry_run: bool = _f(False, "print the effective configuration and exit")
    resume: bool = _f(False, "continue from the latest checkpoint in run_dir")
    fresh: bool = _f(False, "delete run_dir's checkpoints and start over")
    run_dir: str = _f("runs/default", "checkpoints, metrics.jsonl and the wandb run go here")
    logger: list[str] = _f(["console", "wandb"], "console | jsonl | wandb (metrics.jsonl is always written)")
    gpu_backbone: str | None = _f(None, "hub name engine=verl trains when model.path is null: the recipe's paper "
                                        "backbone (training/backbones.py); the local engine keeps the embedded model. "
                                        "Top-level, not in the model group, so model=<group> always wins whole")
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
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
        _need(self.recipe_name is not None,
              f"no recipe chosen; run with recipe=<name>, one of: {', '.join(recipes)}")
        _need(self.recipe_name in recipes,
              f"unknown recipe {self.recipe_name!r}; available: {', '.join(recipes)}")
        bad = [name for name in self.logger if name not in LOGGERS]
        _need(not bad, f"logger={self.logger}: unknown {bad}; choose from {', '.join(LOGGERS)}")
        _need(not (self.resume and self.fresh), "resume=true and fresh=true contradict; pick one")

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> "TrainConfig":
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
            raise ConfigError(
                f"unknown config key {prefix}{key!r}; known keys here: {', '.join(sorted(fields))}"
            )
        hint = _type_hints(cls)[key]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{prefix}{key}={value!r}: expected a group of keys "
                                  f"({', '.join(f.name for f in dataclasses.fields(hint))}), e.g. {prefix}{key}.<key>=<value>")
            kwargs[key] = _build(hint, dict(value), f"{prefix}{key}.")
        else:
            kwargs[key] = checked_value(f"{prefix}{key}", value, hint, fields[key].metadata.get("choices"))
    if cls in _OPTIONS_GROUPS:
        kwargs[_OPTIONS_GROUPS[cls]] = extra
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"bad config under {prefix or 'root'}: {err}") from err


# ----------------------------------------------------------------------------- type checks
# Hydra composes plain YAML, so a value of the wrong type (``resume=maybe``,
# ``trainer.total_steps=abc``) would reach the dataclasses unchecked. Every field is
# checked against its annotation here, so a field added to any dataclass is covered.

class _Mismatch(Exception):
    """A value does not fit a type annotation (turned into a ConfigError by the caller)."""


@functools.lru_cache(maxsize=None)
def _type_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def describe_type(hint: Any) -> str:
    """What a person should write for a field of this annotation.

    >>> describe_type(int | None)
    'an integer or null'
    >>> describe_type(list[list[float]])
    'a list of (a list of (a number))'
    """
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        named = [describe_type(a) for a in args if a is not type(None)]
        return " or ".join(named) + (" or null" if type(None) in args else "")
    if origin is list:
        return f"a list of ({describe_type(args[0])})" if args else "a list"
    if origin is dict or hint is dict:
        return "a mapping of keys to values"
    return {bool: "a boolean (true or false)", int: "an integer", float: "a number", str: "text",
            Any: "any value"}.get(hint, getattr(hint, "__name__", str(hint)))


def checked_value(path: str, value: Any, hint: Any, choices: Sequence[Any] | None = None) -> Any:
    """``value`` conformed to ``hint`` (an int where a float is expected becomes a float,
    a number where text is expected becomes text), or a ConfigError naming the key, the
    expected type and the allowed values."""
    try:
        value = _conform(value, hint)
    except _Mismatch:
        allowed = f"; allowed values: {', '.join(map(str, choices))}" if choices else ""
        raise ConfigError(f"{path}={value!r}: expected {describe_type(hint)}{allowed}") from None
    if choices and value is not None and value not in choices:
        raise ConfigError(f"{path}={value!r}; choose one of {', '.join(map(str, choices))}")
    return value


def _conform(value: Any, hint: Any) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return _conform(value, arg)
            except _Mismatch:
                continue
        raise _Mismatch
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is bool and isinstance(value, bool):
        return value
    if hint is int and number and isinstance(value, int):
        return value
    if hint is float and number:
        return float(value)
    if hint is str and (isinstance(value, str) or number):
        return value if isinstance(value, str) else str(value)
    if origin is list and isinstance(value, (list, tuple)):
        for item in value if args else ():
            _conform(item, args[0])  # checked; items keep their own type ([[0, 0.005]] stays as written)
        return list(value)
    if (origin is dict or hint is dict) and isinstance(value, Mapping):
        return dict(value)
    raise _Mismatch


# ----------------------------------------------------------------------------- laptop profile

def apply_laptop_profile(
    cfg: TrainConfig, explicit: Sequence[str] = ()
) -> tuple[TrainConfig, dict[str, tuple[Any, Any]]]:
    """Return a copy with the laptop sizes applied, and ``{path: (recipe value, new value)}``.

    ``explicit`` holds config paths set on the command line (``algorithm.group_size``):
    those keep the user's value. Caps (turns, lengths) only ever lower a value.
    """
    p = cfg.laptop
    changes: dict[str, tuple[Any, Any]] = {}
    data = cfg.to_dict()

    def put(path: str, value: Any, cap: bool = False) -> None:
        if path in explicit or path.replace(".options.", ".") in explicit:
            return
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        old = node.get(leaf)
        new = min(old, value) if cap and old is not None else value
        if new != old:
            node[leaf] = new
            changes[path.replace(".options.", ".")] = (old, new)

    put("algorithm.group_size", p.group_size)
    put("algorithm.batch_size", p.batch_size)
    put("algorithm.dynamic_sampling.oversample", p.oversample, cap=True)
    if cfg.algorithm.dynamic_sampling.enable:
        put("algorithm.dynamic_sampling.metric", p.dynamic_sampling_metric)
    for key in cfg.agent.turn_budget_keys():
        put(f"agent.options.{key}", p.max_turns, cap=True)
    put("rollout.max_new_tokens", p.max_new_tokens, cap=True)
    put("rollout.observation_max_tokens", p.observation_max_tokens, cap=True)
    put("rollout.max_response_tokens", p.max_response_tokens, cap=True)
    put("rollout.max_prompt_tokens", p.max_prompt_tokens, cap=True)
    put("trainer.total_steps", p.total_steps)
    put("trainer.save_every", p.save_every)
    put("trainer.val_every", p.val_every)
    put("data.eval_limit", p.eval_limit, cap=True)
    put("evaluation.mode", p.eval_mode)
    put("evaluation.samples", p.eval_samples, cap=True)
    put("evaluation.max_new_tokens", p.max_new_tokens, cap=True)
    put("evaluation.max_response_tokens", p.max_response_tokens, cap=True)
    put("optim.lr", p.lr)
    put("optim.micro_batch_size", p.micro_batch_size)
    # the supervised stages replace the demonstration warm start
    put("stage.warm_start.enable", p.warm_start and cfg.stage.name == "rl")
    put("stage.warm_start.examples", p.warm_start_examples, cap=True)
    if cfg.stage.name != "rl":
        put("supervised.questions", p.supervised_questions, cap=True)
        put("supervised.samples", p.supervised_samples, cap=True)
        put("supervised.rl_filter_samples", p.supervised_samples, cap=True)
        put("supervised.rl_filter_pass", max(1, round(cfg.supervised.rl_filter_pass
                                                          * p.supervised_samples / cfg.supervised.rl_filter_samples)),
            cap=True)
    accepted = _agent_option_names(cfg.agent.name)
    options = data["agent"]["options"]
    for key, value in p.agent_options.items():
        old = options.get(key, "(agent default)")
        if key in accepted and f"agent.{key}" not in explicit and old != value:
            options[key] = value
            changes[f"agent.{key}"] = (old, value)
    return _rebuild(data), changes


def _agent_option_names(name: str) -> set[str]:
    """Options the registered agent accepts (empty if the agent is unknown here)."""
    try:
        from agents import agent_options

        return set(agent_options(name))
    except Exception:  # noqa: BLE001 - an unknown agent is reported when the engine builds it
        return set()


def _rebuild(data: dict[str, Any]) -> TrainConfig:
    agent = data["agent"]
    reward = data["reward"]
    flat = dict(data)
    flat["agent"] = {"name": agent["name"], **agent["options"]}
    flat["reward"] = {"name": reward["name"], "exec_metric": reward["exec_metric"], **reward["options"]}
    return TrainConfig.from_mapping(flat)


def to_yaml_tree(cfg: TrainConfig) -> dict[str, Any]:
    """The config as the YAML layout (agent/reward options flattened back into their group)."""
    data = cfg.to_dict()
    data["agent"] = {"name": cfg.agent.name, **cfg.agent.options}
    data["reward"] = {"name": cfg.reward.name, "exec_metric": cfg.reward.exec_metric, **cfg.reward.options}
    return data


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Whole warmup steps for a ratio (0 when the ratio is 0)."""
    return int(math.ceil(total_steps * warmup_ratio)) if warmup_ratio > 0 else 0
