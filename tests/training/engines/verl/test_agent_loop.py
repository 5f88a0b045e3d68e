"""The agent-loop adapter inside veRL's own agent-loop machinery, with a fake LLM server.

``AgentLoopWorker`` (veRL's class, run in-process: it is a Ray actor only when the
manager wraps it) instantiates our loop from veRL's registry, awaits ``run`` and pads
and stacks the outputs into a ``DataProto``. The fake server replays scripted turns as
token ids (real agents, a real SQLite file with NULLs and mixed types, the real rewards).
The expected masks, token ids and rewards come from the project's own rollout driver
run synchronously on the same script, so the adapter must preserve them exactly.

DualSQL returns two outputs per row; veRL's v1 worker (``AgentLoopWorkerTQ``) stores
them in TransferQueue as ``{uid}_{session}_{index}``. Its ``_agent_loop_postprocess`` is
run in-process with TransferQueue's put captured, and the captured rows feed the
trainer subclass's advantage step.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents import make_agent
from agents.types import Example
from tests.helpers.agent_db import COUNT_SQL, JOIN_SQL, make_db
from tests.helpers.agent_scripts import DUALSQL, TRUSTSQL
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.algorithm.rewards import get_reward
from training.engines.verl import shared as C
from training.engines.verl.config import translate as E
from training.engines.verl.workers import agent_loop as L
from training.engines.verl.workers.reward_adapter import REWARD_KEY, compute_score
from training.rollout import (
    GenerationOutput,
    RolloutLimits,
    SamplingParams,
    run_episodes,
)

TOK = tiny_tokenizer()
EOS = TOK.eos_token_id
LENGTH = 8192


def scripted_ids(script: dict[str, list[str]], prompt_ids: list[int]) -> list[int]:
    """The scripted turn for this prompt: role from the system prompt, turn = assistant turns so far."""
    text = TOK.decode(prompt_ids)
    role = "generator" if "You are the SQL generator" in text else next(iter(script))
    turn = text.count("<|im_start|>assistant") - 1
    turns = script[role]
    return TOK.encode(turns[min(turn, len(turns) - 1)], add_special_tokens=False) + [EOS]


def logprobs_for(ids: list[int]) -> list[float]:
    return [-0.01 * (i + 1) for i in range(len(ids))]


class FakeServer:
    """Stands in for veRL's LLMServerClient: scripted token ids, recorded requests.
    ``per_session`` picks a script by the episode's sticky request id (``{uid}-{session}``)."""

    def __init__(self, script: dict[str, list[str]], per_session: dict[str, dict] | None = None) -> None:
        self.script, self.per_session = script, per_session or {}
        self.requests: list[dict[str, Any]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], sampling_params: dict, **kwargs: Any):
        from verl.workers.rollout.replica import TokenOutput

        self.requests.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        script = self.per_session.get(request_id, self.script)
        ids = scripted_ids(script, prompt_ids)[: sampling_params.get("max_tokens", LENGTH)]
        return TokenOutput(token_ids=ids, log_probs=logprobs_for(ids), stop_reason="completed")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny_policy")
    TOK.save_pretrained(path)
    tiny_model().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def db_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_db(tmp_path_factory.mktemp("verl_db") / "schools.sqlite")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


def example_for(db_file: Path, gold: str) -> Example:
    return Example(
        id="q7",
        db_id="schools",
        db_path=str(db_file),
        question="Highest average math score in Fresno?",
        evidence="",
        gold_sql=gold,
    )


def verl_config(model_dir: Path, agent: str, reward: str, options: dict | None = None, **extra: Any):
    settings = E.VerlSettings(
        model_path=str(model_dir),
        train_files="unused.parquet",
        val_files="unused.parquet",
        agent=agent,
        agent_options=options or {},
        reward=reward,
        reward_options={"exec_metric": "ex" if reward != "dualsql" else "rex"},
        group_size=2,
        train_batch_size=8,
        prompt_length=LENGTH,
        response_length=LENGTH,
        temperature=0.8,
        top_p=0.95,
        max_new_tokens_per_turn=512,
        **extra,
    )
    return E.build_verl_config(settings)


