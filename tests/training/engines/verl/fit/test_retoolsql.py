"""veRL's real ``fit()`` for ReToolSQL: the KL schedule, the papers' dynamic sampling, the few-shot pool.

The recipe's schedule (beta 0.005 -> 0.001 at step 40 -> 0 at step 80) compressed to steps
1 and 2 of a three-step run: the trainer must send the actor two new loss functions and
drop the reference pass for the last step. Dynamic sampling is the recipe's (on) with
the papers' rule and the backup pool (``return_unkept: varying``): B x K = 2 x 2 questions
drawn once per step from eight, in file order (``data.shuffle=false``, so the draws are
known). t0, t1 and t2 have spread (their gold SQL is the scripted answer; the others' is
not, so both sessions score 0). Step 1 draws t0-t3, keeps t0 and t1 and hands t2, which
varied beyond the B kept, back to the pool; step 2 draws t2 first, then t4-t6, keeps t2
and zero-masks t4 (without the pool it would draw t4-t7 and keep nothing); step 3 draws
t7, t0, t1, t2 and keeps t0 and t1. ReToolSQL's BM25 demonstrations come from the training
file: questions live on two databases, so each prompt shows a question of the other one.

The trainer runs veRL's own loop with only the GPU pieces replaced; the seam (a
``_setup`` override) and the doubles are described in ``harness.py``,
``fsdp_double.py`` and ``vllm_double.py``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

RECIPE = "retoolsql"
OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "algorithm.dynamic_sampling.oversample=2",
    "algorithm.kl_schedule=[[0,0.005],[1,0.001],[2,0.0]]",
    "trainer.total_steps=3",
    "trainer.save_every=100",
    "trainer.val_every=0",
    "trainer.eval_before_after=false",
    "agent.max_turns=2",
    "agent.num_few_shot=1",
    "+agent.schema_format=compact",
    "rollout.max_prompt_tokens=3072",
    "rollout.max_response_tokens=1024",
    "rollout.max_new_tokens=128",
    "rollout.observation_max_tokens=128",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "logger=[]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fit_retoolsql")
    train, val = H.examples(root, RECIPE, n_train=8, n_val=1)
    unreachable = "SELECT COUNT(*) FROM schools"  # the script answers with the Fresno filter: exec 0
    train = train[:3] + [dataclasses.replace(ex, gold_sql=unreachable) for ex in train[3:]]
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    base = H.with_changes(base, {"trainer.rollout_data_dir": str(root / "rollouts"), "data.shuffle": False})
    session = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "sample"})
    try:
        seen: dict[str, Any] = {}
        trainer = H.run_fit(session, base, before_fit=lambda t: seen.update(w=t.actor_rollout_wg.state_dict()))
        yield {"trainer": trainer, "config": base, "root": root, "train": train, **seen}
    finally:
        H.stop_session()


def test_kl_schedule_changes_reach_the_actor(run: dict[str, Any]) -> None:
    trainer = run["trainer"]
    sent = trainer.actor_rollout_wg.loss_fns[1:]  # [0] is the one the worker installs at init
    assert [fn.keywords["config"].kl_loss_coef for fn in sent] == [0.001, 0.0]
    assert [fn.keywords["config"].use_kl_loss for fn in sent] == [True, False]
    assert trainer.use_reference_policy is False  # beta is 0 for good: no reference pass
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert sorted(steps) == [1, 2, 3]
    assert [steps[s].get("actor/kl_coef") for s in (1, 2, 3)] == [0.005, 0.001, None]
    assert "timing_s/ref" in steps[2] and "timing_s/ref" not in steps[3]
    assert weights_changed(run["w"], trainer.actor_rollout_wg.state_dict()) > 0


def test_one_draw_keeps_informative_groups_and_zero_masks_the_rest(run: dict[str, Any]) -> None:
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert sorted(steps) == [1, 2, 3]
    for data in steps.values():
        assert data["training/dynamic_sampling/drawn_groups"] == 4  # B x K, drawn once
        assert data["actor/rows_per_update"] == 4  # B groups x G rows: the batch keeps its shape
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5
    assert [steps[s]["training/dynamic_sampling/kept_groups"] for s in (1, 2, 3)] == [2, 1, 2]
    assert [steps[s]["training/dynamic_sampling/zero_masked_groups"] for s in (1, 2, 3)] == [0, 1, 0]
    assert all(u["optimizer_steps"] == 1 for u in run["trainer"].actor_rollout_wg.updates)


def step_rows(run: dict[str, Any]) -> dict[int, dict[str, set[str]]]:
    """step -> the example ids of the batch's rows that trained (an advantage) and of those
    zero-masked (none), from samples.jsonl (every row of these small steps)."""
    out: dict[int, dict[str, set[str]]] = {}
    for line in (Path(run["config"].sqlagent.run_dir) / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        part = "trained" if row["advantage"] is not None else "zero_masked"
        out.setdefault(row["step"], {"trained": set(), "zero_masked": set()})[part].add(row["example_id"])
    return out


def test_surplus_groups_go_back_to_the_pool_and_train_at_the_next_step(run: dict[str, Any]) -> None:
    """ReToolSQL §3.5's backup pool, as the local engine keeps it (see the module doc)."""
    rows = step_rows(run)
    assert rows[1] == {"trained": {"t0", "t1"}, "zero_masked": set()}  # t2 varied too: the surplus
    assert rows[2] == {"trained": {"t2"}, "zero_masked": {"t4"}}  # t2 drawn first, then t4-t6 (none varies)
    assert rows[3] == {"trained": {"t0", "t1"}, "zero_masked": set()}  # t7, then the next epoch's t0-t2
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert [steps[s]["training/dynamic_sampling/unkept_varying_groups"] for s in (1, 2, 3)] == [1, 0, 1]


def test_few_shot_pool_comes_from_the_training_file(run: dict[str, Any]) -> None:
    inputs = [
        json.loads(line)["input"] for path in sorted((run["root"] / "rollouts").glob("*.jsonl")) for line in path.open()
    ]
    assert inputs
    by_db = {ex.question: ex.db_id for ex in run["train"]}
    for text in inputs:
        own = next(q for q in by_db if q in text.split("Question:")[-1])  # the target question comes last
        shots = [q for q in by_db if q != own and q in text]
        assert shots, "no demonstration in the prompt"
        assert all(by_db[q] != by_db[own] for q in shots)  # never from the target's database
