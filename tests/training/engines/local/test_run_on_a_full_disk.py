"""A local run whose disk fills up, for real (a small tmpfs, tests/helpers/small_disk.py):
the checkpoint that does not fit raises ``DiskFullError`` naming the checkpoint directory,
the bytes free there and the size a checkpoint takes; the records hold only whole lines,
the last complete checkpoint stays the resume point, and once room is made ``resume=auto``
finishes the run with every step recorded once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agents.types import Example
from tests.helpers.local_trainer import trainer
from tests.helpers.small_disk import fill_leaving, small_disk
from tools.errors import DiskFullError
from training.engines.local import state as st


def lines_of(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} ends in a cut line"
    return [json.loads(line) for line in text.splitlines()]  # a half line would not parse


@pytest.mark.slow
def test_a_run_whose_disk_fills_stops_cleanly_and_resumes(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.total_steps=2", "algorithm.dynamic_sampling.enable=false", "trainer.keep_checkpoints=2")
    with small_disk(tmp_path / "disk", 64 << 20) as disk:
        run_dir = disk / "run"
        first = trainer("think2sql", run_dir, examples, *extra)
        save = first.save
        sizes: list[int] = []

        def save_then_fill() -> Path:  # the disk fills up after the first checkpoint
            path = save()
            if first.step == 1:
                sizes.append(st.disk_usage(path)[0])
                fill_leaving(disk, sizes[0] // 2)  # the next checkpoint does not fit
            return path

        first.save = save_then_fill  # type: ignore[method-assign]
        with pytest.raises(DiskFullError) as err:
            first.fit()
        message = str(err.value)
        assert str(run_dir / "checkpoints") in message and "checkpoint of step 2" in message, message
        assert "free there" in message and f"{sizes[0]:,} bytes" in message and "resume=auto" in message, message

        assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["latest", "step_000001"]
        assert st.read_meta(st.latest_checkpoint(run_dir)).step == 1
        assert [r["step"] for r in lines_of(run_dir / "metrics.jsonl") if r["kind"] == "train"] == [1, 2]
        assert not list(disk.rglob("*.tmp"))  # what the failed save wrote is gone

        (disk / "filler.bin").unlink()  # room made
        said: list[str] = []
        resumed = trainer("think2sql", run_dir, examples, *extra, "resume=auto")
        resumed.say = said.append
        summary = resumed.fit()
        assert any("continuing from" in line and "step_000001" in line for line in said), said
        assert summary["steps"] == 2 and st.read_meta(st.latest_checkpoint(run_dir)).step == 2
        assert [r["step"] for r in lines_of(run_dir / "metrics.jsonl") if r["kind"] == "train"] == [1, 2]
        per_step = Counter(r["step"] for r in lines_of(run_dir / "samples.jsonl"))
        assert sorted(per_step) == [1, 2] and per_step[1] == per_step[2], per_step
