"""The shared types' helpers: BIRD's difficulty order, defined once."""

from __future__ import annotations

import doctest

import agents.types
from agents.types import DIFFICULTY_ORDER, difficulty_order


def test_doctests() -> None:
    result = doctest.testmod(agents.types)
    assert result.attempted >= 1 and result.failed == 0


def test_bird_labels_come_first_in_their_order_then_the_rest_alphabetically() -> None:
    labels = ["zeta", "challenging", "unknown", "moderate", "simple", "moderate"]
    assert difficulty_order(labels) == [*DIFFICULTY_ORDER, "unknown", "zeta"]
    assert difficulty_order(["challenging"]) == ["challenging"]
