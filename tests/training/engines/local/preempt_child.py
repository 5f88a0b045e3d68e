"""A tiny local run as a process of its own, for the signal tests (test_preemption.py):
``python -m tests.training.engines.local.preempt_child RUN_DIR DB [override ...]``.

The Think2SQL recipe shrunk as in ``tests/helpers/local_trainer.py`` (seed 5, the tiny model,
the scripted policy on the schools database ``DB``), printing its console; the process exits
as ``training.run`` would: 0 when done, the requeue status when a signal stopped it.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(run_dir: Path, db: Path, overrides: list[str]) -> int:
    from tests.helpers.local_trainer import trainer
    from tests.helpers.schools import school_examples

    t = trainer("think2sql", run_dir, school_examples(db), *overrides, seed=5)
    t.say = lambda text: print(text, flush=True)
    t.fit()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]))
