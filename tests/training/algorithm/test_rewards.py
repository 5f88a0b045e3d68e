"""Single-metric rewards, the registry, the shared DAPO penalty and the doctests."""

from __future__ import annotations

import doctest
import importlib
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.designs import project_designs
from tests.helpers.reward_cases import example, trajectory, turn
from tools.errors import ConfigError, UnknownNameError
from training.algorithm.rewards import dapo_overlong_penalty, get_reward, list_rewards, register_reward

SINGLE_METRIC = ["ex", "qatch", "rex"]


def design_rewards() -> list[str]:
    """The reward each registered design's recipe uses."""
    from agents.designs import get_design, list_designs

    return sorted({get_design(name).reward for name in list_designs()})


def test_registered_names() -> None:
    assert list_rewards() == sorted({*SINGLE_METRIC, *design_rewards()})


def test_unknown_name_suggests() -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'trustsql'"):
        get_reward("trustsq")


def test_unknown_option_lists_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="schema_mode"):
        get_reward("trustsql", schema_mod="f1")


def test_reregistering_a_name_with_another_object_fails() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_reward("ex")(type("Other", (), {}))


@pytest.mark.parametrize("name", [*design_rewards(), *SINGLE_METRIC])
def test_every_reward_takes_the_exec_metric_knob(name: str) -> None:
    metric = name if name in ("ex", "rex", "qatch") else "rex"
    assert get_reward(name, exec_metric=metric).exec_metric == metric


def test_single_metric_reward_refuses_another_metric() -> None:
    with pytest.raises(ConfigError, match="use reward=rex"):
        get_reward("ex", exec_metric="rex")


@pytest.mark.parametrize("name, expected", [("ex", 0.0), ("rex", 3 / 5), ("qatch", (1 + 3 / 5 + 3 / 5) / 3)])
def test_single_metric_values(school_db: Any, name: str, expected: float) -> None:
    # gold: 5 names; pred: 3 of them. REX 3/5; QATCH CP 1, CR 3/5, TC 3/5
    traj = trajectory("SELECT name FROM students WHERE id <= 3", [turn(0, "answer")])
    out = get_reward(name)(traj, example("SELECT name FROM students"), school_db)
    assert out.error is None
    assert out.total == pytest.approx(expected)
    assert out.components == {"exec": out.total} and out.tracks == {"full": out.total}


def test_no_database_is_an_error_not_a_raise() -> None:
    traj = trajectory("SELECT 1", [turn(0, "answer")])
    out = get_reward("ex")(traj, example("SELECT 1"), None)
    assert out.error and "no database" in out.error


@pytest.mark.parametrize(
    "length, expected",
    [(0, 0.0), (6000, 0.0), (6001, -1 / 2000), (7000, -0.5), (7999, -1999 / 2000), (8000, -1.0), (10**6, -1.0)],
)
def test_dapo_overlong_penalty(length: int, expected: float) -> None:
    assert dapo_overlong_penalty(length, 8000, 2000) == pytest.approx(expected)


def test_dapo_overlong_penalty_rejects_a_bad_window() -> None:
    with pytest.raises(ConfigError, match="buffer"):
        dapo_overlong_penalty(10, 100, 0)


@pytest.mark.parametrize(
    "module", ["training.algorithm.rewards", *(f"designs.{name}.reward" for name in project_designs())]
)
def test_doctests(module: str) -> None:
    mod = importlib.import_module(module)
    result = doctest.testmod(mod)
    assert result.attempted > 0 and result.failed == 0


def test_a_database_path_is_accepted(school_db: Any) -> None:
    traj = trajectory("SELECT COUNT(*) FROM students", [turn(0, "answer")])
    out = get_reward("ex")(traj, example("SELECT 5"), str(school_db.path))
    assert out.error is None and out.total == 1.0


def test_a_schema_that_cannot_be_read_is_reported_once_not_swallowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.helpers.reward_cases import build_school_db
    from tools import Database
    from training.algorithm.rewards import gold_references

    path = build_school_db(tmp_path / "gone.sqlite")
    db = Database(path)
    path.unlink()  # the file vanished between loading and scoring
    ex = example("SELECT * FROM clubs", with_refs=False)
    with caplog.at_level(logging.WARNING, logger="training.algorithm.rewards"):
        tables, _ = gold_references(ex, db)
        gold_references(ex, db)
    assert tables == {"clubs"}  # the reward goes on with what the SQL names
    said = [r.getMessage() for r in caplog.records if "cannot read the schema" in r.getMessage()]
    assert len(said) == 1 and "gone.sqlite" in said[0] and "No such file" in said[0], said
