"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def _design_recipes() -> None:
    """The designs' recipes on Hydra's search path for tests that compose with Hydra's own
    ``compose`` API (the commands and ``training.config.compose_tree`` do this themselves)."""
    from training.config.search_path import use_design_recipes

    use_design_recipes()


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep directory of a real 2 x 2 local sweep (tests/helpers/sweep.py), run once."""
    from tests.helpers.sweep import run_tiny_sweep

    sweep, proc = run_tiny_sweep(tmp_path_factory.mktemp("sweep-work"))
    if proc.returncode != 0:
        pytest.fail(f"the sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return sweep
