"""Checkpoints and resume of the local engine: save a step, restore the latest one, and
clear, resume or refuse an existing run directory (the policy of ``training.runs.resume_policy``,
shared with the veRL engine; the files themselves: state.py and run_files.py).

``Checkpoints`` is one part of ``training.engines.local.trainer.LocalTrainer``, which builds every
attribute declared on it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.errors import DiskFullError
from tools.files import disk_full_error, disk_is_full
from training.config import TrainConfig
from training.engines.local import run_files as rd
from training.engines.local import state as st
from training.engines.local.buffer import CandidatePool
from training.runs.samples import RUN_DIR_FULL_HINT


def _latest_local_checkpoint(run_dir: Path) -> Any:
    """The local engine's newest checkpoint as the run-directory policy sees it (its saves are
    atomic renames, so the newest one is complete)."""
    from training.runs.resume_policy import StepCheckpoint

    path = st.latest_checkpoint(run_dir)
    return None if path is None else StepCheckpoint(step=st.read_meta(path).step, path=path)


class Checkpoints:
    """The checkpoint part of ``LocalTrainer``: save, restore, and the run directory's start."""

    # built by LocalTrainer.__post_init__ (training/engines/local/trainer.py)
    cfg: TrainConfig
    sampler: CandidatePool
    step: int
    total_steps: int
    wandb_id: str | None
    model: Any
    optimizer: Any
    scheduler: Any
    tokenizer: Any
    model_source: str
    say: Callable[[str], None]
    _sync_generation_copy: Callable[[], None]

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write the checkpoint of this step. A full disk raises ``DiskFullError`` after removing
        what this save wrote: the last complete checkpoint stays ``latest``, for resume=auto."""
        meta = st.CheckpointMeta(
            step=self.step, sampler=self.sampler.state_dict(), wandb_id=self.wandb_id, model_source=self.model_source
        )
        try:
            return st.save_checkpoint(
                self.cfg.run_dir,
                meta,
                self.model,
                self.optimizer,
                self.scheduler,
                keep=self.cfg.trainer.keep_checkpoints,
                save_weights=self.cfg.trainer.save_weights,
                tokenizer=self.tokenizer,
            )
        except Exception as err:
            root = st.checkpoint_root(self.cfg.run_dir)
            if not disk_is_full(err, root):  # measured before the cleanup
                raise
            written = rd.discard_unfinished_checkpoint(self.cfg.run_dir, self.step)  # the last complete one stays
            if isinstance(err, DiskFullError):
                raise
            last = st.latest_checkpoint(self.cfg.run_dir)
            basis = f"the size of the last complete checkpoint, {last.name}" if last else "what it had written"
            needed = st.disk_usage(last)[0] if last is not None else written
            what = f"the checkpoint of step {self.step}"
            raise disk_full_error(root, what, needed, RUN_DIR_FULL_HINT, last is None, basis) from err

    def restore(self) -> bool:
        """Continue from the latest checkpoint; False when there is none."""
        path = st.latest_checkpoint(self.cfg.run_dir)
        if path is None:
            return False
        meta = st.load_checkpoint(path, self.model, self.optimizer, self.scheduler)
        self._sync_generation_copy()
        self.step, self.wandb_id = meta.step, meta.wandb_id
        self.sampler.load_state_dict(meta.sampler)
        self.say(f"[resume] continuing from {path} (step {self.step})")
        return True

    def _prepare_run_dir(self) -> dict[str, Any] | None:
        """Clear, resume or refuse an existing run directory (the policy of ``training.runs.resume_policy``,
        shared with the veRL engine); a finished run resumed returns its summary (and nothing
        is changed)."""
        from training.runs.resume_policy import resume_decision, resume_mode

        cfg = self.cfg
        if cfg.fresh:
            rd.clear_run(cfg.run_dir)
            return None
        mode = resume_mode(cfg.resume)
        finished = rd.finished_summary(cfg.run_dir, self.total_steps) if mode != "never" else None
        if finished is not None:
            self.say(
                f"[resume] {cfg.run_dir} is finished ({finished.get('steps')} steps; trainer.total_steps="
                f"{self.total_steps}): nothing to do, nothing changed. Pass a larger trainer.total_steps to "
                "continue it, or fresh=true to start over."
            )
            return finished
        decision = resume_decision(
            cfg.run_dir, mode, latest=_latest_local_checkpoint, any_checkpoint=st.latest_checkpoint
        )
        if decision.action != "resume":
            if mode != "never":
                self.say(decision.message)
            return None
        self.restore()
        if self.step < self.total_steps:
            rd.relabel_records(Path(cfg.run_dir) / rd.METRICS, "eval_after", "eval_val", before_step=self.total_steps)
        return None
