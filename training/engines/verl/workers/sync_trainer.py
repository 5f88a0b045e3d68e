"""veRL trainer subclass (``trainer.v1.trainer_mode=sqlagent_sync``): veRL's sync loop with
the project's advantages, KL schedule and dynamic sampling.

- Advantages: :mod:`training.engines.verl.workers.row_advantages` (per-role groups, two tracks).
- Dynamic sampling: :mod:`training.engines.verl.workers.replay_buffer` (the papers' one draw or veRL's refill);
  the one draw takes its prompts from :mod:`training.engines.verl.workers.backup_pool`, which serves the
  questions of the groups not kept (``return_unkept``) first at the next step and is saved with each checkpoint.
- One optimizer step per mini-batch of questions, whatever the rows per question (DualSQL).
- The project's records: ``metrics.jsonl`` rows per step and evaluation, and the first
  ``trainer.samples_per_step`` rollouts of each step in ``samples.jsonl``
  (:mod:`training.engines.verl.workers.run_records`, which also keeps them and veRL's metrics file
  right across a resume).
- Every requested step (veRL's loop also stops at ``trainer.total_epochs``), the final
  weights exported, and the post-training evaluation logged to veRL's loggers.
- KL schedule: :mod:`training.engines.verl.workers.kl_schedule` (a new loss sent to the actor workers when
  beta changes).
- SIGTERM / SIGUSR1: :mod:`training.engines.verl.workers.stop_on_signal` (finish the step, save it
  through veRL's ``_save_checkpoint``, stop).

The registered name is ours, but veRL also branches on ``trainer_mode == "sync"``; this
trainer behaves as veRL's sync trainer. Everything above lives in
:class:`SqlAgentTrainerBase`, which the async trainers (``async_trainers.py``) put on
veRL's ``colocate_async`` / ``separate_async`` trainers.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from omegaconf import open_dict
from verl.protocol import DataProto
from verl.trainer.distillation import is_distillation_enabled
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.metric import reduce_metrics
from verl.utils.py_functional import rename_dict
from verl.utils.skip import SkipManager

from tools.errors import ConfigError
from training.engines.verl.shared import EPISODE_KEY, TRAINER_MODE, VALIDATION_MARK, AdvantageSettings, WorkerSettings
from training.engines.verl.workers.backup_pool import BackupPool
from training.engines.verl.workers.kl_schedule import KLScheduleMixin
from training.engines.verl.workers.replay_buffer import ZERO_MASK_TAG, SqlAgentAsyncReplayBuffer, SqlAgentReplayBuffer
from training.engines.verl.workers.row_advantages import eval_record, nested_like, phase_aware_advantages, step_record
from training.engines.verl.workers.run_records import RunRecordsMixin
from training.engines.verl.workers.stop_on_signal import StopOnSignalMixin

log = logging.getLogger(__name__)

BACKUP_POOL_FILE = "backup_pool.pt"
"""The backup pool's rows in a ``global_step_N`` checkpoint folder (next to veRL's ``data.pt``)."""

__all__ = [
    "EPISODE_KEY",
    "AdvantageSettings",
    "SqlAgentTrainer",
    "SqlAgentTrainerBase",
    "eval_record",
    "phase_aware_advantages",
    "step_record",
]


class ValidationRows:
    """veRL's validation dataloader with each row's ``extra_info`` marked as validation, so
    the agent loop runs the agent in inference mode (veRL does not tell agent loops)."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        for batch in self.loader:
            if "extra_info" in batch:
                marked = np.empty(len(batch["extra_info"]), dtype=object)
                marked[:] = [{**dict(info or {}), VALIDATION_MARK: True} for info in batch["extra_info"]]
                batch["extra_info"] = marked
            yield batch


