"""Cross-turn prefix reuse (training/generation/prefix_reuse.py) against the plain path that
re-encodes every turn, on the tiny model in fp32: the same tokens under greedy decoding over
multi-turn episodes that end at different turns (turns cut at stop strings, a second
episode per request), the same sampling distribution (log-probs), caches freed as episodes
end, and models it cannot serve keeping the plain path. ``eval.run`` on the same path and
``model.prefix_reuse=false``: tests/eval/test_eval_prefix_reuse.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from agents.base import BaseEpisode, TurnOutcome, tool_message
from agents.types import EpisodeResult, Example
from tests.helpers.lively_model import lively_model
from tests.helpers.scripted_rollout import TOK, example
from tests.helpers.tiny_model import tiny_model
from training.generation.hf import ChunkedGenerate, hf_generate
from training.generation.prefix_reuse import PrefixReuseGenerate, supports_prefix_reuse
from training.rollout import CachingGenerate, GenerateWrapper, RolloutLimits, SamplingParams, run_episodes


class TurnsEpisode(BaseEpisode):
    """Ends after ``turns`` turns whatever the model writes; observations grow each turn."""

    def __init__(self, role: str, turns: int, self_id: str) -> None:
        messages = [
            {"role": "system", "content": f"You are the {role}. Write SQL for the schools table."},
            {"role": "user", "content": f"How many schools are in Fresno county? ({self_id})"},
        ]
        super().__init__(role, messages, [], ("e",), max_turns=8)  # "e": turns cut mid-generation
        self.turns_to_play = turns

    def _turn(self, text: str) -> TurnOutcome:
        done = len(self.turns) + 1 >= self.turns_to_play
        rows = ", ".join(f"[{i}]" for i in range(3 * (len(self.turns) + 1)))
        return TurnOutcome("tool_call", True, done=done, observations=(tool_message("q", f"rows: {rows}"),))


class TurnsAgent:
    """Request i plays ``1 + i % 4`` turns; ``roles`` episodes per request (like DualSQL)."""

    name = "turns"

    def __init__(self, roles: Sequence[str] = ("agent",)) -> None:
        self.roles = tuple(roles)

    def start(self, ex: Example, db: object, previous: Sequence[EpisodeResult] = ()) -> TurnsEpisode | None:
        if len(previous) >= len(self.roles):
            return None
        return TurnsEpisode(self.roles[len(previous)], 1 + int(ex.id[1:]) % 4 + len(previous), ex.id)


class StoreWatch(GenerateWrapper):
    """Records, at each round's ``retain``, how many distinct prompts the round has and how
    many caches the store keeps for them."""

    def __init__(self, inner: PrefixReuseGenerate) -> None:
        super().__init__(inner)
        self.rounds: list[tuple[int, int, int]] = []  # (prompts, distinct prompts, rows kept)

    def retain(self, prompts: Sequence[Sequence[int]]) -> None:
        super().retain(prompts)
        kept = len(self.inner.store)  # type: ignore[attr-defined]
        self.rounds.append((len(prompts), len({tuple(p) for p in prompts}), kept))


def cut_turns(traj) -> int:  # type: ignore[no-untyped-def]
    """Turns whose generation was cut at a stop string: under the turn cap, no EOS."""
    count = 0
    for turn in set(traj.turn_index):
        policy = [
            t for t, m, i in zip(traj.response_ids, traj.response_mask, traj.turn_index, strict=True) if m and i == turn
        ]
        count += len(policy) < LIMITS.max_tokens_per_turn and TOK.eos_token_id not in policy
    return count


LIMITS = RolloutLimits(max_tokens_per_turn=10, max_response_tokens=400)
REQUESTS = [(example(i), None, s) for i in range(4) for s in range(2)]


def _rollout(model, reuse: bool, temperature: float, roles=("agent",), chunk: int = 3, seed: int = 0):  # type: ignore[no-untyped-def]
    generate = hf_generate(model, TOK, chunk=chunk, logprobs=True, prefix_reuse=reuse)
    torch.manual_seed(seed)
    trajs = run_episodes(TurnsAgent(roles), REQUESTS, TOK, generate, SamplingParams(temperature=temperature), LIMITS)
    return trajs, generate


def test_greedy_tokens_equal_the_plain_path_when_episodes_end_at_different_turns() -> None:
    model = lively_model()
    plain, plain_gen = _rollout(model, reuse=False, temperature=0.0, roles=("linker", "generator"))
    reused, gen = _rollout(model, reuse=True, temperature=0.0, roles=("linker", "generator"))
    assert isinstance(plain_gen, ChunkedGenerate) and not isinstance(plain_gen, CachingGenerate)
    assert isinstance(gen, PrefixReuseGenerate) and gen.reused_tokens > 0
    assert len({len(t.result.turns) for t in plain}) >= 3  # episodes end at different turns
    assert sum(map(cut_turns, plain)) > 0  # turns cut at the stop string: caches cropped to what was kept
    assert len({tuple(t.response_ids) for t in plain}) > 4  # greedy text that depends on the conversation
    assert [t.response_ids for t in reused] == [t.response_ids for t in plain]
    assert [t.response_mask for t in reused] == [t.response_mask for t in plain]
    assert [t.prompt_ids for t in reused] == [t.prompt_ids for t in plain]


def test_sampled_tokens_and_log_probs_match_the_plain_path() -> None:
    model = tiny_model()
    plain, _ = _rollout(model, reuse=False, temperature=1.0, seed=3)
    reused, _ = _rollout(model, reuse=True, temperature=1.0, seed=3)
    assert [t.response_ids for t in reused] == [t.response_ids for t in plain]  # same RNG draws, same rows
    for a, b in zip(plain, reused, strict=True):
        assert b.logprobs == pytest.approx(a.logprobs, abs=1e-5)
        # ... and the generating distribution is the model's own on the full sequence
        assert b.logprobs == pytest.approx(_teacher_forced(model, b), abs=1e-4)


def _teacher_forced(model, traj) -> list[float]:  # type: ignore[no-untyped-def]
    """log p(token) of every policy token under one forward over prompt + response (0 elsewhere)."""
    ids = torch.tensor([traj.prompt_ids + traj.response_ids])  # [1, len]
    with torch.no_grad():
        logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)  # [len - 1, vocab]
    start = len(traj.prompt_ids)
    picked = logp[start - 1 :].gather(-1, ids[0, start:, None])[:, 0]  # [resp_len]
    return [float(lp) if m else 0.0 for lp, m in zip(picked.tolist(), traj.response_mask, strict=True)]


def test_finished_episodes_caches_are_freed_each_round_and_all_at_the_end() -> None:
    gen = hf_generate(lively_model(), TOK, chunk=4, prefix_reuse=True)
    watch = StoreWatch(gen)  # type: ignore[arg-type]
    run_episodes(TurnsAgent(), REQUESTS, TOK, watch, SamplingParams(temperature=0.0), LIMITS)
    assert [prompts for prompts, _, _ in watch.rounds] == [8, 6, 4, 2]  # episodes of 1..4 turns, two samples each
    # from the second round on, one cache per distinct prompt: those of finished episodes
    # and of earlier turns were dropped (the two greedy samples of a question share one)
    assert watch.rounds[0][2] == 0
    assert all(kept == distinct for _, distinct, kept in watch.rounds[1:])
    assert gen.store == [] and gen.cached_tokens() == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("alone", [True, False], ids=["cpu_one_by_one", "batched"])
def test_a_question_s_samples_prefill_their_shared_prompt_once(alone: bool) -> None:
    model = lively_model()
    text = TOK.apply_chat_template([{"role": "user", "content": "How many schools?"}], tokenize=False)
    prompt = TOK.encode(text + "<|im_start|>assistant\n", add_special_tokens=False)
    other = TOK.encode(text + "<|im_start|>assistant\nSELECT", add_special_tokens=False)
    prompts = [list(prompt)] * 3 + [list(other)]
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    gen = hf_generate(model, TOK, chunk=8, prefix_reuse=True)
    assert gen.prefill_alone  # type: ignore[attr-defined] # the default on CPU
    gen.prefill_alone = alone  # type: ignore[attr-defined] # False: what other devices do
    prefilled: list[int] = []
    prefill = gen._prefill  # type: ignore[attr-defined]
    gen._prefill = lambda rows: prefilled.append(len(rows)) or prefill(rows)  # type: ignore[attr-defined]
    outputs = gen(prompts, params)
    if alone:  # every distinct first prompt alone, once for the chunk (not once per row)
        assert prefilled == [1, 1]
        assert gen.reused_tokens == 3 * (len(prompt) - 1) + len(other) - 1  # type: ignore[attr-defined]
    else:  # only the shared prompt, once; the prompt that extends it reuses it too
        assert prefilled == [1]
        assert gen.reused_tokens == 4 * (len(prompt) - 1)  # type: ignore[attr-defined]
    assert len(gen.store) == 4  # type: ignore[attr-defined] # one row each; the first prefills are not kept
    assert outputs == hf_generate(model, TOK, chunk=8)(prompts, params)


def windowed_model():  # type: ignore[no-untyped-def]
    """A tiny Qwen2 whose every layer has a sliding window."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(TOK),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        use_sliding_window=True,
        sliding_window=16,
        max_window_layers=0,
    )
    return Qwen2ForCausalLM(config)


