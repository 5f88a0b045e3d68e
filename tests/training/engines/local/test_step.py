"""One step of the local engine on CPU with the tiny model: real agents, rewards and SQLite,
a scripted policy (multi-turn text with tool calls, tests/helpers/schools.py) so that
rewards vary within groups; the update's weights, masks, buffer and log-probs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.types import Example
from tests.helpers.designs import project_designs
from tests.helpers.local_trainer import changed, trainer, weights
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.engines.local import loss as lp
from training.engines.local.buffer import build_buffer
from training.generation.hf import trim_row

RECIPES = project_designs()
LONG_PROMPTS = {"retoolsql", "dualsql"}
"""Designs whose step costs several seconds on two cores (M-Schema prompts, two agents): slow tier."""


def by_cost(recipes: list[str]) -> list[object]:
    return [pytest.param(r, marks=pytest.mark.slow) if r in LONG_PROMPTS else r for r in recipes]


@pytest.mark.parametrize("recipe", by_cost(RECIPES))
def test_one_step_of_each_recipe_changes_the_weights(recipe: str, tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0
    assert 0.0 < metrics["ex/batch"] < 1.0, metrics  # the scripted policy mixes right and wrong answers
    assert metrics["reward/exec"] > 0.0 and "time/generation" in metrics
    assert changed(before, t.model) > 1e-6


@pytest.mark.parametrize("recipe", by_cost(RECIPES))
def test_zero_advantage_control_leaves_weights_unchanged(recipe: str, tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, examples, "algorithm.dynamic_sampling.enable=false", always_good=True)
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0 and metrics["ex/batch"] == 1.0
    assert changed(before, t.model) == 0.0


def test_loss_ignores_observation_tokens(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
    rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
    rows = list(range(buffer.size))
    batch = buffer.policy_batch(rows, t.tokenizer.pad_token_id)
    full = batch.masks["full"]  # [batch, resp_len]
    observation = torch.zeros_like(full)
    for j, tr in enumerate(buffer.trajectories):
        observation[j, : len(tr.response_mask)] = 1.0 - torch.tensor(tr.response_mask, dtype=torch.float32)
    assert observation.sum() > 0, "the scripted episodes must contain tool observations"
    assert float((full * observation).sum()) == 0.0
    totals = lp.track_totals(batch.masks)

    logp, _ = lp.response_log_probs(t.model, batch)
    logp = logp.detach().requires_grad_(True)
    loss, _ = lp.grpo_loss(logp, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings)
    loss.backward()
    assert float((logp.grad.abs() * observation).sum()) == 0.0
    assert float(logp.grad.abs().sum()) > 0.0
    # changing an observation token's log-prob (its logit contribution) changes nothing
    moved = logp.detach() + 5.0 * observation
    again, _ = lp.grpo_loss(moved, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings)
    assert again.item() == pytest.approx(loss.item(), abs=1e-7)


def test_trustsql_buffer_two_track_advantages_and_prefix_mask(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
    rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
    assert set(buffer.advantages) == {"full", "schema"}
    # explore -> propose -> generate -> confirm: every scripted episode answers in phase order
    assert all(tr.result.end_reason == "answer" and tr.result.all_turns_valid for tr in trajectories)
    assert {r.components["format"] for r in rewards} == {0.1}
    for track in ("full", "schema"):
        for q in ("q0", "q1"):
            idx = [i for i, tr in enumerate(buffer.trajectories) if tr.example_id == q]
            scores = torch.tensor([rewards[i].tracks[track] for i in idx])
            hand = (scores - scores.mean()) / (scores.std() + 1e-6) if scores.std() > 0 else scores * 0
            got = torch.tensor([buffer.advantages[track][i] for i in idx])
            assert torch.allclose(got, hand.clamp(-10, 10), atol=1e-5), (track, q)
    for i, tr in enumerate(buffer.trajectories):
        propose = max(turn.index for turn in tr.result.turns if turn.phase == "propose_schema")
        expect = [m if turn <= propose else 0 for m, turn in zip(tr.response_mask, tr.turn_index, strict=True)]
        assert buffer.masks["schema"][i] == [float(x) for x in expect]
        assert buffer.masks["full"][i] == [float(x) for x in tr.response_mask]


@pytest.mark.slow
def test_dynamic_sampling_drops_flat_groups_in_the_engine(tmp_path: Path, examples: list[Example]) -> None:
    flat = {"q0", "q2", "q3"}
    t = trainer(
        "retoolsql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=true",
        "algorithm.batch_size=2",
        "algorithm.dynamic_sampling.oversample=2",
        always_good=lambda ex, k: ex.id in flat or k % 2 == 0,
    )
    before = weights(t.model)
    metrics = t.train_step()  # B*K = 4 questions drawn: all four examples
    assert {tr.example_id for tr in t.last_buffer.trajectories} == {"q1"}
    assert len(t.last_buffer.trajectories) == 4
    assert metrics["sampling/zero_variance_groups"] == 3 and metrics["sampling/groups_kept"] == 1
    assert metrics["sampling/fill_rate"] == pytest.approx(0.5)
    assert changed(before, t.model) > 0


def test_response_log_probs_match_a_per_row_forward() -> None:
    model = tiny_model()
    prompts, responses = [[5, 6, 7, 8], [9, 10]], [[11, 12], [13, 14, 15, 16]]
    batch = lp.build_policy_batch(prompts, responses, {"full": [[1, 1], [1, 1, 1, 1]]}, {"full": [1.0, -1.0]}, 0)
    got, _ = lp.response_log_probs(model, batch)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        logits = model(torch.tensor([p + r])).logits[0].log_softmax(-1)
        want = [logits[len(p) + j - 1, r[j]].item() for j in range(len(r))]
        assert got[i, : len(r)].tolist() == pytest.approx(want, abs=1e-5)


def test_trim_row_cuts_padding_after_a_stop_string() -> None:
    tok = tiny_tokenizer()
    eos = tok.eos_token_id
    body = tok.encode("SELECT 1</tool_call>", add_special_tokens=False)
    stopped = trim_row(body + [eos, eos], [eos], eos, tok, ["</tool_call>"])
    assert stopped.token_ids == body and stopped.finish_reason == "stop"
    ended = trim_row(body[:3] + [eos, eos], [eos], eos, tok, ["</tool_call>"])
    assert ended.token_ids == body[:3] + [eos]
    assert trim_row(body, [eos], eos, tok, ()).finish_reason == "length"


def test_several_mini_batches_use_old_log_probs_and_clip(tmp_path: Path, examples: list[Example]) -> None:
    """With two optimizer steps per buffer the second one sees a moved policy: the ratio
    leaves 1 and clipping can act (old log-probs come from a forward pass before step one)."""
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=false",
        "algorithm.mini_batches=2",
        "optim.lr=5e-2",
    )
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["time/logprob"] > 0.0
    assert metrics["policy/ppo_kl"] != 0.0
    assert changed(before, t.model) > 0


def test_micro_batches_without_a_gradient_skip_their_backward(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows with zero advantage (a zero-variance group) add exactly zero gradient when
    no KL or entropy term is on: their backward passes are skipped, and the weights after the
    step equal those of the update that runs every backward pass; so do they after a second
    update with no advantage at all (no backward pass, the optimizer steps on zeros)."""

    def run(skip: bool) -> tuple[dict[str, torch.Tensor], int]:
        t = trainer(
            "think2sql",
            tmp_path / str(skip),
            examples,
            "algorithm.dynamic_sampling.enable=false",
            "optim.micro_batch_size=1",
        )
        trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
        rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
        buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
        last = buffer.trajectories[-1].example_id  # its group is made zero-variance (the scripted
        for per_row in buffer.advantages.values():  # policy's second question already is)
            for i, tr in enumerate(buffer.trajectories):
                per_row[i] = 0.0 if tr.example_id == last else per_row[i]
        if not skip:
            monkeypatch.setattr(lp, "loss_has_gradient", lambda *_: True)
        calls = []
        real = torch.Tensor.backward
        monkeypatch.setattr(torch.Tensor, "backward", lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
        t.update(buffer, 0.0)
        after_first = weights(t.model)
        for per_row in buffer.advantages.values():  # nothing to learn: AdamW's momentum still moves the
            per_row[:] = [0.0] * len(per_row)  # weights, on the zero gradient the skipped passes leave
        t.update(buffer, 0.0)
        monkeypatch.setattr(torch.Tensor, "backward", real)
        assert changed(after_first, t.model) > 0.0
        return weights(t.model), len(calls)

    skipped, skipped_calls = run(skip=True)
    every, every_calls = run(skip=False)
    assert 0 < skipped_calls < every_calls  # the other group's rows still train
    initial = tiny_model().state_dict()
    assert any(not torch.equal(skipped[k], initial[k]) for k in initial)
    for key, value in skipped.items():
        assert torch.allclose(value, every[key], atol=1e-7, rtol=0), key
