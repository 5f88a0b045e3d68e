"""The supervised stages: leak filter on planted leaks, the keyed store, each design's chain
on the tiny model with a loopback endpoint as teacher, resume after a real kill, the veRL
SFT dataset against the rollout driver, and eval.run scoring an endpoint."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agents.designs import get_design
from agents.types import Example
from tests.helpers.designs import project_designs
from tests.helpers.fake_openai import FakeOpenAI, Reply
from tests.helpers.local_trainer import config, tiny_inputs
from tests.helpers.schools import ScriptedPolicy
from tests.training.generation.test_sources import teacher_reply
from training.engines.local.trainer import LocalTrainer
from training.supervised import filters as flt
from training.supervised.chain import Chain, run_stage
from training.supervised.store import KeyedJsonl

REPO = Path(__file__).resolve().parents[3]
GOLD = "SELECT name FROM schools ORDER BY enrollment DESC LIMIT 1"


# ----------------------------------------------------------------------------- filters and store


@pytest.mark.parametrize(
    "turns, reason",
    [
        (
            [
                "<think>The answer is select name from schools order by enrollment desc limit 1</think>"
                "<answer>```sql\n" + GOLD + "\n```</answer>"
            ],
            "gold_sql",
        ),
        (
            [
                "<think>Try SELECT s.name FROM schools AS s ORDER BY s.enrollment DESC LIMIT 1 here.</think>"
                "<answer>```sql\n" + GOLD + "\n```</answer>"
            ],
            "close_variant",
        ),
        (
            ["<think>Use   SELECT name\nFROM schools ORDER BY enrollment DESC LIMIT 2</think><answer>x</answer>"],
            "close_variant",
        ),
        (
            [
                "<scratch_pad>As the reference SQL says, sort by enrollment.</scratch_pad><tool_call>{}</tool_call>",
                "<final_answer>```sql\nSELECT 1\n```</final_answer>",
            ],
            "guidance",
        ),
        (
            [
                '<scratch_pad>Sort schools by enrollment, keep the first.</scratch_pad><tool_call>{"sql": "'
                + GOLD
                + '"}</tool_call>',
                "<scratch_pad>It works.</scratch_pad><final_answer>```sql\n" + GOLD + "\n```</final_answer>",
            ],
            None,
        ),
        (["<think>largest enrollment first</think>\n```sql\n" + GOLD + "\n```"], None),
    ],
)
def test_leak_filter_on_planted_leaks(turns: list[str], reason: str | None) -> None:
    assert flt.leak_reason(turns, GOLD) == reason


def test_keyed_jsonl_survives_a_torn_line_and_never_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    store = KeyedJsonl(path, lambda r: r["k"])
    assert store.append([{"k": 1}, {"k": 2}, {"k": 1}]) == 2
    with open(path, "a") as f:
        f.write('{"k": 3, "cut')  # a kill in the middle of a line
    again = KeyedJsonl(path, lambda r: r["k"])
    assert len(again) == 2 and again.append([{"k": 2}, {"k": 3}]) == 1
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]
    assert [r["k"] for r in rows] == [1, 2, 3]


# ----------------------------------------------------------------------------- the chains


def chain_config(recipe: str, run_dir: Path, base_url: str, *extra: str) -> Any:
    teacher = f"supervised.teachers=[{{base_url:'{base_url}',model:fake,backoff_s:0}}]"
    return config(
        recipe,
        run_dir,
        "stage=sft_rl",
        teacher,
        "supervised.samples=2",
        "supervised.questions=2",
        "supervised.teacher_samples=1",
        "supervised.epochs=1",
        "supervised.batch_size=2",
        "supervised.lr=1e-3",
        "supervised.rl_filter_samples=2",
        "supervised.rl_filter_pass=2",
        "trainer.eval_before_after=true",
        "rollout.max_new_tokens=200",
        "algorithm.group_size=2",
        "algorithm.batch_size=1",
        "algorithm.dynamic_sampling.enable=false",
        *extra,
    )


def wrong_policy(recipe: str, examples: list[Example]) -> ScriptedPolicy:
    """The policy's generate: the design's protocol with a wrong SQL every time (instant and
    deterministic, so every question is all-wrong); SFT and RL update the tiny model."""
    return ScriptedPolicy(recipe, examples, always_good=lambda ex, k: False)


def flaky(reply: Any) -> Any:
    """The teacher's first two answers are a malformed body and an HTTP 503 (both retried)."""
    calls = iter([Reply(200, "{not json"), Reply(503, {"error": "overloaded"})])
    return lambda body: next(calls, None) or reply(body)


