"""The rollout driver with the tiny tokenizer/model and scripted multi-turn generation:
the token rules (masks, stop strings, agent cuts, template segments), the sync and async
loops and the engine contract.

The scripted episode (tests/helpers/scripted_rollout.py) is a minimal protocol (tool call →
observation, <answer> ends) so the driver's token rules are tested on their own;
tests/training/rollout/test_limits.py covers the token and turn limits and
tests/training/rollout/test_agents.py drives the four real agents through the same driver.
"""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch

from tests.helpers.scripted_rollout import (
    EOS,
    TOK,
    TOOL,
    ScriptedAgent,
    ScriptedEpisode,
    ScriptedGenerate,
    check_generated,
    example,
    hf_generate,
    rendered,
)
from tests.helpers.tiny_model import tiny_model
from tools.errors import ConfigError
from training.rollout import (
    GenerationOutput,
    RolloutLimits,
    SamplingParams,
    run_episode_async,
    run_episodes,
    token_phases,
)
from training.rollout.chat_segments import ChatSegments
from training.rollout.episode import EpisodeRunner


def test_masks_token_by_token_on_a_multi_turn_episode() -> None:
    gen = ScriptedGenerate()
    (traj,) = run_episodes(ScriptedAgent(), [(example(), None, 0)], TOK, gen, SamplingParams(max_new_tokens=200))
    seg = ChatSegments(TOK)
    enc = seg.encode
    obs = lambda content: enc(seg.segment_text([{"role": "tool", "name": "q", "content": content}]))  # noqa: E731
    bad = lambda: enc(seg.segment_text([{"role": "tool", "name": "format_error", "content": "format error"}]))  # noqa: E731
    eot = enc("<|im_end|>\n")
    t0 = enc("<think>look</think>" + TOOL)  # cut at the stop: the overshoot is gone
    t1 = enc("garbled turn")
    t2 = enc("<think>again</think>" + TOOL)
    t3 = enc("<answer>SELECT COUNT(*) FROM schools</answer>")
    nl = enc("\n")
    expected = [
        (t0, 1, 0), (eot, 0, 0), (obs("rows for call 0"), 0, 0),
        (t1 + [EOS], 1, 1), (nl, 0, 1), (bad(), 0, 1),
        (t2, 1, 2), (eot, 0, 2), (obs("rows for call 1"), 0, 2),
        (t3 + [EOS], 1, 3), (nl, 0, 3),
    ]  # fmt: skip
    ids = [i for chunk, _, _ in expected for i in chunk]
    mask = [m for chunk, m, _ in expected for _ in chunk]
    turns = [t for chunk, _, t in expected for _ in chunk]
    assert traj.response_ids == ids
    assert traj.response_mask == mask
    assert traj.turn_index == turns
    assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)
    check_generated(traj, gen)
    assert traj.result.end_reason == "answer"
    assert traj.result.final_sql == "SELECT COUNT(*) FROM schools"
    assert [t.phase for t in traj.result.turns] == ["tool_call", "invalid", "tool_call", "answer"]
    assert traj.group_id == "q0:agent" and traj.role == "agent"
    assert token_phases(traj)[0] == "tool_call" and token_phases(traj)[-1] == "answer"


def test_prompt_is_the_chat_template_render() -> None:
    episode = ScriptedEpisode("agent")
    runner = EpisodeRunner(episode, ChatSegments(TOK), SamplingParams(), RolloutLimits(), "q0")
    text = TOK.apply_chat_template(episode.messages, tokenize=False, add_generation_prompt=True)
    assert runner.prompt_ids == TOK.encode(text, add_special_tokens=False)
    ids, params = runner.next_request()
    assert ids == runner.prompt_ids and params.stop == ("</tool_call>",)


