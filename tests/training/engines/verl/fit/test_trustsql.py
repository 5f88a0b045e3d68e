"""veRL's real ``fit()`` for TRUST-SQL: the two-track advantage, the inference turn budget
in validation.

Training runs with a 5-turn budget (``agent.max_turns``) and validation with the
agent's inference budget of 15 turns; veRL's own rollout and validation dumps
(``trainer.rollout_data_dir``, ``trainer.validation_data_dir``) hold the prompts each
used. Session 0 writes the scripted five-turn episode, session 1 samples from the
current weights: the schema track and the full track both have spread.

The trainer runs veRL's own loop with only the GPU pieces replaced; the seam (a
``_setup`` override) and the doubles are described in ``harness.py``,
``fsdp_double.py`` and ``vllm_double.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.training.engines.verl.fit import harness as H
from tests.training.engines.verl.fit.fsdp_double import weights_changed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

RECIPE = "trustsql"
OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "trainer.total_steps=3",
    "trainer.save_every=100",
    "trainer.val_every=0",
    "trainer.eval_before_after=true",
    "agent.max_turns=5",
    "rollout.max_prompt_tokens=1536",
    "rollout.max_response_tokens=1536",
    "rollout.max_new_tokens=96",
    "rollout.observation_max_tokens=128",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "logger=[]",
    "trainer.samples_per_step=3",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fit_trustsql")
    train, val = H.examples(root, RECIPE, n_train=2, n_val=1)
    base = H.verl_config(RECIPE, root / "run", H.tiny_model_dir(root), train, val, OVERRIDES)
    base = H.with_changes(
        base,
        {"trainer.rollout_data_dir": str(root / "rollouts"), "trainer.validation_data_dir": str(root / "validation")},
    )
    session = H.start_session(RECIPE, root, base, writers={"0": "script", "1": "sample"})
    try:
        seen: dict[str, Any] = {}
        trainer = H.run_fit(session, base, before_fit=lambda t: seen.update(w=t.actor_rollout_wg.state_dict()))
        yield {"trainer": trainer, "config": base, "root": root, **seen}
    finally:
        H.stop_session()


def test_two_tracks_reach_the_update(run: dict[str, Any]) -> None:
    steps = H.step_metrics(Path(run["config"].sqlagent.run_dir))
    assert sorted(steps) == [1, 2, 3]
    for data in steps.values():
        assert 0.0 < data["sqlagent/schema_track/token_fraction"] < 1.0  # the prefix is part of the response
        assert data["sqlagent/agent/advantage/schema/abs_mean"] > 0.0
        assert data["sqlagent/agent/advantage/full/abs_mean"] > 0.0
        assert abs(data["training/rollout_probs_diff_max"]) < 1e-5
    trainer = run["trainer"]
    assert weights_changed(run["w"], trainer.actor_rollout_wg.state_dict()) > 0


def _samples(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_samples_are_the_local_engines_records_with_the_masks_of_the_update(run: dict[str, Any]) -> None:
    """samples.jsonl through the local engine's record builder: the first
    ``trainer.samples_per_step`` rows of each step (whole groups first), on the steps of
    metrics.jsonl, and per track the masks the worker group trained on."""
    from training.runs.samples import prompt_id, sample_record

    run_dir = Path(run["config"].sqlagent.run_dir)
    samples = _samples(run_dir)
    local = sample_record(
        step=1,
        engine="local",
        design="trustsql",
        example={"id": "x"},
        role="agent",
        group="g",
        sample=0,
        prompt="p",
        tokens=["a"],
        turn_index=[0],
        response_mask=[1],
        loss_masks=None,
        advantages=None,
        reward=0.0,
        components={},
        tracks={},
        reward_error=None,
        outcome=None,
        final_sql=None,
        end_reason="answer",
        turns=[{"index": 0}],
    )
    assert all(set(s) == set(local) and s["engine"] == "verl" for s in samples)
    assert all(set(t) == set(local["turns"][0]) for s in samples for t in s["turns"])
    train_steps = [r["step"] for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r["kind"] == "train"]
    assert [s["step"] for s in samples] == [step for step in train_steps for _ in range(3)]
    for step in train_steps:
        rows = [s for s in samples if s["step"] == step]
        assert rows[0]["group"] == rows[1]["group"] != rows[2]["group"]  # a whole group, then the next one's first
        assert [s["sample"] for s in rows] == [0, 1, 0]  # the session: the rollout's number in its group
        assert all(s["tables"]["gold"]["columns"] and s["outcome"] for s in rows)
    tokenizer, checked = run["trainer"].tokenizer, 0
    # zip(strict=False): the worker may hold batches of steps the samples skip
    for step, batch in zip(train_steps, run["trainer"].actor_rollout_wg.batches, strict=False):
        trained = {
            (prompt_id(p), tuple(tokenizer.batch_decode([[x] for x in r]))): (m, a)
            for p, r, m, a in zip(
                batch["prompts"], batch["responses"], batch["loss_mask"], batch["advantages"], strict=True
            )
        }
        for s in (s for s in samples if s["step"] == step):
            n = len(s["tokens"])
            key = next(k for k in trained if k[0] == s["prompt_id"] and k[1][:n] == tuple(s["tokens"]))
            loss_mask, token_adv = trained[key]
            assert s["advantage"] is not None and set(s["why"]) == {"full", "schema"}
            assert [c == "L" for c in s["why"]["full"]] == [m > 0 for m in loss_mask[:n]]
            assert not any(loss_mask[n:])
            # the schema track is folded into the token advantage: A_full on the loss mask, plus a
            # weighted A_schema on the schema tokens; those tokens are where the two differ
            full = s["advantage"]["full"]
            if abs(s["advantage"]["schema"]) > 1e-6:
                extra = [abs(a - full * (m > 0)) > 1e-6 for a, m in zip(token_adv[:n], loss_mask[:n], strict=True)]
                assert [c == "L" for c in s["why"]["schema"]] == extra
                checked += 1
    assert checked > 0


def test_reward_trust_flags_reach_the_samples_and_the_step_records(run: dict[str, Any]) -> None:
    """The gold query counts (one row): every sample carries ``gold_one_row`` and every
    positive execution reward is suspect."""
    run_dir = Path(run["config"].sqlagent.run_dir)
    assert all(s["trust_flags"] == ["gold_one_row"] for s in _samples(run_dir))
    train = [r for r in map(json.loads, (run_dir / "metrics.jsonl").open()) if r["kind"] == "train"]
    assert train and any(r["reward/exec"] > 0 for r in train)
    for r in train:
        assert r["reward/suspect_positive_rate"] == (1.0 if r["reward/exec"] > 0 else 0.0)
        assert r["reward/unscored_rate"] == 0.0


def test_the_viewer_reads_a_verl_run(run: dict[str, Any], tmp_path: Path) -> None:
    from eval.view import load_rows, write_view

    run_dir = Path(run["config"].sqlagent.run_dir)
    rows, prompts, what = load_rows(run_dir)
    assert len(rows) == len(_samples(run_dir)) and what.startswith("training run")
    assert {r["prompt_id"] for r in rows} <= set(prompts)
    page = write_view(run_dir, tmp_path / "view.html", say=lambda _: None)
    assert page.is_file() and "trustsql" in page.read_text()


def dumped_inputs(folder: Path) -> list[str]:
    return [json.loads(line)["input"] for path in sorted(folder.glob("*.jsonl")) for line in path.open()]


def test_validation_uses_the_inference_turn_budget(run: dict[str, Any]) -> None:
    root = run["root"]
    train_inputs, val_inputs = dumped_inputs(root / "rollouts"), dumped_inputs(root / "validation")
    assert train_inputs and val_inputs
    assert all("You have at most 5 turns." in text for text in train_inputs)
    assert all("You have at most 15 turns." in text for text in val_inputs)
    records = [json.loads(line) for line in (Path(run["config"].sqlagent.run_dir) / "metrics.jsonl").open()]
    finals = [r for r in records if r["kind"] == "eval_after"]
    assert finals and finals[0]["ex"] == 1.0  # the scripted episode finishes within 15 turns
