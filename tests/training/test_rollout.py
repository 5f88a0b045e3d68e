"""The rollout driver with the tiny tokenizer/model and scripted multi-turn generation.

The scripted episode here is a minimal protocol (tool call → observation, <answer> ends)
so the driver's token rules are tested on their own; tests/agents/test_rollout_agents.py
drives the four real agents through the same driver.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Sequence

import pytest
import torch

from agents.base import BaseEpisode, TurnOutcome, invalid, tool_message
from agents.types import EpisodeResult, Example
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tools.errors import ConfigError
from training.rollout import (
    ChatSegments,
    EpisodeRunner,
    GenerationOutput,
    RolloutLimits,
    SamplingParams,
    run_episode_async,
    run_episodes,
    token_phases,
)

TOK = tiny_tokenizer()
EOS = TOK.eos_token_id


class ScriptedEpisode(BaseEpisode):
    """Tool call → observation ``rows for call N``; ``<answer>`` ends; ``<<CUT>>`` makes
    the episode keep only the text before it (like DualSQL's cut after a code fence)."""

    def __init__(self, role: str, max_turns: int = 6, observation: str = "rows for call") -> None:
        messages = [
            {"role": "system", "content": f"You are the {role}."},
            {"role": "user", "content": "How many schools are in Fresno?"},
        ]
        super().__init__(role, messages, [], ("</tool_call>",), max_turns)
        self.observation = observation

    def _turn(self, text: str) -> TurnOutcome:
        if "<<CUT>>" in text:
            kept = text[: text.index("<<CUT>>")]
            self.final_sql = kept
            return TurnOutcome("answer", True, done=True, text=kept)
        if "<answer>" in text and "</answer>" in text:
            self.final_sql = text.split("<answer>", 1)[1].split("</answer>", 1)[0]
            return TurnOutcome("answer", True, done=True)
        if text.endswith("</tool_call>"):
            n = sum(1 for t in self.turns if t.phase == "tool_call")
            return TurnOutcome(
                "tool_call", True, observations=(tool_message("q", f"{self.observation} {n}"),), tool_outcome="ok"
            )
        return invalid("unreadable", tool_message("format_error", "format error"))


class ScriptedAgent:
    """One episode per role in ``roles`` (two roles behave like DualSQL)."""

    name = "scripted"

    def __init__(self, roles: Sequence[str] = ("agent",), **episode_kwargs: object) -> None:
        self.roles, self.episode_kwargs = tuple(roles), episode_kwargs

    def start(self, example: Example, db: object, previous: Sequence[EpisodeResult] = ()) -> ScriptedEpisode | None:
        if len(previous) >= len(self.roles):
            return None
        return ScriptedEpisode(self.roles[len(previous)], **self.episode_kwargs)  # type: ignore[arg-type]


TOOL = '<tool_call>{"name": "execute_sql_query", "arguments": {"db_id": "db", "sql": "SELECT 1"}}</tool_call>'
SCRIPT = {
    # each turn: (text the model generates, whether it ends with EOS)
    "agent": [
        ("<think>look</think>" + TOOL + "\nspurious text after the stop", False),  # overshoot past the stop
        ("garbled turn", True),
        ("<think>again</think>" + TOOL, False),
        ("<answer>SELECT COUNT(*) FROM schools</answer>", True),
    ],
    "linker": [("<think>x</think>" + TOOL, False), ("<answer>schools</answer>", True)],
    "generator": [("<answer>SELECT 1</answer> trailing<<CUT>>more text after the cut", True)],
}


def logprob_of(position: int, token: int) -> float:
    return -0.001 * (position + 1) - token * 1e-6


class ScriptedGenerate:
    """Batched generate that replays ``SCRIPT`` by role and turn, read from the prompt."""

    def __init__(self, script: dict = SCRIPT, tokenizer=TOK) -> None:
        self.script, self.tok, self.calls = script, tokenizer, []

    def output_for(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        text = self.tok.decode(prompt_ids)
        role = next(r for r in self.script if f"You are the {r}." in text)
        turn = text.count("<|im_start|>assistant") - 1
        body, eos = self.script[role][min(turn, len(self.script[role]) - 1)]
        ids = self.tok.encode(body, add_special_tokens=False) + ([EOS] if eos else [])
        ids = ids[: params.max_new_tokens]
        self.calls.append((role, turn, ids))
        return GenerationOutput(ids, [logprob_of(i, t) for i, t in enumerate(ids)], "stop")

    def __call__(self, prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        return [self.output_for(p, params) for p in prompts]


def example(i: int = 0) -> Example:
    return Example(id=f"q{i}", db_id="db", db_path="db.sqlite", question="How many schools are in Fresno?")


def rendered(traj) -> str:
    return TOK.apply_chat_template(traj.messages, tokenize=False, add_generation_prompt=False)


def check_generated(traj, gen: ScriptedGenerate) -> None:
    """Every mask-1 token of turn t is a prefix of what generate returned for turn t."""
    outputs = {turn: ids for role, turn, ids in gen.calls if role == traj.role}
    for turn in sorted(set(traj.turn_index)):
        policy = [
            tok
            for tok, m, t in zip(traj.response_ids, traj.response_mask, traj.turn_index, strict=True)
            if t == turn and m
        ]
        assert policy == outputs[turn][: len(policy)], f"turn {turn}: mask-1 tokens not from generate"
        positions = [
            i for i, (m, t) in enumerate(zip(traj.response_mask, traj.turn_index, strict=True)) if t == turn and m
        ]
        assert positions == list(range(positions[0], positions[0] + len(positions))), (
            "policy tokens of a turn are contiguous"
        )
        assert [traj.logprobs[i] for i in positions] == [logprob_of(k, tok) for k, tok in enumerate(policy)]
    assert all(lp == 0.0 for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if not m)


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


def _run(limits: RolloutLimits, script: dict | None = None, **agent_kwargs: object):
    gen = ScriptedGenerate(script or SCRIPT)
    (traj,) = run_episodes(ScriptedAgent(**agent_kwargs), [(example(), None, 0)], TOK, gen, SamplingParams(), limits)
    return traj, gen


def _turn_starts() -> list[int]:
    full, _ = _run(RolloutLimits())
    return [full.turn_index.index(t) for t in sorted(set(full.turn_index))]


def test_response_limit_ends_mid_turn_without_stepping() -> None:
    second_turn = _turn_starts()[1]
    traj, gen = _run(RolloutLimits(max_response_tokens=second_turn + 2 + 2))  # + the end-of-turn reserve
    assert traj.result.end_reason == "response_limit"
    assert len(traj.response_ids) == second_turn + 2
    assert traj.response_mask[-2:] == [1, 1] and traj.turn_index[-2:] == [1, 1]
    assert len(traj.result.turns) == 1  # the partial second turn was never stepped
    check_generated(traj, gen)


def test_observation_that_does_not_fit_ends_the_episode() -> None:
    second_turn = _turn_starts()[1]
    traj, _ = _run(RolloutLimits(max_response_tokens=second_turn - 1))
    assert traj.result.end_reason == "response_limit"
    assert traj.response_mask[-1] == 0 and traj.messages[-1]["role"] == "assistant"
    assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)


def test_context_limit_counts_the_prompt() -> None:
    prompt_len = len(ChatSegments(TOK).prompt_ids(ScriptedEpisode("agent").messages))
    traj, _ = _run(RolloutLimits(max_context_tokens=prompt_len + 45, max_response_tokens=None))
    assert traj.result.end_reason == "context_limit"
    assert len(traj.prompt_ids) + len(traj.response_ids) <= prompt_len + 45


def test_prompt_too_long_is_flagged_not_generated() -> None:
    traj, gen = _run(RolloutLimits(max_prompt_tokens=5))
    assert traj.result.end_reason == "context_limit"
    assert traj.result.flags["prompt_too_long"] > 5
    assert traj.response_ids == [] and gen.calls == []


def test_per_turn_cap_hands_the_cut_turn_to_the_agent() -> None:
    traj, _ = _run(RolloutLimits(max_tokens_per_turn=10))
    assert traj.result.turns[0].phase == "invalid"  # the tool call was cut before its end
    assert traj.result.end_reason == "turn_budget"
    assert max(traj.turn_index) == len(traj.result.turns) - 1


def test_max_turns_limit_and_observation_truncation() -> None:
    long_obs = "value " * 200
    traj, _ = _run(RolloutLimits(max_turns=1, max_observation_tokens=8), observation=long_obs)
    assert traj.result.end_reason == "turn_budget" and len(traj.result.turns) == 1
    obs = traj.messages[-1]["content"]
    assert obs.endswith("…[truncated]") and len(TOK.encode(obs.removesuffix("\n…[truncated]"))) <= 8
    assert traj.result.flags["observations_truncated"] == 1
    assert TOK.decode(traj.prompt_ids + traj.response_ids) == TOK.apply_chat_template(
        traj.messages, tokenize=False, add_generation_prompt=True
    )


def test_limits_validate() -> None:
    with pytest.raises(ConfigError, match="max_response_tokens"):
        RolloutLimits(max_response_tokens=0)


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


def hf_generate(model, tokenizer):
    """A batched, left-padded HF ``generate`` as a GenerateFn (sampling, log-probs)."""

    def generate(prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        width = max(map(len, prompts))
        pad = tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # [batch, width]
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # [batch, width]
        with torch.no_grad():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                max_new_tokens=params.max_new_tokens,
                do_sample=True,
                temperature=params.temperature,
                top_p=params.top_p,
                output_scores=True,
                return_dict_in_generate=True,
                pad_token_id=pad,
                eos_token_id=tokenizer.eos_token_id,
            )
        new = out.sequences[:, width:]  # [batch, new]
        logp = torch.stack(out.scores, dim=1).log_softmax(-1)  # [batch, new, vocab]
        picked = logp.gather(-1, new[..., None])[..., 0]  # [batch, new]
        outputs = []
        for row in range(len(prompts)):
            ids = new[row].tolist()
            n = ids.index(tokenizer.eos_token_id) + 1 if tokenizer.eos_token_id in ids else len(ids)
            outputs.append(GenerationOutput(ids[:n], picked[row, :n].tolist(), "stop" if n < len(ids) else "length"))
        return outputs

    return generate


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


# ------------------------------------------------------------- the four real agents


@pytest.fixture(scope="module")
def agent_db(tmp_path_factory):
    import os

    from tests.agents.conftest import make_db
    from tools import get_database

    os.environ.setdefault("SQLAGENT_RL_CACHE", str(tmp_path_factory.mktemp("cache")))
    return get_database(make_db(tmp_path_factory.mktemp("rolloutdb") / "schools.sqlite"))


class AgentScriptGenerate:
    """Replays tests/agents/scripts.py turn by turn; tool-call turns overshoot past the
    stop string, answer turns end with EOS."""

    OVERSHOOT = '\n<tool_response>{"rows": "invented by the model"}</tool_response>'

    def __init__(self, script: dict, tokenizer=TOK) -> None:
        self.script, self.tok, self.calls = script, tokenizer, []

    def __call__(self, prompts, params):
        outputs = []
        for ids in prompts:
            text = self.tok.decode(ids)
            role = (
                "generator" if "You are the SQL generator" in text else "linker" if "schema linker" in text else "agent"
            )
            turn = text.count("<|im_start|>assistant") - 1
            body = self.script[role][turn]
            ends_with_call = body.rstrip().endswith("</tool_call>") or body.endswith("</schema>")
            tokens = self.tok.encode(body + (self.OVERSHOOT if ends_with_call else ""), add_special_tokens=False)
            tokens = (tokens if ends_with_call else tokens + [EOS])[: params.max_new_tokens]
            self.calls.append((role, turn, tokens))
            outputs.append(GenerationOutput(tokens, [logprob_of(i, t) for i, t in enumerate(tokens)]))
        return outputs


def expected_response(traj, gen: AgentScriptGenerate) -> tuple[list[int], list[int]]:
    """Rebuild the response token by token from the generated tokens and the template."""
    seg = ChatSegments(TOK)
    outputs = {turn: ids for role, turn, ids in gen.calls if role == traj.role}
    conversation = traj.messages[2:]  # after the system and user prompt
    ids: list[int] = []
    mask: list[int] = []
    turn, i = -1, 0
    while i < len(conversation):
        assistant = conversation[i]
        assert assistant["role"] == "assistant"
        turn += 1
        generated = outputs[turn]
        kept = TOK.encode(assistant["content"], add_special_tokens=False)
        assert generated[: len(kept)] == kept  # the kept turn is a prefix of what was generated
        ended_eos = len(generated) > len(kept) and generated[len(kept)] == EOS
        ids += kept + ([EOS] if ended_eos else [])
        mask += [1] * (len(kept) + ended_eos)
        eot = seg.end_of_turn[len("<|im_end|>") :] if ended_eos else seg.end_of_turn
        template = seg.encode(eot)
        observations = []
        i += 1
        while i < len(conversation) and conversation[i]["role"] != "assistant":
            observations.append(conversation[i])
            i += 1
        if observations:
            template += seg.encode(seg.segment_text(observations))
        ids += template
        mask += [0] * len(template)
    return ids, mask


EXPECTED_PHASES = {
    ("retoolsql", "agent"): ["tool_call", "final_answer"],
    ("think2sql", "agent"): ["answer"],
    ("trustsql", "agent"): ["explore_schema", "explore_schema", "propose_schema", "generate_sql", "confirm_answer"],
    ("dualsql", "linker"): ["tool_call", "answer"],
    ("dualsql", "generator"): ["tool_call", "answer"],
}


@pytest.mark.parametrize("name", ["retoolsql", "think2sql", "trustsql", "dualsql"])
def test_every_agent_through_the_driver_token_by_token(name: str, agent_db) -> None:
    from agents import make_agent
    from tests.agents.conftest import COUNT_SQL, JOIN_SQL, make_example
    from tests.agents.scripts import SCRIPTS

    example = (
        make_example(agent_db.path)
        if name != "dualsql"
        else make_example(
            agent_db.path,
            JOIN_SQL,
            "What is the highest average math score of a school in Fresno?",
            ("satscores", "schools"),
        )
    )
    gen = AgentScriptGenerate(SCRIPTS[name])
    trajs = run_episodes(
        make_agent(name),
        [(example, agent_db, 0)],
        TOK,
        gen,
        SamplingParams(max_new_tokens=4096),
        RolloutLimits(max_tokens_per_turn=None, max_response_tokens=None, max_context_tokens=None),
    )
    assert [t.role for t in trajs] == (["linker", "generator"] if name == "dualsql" else ["agent"])
    for traj in trajs:
        ids, mask = expected_response(traj, gen)
        assert traj.response_ids == ids
        assert traj.response_mask == mask
        assert TOK.decode(traj.prompt_ids + traj.response_ids) == rendered(traj)
        check_generated(traj, gen)  # type: ignore[arg-type]
        assert [t.phase for t in traj.result.turns] == EXPECTED_PHASES[(name, traj.role)]
        assert all(t.format_ok for t in traj.result.turns) and traj.result.end_reason == "answer"
        assert "invented by the model" not in TOK.decode(traj.response_ids)  # the overshoot was cut
    assert trajs[-1].result.final_sql == (JOIN_SQL if name == "dualsql" else COUNT_SQL)
    if name == "trustsql":  # the schema span is the propose turn: turns 0-2
        from training.masks import pad_trajectories, phase_prefix_mask, schema_span_turns

        batch = pad_trajectories(trajs, pad_token_id=0)
        prefix = phase_prefix_mask(batch.turn_index, schema_span_turns(trajs))[0]
        assert prefix.tolist() == [1.0 if t <= 2 else 0.0 for t in trajs[0].turn_index]


@pytest.mark.parametrize("name", ["retoolsql", "think2sql", "trustsql", "dualsql"])
def test_real_agents_with_the_tiny_model(name: str, agent_db) -> None:
    from agents import make_agent
    from tests.agents.conftest import make_example

    torch.manual_seed(1)
    model, outputs = tiny_model(), []
    generate = hf_generate(model, TOK)

    def recording(prompts, params):
        out = generate(prompts, params)
        outputs.extend(o.token_ids for o in out)
        return out

    options = {"dualsql": {"linker_max_turns": 2, "generator_max_turns": 2}, "think2sql": {}}.get(
        name, {"max_turns": 2}
    )
    requests = [(make_example(agent_db.path), agent_db, 3)]
    limits = RolloutLimits(max_tokens_per_turn=8, max_context_tokens=4096)  # the tiny model's positions
    trajs = run_episodes(make_agent(name, **options), requests, TOK, recording, SamplingParams(), limits)
    assert [t.sample_index for t in trajs] == ([3, 3] if name == "dualsql" else [3])
    for traj in trajs:
        assert traj.result.turns and all(not t.format_ok for t in traj.result.turns)  # random text is never valid
        assert traj.result.end_reason in ("turn_budget", "format_cutoff", "context_limit")
        assert len(traj.prompt_ids) + len(traj.response_ids) <= 4096
        policy_runs, run = [], []
        for tok, m in zip(traj.response_ids, traj.response_mask, strict=True):
            if m:
                run.append(tok)
            elif run:
                policy_runs.append(run)
                run = []
        policy_runs += [run] if run else []
        assert all(any(o[: len(r)] == r for o in outputs) for r in policy_runs)  # every mask-1 token was generated
        if traj.result.end_reason != "context_limit":
            closed = traj.messages[-1]["role"] == "assistant"
            assert TOK.decode(traj.prompt_ids + traj.response_ids) == TOK.apply_chat_template(
                traj.messages, tokenize=False, add_generation_prompt=not closed
            )


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
