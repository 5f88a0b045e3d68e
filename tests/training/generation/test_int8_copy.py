"""The int8 generation copy (training/generation/int8_copy.py): which layers it quantises,
how close it stays to the fp32 policy, its in-place refresh after an update, when ``auto``
picks it, and a local training step that samples from it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

from agents.types import Example
from tests.helpers.local_trainer import config, tiny_inputs
from tests.helpers.tiny_model import tiny_model
from tools.errors import ConfigError
from training.engines.local import policy_models as P
from training.engines.local.trainer import LocalTrainer
from training.generation.cpu_attention import NAME as HYBRID
from training.generation.int8_copy import int8_generation_copy, is_int8_copy, quantised_names, refresh_int8_copy


def _logits(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def _kl(ref: torch.Tensor, other: torch.Tensor) -> float:
    lp, lq = torch.log_softmax(ref, -1), torch.log_softmax(other, -1)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def test_attention_and_mlp_inputs_are_int8_while_down_projections_and_the_head_stay_fp32() -> None:
    model = tiny_model()
    gen = int8_generation_copy(model)
    quantised = {n for n, m in gen.named_modules() if isinstance(m, DynamicLinear)}
    assert quantised == set(quantised_names(model))
    assert {n.rsplit(".", 1)[-1] for n in quantised} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj"}
    assert all(isinstance(gen.get_submodule(n), torch.nn.Linear) for n, _ in model.named_modules() if "down_proj" in n)
    assert isinstance(gen.lm_head, torch.nn.Linear) and gen.lm_head.weight.dtype == torch.float32
    assert not any(p.requires_grad for p in gen.parameters()) and not gen.training
    assert model.model.layers[0].self_attn.q_proj.weight.dtype == torch.float32  # the policy is untouched


def test_the_copy_follows_the_policy_after_an_update_in_place() -> None:
    model = tiny_model()
    gen = int8_generation_copy(model)
    ids = torch.randint(3, 500, (2, 24))
    before = _logits(gen, ids)
    with torch.no_grad():  # an "optimizer step" on every weight
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    same_object = gen
    refresh_int8_copy(gen, model)
    assert gen is same_object  # a generate function built on the copy stays valid
    after = _logits(gen, ids)
    assert not torch.allclose(before, after)
    assert torch.equal(after, _logits(int8_generation_copy(model), ids))  # = a fresh copy of the new weights
    assert _kl(_logits(model, ids), after) < 0.05


@pytest.mark.slow
def test_the_embedded_models_int8_copy_agrees_with_fp32_on_a_sql_prompt() -> None:
    """SmolLM2-135M (the embedded default): greedy next tokens and the KL to fp32, the
    figures the module's docstring states (0.924 agreement, 0.114 nats per token)."""
    from training.generation.loading import load_model

    loaded = load_model(None, say=lambda _: None)
    model = loaded.model.float().eval()
    text = (
        "CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER);\n"
        "Question: How many singers are from France? Write SQL.\n"
        "SELECT count(*) FROM singer WHERE country = 'France';\n"
    ) * 8
    ids = torch.tensor([loaded.tokenizer(text).input_ids[:500]])
    ref, q = _logits(model, ids), _logits(int8_generation_copy(model), ids)
    agreement = float((ref.argmax(-1) == q.argmax(-1)).float().mean())
    assert agreement > 0.9, agreement
    assert _kl(ref, q) < 0.2


def test_auto_picks_int8_only_on_a_cpu_without_native_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    import training.generation.loading as loading

    monkeypatch.setattr(loading, "autocast_dtype", lambda device: torch.bfloat16)
    assert P.generation_kind("auto", "cpu") == "bf16"
    monkeypatch.setattr(loading, "autocast_dtype", lambda device: None)
    assert P.generation_kind("auto", "cpu") == "int8"
    assert P.generation_kind("auto", "cuda") == "fp32"
    assert P.generation_kind("fp32", "cpu") == "fp32"
    with pytest.raises(ConfigError, match=r"generation_dtype=int8 on cuda.*auto or bf16"):
        P.generation_kind("int8", "cuda")
    model = tiny_model()
    gen = P.generation_copy(model, "cpu", "auto", "auto")
    assert is_int8_copy(gen)
    # the copy decodes with the hybrid CPU attention, as the bf16 copy does; the policy keeps sdpa
    assert gen.config._attn_implementation == HYBRID and model.config._attn_implementation == "sdpa"
    assert P.generation_copy(model, "cpu", "int8", "off").config._attn_implementation == "sdpa"
    assert P.generation_copy(model, "cpu", "fp32", "auto") is model


@pytest.mark.slow
def test_a_training_step_samples_from_the_int8_copy_and_logs_the_mismatch(
    tmp_path: Path, examples: list[Example]
) -> None:
    cfg = config(
        "think2sql",
        tmp_path,
        "algorithm.dynamic_sampling.enable=false",
        "rollout.max_new_tokens=8",
        "rollout.max_response_tokens=64",
        "model.generation_dtype=int8",
        "model.autocast=off",
    )
    said: list[str] = []
    t = LocalTrainer(cfg, tiny_inputs(examples, examples[:2]), say=said.append)
    assert is_int8_copy(t.gen_model) and t.gen_model is not t.model
    assert any("generation copy int8" in line for line in said), said
    ids = torch.randint(3, 500, (1, 16))
    metrics = t.train_step()
    assert metrics["rollout_corr/kl"] != 0.0  # int8 sampling vs fp32 training: a real mismatch
    assert metrics["rollout_corr/training_ppl"] > 0
    # after the optimizer step the copy was re-quantised from the new fp32 weights
    assert torch.equal(_logits(t.gen_model, ids), _logits(int8_generation_copy(t.model), ids))
