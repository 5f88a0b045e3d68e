"""Whole runs of the local engine (``fit``) on CPU with the tiny model: resume after a kill,
finished runs, checkpoints on disk, validation, metrics and samples records, the summary."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import changed, fit_keeping_buffers, trainer
from tests.helpers.tiny_model import tiny_model
from training.engines.local import state as st


@pytest.mark.slow
def test_resume_matches_an_uninterrupted_run(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.total_steps=2", "algorithm.dynamic_sampling.enable=false")
    straight = trainer("think2sql", tmp_path / "a", examples, *extra, seed=5)
    straight.fit()

    interrupted = trainer("think2sql", tmp_path / "b", examples, *extra, seed=5)
    original = interrupted.train_step

    def crash_on_second_step() -> dict[str, Any]:
        if interrupted.step == 1:
            interrupted.rollout(examples[:2], 4, interrupted.agent, interrupted.sampling)  # consumes RNG
            raise KeyboardInterrupt("killed mid-step")
        return original()

    interrupted.train_step = crash_on_second_step  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    assert st.latest_checkpoint(tmp_path / "b").name == "step_000001"

    resumed = trainer("think2sql", tmp_path / "b", examples, *extra, "resume=true", seed=5)
    summary = resumed.fit()
    assert summary["steps"] == 2
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert changed({k: v for k, v in a.items()}, tiny_model(seed=1)) > 0


@pytest.mark.slow
def test_existing_checkpoints_need_resume_or_fresh(tmp_path: Path, examples: list[Example]) -> None:
    trainer("think2sql", tmp_path, examples).fit()
    with pytest.raises(Exception, match="resume=true"):
        trainer("think2sql", tmp_path, examples).fit()
    summary = trainer("think2sql", tmp_path, examples, "fresh=true").fit()
    assert summary["steps"] == 1
    assert (tmp_path / "metrics.jsonl").is_file() and (tmp_path / "final" / "config.json").is_file()


def test_checkpoint_round_trip_restores_rng_and_sampler(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    sampler = st.DataSampler(7, seed=2)
    sampler.take(5)
    torch.manual_seed(11)
    st.save_checkpoint(tmp_path, st.CheckpointMeta(step=3, sampler=sampler.state_dict()), model, opt, sched)
    expected = torch.rand(3)
    torch.manual_seed(99)
    other = tiny_model(seed=4)
    meta = st.load_checkpoint(st.latest_checkpoint(tmp_path), other, opt, sched)
    assert torch.equal(torch.rand(3), expected)
    assert meta.step == 3 and meta.sampler["cursor"] == 5
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True))


def test_validation_and_summary_report_ex_before_and_after(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "trainer.eval_before_after=true",
        "trainer.val_every=1",
        "trainer.total_steps=2",
        always_good=True,
    )
    summary = t.fit()
    assert summary["ex_before"] == 1.0 and summary["ex_after"] == 1.0 and summary["eval_questions"] == 2
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kinds == ["config", "eval_before", "train", "eval_val", "train", "eval_after"]
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2


# ----------------------------------------------------------------------------- finished runs, disk, records


def files_of(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and "wandb" not in p.parts
    }


def records(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's evaluation and training rows (config rows: the validation-and-summary test)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] != "config"]


def test_resuming_a_finished_run_changes_nothing(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    first = trainer("think2sql", tmp_path, examples, *extra).fit()
    before = files_of(tmp_path)
    said: list[str] = []
    again = trainer("think2sql", tmp_path, examples, *extra, "resume=true")
    again.say = said.append
    summary = again.fit()
    assert files_of(tmp_path) == before
    assert summary == first and summary["ex_before"] is not None
    assert any("is finished" in line and "nothing changed" in line for line in said), said


def test_a_finished_run_continues_with_more_steps_and_keeps_its_records(
    tmp_path: Path, examples: list[Example]
) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    first = trainer("think2sql", tmp_path, examples, *extra, always_good=True).fit()
    old = records(tmp_path)
    summary = trainer(
        "think2sql", tmp_path, examples, *extra, "resume=true", "trainer.total_steps=2", always_good=True
    ).fit()
    rows = records(tmp_path)
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("eval_before", 0),
        ("train", 1),
        ("eval_val", 1),
        ("train", 2),
        ("eval_after", 2),
    ]
    assert [r["wall_time"] for r in rows[:3]] == [r["wall_time"] for r in old]  # earlier rows kept as written
    assert summary["steps"] == 2 and summary["ex_before"] == first["ex_before"] == 1.0
    assert summary["ex_after"] == 1.0 and summary["eval_questions"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["ex_before"] == 1.0


def test_a_run_killed_after_its_final_evaluation_reuses_it(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    fit_killed_at(trainer("think2sql", tmp_path, examples, *extra), "_save_final")  # before the summary
    summary = trainer("think2sql", tmp_path, examples, *extra, "resume=true").fit()
    assert [r["kind"] for r in records(tmp_path)] == ["eval_before", "train", "eval_after"]
    assert summary["ex_before"] is not None and summary["ex_after"] is not None


def test_metrics_records_name_times_by_what_they_mean(tmp_path: Path, examples: list[Example]) -> None:
    trainer("think2sql", tmp_path, examples, "trainer.eval_before_after=true").fit()
    rows = records(tmp_path)
    assert rows and all("time" not in r and isinstance(r["wall_time"], float) for r in rows)
    assert all(r["wall_time"] > 1.6e9 for r in rows)  # seconds since the epoch
    evals = [r for r in rows if r["kind"].startswith("eval_")]
    assert evals and all(0 <= r["duration_s"] < 600 for r in evals)
    assert all(r["time/step"] >= r["time/generation"] for r in rows if r["kind"] == "train")


def test_checkpoints_store_weights_once(tmp_path: Path, examples: list[Example]) -> None:
    from safetensors.torch import load_file

    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "trainer.total_steps=3",
        "trainer.keep_checkpoints=2",
        "algorithm.dynamic_sampling.enable=false",
    )
    summary = t.fit()
    steps = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert steps == ["step_000002", "step_000003"]
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["wall_seconds"] > 0 and on_disk["peak_rss_bytes"] > 100 * 1024**2  # torch and a model at least
    last, older = tmp_path / "checkpoints" / "step_000003", tmp_path / "checkpoints" / "step_000002"
    assert (last / "model.safetensors").is_file() and (last / "trainer_state.pt").is_file()
    assert not (older / "trainer_state.pt").exists() and (older / "model.safetensors").is_file()
    assert not list(tmp_path.rglob("model.pt")) and not list(tmp_path.rglob("trainer.pt"))
    final = tmp_path / "final"
    assert os.path.samefile(final / "model.safetensors", last / "model.safetensors")  # one copy on disk
    assert not (final / "trainer_state.pt").exists() and (final / "tokenizer.json").is_file()
    saved = load_file(final / "model.safetensors")
    state = t.model.state_dict()
    assert all(torch.equal(saved[k], state[k]) for k in saved)
    total, parts = st.disk_usage(tmp_path)
    assert abs(summary["disk_bytes"] - total) < 4096 and parts["final"] < 64 * 1024  # links only
    model_bytes = (last / "model.safetensors").stat().st_size
    assert total < 2 * model_bytes + 3 * model_bytes  # weights x2 checkpoints + AdamW state (2x) + small files


def test_the_summary_line_shows_ex_in_percent_and_the_disk_used() -> None:
    from training.engines.local.run_files import summary_text

    summary = {
        "recipe": "trustsql",
        "steps": 2,
        "ex_before": 0.0,
        "ex_warm_start": 0.125,
        "ex_after": 0.375,
        "eval_questions": 8,
        "checkpoint": "c",
        "final_model": "f",
        "metrics": "m",
        "wandb_dir": None,
        "run_dir": "runs/trustsql",
        "disk_bytes": 3 * 1024**3,
    }
    text = summary_text(summary, {"checkpoints": 2 * 1024**3, "warm_start": 1024**3, "run.log": 10})
    assert "EX before 0.0% -> after warm start 12.5% -> after 37.5% on 8 held-out questions" in text
    assert "run directory runs/trustsql: 3.0 GB on disk (checkpoints 2.0 GB, warm_start 1.0 GB)" in text
    assert "this command" not in text  # not measured: no line
    measured = summary_text({**summary, "wall_seconds": 612.4, "peak_rss_bytes": int(3.1 * 1024**3)}, {})
    assert measured.endswith("\n    this command: 612 s wall, peak resident memory 3.1 GB")


def test_samples_records_match_the_update_and_the_metrics_step(tmp_path: Path, examples: list[Example]) -> None:
    """samples.jsonl: the metrics row's step, the question / gold SQL / database, and per
    token the masks the update used (training/runs/samples.py), prompts stored once."""
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false", "trainer.total_steps=2")
    buffers = fit_keeping_buffers(t)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    train_steps = [json.loads(x)["step"] for x in lines if json.loads(x)["kind"] == "train"]
    samples = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == train_steps == [1, 2]
    by_id = {ex.id: ex for ex in examples}
    for s in samples:
        ex = by_id[s["example_id"]]
        assert (s["question"], s["gold_sql"], s["db_id"], s["difficulty"]) == (
            ex.question,
            ex.gold_sql,
            "schools",
            "simple",
        )
        assert s["design"] == "trustsql" and s["engine"] == "local"
        assert s["tables"]["gold"]["columns"] and s["outcome"] in ("match", "mismatch", "pred_error")
    for step, buffer in zip((1, 2), buffers, strict=True):
        rows = [s for s in samples if s["step"] == step]
        assert len(rows) == len(buffer.trajectories) == 8  # samples_per_step 16 > G*B
        for s, traj in zip(rows, buffer.trajectories, strict=True):
            for track in ("full", "schema"):
                assert [float(c == "L") for c in s["why"][track]] == buffer.masks[track][rows.index(s)]
            assert s["policy"] == "".join(str(m) for m in traj.response_mask)
            assert "o" in s["why"]["full"] and "p" in s["why"]["schema"]
    prompts = [json.loads(x) for x in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == len({p["prompt_id"] for p in prompts}) == len({s["prompt_id"] for s in samples})


def test_a_recorded_evaluation_from_other_inputs_is_not_reused(tmp_path: Path, examples: list[Example]) -> None:
    """A run directory reused with other held-out questions (or weights, or settings) must
    not report the old run's EX before as its own."""
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    fit_killed_at(trainer("think2sql", tmp_path, examples, *extra), "train_step")  # after the first evaluation
    again = trainer("think2sql", tmp_path, examples, *extra, "resume=true")
    again.eval_examples = examples[1:2]
    summary = again.fit()
    befores = [r for r in records(tmp_path) if r["kind"] == "eval_before"]
    assert [r["n"] for r in befores] == [2, 1] and befores[0]["inputs"] != befores[1]["inputs"]
    assert summary["eval_questions"] == 1


def fit_killed_at(t: Any, method: str) -> None:
    """``t.fit()`` killed (KeyboardInterrupt) when it reaches ``method``."""

    def killed(*args: Any) -> Any:
        raise KeyboardInterrupt(f"killed at {method}")

    setattr(t, method, killed)
    with pytest.raises(KeyboardInterrupt):
        t.fit()
