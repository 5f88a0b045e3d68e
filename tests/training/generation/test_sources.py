"""The generation interface against a real OpenAI-compatible HTTP server on loopback:
stop strings restored, reasoning kept, n > 1, retries, failures counted (never raised),
and episodes played through the real agents and tools."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agents import make_agent
from agents.types import Example
from tests.helpers.fake_openai import FakeOpenAI, Reply, choice, completion
from tests.helpers.schools import turn_text
from tests.helpers.tiny_model import tiny_tokenizer
from tests.training.supervised.test_demonstrations import AGENTS, LIMITS
from tools import get_database
from training.generation import run_source_episodes
from training.generation.endpoint import EndpointSource, EndpointSpec, restore_stop, with_reasoning
from training.rollout import SamplingParams

PARAMS = SamplingParams(temperature=0.7, max_new_tokens=400, stop=("</tool_call>", "</answer>"))
MESSAGES = [{"role": "user", "content": "hi"}]


def client(server: FakeOpenAI, **kw: Any) -> EndpointSource:
    spec = EndpointSpec(base_url=server.base_url, model="fake", **{"retries": 2, "timeout_s": 2.0, **kw})
    return EndpointSource(spec, sleep=lambda s: None)


def test_restore_stop_and_reasoning() -> None:
    stops = ("</tool_call>", "</answer>")
    assert (
        restore_stop('<think>x</think><tool_call>{"a": 1}', stops, "stop")
        == '<think>x</think><tool_call>{"a": 1}</tool_call>'
    )
    assert restore_stop("<answer>SELECT 1", stops, "stop", stop_reason="</answer>") == "<answer>SELECT 1</answer>"
    assert restore_stop("<answer>SELECT 1</answer> done", stops, "stop") == "<answer>SELECT 1</answer> done"  # EOS
    assert restore_stop("<answer>SELECT 1", stops, "length") == "<answer>SELECT 1"  # cut by length: left alone
    assert with_reasoning("<answer>x</answer>", "I think", "think") == "<think>\nI think\n</think>\n<answer>x</answer>"
    assert with_reasoning("<think>a</think>", "b", "think") == "<think>a</think>"


def test_n_samples_in_one_request_with_stop_and_reasoning_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KEY", "sk-test")

    def reply(body: dict) -> Reply:
        return Reply(
            body=completion(
                *[choice("<answer>SELECT 1", i, reasoning_content=f"step {i}") for i in range(body.get("n", 1))]
            )
        )

    with FakeOpenAI(reply) as server:
        texts = client(server, api_key_env="TEST_KEY").complete(MESSAGES, PARAMS, 3)
    assert texts == [f"<think>\nstep {i}\n</think>\n<answer>SELECT 1</answer>" for i in range(3)]
    assert len(server.requests) == 1 and server.requests[0]["n"] == 3
    assert server.requests[0]["stop"] == ["</tool_call>", "</answer>"] and server.requests[0]["model"] == "fake"
    assert server.headers[0]["Authorization"] == "Bearer sk-test"


def test_a_server_that_ignores_n_is_asked_one_by_one() -> None:
    with FakeOpenAI(lambda body: Reply(body=completion(choice("<answer>x</answer>")))) as server:
        source = client(server)
        assert source.complete(MESSAGES, PARAMS, 3) == ["<answer>x</answer>"] * 3
        assert [r.get("n") for r in server.requests] == [3, None, None]
        source.complete(MESSAGES, PARAMS, 2)
        assert [r.get("n") for r in server.requests[3:]] == [None, None]  # remembered


def test_errors_are_retried_then_counted_as_failed() -> None:
    script = itertools.chain(
        [Reply(503, {"error": "busy"}), Reply(200, "{not json"), Reply(body={"choices": []})],
        [Reply(body=completion(choice("<answer>ok</answer>")))],
    )
    with FakeOpenAI(lambda body: next(script)) as server:
        source = client(server, retries=3)
        assert source.complete(MESSAGES, PARAMS, 1) == ["<answer>ok</answer>"]
        assert source.stats == {"requests": 4, "retries": 3, "failed": 0}
    with FakeOpenAI(lambda body: Reply(500, "oops")) as server:
        source = client(server, retries=2)
        assert source.complete(MESSAGES, PARAMS, 2) == [None, None]
        assert source.stats["failed"] == 1 and len(server.requests) == 3
    with FakeOpenAI(lambda body: Reply(400, {"error": "bad request"})) as server:  # not retried
        source = client(server, retries=2)
        assert source.complete(MESSAGES, PARAMS, 1) == [None] and len(server.requests) == 1
    with FakeOpenAI(lambda body: Reply(body=completion(choice("late")), delay_s=1.5)) as server:
        source = client(server, retries=1, timeout_s=0.3)
        assert source.complete(MESSAGES, PARAMS, 1) == [None] and source.stats["retries"] == 1


def teacher_reply(recipe: str, examples: list[Example], strip: bool = True) -> Any:
    """A fake teacher writing each design's good turns (stop strings stripped, as servers do)."""

    def reply(body: dict) -> Reply:
        messages = body["messages"]
        ex = next(e for e in examples if any(e.question in str(m["content"]) for m in messages))
        role = "generator" if "SQL generator of a text-to-SQL" in messages[0]["content"] else "linker"
        turn = sum(m["role"] == "assistant" for m in messages)
        text = turn_text(recipe, role, turn, ex, good=True)
        for stop in body.get("stop", []):
            if strip and text.endswith(stop):
                text = text[: -len(stop)]
        return Reply(body=completion(*[choice(text, i) for i in range(body.get("n", 1))]))

    return reply


@pytest.mark.parametrize("recipe", ["retoolsql", "trustsql", "dualsql"])
def test_endpoint_episodes_run_our_tools_and_reach_the_gold_answer(recipe: str, examples: list[Example]) -> None:
    options, _ = AGENTS[recipe]
    agent = make_agent(recipe, **options)
    requests = [(ex, get_database(ex.db_path), s) for ex in examples[:2] for s in range(2)]
    with FakeOpenAI(teacher_reply(recipe, examples)) as server:
        batch = run_source_episodes(agent, requests, tiny_tokenizer(), client(server), PARAMS, LIMITS)
    assert batch.failed == []
    finals = [t for t in batch.trajectories if t.role != "linker"]
    assert len(finals) == 4
    for t in finals:
        ex = next(e for e in examples if e.id == t.example_id)
        assert t.result.end_reason == "answer" and t.result.all_turns_valid
        assert t.result.final_sql.strip() == ex.gold_sql
    assert all(r.get("n") == 2 for r in server.requests)  # the two samples of a question share each request
    if recipe != "dualsql":  # the tool ran here: its observation is in the conversation, loss-free
        t = finals[0]
        observed = tiny_tokenizer().decode([i for i, m in zip(t.response_ids, t.response_mask, strict=True) if not m])
        assert "rows" in observed


def test_failed_requests_drop_their_episodes_only(examples: list[Example]) -> None:
    good = teacher_reply("think2sql", examples)

    def reply(body: dict) -> Reply:
        text = str(body["messages"])
        return Reply(500, "down") if examples[0].question in text else good(body)

    agent = make_agent("think2sql")
    requests = [(ex, get_database(ex.db_path), 0) for ex in examples[:2]]
    with FakeOpenAI(reply) as server:
        batch = run_source_episodes(agent, requests, tiny_tokenizer(), client(server, retries=1), PARAMS, LIMITS)
    assert batch.failed == [("q0", 0)] and [t.example_id for t in batch.trajectories] == ["q1"]
