"""The ``stage`` group and the top-level ``supervised`` block of the typed configuration
(``training.config`` builds them): what a run trains - GRPO, the demonstration warm start
before it, or the papers' supervised stages (``training/supervised/``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from training.config.fields import _f, _need

STAGES = ("rl", "data", "sft", "sft_rl")  # training/supervised/: the supervised stages
CHAINS = ("auto", "mine", "annotate")


@dataclass
class WarmStartConfig:
    """``stage.warm_start``: SFT on demonstrations of the design's protocol before GRPO
    (training/supervised/fine_tune.py). Off in the recipes; the CPU laptop profile turns it on,
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
    ``stage=<name>`` only picks what runs): the papers' supervised stages (training/supervised/): traces from
    the policy and teachers, filters, an SFT dataset, SFT, then (sft_rl) RL."""

    chain: str = _f("auto", "auto (the design's own: agents.designs.Design.supervised_chain) | mine | annotate", CHAINS)
    data: dict[str, Any] | None = _f(
        None,
        "the dataset of the SFT questions (traces, SFT): {kind, root, split, limit, offset, difficulties, "
        "drop_failing_gold, mixture}, as the data group's training side; null = data (RL and SFT share it)",
    )
    questions: int | None = _f(None, "training questions to draw traces for (a seeded fixed subset); null = all")
    samples: int = _f(16, "mine: k samples per question with the current policy (pass@k, bands)")
    temperature: float = _f(1.0, "mine: sampling temperature of the policy")
    teachers: list[dict[str, Any]] = _f(
        [],
        "teachers: {base_url, model, ...} (OpenAI-compatible) or {path} (a local HF model); empty = the policy itself",
    )
    teacher_greedy: bool = _f(True, "one greedy trace per teacher and question")
    teacher_samples: int = _f(4, "sampled traces per teacher and question (0 = none)")
    teacher_temperature: float = _f(0.7, "teachers' sampling temperature")
    privileged: bool | None = _f(None, "teachers see the gold SQL as guidance; null = on for chain=mine")
    leak_filter: bool = _f(True, "drop privileged traces whose reasoning reveals the gold SQL or guidance")
    leak_similarity: float = _f(0.9, "leak filter: normalised SQL at least this alike counts as the gold")
    max_traces_per_question: int | None = _f(
        4, "keep at most this many distinct traces per question; null = every trace that passes the filters"
    )
    dataset: str | None = _f(None, "bring your own SFT JSONL (skips trace collection)")
    drop_phases: list[str] = _f([], "phases removed before SFT (TRUST-SQL ablation: [propose_schema])")
    epochs: int = _f(2, "SFT passes over the dataset")
    lr: float | None = _f(
        None,
        "SFT AdamW learning rate; null = scaled to the backbone (model.path): 2e-5 full / 2e-4 LoRA up "
        "to 15B parameters, 1e-5 / 1e-4 above (training/config/backbone_rules.py)",
    )
    batch_size: int = _f(8, "SFT conversations per optimizer step")
    micro_batch_size: int = _f(2, "SFT conversations per forward/backward")
    warmup_ratio: float = _f(0.1, "SFT warmup share")
    rl_filter: bool = _f(
        False,
        "RL only on questions the SFT policy solves less than rl_filter_pass of "
        "rl_filter_samples times (TRUST-SQL: 6 of 8)",
    )
    rl_filter_samples: int = _f(8, "samples per question for the RL filter")
    rl_filter_pass: int = _f(6, "keep a question for RL when its correct samples < this")
    rl_filter_temperature: float | None = _f(
        None, "the RL filter's sampling temperature; null = rollout.temperature (RL's own)"
    )
    rl_questions: int | None = _f(
        None, "RL questions of stage=sft_rl (before the RL filter): a seeded fixed subset of data's; null = all"
    )
    passk_after: bool = _f(
        False, "pass@k under the SFT policy too (and before SFT on annotate chains): hard questions gained"
    )
    policy_endpoint: dict[str, Any] | None = _f(
        None,
        "mine the initial policy through a served copy of it: "
        "{base_url, model, ...} of an OpenAI-compatible server "
        "(vLLM on GPU); null = the local model",
    )

    @property
    def learning_rate(self) -> float:
        """``lr`` once ``TrainConfig`` has resolved it (a config built whole always has)."""
        if self.lr is None:
            raise ValueError("supervised.lr is resolved by TrainConfig; build the whole config")
        return self.lr

    def __post_init__(self) -> None:
        _need(self.chain in CHAINS, f"supervised.chain={self.chain!r}; choose one of {', '.join(CHAINS)}")
        for key in (
            "samples",
            "epochs",
            "batch_size",
            "micro_batch_size",
            "rl_filter_samples",
        ):
            _need(
                isinstance(getattr(self, key), int) and getattr(self, key) >= 1,
                f"supervised.{key}={getattr(self, key)!r}: a positive integer",
            )
        _need(
            self.max_traces_per_question is None
            or (isinstance(self.max_traces_per_question, int) and self.max_traces_per_question >= 1),
            f"supervised.max_traces_per_question={self.max_traces_per_question!r}: a positive integer or null",
        )
        _need(
            self.questions is None or self.questions >= 1,
            f"supervised.questions={self.questions}: a positive integer or null",
        )
        _need(self.teacher_samples >= 0, f"supervised.teacher_samples={self.teacher_samples}: >= 0")
        _need(
            self.temperature > 0 and self.teacher_temperature > 0,
            "supervised.temperature / teacher_temperature: sampling needs > 0",
        )
        _need(
            (self.lr is None or self.lr > 0) and 0 <= self.warmup_ratio < 1,
            f"supervised.lr={self.lr} (> 0, or null: scaled to the backbone) and "
            f"supervised.warmup_ratio={self.warmup_ratio} (in [0, 1))",
        )
        _need(0 < self.leak_similarity <= 1, f"supervised.leak_similarity={self.leak_similarity}: in (0, 1]")
        _need(
            1 <= self.rl_filter_pass <= self.rl_filter_samples,
            f"supervised.rl_filter_pass={self.rl_filter_pass}: between 1 and rl_filter_samples",
        )
        _need(
            self.policy_endpoint is None
            or (
                isinstance(self.policy_endpoint, Mapping)
                and "base_url" in self.policy_endpoint
                and "model" in self.policy_endpoint
            ),
            f"supervised.policy_endpoint={self.policy_endpoint!r}: give base_url and model (the served "
            "policy, e.g. {base_url: 'http://HOST:8000/v1', model: NAME}) or null",
        )
        if self.data is not None:
            from eval.data.selection import SOURCE_KEYS, training_sources

            allowed = [k for k in SOURCE_KEYS if k != "name"] + ["mixture"]
            unknown = sorted(set(self.data) - set(allowed))
            _need(not unknown, f"supervised.data: unknown key(s) {unknown}; it takes {', '.join(allowed)}")
            training_sources(self.data, "supervised.data")  # its values, refused by name
        _need(
            self.rl_filter_temperature is None or self.rl_filter_temperature > 0,
            f"supervised.rl_filter_temperature={self.rl_filter_temperature}: sampling needs > 0 (or null)",
        )
        _need(
            self.rl_questions is None or self.rl_questions >= 1,
            f"supervised.rl_questions={self.rl_questions}: a positive integer or null",
        )
        for i, teacher in enumerate(self.teachers):
            _need(
                isinstance(teacher, Mapping) and (("base_url" in teacher and "model" in teacher) or "path" in teacher),
                f"supervised.teachers[{i}]={teacher!r}: give base_url + model (an OpenAI-compatible "
                "endpoint) or path (a local HF model)",
            )


@dataclass
class StageConfig:
    """``stage`` group: what this run trains."""

    name: str = _f(
        "rl",
        "rl: GRPO from model.path (or init_from) | data: traces + filters + SFT dataset | "
        "sft: data, then SFT | sft_rl: data, SFT, then RL from the SFT weights",
        STAGES,
    )
    init_from: str | None = _f(None, "start from this checkpoint directory (e.g. an SFT output)")
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)

    def __post_init__(self) -> None:
        _need(self.name in STAGES, f"stage.name={self.name!r}; available stages: {', '.join(STAGES)}")
