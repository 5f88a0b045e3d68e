"""The decoding settings of the typed configuration (``training.config`` builds them): how
training rollouts sample and how long they may run (``rollout``), and the paper's evaluation
decoding per recipe (``evaluation``).
"""

from __future__ import annotations

from dataclasses import dataclass

from training.config.fields import _f, _need


@dataclass
class RolloutConfig:
    """Sampling and length limits of the rollout driver."""

    temperature: float = _f(1.0, "sampling temperature in training")
    top_p: float = _f(1.0, "nucleus sampling")
    top_k: int = _f(0, "top-k sampling; 0 = off")
    max_new_tokens: int = _f(2048, "tokens per generation call (one turn)")
    max_response_tokens: int = _f(8000, "policy + observation tokens per episode")
    max_prompt_tokens: int = _f(8192, "longer prompts are dropped, never truncated (each recipe sets its paper's)")
    generation_rows: int | None = _f(
        None, "local engine: rows one batched generate call runs at a time; null = 4 x optim.micro_batch_size"
    )
    observation_max_tokens: int | None = _f(
        None,
        "tool observations are cut to this many tokens; null = no "
        "token cap (the tools' own limits) - per design, docs/designs.md 'Turn formats'",
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
        _need(
            self.generation_rows is None or self.generation_rows >= 1,
            f"rollout.generation_rows={self.generation_rows}: a positive integer or null (4 x optim.micro_batch_size)",
        )


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
