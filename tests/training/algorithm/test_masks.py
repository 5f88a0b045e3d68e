"""Loss masks on hand-built trajectories whose every token is known."""

from __future__ import annotations

import pytest
import torch

from agents.types import EpisodeResult, Trajectory, TurnRecord
from training.algorithm import masks as M


def turn(index: int, phase: str, ok: bool = True) -> TurnRecord:
    return TurnRecord(index=index, phase=phase, text_chars=10, format_ok=ok)


def traj(
    turn_index: list[int],
    response_mask: list[int],
    turns: list[TurnRecord],
    prompt=(1, 2, 3),
    logprobs=None,
    flags: dict | None = None,
) -> Trajectory:
    result = EpisodeResult(
        role="agent", final_sql=None, schema=None, turns=turns, end_reason="answer", flags=dict(flags or {})
    )
    return Trajectory(
        example_id="q",
        role="agent",
        prompt_ids=list(prompt),
        response_ids=[100 + i for i in range(len(turn_index))],
        response_mask=response_mask,
        turn_index=turn_index,
        result=result,
        logprobs=logprobs,
    )


# turn 0 explore (3 policy + 2 obs), turn 1 propose (2 + 1), turn 2 generate (2 + 2), turn 3 confirm (2)
TI = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 3]
RM = [1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, 0, 1, 1]
TRUST_TURNS = [turn(0, "explore_schema"), turn(1, "propose_schema"), turn(2, "generate_sql"), turn(3, "confirm_answer")]


def test_observation_and_padding_masks() -> None:
    rm = torch.tensor([[1, 0, 1, 1], [0, 1, 0, 0]])
    assert M.observation_mask(rm).tolist() == [[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 0.0, 0.0]]
    assert M.padding_mask(torch.tensor([2, 4, 0]), 4).tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0]]


def test_phase_prefix_mask_rows() -> None:
    ti = torch.tensor([TI, TI, [0, 0, 1, 1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1]])
    span = torch.tensor([1, -1, 1])
    got = M.phase_prefix_mask(ti, span)
    assert got[0].tolist() == [1.0] * 8 + [0.0] * 6  # through the propose turn (incl. its observation)
    assert got[1].tolist() == [0.0] * 14  # no schema span: empty
    assert got[2].tolist() == [1.0] * 4 + [0.0] * 10  # padding (-1) never inside


def test_the_schema_span_is_the_turn_the_episode_recorded() -> None:
    """The masks read the span's last turn from the episode's flags (the agent chose it:
    TRUST-SQL's rule is tested with its agent); no flag means an empty span."""
    propose = traj(TI, RM, TRUST_TURNS, flags={"schema_span_turn": 1})
    explore_fallback = traj(TI, RM, TRUST_TURNS, flags={"schema_span_turn": 0})
    unmarked = traj(TI, RM, TRUST_TURNS)
    spans = M.span_end_turns([propose, explore_fallback, unmarked], "schema")
    assert spans.tolist() == [1, 0, -1]
    batch = M.pad_trajectories([propose, explore_fallback], pad_token_id=0)
    prefix = M.phase_prefix_mask(batch.turn_index, spans[:2])
    policy = M.observation_mask(batch.response_mask)
    # schema track: policy tokens of turns 0-1 only
    assert M.combine_masks(policy, prefix)[0].tolist() == [1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert M.combine_masks(policy, prefix)[1].tolist() == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    masks, stats = M.track_masks([propose, unmarked], ["full", "schema"], "schema", guardrails=False)
    assert masks["schema"][0] == [1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert masks["schema"][1] == [0.0] * 14 and stats["mask/empty_schema_rows"] == 1.0


def test_error_turn_mask_keeps_only_the_failed_final_turn() -> None:
    failed = traj([0, 0, 0, 1, 1], [1, 1, 0, 1, 1], [turn(0, "tool_call"), turn(1, "invalid", ok=False)])
    fine = traj([0, 0, 0, 1, 1], [1, 1, 0, 1, 1], [turn(0, "tool_call"), turn(1, "answer")])
    # an invalid turn followed by tokens of a later (unrecorded, cut-off) turn does not "end" it
    later = traj([0, 0, 1, 1], [1, 0, 1, 1], [turn(0, "invalid", ok=False)])
    errors = M.final_error_turns([failed, fine, later])
    assert errors.tolist() == [1, -1, -1]
    batch = M.pad_trajectories([failed, fine, later], pad_token_id=0)
    mask = M.combine_masks(
        M.observation_mask(batch.response_mask), batch.padding, M.error_turn_mask(batch.turn_index, errors)
    )
    assert mask.tolist() == [[0, 0, 0, 1, 1], [1, 1, 0, 1, 1], [1, 0, 1, 1, 0]]


def test_pad_trajectories_shapes_padding_and_truncation() -> None:
    a = traj([0, 0, 1], [1, 0, 1], [turn(0, "x"), turn(1, "y")], prompt=(5, 6), logprobs=[-0.5, 0.0, -0.25])
    b = traj([0, 0, 0, 0, 1, 1], [1, 1, 1, 0, 1, 1], [turn(0, "x"), turn(1, "y")], prompt=(7, 8, 9, 10))
    batch = M.pad_trajectories([a, b], pad_token_id=0, max_response_len=5)
    assert batch.prompt_ids.tolist() == [[0, 0, 5, 6], [7, 8, 9, 10]]
    assert batch.prompt_attention.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert batch.response_ids.tolist() == [[100, 101, 102, 0, 0], [100, 101, 102, 103, 104]]
    assert batch.response_mask.tolist() == [[1, 0, 1, 0, 0], [1, 1, 1, 0, 1]]
    assert batch.padding.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch.turn_index.tolist() == [[0, 0, 1, -1, -1], [0, 0, 0, 0, 1]]
    assert batch.logprobs[0].tolist() == [-0.5, 0.0, -0.25, 0.0, 0.0]
    assert batch.truncated.tolist() == [False, True]
    assert batch.input_ids.shape == (2, 9) and batch.attention_mask[0].tolist() == [0, 0, 1, 1, 1, 1, 1, 0, 0]


def test_bad_inputs_fail_clearly() -> None:
    with pytest.raises(ValueError, match="at least one"):
        M.pad_trajectories([], pad_token_id=0)
    with pytest.raises(ValueError, match="shapes differ"):
        M.combine_masks(torch.ones(2, 3), torch.ones(2, 4))