def leaky(reply: Any, examples: list[Example]) -> Any:
    """The teacher writes the gold SQL into its reasoning on the second question."""

    def wrapped(body: dict) -> Reply:
        answer = reply(body)
        if examples[1].question in json.dumps(body["messages"]):
            for c in answer.body["choices"]:
                leak = "I will write " + examples[1].gold_sql
                c["message"]["content"] = c["message"]["content"].replace("plan A", leak)
        return answer

    return wrapped


@pytest.mark.slow
@pytest.mark.parametrize("recipe", project_designs())
def test_each_design_chain_on_the_tiny_model(recipe: str, tmp_path: Path, examples: list[Example]) -> None:
    """Mine (or annotate) -> filters -> dataset -> SFT -> (RL filter) -> RL: two SFT questions
    (``supervised_examples``, as ``supervised.data`` gives them) and two other RL questions."""
    two, rl = examples[:2], examples[2:]

    def run(*extra: str) -> tuple[dict, list[str]]:
        cfg = chain_config(recipe, tmp_path, server.base_url, *extra)
        inputs = tiny_inputs(rl, two, wrong_policy(recipe, examples))
        inputs.supervised_examples = two
        log: list[str] = []
        return run_stage(cfg, inputs, log.append), log

    with FakeOpenAI(flaky(leaky(teacher_reply(recipe, two), two))) as server:
        summary, log = run()
        asked = len(server.requests)
        _, again = run("resume=true")  # a second run reuses every finished stage and redoes nothing
        assert len(server.requests) == asked
    assert any("reusing the finished SFT" in line for line in again)
    root = tmp_path / "supervised"
    stats = json.loads((root / "teachers" / "done.json").read_text())["result"]["teachers"]["teacher0"]
    assert stats["retries"] == 2 and stats["failed"] == 0  # the malformed body and the 503 were retried
    card = json.loads((root / "dataset" / "card.json").read_text())
    rows = [json.loads(x) for x in (root / "dataset" / "train.jsonl").read_text().splitlines()]
    assert summary["rows"] == card["rows"] == len(rows), summary
    mined = get_design(recipe).supervised_chain == "mine"
    if mined:  # the policy solves nothing: both questions are all-wrong and go to the teacher
        assert summary["pass_at_k"]["bands"]["all_wrong"] == 2
        assert summary["dropped"].get("leak_gold_sql", 0) >= 1  # the planted leak on the second question
        assert {r["question_id"] for r in rows} == {"q0"}
    else:  # unprivileged: no leak filter, both questions kept
        assert {r["question_id"] for r in rows} == {"q0", "q1"}
    for row in rows:  # the design's turn format with observations in place
        assert row["messages"][0]["role"] == "system" and any(m["role"] == "assistant" for m in row["messages"])
        assert row["source"].startswith("teacher0-")
    assert summary["sft"]["steps"] >= 1 and (root / "sft" / "model.safetensors").exists()
    assert summary["rl"]["steps"] == 1 and summary["rl"]["questions"] == 2  # RL's own questions
    assert summary["ex_before"] is not None and summary["ex_after_rl"] is not None
    if recipe == "trustsql":  # the filter sampled the RL questions, not the SFT ones
        assert any("[rl filter] 2 of 2 questions" in line for line in log), log
        sampled = (root / "rl_filter" / "questions.jsonl").read_text().splitlines()
        assert sorted(json.loads(line)["question_id"] for line in sampled) == ["q2", "q3"]


