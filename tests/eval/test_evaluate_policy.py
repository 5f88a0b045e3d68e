"""eval.evaluate in model mode through the rollout driver: self-consistency and pass@k
with a scripted policy, resumption after a kill, the tiny random model, and a multi-turn
agent whose tool calls run on the real database."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eval.data import load_examples
from eval.evaluate import evaluate_policy
from eval.settings import EvalSettings
from tests.eval.conftest import quiet
from tools.errors import ConfigError
from training.generation.hf import hf_generate


def scripted_generate(
    tokenizer: Any, answers: dict[str, list[str]], calls: list[int] | None = None, fail_on_call: int | None = None
) -> Any:
    """A GenerateFn that answers in Think2SQL format: the prompt's question picks the
    script; the k-th copy of the same prompt in a batch gets the k-th answer (= sample k)."""
    from training.rollout import GenerationOutput

    def generate(prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        if calls is not None:
            calls.append(len(prompts))
            if fail_on_call is not None and len(calls) == fail_on_call:
                raise KeyboardInterrupt("simulated kill")
        seen: Counter[str] = Counter()
        out = []
        for ids in prompts:
            text = tokenizer.decode(ids)
            question = next(q for q in answers if f"Question: {q}" in text)
            k = seen[question]
            seen[question] += 1
            answer = answers[question][k % len(answers[question])]
            body = answer if answer.startswith("<") else f"<think>ok</think><answer>```sql\n{answer}\n```</answer>"
            out.append(GenerationOutput(tokenizer.encode(body, add_special_tokens=False) + [tokenizer.eos_token_id]))
        return out

    return generate


def _policy_setup() -> tuple[Any, Any, Any, Any]:
    from agents import make_agent
    from tests.helpers.tiny_model import tiny_tokenizer
    from training.rollout import RolloutLimits, SamplingParams

    return (
        make_agent("think2sql"),
        tiny_tokenizer(),
        SamplingParams(temperature=1.0, max_new_tokens=512),
        RolloutLimits(max_response_tokens=4096, max_context_tokens=16384),
    )


def test_self_consistency_and_pass_at_k_through_the_rollout_driver(bird: Path, tmp_path: Path) -> None:
    agent, tok, sampling, limits = _policy_setup()
    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("10", "11")]
    answers = {
        "How many singers?": ["SELECT 3", "SELECT COUNT(*) FROM singer", "SELECT COUNT(name) FROM singer", "SELEC x"],
        "Singers from Spain?": ["SELEC x", "SELECT name FROM singer WHERE 0", "<think>no answer</think>", "SELEC y"],
    }
    gen = scripted_generate(tok, answers)
    s = evaluate_policy(
        examples,
        agent,
        tok,
        gen,
        sampling,
        limits,
        tmp_path / "sc",
        EvalSettings(mode="sc", samples=4),
        say=quiet,
        progress=False,
    )
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "sc" / "records.jsonl").read_text().splitlines())}
    first, second = records["10"], records["11"]
    assert first["sample_outcomes"] == ["mismatch", "match", "match", "pred_error"]
    assert first["chosen"] == 1 and first["outcome"] == "match" and first["vote"]["clusters"] == [[1, 2], [0]]
    assert first["unique_sql"] == 4 and first["n_correct"] == 2
    assert second["vote"]["consensus"] is False and second["chosen"] == 0 and second["outcome"] == "pred_error"
    assert dict(map(tuple, second["vote"]["dropped"])) == {0: "error", 1: "empty", 2: "no_sql", 3: "error"}
    assert s["sc"] == {"ex": 0.5, "no_consensus": 1, "support": 1.0}
    # pass@k over the two questions: (c=2 of 4) and (c=0 of 4)
    assert s["pass_at_k"]["1"] == pytest.approx((0.5 + 0.0) / 2)
    assert s["pass_at_k"]["2"] == pytest.approx((1 - 1 / 6) / 2)
    assert s["pass_at_k"]["4"] == pytest.approx(0.5)
    assert s["unique_sql"] == pytest.approx((4 + 3) / 2)
    assert s["behaviour"]["turns"] == 1.0 and s["behaviour"]["tool_calls"] == 0.0
    assert s["behaviour"]["policy_tokens"] > 10 and s["behaviour"]["answered"] == pytest.approx(7 / 8)
    # pass@k mode scores sample 0 as the prediction
    s = evaluate_policy(
        examples,
        agent,
        tok,
        gen,
        sampling,
        limits,
        tmp_path / "pk",
        EvalSettings(mode="passk", samples=4),
        say=quiet,
        progress=False,
    )
    assert s["outcomes"]["mismatch"] == 1 and s["outcomes"]["pred_error"] == 1
    assert s["sc"] == {"ex": 0.5, "no_consensus": 1, "support": 1.0}  # the vote is reported alongside
    assert s["pass_at_k"]["4"] == pytest.approx(0.5)


def test_a_killed_run_resumes_from_the_records(bird: Path, tmp_path: Path) -> None:
    agent, tok, sampling, limits = _policy_setup()
    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("10", "11", "12", "13")]
    answers = {
        "How many singers?": ["SELECT COUNT(*) FROM singer"],
        "Singers from Spain?": ["SELECT 1"],
        "Venues by year?": ["SELECT year, venue FROM concert"],
        "Item labels?": ["SELECT label FROM item"],
    }
    settings = EvalSettings(mode="passk", samples=2, batch_size=1)
    calls: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        evaluate_policy(
            examples,
            agent,
            tok,
            scripted_generate(tok, answers, calls, fail_on_call=3),
            sampling,
            limits,
            tmp_path / "out",
            settings,
            say=quiet,
            progress=False,
        )
    lines = (tmp_path / "out" / "records.jsonl").read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == ["10", "11"]
    with open(tmp_path / "out" / "records.jsonl", "a") as f:
        f.write('{"id": "12", "outcome": "mat')  # a write cut short by the kill
    calls.clear()
    said: list[str] = []
    s = evaluate_policy(
        examples,
        agent,
        tok,
        scripted_generate(tok, answers, calls),
        sampling,
        limits,
        tmp_path / "out",
        settings,
        say=said.append,
        progress=False,
    )
    assert calls == [2, 2]  # only questions 12 and 13 were generated again (2 samples each)
    assert any("2 of 4 questions already scored" in line for line in said)
    assert s["n"] == 4 and (s["outcomes"]["match"], s["outcomes"]["mismatch"]) == (3, 1)
    ids = [json.loads(x)["id"] for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert sorted(ids) == ["10", "11", "12", "13"] and len(ids) == 4
    # other settings never mix into these records
    with pytest.raises(ConfigError, match=r"samples: 2 -> 3.*eval.fresh=true"):
        evaluate_policy(
            examples,
            agent,
            tok,
            scripted_generate(tok, answers),
            sampling,
            limits,
            tmp_path / "out",
            EvalSettings(mode="passk", samples=3),
            say=quiet,
            progress=False,
        )
    calls.clear()
    evaluate_policy(
        examples,
        agent,
        tok,
        scripted_generate(tok, answers, calls),
        sampling,
        limits,
        tmp_path / "out",
        EvalSettings(mode="passk", samples=3, fresh=True, batch_size=4),
        say=quiet,
        progress=False,
    )
    assert calls == [12]


def test_model_mode_with_the_tiny_random_model(bird: Path, tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_model

    agent, tok, _, limits = _policy_setup()
    from training.rollout import SamplingParams

    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("10", "13")]
    gen = hf_generate(tiny_model(), tok)
    s = evaluate_policy(
        examples,
        agent,
        tok,
        gen,
        SamplingParams(temperature=0.0, max_new_tokens=6),
        limits,
        tmp_path / "out",
        say=quiet,
        progress=False,
    )
    assert s["n"] == 2 and s["outcomes"]["pred_error"] == 2  # random text holds no SQL
    assert 1 <= s["behaviour"]["policy_tokens"] <= 6 and s["behaviour"]["prompt_tokens"] > 20


def turn_script_generate(tokenizer: Any, turns: list[str]) -> Any:
    """A GenerateFn that writes ``turns[i]`` as the i-th assistant turn of any episode."""
    from training.rollout import GenerationOutput

    def generate(prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        out = []
        for ids in prompts:
            turn = tokenizer.decode(ids).count("<|im_start|>assistant") - 1
            body = turns[min(turn, len(turns) - 1)]
            out.append(GenerationOutput(tokenizer.encode(body, add_special_tokens=False) + [tokenizer.eos_token_id]))
        return out

    return generate


def test_multi_turn_agent_counts_turns_tool_calls_and_tokens(bird: Path, tmp_path: Path) -> None:
    """TRUST-SQL (inference budget) through the driver: tool observations come from the real
    database, and the report counts turns, tool calls and policy tokens per sample."""
    from agents import make_agent
    from tests.helpers.tiny_model import tiny_tokenizer

    tok = tiny_tokenizer()
    call = (
        '<tool_call>{"name": "execute_sql_query", "arguments": {"db_id": "music", '
        '"sql": "SELECT name FROM sqlite_master WHERE type = \'table\'"}}</tool_call>'
    )
    turns = [
        "<think>Which tables exist?</think><action>explore_schema</action>" + call,
        (
            "<think>singer holds them.</think><action>propose_schema</action>"
            '<schema>{"tables": ["singer"], "columns": {"singer": ["singer_id"]}, "joins": []}</schema>'
        ),
        "<think>Run it.</think><action>generate_sql</action>"
        + call.replace("SELECT name FROM sqlite_master WHERE type = 'table'", "SELECT COUNT(*) FROM singer"),
        "<think>Count.</think><action>confirm_answer</action><answer>```sql\nSELECT COUNT(*) FROM singer\n```</answer>",
    ]
    _, _, sampling, limits = _policy_setup()
    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("10", "11")]
    s = evaluate_policy(
        examples,
        make_agent("trustsql", inference=True),
        tok,
        turn_script_generate(tok, turns),
        sampling,
        limits,
        tmp_path / "out",
        say=quiet,
        progress=False,
    )
    assert (s["outcomes"]["match"], s["outcomes"]["mismatch"]) == (1, 1)
    assert s["behaviour"]["turns"] == 4.0 and s["behaviour"]["tool_calls"] == 2.0
    policy = sum(len(tok.encode(t, add_special_tokens=False)) + 1 for t in turns)  # + the EOS of each turn
    assert s["behaviour"]["policy_tokens"] == policy
    assert s["behaviour"]["response_tokens"] > policy  # the observation and template tokens (mask 0)
    assert s["end_reasons"] == {"answer": 2}
    record = json.loads((tmp_path / "out" / "records.jsonl").read_text().splitlines()[0])
    assert record["samples"][0]["last_turn"] == turns[-1]
    assert "| 4.00 | 2.00 |" in (tmp_path / "out" / "report.md").read_text()
