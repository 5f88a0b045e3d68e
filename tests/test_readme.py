"""The README's Usage block, executed: every command in its ```bash block runs in a
subprocess from one scratch directory, in order, with CPU-sized arguments added, so the
block cannot go stale.

CPU sizing: the first training command trains for real with a tiny random model (saved
here, ``model.path=``) for one step; a ``resume=true`` command runs for real on that
finished run; other training commands get ``dry_run=true``; ``eval.run`` gets the tiny
model (unless the command names one or scores a predictions file) and two questions.
Paths the README names as the user's own (``preds.jsonl``) are made first.

A ``dry_run=true`` command (as written, or made one by the sizing) writes nothing another
command reads and reads nothing another writes, so those run one at a time beside the
others (most of each command is its interpreter's start-up); the rest run in order.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

TINY_TRAIN = (
    "trainer.total_steps=1",
    "algorithm.group_size=2",
    "algorithm.batch_size=1",
    "data.eval_limit=2",
    "rollout.max_new_tokens=8",
    "rollout.max_response_tokens=64",
    "stage.warm_start.enable=false",
    "logger=[console]",
)
TINY_EVAL = ("eval.limit=2", "rollout.max_new_tokens=8", "rollout.max_response_tokens=64")


def usage_commands(readme: str) -> list[list[str]]:
    """The commands of the first ```bash block after '## Usage' (comments dropped)."""
    section = readme[readme.index("## Usage") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the Usage section has no ```bash block"
    return [
        shlex.split(line, comments=True) for line in block.group(1).splitlines() if shlex.split(line, comments=True)
    ]


def with_values(args: list[str], *values: str) -> list[str]:
    """``args`` with each ``key=value`` in ``values`` replacing the same key or appended."""
    out = list(args)
    for value in values:
        key = value.split("=", 1)[0]
        same = [i for i, a in enumerate(out) if a.split("=", 1)[0] == key and "=" in a]
        if same:
            out[same[0]] = value
        else:
            out.append(value)
    return out


def cpu_sized(args: list[str], tiny: Path, state: dict[str, bool]) -> list[str]:
    module = args[2] if args[:2] == ["python", "-m"] else ""
    if module == "training.run" and "dry_run=true" not in args:
        if "resume=true" in args or not state.get("trained"):
            state["trained"] = True
            return with_values(args, f"model.path={tiny}", *TINY_TRAIN)
        return with_values(args, "dry_run=true")
    if module == "eval.run":
        extra = [] if any(a.startswith(("model.path=", "predictions=")) for a in args) else [f"model.path={tiny}"]
        if "eval.mode=sc" in args or "eval.mode=passk" in args:
            extra.append("eval.samples=2")
        return with_values(args, *extra, *TINY_EVAL) if not any(a.startswith("predictions=") for a in args) else args
    return args


@pytest.mark.slow
@pytest.mark.timeout(3600)  # a dozen subprocesses of up to 300 s each, beyond the default per-test limit
def test_the_usage_block_runs(tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    tiny = tmp_path / "tiny-model"
    tiny_model().save_pretrained(tiny)
    tiny_tokenizer().save_pretrained(tiny)
    work = tmp_path / "work"
    work.mkdir()
    dev = json.loads(_minibird_dev())
    (work / "preds.jsonl").write_text(
        "".join(
            json.dumps({"question_id": q["question_id"], "db_id": q["db_id"], "sql": q["SQL"]}) + "\n" for q in dev[:3]
        )
    )
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    # a user's shell sets no veRL logging; the fit tier's harness puts its own in this
    # process's environment, which would let veRL's import warnings onto the console
    for key in ("VERL_LOGGING_LEVEL", "VERL_FILE_LOGGER_PATH"):
        env.pop(key, None)
    commands = usage_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(commands) >= 10
    state: dict[str, bool] = {}
    runs = [cpu_sized(args, tiny, state) for args in commands]

    def execute(run: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *run[1:]], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )

    with ThreadPoolExecutor(max_workers=1) as beside:
        dry: dict[int, Future] = {i: beside.submit(execute, run) for i, run in enumerate(runs) if "dry_run=true" in run}
        procs = [dry[i].result() if i in dry else execute(run) for i, run in enumerate(runs)]
    outputs, errors = [], []
    for run, proc in zip(runs, procs, strict=True):
        assert proc.returncode == 0, f"{shlex.join(run)}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
        outputs.append((run, proc.stdout))
        errors.append(proc.stderr)
    trained, console = outputs[0]
    assert "dry_run=true" not in trained and "[summary] trustsql: 1 steps." in console
    assert re.search(r"run directory runs/trustsql: [\d.]+ [KMG]?B on disk", console), console[-1500:]
    for noise in NOISE:  # veRL's import-time warnings stay off a local CPU run's console
        assert noise not in console and noise not in errors[0], noise
    run_dir = work / "runs" / "trustsql"
    log = (run_dir / "run.log").read_text()
    assert "[engine] engine=auto" in log and "[summary] trustsql: 1 steps." in log  # the console, in the run dir
    assert (run_dir / "final" / "model.safetensors").is_file() and (run_dir / "config.yaml").is_file()
    resumed = next(out for run, out in outputs if "resume=true" in run)
    assert "is finished" in resumed and "nothing changed" in resumed  # README's resume line on a finished run
    assert not (work / "runs" / "None").exists() and not list(work.rglob(".hydra"))


NOISE = ("engine is not available", "No supported accelerator", "torchtitan", "megatron")


def _minibird_dev() -> str:
    from eval.data import minibird

    return (minibird.ensure() / "dev" / "dev.json").read_text(encoding="utf-8")
