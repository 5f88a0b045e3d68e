"""The turn fuzz, short: 600 adversarial turns (tests/helpers/turn_fuzz.py) through every
registered design's episodes, the rollout driver's token rules and every design's reward and
the single-metric rewards (tests/helpers/turn_fuzz_run.py). The full 10,000-turn run is
benchmarks/fuzz_turns.py. Then proof that the fuzz catches what it looks for: a parser that
raises, a design that drops a format reason, a reward that raises."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agents.base import TurnOutcome
from agents.parsing import PARSERS, HermesParser, ParsedCall, register_parser
from tests.helpers.agent_db import make_db, make_example
from tests.helpers.designs import project_designs
from tests.helpers.tiny_model import tiny_tokenizer
from tests.helpers.turn_fuzz_run import run_fuzz, variants
from training.rollout import GenerationOutput, RolloutLimits, SamplingParams, run_episodes

MARKER = "ASSISTANT_PROBE_MARKER_7f3a"  # training/rollout/chat_segments.py's probe string


@pytest.fixture(scope="module")
def fuzz_db(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from tools import get_database

    os.environ.setdefault("SQLAGENT_RL_CACHE", str(tmp_path_factory.mktemp("cache")))
    return get_database(make_db(tmp_path_factory.mktemp("fuzzdb") / "schools.sqlite"))


@pytest.mark.slow
def test_600_adversarial_turns_through_episodes_driver_and_rewards(fuzz_db: Any) -> None:
    tallies = run_fuzz(600, seed=0, db=fuzz_db)
    assert set(tallies) == {label for label, _, _ in variants()}
    assert {label.split("[")[0] for label in tallies} == set(project_designs())
    for label, tally in tallies.items():
        assert not tally.exceptions, (label, tally.exceptions[:3])
        assert not tally.violations, (label, tally.violations[:3])
        assert not tally.reward_errors, (label, dict(tally.reward_errors))  # gold SQL is fine
        assert tally.turns >= 90 and tally.episodes >= 10 and tally.rewards >= 4 * 10, (label, tally)
        assert tally.format_failures, label
        assert {"answer", "context_limit"} & set(tally.end_reasons), (label, tally.end_reasons)
    outcomes = set().union(*(t.outcomes for t in tallies.values()))
    assert {"ok", "forbidden", "bad_arguments", "unknown_tool", "syntax"} <= outcomes, outcomes
    assert {"timeout", "step_limit"} & outcomes, outcomes  # runaway SQL stopped by a preset's limit
    limits = set().union(*(t.end_reasons for t in tallies.values()))
    assert {"answer", "turn_budget", "format_cutoff", "context_limit", "response_limit"} <= limits, limits


# ----------------------------------------------------------------------------- the fuzz catches bugs


class RaisingParser(HermesParser):
    """A deliberately broken parser: it raises on a call it cannot read instead of reporting it."""

    name = "fuzz_raising"

    def parse(self, text: str) -> list[ParsedCall]:
        calls = super().parse(text)
        for parsed in calls:
            if parsed.call is None:
                raise ValueError(f"unreadable tool call: {parsed.error}")
        return calls


@pytest.fixture
def raising_parser() -> Any:
    register_parser(RaisingParser.name)(RaisingParser)
    yield RaisingParser.name
    PARSERS._items.pop(RaisingParser.name, None)


def test_the_fuzz_reports_a_parser_that_raises(fuzz_db: Any, raising_parser: str) -> None:
    tallies = run_fuzz(120, seed=1, db=fuzz_db, designs=["retoolsql"], options={"parser": raising_parser})
    crashes = [e for t in tallies.values() for e in t.exceptions]
    assert len(crashes) >= 5 and all("ValueError: unreadable tool call" in e for e in crashes), crashes[:3]
    assert any("agent step" in e and "<tool_call>" in e for e in crashes)  # with the turn that raised
    assert any("run_episodes" in e for e in crashes)  # in the driver's path too


def test_the_fuzz_reports_a_failed_turn_without_its_reason(fuzz_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from designs.trustsql.agent import TrustSQLEpisode

    def error_without_reason(self: Any, reason: str, **kwargs: Any) -> TurnOutcome:
        return TurnOutcome("invalid", False, "", **kwargs)

    monkeypatch.setattr(TrustSQLEpisode, "_error", error_without_reason)
    tallies = run_fuzz(100, seed=2, db=fuzz_db, designs=["trustsql"])
    lost = [v for t in tallies.values() for v in t.violations]
    assert lost and all("no format reason" in v or "no recorded format reason" in v for v in lost), lost[:3]


def test_the_fuzz_counts_a_reward_that_raises(fuzz_db: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import designs.think2sql.reward as think2sql_reward

    def broken(text: str) -> float:
        raise ValueError(f"cannot read {len(text)} characters")

    monkeypatch.setattr(think2sql_reward, "format_reward", broken)
    tallies = run_fuzz(40, seed=3, db=fuzz_db, designs=["think2sql"])
    errors = tallies["think2sql"].reward_errors
    assert errors and all(key.startswith("think2sql: Think2SQLReward raised ValueError") for key in errors), errors


# ----------------------------------------------------------------------------- found by the fuzz


def test_an_observation_echoing_the_drivers_probe_marker_does_not_crash_the_rollout(fuzz_db: Any) -> None:
    from agents import make_agent

    tok = tiny_tokenizer()
    turns = [
        "<think>x</think><action>explore_schema</action><tool_call>"
        + json.dumps({"name": "execute_sql_query", "arguments": {"db_id": "schools", "sql": f"SELECT '{MARKER}'"}})
        + "</tool_call>",
        "<think>done</think><action>confirm_answer</action><answer>SELECT 1</answer>",
    ]

    def generate(prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        text = turns[min(tok.decode(prompts[0]).count("<|im_start|>assistant") - 1, 1)]
        return [GenerationOutput(tok.encode(text, add_special_tokens=False) + [tok.eos_token_id])]

    example = make_example(Path(fuzz_db.path))
    (traj,) = run_episodes(
        make_agent("trustsql", enforce_phase_order=False),  # explore then confirm, as the fuzz found it
        [(example, fuzz_db, 0)],
        tok,
        generate,
        SamplingParams(),
        RolloutLimits(),
    )
    assert [t.tool_outcome for t in traj.result.turns] == ["ok", None]
    assert MARKER in traj.messages[-2]["content"]
