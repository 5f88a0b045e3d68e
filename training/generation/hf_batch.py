"""Batched generation with a HF transformers model: left padding, one ``generate`` call
over a chunk of rows (``GenerateCall``), and the plain ``GenerateFn`` that prefills every
prompt whole (``ChunkedGenerate``). ``training.generation.hf.hf_generate`` picks it or the
prefix-reusing one (``training.generation.prefix_reuse``), which builds on these pieces.

Left-padded batched ``generate`` under ``torch.no_grad()`` (not ``inference_mode``:
backward later fails on inference tensors) and bf16 autocast where the hardware runs it
natively; the rollout driver owns turn logic and stop strings, this function only stops
rows early at them when the sampling params carry them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from training.runs.usage import release_free_memory

if TYPE_CHECKING:
    from training.rollout import GenerationOutput, SamplingParams

AutocastDtype = Any  # torch.dtype | None


def autocast_context(device: str, dtype: AutocastDtype) -> contextlib.AbstractContextManager:
    """bf16 autocast on the device, or a no-op when ``dtype`` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.split(":")[0], dtype=dtype)


@dataclass(frozen=True)
class RawGeneration:
    """One row of a batched generate: new token ids, why the row stopped, and the
    generating model's log-prob of each token (raw logits, before temperature / top-p -
    the distribution the training log-probs are computed from, for the IS correction)."""

    token_ids: list[int]
    finish_reason: str  # "stop" (EOS or a stop string) | "length"
    logprobs: list[float] | None = None


def _logprob_recorder() -> Any:
    """A logits processor that records log p(token) of every sampled token.

    transformers runs user processors before its sampling warpers (temperature, top-k,
    top-p), so ``scores`` here are the model's raw logits. At step t+1 the token chosen at
    step t is the last column of ``input_ids``; only one step's log-softmax is kept.
    """
    from transformers import LogitsProcessor

    class Recorder(LogitsProcessor):
        def __init__(self) -> None:
            self.prev: torch.Tensor | None = None  # [batch, vocab]
            self.picked: list[torch.Tensor] = []  # each [batch]

        def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
            if self.prev is not None:
                self.picked.append(self.prev.gather(-1, input_ids[:, -1:]).squeeze(-1))
            self.prev = torch.log_softmax(scores.float(), dim=-1)
            return scores

        def result(self, new_tokens: torch.Tensor) -> torch.Tensor:
            """[batch, new_len] log-probs of ``new_tokens`` ([batch, new_len])."""
            if self.prev is not None and len(self.picked) < new_tokens.shape[1]:
                last = new_tokens[:, len(self.picked) : len(self.picked) + 1].to(self.prev.device)
                self.picked.append(self.prev.gather(-1, last).squeeze(-1))
            if not self.picked:
                return torch.zeros(new_tokens.shape, dtype=torch.float32)
            return torch.stack(self.picked, dim=1)[:, : new_tokens.shape[1]].cpu()

    return Recorder()


