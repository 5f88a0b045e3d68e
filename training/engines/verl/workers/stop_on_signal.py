"""SIGTERM and SIGUSR1 in veRL's fit loop: stop after the step in progress, with a checkpoint
written by veRL's own ``_save_checkpoint`` (training/runs/preemption.py says why and how the
process then exits).

The trainer runs in Ray's TaskRunner actor; the signal reaches the driver, whose handler
writes the run directory's stop request (``training.engines.verl.launch``). Here the trainer
also catches the signals itself (in its main thread) and reads that request:

- after step N (``on_step_end``, right after veRL's periodic save): the checkpoint of step N
  is saved unless veRL just saved it, before anything else runs;
- veRL then logs step N as usual (its validation at that step is skipped: it would delay the
  exit, and the resumed run validates before training), and ``on_step_begin`` of step N+1
  ends the loop; the trainer records that it stopped (``stopped.json``), which the driver
  turns into the requeue status;
- a request during the last step lets the run finish (its checkpoint, final evaluation and
  export are what is left).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from training.runs.preemption import StopSignals, mark_stopped, stopped_message

if TYPE_CHECKING:
    from training.engines.verl.shared import WorkerSettings

log = logging.getLogger(__name__)


class StopAfterStep(Exception):
    """Ends veRL's loop at the start of the step after a requested stop."""


def _say(text: str) -> None:
    print(text, flush=True)  # the TaskRunner's stdout: Ray forwards it to the driver's console


class StopOnSignalMixin(PPOTrainer):
    """veRL's trainer hooks (any mode) that stop the loop on a signal (see the module doc)."""

    if TYPE_CHECKING:  # the host class's (SqlAgentTrainer.settings), declared for the type checker

        @property
        def settings(self) -> WorkerSettings: ...

    stopped_at: int | None = None
    _stop: StopSignals | None = None
    _in_loop = False

    def fit(self, agent_loop_manager: Any) -> None:
        self.stopped_at, self._in_loop = None, False
        self._stop = StopSignals(_say, run_dir=self.settings.run_dir or None)
        with self._stop:
            try:
                super().fit(agent_loop_manager)
            except StopAfterStep:
                self._shutdown_dump_executor()
                checkpoint = self._checkpoint_of(self.stopped_at or 0)
                _say(stopped_message(self.stopped_at or 0, checkpoint))
                if self.settings.run_dir:
                    mark_stopped(self.settings.run_dir, self.stopped_at or 0, checkpoint, self._stop.signal_name)
            finally:
                self._in_loop = False

    def _stop_requested(self) -> bool:
        return self._stop is not None and self._stop.requested

    def on_train_begin(self) -> None:
        super().on_train_begin()
        self._in_loop = True

    def on_step_begin(self) -> None:
        if self._stop_requested():
            step = int(self.global_steps) - 1  # veRL counts the coming step already
            self._save_step(step)
            self.stopped_at = step
            raise StopAfterStep(step)
        super().on_step_begin()

    def on_step_end(self) -> None:
        super().on_step_end()
        if not self._stop_requested():
            return
        step = int(self.global_steps)
        if step >= int(self.total_training_steps):
            _say("[preempt] that was the last step: finishing the run (its checkpoint, evaluation and final/)")
            return
        self._save_step(step)  # now, before veRL's logging of the step

    def _validate(self) -> dict[str, float]:
        if self._in_loop and self._stop_requested() and int(self.global_steps) < int(self.total_training_steps):
            return {}
        return super()._validate()

    def _save_step(self, step: int) -> None:
        """veRL's save of ``step`` (the state after it), unless that checkpoint is complete on disk."""
        if step <= 0 or self._checkpoint_of(step) is not None:
            return
        current = self.global_steps
        self.global_steps = step
        try:
            self._save_checkpoint()
        finally:
            self.global_steps = current

    def _checkpoint_of(self, step: int) -> Path | None:
        from training.runs.resume_policy import latest_verl_checkpoint

        found = latest_verl_checkpoint(self.config.trainer.default_local_dir)
        return found.path if found is not None and found.step == step else None
