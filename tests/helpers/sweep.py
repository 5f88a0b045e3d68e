"""A real 2 x 2 sweep (``python -m training.run -m``) of the local engine on the tiny model.

Saved once per test session (tests/conftest.py ``tiny_sweep``): four runs of Think2SQL on
the bundled minibird data with a random 2-layer model, sweeping the reward's execution
metric (ex, qatch) and the seed (0, 1). One GRPO step each, greedy EX before and after on
4 held-out questions; about a minute on two cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SWEEP_ARGS = ["reward.exec_metric=ex,qatch", "seed=0,1"]
ARMS = {"reward.exec_metric": ["ex", "qatch"], "seed": [0, 1]}


def save_tiny_model(folder: Path) -> Path:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    tiny_model().save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def run_tiny_sweep(work: Path) -> tuple[Path, subprocess.CompletedProcess]:
    """Run the sweep in ``work``; return the sweep directory and the finished process."""
    model = save_tiny_model(work / "tiny-model")
    sweep = work / "sweep"
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    env.pop("WANDB_RUN_GROUP", None)
    env.pop("WANDB_TAGS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.run",
            "-m",
            "recipe=think2sql",
            "model=hf",
            f"model.path={model}",
            "engine=local",
            "engine.device=cpu",
            "stage.warm_start.enable=false",
            "trainer.total_steps=1",
            "algorithm.group_size=2",
            "algorithm.batch_size=1",
            "data.limit=4",
            "data.eval_limit=4",
            "rollout.max_new_tokens=8",
            *SWEEP_ARGS,
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    return sweep, proc