def batch_for(example: Example, n: int = 1):
    from verl.protocol import DataProto

    row = C.example_to_row(example, 0)
    fields = {
        "raw_prompt": row["prompt"],
        "extra_info": row["extra_info"],
        "agent_name": row["agent_name"],
        "data_source": row["data_source"],
        "reward_model": row["reward_model"],
        "index": 0,
    }
    non_tensor = {}
    for key, value in fields.items():
        arr = np.empty(n, dtype=object)
        arr[:] = [value] * n
        non_tensor[key] = arr
    non_tensor["uid"] = np.array([f"uid{i}" for i in range(n)], dtype=object)
    return DataProto.from_dict(non_tensors=non_tensor, meta_info={"global_steps": 1, "validate": False})


def reference(
    agent_name: str, options: dict, example: Example, script: dict, reward_name: str, metric: str, tokenizer: Any
):
    """The same episodes through the project's sync driver (with the worker's tokenizer, loaded
    from the model directory as veRL loads it), and their rewards."""
    from tools import get_database

    db = get_database(example.db_path)

    def generate(prompts: list[list[int]], params: SamplingParams) -> list[GenerationOutput]:
        outs = []
        for p in prompts:
            ids = scripted_ids(script, p)[: params.max_new_tokens]
            outs.append(GenerationOutput(ids, logprobs_for(ids), "stop"))
        return outs

    trajs = run_episodes(
        make_agent(agent_name, **options),
        [(example, db, 0)],
        tokenizer,
        generate,
        SamplingParams(temperature=0.8, top_p=0.95, max_new_tokens=512, logprobs=True),
        RolloutLimits(
            max_response_tokens=LENGTH, max_context_tokens=2 * LENGTH, max_tokens_per_turn=512, max_prompt_tokens=LENGTH
        ),
    )
    reward = get_reward(reward_name, exec_metric=metric)
    return trajs, [reward(t, example, db) for t in trajs]


def test_trustsql_row_through_veRLs_agent_loop_worker(model_dir: Path, db_file: Path) -> None:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    example = example_for(db_file, COUNT_SQL)
    cfg = verl_config(model_dir, "trustsql", "trustsql", advantage="two_track")
    server = FakeServer(TRUSTSQL)
    worker = AgentLoopWorker(cfg, llm_client=server)
    out = asyncio.run(worker.generate_sequences(batch_for(example, n=2)))

    (traj,), (breakdown,) = reference("trustsql", {}, example, TRUSTSQL, "trustsql", "ex", worker.tokenizer)
    assert traj.result.end_reason == "answer" and len(traj.result.turns) == 5
    resp = out.batch["responses"]  # [2, LENGTH] right-padded by veRL
    mask = out.batch["response_mask"]  # [2, LENGTH]
    ref_policy = [t for t, m in zip(traj.response_ids, traj.response_mask, strict=True) if m]
    ref_lp = [lp for lp, m in zip(traj.logprobs, traj.response_mask, strict=True) if m]
    for i in range(2):
        record = out.non_tensor_batch[L.EPISODE_KEY][i]
        n = len(record["turn_index"])  # this row's response length
        assert int(out.batch["attention_mask"][i, LENGTH:].sum()) == n
        ids, m = resp[i, :n].tolist(), mask[i, :n].tolist()
        # policy tokens and their log-probs exactly as the driver produced them; observation
        # tokens (tool results) carry mask 0. (Observations are compared by role only: the
        # tool layer puts a wall-clock elapsed_s into each result.)
        assert [t for t, k in zip(ids, m, strict=True) if k] == ref_policy
        lps = out.batch["rollout_log_probs"][i, :n].tolist()
        assert [lp for lp, k in zip(lps, m, strict=True) if k] == pytest.approx(ref_lp)
        assert m == record["policy_mask"] and int(mask[i, n:].sum()) == 0
        per_turn = [sum(k for k, t in zip(m, record["turn_index"], strict=True) if t == turn) for turn in range(5)]
        ref_turn = [
            sum(k for k, t in zip(traj.response_mask, traj.turn_index, strict=True) if t == turn) for turn in range(5)
        ]
        assert per_turn == ref_turn
        assert "satscores" in TOK.decode(
            [t for t, k in zip(ids, m, strict=True) if not k]
        )  # an observation, unmasked from loss
        prompt_len = int(out.batch["attention_mask"][i, :LENGTH].sum())
        assert out.batch["prompts"][i, LENGTH - prompt_len :].tolist() == traj.prompt_ids
    # the reward: set on the output, so veRL puts it at the last response token
    scores = out.batch["rm_scores"].sum(-1)
    assert scores.tolist() == pytest.approx([breakdown.total] * 2)
    assert breakdown.total == pytest.approx(1.0 + 0.1) and breakdown.tracks["schema"] == 1.0
    assert out.non_tensor_batch["exec"].tolist() == [1.0, 1.0]  # reward_extra_info column (dynamic sampling)
    record = out.non_tensor_batch[L.EPISODE_KEY][0]
    assert record["role"] == "agent" and record["phases"][2] == "propose_schema"
    # the schema mask covers the policy tokens of turns 0..2 (through the propose turn)
    expected_prefix = [int(m == 1 and t <= 2) for m, t in zip(record["policy_mask"], record["turn_index"], strict=True)]
    assert record["schema_mask"] == expected_prefix and 0 < sum(expected_prefix) < sum(record["policy_mask"])
    assert out.non_tensor_batch[REWARD_KEY][0]["tracks"] == dict(breakdown.tracks)
    # what the agent loop asked the server for
    params = server.requests[0]["sampling_params"]
    assert params["temperature"] == pytest.approx(0.8) and params["top_p"] == pytest.approx(0.95)
    assert params["logprobs"] is True and params["max_tokens"] <= 512
    assert "</tool_call>" in params["stop"] and "</answer>" in params["stop"]
    sticky = {r["request_id"] for r in server.requests}
    assert sticky == {"uid0-0", "uid1-0"}  # one sticky id per episode
    # veRL's reward-manager path returns the same numbers from the output's extra fields
    info = {REWARD_KEY: out.non_tensor_batch[REWARD_KEY][0]}
    assert compute_score("sqlagent", "", COUNT_SQL, info)["score"] == pytest.approx(breakdown.total)
    with pytest.raises(ValueError, match="agent loop"):
        compute_score("gsm8k", "", "", {})


