"""veRL's real ``fit()`` for ReToolSQL: the KL schedule, the papers' dynamic sampling, the few-shot pool.

The recipe's schedule (beta 0.005 -> 0.001 at step 40 -> 0 at step 80) compressed to steps
1 and 2 of a three-step run: the trainer must send the actor two new loss functions and
drop the reference pass for the last step. Dynamic sampling is the recipe's (on) with
the papers' rule: B x K = 2 x 2 questions drawn once per step, one of the four has spread
(its gold SQL is the scripted answer; the others' is not, so both sessions score 0), so
one slot is kept and one is zero-masked every step. ReToolSQL's BM25 demonstrations come
from the training file: questions live on two databases, so each prompt shows a question
of the other one.

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
    train, val = H.examples(root, RECIPE, n_train=4, n_val=1)
    unreachable = "SELECT COUNT(*) FROM schools"  # the script answers with the Fresno filter: exec 0
    train = [train[0]] + [dataclasses.replace(ex, gold_sql=unreachable) for ex in train[1:]]
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    base = H.with_changes(base, {"trainer.rollout_data_dir": str(root / "rollouts")})
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
    for data in steps.values():
        assert data["training/dynamic_sampling/drawn_groups"] == 4  # B x K, drawn once
        assert data["training/dynamic_sampling/kept_groups"] == 1
        assert data["training/dynamic_sampling/zero_masked_groups"] == 1
        assert data["actor/rows_per_update"] == 4  # B groups x G rows: the batch keeps its shape
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5
    assert all(u["optimizer_steps"] == 1 for u in run["trainer"].actor_rollout_wg.updates)


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
