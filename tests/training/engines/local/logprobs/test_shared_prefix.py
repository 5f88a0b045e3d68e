"""Rows packed behind their shared prompt prefix (training/engines/local/logprobs/shared_prefix.py):
the same log-probs, entropies and gradients as left-padded rows, the cost model's choices
on the designs' laptop shapes, the micro-batch plan, and the warm start and the update
training the same weights packed or not."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import trainer
from tests.helpers.tiny_model import soft_capped_model, tiny_model
from training.engines.local import loss as lp
from training.engines.local.logprobs import chunked
from training.engines.local.logprobs import shared_prefix as sp

SHARED = [5, 6, 7, 8, 9, 10, 11, 12]  # a system prompt every row starts with
PROMPTS = [[*SHARED, 13, 14], [*SHARED, 13, 15, 16], [*SHARED, 17]]
RESPONSES = [[20, 21, 22, 23, 24], [25, 26], [27, 28, 29, 30, 31, 32, 33]]
MASKS = {  # row 0's tokens 2-3 are an observation: no track trains them
    "full": [[1.0, 1.0, 0.0, 0.0, 1.0], [1.0, 1.0], [1.0] * 7],
    "schema": [[1.0, 0.0, 0.0, 0.0, 0.0], [0.0, 0.0], [1.0] * 3 + [0.0] * 4],
}
SMOLLM2_135M = SimpleNamespace(  # SmolLM2-135M's sizes (its config.json)
    hidden_size=576, num_attention_heads=9, num_key_value_heads=3, intermediate_size=1536, head_dim=64
)


def policy(pack: bool, prompts: list[list[int]] = PROMPTS) -> lp.PolicyBatch:
    return lp.build_policy_batch(prompts, RESPONSES, MASKS, {t: [1.0, -0.5, 0.25] for t in MASKS}, 0, pack=pack)


def passes(model: Any, batch: lp.PolicyBatch) -> tuple[torch.Tensor, ...]:
    """Log-probs, entropy and the gradient of a loss built from both."""
    model.zero_grad(set_to_none=True)
    logp, entropy = lp.response_log_probs(model, batch, "cpu", None, with_entropy=True, entropy_grad=True)
    (-(logp * torch.linspace(0.5, 1.5, logp.shape[1])).sum() - 0.1 * entropy.sum()).backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), entropy.detach(), grads


def test_the_shared_prefix_leaves_each_prompt_its_last_token() -> None:
    assert sp.shared_prefix_length(PROMPTS) == len(SHARED)
    assert sp.shared_prefix_length([[1, 2, 3], [1, 2, 3]]) == 2  # identical prompts: all but the last token
    assert sp.shared_prefix_length([[1, 2], [3, 4]]) == 0


def test_the_packed_sequence_holds_the_prefix_once_and_a_block_mask() -> None:
    batch = policy(pack=True)
    remainders = [len(p) - len(SHARED) + len(r) for p, r in zip(PROMPTS, RESPONSES, strict=True)]
    assert batch.input_ids.shape == (1, len(SHARED) + sum(remainders))
    assert batch.position_ids[0, : len(SHARED) + remainders[0]].tolist() == list(range(len(SHARED) + remainders[0]))
    assert batch.position_ids[0, len(SHARED) + remainders[0]] == len(SHARED)  # row 1 continues the prefix
    mask = batch.attention_mask[0, 0]
    first, second = len(SHARED), len(SHARED) + remainders[0]
    assert mask[second, : len(SHARED)].all() and not mask[second, first:second].any()  # the prefix, not row 0
    assert mask[second, second] and not mask[second, second + 1]  # itself, causally
    flat = batch.input_ids[0]
    for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES, strict=True)):  # each index predicts its token
        assert flat[batch.state_index[i, : len(r)] + 1].tolist() == r
        assert flat[batch.state_index[i, 0]] == p[-1]


@pytest.mark.parametrize("chunk", [3, 512], ids=["several chunks", "one chunk"])
def test_packed_rows_give_the_padded_rows_log_probs_and_gradients(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    monkeypatch.setattr(chunked, "CHUNK_POSITIONS", chunk)
    model = tiny_model()
    padded, packed = passes(model, policy(pack=False)), passes(model, policy(pack=True))
    assert model.config._attn_implementation == sp.PACKED_ATTENTION  # switched by the packed pass
    assert torch.equal(packed[0] != 0, chunked.trained_positions(policy(pack=False)))
    torch.testing.assert_close(packed[0], padded[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[1], padded[1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(packed[2], padded[2], atol=1e-5, rtol=1e-4)
    for again, before in zip(passes(model, policy(pack=False)), padded, strict=True):  # other calls: sdpa
        torch.testing.assert_close(again, before, atol=0, rtol=0)


def test_a_packed_batch_is_refused_by_the_plain_path() -> None:
    with pytest.raises(ValueError, match="chunked LM-head path"):
        lp.plain_response_log_probs(tiny_model(), policy(pack=True))


def test_the_cost_model_packs_a_long_shared_prompt_and_not_a_short_one() -> None:
    share = sp.attention_share(SMOLLM2_135M)

    def rows(prefix: int, prompt: int, response: int, n: int = 4) -> tuple[list[list[int]], list[int]]:
        prompts = [[0] * prefix + [i + 1] * (prompt - prefix) for i in range(n)]
        return prompts, [prompt + response] * n

    assert sp.worth_packing(*rows(1012, 1250, 240), share)  # ReToolSQL's warm start: 1,012 tokens shared
    assert sp.worth_packing(*rows(1249, 1250, 256), share)  # a ReToolSQL GRPO group: one prompt
    assert sp.worth_packing(*rows(102, 170, 0), share)  # Think2SQL's demonstrations
    assert sp.worth_packing(*rows(619, 620, 650), share)  # a TRUST-SQL group: half of each row shared
    assert not sp.worth_packing(*rows(170, 630, 650), share)  # TRUST-SQL's warm start: a 170-token system prompt
    assert not sp.worth_packing(*rows(1249, 1250, 256, n=1), share)  # one row: nothing to share
    assert not sp.worth_packing(*rows(1249, 1250, 256), None)  # packing off


def test_the_plan_packs_each_prompt_group_and_batches_the_rest_by_length() -> None:
    prompts = {0: [1, 2, 3, 4, 5, 9], 1: [7, 8], 2: [1, 2, 3, 4, 5, 9], 3: [6], 4: [1, 2, 3, 4, 5, 9], 5: [7, 9]}
    lengths = {0: 8, 1: 3, 2: 7, 3: 2, 4: 9, 5: 4}
    plan = sp.plan_micro_batches(list(prompts), prompts.__getitem__, lengths.__getitem__, 2, share=0.001)
    assert plan == [[2, 0, 4], [3, 1], [5]]  # the group of one prompt packed; the others two by two
    off = sp.plan_micro_batches(list(prompts), prompts.__getitem__, lengths.__getitem__, 2, share=None)
    assert off == [[3, 1], [5, 2], [0, 4]]  # packing off: by length, as before


def test_a_run_is_packed_where_its_first_two_rows_alone_would_not_pay() -> None:
    """Rows of 300 tokens behind a 100-token prefix, with SmolLM2-135M's sizes: two packed
    cost more than two padded, four packed less (the prefix is paid once)."""
    share = sp.attention_share(SMOLLM2_135M)
    prompts = [[0] * 100 + [i + 1] * 50 for i in range(4)]
    lengths = [300] * 4
    assert not sp.worth_packing(prompts[:2], lengths[:2], share)
    assert sp.worth_packing(prompts, lengths, share)
    assert sp.plan_micro_batches(range(4), prompts.__getitem__, lengths.__getitem__, 2, share) == [[0, 1, 2, 3]]


def test_a_pack_holds_at_most_twice_the_longest_rows_tokens() -> None:
    prompts = {i: [1] * 8 + [i + 2] for i in range(3)}  # 8 tokens shared, rows of 20
    plan = sp.plan_micro_batches(list(prompts), prompts.__getitem__, lambda i: 20, 1, share=0.0001)
    assert plan == [[0, 1], [2]]  # three packed would be 8 + 3 x 12 = 44 tokens > 2 x 20


def test_model_share_needs_a_plain_head_and_sdpa() -> None:
    assert sp.model_share(tiny_model()) == pytest.approx(sp.attention_share(tiny_model().config))
    assert sp.model_share(soft_capped_model()) is None
    eager = tiny_model()
    eager.set_attn_implementation("eager")  # it adds its mask: a boolean block mask would be wrong
    assert sp.model_share(eager) is None


def _decoder_calls(model: Any) -> list[int]:
    """Each forward pass of the model's decoder: how many tokens it ran (appended as they run)."""
    calls: list[int] = []
    decoder = chunked.plain_head(model)[0]
    decoder.register_forward_hook(lambda _m, _a, out: calls.append(out.last_hidden_state.shape[:2].numel()))
    return calls