def left_pad(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token rows; returns (input_ids, attention_mask), both [batch, max_len]."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)  # [batch, max_len]
    mask = torch.zeros((len(rows), width), dtype=torch.long)  # [batch, max_len]
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(list(row), dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


def batched_generate(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    top_k: int = 0,
    stop: Sequence[str] = (),
    device: str = "cpu",
    autocast: AutocastDtype = None,
    logprobs: bool = False,
) -> list[RawGeneration]:
    """Generate for every prompt at once; temperature 0 means greedy. ``logprobs``: also
    return the generating model's log-prob of each new token."""
    call = GenerateCall(model, tokenizer, max_new_tokens, temperature, top_p, top_k, stop, logprobs)
    ids, mask = left_pad(prompts, call.pad_id)
    out = call.run(device, autocast, input_ids=ids, attention_mask=mask)
    return call.rows(out[:, ids.shape[1] :])


class GenerateCall:
    """One batched ``model.generate`` call: its keyword arguments (sampling, EOS, stop
    strings, the log-prob recorder), the call itself and the rows it returns. Shared by
    the plain path and the prefix-reuse path (``training.generation.prefix_reuse``)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        max_new_tokens: int,
        temperature: float,
        top_p: float,
        top_k: int,
        stop: Sequence[str],
        logprobs: bool,
        growing_cache: bool = True,
    ) -> None:
        self.model, self.tokenizer, self.stop = model, tokenizer, stop
        self.max_new_tokens, self.growing_cache = max_new_tokens, growing_cache
        self.eos_ids = stop_token_ids(model, tokenizer)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        self.kwargs: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "pad_token_id": self.pad_id,
            "eos_token_id": self.eos_ids,
            "do_sample": temperature > 0,
        }
        if temperature > 0:
            self.kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else None)
        else:
            self.kwargs.update(temperature=None, top_p=None, top_k=None)
        if stop:
            self.kwargs.update(stop_strings=list(stop), tokenizer=tokenizer)
        self.recorder = _logprob_recorder() if logprobs else None
        if self.recorder is not None:
            from transformers import LogitsProcessorList

            self.kwargs["logits_processor"] = LogitsProcessorList([self.recorder])

    def run(self, device: str, autocast: AutocastDtype, **inputs: Any) -> Any:
        """``model.generate`` in eval mode under ``no_grad``; tensors in ``inputs`` go to
        ``device``. Returns the sequences, or the whole output when ``inputs`` ask for it
        (``return_dict_in_generate``). Without a cache in ``inputs`` the call gets
        :meth:`cache`'s (``growing_cache=False``: transformers' own, which copies the whole
        cache at every step)."""
        if "past_key_values" not in inputs:
            cache = self.cache(inputs["input_ids"].shape[1] + self.max_new_tokens)
            if cache is not None:
                inputs["past_key_values"] = cache
        inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad(), autocast_context(device, autocast):
                return self.model.generate(**inputs, **self.kwargs)
        finally:
            self.model.train(was_training)

    def cache(self, length: int, data: Sequence[tuple[torch.Tensor, torch.Tensor]] = ()) -> Any:
        """The call's KV cache holding ``data`` (per layer: keys, values): a growing one with
        room for ``length`` columns, or transformers' own when the call (``growing_cache``) or
        the model rules that out (None then if there is nothing to hold: ``generate`` makes it)."""
        from transformers import DynamicCache

        from training.generation.growing_cache import growing_cache

        cache = growing_cache(self.model, length, data) if self.growing_cache else None
        if cache is None and data:
            cache = DynamicCache(ddp_cache_data=data, config=self.model.config)
        return cache

    def rows(self, new_t: torch.Tensor) -> list[RawGeneration]:
        """The rows of ``new_t`` ([batch, new_len], the generated columns), trimmed."""
        rows = [trim_row(row, self.eos_ids, self.pad_id, self.tokenizer, self.stop) for row in new_t.tolist()]
        if self.recorder is None:
            return rows
        lps = self.recorder.result(new_t).tolist()  # [batch, new_len]
        return [
            RawGeneration(r.token_ids, r.finish_reason, lp[: len(r.token_ids)]) for r, lp in zip(rows, lps, strict=True)
        ]


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    gen = getattr(model, "generation_config", None)
    for value in (getattr(gen, "eos_token_id", None), tokenizer.eos_token_id):
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if item is not None and item not in ids:
                ids.append(int(item))
    return ids


def trim_row(row: list[int], eos_ids: Sequence[int], pad_id: int, tokenizer: Any, stop: Sequence[str]) -> RawGeneration:
    """Cut the padding HF writes after a finished row.

    A row ends at its first EOS (kept, as the model generated it) unless the text before
    it already ends with a stop string: then the row was stopped there and what follows
    is padding (pad = EOS for ChatML models).
    """
    end = next((i for i, tok in enumerate(row) if tok in eos_ids or tok == pad_id), None)
    if end is None:
        return RawGeneration(row, "length")
    body = row[:end]
    if stop and body:
        text = tokenizer.decode(body, skip_special_tokens=False)
        if any(text.endswith(s) for s in stop):
            return RawGeneration(body, "stop")
    if row[end] in eos_ids:
        return RawGeneration(body + [row[end]], "stop")
    return RawGeneration(body, "stop")


class ChunkedGenerate:
    """The plain batched ``GenerateFn``: every call prefills each prompt whole."""

    growing_cache = True
    """Generate with :mod:`training.generation.growing_cache` (False: transformers' own cache)."""

    def __init__(self, model: Any, tokenizer: Any, device: str, autocast: Any, chunk: int, logprobs: bool) -> None:
        self.model, self.tokenizer, self.device, self.autocast = model, tokenizer, device, autocast
        self.chunk, self.logprobs = chunk, logprobs

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        from training.rollout import GenerationOutput

        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        out: list[Any] = [None] * len(prompts)
        for start in range(0, len(order), self.chunk):
            idx = order[start : start + self.chunk]
            call = GenerateCall(
                self.model,
                self.tokenizer,
                max_new_tokens=params.max_new_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                top_k=max(params.top_k, 0),
                stop=params.stop,
                logprobs=self.logprobs and params.temperature > 0,
                growing_cache=self.growing_cache,
            )
            rows = self._rows([prompts[i] for i in idx], call)
            for i, row in zip(idx, rows, strict=True):
                out[i] = GenerationOutput(
                    token_ids=row.token_ids, logprobs=row.logprobs, finish_reason=row.finish_reason
                )
        release_free_memory()
        return out

    def _rows(self, prompts: list[list[int]], call: GenerateCall) -> list[RawGeneration]:
        ids, mask = left_pad(prompts, call.pad_id)
        out = call.run(self.device, self.autocast, input_ids=ids, attention_mask=mask)
        return call.rows(out[:, ids.shape[1] :])
