"""Schema-linking figures through evaluation: each design's real agent, played by a scripted
policy that links a known schema on the real test databases, gives the expected precision,
recall, F1 and C-Recall per level and difficulty in summary.json, report.md and the
eval.compare tables; Think2SQL, which has no linking step, reports none (not zeros). The
design's hook (``Design.linked_schema``) is what reads each linked schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agents import make_agent
from agents.designs import EpisodeSchema, get_design
from agents.types import EpisodeResult, SchemaSelection, Trajectory
from eval.compare import compare, load_run
from eval.data import load_examples
from eval.evaluate import evaluate_policy
from tests.eval.conftest import quiet
from tests.eval.test_evaluate_policy import turn_script_generate

ANSWER = "```sql\nSELECT COUNT(*) FROM singer\n```"
# One linked schema for every question, written with the case and quoting a model may use:
# tables {singer}; columns {singer.name, singer.country, singer.age} once normalised.
LINKED_JSON = '{"tables": ["`Singer`"], "columns": {"SINGER": ["`Name`", "country", "Age"]}}'
TURNS = {
    "trustsql": [
        "<think>Tables?</think><action>explore_schema</action>"
        '<tool_call>{"name": "execute_sql_query", "arguments": {"db_id": "music", '
        '"sql": "SELECT name FROM sqlite_master WHERE type = \'table\'"}}</tool_call>',
        f"<think>singer.</think><action>propose_schema</action><schema>{LINKED_JSON}</schema>",
        f"<think>Count.</think><action>confirm_answer</action><answer>{ANSWER}</answer>",
    ],
    "retoolsql": [
        "<scratch_pad>count the singers</scratch_pad>\n<relevant_tables>`Singer`</relevant_tables>\n"
        "<relevant_columns>`singer`.`Name`, SINGER.country, singer.age</relevant_columns>\n"
        f"<final_answer>{ANSWER}</final_answer>"
    ],
    "think2sql": [f"<think>ok</think><answer>{ANSWER}</answer>"],
}
DUALSQL = {
    "linker": f"<think>singer holds it.</think>\n```json\n{LINKED_JSON}\n```",
    "generator": f"<think>Count.</think>\n{ANSWER}",
}

# Questions 10 (simple, COUNT(*): gold {singer}, no column), 11 (simple: singer.name,
# singer.country) and 12 (moderate: concert.year, concert.venue) of the ``bird`` fixture.
EXPECTED = {
    "all": {
        "tables": {"n": 3, "precision": 2 / 3, "recall": 2 / 3, "f1": 2 / 3, "c_recall": 2 / 3},
        "columns": {"n": 2, "precision": 1 / 3, "recall": 0.5, "f1": 0.4, "c_recall": 0.5},
    },
    "simple": {
        "tables": {"n": 2, "precision": 1.0, "recall": 1.0, "f1": 1.0, "c_recall": 1.0},
        "columns": {"n": 1, "precision": 2 / 3, "recall": 1.0, "f1": 0.8, "c_recall": 1.0},
    },
    "moderate": {
        "tables": {"n": 1, "precision": 0.0, "recall": 0.0, "f1": 0.0, "c_recall": 0.0},
        "columns": {"n": 1, "precision": 0.0, "recall": 0.0, "f1": 0.0, "c_recall": 0.0},
    },
}


def dualsql_generate(tokenizer: Any) -> Any:
    """Each DualSQL episode answers in one turn: the linker links, the generator answers."""
    from training.rollout import GenerationOutput

    def generate(prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        out = []
        for ids in prompts:
            body = DUALSQL["linker" if "schema linker" in tokenizer.decode(ids) else "generator"]
            out.append(GenerationOutput(tokenizer.encode(body, add_special_tokens=False) + [tokenizer.eos_token_id]))
        return out

    return generate


def run_design(design: str, bird: Path, out: Path) -> dict[str, Any]:
    from tests.helpers.tiny_model import tiny_tokenizer
    from training.rollout import RolloutLimits, SamplingParams

    tok = tiny_tokenizer()
    agent = make_agent(design, inference=True) if design == "trustsql" else make_agent(design)
    generate = dualsql_generate(tok) if design == "dualsql" else turn_script_generate(tok, TURNS[design])
    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("10", "11", "12")]
    return evaluate_policy(
        examples,
        agent,
        tok,
        generate,
        SamplingParams(temperature=0.0, max_new_tokens=512),
        RolloutLimits(max_response_tokens=4096, max_context_tokens=32768),
        out,
        say=quiet,
        progress=False,
    )


def check_figures(linking_by: dict[str, Any]) -> None:
    for where, levels in EXPECTED.items():
        for level, figures in levels.items():
            got = linking_by[where][level]
            assert got["n"] == figures["n"], (where, level)
            for name in ("precision", "recall", "f1", "c_recall"):
                assert got[name] == pytest.approx(figures[name]), (where, level, name)


@pytest.mark.parametrize("design", ["trustsql", "retoolsql", "dualsql"])
def test_a_linking_design_reports_the_expected_figures(design: str, bird: Path, tmp_path: Path) -> None:
    s = run_design(design, bird, tmp_path / design)
    check_figures(
        {"all": s["linking"], **{d: b["linking"] for d, b in s["by_difficulty"].items() if d != "challenging"}}
    )
    on_disk = json.loads((tmp_path / design / "summary.json").read_text())
    assert on_disk["linking"] == s["linking"]
    record = json.loads((tmp_path / design / "records.jsonl").read_text().splitlines()[1])  # question 11
    assert record["linking"]["linked"] == {
        "tables": ["singer"],
        "columns": ["singer.age", "singer.country", "singer.name"],
    }
    assert record["linking"]["gold"] == {"tables": ["singer"], "columns": ["singer.country", "singer.name"]}
    report = (tmp_path / design / "report.md").read_text()
    assert "## Schema linking" in report
    assert "| simple | 2 | 100.0% | 100.0% | 100.0% | 100.0% | 66.7% | 100.0% | 80.0% | 100.0% |" in report
    assert "| **all** | 3 | 66.7% | 66.7% | 66.7% | 66.7% | 33.3% | 50.0% | 40.0% | 50.0% |" in report


def test_a_design_without_linking_reports_nothing_and_compare_says_so(bird: Path, tmp_path: Path) -> None:
    think = run_design("think2sql", bird, tmp_path / "think2sql")
    assert "linking" not in think and all("linking" not in b for b in think["by_difficulty"].values())
    assert "Schema linking" not in (tmp_path / "think2sql" / "report.md").read_text()
    assert get_design("think2sql").linked_schema is None
    run_design("dualsql", bird, tmp_path / "dualsql")
    result = compare([tmp_path / "dualsql", tmp_path / "think2sql"], tmp_path / "cmp", use_wandb=False, say=quiet)
    header, rows = result["linking"]["header"], result["linking"]["rows"]
    assert header[:4] == ["run", "difficulty", "n", "tables P"] and header[-1] == "columns C-Recall"
    by_run = {(r[0], r[1]): dict(zip(header, r, strict=True)) for r in rows}
    assert by_run[("think2sql", "all")]["n"] is None
    assert all(by_run[("think2sql", "all")][h] is None for h in header[3:])  # nothing, not zeros
    assert [r[1] for r in rows if r[0] == "dualsql"] == ["simple", "moderate", "all"]
    dual = by_run[("dualsql", "all")]
    assert dual["tables F1"] == pytest.approx(2 / 3) and dual["columns C-Recall"] == pytest.approx(0.5)
    assert by_run[("dualsql", "simple")]["columns P"] == pytest.approx(2 / 3)
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "## Schema linking" in md and "| think2sql | all | - | - |" in md
    assert "| dualsql | all | 3 | 66.7% |" in md
    csv_lines = (tmp_path / "cmp" / "compare_linking.csv").read_text().splitlines()
    assert csv_lines[0].startswith("run,difficulty,n,tables P") and len(csv_lines) == 1 + len(rows)


def test_each_design_reads_its_linked_schema_from_its_own_episode() -> None:
    linker = SchemaSelection(tables=("a",))
    proposed = SchemaSelection(tables=("b",))
    dual = [
        EpisodeResult("linker", None, linker, [], "answer"),
        EpisodeResult("generator", "SELECT 1", None, [], "answer"),
    ]
    readers = {name: get_design(name).linked_schema for name in ("dualsql", "trustsql", "retoolsql")}
    assert all(callable(read) for read in readers.values())
    assert readers["dualsql"](dual) == linker  # type: ignore[misc]  # the linker's, not the generator's
    assert readers["trustsql"]([EpisodeResult("agent", "SELECT 1", proposed, [], "answer")]) == proposed  # type: ignore[misc]
    assert readers["retoolsql"]([EpisodeResult("agent", None, None, [], "turn_budget")]) is None  # type: ignore[misc]


def test_training_heldout_records_carry_linking_into_compare(bird: Path, tmp_path: Path) -> None:
    """A training run's held-out records (training.runs.samples.write_heldout) score the linked
    schema with the design's hook, and eval.compare reads the figures from them."""
    from training.runs.samples import write_heldout

    examples = [e for e in load_examples("bird", bird, "dev") if e.id in ("11", "12")]
    linked = SchemaSelection(tables=("singer",), columns=("singer.name", "singer.country"))

    def trajectory(example_id: str, role: str, schema: SchemaSelection | None, sql: str | None) -> Trajectory:
        return Trajectory(example_id, role, [1], [2], [1], [0], EpisodeResult(role, sql, schema, [], "answer"))

    trajectories = [
        t
        for ex in examples
        for t in (trajectory(ex.id, "linker", linked, None), trajectory(ex.id, "generator", linked, ex.gold_sql))
    ]
    run = tmp_path / "run"
    run.mkdir()
    write_heldout(run, "after", examples, trajectories, EpisodeSchema("linker"))
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "kind": "train", "reward/total": 0.5}) + "\n")
    view = load_run(run)
    assert view.linking["all"]["tables_c_recall"] == pytest.approx(0.5)  # question 11 complete, 12 not
    assert view.linking["simple"]["columns_f1"] == 1.0 and view.linking["moderate"]["columns_recall"] == 0.0
