"""The KV cache that grows in place (training/generation/growing_cache.py) against
transformers' concatenating cache: the same greedy tokens and sampled log-probs over
multi-turn rollouts (plain and prefix-reuse paths, sdpa and the hybrid CPU decode
attention), decode steps that write into one buffer, and caches changed from outside
(cropped, rows selected) continued correctly."""

from __future__ import annotations

import copy

import pytest
import torch

from tests.helpers.lively_model import lively_model
from tests.helpers.scripted_rollout import TOK
from tests.helpers.tiny_model import tiny_model
from tests.training.generation.test_prefix_reuse import LIMITS, REQUESTS, TurnsAgent, windowed_model
from training.generation.cpu_attention import use_hybrid_cpu_attention
from training.generation.growing_cache import GROW_TOKENS, GrowingLayer, growing_cache
from training.generation.hf import hf_generate
from training.rollout import SamplingParams, run_episodes


def _rollout(model, reuse: bool, growing: bool, temperature: float, seed: int = 0):  # type: ignore[no-untyped-def]
    generate = hf_generate(model, TOK, chunk=3, logprobs=True, prefix_reuse=reuse)
    generate.growing_cache = growing  # type: ignore[attr-defined]
    torch.manual_seed(seed)
    agent = TurnsAgent(("linker", "generator"))
    return run_episodes(agent, REQUESTS, TOK, generate, SamplingParams(temperature=temperature), LIMITS)


@pytest.mark.parametrize("reuse", [False, True], ids=["plain", "prefix_reuse"])
@pytest.mark.parametrize("attention", ["sdpa", "hybrid"])
def test_rollouts_equal_those_of_transformers_own_cache(reuse: bool, attention: str) -> None:
    greedy_model, sampling_model = lively_model(), tiny_model()
    if attention == "hybrid":  # one-token decode attention as plain matmuls over the cache's views
        greedy_model, sampling_model = copy.deepcopy(greedy_model).eval(), copy.deepcopy(sampling_model).eval()
        assert use_hybrid_cpu_attention(greedy_model) and use_hybrid_cpu_attention(sampling_model)
    own = _rollout(greedy_model, reuse, growing=False, temperature=0.0)
    grown = _rollout(greedy_model, reuse, growing=True, temperature=0.0)
    assert len({tuple(t.response_ids) for t in own}) > 4  # greedy text that depends on the conversation
    assert [t.response_ids for t in grown] == [t.response_ids for t in own]
    own = _rollout(sampling_model, reuse, growing=False, temperature=1.0, seed=3)
    grown = _rollout(sampling_model, reuse, growing=True, temperature=1.0, seed=3)
    assert [t.response_ids for t in grown] == [t.response_ids for t in own]  # same draws from the same logits
    for a, b in zip(own, grown, strict=True):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-6)


def test_a_generate_call_decodes_into_one_buffer() -> None:
    """Sized for the call, every decode step writes its column in place: the layer's keys
    stay views of one buffer and equal what concatenation would have built."""
    model = lively_model().eval()
    prompt = torch.tensor([TOK.encode("SELECT name FROM schools WHERE")])  # [1, n]
    cache = growing_cache(model, prompt.shape[1] + 6)
    assert cache is not None and all(type(layer) is GrowingLayer for layer in cache.layers)
    buffers: set[int] = set()

    def watch(layer: GrowingLayer) -> None:
        real = layer.update

        def update(k, v, *a, **kw):  # type: ignore[no-untyped-def]
            out = real(k, v, *a, **kw)
            buffers.add(layer._buffers[0].data_ptr())  # type: ignore[index]
            return out

        layer.update = update  # type: ignore[method-assign]

    watch(cache.layers[0])  # type: ignore[arg-type]
    with torch.no_grad():
        out = model.generate(prompt, past_key_values=cache, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        own = model.generate(prompt, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert out.tolist() == own.tolist()
    assert len(buffers) == 1  # the prefill allocated it, the decode steps wrote into it
    keys = cache.layers[0].keys
    assert keys.shape[-2] == prompt.shape[1] + 5 and keys.data_ptr() == next(iter(buffers))


def _kv(length: int, batch: int = 2, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, length, 4, generator=g), torch.randn(batch, 3, length, 4, generator=g)


def test_a_layer_past_its_size_grows_and_keeps_its_columns() -> None:
    layer = GrowingLayer(length=6)
    parts = [_kv(5, seed=0), _kv(1, seed=1), _kv(1, seed=2), _kv(3, seed=3)]
    for k, v in parts:
        layer.update(k, v)
    assert layer.keys.shape[-2] == 10 and layer._buffers[0].shape[-2] == 7 + GROW_TOKENS  # type: ignore[index]  # grown at the 7th
    assert torch.equal(layer.keys, torch.cat([k for k, _ in parts], dim=-2))
    assert torch.equal(layer.values, torch.cat([v for _, v in parts], dim=-2))


def test_a_cropped_or_reselected_layer_continues_from_what_it_holds() -> None:
    layer = GrowingLayer(length=32)
    (k0, v0), (k1, v1), (k2, v2) = _kv(8, seed=0), _kv(1, seed=1), _kv(1, seed=2)
    layer.update(k0, v0)
    layer.crop(5)  # a view of the buffer's first 5 columns: continued in place
    buffer = layer._buffers[0].data_ptr()  # type: ignore[index]
    layer.update(k1, v1)
    assert layer._buffers[0].data_ptr() == buffer  # type: ignore[index]
    assert torch.equal(layer.keys, torch.cat([k0[:, :, :5], k1], dim=-2))
    layer.batch_select_indices(torch.tensor([1]))  # new tensors: the next update starts a new buffer
    layer.update(k2[1:], v2[1:])
    assert layer.keys.shape == (1, 3, 7, 4)
    assert torch.equal(layer.keys, torch.cat([k0[1:, :, :5], k1[1:], k2[1:]], dim=-2))
    assert torch.equal(layer.values, torch.cat([v0[1:, :, :5], v1[1:], v2[1:]], dim=-2))


def test_models_with_sliding_windows_keep_transformers_cache() -> None:
    assert growing_cache(windowed_model(), 64) is None
    assert growing_cache(tiny_model(), 64) is not None
