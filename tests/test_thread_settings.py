"""tests/helpers/threads.py: the thread count the test run and the async benchmark give torch."""

from __future__ import annotations

import pytest

from tests.helpers.threads import outer_threads


@pytest.mark.parametrize(("value", "threads"), [("2", 2), ("4,2", 4), (" 3 ,1", 3), ("1", 1)])
def test_a_count_or_openmps_nested_list_gives_its_first_level(value: str, threads: int) -> None:
    assert outer_threads(value) == threads


@pytest.mark.parametrize("value", ["", "two", "0", "-1", ",2"])
def test_anything_else_is_refused_with_the_value_named(value: str) -> None:
    with pytest.raises(ValueError, match="OMP_NUM_THREADS=.*nested list such as '4,2'") as err:
        outer_threads(value)
    assert repr(value) in str(err.value)
