"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.helpers.pg_server import PgServer


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


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A private PostgreSQL server for the whole session (tests/helpers/pg_server.py): a Unix
    socket in a temporary folder, no TCP, stopped at the end. Without PostgreSQL's binaries
    the tests that use it skip, except in CI (``CI=true``), where they fail: CI installs them."""
    from tests.helpers.pg_server import postgres_bindir, start_server

    bindir = postgres_bindir()
    if bindir is None:
        message = "no PostgreSQL server binaries (initdb): install Debian's postgresql package"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = start_server(bindir)
    try:
        yield server
    finally:
        server.stop()