class SlowServer(FakeServer):
    """FakeServer whose calls take a moment, counting how many run at once."""

    def __init__(self, script: dict[str, list[str]]) -> None:
        super().__init__(script)
        self.live = self.most = 0

    async def generate(self, request_id: str, **kwargs: Any):
        self.live += 1
        self.most = max(self.most, self.live)
        try:
            await asyncio.sleep(0.1)  # long beside building a prompt, so every started episode overlaps
            return await super().generate(request_id, **kwargs)
        finally:
            self.live -= 1


@pytest.mark.parametrize("cap", [None, 2])
def test_live_episodes_stay_within_the_sized_cap(model_dir: Path, db_file: Path, cap: int | None) -> None:
    """veRL's worker starts all 6 episodes at once; sqlagent.max_concurrent_episodes (set by
    training/engines/verl/checks/memory.py to fit vLLM's slots) keeps at most that many generating."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    cfg = verl_config(model_dir, "trustsql", "trustsql", advantage="two_track")
    if cap:
        E.apply_verl_overrides(cfg, overrides=[f"verl.sqlagent.max_concurrent_episodes={cap}"])
    server = SlowServer(TRUSTSQL)
    worker = AgentLoopWorker(cfg, llm_client=server)
    out = asyncio.run(worker.generate_sequences(batch_for(example_for(db_file, COUNT_SQL), n=6)))
    assert len(out) == 6 and len({r["request_id"] for r in server.requests}) == 6
    assert server.most == (cap or 6)


class CapturedTQ:
    def __init__(self) -> None:
        self.puts: list[dict[str, Any]] = []

    async def async_kv_batch_put(self, keys, fields, tags, partition_id):
        self.puts.append({"keys": list(keys), "fields": fields, "tags": tags, "partition_id": partition_id})


def capture_tq(monkeypatch: pytest.MonkeyPatch) -> CapturedTQ:
    """TransferQueue's put, captured (the v1 worker stores its rows there)."""
    from verl.trainer.ppo.v1 import agent_loop_tq

    captured = CapturedTQ()
    monkeypatch.setattr(agent_loop_tq.tq, "async_kv_batch_put", captured.async_kv_batch_put)
    return captured


