"""Training state of the local engine: the data sampler, RNG states, checkpoints.

A checkpoint holds everything ``resume=true`` needs to continue exactly: model weights,
optimizer and scheduler state, python / numpy / torch RNG states, the sampler position,
the step, and the wandb run id. It is written into ``step_XXXXXX.tmp`` and renamed, and
``latest`` is replaced atomically after that, so a run killed mid-write keeps the
previous checkpoint and loses at most the current step.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tools.errors import ConfigError

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"


@dataclass
class DataSampler:
    """Questions in a seeded permutation per epoch; the position is part of the state.

    >>> s = DataSampler(5, seed=1)
    >>> first = s.take(3); state = s.state_dict(); rest = s.take(4)
    >>> t = DataSampler(5, seed=1); t.load_state_dict(state); t.take(4) == rest
    True
    """

    size: int
    seed: int = 0
    epoch: int = 0
    cursor: int = 0

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ConfigError("no training examples to sample from; check data.split and data.limit")

    def _order(self, epoch: int) -> list[int]:
        rng = np.random.default_rng([self.seed, epoch])
        return [int(i) for i in rng.permutation(self.size)]

    def take(self, count: int) -> list[int]:
        """The next ``count`` indices, wrapping into a fresh permutation after an epoch."""
        out: list[int] = []
        while len(out) < count:
            order = self._order(self.epoch)
            chunk = order[self.cursor: self.cursor + (count - len(out))]
            out.extend(chunk)
            self.cursor += len(chunk)
            if self.cursor >= self.size:
                self.epoch, self.cursor = self.epoch + 1, 0
        return out

    def state_dict(self) -> dict[str, int]:
        return {"size": self.size, "seed": self.seed, "epoch": self.epoch, "cursor": self.cursor}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["size"] != self.size:
            raise ConfigError(
                f"checkpoint sampled from {state['size']} examples but this run has {self.size}; "
                "resume with the same data settings or start with fresh=true"
            )
        self.seed, self.epoch, self.cursor = state["seed"], state["epoch"], state["cursor"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


@dataclass
class CheckpointMeta:
    """The small, human-readable part of a checkpoint (``meta.json``)."""

    step: int
    sampler: dict[str, int]
    wandb_id: str | None = None
    model_source: str = ""


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINT_DIR


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The checkpoint ``latest`` points at, or None when the run has none."""
    root = checkpoint_root(run_dir)
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    path = root / pointer.read_text().strip()
    return path if (path / "meta.json").is_file() else None


def save_checkpoint(
    run_dir: str | Path,
    meta: CheckpointMeta,
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    keep: int = 2,
    save_weights: bool = True,
) -> Path:
    """Write ``checkpoints/step_XXXXXX`` atomically and point ``latest`` at it."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{meta.step:06d}"
    final = root / name
    tmp = root / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if save_weights:
        torch.save(model.state_dict(), tmp / "model.pt")
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
        tmp / "trainer.pt",
    )
    (tmp / "meta.json").write_text(json.dumps(asdict(meta), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    _write_atomic(root / LATEST, name)
    _prune(root, keep, current=name)
    return final


def load_checkpoint(
    path: Path, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any
) -> CheckpointMeta:
    """Restore weights, optimizer, scheduler and RNG from ``path``; return its meta."""
    weights = path / "model.pt"
    if weights.is_file():
        model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    trainer = torch.load(path / "trainer.pt", map_location="cpu", weights_only=False)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])
    return CheckpointMeta(**json.loads((path / "meta.json").read_text()))


def clear_checkpoints(run_dir: str | Path) -> None:
    shutil.rmtree(checkpoint_root(run_dir), ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _prune(root: Path, keep: int, current: str) -> None:
    steps = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in steps[:-keep]:
        if old.name != current:
            shutil.rmtree(old, ignore_errors=True)
