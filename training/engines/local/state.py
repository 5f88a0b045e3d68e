"""Training state of the local engine: the data sampler, RNG states, checkpoints.

A checkpoint ``checkpoints/step_XXXXXX/`` is a plain HF model directory (weights once,
as ``model.safetensors``, plus config and tokenizer: ``eval.run model.path=`` loads it)
with what ``resume=true`` needs besides: ``trainer_state.pt`` (optimizer and scheduler
state, python / numpy / torch RNG states) and ``meta.json`` (step, sampler position,
wandb run id). Only the checkpoint ``latest`` points at keeps ``trainer_state.pt`` (AdamW
state is twice the weights' size, and resume reads only ``latest``); older kept
checkpoints are weights only. It is written into ``step_XXXXXX.tmp`` and renamed, and
``latest`` is replaced atomically after that, so a run killed mid-write keeps the
previous checkpoint and loses at most the current step. Files are never rewritten in
place: ``final/`` hard-links the last checkpoint's files (one copy on disk). Under LoRA a
checkpoint holds the adapter (PEFT's ``adapter_config.json`` + ``adapter_model.safetensors``,
always written: it is small) instead of the weights; ``final/`` is then the merged model
(lora.py).
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
from training.engines.local.lora import is_adapter_dir, is_lora, load_adapter

CHECKPOINT_DIR = "checkpoints"
LATEST = "latest"
TRAINER_STATE = "trainer_state.pt"
META = "meta.json"


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
            chunk = order[self.cursor : self.cursor + (count - len(out))]
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
    return path if (path / META).is_file() else None


def read_meta(path: Path) -> CheckpointMeta:
    return CheckpointMeta(**json.loads((path / META).read_text()))


def save_checkpoint(
    run_dir: str | Path,
    meta: CheckpointMeta,
    model: Any,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    keep: int = 2,
    save_weights: bool = True,
    tokenizer: Any = None,
) -> Path:
    """Write ``checkpoints/step_XXXXXX`` atomically and point ``latest`` at it."""
    root = checkpoint_root(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{meta.step:06d}"
    final = root / name
    tmp = root / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    if save_weights or is_lora(model):
        model.save_pretrained(tmp)  # safetensors; tied weights stored once; under LoRA the adapter only
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
        tmp / TRAINER_STATE,
    )
    (tmp / META).write_text(json.dumps(asdict(meta), indent=2))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    _write_atomic(root / LATEST, name)
    _prune(root, keep, current=name)
    return final


def load_checkpoint(path: Path, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any) -> CheckpointMeta:
    """Restore weights (or the adapter, under LoRA), optimizer, scheduler and RNG from
    ``path``; return its meta."""
    if is_lora(model) or is_adapter_dir(path):
        if not (is_lora(model) and is_adapter_dir(path)):
            have, want = ("a LoRA adapter", "model.lora.rank > 0") if is_adapter_dir(path) else ("full weights", "0")
            raise ConfigError(
                f"{path} holds {have}: resume it with the model.lora.rank it was written with ({want}) "
                "or start over with fresh=true"
            )
        load_adapter(model, path)
    elif has_weights(path):
        load_weights(model, path)
    elif (path / "model.pt").is_file():  # checkpoints written before the safetensors layout
        model.load_state_dict(torch.load(path / "model.pt", map_location="cpu", weights_only=True))
    state = path / TRAINER_STATE
    if not state.is_file() and (path / "trainer.pt").is_file():
        state = path / "trainer.pt"
    if not state.is_file():
        raise ConfigError(
            f"{path} holds no {TRAINER_STATE} (only the latest checkpoint keeps the optimizer "
            "state); resume from the latest one or start with fresh=true"
        )
    trainer = torch.load(state, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])
    return read_meta(path)


def has_weights(path: Path) -> bool:
    """The checkpoint holds the model: HF weights, or under LoRA its adapter."""
    return any(path.glob("model*.safetensors")) or is_adapter_dir(path)


def load_weights(model: Any, directory: Path) -> None:
    """Copy the HF weights saved in ``directory`` into ``model`` (same architecture), exactly."""
    loaded = type(model).from_pretrained(directory, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())


def link_model_dir(source: Path, target: Path, skip: tuple[str, ...] = (TRAINER_STATE, META)) -> None:
    """Make ``target`` a HF model directory holding ``source``'s files as hard links (no
    second copy on disk; a copy where the file system has no hard links), atomically."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in source.iterdir():
        if item.is_file() and item.name not in skip:
            try:
                os.link(item, tmp / item.name)
            except OSError:
                shutil.copy2(item, tmp / item.name)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def clear_checkpoints(run_dir: str | Path) -> None:
    shutil.rmtree(checkpoint_root(run_dir), ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _prune(root: Path, keep: int, current: str) -> None:
    """Keep ``keep`` step checkpoints; only ``current`` keeps its optimizer state."""
    steps = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in steps[:-keep]:
        if old.name != current:
            shutil.rmtree(old, ignore_errors=True)
    for old in steps[-keep:]:
        if old.name != current:
            (old / TRAINER_STATE).unlink(missing_ok=True)


def disk_usage(path: str | Path) -> tuple[int, dict[str, int]]:
    """Bytes on disk under ``path`` (a hard-linked file counted once, where first met in
    sorted order) and the share of each top-level entry."""
    root = Path(path)
    seen: set[tuple[int, int]] = set()
    parts: dict[str, int] = {}
    for entry in sorted(root.iterdir()) if root.is_dir() else ():
        files = [entry] if entry.is_file() else sorted(p for p in entry.rglob("*") if p.is_file())
        total = 0
        for f in files:
            st = f.lstat()
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
        parts[entry.name] = total
    return sum(parts.values()), parts


def human_size(size: float) -> str:
    """``1536`` -> ``1.5 KB`` (powers of 1024).

    >>> human_size(2_254_857_830)
    '2.1 GB'
    """
    for unit in ("B", "KB", "MB"):
        if size < 1024:
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
