"""CPU doubles for the GPU pieces of veRL's trainer: the FSDP actor worker group, the vLLM
server (a Ray actor behind veRL's real ``LLMServerClient`` and load balancer) and the
checkpoint engine that syncs weights between them.

Each double does the real computation on the tiny test model and follows the contract of
the part it replaces, read from veRL 0.9.1's source:

- :class:`TinyActorWorkerGroup` - ``RayWorkerGroup`` of ``ActorRolloutRefWorker`` with the
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
- :class:`TinyServer` - ``vLLMHttpServer.generate``: the prompt-room error, the
  ``max_tokens`` clamp, stop at EOS (kept in ``token_ids``) or at a stop string (its
  tokens kept), ``stop_reason="completed"``, log-probs of the processed (temperature
  scaled) distribution when asked for, ``extra_fields={"global_steps": version}``; it
  refuses to generate while asleep (veRL sleeps the replicas between rollout and the
  weight update). Weights are the worker group's, copied at ``update_weights``.
  Which tokens are written: a random two-layer model cannot write a tool call, so the
  server has a *writer* per session (the sticky request id ``{uid}-{session}`` reaches
  it because the tests set ``rollout.full_determinism``): ``"sample"`` samples from the
  current weights; ``"script"`` / ``"wrong"`` write the design's scripted turn (the
  second with a wrong final SQL) token by token under the same stop and length rules.
  Every token's log-prob is the current weights' in both cases, as vLLM reports it.
- :class:`TinyCheckpointEngine` - ``CheckpointEngineManager`` with the naive backend:
  ``update_weights(version)`` copies the weights into the server and wakes it;
  ``sleep_replicas()`` puts it to sleep.
"""

from __future__ import annotations

