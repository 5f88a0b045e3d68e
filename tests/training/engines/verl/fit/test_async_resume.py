"""Lossless resume under the async trainers, through veRL's real ``fit()``
(``resume_child.py``; only the FSDP worker group and the vLLM server are doubles): a
``colocate_async`` job sent SIGTERM in the middle of step 3 of 4, and a ``separate_async``
job killed with SIGKILL in the middle of step 4's checkpoint, each followed by the same
command again (``resume=auto``).

Twelve distinct training questions in file order (no shuffle) at B = 2 with one warm-up
batch. ``colocate_async``: by the end of step 3 the trainer has drawn 2 + 3 x 2 = 8 of them (t0..t7) and
trained 6; the other 2 are in flight or finished but not yet trained. ``trainer.staleness=3``
keeps every rollout within the bound, so none is dropped by design. The checkpoint of step
3 saves veRL's TransferQueue state with the dataloader's; the requeued job must restore
exactly those 2 (the job prints them), and no question may be trained twice or skipped:
step 4 trains questions drawn before the kill or the next ones in order, never one again.
``separate_async`` draws ahead while it trains, so how far it had drawn by step 2's save is
read from the restored dataloader; the rest of the check is the same, and the half-written
step 4 is discarded as in the sync chain (``test_resume.py``).
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.training.engines.verl.fit.test_resume import (
    assert_each_step_recorded_once,
    assert_one_wandb_run,
    job,
    records,
)
from training.runs import resume_policy as R
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


def printed(stdout: str, label: str) -> str:
    """What the job printed after ``[child] <label> ``."""
    prefix = f"[child] {label} "
    return next(x for x in stdout.splitlines() if x.startswith(prefix)).removeprefix(prefix)


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
    restored = json.loads(printed(again.stdout, "restored"))
    assert sorted(restored) == sorted(set(drawn) - set(before))  # every drawn, untrained question came back
    assert printed(again.stdout, "dataloader at") == "8"

    steps = trained(run_dir)
    assert sorted(steps) == [1, 2, 3, 4] and {s: steps[s] for s in (1, 2, 3)} == first
    everything = [i for ids in steps.values() for i in ids]
    assert len(everything) == len(set(everything)) == 8  # no question trained twice
    assert set(steps[4]) <= set(restored) | {"t8", "t9"}  # restored ones, or the next in order: none skipped


SEPARATE = (
    "trainer.mode=separate_async",
    "trainer.rollout_gpus=1",
    "trainer.staleness=3",
    "trainer.total_steps=4",
    "trainer.save_every=2",
)


def file_index(example_id: str) -> int:
    return int(example_id.removeprefix("t"))


def test_a_separate_async_job_killed_mid_save_continues_from_the_last_complete_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``separate_async`` (the rollout pool generating while the trainer trains), killed with
    SIGKILL halfway through writing step 4's checkpoint: the rerun discards the half-written
    step, restores step 2's TransferQueue state and redoes steps 3 and 4. Every question the
    first job drew by step 2 is either trained in steps 1-2 or restored (the draws are a
    prefix of the file), and no question is trained twice in the records that stand."""
    monkeypatch.setenv("SQLAGENT_TEST_TRAIN", "12")
    run_dir = tmp_path / "run"
    ckpt = run_dir / "checkpoints"
    killed = job(tmp_path, kill_at=4, changes=SEPARATE)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-2000:] + killed.stderr[-3000:]
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True), (4, False)]
    assert (ckpt / R.VERL_TRACKER).read_text() == "2"
    assert sorted(r["step"] for r in records(run_dir / "metrics.jsonl") if r["kind"] == "train") == [1, 2, 3]
    first = trained(run_dir)
    assert sorted(first)[:3] == [1, 2, 3] and all(len(first[s]) == 2 for s in (1, 2, 3))
    wandb_id = (run_dir / "wandb_run_id").read_text().strip()

    again = job(tmp_path, changes=SEPARATE)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "discarding half-written checkpoint" in again.stdout and "global_step_4" in again.stdout
    assert "[child] fit starts at step 2" in again.stdout and "[child] fit ended at step 4" in again.stdout
    restored = json.loads(printed(again.stdout, "restored"))
    kept = [i for s in (1, 2) for i in first[s]]
    assert restored and not set(restored) & set(kept)
    position = int(printed(again.stdout, "dataloader at"))
    drawn = sorted(set(restored) | set(kept), key=file_index)
    assert [file_index(i) for i in drawn] == list(range(position))  # nothing drawn by step 2 lost or skipped

    steps = trained(run_dir)
    assert sorted(steps) == [1, 2, 3, 4] and {s: steps[s] for s in (1, 2)} == {s: first[s] for s in (1, 2)}
    everything = [i for ids in steps.values() for i in ids]
    assert len(everything) == len(set(everything)) == 8  # no question trained twice
    fresh = set(steps[3] + steps[4]) - set(restored)
    assert all(file_index(i) >= position for i in fresh)  # the rerun draws on from where step 2 stood
    assert [(c.step, c.complete) for c in R.verl_step_checkpoints(ckpt)] == [(2, True), (4, True)]
    assert_each_step_recorded_once(run_dir, steps=4)  # the killed job's steps 3 and 4 are redone, not doubled
    assert (run_dir / "final" / "config.json").is_file()
    assert_one_wandb_run(run_dir, wandb_id, jobs=2)
