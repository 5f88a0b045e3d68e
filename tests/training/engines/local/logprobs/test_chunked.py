"""The chunked LM-head path of ``response_log_probs`` against the model's own forward.

Same log-probs, entropies and gradients as the plain path (full logits through the model's
forward), with several chunks per batch, rows of different lengths, bf16 autocast, a LoRA
model; and models whose head is not plain keep the plain path. The head runs only where a
track's mask trains, and keeping a single chunk's logits equals recomputing them.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.tiny_model import soft_capped_model, tiny_model
from training.engines.local import loss as lp
from training.engines.local.logprobs import chunked

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
RESPONSES = [[20, 21, 22], [23, 24, 25, 26, 27, 28, 29], [30]]


def batch(masks: dict[str, list[list[float]]] | None = None) -> lp.PolicyBatch:
    masks = masks or {"full": [[1.0] * len(r) for r in RESPONSES]}
    advantages = {track: [1.0, -1.0, 0.5] for track in masks}
    return lp.build_policy_batch(PROMPTS, RESPONSES, masks, advantages, 0)


def run(
    fn: Any,
    model: Any,
    autocast: Any = None,
    entropy_grad: bool = False,
    policy: lp.PolicyBatch | None = None,
    **kw: Any,
) -> tuple[torch.Tensor, ...]:
    """Log-probs, entropy and the gradient of a loss built from both, through ``fn``."""
    model.zero_grad(set_to_none=True)
    policy = policy or batch()
    logp, entropy = fn(model, policy, "cpu", autocast, with_entropy=True, entropy_grad=entropy_grad, **kw)
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
    model = soft_capped_model()
    assert chunked.plain_head(model) is None
    logp, _ = lp.response_log_probs(model, batch())
    want, _ = lp.plain_response_log_probs(model, batch())
    assert torch.equal(logp, want)


# Row 1's turn, observation, turn: the observation (tokens 2-4) carries no track's mask; the
# schema track trains row 0's first token only, which "full" trains too.
OBSERVATION_MASKS = {
    "full": [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0], [1.0]],
    "schema": [[1.0, 0.0, 0.0], [0.0] * 7, [0.0]],
}


@pytest.mark.parametrize("fn", [lp.response_log_probs, lp.plain_response_log_probs], ids=["chunked", "plain"])
def test_only_trained_positions_get_log_probs_and_they_equal_every_positions_path(fn: Any) -> None:
    model = tiny_model()
    trained = torch.tensor([[1, 1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 1, 1], [1, 0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    everywhere = run(fn, model)  # every response position trained
    policy = batch(OBSERVATION_MASKS)
    assert torch.equal(chunked.trained_positions(policy), trained)
    masked = run(fn, model, policy=policy)
    assert torch.equal(masked[0] != 0, trained)  # zero at the observation, as beyond a response
    torch.testing.assert_close(masked[0], everywhere[0] * trained, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(masked[1], everywhere[1] * trained, atol=1e-5, rtol=1e-5)
    model.zero_grad(set_to_none=True)  # the gradient of the trained positions' loss, through every position
    logp, _ = fn(model, batch(), "cpu", None)
    (-(logp * torch.linspace(0.5, 1.5, logp.shape[1]) * trained).sum()).backward()
    want = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(masked[2], want, atol=1e-5, rtol=1e-4)


def test_the_head_runs_on_the_trained_positions_only() -> None:
    model = tiny_model()
    rows: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[0]))
    try:
        run(lp.response_log_probs, model, policy=batch(OBSERVATION_MASKS))
    finally:
        hook.remove()
    assert sum(rows) == 2 * 7  # seven trained positions, each chunk's head run again in the backward pass


@pytest.mark.parametrize("chunk", [4, 512], ids=["three chunks", "one chunk"])
def test_kept_logits_equal_recomputed_ones(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(chunked, "CHUNK_POSITIONS", chunk)
    model = tiny_model()
    rows: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, args, _out: rows.append(args[0].shape[0]))
    try:
        recomputed = run(lp.response_log_probs, model, entropy_grad=True)
        runs_recomputed = sum(rows)
        rows.clear()
        kept = run(lp.response_log_probs, model, entropy_grad=True, recompute_head=False)
    finally:
        hook.remove()
    for a, b in zip(kept, recomputed, strict=True):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    tokens = sum(len(r) for r in RESPONSES)
    assert runs_recomputed == 2 * tokens
    assert sum(rows) == (tokens if chunk == 512 else 2 * tokens)  # several chunks are still recomputed
