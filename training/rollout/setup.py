"""The rollout set-up shared by the local engine and ``eval.run``, written once.

- ``sampling_params`` / ``rollout_limits``: the rollout driver's ``SamplingParams`` and
  ``RolloutLimits`` from the configured numbers (the context rule: prompt cap + response
  cap, never more than the model's context);
- ``hf_generate``: the batched ``GenerateFn`` over a HF model (prompts sorted by length,
  generated in chunks of similar length);
- ``fixed_subset``: the seeded subset of questions (held-out EX, the warm start's and the
  supervised chain's questions, ``eval.run``'s ``eval.limit``).

The autocast choice is ``training.generation.loading.autocast_for``. Nothing here imports torch or
transformers at module level, so ``eval.run`` reads it without loading either.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from training.rollout import RolloutLimits, SamplingParams

T = TypeVar("T")


def sampling_params(
    temperature: float, top_p: float = 1.0, top_k: int = 0, max_new_tokens: int = 512
) -> SamplingParams:
    """What every generation call samples with; ``top_k`` <= 0 means no top-k (-1 for the driver).

    >>> sampling_params(0.0, top_k=0, max_new_tokens=64).top_k
    -1
    """
    from training.rollout import SamplingParams

    return SamplingParams(
        temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else -1, max_new_tokens=max_new_tokens
    )


def context_tokens(max_prompt_tokens: int, max_response_tokens: int, model_context: int | None) -> int:
    """Prompt cap + response cap, never more than the model's context (so no generation asks
    for more than context - prompt: the rollout driver bounds every call by what is left).

    >>> context_tokens(4096, 2048, None), context_tokens(4096, 2048, 5000)
    (6144, 5000)
    """
    context = max_prompt_tokens + max_response_tokens
    return min(context, model_context) if model_context else context


def rollout_limits(
    max_prompt_tokens: int,
    max_response_tokens: int,
    max_new_tokens: int,
    observation_max_tokens: int | None,
    model_context: int | None,
) -> RolloutLimits:
    """The rollout driver's limits: ``max_new_tokens`` per generation call, the response and
    prompt caps, the context of ``context_tokens``, observations cut to their token cap."""
    from training.rollout import RolloutLimits

    return RolloutLimits(
        max_response_tokens=max_response_tokens,
        max_context_tokens=context_tokens(max_prompt_tokens, max_response_tokens, model_context),
        max_tokens_per_turn=max_new_tokens,
        max_observation_tokens=observation_max_tokens,
        max_prompt_tokens=max_prompt_tokens,
    )


def model_context(model_config: Any) -> int | None:
    """A HF config's ``max_position_embeddings`` (None when it has none)."""
    value = getattr(model_config, "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def fixed_subset(examples: Sequence[T], limit: int | None, seed: int) -> list[T]:
    """A deterministic subset (seeded shuffle, then the first ``limit``), in the original order.

    >>> fixed_subset(list(range(20)), 5, 0)
    [1, 14, 15, 16, 17]
    """
    import torch

    items = list(examples)
    if limit is None or limit >= len(items):
        return items
    gen = torch.Generator().manual_seed(seed + 1234)
    picked = torch.randperm(len(items), generator=gen)[:limit].tolist()
    return [items[i] for i in sorted(picked)]
