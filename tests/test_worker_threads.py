"""tests/conftest.py's ``pytest_configure``: under pytest-xdist each worker, and what it
starts, gets the cores divided by the workers as its threads; a caller's own setting stays,
read by ``tests/helpers/threads.py`` (also the async benchmark's reader) as a count or
OpenMP's nested list."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from tests.conftest import pytest_configure
from tests.helpers.threads import outer_threads


@pytest.fixture
def threads_restored(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    before = torch.get_num_threads()
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(key, raising=False)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("cores", "workers", "threads"), [(2, 2, "1"), (16, 4, "4"), (2, 3, "1")])
def test_each_worker_gets_its_share_of_the_cores(
    cores: int, workers: int, threads: str, monkeypatch: pytest.MonkeyPatch, threads_restored: None
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(workers))
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    pytest_configure(None)  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == os.environ["MKL_NUM_THREADS"] == threads
    assert torch.get_num_threads() == int(threads)


def test_one_process_and_a_callers_setting_are_left_alone(
    monkeypatch: pytest.MonkeyPatch, threads_restored: None
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    pytest_configure(None)  # type: ignore[arg-type]
    assert "OMP_NUM_THREADS" not in os.environ
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    pytest_configure(None)  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == "3" and torch.get_num_threads() == 3


def test_a_callers_nested_setting_gives_torch_its_first_level(
    monkeypatch: pytest.MonkeyPatch, threads_restored: None
) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")
    pytest_configure(None)  # type: ignore[arg-type]
    assert os.environ["OMP_NUM_THREADS"] == "3,1" and torch.get_num_threads() == 3


@pytest.mark.parametrize(("value", "threads"), [("2", 2), ("4,2", 4), (" 3 ,1", 3), ("1", 1)])
def test_a_count_or_openmps_nested_list_gives_its_first_level(value: str, threads: int) -> None:
    assert outer_threads(value) == threads


@pytest.mark.parametrize("value", ["", "two", "0", "-1", ",2"])
def test_anything_else_is_refused_with_the_value_named(value: str) -> None:
    with pytest.raises(ValueError, match="OMP_NUM_THREADS=.*nested list such as '4,2'") as err:
        outer_threads(value)
    assert repr(value) in str(err.value)
