"""Think2SQL's SFT without reasoning traces (SFT NT, §4.3 Table 2; designs/think2sql/README.md
"Ablations") as its one command line composes it: the answer-only agent, driven through an
episode, and the SFT replay of reasoning traces through it on a small SQLite file."""

from __future__ import annotations

import pytest

from agents.types import Example
from tests.helpers.ablations import ablation_agent, ablation_config
from tests.helpers.agent_db import COUNT_SQL
from tests.helpers.agent_scripts import THINK2SQL, play
from tests.helpers.schools import QUESTIONS, make_db
from tests.helpers.tiny_model import tiny_tokenizer
from training.rollout import RolloutLimits
from training.supervised.dataset import replay
from training.supervised.demonstrations import get_script, record_demonstrations

SFT_NT = ["stage=sft", "agent.reasoning=false"]
ANSWER = f"<answer>\n```sql\n{COUNT_SQL}\n```\n</answer>"
LIMITS = RolloutLimits(
    max_response_tokens=4000, max_tokens_per_turn=400, max_prompt_tokens=8000, max_context_tokens=12000
)


def test_the_answer_only_agent_has_its_own_prompt_and_format(example, db) -> None:
    assert ablation_config("think2sql", SFT_NT).stage.name == "sft"
    agent = ablation_agent("think2sql", SFT_NT)
    episode = agent.start(example, db)
    system = episode.messages[0]["content"]
    paper = ablation_agent("think2sql").start(example, db)
    assert "<think>" in paper.messages[0]["content"] and "reason" in paper.messages[0]["content"]
    assert "<think>" not in system and "reason" not in system and "Write only the query" in system
    assert episode.messages[1] == paper.messages[1]  # the same gold-table schema and question
    step = episode.step(ANSWER)
    assert step.done and step.format_ok and episode.result().final_sql == COUNT_SQL
    with_reasoning = agent.start(example, db).step(THINK2SQL["agent"][0])
    assert not with_reasoning.format_ok and "one <answer>…</answer> alone" in with_reasoning.format_reason
    assert not play(paper, [ANSWER])[0].format_ok  # the paper's agent needs the reasoning


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    db = make_db(tmp_path_factory.mktemp("db") / "schools.sqlite")
    return [
        Example(
            id=f"q{i}",
            db_id="schools",
            db_path=str(db),
            question=q,
            evidence="(a hint)",
            gold_sql=sql,
            gold_tables=t,
            gold_columns=c,
            split="train",
        )
        for i, (q, sql, t, c) in enumerate(QUESTIONS)
    ]


def test_sft_nt_replays_reasoning_traces_as_answer_only_demonstrations(examples: list[Example]) -> None:
    """The same SFT rows (reasoning traces) become answer-only demonstrations: the <think>
    blocks leave the trained tokens and the prompt is the answer-only one."""
    tok, script = tiny_tokenizer(), get_script("think2sql")
    traces = {ex.id: script(ex, "agent", 1) for ex in examples}
    assert all("<think>" in turns[0] for turns in traces.values())
    rows = [
        {"question_id": i, "messages": [{"role": "assistant", "content": t} for t in ts]} for i, ts in traces.items()
    ]
    by_id = {ex.id: ex for ex in examples}
    answer_only, dropped = replay(ablation_agent("think2sql", SFT_NT), rows, by_id, tok, LIMITS)
    with_reasoning, _ = replay(ablation_agent("think2sql"), rows, by_id, tok, LIMITS)
    warm_start = record_demonstrations(ablation_agent("think2sql", SFT_NT), examples, tok, LIMITS, script)
    assert dropped == {} and len(answer_only) == len(with_reasoning) == len(examples) and warm_start.dropped == {}
    for t, full in zip(answer_only, with_reasoning, strict=True):
        response, full_response = tok.decode(t.response_ids), tok.decode(full.response_ids)
        assert "<think>" not in response and "<answer>" in response and "<think>" in full_response
        assert t.result.final_sql == full.result.final_sql and t.result.all_turns_valid
        assert sum(t.response_mask) < sum(full.response_mask)  # fewer trained tokens: no reasoning
        assert "Write only the query" in tok.decode(t.prompt_ids)
    assert all("<think>" not in tok.decode(t.response_ids) for t in warm_start.trajectories)
