"""CPU double for the GPU half of veRL's trainer that trains: the FSDP actor worker group
(the vLLM server it syncs weights into is in ``vllm_double.py``).

The double does the real computation on the tiny test model and follows the contract of
the part it replaces, read from veRL 0.9.1's source:

:class:`TinyActorWorkerGroup` - ``RayWorkerGroup`` of ``ActorRolloutRefWorker`` with the
FSDP engine (``workers/engine_workers.py``, ``workers/engine/fsdp/transformer_impl.py``).
Its compute methods go through veRL's own ``tqbridge`` (TransferQueue in, TransferQueue
out, as the real dispatch does). Log-probs are those of the current weights at the
rollout temperature, over the whole sequence (prompt + response, shifted by one), as
nested tensors. ``update_actor`` is ``train_mini_batch``: the same assertion on
``mini_batch_size % dp``, the batch split into ``dp`` equal shards, veRL's
``make_iterator`` per shard, the installed loss (``set_loss_fn``) called with veRL's
``dp_size`` / ``batch_num_tokens`` / ``global_batch_size``, one optimizer step per
mini-batch (gradients averaged over the simulated ranks as FSDP does), gradient
clipping, and the LR scheduler stepped once per call (each call's rows - prompt,
response, loss mask, advantages - kept in ``batches``). One micro-batch per rank:
veRL's token-budget micro-batching changes memory, not the gradient.
Checkpoints use the FSDP checkpoint manager's file layout for one rank
(``model_world_size_1_rank_0.pt``, ``optim_...``, ``extra_state_...``,
``fsdp_config.json``, ``huggingface/`` with config and tokenizer, plus the weights
when ``save_contents`` has ``hf_model``) and veRL's own rotation
(``BaseCheckpointManager``, ``max_ckpt_to_keep``).

LoRA (``model.lora_rank > 0``), as the FSDP engine and ``ActorRolloutRefWorker`` do it:
the model is wrapped by veRL's own ``FSDPEngine._build_lora_module`` (PEFT, base frozen,
the optimizer built over all parameters, so AdamW moves only the adapter); there is no
reference copy: veRL's trainer (``ref_in_actor``) asks ``compute_log_prob`` with
``no_lora_adapter`` and the double runs it under ``disable_adapter()``, as
``infer_batch`` does; weights reach the server as ``update_weights`` sends them with
``lora.merge`` off (veRL's default): the base once (``rollout.load_format=dummy``: vLLM
starts without weights), named as vLLM's LoRA layers hold them, then the adapter and its
PEFT config at every sync, both collected by veRL's ``collect_lora_params``; the
checkpoint holds PEFT's whole state dict (``save_lora_only`` off) and veRL's
``lora_train_meta.json``.
"""

from __future__ import annotations

import copy
import json
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
from verl.utils.transferqueue_utils import tqbridge

WORLD = 1  # one process holds the whole model; dp ranks are simulated inside it


def jagged(rows: list[torch.Tensor]) -> torch.Tensor:
    """Rows of different lengths as one jagged nested tensor (autograd flows through ``values``)."""
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    return torch.nested.nested_tensor_from_jagged(torch.cat(rows), offsets=offsets)


def rows_of(t: torch.Tensor) -> list[torch.Tensor]:
    return list(t.unbind()) if t.is_nested else [r for r in t]


def sequence_logprobs(model: Any, ids: torch.Tensor, temperature: float, entropy: bool = False):
    """Log-prob of each next token (position t holds log p(ids[t+1] | ids[:t+1]); the last
    position is 0), over the whole sequence, at ``temperature`` (veRL's engine divides the
    logits by the rollout temperature); optionally the entropy at each position."""
    logits = model(input_ids=ids[None], use_cache=False).logits[0].float()  # [L, vocab]
    if temperature and temperature > 0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)  # [L, vocab]
    picked = logp[:-1].gather(-1, ids[1:, None]).squeeze(-1)  # [L-1]
    out = torch.cat([picked, picked.new_zeros(1)])  # [L]
    ent = None
    if entropy:
        ent = -(logp.exp() * logp).sum(-1)  # [L]
    return out, ent


