"""The hybrid CPU attention (sdpa prefill, plain-matmul one-token decode) generates
exactly what sdpa generates, left padding included, and leaves other models alone."""

from __future__ import annotations

import copy

import torch

from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.generation.cpu_attention import NAME, use_hybrid_cpu_attention
from training.generation.hf import batched_generate, left_pad


def test_hybrid_decoding_matches_sdpa_greedy_and_logits() -> None:
    tok = tiny_tokenizer()
    model = tiny_model(seed=2).eval()
    rows = [
        tok.encode("SELECT name FROM schools WHERE city = 'Fresno' ORDER BY enrollment"),
        tok.encode("SELECT COUNT(*) FROM satscores"),
    ]
    hybrid = copy.deepcopy(model)
    assert use_hybrid_cpu_attention(hybrid) and hybrid.config._attn_implementation == NAME
    kwargs = dict(max_new_tokens=24, temperature=0.0, device="cpu")
    plain = batched_generate(model, tok, rows, **kwargs)
    fast = batched_generate(hybrid, tok, rows, **kwargs)
    assert [r.token_ids for r in fast] == [r.token_ids for r in plain]
    assert all(len(r.token_ids) > 0 for r in plain)

    # one decode step on a left-padded batch: the same next-token logits
    ids, mask = left_pad(rows, tok.pad_token_id)
    with torch.no_grad():
        a = model(input_ids=ids, attention_mask=mask, use_cache=True)
        b = hybrid(input_ids=ids, attention_mask=mask, use_cache=True)
        step = torch.full((len(rows), 1), 5)
        mask2 = torch.cat([mask, torch.ones_like(step)], 1)
        next_a = model(input_ids=step, attention_mask=mask2, past_key_values=a.past_key_values).logits
        next_b = hybrid(input_ids=step, attention_mask=mask2, past_key_values=b.past_key_values).logits
    assert torch.allclose(next_a, next_b, atol=1e-5)


def test_unsupported_models_keep_their_attention() -> None:
    model = tiny_model(seed=2)
    model.config.sliding_window = 16
    assert not use_hybrid_cpu_attention(model)
    assert model.config._attn_implementation == "sdpa"
