"""On a local Ray cluster (2 CPUs): veRL's v1 agent-loop manager and TransferQueue.

The one test here that starts Ray (about 45 s): ``AgentLoopManagerTQ`` starts veRL's
``AgentLoopWorkerTQ`` as a Ray actor in a fresh process, which finds our agent loop only
through the ``verl.plugins`` entry point; DualSQL rows go through the fake server, the
real agents, tools and rewards, and land in TransferQueue as ``{uid}_{session}_{index}``.
The trainer subclass's advantage step then reads and writes the real TransferQueue.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np
import pytest

from tests.agents.conftest import JOIN_SQL, make_db
from tests.agents.scripts import DUALSQL
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tests.training.verl.test_agent_loop import FakeServer, example_for, verl_config
from training.engines import verl_engine as E
from training.engines import verl_trainer as T

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory):
    ray = pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("ray_cache")
    env = {"PYTHONPATH": str(REPO), "SQLAGENT_RL_CACHE": str(cache)}
    saved = os.environ.get("SQLAGENT_RL_CACHE")
    os.environ["SQLAGENT_RL_CACHE"] = str(cache)
    ray.init(num_cpus=2, include_dashboard=False, runtime_env={"env_vars": env})
    try:
        yield
    finally:
        ray.shutdown()
        if saved is None:
            os.environ.pop("SQLAGENT_RL_CACHE", None)
        else:
            os.environ["SQLAGENT_RL_CACHE"] = saved


def wait_finished(tq, uid: str, timeout_s: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tags = tq.kv_list("train").get("train", {})
        if tags.get(uid, {}).get("status") in ("finished", "failure"):
            return tags
        time.sleep(0.5)
    raise TimeoutError(f"prompt {uid} not finished after {timeout_s}s: {tags}")


def test_dualsql_rows_through_ray_workers_and_transfer_queue(ray_cluster: None, tmp_path: Path) -> None:
    import transfer_queue as tq
    from transfer_queue import KVBatchMeta
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ
    from verl.utils import tensordict_utils as tu

    model = tmp_path / "policy"
    tiny_tokenizer().save_pretrained(model)
    tiny_model().save_pretrained(model)
    example = example_for(make_db(tmp_path / "schools.sqlite"), JOIN_SQL)
    cfg = verl_config(model, "dualsql", "dualsql", options={"guardrails": True})
    cfg.actor_rollout_ref.rollout.agent.num_workers = 1
    cfg.transfer_queue.enable = True
    cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
    tq.init(cfg.transfer_queue)
    try:
        wrong = {**DUALSQL, "generator": [*DUALSQL["generator"][:-1], DUALSQL["generator"][-1].replace("MAX", "MIN")]}
        server = FakeServer(DUALSQL, per_session={"u0-1": wrong})
        manager = AgentLoopManagerTQ.create(config=cfg, llm_client=server, teacher_client=None,
                                            reward_loop_worker_handles=None)
        row = E.example_to_row(example, 0)
        batch = tu.get_tensordict({
            "raw_prompt": np.array([row["prompt"]], dtype=object),
            "extra_info": np.array([row["extra_info"]], dtype=object),
            "agent_name": np.array([row["agent_name"]], dtype=object),
            "data_source": np.array([row["data_source"]], dtype=object),
            "reward_model": np.array([row["reward_model"]], dtype=object),
            "index": np.array([0]),
            "uid": np.array(["u0"], dtype=object),
        })
        tu.assign_non_tensor_data(batch, "global_steps", 1)
        tq.kv_batch_put(keys=["u0"], partition_id="train",
                        tags=[{"is_prompt": True, "status": "pending", "global_steps": 1}])
        manager.generate_sequences(batch)
        tags = wait_finished(tq, "u0")
        assert tags["u0"]["status"] == "finished", tags
        keys = sorted(k for k in tags if k != "u0")
        assert keys == ["u0_0_0", "u0_0_1", "u0_1_0", "u0_1_1"]  # G = 2 sessions x (linker, generator)
        stored = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["extra_fields"])
        roles = [getattr(ef, "data", ef)["sqlagent"]["role"] for ef in stored["extra_fields"]]
        assert roles == ["linker", "generator", "linker", "generator"]

        trainer = object.__new__(T.SqlAgentTrainer)
        trainer.config = cfg
        metrics: dict[str, float] = {}
        trainer._compute_advantage(KVBatchMeta(partition_id="train", keys=keys, tags=[tags[k] for k in keys]), metrics)
        adv = tq.kv_batch_get(keys=keys, partition_id="train", select_fields=["advantages"])["advantages"]
        firsts = [float(a[0]) for a in adv.unbind()]
        assert firsts[0] == 0.0 and firsts[2] == 0.0  # identical linkers: no spread in their group
        assert firsts[1] == pytest.approx(1 / np.sqrt(2), rel=1e-4)  # right SQL
        assert firsts[3] == pytest.approx(-1 / np.sqrt(2), rel=1e-4)  # wrong SQL
    finally:
        tq.close()