class SqlAgentTrainerBase(StopOnSignalMixin, RunRecordsMixin, KLScheduleMixin):
    """The project's trainer behaviour on any of veRL's v1 trainers (the last base of the
    registered class): advantages, KL schedule and dynamic sampling, one optimizer step
    per mini-batch of questions, every requested step, logs that survive a resume, and a
    checkpoint and stop after the step in progress on SIGTERM or SIGUSR1."""

    verl_mode: ClassVar[str] = "sync"
    """veRL's mode this trainer runs (veRL branches on ``self.trainer_mode`` with these names)."""

    @property
    def settings(self) -> WorkerSettings:
        cached = getattr(self, "_settings", None)
        if cached is None:
            cached = self._settings = WorkerSettings.from_config(self.config)
        return cached

    def _advantage_settings(self) -> AdvantageSettings:
        return self.settings.advantage

    # ------------------------------------------------------------------ run length

    def _init_dataloader(self) -> None:
        """veRL's dataloaders, then enough epochs for every requested step: veRL's loop also
        stops at ``trainer.total_epochs`` when ``total_training_steps`` is larger (its
        dataloader starts a new pass by itself, so more epochs are all it needs)."""
        super()._init_dataloader()
        needed = math.ceil(int(self.total_training_steps) / max(1, int(self.steps_per_epoch)))
        if needed > int(self.config.trainer.total_epochs):
            log.info(
                "trainer.total_epochs %s -> %d to run all %d steps (%d per epoch)",
                self.config.trainer.total_epochs,
                needed,
                self.total_training_steps,
                self.steps_per_epoch,
            )
            with open_dict(self.config):
                self.config.trainer.total_epochs = needed

    # ------------------------------------------------------------------ dynamic sampling

    def _build_replay_buffer(self) -> Any:
        # veRL branches on its own mode names (replay buffer, refills, checkpoints, warm-up)
        # and reads the mode's settings from trainer.v1.<mode>, not from our registered name.
        self.trainer_mode = self.verl_mode
        self.parameter_sync_step = int(self.config.trainer.v1.get(self.verl_mode, {}).get("parameter_sync_step", 1))
        dynamic = self.settings.dynamic_sampling
        buffer = super()._build_replay_buffer()
        if dynamic.enable and dynamic.refill and buffer.filter_groups_metric is None:
            raise ConfigError(
                "dynamic_sampling.refill=true runs veRL's filter_groups: set algorithm.filter_groups.enable=true "
                "(the verl engine does when algorithm.dynamic_sampling.enable=true)"
            )
        if self.verl_mode == "sync":
            return SqlAgentReplayBuffer.from_buffer(buffer, dynamic)
        if dynamic.enable and not dynamic.refill:
            raise ConfigError(
                f"trainer.mode={self.verl_mode} needs algorithm.dynamic_sampling.refill=true "
                "(training/engines/verl/checks/async_rules.py)"
            )
        return SqlAgentAsyncReplayBuffer.from_buffer(buffer, dynamic)

    @SkipManager.annotate_tq(role="rollout_tq", phase="submit")
    def _add_batch_to_generate(self) -> None:
        """the papers' dynamic sampling draws ``B x K`` prompts once per step (K = oversample)
        from the backup pool: the questions the last draw did not keep first (``return_unkept``)."""
        import verl.utils.tensordict_utils as tu

        dynamic = self.settings.dynamic_sampling
        if not (dynamic.enable and not dynamic.refill):
            self._submit_batch_to_rollout(self._next_train_batch())
            return
        pool = self._backup_pool()
        batch = pool.take(int(self.config.data.train_batch_size) * int(dynamic.oversample))
        tu.assign_non_tensor_data(batch, "global_steps", self.global_steps)
        if isinstance(self.replay_buffer, SqlAgentReplayBuffer):  # it keeps groups in this order
            self.replay_buffer.draw_order = {str(uid): i for i, uid in enumerate(pool.drawn)}
        self._submit_batch_to_rollout(batch)

    def _backup_pool(self) -> BackupPool:
        """The one draw's pool, with the last draw's unkept questions handed back to it."""
        pool = getattr(self, "_pool", None)
        if pool is None:
            pool = self._pool = BackupPool(self._fetch_one_gen_batch)
        replay = getattr(self, "replay_buffer", None)
        if isinstance(replay, SqlAgentReplayBuffer):
            pool.give_back(replay.take_unkept())
        return pool

    def _pool_file(self, step_dir: str) -> Path:
        return Path(step_dir) / BACKUP_POOL_FILE

    # ------------------------------------------------------------------ one update per mini-batch

    def _mini_batches(self) -> int:
        """Optimizer steps per epoch over one sampled batch: its questions / questions per
        update. A step samples ``parameter_sync_step`` batches (``separate_async``; 1 otherwise)."""
        actor = self.config.actor_rollout_ref.actor
        sampled = int(self.config.data.train_batch_size) // max(1, int(self.parameter_sync_step))
        return max(1, sampled // int(actor.ppo_mini_batch_size))

    def _get_required_batch_multiple(self, dp_size: int) -> int:
        """Rows are padded to a multiple of ``mini_batches x dp``, so each optimizer step
        takes an equal share that splits evenly over the data-parallel ranks, however many
        rows a question has (DualSQL: two per session; veRL asks for ``mini x n``)."""
        return self._mini_batches() * int(dp_size)

    def _update_actor(self, batch: Any, metrics: dict) -> Any:
        """veRL's actor update with the mini-batch sized in rows of this batch.

        veRL sizes a mini-batch as ``ppo_mini_batch_size x rollout.n`` rows, so DualSQL's two
        rows per session made two optimizer steps where ``algorithm.mini_batches: 1``
        promises one on-policy pass (the second was off-policy). The extra_info keys are
        veRL's own (``PPOTrainer._update_actor``); distillation is not used here.
        """
        if is_distillation_enabled(self.config.get("distillation")):
            raise ConfigError("the sqlagent trainer does not run veRL's distillation; unset distillation.enable")
        actor = self.config.actor_rollout_ref.actor
        rows = len(batch) // self._mini_batches()
        batch.extra_info.update(
            {
                "calculate_entropy": bool(actor.calculate_entropy or actor.entropy_coeff != 0.0),
                "distillation_use_topk": False,
                "distillation_only": False,
                "global_batch_size": rows,
                "mini_batch_size": rows,
                "epochs": actor.ppo_epochs,
                "seed": actor.data_loader_seed,
                "dataloader_kwargs": {"shuffle": actor.shuffle},
                "temperature": self.config.actor_rollout_ref.rollout.temperature,
            }
        )
        output = self.actor_rollout_wg.update_actor(batch)
        output = rename_dict(output["metrics"], "actor/")
        output["perf/mfu/actor"] = output.pop("actor/mfu")
        metrics.update(reduce_metrics(output))
        metrics["actor/rows_per_update"] = rows
        return batch

    # ------------------------------------------------------------------ advantages

    def _rollout_correction(self) -> Any:
        """veRL's rollout-correction block when it does something (decoupled mode with
        importance weights or rejection sampling configured), else None. With neither set,
        veRL's own step would only recompute metrics its old-log-prob step already logs."""
        corr = (self.config.get("algorithm") or {}).get("rollout_correction", None)
        if corr is None or corr.get("bypass_mode", False):
            return None
        if corr.get("rollout_is") is None and corr.get("rollout_rs") is None:
            return None
        return corr

    def _compute_advantage(self, batch: Any, metrics: dict) -> Any:
        """Fetch masks, uids and extra fields from TransferQueue; write advantages back.

        As veRL's own step does, rollout correction (importance weights, rejection
        sampling; e.g. DualSQL's sequence-level masked IS) runs first; a rejected sequence's
        ``response_mask`` is zeroed and, unlike veRL's step, ``loss_mask`` is written with
        it, since the loss normalises by ``loss_mask``. Rows dynamic sampling kept only to
        fill a slot (tag ``zero_mask``) get the same treatment: no token of theirs trains.
        """
        import transfer_queue as tq
        from tensordict import TensorDict

        corr = self._rollout_correction()
        tensors = ["response_mask"] + (["old_log_probs", "rollout_log_probs"] if corr is not None else [])
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=["uid", "extra_fields", *tensors]
        )
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        proto = DataProto(
            batch=TensorDict({key: padded[key] for key in tensors}, batch_size=len(batch)),
            non_tensor_batch={
                "uid": np.array(list(padded["uid"]), dtype=object),
                "extra_fields": np.array(list(padded["extra_fields"]), dtype=object),
            },
        )
        if corr is not None:
            from verl.trainer.ppo.rollout_corr_helper import (
                compute_rollout_correction_and_add_to_batch,
            )

            proto, corr_metrics = compute_rollout_correction_and_add_to_batch(proto, corr)
            metrics.update(corr_metrics)
        is_padding = [bool(tag.get("is_padding", False)) for tag in batch.tags]
        zero = [
            bool(tag.get(ZERO_MASK_TAG, False)) and not pad for tag, pad in zip(batch.tags, is_padding, strict=True)
        ]
        excluded = [pad or z for pad, z in zip(is_padding, zero, strict=True)]
        proto, adv_metrics = phase_aware_advantages(proto, self._advantage_settings(), excluded)
        metrics.update(adv_metrics)
        self._remember_step(proto, is_padding)
        self._write_samples(batch, proto, is_padding)
        output = {key: nested_like(proto.batch[key], nested_mask) for key in ("advantages", "returns")}
        if corr is not None or any(zero):
            mask = proto.batch["response_mask"].clone()
            mask[torch.tensor(zero, dtype=torch.bool)] = 0
            mask = nested_like(mask.to(nested_mask.dtype), nested_mask)
            output["response_mask"] = mask
            output["loss_mask"] = mask.clone()
            if "rollout_is_weights" in proto.batch:
                output["rollout_is_weights"] = nested_like(proto.batch["rollout_is_weights"], nested_mask)
        return tq.kv_batch_put(
            keys=batch.keys, partition_id=batch.partition_id, fields=TensorDict(output, batch_size=len(batch))
        )

    # ------------------------------------------------------------------ validation and the run's end

    def _validate(self) -> dict[str, float]:
        """veRL's validation with rows marked as validation (the agent's inference mode),
        also written as an ``eval_before`` / ``eval`` / ``eval_after`` record."""
        self._restore_metrics_file()
        loader = self.val_dataloader
        self.val_dataloader = ValidationRows(loader)
        try:
            metrics = super()._validate()
        finally:
            self.val_dataloader = loader
        total = int(getattr(self, "total_training_steps", 0) or 0)
        kind = "eval_before" if self.global_steps == 0 else "eval_after" if self.global_steps >= total else "eval"
        logger = self._project_logger()
        if logger is not None and metrics:
            logger.log(int(self.global_steps), eval_record(metrics, self.settings.exec_metric), kind=kind)
        return metrics

    def fit(self, agent_loop_manager: Any) -> None:
        """veRL's loop; then the held-out evaluation after training (when the project asks
        for one and veRL's periodic validation did not already run at the last step),
        logged to veRL's loggers (wandb, console, file) too, and the final weights - unless
        a signal stopped the loop early (training/engines/verl/workers/stop_on_signal.py)."""
        self._previous_file_log = self._read_metrics_file()
        self._drop_records_after_resume()
        super().fit(agent_loop_manager)
        last = getattr(self, "_last_step", None)
        if last is not None:
            self.global_steps = last  # veRL leaves it one past the last step
        if last is not None and self.stopped_at is None:
            if self.settings.eval_after and int(self.config.trainer.test_freq) <= 0:
                self._init_dump_executor()  # veRL shut it down at the last step; validation dumps use it
                self.on_validate_begin()
                metrics = self._validate()
                self.on_validate_end()
                self._shutdown_dump_executor()
                self.logger.log(data=metrics, step=last)
            self._export_final(last)
        logger = getattr(self, "_metrics_logger", None)
        if logger is not None:
            logger.close()

    # ------------------------------------------------------------------ export

    def _export_final(self, last: int) -> None:
        """The last step as a HF model in ``final_dir`` (saving that step's checkpoint first
        when ``save_freq`` did not): veRL's ``hf_model`` copy when the checkpoint holds one,
        else veRL's model merger on the FSDP shards (training/export.py). Written under a
        temporary name and renamed, so a kill never leaves a ``final/`` that looks done. Under
        LoRA always the merger, with the adapter merged (training/export.py)."""
        from training.export import export_verl_actor

        final = self.settings.final_dir
        if not final:
            return
        step_dir = Path(self.config.trainer.default_local_dir) / f"global_step_{last}"
        if not (step_dir / "actor").exists():
            self._save_checkpoint()
        trust = bool(self.config.actor_rollout_ref.model.get("trust_remote_code"))
        export_verl_actor(step_dir / "actor", final, trust_remote_code=trust)
        log.info("final weights of step %d exported to %s", last, final)

    def _load_checkpoint(self) -> None:
        """veRL's resume, then the backup pool saved with the checkpoint (absent: empty)."""
        super()._load_checkpoint()
        if not self.global_steps:
            return
        trainer = self.config.trainer
        if trainer.resume_mode == "resume_path":
            step_dir = str(trainer.resume_from_path)
        else:
            step_dir = os.path.join(trainer.default_local_dir, f"global_step_{self.global_steps}")
        path = self._pool_file(step_dir)
        if path.exists():
            self._backup_pool().load_state_dict(torch.load(path, weights_only=False))
            log.info("backup pool restored from %s", path)

    def _save_checkpoint(self) -> None:
        """veRL's save, then its rotation over the checkpoints of earlier processes of this
        run too (veRL's own list only holds those this process saved, so every resume would
        otherwise leave ``trainer.keep_checkpoints`` more behind)."""
        from training.runs.resume_policy import prune_verl_checkpoints

        super()._save_checkpoint()
        dynamic = self.settings.dynamic_sampling
        if dynamic.enable and not dynamic.refill:  # the backup pool, with this step's unkept questions
            step_dir = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
            torch.save(self._backup_pool().state_dict(), self._pool_file(step_dir))
        keep = self.config.trainer.get("max_actor_ckpt_to_keep", None)
        for path in prune_verl_checkpoints(self.config.trainer.default_local_dir, keep):
            log.info("removed %s (trainer.keep_checkpoints=%s)", path, keep)


@register_trainer(TRAINER_MODE)
class SqlAgentTrainer(SqlAgentTrainerBase, PPOTrainerSync):
    """veRL's sync trainer with the project's behaviour (:class:`SqlAgentTrainerBase`)."""
