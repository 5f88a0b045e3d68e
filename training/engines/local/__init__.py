"""The ``local`` engine: one process, CPU or one GPU, a HF transformers policy.

``describe`` and ``train`` are the engine's two functions (``training.engines``); the
pieces: one step (``step``), its buffer (``buffer``), the update (``update``, ``loss``), the
models (``policy_models``), checkpoints and resume (``checkpoints``, ``state``), the run
directory's files (``run_files``), held-out numbers (``heldout``) and the warm start
(``warm_start``); ``trainer`` ties them together.
"""

from training.engines.local.trainer import LocalTrainer, TrainerInputs, describe, train

__all__ = ["LocalTrainer", "TrainerInputs", "describe", "train"]