def test_zero_surviving_traces_are_reported_as_zero(tmp_path: Path, examples: list[Example]) -> None:
    two = examples[:2]
    with FakeOpenAI(lambda body: Reply(503, "down")) as server:
        cfg = chain_config(
            "think2sql",
            tmp_path,
            server.base_url,
            "stage=sft",
            "supervised.passk_after=true",
            f"supervised.teachers=[{{base_url:'{server.base_url}',model:fake,retries:0}}]",
        )
        inputs = tiny_inputs(two, two, wrong_policy("think2sql", two))
        log: list[str] = []
        summary = run_stage(cfg, inputs, log.append)
    assert summary["rows"] == 0 and summary["dropped"] == {"request_failed": 2}
    assert summary["sft"]["steps"] == 0 and any("0 conversations to train on" in line for line in log)
    # an annotate chain mines pass@k before SFT only for passk_after: the wrong policy solves nothing
    assert summary["pass_at_k"]["bands"]["all_wrong"] == 2 and summary["pass_at_k_after_sft"]["pass_at_k"] == 0
    assert summary["hard_gained"] == {"hard_before": 2, "solved_after": 0}


def test_the_rl_filter_samples_the_rl_data_at_the_rl_temperature(tmp_path: Path, examples: list[Example]) -> None:
    """TRUST-SQL (App. A.3): the SFT policy samples each RL question 8 times at RL's temperature
    (0.8) and RL keeps the questions it solves fewer than 6 times; the SFT questions are not sampled."""
    sft_questions, rl_questions = examples[:2], examples[2:]
    solved = {"q2": 6, "q3": 5}  # correct samples of 8
    policy = ScriptedPolicy("trustsql", examples, always_good=lambda ex, k: k < solved.get(ex.id, 0))
    temperatures: list[float] = []

    def generate(prompts: Any, params: Any) -> Any:
        temperatures.append(params.temperature)
        return policy(prompts, params)

    cfg = config("trustsql", tmp_path, "stage=sft_rl")
    assert (cfg.supervised.rl_filter_samples, cfg.supervised.rl_filter_pass, cfg.rollout.temperature) == (8, 6, 0.8)
    assert cfg.supervised.data is not None and cfg.supervised.data["kind"] == "synsql"  # its own SFT dataset
    inputs = tiny_inputs(rl_questions, rl_questions[:1], generate)
    inputs.supervised_examples = sft_questions
    log: list[str] = []
    chain = Chain(LocalTrainer(cfg, inputs, log.append), tmp_path / "supervised", log.append)
    assert [ex.id for ex in chain.questions] == ["q0", "q1"]
    pool = chain.rl_pool({"sft": "the SFT weights"})
    assert [ex.id for ex in pool] == ["q3"]  # 5 of 8 < 6: kept; 6 of 8: too easy
    assert temperatures and set(temperatures) == {0.8}
    records = [
        json.loads(x) for x in (tmp_path / "supervised" / "rl_filter" / "questions.jsonl").read_text().splitlines()
    ]
    assert {r["question_id"]: r["correct"] for r in records} == {"q2": 6, "q3": 5}
    assert any("[rl filter] 1 of 2 questions solved < 6/8 times by the SFT policy (temperature 0.8)" in x for x in log)
    again = config("trustsql", tmp_path / "again", "stage=sft_rl", "supervised.rl_filter_temperature=0.5")
    temperatures.clear()
    Chain(LocalTrainer(again, inputs, log.append), tmp_path / "again", log.append).rl_pool({"sft": "w"})
    assert set(temperatures) == {0.5}


