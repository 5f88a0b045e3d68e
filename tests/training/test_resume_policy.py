"""The run-directory policy both engines apply (training/resume_policy.py)."""

from __future__ import annotations

import pytest

from tools.errors import ConfigError
from training.resume_policy import FINISHED, FRESH, NEW, RESUME, decide_run_start


def test_each_setting_gives_its_decision() -> None:
    ckpt = "runs/a/checkpoints/step_000003"
    assert decide_run_start("runs/a", resume=False, fresh=False, latest=None).action == NEW
    assert decide_run_start("runs/a", resume=False, fresh=True, latest=ckpt).action == FRESH
    assert decide_run_start("runs/a", resume=True, fresh=False, latest=ckpt).latest == ckpt
    assert decide_run_start("runs/a", resume=True, fresh=False, latest=None).action == RESUME  # from step 0
    assert decide_run_start("runs/a", resume=True, fresh=False, latest=ckpt, finished=True).action == FINISHED
    # "finished" is a resume answer only: a fresh start ignores it
    assert decide_run_start("runs/a", resume=False, fresh=True, latest=ckpt, finished=True).action == FRESH


def test_an_existing_checkpoint_without_resume_or_fresh_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"runs/a already holds checkpoint step_000003; pass resume=true to "
                                          r"continue it, fresh=true to start over, or run_dir=<another directory>"):
        decide_run_start("runs/a", resume=False, fresh=False, latest="runs/a/checkpoints/step_000003")
