"""Model text never crashes an episode: hundreds of adversarial turns per design from the
shared generator (tests/helpers/turn_fuzz.py: unclosed and nested tags, JSON bombs, wrong
tools, runaway and hostile SQL, odd unicode, huge and looping turns) through whole episodes
on the real tools, every failure recorded, and the database file never changes. The
rollout driver and the rewards get the same turns in tests/training/rollout/test_turn_fuzz.py."""

from __future__ import annotations

import hashlib
import random
import re
from pathlib import Path
from typing import Any

import pytest

from agents import make_agent
from designs.think2sql.agent import FORMAT_RE, follows_format
from tests.helpers.agent_scripts import SCRIPTS
from tests.helpers.turn_fuzz import KINDS, TurnFuzzer, finishes_within, looping_turn
from tests.helpers.turn_fuzz_run import DesignTally, fuzz_example, short_query_deadlines, text_path, variants

TURNS_PER_DESIGN = 300


def _digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@pytest.mark.parametrize("label, name, options", variants(), ids=[v[0] for v in variants()])
def test_adversarial_turns_never_raise(label: str, name: str, options: dict, db: Any) -> None:
    scripts = [t for turns in SCRIPTS[name].values() for t in turns]
    tally = DesignTally()
    before = _digest(db.path)
    with short_query_deadlines(0.2):
        agent = make_agent(name, **options)
        text_path(
            agent,
            fuzz_example(name, Path(db.path)),
            db,
            TurnFuzzer(f"agents-{label}", scripts),
            TURNS_PER_DESIGN,
            {},
            tally,
        )
    assert not tally.exceptions, tally.exceptions[:3]
    assert not tally.violations, tally.violations[:3]
    assert tally.turns == TURNS_PER_DESIGN and tally.episodes > 10
    assert tally.format_failures and set(tally.end_reasons) <= {"answer", "turn_budget", "format_cutoff"}
    if name != "think2sql":  # adversarial calls reached the tools and came back as structured errors
        assert {"ok", "forbidden", "bad_arguments"} <= set(tally.outcomes), tally.outcomes
    assert _digest(db.path) == before  # nothing the model wrote changed the database


# ----------------------------------------------------------------------------- Think2SQL's format check


def test_a_looping_think2sql_turn_is_judged_without_backtracking(example: Any, db: Any) -> None:
    """Found by the fuzz (a looping turn): the paper's regex backtracks quadratically on a
    long turn that does not match - 1.5 s at 110k characters, about 8 minutes at 2M - so
    one looping rollout stalled a worker. The check is now linear: 2M characters within
    the 30 s bound (it needs milliseconds; the regex needs minutes)."""
    text = looping_turn(2_000_000)
    episode = make_agent("think2sql").start(example, db)
    with finishes_within(30):
        step = episode.step(text)
    assert not step.format_ok and step.format_reason
    assert episode.result().final_sql is not None  # the first answer block is still read


def test_follows_format_agrees_with_the_papers_regex() -> None:
    rng = random.Random(11)
    pieces = ["<think>", "</think>", "<answer>", "</answer>", " ", "\n", "\u2003", "\x1c", "x", "<", "think>", "answer"]

    def soup(n: int) -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randrange(n)))

    texts = [soup(12) for _ in range(30_000)]  # mostly misses
    texts += [  # the format with soup in every gap: matches and near misses
        f"{soup(2)}<think>{soup(4)}</think>{soup(2)}<answer>{soup(4)}</answer>{soup(2)}" for _ in range(30_000)
    ]
    texts += [SCRIPTS["think2sql"]["agent"][0], looping_turn(3000), " \t<think></think><answer></answer>"]
    verdicts = [(follows_format(t), FORMAT_RE.fullmatch(t) is not None) for t in texts]
    wrong = [t for t, (mine, paper) in zip(texts, verdicts, strict=True) if mine != paper]
    assert not wrong, wrong[:3]
    assert 5_000 < sum(paper for _, paper in verdicts) < 55_000  # matches and misses both covered


def test_the_shared_generator_is_seeded_and_covers_every_kind() -> None:
    scripts = SCRIPTS["trustsql"]["agent"]
    first, second = TurnFuzzer(5, scripts), TurnFuzzer(5, scripts)
    draws = [first.turn() for _ in range(600)]
    assert draws == [second.turn() for _ in range(600)]
    assert {kind for kind, _ in draws} == {kind for kind, _ in KINDS}
    texts = [text for _, text in draws]
    assert max(map(len, texts)) >= 100_000
    assert any(re.search("[\ud800-\udfff]", t) for t in texts)  # lone surrogates reach the episodes
    safe = TurnFuzzer(5, scripts)
    assert not any(re.search("[\ud800-\udfff]", safe.turn(token_safe=True)[1]) for _ in range(600))
