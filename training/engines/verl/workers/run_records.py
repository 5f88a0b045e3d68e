"""The project's records of a veRL run, written by
:class:`~training.engines.verl.workers.sync_trainer.SqlAgentTrainer`: ``metrics.jsonl`` rows per step
(evaluation rows come from the trainer's ``_validate``), the first
``trainer.samples_per_step`` rollouts of each step in ``samples.jsonl`` (the local engine's
record builder, with the loss masks of the update), and both kept right across a resume:
the records of steps a resumed run redoes are dropped first, and veRL's own metrics file,
which its ``FileLogger`` truncates, is written back up to the resumed step.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import torch
from verl.protocol import DataProto
from verl.trainer.ppo.v1.trainer_base import PPOTrainer

from training.engines.verl.shared import EPISODE_KEY, REWARD_KEY
from training.engines.verl.workers.row_advantages import UPDATE_KEY, extra_field, sample_rows, step_record

if TYPE_CHECKING:
    from training.engines.verl.shared import WorkerSettings

log = logging.getLogger(__name__)


class RunRecordsMixin(PPOTrainer):
    """veRL's trainer hooks (any mode) that write the project's records (see the module doc)."""

    if TYPE_CHECKING:  # the host class's (SqlAgentTrainer.settings), declared for the type checker

        @property
        def settings(self) -> WorkerSettings: ...

    def _project_logger(self) -> Any:
        """A JSONL-only ``RunLogger`` on ``run_dir/metrics.jsonl`` (the project's format),
        or None when the config names no run directory."""
        logger = getattr(self, "_metrics_logger", None)
        run_dir = self.settings.run_dir
        if logger is None and run_dir:
            from training.runs.logger import RunLogger

            logger = RunLogger(run_dir, sinks=(), total_steps=int(getattr(self, "total_training_steps", 0) or 0))
            self._metrics_logger = logger
        return logger

    def _remember_step(self, proto: DataProto, is_padding: Sequence[bool]) -> None:
        extra = proto.non_tensor_batch["extra_fields"]
        not_padding = [i for i, pad in enumerate(is_padding) if not pad]
        real = [i for i in not_padding if not extra_field(extra[i], EPISODE_KEY, i).get("dropped")]
        # a step of separate_async samples parameter_sync_step batches: its record covers them all
        rows: tuple[list[Any], list[Any]] = getattr(self, "_step_rows", None) or ([], [])  # None after a step
        rows[0].extend(extra_field(extra[i], EPISODE_KEY, i) for i in real)
        rows[1].extend(extra_field(extra[i], REWARD_KEY, i) for i in real)
        self._step_rows: tuple[list[Any], list[Any]] | None = rows

    def _write_samples(self, batch: Any, proto: DataProto, is_padding: Sequence[bool]) -> None:
        """Append the step's first ``trainer.samples_per_step`` rows (veRL's padding rows
        left out) to samples.jsonl with the masks and advantages of the update, through the
        record builder the local engine uses (training/runs/samples.py). The step is veRL's
        ``global_steps``, the ``step`` of this step's metrics.jsonl row."""
        import transfer_queue as tq

        from rex import ExecScorer
        from training.runs.samples import SampleWriter

        count, run_dir = self.settings.samples_per_step, self.settings.run_dir
        if count <= 0 or not run_dir:
            return
        rows = [i for i, pad in enumerate(is_padding) if not pad]
        ids = tq.kv_batch_get(
            keys=[batch.keys[i] for i in rows], partition_id=batch.partition_id, select_fields=["prompts", "responses"]
        )
        update = proto.meta_info.get(UPDATE_KEY, {})
        scorer = ExecScorer()
        records, prompts = sample_rows(
            step=int(self.global_steps),
            design=self.settings.agent,
            extra=[proto.non_tensor_batch["extra_fields"][i] for i in rows],
            keys=[str(batch.keys[i]) for i in rows],
            prompts=[_ids(t) for t in _rows(ids["prompts"])],
            responses=[_ids(t) for t in _rows(ids["responses"])],
            update={j: update[i] for j, i in enumerate(rows) if i in update},
            examples=self._examples(),
            tokenizer=self.tokenizer,
            count=count,
            tables=partial(_result_tables, scorer=scorer),
        )
        writer = getattr(self, "_sample_writer", None)
        if writer is None:
            writer = self._sample_writer = SampleWriter(run_dir)
        writer.write(records, prompts)

    def _examples(self) -> dict[str, Any]:
        """The training examples by id (read once from veRL's training files, which the
        driver writes one example per row)."""
        cached = getattr(self, "_examples_by_id", None)
        if cached is None:
            from training.engines.verl.shared import examples_from_parquet

            files = self.config.data.train_files
            files = [files] if isinstance(files, str) else list(files)
            cached = self._examples_by_id = {ex.id: ex for path in files for ex in examples_from_parquet(str(path))}
        return cached

    def on_step_end(self) -> None:
        super().on_step_end()
        self._last_step = int(self.global_steps)
        rows = getattr(self, "_step_rows", None)
        values = step_record(*rows) if rows else None
        logger = self._project_logger()
        if values and logger is not None:
            logger.log(int(self.global_steps), values, kind="train")
        self._step_rows = None

    def on_train_begin(self) -> None:
        super().on_train_begin()
        self._restore_metrics_file()

    def _read_metrics_file(self) -> bytes:
        """veRL's metrics JSONL up to the resumed step: veRL's ``FileLogger`` reopens it with
        "wb" (truncating it), so the records of the steps this run continues from are kept
        here and written back first (records of later steps, which this run redoes, are not)."""
        path = os.environ.get("VERL_FILE_LOGGER_PATH")
        if not path or "file" not in list(self.config.trainer.logger) or not os.path.exists(path):
            return b""
        if int(self.global_steps) <= 0:
            return b""
        kept = []
        with open(path, "rb") as handle:
            for line in handle:
                try:
                    step = int(json.loads(line).get("step", 0))
                except (ValueError, AttributeError):
                    continue  # a line cut by a crash
                if step <= int(self.global_steps):
                    kept.append(line if line.endswith(b"\n") else line + b"\n")
        return b"".join(kept)

    def _restore_metrics_file(self) -> None:
        previous = getattr(self, "_previous_file_log", b"")
        tracking = getattr(self, "logger", None)
        file_logger = getattr(tracking, "logger", {}).get("file") if tracking is not None else None
        if previous and file_logger is not None:
            file_logger.fp.write(previous)
            self._previous_file_log = b""

    def _drop_records_after_resume(self) -> None:
        """A resumed run redoes the steps after its checkpoint (all of them when there is
        none): the records a killed process wrote for them (metrics.jsonl, samples.jsonl)
        are removed first, so no step is recorded twice."""
        from pathlib import Path

        from training.runs.resume_policy import drop_records_after

        run_dir = self.settings.run_dir
        if run_dir:
            for name in ("metrics.jsonl", "samples.jsonl"):
                dropped = drop_records_after(Path(run_dir) / name, int(self.global_steps))
                if dropped:
                    log.info(
                        "%s: %d record(s) of steps after %d removed (redone now)", name, dropped, self.global_steps
                    )


def _rows(tensor: torch.Tensor) -> list[torch.Tensor]:
    """The rows of a TransferQueue field: jagged (each its own length) or dense."""
    return list(tensor.unbind(0))


def _ids(row: torch.Tensor) -> list[int]:
    return [int(x) for x in row.tolist()]


def _result_tables(example: Any, final_sql: str | None, scorer: Any) -> dict[str, Any]:
    """Gold and predicted tables and the EX outcome (as the local engine records them), when
    the example's database is readable from the trainer's process; else none."""
    from pathlib import Path

    from training.runs.samples import result_tables

    if not Path(example.db_path).is_file():
        return {}
    return result_tables(example, final_sql, scorer)
