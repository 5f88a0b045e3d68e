"""``eval.run`` holds its output directory's lock: a second evaluation into a directory
another process holds exits with status 2 naming it and writes nothing there, whether the
directory is set (``eval.out_dir``, refused before anything is loaded) or the default one
(refused by the evaluation loop); a finished run leaves no lock; a dry run takes none."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from eval.data import load_examples
from eval.evaluate import evaluate_policy, evaluate_predictions
from tests.eval.conftest import PREDICTIONS, quiet, write_jsonl
from tests.helpers.commands import run_module
from tests.tools.lock_holder import lock_owner, start_holder, stop_holder
from tools.errors import RunDirInUseError


def evaluate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return run_module("eval.run", *args, cwd=cwd, timeout=180, WANDB_MODE="offline")


@pytest.mark.slow
def test_a_second_evaluation_into_a_held_out_dir_is_refused(bird: Path, tmp_path: Path) -> None:
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir()
    scoring = [f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.timeout_s=1"]
    holder = start_holder(out, "eval-one")
    try:
        proc = evaluate(work, *scoring, f"eval.out_dir={out}")
        assert proc.returncode == 2 and "Traceback" not in proc.stderr
        assert f"process {holder.pid} on {socket.gethostname()}" in proc.stderr and "eval-one" in proc.stderr
        assert "pick another eval.out_dir" in proc.stderr
        assert "[data]" not in proc.stdout  # refused before the split was loaded
        assert sorted(p.name for p in out.iterdir()) == ["run.lock"] and lock_owner(out) == holder.pid
        proc = evaluate(work, *scoring, "dry_run=true", f"eval.out_dir={out}")
        assert proc.returncode == 0 and "[eval settings]" in proc.stdout  # a dry run takes no lock
        default = work / "runs" / "eval" / "preds-bird-dev-greedy"
        second = start_holder(default)
        try:
            proc = evaluate(work, *scoring)  # the default directory: refused by the evaluation loop
            assert proc.returncode == 2 and f"process {second.pid}" in proc.stderr
            assert sorted(p.name for p in default.iterdir()) == ["run.lock"]
        finally:
            assert stop_holder(second) == 0
    finally:
        assert stop_holder(holder) == 0
    proc = evaluate(work, *scoring, f"eval.out_dir={out}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (out / "summary.json").is_file() and not (out / "run.lock").exists()  # released at the end


def test_the_evaluation_loops_refuse_a_held_directory(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    holder = start_holder(tmp_path / "out")
    try:
        with pytest.raises(RunDirInUseError, match=f"process {holder.pid} on"):
            evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)
        sampling = SimpleNamespace(temperature=0.0, top_p=1.0, top_k=0, max_new_tokens=8)
        with pytest.raises(RunDirInUseError, match=f"process {holder.pid} on"):
            evaluate_policy(examples, None, None, None, sampling, None, tmp_path / "out", say=quiet, progress=False)
        assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.lock"]
    finally:
        assert stop_holder(holder) == 0
