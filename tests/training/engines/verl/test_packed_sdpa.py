"""Packed-sequence sdpa gives the same log-probs as one sequence at a time (CPU, tiny model).

The verl engine's actor runs with ``use_remove_padding=True`` and, by default, sdpa
attention (flash-attn is an opt-in): veRL's FSDP engine then calls the model on ONE row
holding every sequence of a micro-batch back to back, ``attention_mask=None`` and
``position_ids`` restarting at 0 for each sequence (``transformer_impl.py``, the
``use_remove_padding`` branch). transformers turns those position ids into a
block-diagonal causal mask for sdpa. This test feeds the tiny model exactly that input and
compares each sequence's token log-probs with a forward pass over the sequence alone.

``use_cache=False`` matters: transformers builds the packed mask only without a KV
cache, and a model called with its default ``use_cache=True`` creates one; veRL's FSDP
engine passes ``use_cache=False`` (``transformer_impl.py``, ``forward_step``).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers.tiny_model import tiny_model


def token_logprobs(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """log p(ids[t+1] | ids[:t+1]) for each position t."""  # logits [T, V], ids [T] -> [T-1]
    return torch.log_softmax(logits[:-1].float(), dim=-1).gather(-1, ids[1:, None]).squeeze(-1)


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    m = tiny_model(seed=0)
    m.config._attn_implementation = "sdpa"  # what model.override_config.attn_implementation=sdpa sets
    return m.eval()


def packed_inputs(seqs: list[torch.Tensor], restart: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    ids = torch.cat(seqs)[None]  # [1, total_nnz]
    if restart:  # veRL's position_ids_rmpad: 0..len-1 for every sequence
        pos = torch.cat([torch.arange(len(s)) for s in seqs])[None]  # [1, total_nnz]
    else:
        pos = torch.arange(ids.shape[1])[None]  # [1, total_nnz]
    return ids, pos


def test_packed_sdpa_logprobs_equal_per_sequence_logprobs(model: torch.nn.Module) -> None:
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    seqs = [torch.randint(0, vocab, (n,), generator=gen) for n in (37, 5, 64, 18)]
    ids, pos = packed_inputs(seqs)
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[
            0
        ]  # [total_nnz, V]
        start = 0
        for seq in seqs:
            alone = model(input_ids=seq[None]).logits[0]  # [len, V]
            got = token_logprobs(packed[start : start + len(seq)], seq)
            want = token_logprobs(alone, seq)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            start += len(seq)


def test_without_restarting_positions_the_sequences_would_see_each_other(model: torch.nn.Module) -> None:
    """The controls: the same packed row with running positions is one long causal sequence,
    and with a KV cache transformers skips the packed mask; either way the second sequence's
    log-probs change - the equality above comes from the packed mask."""
    gen = torch.Generator().manual_seed(1)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=gen) for n in (20, 20)]
    ids, pos = packed_inputs(seqs, restart=False)
    with torch.no_grad():
        leaked = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[0, 20:]
        alone = model(input_ids=seqs[1][None]).logits[0]
        ids, pos = packed_inputs(seqs)
        cached = model(input_ids=ids, position_ids=pos, attention_mask=None).logits[0, 20:]  # use_cache=True
    assert not torch.allclose(token_logprobs(leaked, seqs[1]), token_logprobs(alone, seqs[1]), atol=1e-3)
    assert not torch.allclose(token_logprobs(cached, seqs[1]), token_logprobs(alone, seqs[1]), atol=1e-3)


def test_packed_gradients_match(model: torch.nn.Module) -> None:
    """The update sees the same gradient packed as unpacked (the loss is a sum over sequences)."""
    gen = torch.Generator().manual_seed(2)
    seqs = [torch.randint(0, model.config.vocab_size, (n,), generator=gen) for n in (11, 29)]
    ids, pos = packed_inputs(seqs)
    model.zero_grad()
    logits = model(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[0]
    packed_loss = token_logprobs(logits[:11], seqs[0]).sum() + token_logprobs(logits[11:], seqs[1]).sum()
    packed_loss.backward()
    packed_grad = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    loss = sum(token_logprobs(model(input_ids=s[None]).logits[0], s).sum() for s in seqs)
    loss.backward()
    for name, param in model.named_parameters():
        if param.grad is not None:
            torch.testing.assert_close(packed_grad[name], param.grad, rtol=1e-4, atol=1e-5, msg=name)
    model.zero_grad()


def actor_module(model_dir: str, attn: str) -> torch.nn.Module:
    """The actor's model as veRL's FSDP engine builds it: ``HFModelConfig`` from the
    engine's config (``override_config.attn_implementation``), then the auto class's
    ``from_pretrained`` with that config (``transformer_impl.FSDPEngine._build_module``)."""
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.model import get_hf_auto_model_class

    from training.engines.verl.config.translate import VerlSettings, build_verl_config

    settings = VerlSettings(
        model_path=model_dir,
        train_files="t",
        val_files="v",
        agent="trustsql",
        reward="trustsql",
        attn_implementation=attn,
    )
    model_config = omega_conf_to_dataclass(build_verl_config(settings).actor_rollout_ref.model)
    auto_class = get_hf_auto_model_class(hf_config=model_config.hf_config)
    return auto_class.from_pretrained(model_config.local_path, config=model_config.hf_config, dtype=torch.float32)


@pytest.mark.slow
def test_the_actor_loads_with_the_engines_default_attention_without_flash_attn(tmp_path) -> None:
    """Defect 2 of issue 10: veRL defaults to flash_attention_2, which ``.[gpu]`` does not
    install; the engine's default (sdpa) loads, and its packed forward is exact."""
    import importlib.util

    from tests.helpers.tiny_model import tiny_tokenizer

    model_dir = tmp_path / "policy"
    tiny_model().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    actor = actor_module(str(model_dir), "sdpa").eval()
    assert actor.config._attn_implementation == "sdpa"
    seqs = [torch.arange(3, 30), torch.arange(40, 52)]
    ids, pos = packed_inputs(seqs)
    with torch.no_grad():
        packed = actor(input_ids=ids, position_ids=pos, attention_mask=None, use_cache=False).logits[0, 27:]
        alone = actor(input_ids=seqs[1][None]).logits[0]
    torch.testing.assert_close(token_logprobs(packed, seqs[1]), token_logprobs(alone, seqs[1]), rtol=1e-5, atol=1e-5)
    if importlib.util.find_spec("flash_attn") is None:  # veRL's own default fails on such an install
        with pytest.raises(ImportError, match="FlashAttention2"):
            actor_module(str(model_dir), "flash_attention_2")
