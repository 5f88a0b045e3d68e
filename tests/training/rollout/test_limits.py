"""The rollout driver's token and turn limits (``RolloutLimits``) on the scripted episode:
response, context, prompt, per-turn and turn caps, and observation truncation."""

from __future__ import annotations

import pytest

from tests.helpers.scripted_rollout import (
    SCRIPT,
    TOK,
    ScriptedAgent,
    ScriptedEpisode,
    ScriptedGenerate,
    check_generated,
    example,
    rendered,
)
from tools.errors import ConfigError
from training.rollout import RolloutLimits, SamplingParams, run_episodes
from training.rollout.chat_segments import ChatSegments


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
