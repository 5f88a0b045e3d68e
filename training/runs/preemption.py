"""Preemption: SIGTERM and SIGUSR1 stop a run after the step in progress, with a checkpoint.

Clusters warn a job before they kill it: SLURM sends SIGTERM at the time limit or on
preemption (with ``#SBATCH --signal=B:USR1@120``, SIGUSR1 two minutes before), Kubernetes
sends SIGTERM and waits ``terminationGracePeriodSeconds`` before SIGKILL. While a run trains,
both engines catch these two signals (:class:`StopSignals`). The first one asks the run to stop
after the current step: it finishes that step, writes a complete checkpoint through the same
save as its periodic checkpoints, flushes its records and exits with
:data:`REQUEUE_EXIT_STATUS`; the same command with ``resume=auto`` then continues at the next
step. A second signal ends the process at once (the signal's default action: a shell reports
128 + the signal, 143 for SIGTERM); the records are whole lines and the last complete
checkpoint stays, since every checkpoint is written completely before it counts.

The veRL engine trains in a Ray actor, not in the process the cluster signals: the driver's
handler also writes :data:`STOP_REQUEST_FILE` in the run directory (shared storage on a
multi-node run), which the trainer reads after each step; a trainer that stopped early
writes :data:`STOPPED_FILE`, from which the driver knows to exit with the requeue status
(:func:`raise_if_stopped`).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REQUEUE_EXIT_STATUS = 75
"""The exit status of a run stopped by a signal after saving a checkpoint: ``EX_TEMPFAIL``
of sysexits.h ("temporary failure; the user is invited to retry"). It differs from 143
(128 + SIGTERM), what a job reports when the signal killed it before anything was saved,
and from the statuses of errors (1, and 2 for a configuration error), which a requeue would
meet again; a job script requeues on exactly this status."""

STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
STOP_REQUEST_FILE = "stop_requested"
STOPPED_FILE = "stopped.json"


class Preempted(SystemExit):
    """A run that stopped on a signal after writing the checkpoint of ``step``: uncaught, the
    process exits with :data:`REQUEUE_EXIT_STATUS` (no traceback: it is a ``SystemExit``)."""

    def __init__(self, step: int, checkpoint: str | Path | None = None) -> None:
        super().__init__(REQUEUE_EXIT_STATUS)
        self.step = step
        self.checkpoint = checkpoint


def stop_message(signame: str, what: str) -> str:
    return (
        f"[preempt] {signame} received: finishing {what}, then saving a checkpoint and exiting with status "
        f"{REQUEUE_EXIT_STATUS} (requeue; resume=auto continues). A second signal exits at once."
    )


def stopped_message(step: int, checkpoint: Any) -> str:
    saved = f"checkpoint {checkpoint}" if checkpoint else "no step trained yet, nothing to save"
    return (
        f"[preempt] stopped after step {step} ({saved}); exiting with status {REQUEUE_EXIT_STATUS}. "
        f"Run the same command with resume=auto to continue at step {step + 1}."
    )


class StopSignals:
    """``with StopSignals(say) as stop:`` - SIGTERM and SIGUSR1 set ``stop.requested`` (the
    loop stops after the step in progress); a second one ends the process at once. The
    handlers are installed only in the main thread (Python allows no other) and the ones
    they replaced are put back on exit. ``run_dir``: the request is also written there for
    a trainer in another process, and read from there (``requested``)."""

    def __init__(self, say: Callable[[str], None] = print, run_dir: str | Path | None = None, what: str = "") -> None:
        self.say = say
        self.what = what or "the current step"
        self.request_file = Path(run_dir) / STOP_REQUEST_FILE if run_dir else None
        self.received: int | None = None
        self._replaced: dict[int, Any] = {}

    def __enter__(self) -> StopSignals:
        self.install()
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def install(self) -> bool:
        """Handle the stop signals from now on (again after a library replaced a handler);
        False outside the main thread, where nothing is installed."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in STOP_SIGNALS:
            current = signal.getsignal(signum)
            if current != self._handle:
                self._replaced[signum] = current
                signal.signal(signum, self._handle)
        return True

    def restore(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, previous in self._replaced.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._replaced.clear()

    @property
    def requested(self) -> bool:
        """A stop was asked for: a signal here, or (``run_dir``) in another process of the run."""
        return self.received is not None or (self.request_file is not None and self.request_file.exists())

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else "a stop request"

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        if self.received is not None:  # the second signal: end now, as if nothing caught it
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            os._exit(128 + signum)  # not reached: the default action of both signals ends the process
        self.received = signum
        name = signal.Signals(signum).name
        if self.request_file is not None:
            try:
                self.request_file.parent.mkdir(parents=True, exist_ok=True)
                self.request_file.write_text(json.dumps({"signal": name, "pid": os.getpid(), "time": time.time()}))
            except OSError:
                pass  # this process still stops; only a trainer elsewhere would not hear of it
        _say_in_handler(self.say, stop_message(name, self.what))


def _say_in_handler(say: Callable[[str], None], text: str) -> None:
    """Print from a signal handler: the interrupted code may be inside a write to the same
    stream, which Python refuses to re-enter; then the line goes straight to stderr."""
    try:
        say(text)
    except RuntimeError:
        os.write(2, (text + "\n").encode())


def clear_stop_files(run_dir: str | Path) -> None:
    """A run starting: the stop request and stop record of an earlier process are spent."""
    for name in (STOP_REQUEST_FILE, STOPPED_FILE):
        (Path(run_dir) / name).unlink(missing_ok=True)


def mark_stopped(run_dir: str | Path, step: int, checkpoint: Any, signame: str) -> None:
    """The trainer stopped early after saving ``checkpoint`` (read by :func:`raise_if_stopped`)."""
    path = Path(run_dir) / STOPPED_FILE
    tmp = path.with_name(path.name + ".tmp")
    saved = str(checkpoint) if checkpoint else None
    tmp.write_text(json.dumps({"step": step, "checkpoint": saved, "signal": signame}))
    os.replace(tmp, path)


def raise_if_stopped(run_dir: str | Path) -> None:
    """Raise :class:`Preempted` when the run's trainer stopped early on a signal."""
    path = Path(run_dir) / STOPPED_FILE
    if not path.is_file():
        return
    record = json.loads(path.read_text())
    raise Preempted(int(record["step"]), record.get("checkpoint"))