# ----------------------------------------------------------------------------- resume after a kill

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.helpers.local_trainer import tiny_inputs
from tests.helpers.schools import ScriptedPolicy, school_examples
from tests.training.supervised.test_chain import mining_config
from tests.helpers.designs import project_designs
from training.engines.local.trainer import LocalTrainer
from training.supervised.chain import Chain, run_stage

examples = school_examples(Path({db!r}))
policy = ScriptedPolicy("think2sql", examples, always_good=True)
def slow(prompts, params):
    time.sleep({delay})
    return policy(prompts, params)
inputs = tiny_inputs(examples, examples[:1], slow)
run_stage(mining_config({run_dir!r}), inputs, say=lambda line: print(line, flush=True))
"""


def mining_config(run_dir: str) -> Any:
    return config(
        "think2sql",
        Path(run_dir),
        "stage=data",
        "supervised.chain=mine",
        "supervised.samples=3",
        "algorithm.batch_size=1",
        "trainer.eval_before_after=false",
    )


@pytest.mark.slow
def test_a_kill_during_mining_resumes_without_redoing_or_duplicating(tmp_path: Path, examples: list[Example]) -> None:
    run_dir = tmp_path / "run"
    questions = run_dir / "supervised" / "mine" / "questions.jsonl"
    code = CHILD.format(repo=str(REPO), db=examples[0].db_path, delay=1.0, run_dir=str(run_dir))
    env = dict(os.environ, WANDB_MODE="offline")
    child = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and child.poll() is None:
            if questions.exists() and len(questions.read_text().splitlines()) >= 1:
                break
            time.sleep(0.2)
        assert child.poll() is None, child.stdout.read()[-3000:]
        os.killpg(child.pid, signal.SIGKILL)  # mid-mining: at least one question done, others not
    finally:
        child.wait(timeout=30)
    before = questions.read_text().splitlines()
    assert 1 <= len(before) < len(examples)
    resume = CHILD.format(repo=str(REPO), db=examples[0].db_path, delay=0.0, run_dir=str(run_dir))
    proc = subprocess.run(
        [sys.executable, "-c", resume], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert f"{len(before)} of {len(examples)} questions already done" in proc.stdout
    after = questions.read_text().splitlines()
    assert after[: len(before)] == before  # nothing finished was redone
    ids = [json.loads(line)["question_id"] for line in after]
    assert sorted(ids) == [ex.id for ex in examples]
    traces = [json.loads(line) for line in (questions.parent / "traces.jsonl").read_text().splitlines()]
    keys = [(t["question_id"], t["sample"], t["source"]) for t in traces]
    assert len(keys) == len(set(keys)) == 3 * len(examples)
    rows = (run_dir / "supervised" / "dataset" / "train.jsonl").read_text().splitlines()
    # all solved: own correct traces; the scripted samples are identical (deduplicated)
    assert len(rows) == len(examples)


def test_users_bring_their_own_dataset(tmp_path: Path, examples: list[Example]) -> None:
    """Rows with question_id + messages: the assistant turns are replayed, bad ones counted."""
    rows = [
        {
            "question_id": ex.id,
            "messages": [
                {"role": "user", "content": ex.question},
                {
                    "role": "assistant",
                    "content": f"<think>look it up</think>\n<answer>```sql\n{ex.gold_sql}\n```</answer>",
                },
            ],
        }
        for ex in examples[:2]
    ]
    rows.append({"question_id": "q2", "messages": [{"role": "assistant", "content": "no tags at all"}]})
    path = tmp_path / "mine.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = config(
        "think2sql",
        tmp_path / "run",
        "stage=sft",
        f"supervised.dataset={path}",
        "supervised.epochs=1",
        "trainer.eval_before_after=false",
    )
    inputs = tiny_inputs(examples)
    summary = run_stage(cfg, inputs, lambda _: None)
    assert summary["rows"] == 3 and summary["sft"]["episodes"] == 2.0
    assert sum(summary["sft"]["replay_dropped"].values()) == 1
