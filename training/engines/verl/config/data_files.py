"""The verl engine's data side: the prompt files veRL reads, and how many epochs a run needs.

veRL's ``RLHFDataset`` reads parquet rows; each row carries one project ``Example`` as JSON
in ``extra_info`` (``training.engines.verl.shared.example_to_row``, shared with the workers that read it
back) so the agent loop in a Ray worker rebuilds it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from training.engines.verl.shared import example_to_row

if TYPE_CHECKING:
    from agents.types import Example


def write_prompt_file(examples: Sequence[Example], path: str | Path) -> Path:
    """Write examples as a parquet file veRL's RLHFDataset reads."""
    import datasets

    if not examples:
        raise ConfigError(f"no examples to write to {path}: check the data config (split, limit)")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [example_to_row(ex, i) for i, ex in enumerate(examples)]
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    return path


def data_files(run_dir: str | Path) -> tuple[Path, Path]:
    """Where the engine writes the train / validation prompt parquet files (absolute:
    Ray actors do not share the driver's working directory)."""
    root = Path(run_dir).resolve() / "verl_data"
    return root / "train.parquet", root / "val.parquet"


def steps_per_epoch(num_examples: int, batch_size: int) -> int:
    """Training steps in one pass over ``num_examples`` questions: veRL's
    ``len(dataset) // train_batch_size`` (its dataloader drops the last partial batch)."""
    if num_examples < batch_size:
        raise ConfigError(
            f"{num_examples} training example(s) but algorithm.batch_size={batch_size}: veRL drops the last "
            "partial batch, so no step would run; lower algorithm.batch_size or raise data.limit"
        )
    return num_examples // batch_size


def epochs_for(total_steps: int | None, num_examples: int, batch_size: int) -> tuple[int, int]:
    """(total_epochs, total_training_steps) for veRL: enough epochs to run every requested
    step (veRL's loop stops at ``trainer.total_epochs`` even when steps remain), one epoch
    when ``total_steps`` is null. The LR schedule is sized on the same step count."""
    per_epoch = steps_per_epoch(num_examples, batch_size)
    steps = per_epoch if total_steps is None else total_steps
    return max(1, math.ceil(steps / per_epoch)), steps


def count_examples(data: Any, split: str, limit: int | None) -> int:
    """How many training examples a split gives (no files written): its training sources
    (``data.offset``, ``difficulties``, ``mixture``; ``eval/data/selection.py``) when it is
    ``data.split``, else the split alone."""
    import dataclasses

    from eval.data import load_examples, load_from_config

    if split == data.split and dataclasses.is_dataclass(data) and not isinstance(data, type):
        return len(load_from_config(dataclasses.replace(data, limit=limit, train_ids=None), "train"))
    return len(
        load_examples(
            kind=data.kind,
            root=data.root,
            drop_failing_gold=data.drop_failing_gold,
            split=split,
            limit=limit,
            dsn=getattr(data, "dsn", None),
        )
    )