class TinyCheckpoints(BaseCheckpointManager):
    """veRL's FSDP checkpoint layout for one rank, with veRL's own rotation."""

    # veRL's own LoRA metadata writer (rank, alpha, task type; the merger reads it back)
    _get_lora_train_meta = FSDPCheckpointManager._get_lora_train_meta
    _save_lora_train_meta = FSDPCheckpointManager._save_lora_train_meta

    def __init__(self, group: TinyActorWorkerGroup, checkpoint_config: Any) -> None:
        super().__init__(group.model, group.optimizer, group.lr_scheduler, group.tokenizer, checkpoint_config)

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        self.previous_global_step = global_step
        self.ensure_checkpoint_capacity(max_ckpt_to_keep)
        path = Path(local_path)
        path.mkdir(parents=True, exist_ok=True)
        suffix = f"world_size_{WORLD}_rank_0.pt"
        if self.should_save_model:
            torch.save(self.model.state_dict(), path / f"model_{suffix}")
        if self.should_save_optimizer:
            torch.save(self.optimizer.state_dict(), path / f"optim_{suffix}")
        if self.should_save_extra:
            extra = {"lr_scheduler": self.lr_scheduler.state_dict(), "rng": self.get_rng_state()}
            torch.save(extra, path / f"extra_state_{suffix}")
        hf = path / "huggingface"
        hf.mkdir(exist_ok=True)
        self.model.config.save_pretrained(hf)
        self.processing_class.save_pretrained(hf)
        (path / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 2, "world_size": WORLD}))
        self._save_lora_train_meta(str(path), self.model)
        if self.should_save_hf_model and hasattr(self.model, "peft_config"):
            # veRL saves a plain model with the PEFT model's state dict (its names, its adapter)
            from transformers import AutoModelForCausalLM

            plain = AutoModelForCausalLM.from_config(self.model.config)
            plain.save_pretrained(hf, state_dict=self.model.state_dict())
        elif self.should_save_hf_model:
            self.model.save_pretrained(hf)
        self.register_checkpoint(str(path), max_ckpt_to_keep)

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        path = Path(local_path)
        suffix = f"world_size_{WORLD}_rank_0.pt"
        if self.should_load_model:
            self.model.load_state_dict(torch.load(path / f"model_{suffix}", weights_only=True))
        if self.should_load_optimizer:
            self.optimizer.load_state_dict(torch.load(path / f"optim_{suffix}", weights_only=True))
        if self.should_load_extra:
            extra = torch.load(path / f"extra_state_{suffix}", weights_only=False)
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            self.load_rng_state(extra["rng"])


