"""Session-wide fixtures shared by several test packages."""

from __future__ import annotations

import os
import sys
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
    """The sweep directory of a real 2 x 2 local sweep (tests/helpers/sweep.py), run once per
    test run: the parallel workers share it (the first to ask runs it, under a lock in the
    run's common temporary folder; the tests only read it)."""
    import fcntl
    import tempfile

    from tests.helpers.sweep import run_tiny_sweep

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # xdist: one folder per worker under it
    done = shared / "tiny-sweep.done"
    with open(shared / "tiny-sweep.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            sweep, proc = run_tiny_sweep(Path(tempfile.mkdtemp(prefix="tiny-sweep-", dir=shared)))
            if proc.returncode != 0:
                pytest.fail(f"the sweep failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            done.write_text(str(sweep))
    return Path(done.read_text())


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


# The veRL fit() tier's modules are the longest in the suite (a module-scoped fit each, one to
# five minutes); run in parallel (`-n`, one file per worker), they go first so that no worker is
# left with one at the end while the others idle.
FIT_TIER = "tests/training/engines/verl/fit/"
LONG_FIRST = (FIT_TIER, "tests/designs/test_outside_design.py")


def _release_fit_runtime() -> None:
    """End the fit tier's shared Ray runtime (``harness.py``) if this process started one."""
    harness = sys.modules.get("tests.training.engines.verl.fit.harness")
    if harness is not None:
        harness.release_runtime()


@pytest.fixture(scope="module", autouse=True)
def _fit_runtime_only_in_the_fit_tier(request: pytest.FixtureRequest) -> None:
    """The fit tier's modules share one Ray runtime per process; a module of any other
    kind starts without it (it may start Ray its own way)."""
    if not request.path.relative_to(request.config.rootpath).as_posix().startswith(FIT_TIER):
        _release_fit_runtime()


@pytest.fixture(scope="session", autouse=True)
def _fit_runtime_released_at_the_end() -> Iterator[None]:
    yield
    _release_fit_runtime()


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n`` (pytest-xdist) the workers share the cores: each worker's torch, and every
    process it starts (``training.run``, ``eval.run``, Ray workers), gets the cores divided by the
    workers as its threads, unless the caller set them. Two workers of two threads each on two
    cores spin-wait for each other's descheduled threads: a TRUST-SQL ``training.run`` step of the
    DuckDB/PostgreSQL tests took 8.6 s beside a two-thread job against 3.1 s with one thread."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers < 2:
        return
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(key, threads)
    if "torch" in sys.modules:  # already imported (a plugin): the variable above came too late for it
        from tests.helpers.threads import outer_threads

        sys.modules["torch"].set_num_threads(outer_threads(os.environ["OMP_NUM_THREADS"]))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Long modules first, the rest in their usual order (a stable sort: every worker of a
    parallel run computes the same order, as xdist requires)."""
    root = config.rootpath

    def long_first(item: pytest.Item) -> int:
        rel = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        return 0 if rel.startswith(LONG_FIRST) else 1

    items.sort(key=long_first)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most four (each may hold a model and a Ray session).
    Not more workers than cores: the full tier on 2 cores took 1,369 s with three workers
    against 1,237 s with two (the Ray sessions' processes then contend for the cores); measured
    again at da70391, three workers had 71 % of the tests done at 600 s, two at 497 s."""
    return max(1, min(os.cpu_count() or 1, 4))
