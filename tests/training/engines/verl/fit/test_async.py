"""veRL's real ``fit()`` under the project's async trainers, for every recipe:
``trainer.mode=colocate_async`` and ``separate_async`` once each, with one agent-loop
manager per recipe (its workers hold the recipe's settings) on the fit tier's shared runtime.

Smallest settings: B = 2 questions, G = 2, three steps, the recipe's defaults for the
async keys (``trainer.staleness=1``, one warm-up batch, token-level IS unless the recipe
has its own correction: DualSQL's sequence-level IS with rejection). Session 0 writes the
design's script, session 1 the same script with a wrong final SQL, so every group has
spread; ReToolSQL also gets a question no answer can match, whose groups dynamic sampling
(``refill=true``, the async modes' rule) evicts and replaces. The server double sleeps
after each token (``TinyServer.set_latency``, a long-tailed per-request factor), so
requests are in flight when an update aborts them and they continue under the new weights;
the first scripted request of each run is held after its first token until an abort cuts
it (``TinyServer.hold_until_cut``), so that happens at the first update in every run, not
only when the latency draw allows.

Checked per run: every step ran and wrote the project's records; no trained rollout is
more than ``trainer.staleness`` versions behind (veRL's metric and the samples' own
version tags); each turn's version tags count its generated tokens; an update cut
requests that then continued with their tokens under a newer version; the IS weights
reached the update (and move away from 1 once a stale rollout trains); the recipe's own
behaviour (DualSQL's one update over linker and generator rows, TRUST-SQL's two tracks,
ReToolSQL's KL schedule and dynamic sampling); the last step's checkpoint holds
TransferQueue's in-flight prompts.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
import ray

from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import SCRIPTS
from tests.training.engines.verl.fit import async_harness as A
from tests.training.engines.verl.fit import harness as H
from training.engines.verl.workers.async_trainers import VersionedAsyncClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

MODES = ("colocate_async", "separate_async")
STALENESS = 1
COMMON = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "trainer.total_steps=3",
    "trainer.save_every=100",
    "trainer.val_every=0",
    "trainer.eval_before_after=false",
    "trainer.rollout_gpus=1",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "logger=[]",
]
RECIPES: dict[str, list[str]] = {
    "think2sql": ["rollout.max_prompt_tokens=640", "rollout.max_response_tokens=256", "rollout.max_new_tokens=48"],
    "trustsql": [
        "agent.max_turns=5",
        "rollout.max_prompt_tokens=1536",
        "rollout.max_response_tokens=1536",
        "rollout.max_new_tokens=96",
        "rollout.observation_max_tokens=128",
    ],
    "retoolsql": [
        "algorithm.dynamic_sampling.oversample=2",
        "algorithm.dynamic_sampling.refill=true",
        "algorithm.kl_schedule=[[0,0.005],[1,0.001],[2,0.0]]",
        "agent.max_turns=2",
        "agent.num_few_shot=1",
        "+agent.schema_format=compact",
        "rollout.max_prompt_tokens=3072",
        "rollout.max_response_tokens=1024",
        "rollout.max_new_tokens=128",
        "rollout.observation_max_tokens=128",
    ],
    "dualsql": [
        "rollout.max_prompt_tokens=3328",
        "rollout.max_response_tokens=768",
        "rollout.max_new_tokens=160",
        "rollout.top_k=0",
    ],
}
WRONG_SQL = "SELECT COUNT(*) FROM schools"  # executes, but not the gold answer
UNREACHABLE = "SELECT COUNT(*) FROM schools WHERE city = 'Nowhere'"  # neither script's answer matches it


def wrong_script(recipe: str) -> dict[str, list[str]]:
    script = SCRIPTS[recipe]
    if recipe == "dualsql":
        gen = script["generator"]
        return {**script, "generator": [*gen[:-1], gen[-1].replace("MAX", "MIN")]}
    return {role: [turn.replace(COUNT_SQL, WRONG_SQL) for turn in turns] for role, turns in script.items()}


@pytest.fixture(scope="module", params=sorted(RECIPES))
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    recipe = request.param
    root = tmp_path_factory.mktemp(f"fit_async_{recipe}")
    train, val = H.examples(root, recipe, n_train=4, n_val=1)
    if recipe == "retoolsql":  # both sessions miss it: no spread, evicted and replaced
        train = train[:3] + [dataclasses.replace(train[3], gold_sql=UNREACHABLE)]
    model = H.tiny_model_dir(root)
    configs = {
        mode: H.verl_config(recipe, root / mode, model, train, val, [*COMMON, *RECIPES[recipe], f"trainer.mode={mode}"])
        for mode in MODES
    }
    session = H.start_session(
        recipe,
        root,
        configs[MODES[0]],
        writers={"0": "script", "1": "wrong"},
        wrong=wrong_script(recipe),
        client_cls=VersionedAsyncClient,
    )
    ray.get(session.servers.server.set_latency.remote(A.TOKEN_SECONDS[recipe], A.LATENCY[1]))
    out: dict[str, Any] = {"recipe": recipe}
    try:
        for mode in MODES:
            seen = len(ray.get(session.servers.server.history.remote()))
            events = len(ray.get(session.servers.server.events_log.remote()))
            ray.get(session.servers.server.hold_until_cut.remote(1))  # the first update cuts one request for sure
            start = time.monotonic()
            trainer = H.run_fit(session, configs[mode], trainer_cls=A.TRAINERS[mode])
            seconds = time.monotonic() - start
            A.drain()
            out[mode] = {
                "trainer": trainer,
                "config": configs[mode],
                "seconds": seconds,
                "calls": ray.get(session.servers.server.history.remote())[seen:],
                "events": ray.get(session.servers.server.events_log.remote())[events:],
            }
            print(f"[fit_async] {recipe} {mode}: fit() {seconds:.1f} s")
        yield out
    finally:
        H.stop_session()


def _run(runs: dict[str, Any], mode: str) -> tuple[Path, dict[int, dict[str, Any]], list[dict[str, Any]]]:
    run_dir = Path(runs[mode]["config"].sqlagent.run_dir)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    return run_dir, H.step_metrics(run_dir), samples


@pytest.mark.parametrize("mode", MODES)
def test_every_step_runs_with_the_projects_records(runs: dict[str, Any], mode: str) -> None:
    run_dir, steps, samples = _run(runs, mode)
    trainer = runs[mode]["trainer"]
    assert trainer.trainer_mode == mode and sorted(steps) == [1, 2, 3]
    train = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in train if r["kind"] == "train"] == [1, 2, 3]
    assert {s["step"] for s in samples} == {1, 2, 3}
    ckpt = Path(runs[mode]["config"].trainer.default_local_dir) / "global_step_3"
    assert (ckpt / "transfer_queue").is_dir()  # the prompts in flight at the save, for a resume
    assert (run_dir / "final" / "config.json").exists()
    group = trainer.actor_rollout_wg
    assert len(group.updates) == 3 and all(u["optimizer_steps"] == 1 for u in group.updates)
    if mode == "separate_async":  # decoupled PPO: pi_old kept on CPU at each step's first mini-batch
        assert group.cpu_calls == [("save", 0)] * 3


@pytest.mark.parametrize("mode", MODES)
def test_no_rollout_trains_beyond_the_staleness_bound(runs: dict[str, Any], mode: str) -> None:
    _, steps, samples = _run(runs, mode)
    for data in steps.values():
        assert data["training/off_policy/trajectory_staleness_worst/max"] <= STALENESS
    for s in samples:
        versions = [v for turn in s["turns"] for _, v in turn["versions"] or []]
        assert all(s["step"] - 1 - v <= STALENESS for v in versions), (s["step"], versions)


@pytest.mark.parametrize("mode", MODES)
def test_each_turn_records_the_versions_that_wrote_it(runs: dict[str, Any], mode: str) -> None:
    _, _, samples = _run(runs, mode)
    checked = 0
    for s in samples:
        if not s["tokens"]:
            continue  # a dropped prompt: no turn ran
        for turn in s["turns"]:
            written = [i for i, (t, p) in enumerate(zip(s["turn"], s["policy"], strict=True)) if t == turn["index"]]
            policy = sum(1 for i in written if s["policy"][i] == "1")
            counted = sum(n for n, _ in turn["versions"])
            assert counted >= policy > 0, (turn, policy)  # the cap may cut the last turn's tokens
            checked += 1
    assert checked > 0


@pytest.mark.parametrize("mode", MODES)
def test_updates_cut_requests_that_continue_under_new_weights(runs: dict[str, Any], mode: str) -> None:
    calls, events = runs[mode]["calls"], runs[mode]["events"]
    cut = [e for e in events if e["event"] == "abort" and e["running"] > 0]
    assert cut, events  # an update found requests in flight (generation overlapped training)
    start = next(i for i, e in enumerate(events) if e["event"] == "update")  # the run's first weights
    first_update_abort = next(e for e in events[start:] if e["event"] == "abort")
    assert first_update_abort["running"] >= 1, events  # the held request, at least
    resumed = [c for c in calls if c["resumed_at"] > 0]
    assert resumed
    by_request: dict[str, list[dict[str, Any]]] = {}
    for c in calls:
        by_request.setdefault(c["request_id"], []).append(c)
    continued = 0
    for c in resumed:
        earlier = [p for p in by_request[c["request_id"]] if p["aborted"] and p is not c]
        assert earlier and any(p["version"] <= c["version"] for p in earlier)
        continued += any(p["version"] < c["version"] for p in earlier)
    assert continued > 0  # a turn written by two weight versions


@pytest.mark.parametrize("mode", MODES)
def test_importance_weights_reach_the_update(runs: dict[str, Any], mode: str) -> None:
    _, steps, _ = _run(runs, mode)
    group = runs[mode]["trainer"].actor_rollout_wg
    assert all(any(k.startswith("rollout_corr/") for k in data) for data in steps.values())
    assert len(group.is_weights) == 3
    weights = [w for update in group.is_weights for row in update for w in row]
    assert weights and all(math.isfinite(w) and 0.0 <= w <= 2.0 + 1e-6 for w in weights)
    if any(data["training/off_policy/trajectory_staleness_worst/max"] >= 1 for data in steps.values()):
        assert max(abs(w - 1.0) for w in weights if w > 0) > 1e-4  # a stale rollout is reweighted


@pytest.mark.parametrize("mode", MODES)
def test_the_recipes_own_behaviour(runs: dict[str, Any], mode: str) -> None:
    recipe, trainer = runs["recipe"], runs[mode]["trainer"]
    _, steps, _ = _run(runs, mode)
    if recipe == "dualsql":
        assert all(u["rows"] == 8 and u["mini_batch_size"] == 8 for u in trainer.actor_rollout_wg.updates)
        for data in steps.values():
            assert data["sqlagent/linker/advantage/full/abs_mean"] == 0.0  # identical linkers
            assert data["sqlagent/generator/advantage/full/abs_mean"] > 0.5
    elif recipe == "trustsql":
        for data in steps.values():
            assert data["sqlagent/agent/advantage/schema/abs_mean"] > 0.0
            assert data["sqlagent/agent/advantage/full/abs_mean"] > 0.0
    elif recipe == "retoolsql":
        sent = trainer.actor_rollout_wg.loss_fns[1:]
        assert [fn.keywords["config"].kl_loss_coef for fn in sent] == [0.001, 0.0]
        assert sum(data.get("training/filter_groups/evicted_samples", 0) for data in steps.values()) > 0
        assert all(data["actor/rows_per_update"] == 4 for data in steps.values())
    else:
        assert all(data["sqlagent/agent/advantage/full/abs_mean"] > 0.0 for data in steps.values())