def v1_worker(cfg: Any, server: FakeServer) -> Any:
    """veRL's v1 agent-loop worker class, in-process (no Ray actor, no ``tq.init``)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1 import agent_loop_tq

    class InProcessTQWorker(agent_loop_tq.AgentLoopWorkerTQ.__ray_actor_class__):  # veRL's class, no Ray actor
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            AgentLoopWorker.__init__(self, *args, **kwargs)  # skip tq.init(): puts are captured

    return InProcessTQWorker(cfg, llm_client=server)


FIELDS = ("uid", "response_mask", "loss_mask", "extra_fields", "rm_scores")


def v1_rows(worker: Any, captured: CapturedTQ, example: Example, sessions: int) -> list[dict[str, Any]]:
    """Run ``sessions`` sessions of one prompt row through the v1 worker; the stored rows."""
    row = C.example_to_row(example, 0)
    prompt = {
        "raw_prompt": row["prompt"],
        "extra_info": row["extra_info"],
        "data_source": row["data_source"],
        "reward_model": row["reward_model"],
        "index": 0,
        "uid": "qid7",
        "global_steps": 1,
    }
    sampling = {"temperature": 1.0, "top_p": 0.99, "top_k": 20, "repetition_penalty": 1.0, "logprobs": True}
    info = {"step": 1, "sample_index": 0, "rollout_n": 0, "validate": False}
    for session in range(sessions):
        asyncio.run(
            worker._run_agent_loop(sampling, info, agent_name="sqlagent", trace=False, session_id=session, **prompt)
        )
    return [{k: put["fields"][k][i] for k in FIELDS} for put in captured.puts for i in range(len(put["keys"]))]


def test_dualsql_two_outputs_through_the_v1_worker(
    model_dir: Path, db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured = capture_tq(monkeypatch)
    example = example_for(db_file, JOIN_SQL)
    cfg = verl_config(model_dir, "dualsql", "dualsql", options={"guardrails": True})
    wrong = {**DUALSQL, "generator": [*DUALSQL["generator"][:-1], DUALSQL["generator"][-1].replace("MAX", "MIN")]}
    worker = v1_worker(cfg, FakeServer(DUALSQL, per_session={"qid7-1": wrong}))
    rows = v1_rows(worker, captured, example, sessions=2)
    keys = [k for put in captured.puts for k in put["keys"]]
    assert keys == ["qid7_0_0", "qid7_0_1", "qid7_1_0", "qid7_1_1"]  # linker, generator per session
    trajs, rewards = reference("dualsql", {"guardrails": True}, example, DUALSQL, "dualsql", "rex", worker.tokenizer)
    assert [t.role for t in trajs] == ["linker", "generator"]
    assert [t.result.end_reason for t in trajs] == ["answer", "answer"]
    wrong_generator = rows[3]["extra_fields"]
    wrong_generator = getattr(wrong_generator, "data", wrong_generator)[REWARD_KEY]
    assert wrong_generator["components"]["exec"] == 0.0 and rewards[1].components["exec"] == 1.0
    for i, r in enumerate(rows):
        ef = r["extra_fields"]
        ef = getattr(ef, "data", ef)
        assert ef[L.EPISODE_KEY]["role"] == trajs[i % 2].role
        if i < 3:  # session 0 replays the reference script; session 1's linker too
            assert ef[REWARD_KEY]["total"] == pytest.approx(rewards[i % 2].total)  # each output keeps its own
        assert r["response_mask"].tolist() == r["loss_mask"].tolist()  # veRL's loss mask follows ours
    assert rewards[0].total != pytest.approx(rewards[1].total)  # linker and generator rewards differ here

    # their advantages through the real trainer: tests/training/engines/verl/fit/test_dualsql.py
    # veRL's built-in step would have used the last output per session for both rows:
    rm = [float(r["rm_scores"].sum()) for r in rows]
    assert rm[0] == pytest.approx(rm[1]) and rm[2] == pytest.approx(rm[3])  # broadcast by veRL's worker


def test_the_agent_loops_error_turn_mask_is_the_local_engines(
    model_dir: Path, db_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DualSQL with no ``guardrails`` key (the agent's default, on): veRL's own v1 worker runs
    the project's agent loop; the loss mask of every row it stores equals the mask the local
    engine trains the same episode with (the shared assembly, ``training.algorithm.assembly``).
    Session 1's generator makes a valid tool call, then a turn without ``<think>``: a guardrail
    failure, cut there, so only that turn keeps loss."""
    from agents import training_spec
    from agents.types import ERROR_TURN_MASK
    from training.algorithm.assembly import episode_masks

    captured = capture_tq(monkeypatch)
    example = example_for(db_file, JOIN_SQL)
    cut = {**DUALSQL, "generator": [DUALSQL["generator"][0], f"{JOIN_SQL}"]}  # no <think>: guardrail 1
    cfg = verl_config(model_dir, "dualsql", "dualsql")  # no guardrails option: the agent's default
    worker = v1_worker(cfg, FakeServer(DUALSQL, per_session={"qid7-1": cut}))
    rows = v1_rows(worker, captured, example, sessions=2)

    settings = C.WorkerSettings.from_config(cfg).advantage
    error_turns = training_spec("dualsql").needs(ERROR_TURN_MASK)
    expected = []
    for script in (DUALSQL, cut):
        trajs, _ = reference("dualsql", {}, example, script, "dualsql", "rex", worker.tokenizer)
        masks, _ = episode_masks(trajs, ["full"], settings, error_turns)
        expected.extend(masks["full"])
    assert [t.result.end_reason for t in trajs] == ["answer", "format_cutoff"]
    assert [r["response_mask"].tolist() for r in rows] == [[int(v) for v in m] for m in expected]
    assert [r["loss_mask"].tolist() for r in rows] == [r["response_mask"].tolist() for r in rows]
    generator = rows[3]["response_mask"].tolist()
    assert 0 < sum(generator) < sum(trajs[1].response_mask)  # the tool-call turn carries no loss, the bad turn does


