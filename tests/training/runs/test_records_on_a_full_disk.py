"""A run's records on a full disk, for real (a small tmpfs, tests/helpers/small_disk.py):
metrics.jsonl and samples.jsonl keep whole lines only and the write raises
``DiskFullError`` naming the run directory; run.log stops being copied while the console
goes on; and a run continuing from a checkpoint drops the records of later steps (made
before it stopped), so each step stays recorded once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.small_disk import fill_leaving, small_disk
from tools.errors import DiskFullError
from training.runs.logger import ConsoleLog, RunLogger
from training.runs.samples import SampleWriter


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with small_disk(tmp_path / "small", 2 << 20) as mounted:
        yield mounted


def test_a_metrics_record_that_does_not_fit_leaves_the_file_whole(disk: Path) -> None:
    logger = RunLogger(disk, sinks=(), total_steps=3, start_step=0)
    logger.log(1, {"reward/total": 0.5})
    before = (disk / "metrics.jsonl").read_bytes()
    fill_leaving(disk, 4096)
    with pytest.raises(DiskFullError) as err:
        logger.log(2, {"reward/total": 0.25, "inputs": "z" * 60_000})
    logger.close()
    message = str(err.value)
    assert str(disk) in message and "metrics.jsonl" in message and "free there" in message, message
    assert "run_dir=" in message and "resume=auto" in message
    assert (disk / "metrics.jsonl").read_bytes() == before  # no half line


def test_samples_that_do_not_fit_leave_the_file_whole(disk: Path) -> None:
    writer = SampleWriter(disk)
    writer.write([{"step": 1, "tokens": ["a"]}], {"p1": [{"role": "user", "content": "q"}]})
    before = (disk / "samples.jsonl").read_bytes()
    fill_leaving(disk, 4096)
    with pytest.raises(DiskFullError, match="samples.jsonl"):
        writer.write([{"step": 2, "tokens": ["b" * 40_000]}], {})
    assert (disk / "samples.jsonl").read_bytes() == before


def test_a_full_disk_stops_the_run_log_not_the_console(disk: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(DiskFullError, match="the checkpoint"), ConsoleLog(disk / "run.log"):
        print("step 1 done")
        fill_leaving(disk, 0)
        print("x" * 10_000)  # does not fit in run.log
        print("step 2 done")
        raise DiskFullError("no space left to write the checkpoint")
    out, err = capsys.readouterr()
    assert "step 1 done" in out and "step 2 done" in out
    assert "run.log is no longer written" in err
    log = (disk / "run.log").read_text()
    assert "step 1 done\n" in log and "step 2 done" not in log and log.endswith("\n")


def write_lines(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_continued_run_drops_the_records_of_steps_after_its_checkpoint(tmp_path: Path) -> None:
    metrics = [
        {"step": 0, "kind": "config"},
        {"step": 1, "kind": "train"},
        {"step": 2, "kind": "train"},
        {"step": 2, "kind": "eval_val"},
        {"step": 3, "kind": "train"},  # made after the checkpoint of step 2
    ]
    write_lines(tmp_path / "metrics.jsonl", metrics)
    with open(tmp_path / "metrics.jsonl", "a") as out:
        out.write('{"step": 4, "ki')  # cut by a kill
    write_lines(tmp_path / "samples.jsonl", [{"schema": 1, "step": s} for s in (1, 1, 2, 2, 3, 3)])
    RunLogger(tmp_path, sinks=(), total_steps=5, start_step=2).close()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows == metrics[:4]
    assert [json.loads(line)["step"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()] == [1, 1, 2, 2]


def test_a_logger_without_a_start_step_keeps_every_record(tmp_path: Path) -> None:
    """veRL's workers open the records without a start step: nothing is dropped there."""
    rows = [{"step": 1, "kind": "train"}, {"step": 2, "kind": "train"}]
    write_lines(tmp_path / "metrics.jsonl", rows)
    RunLogger(tmp_path, sinks=(), total_steps=5).close()
    assert [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == rows