class StepGradients:
    """The gradients each AdamW step is given, per run (``start`` opens a run). A first Adam
    step moves each weight by about lr times the sign of its gradient, so a gradient within
    rounding of 0 can move a weight either way: the gradients are what packing must keep."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.runs: list[list[list[torch.Tensor]]] = []
        step = torch.optim.AdamW.step
        runs = self.runs

        def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
            runs[-1].append([p.grad.clone() for g in self.param_groups for p in g["params"] if p.grad is not None])
            return step(self, *args, **kwargs)

        monkeypatch.setattr(torch.optim.AdamW, "step", recording)

    def start(self) -> list[list[torch.Tensor]]:
        self.runs.append([])
        return self.runs[-1]


def _same_gradients(got: list[torch.Tensor], want: list[torch.Tensor]) -> None:
    assert len(got) == len(want) > 0
    torch.testing.assert_close(
        torch.cat([g.flatten() for g in got]), torch.cat([g.flatten() for g in want]), atol=1e-6, rtol=1e-4
    )


@pytest.mark.parametrize("recipe", ["think2sql", "retoolsql", "dualsql"])
def test_a_training_step_has_the_padded_rows_gradients(
    recipe: str, tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same scripted rollout, the same starting weights: one step's update packed (each
    group's rows behind their one prompt) and padded, one row per micro-batch. The tiny
    model's attention is large against its 64-wide layers, so its own cost model packs only
    Think2SQL's short rows; the others are weighed with SmolLM2-135M's sizes."""
    from training.engines.local import update

    if recipe != "think2sql":
        monkeypatch.setattr(update, "model_share", lambda model: sp.attention_share(SMOLLM2_135M))
    recorder, results = StepGradients(monkeypatch), {}
    for share in ("true", "false"):
        overrides = [f"optim.share_prefix={share}", "optim.micro_batch_size=1", "model.autocast=off"]  # fp32 passes
        t = trainer(recipe, tmp_path / share, examples, *overrides)
        calls, grads = _decoder_calls(t.model), recorder.start()
        metrics = t.train_step()
        results[share] = (grads, metrics, calls, t.last_buffer.size)
    (packed, packed_metrics, packed_calls, rows), (padded, padded_metrics, padded_calls, _) = results.values()
    assert len(padded_calls) == rows and len(packed_calls) < rows  # whole groups in one pass
    assert sum(packed_calls) < sum(padded_calls)  # each group's prompt once
    assert len(packed) == len(padded) == 1
    _same_gradients(packed[0], padded[0])
    for key in ("pg_loss/full", "policy/grad_norm", "policy/entropy"):
        assert packed_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-4, abs=1e-6), key


