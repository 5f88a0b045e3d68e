"""What the rollout driver takes and gives: sampling parameters, a generation's output, the
generate functions an engine supplies, the token and turn limits, and a request.

The local engine, ``eval.run`` and the veRL agent loop build these; ``training.rollout.episode``
and the loops in ``training.rollout`` read them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from agents.types import Example
from tools.errors import ConfigError

if TYPE_CHECKING:
    from tools import Backend


@dataclass(frozen=True)
class SamplingParams:
    """What one generation call samples with. ``stop`` strings end a turn (EOS is implied);
    the driver adds each episode's own stop strings and sets ``max_new_tokens`` per call."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_new_tokens: int = 512
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    seed: int | None = None


@dataclass(frozen=True)
class GenerationOutput:
    """Generated token ids (EOS included when it was sampled), their sampling log-probs
    when the engine returns them, and ``finish_reason`` ("stop" or "length")."""

    token_ids: list[int]
    logprobs: list[float] | None = None
    finish_reason: str = "stop"


GenerateFn = Callable[[list[list[int]], SamplingParams], list[GenerationOutput]]
"""Batched, synchronous: one output per prompt, in order (the local engine)."""


@runtime_checkable
class CachingGenerate(Protocol):
    """A ``GenerateFn`` that keeps state per row between calls (the KV caches of
    ``training.generation.prefix_reuse``): ``run_episodes`` calls ``retain`` with every
    prompt of a round before generating it (the rest is freed) and ``clear`` when it returns."""

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]: ...

    def retain(self, prompts: Sequence[Sequence[int]]) -> None: ...

    def clear(self) -> None: ...


class GenerateWrapper:
    """A ``GenerateFn`` around another (timing, recording) that passes ``retain`` and
    ``clear`` on to a ``CachingGenerate`` inside, so its caches are still freed."""

    def __init__(self, inner: GenerateFn) -> None:
        self.inner = inner

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        return self.inner(prompts, params)

    def retain(self, prompts: Sequence[Sequence[int]]) -> None:
        if isinstance(self.inner, CachingGenerate):
            self.inner.retain(prompts)

    def clear(self) -> None:
        if isinstance(self.inner, CachingGenerate):
            self.inner.clear()


AsyncGenerateFn = Callable[[list[int], SamplingParams], Awaitable[GenerationOutput]]
"""One prompt, asynchronous (veRL's ``server_manager.generate`` behind an adapter)."""

Request = tuple[Example, "Backend", int]
"""(example, database, sample index within the example's GRPO group)."""


def _positive(name: str, value: int | None) -> None:
    if value is not None and (not isinstance(value, int) or value < 1):
        raise ConfigError(f"RolloutLimits.{name} must be a positive integer or None, got {value!r}")


@dataclass(frozen=True)
class RolloutLimits:
    """Token and turn limits; ``None`` means no limit.

    ``max_turns`` caps turns on top of the agent's own budget (ends "turn_budget");
    ``max_response_tokens`` counts every response token, observations included (ends
    "response_limit"); ``max_context_tokens`` counts prompt + response (ends
    "context_limit"); ``max_tokens_per_turn`` caps one generation call (the turn is handed
    to the agent as generated, e.g. TRUST-SQL's 2,048); ``max_observation_tokens``
    truncates each observation's content (TRUST-SQL: 1,024 in training);
    ``max_prompt_tokens`` ends an over-long prompt before generating (ReToolSQL's 15,500:
    such prompts are dropped, never truncated; the result is flagged ``prompt_too_long``).
    """

    max_turns: int | None = None
    max_response_tokens: int | None = 8192
    max_context_tokens: int | None = 32768
    max_tokens_per_turn: int | None = 2048
    max_observation_tokens: int | None = None
    max_prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _positive(f.name, getattr(self, f.name))
