"""What a run does with its run directory: one policy for both engines.

- ``fresh=true``: clear the run's checkpoints and records, then start at step 0 (``fresh``);
- ``resume=true``: continue from the latest checkpoint (``resume``; with none, step 0),
  or, when the run already finished its steps, change nothing (``finished``);
- neither, and a checkpoint exists: refuse (a ``ConfigError`` saying how to choose);
- neither, and no checkpoint: start at step 0 (``new``).

Each engine finds its own latest checkpoint (the local engine's ``checkpoints/step_N``,
veRL's ``global_step_N``) and what clearing means for it; the decision is made here.

>>> decide_run_start("runs/a", resume=False, fresh=False, latest=None).action
'new'
>>> decide_run_start("runs/a", resume=True, fresh=False, latest="runs/a/checkpoints/step_000002").action
'resume'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tools.errors import ConfigError

NEW, FRESH, RESUME, FINISHED = "new", "fresh", "resume", "finished"


@dataclass(frozen=True)
class RunStart:
    """The decision: ``action`` (new | fresh | resume | finished) and the latest checkpoint
    found (None when there is none)."""

    action: str
    latest: str | None = None


def decide_run_start(run_dir: str | Path, resume: bool, fresh: bool, latest: str | Path | None,
                     finished: bool = False) -> RunStart:
    """The policy above. ``latest``: the run's latest checkpoint (None: none); ``finished``:
    the run already completed every step it is asked for (read only with ``resume``)."""
    found = str(latest) if latest is not None else None
    if fresh:
        return RunStart(FRESH, found)
    if resume:
        return RunStart(FINISHED if finished else RESUME, found)
    if found is not None:
        raise ConfigError(
            f"{run_dir} already holds checkpoint {Path(found).name}; pass resume=true to continue it, "
            "fresh=true to start over, or run_dir=<another directory>")
    return RunStart(NEW)
