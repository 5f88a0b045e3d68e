"""training/runs/preemption.py in this process: the handlers, the stop request shared
through the run directory, the stop record and the requeue status. (The whole runs: the
engines' tests, tests/training/engines/local/test_preemption.py and
tests/training/engines/verl/fit/test_resume.py.)"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest

from training.runs import preemption as P


def test_the_first_signal_asks_to_stop_and_says_so_and_the_handlers_are_put_back() -> None:
    previous = {s: signal.getsignal(s) for s in P.STOP_SIGNALS}
    said: list[str] = []
    with P.StopSignals(said.append) as stop:
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested and stop.signal_name == "SIGUSR1"
    assert said == [P.stop_message("SIGUSR1", "the current step")]
    assert "status 75" in said[0] and "A second signal exits at once" in said[0]
    assert {s: signal.getsignal(s) for s in P.STOP_SIGNALS} == previous


def test_a_request_reaches_a_trainer_in_another_process_through_the_run_directory(tmp_path: Path) -> None:
    trainer = P.StopSignals(print, run_dir=tmp_path)  # its handlers never see the signal
    with P.StopSignals(lambda _: None, run_dir=tmp_path):  # the driver's
        os.kill(os.getpid(), signal.SIGTERM)
    assert trainer.requested and (tmp_path / P.STOP_REQUEST_FILE).is_file()
    P.clear_stop_files(tmp_path)
    assert not trainer.requested


def test_handlers_go_back_on_after_a_library_replaced_them() -> None:
    """ray.init replaces the driver's SIGTERM handler; ``install`` again restores ours, and
    leaving puts back the library's."""
    calls: list[int] = []

    def library_handler(signum: int, _frame: Any) -> None:
        calls.append(signum)

    with P.StopSignals(lambda _: None) as stop:
        signal.signal(signal.SIGTERM, library_handler)
        assert stop.install()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and calls == []
    assert signal.getsignal(signal.SIGTERM) is library_handler
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_outside_the_main_thread_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGTERM)
    result: list[bool] = []
    stop = P.StopSignals(lambda _: None)
    thread = threading.Thread(target=lambda: result.append(stop.install()))
    thread.start()
    thread.join()
    assert result == [False] and signal.getsignal(signal.SIGTERM) == before
    stop.restore()


def test_a_handler_interrupting_a_print_writes_to_stderr_instead(capfd: pytest.CaptureFixture[str]) -> None:
    def reentrant(_text: str) -> None:
        raise RuntimeError("reentrant call inside <_io.BufferedWriter name='<stdout>'>")

    with P.StopSignals(reentrant):
        os.kill(os.getpid(), signal.SIGTERM)
    assert "[preempt] SIGTERM received" in capfd.readouterr().err


def test_a_stopped_trainer_makes_the_driver_exit_with_the_requeue_status(tmp_path: Path) -> None:
    P.raise_if_stopped(tmp_path)  # nothing recorded: the run ended normally
    P.mark_stopped(tmp_path, 2, tmp_path / "checkpoints" / "global_step_2", "SIGTERM")
    with pytest.raises(P.Preempted) as stopped:
        P.raise_if_stopped(tmp_path)
    assert stopped.value.code == P.REQUEUE_EXIT_STATUS == 75 and stopped.value.step == 2
    assert isinstance(stopped.value, SystemExit)
    P.clear_stop_files(tmp_path)
    P.raise_if_stopped(tmp_path)
