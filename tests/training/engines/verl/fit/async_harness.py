"""The fit tier's async trainers: the project's ``colocate_async`` / ``separate_async``
trainers on CPU with the doubles of ``harness.py`` (read its docstring first).

The same seam as :class:`~tests.training.engines.verl.fit.harness.CpuTrainer` (veRL's
``_setup`` minus the GPU pieces), with:

- :class:`AsyncWorkerGroup` - the worker group double plus ``DetachActorWorker``'s CPU
  copies of the weights (``save_model_to_cpu`` / ``restore_model_from_cpu`` /
  ``clear_cpu_model``, which ``separate_async``'s decoupled old-log-prob pass calls) and a
  record of the importance weights each update received;
- ``separate_async`` without hybrid replicas (the verl engine's choice,
  ``actor_rollout_ref.hybrid_engine=false``): the session's server is the standalone pool,
  synced by a checkpoint engine that aborts, loads and resumes (the NCCL backend's order);

The session's agent loops talk to the server through the async trainers' client
(:class:`~training.engines.verl.workers.async_trainers.VersionedAsyncClient`), and the
server double's latency model makes generation take wall time, so an update finds
requests in flight. Prompts still generating when a ``fit`` returns would land in the next
``fit``'s TransferQueue: :func:`drain` waits for them and clears the partition.
"""

from __future__ import annotations

import time
from typing import Any

from tests.training.engines.verl.fit.fsdp_double import TinyActorWorkerGroup, rows_of
from tests.training.engines.verl.fit.harness import POLL_SECONDS, CpuSetup
from tests.training.engines.verl.fit.vllm_double import TinyCheckpointEngine
from training.engines.verl.workers.async_trainers import SqlAgentColocateAsync, SqlAgentSeparateAsync


class AsyncWorkerGroup(TinyActorWorkerGroup):
    """See the module doc."""

    def __init__(self, config: Any, dp_size: int = 2) -> None:
        super().__init__(config, dp_size=dp_size)
        self.cpu_copies: dict[int, dict[str, Any]] = {}
        self.cpu_calls: list[tuple[str, int]] = []
        self.is_weights: list[list[list[float]]] = []  # per update: each row's token weights

    def save_model_to_cpu(self, n: int) -> None:
        self.cpu_copies[n] = self.state_dict()
        self.cpu_calls.append(("save", n))

    def restore_model_from_cpu(self, n: int) -> None:
        self.model.load_state_dict(self.cpu_copies[n])
        self.cpu_calls.append(("restore", n))

    def clear_cpu_model(self, n: int) -> None:
        self.cpu_copies.pop(n, None)
        self.cpu_calls.append(("clear", n))

    def _train_mini_batch(self, data: Any) -> Any:
        if "rollout_is_weights" in data.keys():
            self.is_weights.append([row.tolist() for row in rows_of(data["rollout_is_weights"])])
        return super()._train_mini_batch(data)


class CpuColocateAsync(CpuSetup, SqlAgentColocateAsync):
    """``trainer.mode=colocate_async`` on CPU: the session's server is the colocated replica."""

    worker_group_cls = AsyncWorkerGroup


class CpuSeparateAsync(CpuSetup, SqlAgentSeparateAsync):
    """``trainer.mode=separate_async`` on CPU: the session's server is the standalone pool."""

    worker_group_cls = AsyncWorkerGroup

    def _replicas(self) -> None:
        from verl.trainer.ppo.v1.trainer_separate_async import HybridEngineMode

        self.llm_server_manager = None  # no hybrid replicas (actor_rollout_ref.hybrid_engine=false)
        self.checkpoint_manager = TinyCheckpointEngine(self.actor_rollout_wg, None)
        self.standalone_server_manager = self.session.servers
        self.standalone_checkpoint_manager = TinyCheckpointEngine(
            self.actor_rollout_wg, self.session.servers.server, partial=True
        )
        self.current_mode = HybridEngineMode.TRAINER


LATENCY = (0.004, 3.0)
"""The server double's latency model for the async trainers (``TinyServer.set_latency``):
4 ms per token times a per-request factor of 1-3, 3-9 for one request in four, so an
update finds the long requests in flight. Sleeping costs no CPU; 4 ms because a scripted
turn's tokens no longer each cost a forward pass (one pass scores the turn): at 2 ms,
Think2SQL's 44-token turns left ``separate_async``'s updates with nothing in flight (before
``TinyServer.hold_until_cut``). The kill-and-requeue jobs (Think2SQL) use it as it is;
``test_async.py`` scales the per-token part by recipe (``TOKEN_SECONDS``)."""

TOKEN_SECONDS = {"think2sql": LATENCY[0], "trustsql": 0.0028, "retoolsql": 0.002, "dualsql": 0.002}
"""Per-token seconds by recipe in ``test_async.py``: each recipe's mean scripted turn (Think2SQL
44 tokens, TRUST-SQL 63, ReToolSQL 90, DualSQL 87 with two roles in turn) takes about what
Think2SQL's takes at ``LATENCY``'s 4 ms, so the longer scripts do not stretch the module's
wall time (DualSQL's fits took 52 of its 77 s at 4 ms) while every run still has requests in
flight at its updates (the held request for sure)."""

TRAINERS = {"colocate_async": CpuColocateAsync, "separate_async": CpuSeparateAsync}


def drain(timeout: float = 600.0) -> int:
    """Wait until no training prompt is generating, then clear the training partition;
    returns the prompt groups cleared."""
    import transfer_queue as tq

    deadline = time.monotonic() + timeout
    while True:
        items = (tq.kv_list("train") or {}).get("train", {})
        busy = [k for k, tag in items.items() if tag.get("is_prompt") and tag.get("status") in ("pending", "running")]
        if not busy:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(busy)} prompt group(s) still generating after {timeout:.0f} s")
        time.sleep(POLL_SECONDS)
    if items:
        tq.kv_clear(keys=list(items), partition_id="train")
    return sum(1 for tag in items.values() if tag.get("is_prompt"))