def test_generate_adapter_maps_sampling_and_finish_reason() -> None:
    from verl.workers.rollout.replica import TokenOutput

    class Server:
        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            self.seen = (request_id, prompt_ids, dict(sampling_params))
            n = sampling_params["max_tokens"]
            return TokenOutput(token_ids=list(range(n)), log_probs=[-0.5] * n, stop_reason="completed")

    server = Server()
    agenerate = L.make_agenerate(server, "uid9-3")
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=5, stop=("</tool_call>",))
    out = asyncio.run(agenerate([1, 2, 3], params))
    assert out.token_ids == [0, 1, 2, 3, 4] and out.logprobs == [-0.5] * 5
    assert out.finish_reason == "length"  # the per-turn cap was reached
    request_id, prompt_ids, sent = server.seen
    assert request_id == "uid9-3" and prompt_ids == [1, 2, 3]
    assert sent == {
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,
        "logprobs": True,
        "repetition_penalty": 1.0,
        "max_tokens": 5,
        "stop": ["</tool_call>"],
    }


def test_weight_versions_reach_every_output() -> None:
    """veRL's LLMServerClient returns ``min_global_steps`` / ``max_global_steps`` in
    ``extra_fields``; the outputs must carry them (``_compute_metrics`` casts them to int)."""
    from verl.workers.rollout.replica import TokenOutput

    class Server:
        def __init__(self) -> None:
            self.version = 3

        async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
            self.version += 1
            return TokenOutput(
                token_ids=[5, 6],
                log_probs=[-0.1, -0.2],
                stop_reason="completed",
                extra_fields={
                    "global_steps": self.version,
                    "min_global_steps": self.version,
                    "max_global_steps": self.version,
                },
            )

    versions = L.WeightVersions()
    agenerate = L.make_agenerate(Server(), "u-0", versions)
    for _ in range(2):
        asyncio.run(agenerate([1, 2], SamplingParams(max_new_tokens=4)))
    assert versions.fields(fallback=0) == {"min_global_steps": 4, "max_global_steps": 5}
    assert L.WeightVersions().fields(fallback=2) == {"min_global_steps": 2, "max_global_steps": 2}


def test_a_dropped_episode_becomes_a_row_that_trains_nothing(db_file: Path) -> None:
    from tools import get_database

    example = example_for(db_file, COUNT_SQL)
    limits = RolloutLimits(max_response_tokens=64, max_context_tokens=4096, max_prompt_tokens=16)
    (traj,) = run_episodes(
        make_agent("think2sql"),
        [(example, get_database(example.db_path), 0)],
        TOK,
        lambda prompts, params: [],
        SamplingParams(max_new_tokens=8),
        limits,
    )
    assert "prompt_too_long" in traj.result.flags
    out = L.dropped_output(traj, ["score", "exec", "reward_error"], 16, EOS)
    assert out.response_mask == [0] and out.response_ids == [EOS] and len(out.prompt_ids) == 16
    assert out.extra_fields[L.EPISODE_KEY]["dropped"] is True
    assert out.extra_fields["reward_extra_info"] == {"score": 0.0, "exec": 0.0, "reward_error": 0.0}
