"""AdamW's moments wait on disk while nothing reads them (``optim.spill_state``, on in the
laptop profile).

From the first optimizer step on, AdamW holds two fp32 moments per trainable weight (1 GiB
on SmolLM2-135M), and only ``optimizer.step()`` and a checkpoint read them. On the CPU laptop
profile the run's memory peaks beside them: a rollout's KV caches at step 2 and after, a long
demonstration's activations in the warm start. Written to the run directory while those
run and read back for the optimizer step, they leave RSS for that time (about 2 s to write
and 0.6 s to read 1 GiB on this project's machines).

The file holds the optimizer's own state tensors, so every step continues from the same
values bit for bit; it is removed when read back. A run killed meanwhile leaves it behind;
the next run in that directory deletes it, and resume reads the checkpoint, never this file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from training.runs.usage import release_free_memory

SPILL_NAME = "optimizer_moments.spill"


class MomentSpill:
    """``away()``: the optimizer's state on disk for a block; ``back()``: inside such a block,
    the state in memory for the optimizer step, and on disk again after it."""

    def __init__(self, optimizer: torch.optim.Optimizer, directory: str | Path | None) -> None:
        self.optimizer = optimizer
        self.path = Path(directory) / SPILL_NAME if directory is not None else None
        self.spilled = False
        if self.path is not None:  # left by a run killed during a spill: stale (resume reads the checkpoint)
            self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def away(self) -> Iterator[None]:
        """Inside: no state in memory; on exit (failure included) it is back. A no-op when
        spilling is off, before the first optimizer step (no state yet), and nested."""
        if self.path is None or self.spilled or not self.optimizer.state:
            yield
            return
        self._write()
        try:
            yield
        finally:
            self._read()

    @contextlib.contextmanager
    def back(self) -> Iterator[None]:
        """The state in memory for the block (an optimizer step) when ``away`` had it on disk."""
        if not self.spilled:
            yield
            return
        self._read()
        try:
            yield
        finally:
            self._write()

    def _params(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _write(self) -> None:
        assert self.path is not None
        state = self.optimizer.state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({i: state[p] for i, p in enumerate(self._params()) if p in state}, self.path)
        state.clear()
        self.spilled = True
        release_free_memory()

    def _read(self) -> None:
        assert self.path is not None
        params = self._params()
        for i, values in torch.load(self.path, weights_only=True).items():
            self.optimizer.state[params[i]] = values
        self.path.unlink()
        self.spilled = False