def test_models_with_sliding_windows_keep_the_plain_path() -> None:
    windowed = windowed_model()
    assert supports_prefix_reuse(tiny_model()) and not supports_prefix_reuse(windowed)
    assert type(hf_generate(windowed, TOK, prefix_reuse=True)) is ChunkedGenerate


def test_the_local_engine_rolls_out_through_it_and_the_switch_restores_the_plain_path(
    tmp_path: Path, examples: list[Example]
) -> None:
    from tests.helpers.local_trainer import config, tiny_inputs
    from training.engines.local.trainer import LocalTrainer

    runs = {}
    for switch in ("true", "false"):
        cfg = config("retoolsql", tmp_path / switch, f"model.prefix_reuse={switch}", "rollout.max_new_tokens=8")
        trainer = LocalTrainer(cfg, tiny_inputs(examples), say=lambda _: None)
        torch.manual_seed(0)
        trajectories = trainer.rollout(examples[:2], 2, trainer.agent, trainer.sampling)
        runs[switch] = (trainer.generate, [t.response_ids for t in trajectories])
    generate, tokens = runs["true"]
    assert isinstance(generate, PrefixReuseGenerate) and generate.reused_tokens > 0
    assert generate.store == []  # freed when the rollout returned, before any update
    assert type(runs["false"][0]) is ChunkedGenerate
    assert tokens == runs["false"][1]