def test_stop_string_ending_inside_a_token_keeps_the_covering_token() -> None:
    # '>{"' is one token of the tiny vocabulary: the stop "</tool_call>" ends inside it
    overshoot = TOOL + '{"name": "more"}'
    ids = TOK.encode(overshoot, add_special_tokens=False)
    assert '>{"' in [TOK.decode([i]) for i in ids[len(TOK.encode(TOOL, add_special_tokens=False)) - 1 :]]
    gen = ScriptedGenerate({"agent": [(overshoot, False), ("<answer>x</answer>", True)]})
    (traj,) = run_episodes(ScriptedAgent(), [(example(), None, 0)], TOK, gen, SamplingParams())
    first = [t for t, m, i in zip(traj.response_ids, traj.response_mask, traj.turn_index, strict=True) if m and i == 0]
    assert TOK.decode(first) == TOOL + '{"'  # the covering token, never re-tokenized
    assert traj.result.turns[0].text == TOOL  # the agent saw the text cut at the stop
    assert traj.result.turns[0].phase == "tool_call"
    assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)
    check_generated(traj, gen)


def test_agent_cut_keeps_only_covering_tokens_and_closes_the_turn() -> None:
    gen = ScriptedGenerate()
    trajs = run_episodes(
        ScriptedAgent(roles=("linker", "generator")), [(example(), None, 0)], TOK, gen, SamplingParams()
    )
    assert [t.role for t in trajs] == ["linker", "generator"]
    assert [t.group_id for t in trajs] == ["q0:linker", "q0:generator"]
    gen_traj = trajs[1]
    policy = [t for t, m in zip(gen_traj.response_ids, gen_traj.response_mask, strict=True) if m]
    assert TOK.decode(policy) == "<answer>SELECT 1</answer> trailing"
    assert EOS not in policy  # the sampled EOS came after the cut: dropped
    assert gen_traj.response_ids[len(policy) :] == TOK.encode("<|im_end|>\n", add_special_tokens=False)
    for traj in trajs:
        assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)
        check_generated(traj, gen)


def test_tool_role_is_rewrapped_when_the_template_cannot_render_it() -> None:
    tok = copy.deepcopy(TOK)
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
        "{{ raise_exception('unsupported role') }}{% endif %}"
        "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    assert ChatSegments(tok).renders_tool_role is False and ChatSegments(TOK).renders_tool_role is True
    gen = ScriptedGenerate(tokenizer=tok)
    (traj,) = run_episodes(ScriptedAgent(), [(example(), None, 0)], tok, gen, SamplingParams())
    observations = [m for m in traj.messages if m["role"] == "user"][1:]
    assert observations[0]["content"] == "<tool_response>\nrows for call 0\n</tool_response>"
    assert all(m["role"] != "tool" for m in traj.messages)
    assert tok.decode(traj.prompt_ids + traj.response_ids) == tok.apply_chat_template(
        traj.messages, tokenize=False, add_generation_prompt=False
    )


def test_async_driver_gives_the_same_trajectories() -> None:
    gen_sync, gen_async = ScriptedGenerate(), ScriptedGenerate()

    async def agenerate(ids: list[int], params: SamplingParams) -> GenerationOutput:
        await asyncio.sleep(0)
        return gen_async.output_for(ids, params)

    agent = ScriptedAgent(roles=("linker", "generator"))
    sync = run_episodes(agent, [(example(), None, 3)], TOK, gen_sync, SamplingParams())
    trajs = asyncio.run(run_episode_async(agent, example(), None, TOK, agenerate, SamplingParams(), sample_index=3))
    assert [(t.response_ids, t.response_mask, t.turn_index, t.group_id, t.sample_index) for t in trajs] == [
        (t.response_ids, t.response_mask, t.turn_index, t.group_id, t.sample_index) for t in sync
    ]


def test_batched_requests_keep_their_order_and_batch_generation() -> None:
    calls: list[int] = []
    gen = ScriptedGenerate()

    def counting(prompts, params):
        calls.append(len(prompts))
        return gen(prompts, params)

    requests = [(example(i), None, i % 2) for i in range(5)]
    trajs = run_episodes(ScriptedAgent(roles=("linker", "generator")), requests, TOK, counting, SamplingParams())
    assert [(t.example_id, t.role) for t in trajs] == [(f"q{i}", r) for i in range(5) for r in ("linker", "generator")]
    assert calls[0] == 5  # all five linkers generate in one call
    assert sum(calls) == 5 * 3 and len(calls) == 3


