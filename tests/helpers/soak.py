"""The kill -9 soak of the local engine (benchmarks/soak_local.py and the slow test
tests/training/engines/local/test_soak.py).

A real ``python -m training.run`` of the tiny model (tests/helpers/tiny_model.py) on the
bundled minibird data, a checkpoint every step. The soaked run is started with
``resume=auto``, killed with SIGKILL at seeded random points and started again with
``resume=auto`` after each kill until it finishes. Kill points come in three kinds: right
after a step's record appears (before that step's checkpoint is written: the window where
a rerun could record the step twice), a random delay of up to two steps after a step's
record (mid-rollout, mid-update, mid-save), and a random delay after a process writes its
first record (its start-up evaluation, or its first step after resuming). ``compare_runs``
then holds the soaked run against an uninterrupted run of the same command: every weight
tensor equal, and every record file equal record by record (each step's records once) with
only wall-clock fields left out.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RECORD_FILES = ("metrics.jsonl", "samples.jsonl", "prompts.jsonl", "heldout_before.jsonl", "heldout_after.jsonl")
"""What a run writes record by record (docs/engines.md); summary.json is compared apart."""
TIMING_KEYS = ("wall_time", "duration_s")
"""Wall-clock fields; keys starting ``time/`` are timings too."""


@dataclass
class Kill:
    """One SIGKILL: ``delay_s`` after the train record of ``step`` (or a later one) appears;
    ``step=None``: after the process writes its first record."""

    step: int | None
    delay_s: float
    killed_after_s: float = 0.0
    last_record: str = ""  # the last record of metrics.jsonl when the kill landed
    checkpoint: str = ""  # the newest checkpoint then


def command(
    run_dir: Path, model_dir: Path, steps: int, seed: int, recipe: str, extra: tuple[str, ...] = ()
) -> list[str]:
    """The training command both runs use (``resume=auto``; one checkpoint per step)."""
    return [
        sys.executable,
        "-m",
        "training.run",
        f"recipe={recipe}",
        "model=hf",
        f"model.path={model_dir}",
        "engine=local",
        "engine.device=cpu",
        "stage.warm_start.enable=false",
        f"trainer.total_steps={steps}",
        "trainer.save_every=1",
        "trainer.eval_before_after=true",
        "algorithm.group_size=2",
        "algorithm.batch_size=1",
        "data.limit=4",
        "data.eval_limit=2",
        "rollout.max_new_tokens=16",
        "logger=[]",
        f"seed={seed}",
        f"run_dir={run_dir}",
        "resume=auto",
        *extra,
    ]


def child_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="disabled", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    env.pop("WANDB_RUN_GROUP", None)
    env.pop("WANDB_TAGS", None)
    return env


def run_once(cmd: list[str], cwd: Path, log: Path, timeout_s: float) -> int:
    """Run ``cmd`` to the end; its output goes to ``log`` (appended)."""
    with open(log, "a") as out:
        return subprocess.run(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=child_env(), timeout=timeout_s
        ).returncode


def kill_points(rng: random.Random, steps: int, kills: int, step_s: float) -> list[Kill]:
    """``kills`` seeded kill points of the three kinds (module docstring), in step order."""
    targets = sorted(rng.randrange(1, steps + 1) for _ in range(kills))
    points = []
    for step in targets:
        kind = rng.random()
        if kind < 0.25:
            points.append(Kill(None, round(rng.uniform(0.0, 3.0 * step_s), 3)))  # start-up
        elif kind < 0.6:
            points.append(Kill(step, 0.0))  # between the record and the checkpoint
        else:
            points.append(Kill(step, round(rng.uniform(0.0, 2.0 * step_s), 3)))
    return points


def _train_steps(lines: list[str]) -> list[int]:
    steps = []
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if row.get("kind") == "train":
            steps.append(int(row["step"]))
    return steps


def _describe(line: str) -> str:
    try:
        row = json.loads(line)
    except ValueError:
        return f"a cut line ({len(line)} characters)"
    return f"{row.get('kind')} {row.get('step')}"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []


def run_with_kills(
    cmd: list[str], run_dir: Path, cwd: Path, log: Path, kills: list[Kill], timeout_s: float
) -> list[Kill]:
    """Start ``cmd``, SIGKILL it at each kill point, start it again; then let it finish.
    Returns the kills that landed (a run that finished before a point is not killed)."""
    metrics = run_dir / "metrics.jsonl"
    landed: list[Kill] = []
    deadline = time.monotonic() + timeout_s
    for kill in kills:
        seen = len(_lines(metrics))
        with open(log, "a") as out:
            when = "its first record" if kill.step is None else f"step {kill.step}"
            out.write(f"\n==== soak: start, kill after {when} + {kill.delay_s} s\n")
            out.flush()
            proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env=child_env())
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() < deadline:
            new = _lines(metrics)[seen:]
            if new and (kill.step is None or any(step >= kill.step for step in _train_steps(new))):
                time.sleep(kill.delay_s)
                break
            time.sleep(0.02)
        if proc.poll() is not None:  # finished (or failed) before the point
            if proc.returncode != 0:
                raise RuntimeError(f"the soaked run failed (exit {proc.returncode}) before a kill; see {log}")
            return landed
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        lines = _lines(metrics)
        latest = run_dir / "checkpoints" / "latest"
        kill.killed_after_s = round(time.monotonic() - started, 2)
        kill.last_record = _describe(lines[-1]) if lines else "none"
        kill.checkpoint = latest.read_text().strip() if latest.is_file() else "none"
        landed.append(kill)
    rc = run_once(cmd, cwd, log, max(deadline - time.monotonic(), 60))
    if rc != 0:
        raise RuntimeError(f"the soaked run's last start failed (exit {rc}); see {log}")
    return landed


# ----------------------------------------------------------------------------- comparing two runs


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k not in TIMING_KEYS and not k.startswith("time/")}


def _records(path: Path) -> list[Any]:
    rows = []
    for line in _lines(path):
        try:
            rows.append(json.loads(line))
        except ValueError:
            rows.append({"unreadable line": line[:200]})
    return rows


def _metrics(path: Path) -> list[dict[str, Any]]:
    """metrics.jsonl without its config records (a resumed run appends one per start)."""
    return [_plain(r) for r in _records(path) if r.get("kind") != "config"]


def compare_runs(reference: Path, soaked: Path) -> list[str]:
    """What differs between an uninterrupted run and a soaked one ([] when nothing)."""
    import torch
    from safetensors.torch import load_file

    problems = []
    a, b = load_file(reference / "final" / "model.safetensors"), load_file(soaked / "final" / "model.safetensors")
    if set(a) != set(b):
        problems.append(f"final weights: tensors {sorted(set(a) ^ set(b))} in one run only")
    unequal = [k for k in sorted(set(a) & set(b)) if not torch.equal(a[k], b[k])]
    if unequal:
        problems.append(f"final weights: {len(unequal)} of {len(a)} tensors differ, e.g. {unequal[:3]}")
    for name in RECORD_FILES:
        if name == "metrics.jsonl":
            want, got = _metrics(reference / name), _metrics(soaked / name)
            keys = [(r.get("kind"), r.get("step")) for r in got]
            repeated = sorted({k for k in keys if keys.count(k) > 1}, key=str)
            if repeated:
                problems.append(f"metrics.jsonl: records written more than once: {repeated[:8]}")
        else:
            want, got = [_plain(r) for r in _records(reference / name)], [_plain(r) for r in _records(soaked / name)]
        if want != got:
            first = next(
                (i for i, (x, y) in enumerate(zip(want, got, strict=False)) if x != y), min(len(want), len(got))
            )
            problems.append(
                f"{name}: {len(got)} records against {len(want)} uninterrupted; first difference at record {first}: "
                f"{_diff(want[first] if first < len(want) else None, got[first] if first < len(got) else None)}"
            )
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (reference, soaked))
    for key in ("steps", "ex_before", "ex_after", "eval_questions"):
        if sa.get(key) != sb.get(key):
            problems.append(f"summary.json {key}: {sb.get(key)!r}, uninterrupted {sa.get(key)!r}")
    return problems


def _diff(want: Any, got: Any) -> str:
    if not (isinstance(want, dict) and isinstance(got, dict)):
        return f"uninterrupted {str(want)[:160]!r}, soaked {str(got)[:160]!r}"
    keys = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
    return ", ".join(f"{k}: {str(want.get(k))[:60]!r} vs {str(got.get(k))[:60]!r}" for k in keys[:4])


def step_seconds(run_dir: Path) -> float:
    """The median ``time/step`` of a finished run (sizes the kill delays)."""
    times = sorted(r["time/step"] for r in _records(run_dir / "metrics.jsonl") if r.get("kind") == "train")
    return times[len(times) // 2] if times else 1.0
