"""Lossless resume under ``trainer.mode=colocate_async``: a job sent SIGTERM in the middle
of step 3 of 4, then the same command again (``resume=auto``), through veRL's real
``fit()`` (``resume_child.py``; only the FSDP worker group and the vLLM server are doubles).

Twelve distinct training questions in file order (no shuffle) at B = 2 with one warm-up
batch: by the end of step 3 the trainer has drawn 2 + 3 x 2 = 8 of them (t0..t7) and
trained 6; the other 2 are in flight or finished but not yet trained. ``trainer.staleness=3``
keeps every rollout within the bound, so none is dropped by design. The checkpoint of step
3 saves veRL's TransferQueue state with the dataloader's; the requeued job must restore
exactly those 2 (the job prints them), and no question may be trained twice or skipped:
step 4 trains questions drawn before the kill or the next ones in order, never one again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.training.engines.verl.fit.test_resume import job, records
from training.runs.preemption import REQUEUE_EXIT_STATUS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

CHANGES = (
    "trainer.mode=colocate_async",
    "trainer.staleness=3",
    "trainer.total_steps=4",
    "trainer.save_every=10",
)


def trained(run_dir: Path) -> dict[int, list[str]]:
    """Step -> the training questions its update used (one per group)."""
    out: dict[int, set[str]] = {}
    for r in records(run_dir / "samples.jsonl"):
        out.setdefault(r["step"], set()).add(r["example_id"])
    return {step: sorted(ids) for step, ids in sorted(out.items())}


def test_a_requeued_async_job_trains_every_drawn_question_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLAGENT_TEST_TRAIN", "12")
    run_dir = tmp_path / "run"
    stopped = job(tmp_path, sigterm_at=3, changes=CHANGES)
    assert stopped.returncode == REQUEUE_EXIT_STATUS, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    first = trained(run_dir)
    assert sorted(first) == [1, 2, 3] and all(len(ids) == 2 for ids in first.values())
    before = [i for ids in first.values() for i in ids]
    drawn = [f"t{i}" for i in range(8)]  # the warm-up batch and each step's batch, in file order
    assert len(set(before)) == 6 and set(before) <= set(drawn)

    again = job(tmp_path, changes=CHANGES)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "[child] fit starts at step 3" in again.stdout and "[child] fit ended at step 4" in again.stdout
    line = next(x for x in again.stdout.splitlines() if x.startswith("[child] restored "))
    restored = json.loads(line.removeprefix("[child] restored "))
    assert sorted(restored) == sorted(set(drawn) - set(before))  # every drawn, untrained question came back

    steps = trained(run_dir)
    assert sorted(steps) == [1, 2, 3, 4] and {s: steps[s] for s in (1, 2, 3)} == first
    everything = [i for ids in steps.values() for i in ids]
    assert len(everything) == len(set(everything)) == 8  # no question trained twice
    assert set(steps[4]) <= set(restored) | {"t8", "t9"}  # restored ones, or the next in order: none skipped
