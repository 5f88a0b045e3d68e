"""Spider-Syn, Spider-DK and Spider-Realistic read in their releases' layouts: questions-only
folders beside a Spider release, the sets' own question keys, one split for the evaluation
sets, and Spider-DK's unparseable gold kept as published."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from eval.data import load_examples
from tests.eval.conftest import make_music_db
from tools.errors import DataError

# Spider-DK.json's one gold query that no parser reads (a comma is missing in the release).
SPIDER_DK_BROKEN_GOLD = (
    "SELECT DISTINCT T1.fname , T1.LName  T1.age FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid  =  T2.stuid"
)


def _spider_release(data: Path) -> None:
    make_music_db(data / "spider" / "database" / "music" / "music.sqlite")
    (data / "spider" / "tables.json").write_text("[]")


def _write(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(records))
    return path


SYN_DEV = [
    {
        "db_id": "music",
        "query": "SELECT count(*) FROM singer",
        "SpiderQuestion": "How many singers do we have?",
        "SpiderSynQuestion": "How many vocalists do we have?",
    },
    {
        "db_id": "music",
        "query": "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
        "SpiderQuestion": "Who is the oldest singer?",
        "SpiderSynQuestion": "Who is the eldest vocalist?",
    },
]


def test_spider_syn_reads_the_synonym_questions_from_the_repository_layout(tmp_path: Path) -> None:
    _spider_release(tmp_path)
    _write(tmp_path / "Spider-Syn" / "Spider-Syn" / "dev.json", SYN_DEV)
    _write(tmp_path / "Spider-Syn" / "Spider-Syn" / "train_spider.json", SYN_DEV[:1])
    repo = tmp_path / "Spider-Syn"  # the repository root: its Spider-Syn/ folder holds the files
    dev = load_examples("spider_syn", root=repo, split="dev")
    assert [e.question for e in dev] == ["How many vocalists do we have?", "Who is the eldest vocalist?"]
    assert [e.id for e in dev] == ["0", "1"]
    assert [e.difficulty for e in dev] == ["easy", "medium"]  # Spider's hardness, from the SQL
    assert dev[0].db_path == str((tmp_path / "spider" / "database" / "music" / "music.sqlite").resolve())
    assert dev[0].gold_tables == ("singer",)
    train = load_examples("spider_syn", root=repo / "Spider-Syn", split="train")
    assert [e.question for e in train] == ["How many vocalists do we have?"]


def test_spider_syn_without_the_synonym_key_names_the_keys_it_reads(tmp_path: Path) -> None:
    _spider_release(tmp_path)
    record = {k: v for k, v in SYN_DEV[0].items() if k != "SpiderSynQuestion"}
    _write(tmp_path / "Spider-Syn" / "dev.json", [record])
    with pytest.raises(DataError, match=r"\(example 0\): missing or empty SpiderSynQuestion/question"):
        load_examples("spider_syn", root=tmp_path / "Spider-Syn", split="dev")


def test_spider_dk_keeps_its_unparseable_gold_and_scores_it_as_a_gold_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _spider_release(tmp_path)
    records = [
        {
            "db_id": "music",
            "question": "List the singers from Sweden.",
            "query": "SELECT name FROM singer WHERE country = 'Sweden'",
        },
        {"db_id": "music", "question": "Pet owners' names and ages?", "query": SPIDER_DK_BROKEN_GOLD},
    ]
    _write(tmp_path / "Spider-DK" / "Spider-DK.json", records)
    with caplog.at_level(logging.WARNING, logger="eval.data.loaders"):
        kept = load_examples("spider_dk", root=tmp_path / "Spider-DK", split="dev")
    assert [e.gold_sql for e in kept] == [records[0]["query"], SPIDER_DK_BROKEN_GOLD]
    assert "(example 1): gold SQL does not parse, kept as published" in caplog.text
    dropped = load_examples("spider_dk", root=tmp_path / "Spider-DK", split="dev", drop_failing_gold=True)
    assert [e.id for e in dropped] == ["0"]  # training-style loading drops it like any failing gold

    from rex import ExecScorer
    from tools import get_database

    score = ExecScorer().score(get_database(kept[1].db_path), kept[1].gold_sql, "SELECT 1", metric="spider")
    assert score.outcome == "gold_error" and score.gold_failed


def test_spider_dk_and_realistic_have_one_split_and_say_how_to_train(tmp_path: Path) -> None:
    _spider_release(tmp_path)
    _write(
        tmp_path / "Spider-DK" / "Spider-DK.json",
        SYN_DEV[:0] + [{"db_id": "music", "question": "q", "query": "SELECT 1"}],
    )
    with pytest.raises(
        DataError, match="Spider-DK is an evaluation set with one split, dev, not 'train': train on data=spider"
    ):
        load_examples("spider_dk", root=tmp_path / "Spider-DK", split="train")
    realistic = tmp_path / "sets" / "spider-realistic"  # no Spider release beside it: only the link finds one
    _write(
        realistic / "spider-realistic.json",
        [{"db_id": "music", "question": "How many singers?", "query": "SELECT count(*) FROM singer"}],
    )
    _write(realistic / "dev.json", [{"db_id": "music", "question": "Spider's original wording", "query": "SELECT 1"}])
    (realistic / "database").symlink_to(tmp_path / "spider" / "database")  # a link to Spider's databases
    examples = load_examples("spider_realistic", root=realistic, split="dev")
    assert [e.question for e in examples] == ["How many singers?"]  # not the original dev.json beside it
    assert Path(examples[0].db_path) == (tmp_path / "spider" / "database" / "music" / "music.sqlite").resolve()


def test_a_questions_only_set_without_spider_databases_says_where_to_put_them(tmp_path: Path) -> None:
    folder = _write(
        tmp_path / "Spider-DK" / "Spider-DK.json", [{"db_id": "music", "question": "q", "query": "SELECT 1"}]
    ).parent
    with pytest.raises(DataError) as info:
        load_examples("spider_dk", root=folder, split="dev")
    message = str(info.value)
    assert "Spider-DK ships questions only and no Spider databases were found" in message
    assert f"put Spider's database/ folder (or a link to it) in {folder.resolve()}" in message
    assert str((tmp_path / "spider").resolve()) in message


def test_the_data_groups_compose_with_spider_execution_match(tmp_path: Path) -> None:
    from eval.data.__main__ import compose_data

    for kind in ("spider_syn", "spider_dk", "spider_realistic"):
        data = compose_data([f"data={kind}", f"data.root={tmp_path}"])
        assert data["kind"] == kind and data["ex_metric"] == "spider" and data["eval_split"] == "dev"


def test_eval_run_scores_a_predictions_file_on_spider_dk(tmp_path: Path) -> None:
    from eval.run import run
    from tests.eval.conftest import quiet, write_jsonl
    from training.config import compose_tree

    _spider_release(tmp_path)
    sweden = "SELECT name FROM singer WHERE country = 'Sweden'"
    records = [
        {"db_id": "music", "question": "Singers from Sweden?", "query": sweden},
        {"db_id": "music", "question": "Pet owners' names and ages?", "query": SPIDER_DK_BROKEN_GOLD},
        {"db_id": "music", "question": "How many singers?", "query": "SELECT count(*) FROM singer"},
    ]
    root = _write(tmp_path / "Spider-DK" / "Spider-DK.json", records).parent
    preds = write_jsonl(
        tmp_path / "preds.jsonl",
        [
            {"id": "0", "db_id": "music", "sql": sweden},
            {"id": "1", "db_id": "music", "sql": "SELECT 1"},
            {"id": "2", "db_id": "music", "sql": "SELECT count(*) FROM concert"},
        ],
    )
    out = tmp_path / "out"
    raw = compose_tree("eval", [f"predictions={preds}", "data=spider_dk", f"data.root={root}", f"eval.out_dir={out}"])
    summary = run(raw, set(), say=quiet)
    assert summary is not None
    saved = json.loads((out / "summary.json").read_text())
    assert saved["outcomes"]["match"] == 1 and saved["outcomes"]["gold_error"] == 1
    assert saved["outcomes"]["mismatch"] == 1 and saved["settings"]["ex_metric"] == "spider"
    assert saved["ex_official"] == pytest.approx(1 / 3)  # the broken gold counts against the set, as officially
    assert saved["by_difficulty"]["unknown"]["outcomes"]["gold_error"] == 1  # no hardness for SQL that does not parse