class TinyActorWorkerGroup:
    """Stands in for the actor (and reference) worker group; see the module docstring."""

    def __init__(self, config: Any, dp_size: int = 2) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config.optimizer import build_optimizer
        from verl.workers.engine.fsdp.transformer_impl import FSDPEngine
        from verl.workers.utils.losses import ppo_loss

        from training.engines.verl.workers.kl_schedule import actor_config_from

        path = config.actor_rollout_ref.model.path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        self.lora = model_config.lora_rank > 0
        self.ref: Any = None  # under LoRA the reference is the actor with its adapter disabled
        if self.lora:  # FSDPEngine._build_model_optimizer: PEFT before FSDP and the optimizer
            self.model = FSDPEngine._build_lora_module(SimpleNamespace(model_config=model_config), self.model)
        else:
            self.ref = copy.deepcopy(self.model).eval().requires_grad_(False)  # the frozen initial policy
        # ActorRolloutRefWorker: vLLM holds the base already unless it starts with dummy weights
        self.base_sync_done = "dummy" not in str(config.actor_rollout_ref.rollout.load_format)
        self.reference_passes = 0  # compute_log_prob calls with the adapter disabled
        actor = actor_config_from(config)
        self.optim_config = actor.optim
        self.optimizer = build_optimizer(self.model.parameters(), self.optim_config)
        # veRL's own scheduler construction (FSDPEngine._build_lr_scheduler reads only these two)
        self.lr_scheduler = FSDPEngine._build_lr_scheduler(
            SimpleNamespace(optimizer_config=self.optim_config, rank=0), self.optimizer
        )
        self.checkpoints = TinyCheckpoints(self, omega_conf_to_dataclass(config.actor_rollout_ref.actor.checkpoint))
        self.loss_fn = partial(ppo_loss, config=actor)  # what ActorRolloutRefWorker.init_model installs
        self.dp_size = int(dp_size)
        self.world_size = self.dp_size
        self._dispatch_info: dict[str, list[int]] = {}
        self.updates: list[dict[str, Any]] = []  # one record per update_actor call
        self.batches: list[dict[str, list]] = []  # the rows each update_actor call trained on
        self.loss_fns: list[Any] = [self.loss_fn]

    # ------------------------------------------------------------------ RayWorkerGroup surface

    def _query_dispatch_info(self, role: str) -> list[int]:
        return list(range(self.dp_size))  # the dp rank of each worker (one worker per rank)

    def set_loss_fn(self, loss_fn: Any) -> None:
        self.loss_fn = loss_fn
        self.loss_fns.append(loss_fn)

    @tqbridge()
    def compute_log_prob(self, data: TensorDict) -> TensorDict:
        if tu.pop(data, key="no_lora_adapter", default=False):  # infer_batch: the reference under LoRA
            self.reference_passes += 1
            with self.model.disable_adapter():
                return self._infer(self.model, data)
        return self._infer(self.model, data)

    @tqbridge()
    def compute_ref_log_prob(self, data: TensorDict) -> TensorDict:
        assert self.ref is not None, "under LoRA veRL's trainer asks compute_log_prob(no_lora_adapter=True)"
        return self._infer(self.ref, data)

    @tqbridge()
    def update_actor(self, data: TensorDict) -> TensorDict:
        return self._train_mini_batch(data)

    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ) -> None:
        self.checkpoints.save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    def load_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False
    ) -> None:
        self.checkpoints.load_checkpoint(local_path, hdfs_path, del_local_after_load)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def get_per_tensor_param(self, base_sync_done: bool = True) -> tuple[dict[str, torch.Tensor], Any]:
        """``FSDPEngine.get_per_tensor_param`` with ``lora.merge`` off: every weight (no
        PEFT config), or under LoRA the adapter (``base_sync_done``) or the base under the
        names vLLM's LoRA layers hold it by, with the PEFT config."""
        from verl.utils.fsdp_utils import collect_lora_params, replace_lora_wrapper

        if not self.lora:
            return self.state_dict(), None
        peft_config = self.model.peft_config["default"]
        params = collect_lora_params(module=self.model, layered_summon=False, base_sync_done=base_sync_done)
        if not base_sync_done:
            params = {replace_lora_wrapper(k, peft_config): v for k, v in params.items()}
        return {k: v.detach().clone() for k, v in params.items()}, peft_config.to_dict()

    def rollout_updates(self) -> list[tuple[dict[str, torch.Tensor], Any, bool]]:
        """What ``ActorRolloutRefWorker.update_weights`` (naive mode) hands the rollout, in
        order: ``(weights, peft_config, base_sync_done)``."""
        params, peft_config = self.get_per_tensor_param(base_sync_done=True)
        updates = []
        if peft_config is not None and not self.base_sync_done:
            base, base_config = self.get_per_tensor_param(base_sync_done=False)
            updates.append((base, base_config, False))
        updates.append((params, peft_config, True))
        self.base_sync_done = True
        return updates

    # ------------------------------------------------------------------ computation

    def _infer(self, model: Any, data: TensorDict) -> TensorDict:
        temperature = float(tu.get(data, "temperature", default=1.0))
        want_entropy = bool(tu.get(data, "calculate_entropy", default=False))
        logps, ents = [], []
        with torch.no_grad():
            for ids in rows_of(data["input_ids"]):
                lp, ent = sequence_logprobs(model, ids.long(), temperature, want_entropy)
                logps.append(lp)
                ents.append(ent if ent is not None else torch.zeros_like(lp))
        return TensorDict({"log_probs": jagged(logps), "entropy": jagged(ents)}, batch_size=[len(logps)])

    def _train_mini_batch(self, data: TensorDict) -> TensorDict:
        """``TrainingWorker.train_mini_batch`` over ``dp_size`` simulated ranks."""
        n = data.shape[0]
        mini = tu.pop(data, key="mini_batch_size", default=None)
        epochs = tu.pop(data, key="epochs", default=1)
        seed = tu.pop(data, key="seed", default=42)
        loader_kwargs = tu.pop(data, key="dataloader_kwargs", default={})
        assert mini is not None
        assert mini % self.dp_size == 0, f"Got mini_batch_size={mini} and get_data_parallel_size()={self.dp_size}"
        assert n % self.dp_size == 0, f"batch of {n} rows cannot be dispatched to {self.dp_size} dp ranks"
        per_rank, per_gpu = n // self.dp_size, mini // self.dp_size
        keys = ("prompts", "responses", "loss_mask", "advantages", "input_ids", "old_log_probs", "ref_log_prob")
        received = {
            key: [row.tolist() for row in rows_of(data[key])]  # what the update trains on, per row
            for key in keys
            if key in data.keys()
        }
        shards = tu.chunk_tensordict(data, self.dp_size)  # what the dp dispatch hands each rank
        iterators = [
            tu.make_iterator(
                s, mini_batch_size=per_gpu, epochs=epochs, seed=seed + r, dataloader_kwargs=dict(loader_kwargs)
            )
            for r, s in enumerate(shards)
        ]
        total = per_rank // per_gpu * epochs
        metrics: dict[str, list] = {}
        steps = 0
        self.model.train()
        # zip(strict=False): one optimizer step per mini-batch every rank has
        for index, minis in enumerate(zip(*iterators, strict=False)):
            step_metrics = self._optimizer_step(list(minis), data, update_lr=index == total - 1)
            for key, value in step_metrics.items():
                metrics.setdefault(key, []).append(value)
            steps += 1
        self.updates.append({"rows": n, "mini_batch_size": mini, "optimizer_steps": steps})
        self.batches.append(received)
        metrics["mfu"] = [0.0]
        return tu.get_tensordict(tensor_dict={}, non_tensor_dict={"metrics": metrics})

    def _optimizer_step(self, minis: list[TensorDict], whole: TensorDict, update_lr: bool) -> dict[str, float]:
        temperature = float(tu.get(whole, "temperature", default=1.0))
        calculate_entropy = bool(tu.get(whole, "calculate_entropy", default=False))
        batch_tokens = int(
            sum(int(m["loss_mask"].values().sum() if m["loss_mask"].is_nested else m["loss_mask"].sum()) for m in minis)
        )
        self.optimizer.zero_grad()
        from verl.utils.metric.utils import Metric

        losses, metrics, per_rank = [], {}, {}
        for mini in minis:
            tu.assign_non_tensor(mini, dp_size=self.dp_size, batch_num_tokens=batch_tokens)
            for key in ("prompts", "responses"):
                if not mini[key].is_nested:
                    mini[key] = jagged(rows_of(mini[key]))
            logps, ents = [], []
            for ids in rows_of(mini["input_ids"]):
                lp, ent = sequence_logprobs(self.model, ids.long(), temperature, calculate_entropy)
                logps.append(lp)
                ents.append(ent)
            output = {"log_probs": jagged(logps)}
            if calculate_entropy:
                output["entropy"] = jagged(ents)
            loss, loss_metrics = self.loss_fn(model_output=output, data=mini, dp_group=None)
            (loss / self.dp_size).backward()  # FSDP averages the ranks' gradients
            losses.append(float(loss.detach()))
            for key, value in loss_metrics.items():
                per_rank.setdefault(key, []).append(value)
        for key, values in per_rank.items():  # veRL's all-gather over dp ranks
            if isinstance(values[0], Metric):
                metrics[key] = float(Metric.aggregate_dp(values))
            else:
                metrics[key] = float(np.mean([float(v.detach() if torch.is_tensor(v) else v) for v in values]))
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.optim_config.clip_grad)
        if torch.isfinite(grad_norm):
            self.optimizer.step()
        else:
            self.optimizer.zero_grad()
        metrics.update({"loss": float(np.mean(losses)), "grad_norm": float(grad_norm)})
        if update_lr:
            self.lr_scheduler.step()
            metrics["lr"] = float(self.lr_scheduler.get_last_lr()[0])
        return metrics


def weights_changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """Largest absolute change of any parameter."""
    return max(float((after[k] - before[k]).abs().max()) for k in before)
