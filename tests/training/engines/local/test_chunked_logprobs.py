"""The chunked LM-head path of ``response_log_probs`` against the model's own forward.

Same log-probs, entropies and gradients as the plain path (full logits through the model's
forward), with several chunks per batch, rows of different lengths, bf16 autocast, a LoRA
model; and models whose head is not plain keep the plain path.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.tiny_model import tiny_model
from training.engines.local import chunked_logprobs as chunked
from training.engines.local import loss as lp

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
RESPONSES = [[20, 21, 22], [23, 24, 25, 26, 27, 28, 29], [30]]


def batch() -> lp.PolicyBatch:
    masks = [[1.0] * len(r) for r in RESPONSES]
    return lp.build_policy_batch(PROMPTS, RESPONSES, {"full": masks}, {"full": [1.0, -1.0, 0.5]}, 0)


def run(fn: Any, model: Any, autocast: Any = None, entropy_grad: bool = False) -> tuple[torch.Tensor, ...]:
    """Log-probs, entropy and the gradient of a loss built from both, through ``fn``."""
    model.zero_grad(set_to_none=True)
    logp, entropy = fn(model, batch(), "cpu", autocast, with_entropy=True, entropy_grad=entropy_grad)
    loss = -(logp * torch.linspace(0.5, 1.5, logp.shape[1])).sum()
    if entropy_grad:
        loss = loss - 0.1 * entropy.sum()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), entropy.detach(), grads


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chunked, "CHUNK_POSITIONS", 4)  # 11 response tokens: three chunks


def test_tiny_qwen2_takes_the_chunked_path() -> None:
    assert chunked.plain_head(tiny_model()) is not None


@pytest.mark.parametrize("entropy_grad", [False, True])
def test_fp32_log_probs_entropy_and_gradients_equal_the_plain_path(entropy_grad: bool) -> None:
    model = tiny_model()
    want = run(lp.plain_response_log_probs, model, entropy_grad=entropy_grad)
    got = run(lp.response_log_probs, model, entropy_grad=entropy_grad)
    valid = want[0] != 0
    assert valid.sum() == sum(len(r) for r in RESPONSES)
    assert torch.equal(got[0] != 0, valid)  # zero beyond each response, as before
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[2], want[2], atol=1e-5, rtol=1e-4)


def test_bf16_autocast_agrees_with_the_plain_path() -> None:
    model = tiny_model()
    want = run(lp.plain_response_log_probs, model, autocast=torch.bfloat16)
    got = run(lp.response_log_probs, model, autocast=torch.bfloat16)
    torch.testing.assert_close(got[0], want[0], atol=2e-2, rtol=2e-2)
    cosine = torch.nn.functional.cosine_similarity(got[2], want[2], dim=0)
    assert cosine > 0.999


def test_a_lora_model_takes_the_chunked_path_and_trains_only_its_adapter() -> None:
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_model(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    assert chunked.plain_head(model) is not None
    with torch.no_grad():  # a non-zero adapter, so that its gradients and outputs differ from the base
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    want = run(lp.plain_response_log_probs, model)
    got = run(lp.response_log_probs, model)
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[2], want[2], atol=1e-5, rtol=1e-4)
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)


def test_a_soft_capped_head_keeps_the_plain_path() -> None:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    config = Gemma2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        final_logit_softcapping=30.0,
    )
    model = Gemma2ForCausalLM(config)
    assert chunked.plain_head(model) is None
    logp, _ = lp.response_log_probs(model, batch())
    want, _ = lp.plain_response_log_probs(model, batch())
    assert torch.equal(logp, want)
