"""benchmarks/bench_async_throughput.py's inputs: the latency factors come from the main
jobs' measured turn lengths, and the timed worker group adds its seconds to each update
(the simulation itself starts three Ray sessions: its figures are in docs/engines.md)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def bench() -> Any:
    spec = importlib.util.spec_from_file_location(
        "bench_async_throughput", REPO / "benchmarks" / "bench_async_throughput.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_latency_factors_are_the_measured_turn_lengths_over_their_median() -> None:
    module = bench()
    measured = json.loads(module.TURN_TOKENS.read_text())["turn_tokens"]
    assert set(measured) == {"retoolsql", "think2sql", "trustsql", "dualsql"}
    for recipe, counts in measured.items():
        factors = module.latency_factors(recipe)
        assert len(factors) == len([c for c in counts if c > 0]) > 0
        assert statistics.median(factors) == 1.0 and max(factors) == max(counts) / statistics.median(counts)


def test_the_timed_worker_group_adds_its_seconds_to_each_update() -> None:
    module = bench()

    class Group:
        def _train_mini_batch(self, data: Any) -> Any:
            return ("trained", data)

    class Trainer:
        worker_group_cls = Group

    timed = module.with_update_time(Trainer, 0.2)
    assert issubclass(timed, Trainer) and timed.worker_group_cls is not Group
    start = time.monotonic()
    assert timed.worker_group_cls()._train_mini_batch(7) == ("trained", 7)
    assert time.monotonic() - start >= 0.2