def test_batched_run_with_the_tiny_model() -> None:
    model = tiny_model()
    torch.manual_seed(0)
    requests = [(example(i), None, 0) for i in range(3)]
    limits = RolloutLimits(max_tokens_per_turn=12, max_response_tokens=200)
    trajs = run_episodes(ScriptedAgent(max_turns=3), requests, TOK, hf_generate(model, TOK), SamplingParams(), limits)
    assert len(trajs) == 3
    for traj in trajs:
        assert len(traj.response_ids) == len(traj.response_mask) == len(traj.turn_index) == len(traj.logprobs)
        assert traj.result.end_reason in ("turn_budget", "answer")
        assert 0 < traj.num_policy_tokens < len(traj.response_ids)
        assert all(lp <= 0.0 for lp in traj.logprobs)
        assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if not m)
        per_turn = {
            t: sum(m for m, i in zip(traj.response_mask, traj.turn_index, strict=True) if i == t)
            for t in set(traj.turn_index)
        }
        assert all(0 < n <= 12 for n in per_turn.values())
        if traj.result.end_reason == "turn_budget":
            assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)


def test_engine_bugs_fail_loudly() -> None:
    runner = EpisodeRunner(ScriptedEpisode("agent"), ChatSegments(TOK), SamplingParams(), RolloutLimits(), "q0")
    runner.next_request()
    with pytest.raises(ValueError, match="2 log-probs for 3 tokens"):
        runner.feed(GenerationOutput([5, 6, 7], [-0.1, -0.2]))
    with pytest.raises(ValueError, match="1 outputs for 2 prompts"):
        run_episodes(
            ScriptedAgent(),
            [(example(0), None, 0), (example(1), None, 0)],
            TOK,
            lambda prompts, params: [GenerationOutput([EOS])],
            SamplingParams(),
        )
    tok = copy.deepcopy(TOK)
    tok.chat_template = None
    with pytest.raises(ConfigError, match="no chat_template"):
        ChatSegments(tok)


def test_logprobs_absent_when_the_engine_gives_none() -> None:
    def generate(prompts, params):
        return [GenerationOutput(TOK.encode("<answer>x</answer>", add_special_tokens=False) + [EOS]) for _ in prompts]

    (traj,) = run_episodes(ScriptedAgent(), [(example(), None, 0)], TOK, generate, SamplingParams())
    assert traj.logprobs is None and traj.result.final_sql == "x"


QWEN_LIKE_TEMPLATE = (
    # a default system prompt, tool results wrapped into one user turn by the template itself,
    # and past assistant turns re-rendered without their <think> part (as Qwen3 templates do)
    "{% if messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nDefault.<|im_end|>\n' }}{% endif %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}{{ '<|im_start|>user' }}{% endif %}"
    "{{ '\n<tool_response>\n' + m['content'] + '\n</tool_response>' }}"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}{{ '<|im_end|>\n' }}{% endif %}"
    "{% elif m['role'] == 'assistant' and not loop.last and '</think>' in m['content'] %}"
    "{{ '<|im_start|>assistant\n' + m['content'].split('</think>')[-1] + '<|im_end|>\n' }}"
    "{% else %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_templates_that_rewrite_past_turns_never_shift_generated_tokens() -> None:
    tok = copy.deepcopy(TOK)
    tok.chat_template = QWEN_LIKE_TEMPLATE
    seg = ChatSegments(tok)
    assert seg.renders_tool_role  # the template wraps tool results itself
    assert seg.segment_text([{"role": "tool", "content": "R"}]) == (
        "<|im_start|>user\n<tool_response>\nR\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    gen = ScriptedGenerate(tokenizer=tok)
    (traj,) = run_episodes(ScriptedAgent(), [(example(), None, 0)], tok, gen, SamplingParams())
    check_generated(traj, gen)
    text = tok.decode(traj.response_ids)
    assert text.startswith(
        "<think>look</think>" + TOOL + "<|im_end|>\n<|im_start|>user\n<tool_response>\nrows for call 0"
    )
    rerendered = tok.apply_chat_template(traj.messages, tokenize=False)
    assert "<think>look</think>" not in rerendered  # a re-render would have rewritten the tokens already trained on
