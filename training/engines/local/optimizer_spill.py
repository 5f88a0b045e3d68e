"""AdamW's moments wait on disk while a step generates (``optim.spill_state``, on in the
laptop profile).

From the first optimizer step on, AdamW holds two fp32 moments per trainable weight (1 GiB
on SmolLM2-135M), and nothing reads them between two updates. On the CPU laptop profile the
rollout's KV caches are what the run's memory peaks on at step 2 and after, beside those
moments; written to the run directory for the rollout and read back before the update,
they leave RSS for that time (a second or two of disk per step on a laptop SSD).

The file is the optimizer's own state, so the update resumes from the same values bit for
bit; it is removed when read back. A run killed during a rollout leaves it behind: the next
spill overwrites it, and resume reads the checkpoint, never this file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch

from training.runs.usage import release_free_memory

SPILL_NAME = "optimizer_moments.spill"


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for group in optimizer.param_groups for p in group["params"]]


@contextlib.contextmanager
def moments_on_disk(optimizer: torch.optim.Optimizer, directory: str | Path | None) -> Iterator[None]:
    """Inside: the optimizer's per-weight state lives in ``directory/SPILL_NAME`` and not in
    memory; on exit (failure included) it is back, the same tensors' values. A no-op when
    ``directory`` is None or the optimizer has no state yet (before its first step)."""
    if directory is None or not optimizer.state:
        yield
        return
    params = _params(optimizer)
    path = Path(directory) / SPILL_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({i: optimizer.state[p] for i, p in enumerate(params) if p in optimizer.state}, path)
    optimizer.state.clear()
    release_free_memory()
    try:
        yield
    finally:
        saved = torch.load(path, weights_only=True)
        for i, state in saved.items():
            optimizer.state[params[i]] = state
        path.unlink()