def test_the_warm_start_has_the_padded_rows_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    from training.supervised.fine_tune import WarmStartSettings, supervised_fine_tune

    demos = [
        SimpleNamespace(prompt_ids=p, response_ids=r, response_mask=[int(m) for m in MASKS["full"][i]])
        for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES, strict=True))
    ]
    settings = WarmStartSettings(epochs=2, lr=1e-2, batch_size=3, micro_batch_size=1, warmup_ratio=0.0)
    recorder, results = StepGradients(monkeypatch), {}
    for share_prefix in (True, False):
        model = tiny_model()
        calls, grads = _decoder_calls(model), recorder.start()
        result = supervised_fine_tune(model, demos, settings, pad_id=0, share_prefix=share_prefix)
        results[share_prefix] = (grads, result, calls)
    (packed, packed_result, packed_calls), (padded, padded_result, padded_calls) = results.values()
    assert (len(packed_calls), len(padded_calls)) == (2, 6)  # one pass a step against one per demonstration
    _same_gradients(packed[0], padded[0])
    assert packed_result["nll_first"] == pytest.approx(padded_result["nll_first"], rel=1e-6)
    assert packed_result["nll_last"] == pytest.approx(padded_result["nll_last"], rel=1e-4)
    assert packed_result["nll_last"] < packed_result["nll_first"]
