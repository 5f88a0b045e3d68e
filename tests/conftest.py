"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep directory of a real 2 x 2 local sweep (tests/helpers/sweep.py), run once."""
    from tests.helpers.sweep import run_tiny_sweep

    sweep, proc = run_tiny_sweep(tmp_path_factory.mktemp("sweep-work"))
    if proc.returncode != 0:
        pytest.fail(f"the sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return sweep
