"""The four real agents (retoolsql, think2sql, trustsql, dualsql) through the rollout
driver: token by token against tests/helpers/agent_scripts.py, and with the tiny model."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.designs import project_designs
from tests.helpers.scripted_rollout import (
    EOS,
    TOK,
    check_generated,
    hf_generate,
    logprob_of,
    rendered,
)
from tests.helpers.tiny_model import tiny_model
from training.rollout import GenerationOutput, RolloutLimits, SamplingParams, run_episodes
from training.rollout.chat_segments import ChatSegments


@pytest.fixture(scope="module")
def agent_db(tmp_path_factory):
    import os

    from tests.helpers.agent_db import make_db
    from tools import get_database

    os.environ.setdefault("SQLAGENT_RL_CACHE", str(tmp_path_factory.mktemp("cache")))
    return get_database(make_db(tmp_path_factory.mktemp("rolloutdb") / "schools.sqlite"))


class AgentScriptGenerate:
    """Replays tests/helpers/agent_scripts.py turn by turn; tool-call turns overshoot past the
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


@pytest.mark.parametrize("name", project_designs())
def test_every_agent_through_the_driver_token_by_token(name: str, agent_db) -> None:
    from agents import make_agent
    from tests.helpers.agent_db import COUNT_SQL, JOIN_SQL, make_example
    from tests.helpers.agent_scripts import SCRIPTS

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
        from training.algorithm.masks import pad_trajectories, phase_prefix_mask, span_end_turns

        batch = pad_trajectories(trajs, pad_token_id=0)
        prefix = phase_prefix_mask(batch.turn_index, span_end_turns(trajs, "schema"))[0]
        assert prefix.tolist() == [1.0 if t <= 2 else 0.0 for t in trajs[0].turn_index]


@pytest.mark.parametrize("name", project_designs())
def test_real_agents_with_the_tiny_model(name: str, agent_db) -> None:
    from agents import make_agent
    from tests.helpers.agent_db import make_example

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
