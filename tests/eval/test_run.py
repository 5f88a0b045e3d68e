"""eval.run: predictions files (pairing, db_id checks, missing, outcomes and EX per
difficulty), resumption, the model mode through the rollout driver (scripted policy and
the tiny random model), and the entry point in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eval.data import load_examples
from eval.run import EvalSettings, evaluate_policy, evaluate_predictions
from tests.eval.conftest import write_bird
from tools.errors import ConfigError, DataError
from training.rollout_setup import hf_generate

REPO = Path(__file__).resolve().parents[2]
INFINITE = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT MAX(x) FROM c"

RECORDS = [
    {
        "question_id": 10,
        "db_id": "music",
        "question": "How many singers?",
        "evidence": "",
        "SQL": "SELECT COUNT(*) FROM singer",
        "difficulty": "simple",
    },
    {
        "question_id": 11,
        "db_id": "music",
        "question": "Singers from Spain?",
        "evidence": "",
        "SQL": "SELECT name FROM singer WHERE country = 'Spain'",
        "difficulty": "simple",
    },
    {
        "question_id": 12,
        "db_id": "music",
        "question": "Venues by year?",
        "evidence": "",
        "SQL": "SELECT year, venue FROM concert ORDER BY year",
        "difficulty": "moderate",
    },
    {
        "question_id": 13,
        "db_id": "shop",
        "question": "Item labels?",
        "evidence": "",
        "SQL": "SELECT label FROM item",
        "difficulty": "simple",
    },
    {
        "question_id": 14,
        "db_id": "music",
        "question": "Broken gold",
        "evidence": "",
        "SQL": "SELECT no_such_function(name) FROM singer",
        "difficulty": "challenging",
    },
    {
        "question_id": 15,
        "db_id": "music",
        "question": "Countries?",
        "evidence": "",
        "SQL": "SELECT DISTINCT country FROM singer",
        "difficulty": "challenging",
    },
    {
        "question_id": 16,
        "db_id": "music",
        "question": "Known venues?",
        "evidence": "",
        "SQL": "SELECT venue FROM concert WHERE venue IS NOT NULL",
        "difficulty": "moderate",
    },
]

PREDICTIONS = [
    {"question_id": 10, "db_id": "music", "sql": "SELECT COUNT(singer_id) FROM singer"},  # match
    {"question_id": 11, "db_id": "music", "sql": "SELECT name FROM singer WHERE country = 'Brazil'"},  # mismatch
    {
        "id": "12",
        "db_id": "music",
        "sql": "SELECT year, venue FROM concert ORDER BY year DESC",
    },  # match (EX ignores order)
    {"question_id": 13, "db_id": "shop", "sql": "SELECT labl FROM item"},  # pred_error
    {"question_id": 14, "db_id": "music", "sql": "SELECT name FROM singer"},  # gold_error
    # 15 is missing
    {"question_id": 16, "db_id": "music", "sql": INFINITE},  # pred_timeout
]


@pytest.fixture
def bird(tmp_path: Path) -> Path:
    write_bird(tmp_path / "bird", records=RECORDS)
    return tmp_path / "bird"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def quiet(_: str) -> None:
    pass


def test_predictions_give_the_expected_outcomes_and_ex_per_difficulty(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    s = evaluate_predictions(examples, preds, tmp_path / "out", EvalSettings(timeout_s=1.0), say=quiet, progress=False)
    records = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "records.jsonl").read_text().splitlines())}
    assert {i: r["outcome"] for i, r in records.items()} == {
        "10": "match",
        "11": "mismatch",
        "12": "match",
        "13": "pred_error",
        "14": "gold_error",
        "15": "missing",
        "16": "pred_timeout",
    }
    assert s["outcomes"] == {
        "match": 2,
        "mismatch": 1,
        "pred_error": 1,
        "pred_timeout": 1,
        "gold_error": 1,
        "gold_timeout": 0,
        "missing": 1,
    }
    assert (s["n"], s["scorable"], s["missing"]) == (7, 6, 1)
    assert s["ex"] == pytest.approx(2 / 6)  # gold error left out of the denominator
    assert s["ex_official"] == pytest.approx(2 / 7)  # every error counts as wrong
    by = s["by_difficulty"]
    assert list(by) == ["simple", "moderate", "challenging"]
    assert (by["simple"]["n"], by["simple"]["ex"]) == (3, pytest.approx(1 / 3))
    assert (by["moderate"]["n"], by["moderate"]["ex"]) == (2, pytest.approx(0.5))
    assert (by["challenging"]["n"], by["challenging"]["scorable"], by["challenging"]["ex"]) == (2, 1, 0.0)
    assert by["challenging"]["ex_official"] == 0.0
    # REX: 12 is ordered by gold's ORDER BY and reversed -> only the middle row keeps its place
    assert records["12"]["rex"] == pytest.approx(1 / 3)
    assert records["10"]["rex"] == 1.0 and records["11"]["qatch"]["tc"] == 1.0
    report = (tmp_path / "out" / "report.md").read_text()
    assert "| moderate | 2 | 50.0% |" in report and "| missing | 1 |" in report
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["ex_official"] == pytest.approx(2 / 7)
    # predict.json in BIRD's format reads back as the same predictions (missing ones as '')
    again = evaluate_predictions(
        load_examples("bird", bird, "dev"),
        tmp_path / "out" / "predict.json",
        tmp_path / "again",
        EvalSettings(timeout_s=1.0),
        say=quiet,
        progress=False,
    )
    assert again["matches"] == s["matches"] and again["outcomes"]["pred_error"] == 2


def test_bird_official_dict_format(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    sep = "\t----- bird -----\t"
    preds = tmp_path / "predict_dev.json"
    preds.write_text(
        json.dumps(
            {
                "10": "SELECT COUNT(*) FROM singer" + sep + "music",
                "13": "SELECT label FROM item" + sep + "shop",
                "99": "SELECT 1" + sep + "music",
            },
            indent=2,
        )
    )
    s = evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)
    # five questions have no prediction; one of them has a failing gold SQL, so it is a gold_error
    assert s["outcomes"]["match"] == 2 and s["missing"] == 5
    assert s["outcomes"]["missing"] == 4 and s["outcomes"]["gold_error"] == 1
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["unmatched_predictions"] == 1


def test_db_id_mismatch_names_the_id_and_both_db_ids(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    preds = write_jsonl(tmp_path / "p.jsonl", [{"question_id": 13, "db_id": "music", "sql": "SELECT 1"}])
    with pytest.raises(DataError, match=r"question 13: .* db_id 'music' but the question's db_id is 'shop'"):
        evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)


def test_bad_prediction_files_are_reported_whole(bird: Path, tmp_path: Path) -> None:
    examples = load_examples("bird", bird, "dev")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"question_id": 10, "sql": "SELECT 1"}\nnot json\n'
        '{"question_id": 11, "db_id": "music", "sql": "x"}\n{"question_id": 11, "db_id": "music", "sql": "y"}\n'
    )
    with pytest.raises(DataError) as err:
        evaluate_predictions(examples, bad, tmp_path / "out", say=quiet, progress=False)
    text = str(err.value)
    assert "bad.jsonl:1: missing db_id" in text and "bad.jsonl:2: not valid JSON" in text
    assert "predicted twice" in text
    other = write_jsonl(tmp_path / "other.jsonl", [{"question_id": 99, "db_id": "music", "sql": "SELECT 1"}])
    with pytest.raises(DataError, match="none of the 1 predictions"):
        evaluate_predictions(examples, other, tmp_path / "out2", say=quiet, progress=False)
    with pytest.raises(DataError, match="no such file"):
        evaluate_predictions(examples, tmp_path / "nope.jsonl", tmp_path / "out3", say=quiet, progress=False)


# ----------------------------------------------------------------------------- model mode


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


def test_settings_validation() -> None:
    with pytest.raises(ConfigError, match="eval.mode='beam'"):
        EvalSettings(mode="beam")
    with pytest.raises(ConfigError, match="use eval.mode=sc or eval.mode=passk"):
        EvalSettings(mode="greedy", samples=4)
    assert EvalSettings(mode="sc").num_samples == 16 and EvalSettings().num_samples == 1


# ----------------------------------------------------------------------------- entry point


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    return subprocess.run(
        [sys.executable, "-m", "eval.run", *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )


def test_entry_point_scores_a_predictions_file(bird: Path, tmp_path: Path) -> None:
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    work = tmp_path / "work"
    work.mkdir()
    proc = _run(work, f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.timeout_s=1")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = work / "runs" / "eval" / "preds-bird-dev-greedy"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["ex_official"] == pytest.approx(2 / 7) and summary["outcomes"]["missing"] == 1
    assert "EX 33.3% (official 28.6%) on 7 questions" in proc.stdout
    assert sorted(p.name for p in work.iterdir()) == ["runs"]  # nothing else written in the working directory
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"question_id": 13, "db_id": "music", "sql": "SELECT 1"}])
    proc = _run(work, f"predictions={bad}", "data=bird", f"data.root={bird}")
    assert proc.returncode == 2 and "question 13" in proc.stderr and "Traceback" not in proc.stderr


def test_entry_point_runs_a_saved_model(bird: Path, tmp_path: Path) -> None:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    model_dir = tmp_path / "tiny"
    tiny_model().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    proc = _run(
        tmp_path,
        "recipe=think2sql",
        f"model.path={model_dir}",
        "data=bird",
        f"data.root={bird}",
        "data.split=dev2",
        "eval.limit=2",
        "rollout.max_new_tokens=4",
        "engine.device=cpu",
        f"eval.out_dir={tmp_path / 'out'}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["n"] == 2 and summary["settings"]["model"] == str(model_dir)
    assert summary["settings"]["recipe"] == "think2sql" and summary["behaviour"]["policy_tokens"] <= 4
    assert "[data] bird/dev: evaluating 2 of 7 questions" in proc.stdout


def test_bundled_benchmark_ex_per_difficulty_matches_the_data_file(minibird_root: Path, tmp_path: Path) -> None:
    """Gold SQL as predictions on every minibird dev question except, per difficulty, one
    broken and one missing prediction: EX per difficulty is exactly (n - 2) / n with n
    counted from the data file itself."""
    raw = json.loads((minibird_root / "dev" / "dev.json").read_text())
    counts = Counter(q["difficulty"] for q in raw)
    examples = load_examples("minibird", minibird_root, "dev")
    broken, missing, rows = set(), set(), []
    for ex in examples:
        if ex.difficulty not in {examples[i].difficulty for i in broken}:
            broken.add(examples.index(ex))
            rows.append({"question_id": ex.id, "db_id": ex.db_id, "sql": "SELECT * FROM no_such_table"})
        elif ex.difficulty not in {examples[i].difficulty for i in missing}:
            missing.add(examples.index(ex))
        else:
            rows.append({"question_id": ex.id, "db_id": ex.db_id, "sql": ex.gold_sql})
    preds = write_jsonl(tmp_path / "gold.jsonl", rows)
    s = evaluate_predictions(examples, preds, tmp_path / "out", say=quiet, progress=False)
    assert {d: b["n"] for d, b in s["by_difficulty"].items()} == dict(counts)
    for d, n in counts.items():
        assert s["by_difficulty"][d]["ex"] == pytest.approx((n - 2) / n)
        assert s["by_difficulty"][d]["outcomes"]["missing"] == 1
    assert s["outcomes"]["pred_error"] == len(counts) and s["outcomes"]["match"] == len(raw) - 2 * len(counts)
    assert s["rex"] == pytest.approx(s["ex"]) and s["qatch"]["mean"] == pytest.approx(s["ex"])


def _compose(*overrides: str) -> dict:
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module("recipes", version_base=None):
        return OmegaConf.to_container(compose("eval", overrides=list(overrides)), resolve=True)  # type: ignore[return-value]


def test_eval_config_reuses_the_training_groups_and_recipes() -> None:
    from eval.run import run

    raw = _compose("recipe=trustsql", "eval.mode=sc", "eval.samples=4")
    assert raw["agent"]["name"] == "trustsql" and raw["agent"]["max_turns_inference"] == 15
    assert raw["rollout"]["temperature"] == 0.8 and raw["model"]["path"] is None
    assert raw["data"]["drop_failing_gold"] is False  # gold errors are an outcome, not dropped
    assert raw["eval"] == {
        "mode": "sc",
        "samples": 4,
        "temperature": None,
        "limit": None,
        "out_dir": None,
        "fresh": False,
        "batch_size": 8,
        "timeout_s": 30.0,
        "ex_metric": None,
    }
    with pytest.raises(ConfigError, match="pass recipe=<name> to evaluate a model .* or predictions=PATH"):
        run(_compose(), set(), say=quiet)
    with pytest.raises(ConfigError, match="unknown eval option"):
        run(_compose("recipe=think2sql", "+eval.sample=3"), set(), say=quiet)


def test_predictions_with_sampling_modes_is_refused(bird: Path, tmp_path: Path) -> None:
    from eval.run import run

    preds = write_jsonl(tmp_path / "p.jsonl", PREDICTIONS)
    raw = _compose(
        f"predictions={preds}", "data=bird", f"data.root={bird}", "eval.mode=sc", f"eval.out_dir={tmp_path / 'o'}"
    )
    with pytest.raises(ConfigError, match="needs a model"):
        run(raw, set(), say=quiet)


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
    assert s["behaviour"]["turns"] == 3.0 and s["behaviour"]["tool_calls"] == 1.0
    policy = sum(len(tok.encode(t, add_special_tokens=False)) + 1 for t in turns)  # + the EOS of each turn
    assert s["behaviour"]["policy_tokens"] == policy
    assert s["behaviour"]["response_tokens"] > policy  # the observation and template tokens (mask 0)
    assert s["end_reasons"] == {"answer": 2}
    record = json.loads((tmp_path / "out" / "records.jsonl").read_text().splitlines()[0])
    assert record["samples"][0]["last_turn"] == turns[-1]
    assert "| 3.00 | 1.00 |" in (tmp_path / "out" / "report.md").read_text()


# ----------------------------------------------------------------------------- evaluation settings


def _dry(*overrides: str) -> str:
    from eval.run import run
    from training.run import explicit_keys

    lines: list[str] = []
    assert run(_compose(*overrides, "dry_run=true"), explicit_keys(overrides), say=lines.append) is None
    return "\n".join(lines)


def test_dry_run_prints_the_papers_evaluation_settings_and_exits(tmp_path: Path) -> None:
    text = _dry("recipe=think2sql", "engine.laptop_profile=off", f"eval.out_dir={tmp_path / 'never'}")
    assert "decoding: sample: 1 sample(s) at T 0.7, top-p 0.95" in text
    assert "questions: all" in text and "laptop profile: off" in text
    assert not (tmp_path / "never").exists()  # nothing evaluated, nothing written
    text = _dry("recipe=retoolsql", "engine.laptop_profile=off", "eval.mode=sc")
    assert "sc: 16 sample(s) at T 1.2, top-p 0.95" in text
    text = _dry("recipe=trustsql", "engine.laptop_profile=off")
    assert "greedy (temperature 0)" in text and "max_turns_inference=15" in text and "observations: 1024" in text


def test_on_cpu_eval_applies_the_laptop_caps_printed_and_overridable() -> None:
    text = _dry("recipe=think2sql", "engine.device=cpu")
    assert "[laptop profile] CPU" in text and "evaluation.mode: sample -> greedy" in text
    assert "decoding: greedy" in text and "questions: 8" in text and "128 per call" in text
    text = _dry("recipe=retoolsql", "engine.device=cpu", "eval.mode=sc", "eval.limit=3")
    assert "sc: 4 sample(s) at T 1.2" in text and "questions: 3" in text  # 16 samples capped to 4 on CPU
    text = _dry("recipe=retoolsql", "engine.device=cpu", "eval.mode=sc", "eval.samples=6")
    assert "sc: 6 sample(s)" in text


def test_report_states_the_evaluation_settings(bird: Path, tmp_path: Path) -> None:
    from eval.run import decoding_section

    section = decoding_section(
        {"mode": "sample", "samples": 1, "temperature": 0.7, "top_p": 0.95, "max_new_tokens": 30000, "ex_metric": "ex"}
    )
    assert "## Evaluation settings" in section and "- temperature: 0.7" in section and "- top_p: 0.95" in section
    preds = write_jsonl(tmp_path / "preds.jsonl", PREDICTIONS)
    examples = load_examples("bird", bird, "dev")
    evaluate_predictions(
        examples,
        preds,
        tmp_path / "out",
        EvalSettings(timeout_s=1.0),
        say=quiet,
        progress=False,
        data_info={"ex_metric": "ex"},
    )
    assert "## Evaluation settings" in (tmp_path / "out" / "report.md").read_text()
