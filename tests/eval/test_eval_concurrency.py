"""``eval.run`` against an OpenAI-compatible endpoint with concurrent requests: a real HTTP
server on loopback answering after a delay, the real agents and tools, real SQLite.

Concurrency N overlaps requests (the server sees more than one, never more than N, in
flight), the records equal the sequential run's (``model.concurrency=1``), and failed
requests (HTTP errors, timeouts) are counted, never raised."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from agents import make_agent
from agents.types import Example
from eval.data import load_examples
from tests.helpers.fake_openai import FakeOpenAI, Reply, choice, completion
from tests.helpers.schools import QUESTIONS, make_db, school_rows, turn_text
from tests.helpers.tiny_model import tiny_tokenizer
from tests.training.generation.test_sources import client
from tests.training.supervised.test_demonstrations import LIMITS
from tools import get_database
from training.config import compose_tree
from training.generation import questions_per_batch, run_concurrent_episodes
from training.rollout import SamplingParams

REPO = Path(__file__).resolve().parents[2]
DELAY_S = 0.3  # long enough that concurrent requests overlap on a loaded machine


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("jsonl")
    make_db(root / "schools.sqlite")
    rows = school_rows()
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    tiny_tokenizer().save_pretrained(out)
    return out


def scripted_server(recipe: str, examples: list[Example], fail: str | None = None) -> Any:
    """Answers that depend only on the request (never on timing): one choice in three of a
    first turn is bad, by a hash of the question and the choice index; later turns keep the plan
    the conversation shows. Questions containing ``fail`` get HTTP 400."""

    def reply(body: dict) -> Reply:
        messages = body["messages"]
        ex = next(e for e in examples if any(e.question in str(m["content"]) for m in messages))
        if fail and fail in ex.question:
            return Reply(400, {"error": "bad request"}, delay_s=DELAY_S)
        turn = sum(m["role"] == "assistant" for m in messages)
        chosen = [m["content"] for m in messages if m["role"] == "assistant"]
        texts = []
        for index in range(body.get("n", 1)):
            good = ("plan A" in chosen[0]) if chosen else (zlib.crc32(ex.question.encode()) + index) % 3 != 0
            text = turn_text(recipe, "generator", turn, ex, good)
            for stop in body.get("stop", []):  # servers strip the stop string they matched
                text = text[: -len(stop)] if text.endswith(stop) else text
            texts.append(choice(text, index))
        return Reply(body=completion(*texts), delay_s=DELAY_S)

    return reply


def eval_overrides(
    recipe: str, data_root: Path, tokenizer_dir: Path, out: Path, base_url: str, *extra: str
) -> list[str]:
    return [
        f"recipe={recipe}",
        f"model.path={tokenizer_dir}",
        f"model.base_url={base_url}",
        "model.name=served",
        "data=jsonl",
        f"data.root={data_root}",
        "engine.device=cpu",
        "rollout.max_new_tokens=200",
        f"eval.out_dir={out}",
        *extra,
    ]


def run_eval(recipe: str, data_root: Path, tokenizer_dir: Path, out: Path, base_url: str, *extra: str) -> dict:
    from eval.run import run

    overrides = eval_overrides(recipe, data_root, tokenizer_dir, out, base_url, *extra)
    raw = compose_tree("eval", overrides)
    return run(raw, {o.split("=", 1)[0] for o in overrides}, lambda _: None)


def records(out: Path) -> list[dict]:
    rows = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return sorted(rows, key=lambda r: r["id"])


@pytest.mark.parametrize("recipe", ["retoolsql", "think2sql"])
def test_concurrent_requests_overlap_and_give_the_sequential_results(
    recipe: str, data_root: Path, tokenizer_dir: Path, tmp_path: Path
) -> None:
    examples = load_examples("jsonl", data_root, "dev")
    sc = ["eval.mode=sc", "eval.samples=3", "eval.temperature=1.0"]
    results = {}
    for n in (1, 4):
        with FakeOpenAI(scripted_server(recipe, examples)) as server:
            summary = run_eval(
                recipe, data_root, tokenizer_dir, tmp_path / f"c{n}", server.base_url, f"model.concurrency={n}", *sc
            )
        results[n] = (summary, records(tmp_path / f"c{n}"), server.max_in_flight, len(server.requests))
    (seq, seq_records, seq_peak, seq_requests), (par, par_records, par_peak, par_requests) = results[1], results[4]
    assert seq_peak == 1 and 1 < par_peak <= 4
    assert seq_records == par_records and seq_requests == par_requests
    assert (seq["n"], seq["ex"], seq["endpoint"]["requests"]) == (par["n"], par["ex"], par["endpoint"]["requests"])
    assert seq["n"] == len(QUESTIONS) and par["endpoint"]["failed_samples"] == 0 and par["endpoint"]["concurrency"] == 4
    outcomes = [o for r in seq_records for o in r["sample_outcomes"]]  # right and wrong answers mixed,
    assert "match" in outcomes and set(outcomes) != {"match"}  # so the equality says something
    assert all(len(r["samples"]) == 3 for r in par_records)


def test_failed_requests_are_counted_not_raised(data_root: Path, tokenizer_dir: Path, tmp_path: Path) -> None:
    examples = load_examples("jsonl", data_root, "dev")
    with FakeOpenAI(scripted_server("think2sql", examples, fail="Fresno High")) as server:
        summary = run_eval(
            "think2sql", data_root, tokenizer_dir, tmp_path / "out", server.base_url, "model.concurrency=8"
        )
    assert summary["n"] == len(QUESTIONS) and summary["endpoint"]["failed_samples"] == 1
    assert summary["endpoint"]["failed"] == 1
    by_id = {r["id"]: r for r in records(tmp_path / "out")}
    assert by_id["q2"]["sql"] is None and by_id["q2"]["outcome"] == "pred_error"  # q2 asks about Fresno High
    assert all(by_id[q]["ex"] == 1 for q in ("q0", "q1", "q3"))


@pytest.mark.slow
def test_the_command_line_scores_an_endpoint_as_run_does(data_root: Path, tokenizer_dir: Path, tmp_path: Path) -> None:
    """``python -m eval.run model.base_url=...`` (the README's command) in a subprocess
    reaches the endpoint evaluation and writes the records ``run`` writes in-process."""
    examples = load_examples("jsonl", data_root, "dev")
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    with FakeOpenAI(scripted_server("think2sql", examples)) as server:
        args = eval_overrides("think2sql", data_root, tokenizer_dir, tmp_path / "cli", server.base_url)
        proc = subprocess.run(
            [sys.executable, "-m", "eval.run", *args],
            check=False,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        run_eval("think2sql", data_root, tokenizer_dir, tmp_path / "in_process", server.base_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"[eval] scoring the endpoint {server.base_url}" in proc.stdout
    assert len(records(tmp_path / "cli")) == len(QUESTIONS)
    assert records(tmp_path / "cli") == records(tmp_path / "in_process")


def test_timeouts_and_server_errors_drop_only_their_episodes(data_root: Path) -> None:
    examples = load_examples("jsonl", data_root, "dev")
    good = scripted_server("think2sql", examples)

    def reply(body: dict) -> Reply:
        text = str(body["messages"])
        if examples[0].question in text:
            return Reply(body=completion(choice("late")), delay_s=1.0)  # past the client's timeout
        if examples[1].question in text:
            return Reply(503, {"error": "overloaded"})
        return good(body)

    agent = make_agent("think2sql")
    requests = [(ex, get_database(ex.db_path), 0) for ex in examples]
    params = SamplingParams(temperature=0.0, max_new_tokens=200)
    with FakeOpenAI(reply) as server:
        source = client(server, retries=1, timeout_s=0.7, concurrency=4)
        batch = run_concurrent_episodes(agent, requests, tiny_tokenizer(), source, params, LIMITS, concurrency=4)
    assert batch.failed == [("q0", 0), ("q1", 0)]
    assert sorted(t.example_id for t in batch.trajectories) == ["q2", "q3"]
    assert source.stats["failed"] == 2 and source.stats["retries"] == 2
    assert server.max_in_flight <= 4


def test_batches_hold_enough_episodes_to_keep_n_requests_in_flight() -> None:
    assert questions_per_batch(8, 1, 1) == 8
    assert questions_per_batch(8, 32, 1) == 128 and questions_per_batch(8, 32, 16) == 8
    assert questions_per_batch(8, 64, 16) == 16
    with pytest.raises(Exception, match="concurrency=0"):
        run_concurrent_episodes(None, [], tiny_tokenizer(), None, None, None, concurrency=0)