import copy
import json
import os
import random
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import ray
import torch
from tensordict import TensorDict
from verl.utils import tensordict_utils as tu
from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager
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
        if self.should_save_hf_model:
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

        from training.engines.verl_trainer import actor_config_from

        path = config.actor_rollout_ref.model.path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        self.ref = copy.deepcopy(self.model).eval().requires_grad_(False)  # the frozen initial policy
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
        return self._infer(self.model, data)

    @tqbridge()
    def compute_ref_log_prob(self, data: TensorDict) -> TensorDict:
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
        received = {
            key: [row.tolist() for row in rows_of(data[key])]  # what the update trains on, per row
            for key in ("prompts", "responses", "loss_mask", "advantages")
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


# ----------------------------------------------------------------------------- generation


@ray.remote
class TinyServer:
    """Stands in for a vLLM server replica; see the module docstring."""

    def __init__(
        self,
        model_path: str,
        rollout: dict[str, Any],
        script: dict[str, list[str]],
        writers: dict[str, str],
        wrong: dict[str, list[str]] | None = None,
        seed: int = 0,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(1)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.max_model_len = int(rollout["max_model_len"])
        self.prompt_length, self.response_length = int(rollout["prompt_length"]), int(rollout["response_length"])
        self.script, self.wrong, self.writers = script, wrong or script, dict(writers)
        self.global_steps: int | None = None
        self.awake = False
        self.rng = random.Random(seed)
        self.calls: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ replica control

    def update_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> None:
        self.model.load_state_dict(state)
        if global_steps is not None:
            self.global_steps = int(global_steps)
        self.awake = True

    def sleep(self) -> None:
        self.awake = False

    def set_writers(self, writers: dict[str, str]) -> None:
        self.writers = dict(writers)

    def history(self) -> list[dict[str, Any]]:
        return list(self.calls)

    # ------------------------------------------------------------------ vLLMHttpServer.generate

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **kwargs: Any
    ) -> Any:
        from verl.workers.rollout.replica import TokenOutput

        if not self.awake:
            raise RuntimeError("generate() on a sleeping replica: veRL wakes it with update_weights first")
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        room = self.max_model_len - len(prompt_ids)
        if room < 1:
            raise ValueError(
                f"Prompt length ({len(prompt_ids)}) leaves no room to generate within the model's maximum context "
                f"length ({self.max_model_len}); need at least 1 token of headroom."
            )
        if "max_tokens" in params:
            max_tokens = params.pop("max_tokens")
        else:
            max_tokens = min(self.response_length, self.prompt_length + self.response_length - len(prompt_ids))
        max_tokens = max(1, min(int(max_tokens), room))
        temperature = float(params.get("temperature", 1.0))
        writer = self._writer(request_id)
        forced = None if writer == "sample" else self._scripted(prompt_ids, writer)
        ids, logps = self._write(prompt_ids, forced, max_tokens, temperature, params)
        self.calls.append(
            {
                "request_id": request_id,
                "writer": writer,
                "prompt_len": len(prompt_ids),
                "max_tokens": max_tokens,
                "n": len(ids),
                "version": self.global_steps,
            }
        )
        return TokenOutput(
            token_ids=ids,
            log_probs=logps if params.get("logprobs") else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps, "num_cached_tokens": None},
        )

    def _writer(self, request_id: str) -> str:
        session = request_id.rsplit("-", 1)[-1]
        return self.writers.get(session, self.writers.get("*", "script"))

    def _scripted(self, prompt_ids: list[int], writer: str) -> list[int]:
        text = self.tokenizer.decode(prompt_ids)
        script = self.wrong if writer == "wrong" else self.script
        role = "generator" if "You are the SQL generator" in text else next(iter(script))
        turn = text.count("<|im_start|>assistant") - 1
        turns = script[role]
        body = self.tokenizer.encode(turns[min(turn, len(turns) - 1)], add_special_tokens=False)
        return body + [self.tokenizer.eos_token_id]

    def _write(
        self,
        prompt_ids: list[int],
        forced: list[int] | None,
        max_tokens: int,
        temperature: float,
        params: dict[str, Any],
    ) -> tuple[list[int], list[float]]:
        """Token by token under vLLM's stop rules: EOS (kept), a stop string (its tokens
        kept), or ``max_tokens``; log-probs of the processed distribution."""
        stops = list(params.get("stop") or [])
        eos = self.tokenizer.eos_token_id
        ids: list[int] = []
        logps: list[float] = []
        context = torch.tensor([prompt_ids])
        past = None
        with torch.no_grad():
            while len(ids) < max_tokens:
                out = self.model(input_ids=context, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[0, -1].float()
                scaled = logits / temperature if temperature > 0 else logits
                logp = torch.log_softmax(scaled, dim=-1)
                if forced is not None:
                    token = forced[min(len(ids), len(forced) - 1)]
                elif temperature <= 0:
                    token = int(torch.argmax(logits))
                else:
                    token = self._sample(logp, params)
                ids.append(int(token))
                logps.append(float(logp[token]))
                if token == eos and not params.get("ignore_eos", False):
                    break
                if stops and any(s in self.tokenizer.decode(ids, skip_special_tokens=True) for s in stops):
                    break
                context = torch.tensor([[token]])
        return ids, logps

    def _sample(self, logp: torch.Tensor, params: dict[str, Any]) -> int:
        probs = logp.exp()
        top_k = int(params.get("top_k", -1) or -1)
        if top_k > 0:
            kth = torch.topk(probs, top_k).values[-1]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
        top_p = float(params.get("top_p", 1.0))
        if top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < top_p * sorted_p.sum()
            probs = torch.zeros_like(probs).scatter(0, order, sorted_p * keep)
        generator = torch.Generator().manual_seed(self.rng.randrange(2**31))
        return int(torch.multinomial(probs / probs.sum(), 1, generator=generator))


class TinyServerManager:
    """Stands in for ``LLMServerManager``: one :class:`TinyServer` replica registered in
    veRL's real global load balancer; clients are veRL's real ``LLMServerClient``."""

    def __init__(
        self,
        config: Any,
        script: dict[str, list[str]],
        writers: dict[str, str],
        wrong: dict[str, list[str]] | None = None,
    ) -> None:
        from verl.workers.rollout.router import get_router_handle

        rollout = config.actor_rollout_ref.rollout
        values = {
            "max_model_len": rollout.max_model_len,
            "prompt_length": rollout.prompt_length,
            "response_length": rollout.response_length,
        }
        self.config = config
        self.server = TinyServer.remote(str(config.actor_rollout_ref.model.path), values, script, writers, wrong)
        self.global_load_balancer = get_router_handle(
            servers={"tiny-server-0": self.server}, full_determinism=bool(rollout.get("full_determinism", False))
        )

    def get_client(self) -> Any:
        from verl.workers.rollout.llm_server import LLMServerClient

        return LLMServerClient(config=self.config, load_balancer_handle=self.global_load_balancer)

    def get_replicas(self) -> list[Any]:
        return []


class TinyCheckpointEngine:
    """Stands in for ``CheckpointEngineManager`` (naive backend) between the two doubles."""

    def __init__(self, group: TinyActorWorkerGroup, server: Any) -> None:
        self.group, self.server = group, server
        self.versions: list[int | None] = []

    def update_weights(self, global_steps: int | None = None) -> None:
        ray.get(self.server.update_weights.remote(self.group.state_dict(), global_steps))
        self.versions.append(global_steps)

    def sleep_replicas(self) -> None:
        ray.get(self.server.sleep.remote())


def weights_changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    """Largest absolute change of any parameter."""
    return max(float((after[k] - before[k]).abs().max()) for k in before)


def env_for_workers(repo: Path, cache: Path) -> dict[str, str]:
    """Environment of the Ray workers: the project importable, caches in the test's temp dir."""
    return {
        "PYTHONPATH": str(repo),
        "SQLAGENT_RL_CACHE": str(cache),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "VERL_LOGGING_LEVEL": os.environ.get("VERL_LOGGING_LEVEL", "WARN"),
    }
