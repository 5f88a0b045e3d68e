"""A tiny local run as a process of its own, for the signal tests (test_preemption.py):
``python -m tests.training.engines.local.preempt_child RUN_DIR DB [override ...]``.

The Think2SQL recipe shrunk as in ``tests/helpers/local_trainer.py`` (seed 5, the tiny model,
the scripted policy on the schools database ``DB``), printing its console; the process exits
as ``training.run`` would: 0 when done, the requeue status when a signal stopped it.

``SIGNALS_IN_STEP=N:SIGUSR1,SIGTERM`` makes the process send itself those real signals, in
that order, in the middle of step N (after its rollouts, before its update), so a test
knows exactly where they land however fast the machine is; just before, it prints the
SHA-256 of every file of the latest checkpoint (``checkpoint-hashes {json}``).
``SIGNALS_IN_STEP=before:SIGTERM``: in the middle of the evaluation before training (its
episodes done, its record not yet written).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any


def _signal_in_step(trainer: Any, spec: str) -> None:
    from training.engines.local import state as st

    step, names = spec.split(":")
    signals = [getattr(signal, name) for name in names.split(",")]
    if step == "before":
        evaluate = trainer.evaluate

        def evaluate_then_signal(tag: str) -> Any:
            result = evaluate(tag)
            if tag == "before":
                for sig in signals:
                    os.kill(os.getpid(), sig)
            return result

        trainer.evaluate = evaluate_then_signal
        return
    update = trainer.update

    def update_then_maybe_signal(*args: Any, **kwargs: Any) -> Any:
        if trainer.step + 1 == int(step):  # trainer.step counts finished steps
            latest = st.latest_checkpoint(trainer.cfg.run_dir)
            files = sorted(latest.iterdir()) if latest is not None else []
            hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}
            print("checkpoint-hashes " + json.dumps(hashes), flush=True)
            for sig in signals:
                os.kill(os.getpid(), sig)
        return update(*args, **kwargs)

    trainer.update = update_then_maybe_signal


def main(run_dir: Path, db: Path, overrides: list[str]) -> int:
    from tests.helpers.local_trainer import trainer
    from tests.helpers.schools import school_examples

    t = trainer("think2sql", run_dir, school_examples(db), *overrides, seed=5)
    t.say = lambda text: print(text, flush=True)
    if os.environ.get("SIGNALS_IN_STEP"):
        _signal_in_step(t, os.environ["SIGNALS_IN_STEP"])
    t.fit()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]))
