"""The generation sources: the policy, a local HF model and any OpenAI-compatible chat endpoint.

Every source plays a design's episodes through the same rollout driver
(``training.generation.text_episodes``), so tool calls
always run in *our* tools (never at an endpoint), observations are real, and each
trajectory carries the policy tokenizer's token ids and response masks — the ones SFT
and RL train on:

- ``PolicySource``: a token-level ``GenerateFn`` over the policy's own tokenizer (the
  local engine's batched HF ``generate``); tokens are exact.
- ``LocalChatSource``: any local HF model with *its own* tokenizer and chat template
  (e.g. a bigger teacher); it answers with text.
- ``EndpointSource`` (``training.generation.endpoint``): ``POST {base_url}/chat/completions``
  of any OpenAI-compatible server; it answers with text.

A text answer is re-encoded with the policy tokenizer and fed to the driver as the turn's
tokens (then end-of-turn), exactly how the demonstrations are played
(``training/supervised/demonstrations.py``). A request that fails for good is counted, its
episode dropped: the caller never crashes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agents.types import Example, Message
from training.generation.endpoint import RequestFailed

Transform = Callable[[Example, list[Message]], list[Message]]


class TextSource(Protocol):
    """Answers chat messages with text: ``n`` completions per call, ``None`` for a failed one."""

    name: str

    def complete(self, messages: list[Message], params: Any, n: int) -> list[str | None]: ...


@dataclass
class LocalChatSource:
    """A local HF model with its own tokenizer and chat template, answering with text."""

    model: Any
    tokenizer: Any
    device: str = "cpu"
    name: str = "local"
    chunk: int = 8

    def complete(self, messages: list[Message], params: Any, n: int) -> list[str | None]:
        from training.generation.hf import batched_generate

        prompt = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        ids = list(self.tokenizer.encode(prompt, add_special_tokens=False))
        out: list[str | None] = []
        for start in range(0, n, self.chunk):
            rows = batched_generate(
                self.model,
                self.tokenizer,
                [ids] * min(self.chunk, n - start),
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=max(params.top_k, 0),
                stop=params.stop,
                device=self.device,
            )
            eos = {self.tokenizer.eos_token_id}
            for row in rows:
                body = [t for t in row.token_ids if t not in eos]
                out.append(self.tokenizer.decode(body, skip_special_tokens=True))
        return out


@dataclass
class PolicySource:
    """The policy itself: a token-level ``GenerateFn`` over the policy tokenizer."""

    generate: Any
    name: str = "policy"


Source = TextSource | PolicySource


def ask_source(source: TextSource, messages: list[Message], params: Any, n: int) -> list[str | None]:
    """``n`` completions of one prompt; a failed request gives ``None`` for each (counted, never raised)."""
    try:
        texts = source.complete(messages, params, n)
    except RequestFailed:
        return [None] * n
    return (list(texts) + [None] * n)[:n]
