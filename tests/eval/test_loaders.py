"""Loading BIRD, Spider and JSONL layouts, their variants, and the layout errors."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agents.types import Example
from eval.data import load_examples, load_from_config
from eval.data.__main__ import compose_data, stats_text
from eval.data.layout import MAX_IDS_SHOWN
from tests.eval.conftest import BIRD_DEV, make_music_db, make_shop_db, write_bird
from tools.errors import ConfigError, DataError, UnknownNameError

# ------------------------------------------------------------------------------ BIRD


def test_bird_layout_loads_expected_examples(bird_root: Path) -> None:
    examples = load_examples("bird", root=bird_root, split="dev")
    assert [e.id for e in examples] == ["10", "11", "12", "13"]
    first, second, join, star = examples
    assert isinstance(first, Example)
    assert first.db_id == "music" and first.question == "How many singers are there?"
    assert first.gold_sql == "SELECT COUNT(*) FROM singer" and first.difficulty == "simple" and first.split == "dev"
    assert first.gold_tables == ("singer",) and first.gold_columns == ()
    assert Path(first.db_path) == (bird_root / "dev/dev_databases/music/music.sqlite").resolve()
    assert second.evidence == "Spain refers to country = 'Spain'"
    assert second.gold_columns == ("singer.country", "singer.name")
    assert join.difficulty == "moderate"
    assert join.gold_tables == ("concert", "singer")
    assert join.gold_columns == ("concert.singer_id", "concert.year", "singer.name", "singer.singer_id")
    assert star.gold_columns == ("item.item_id", "item.label", "item.price")  # * expands with the schema
    with pytest.raises(AttributeError):
        first.question = "changed"  # type: ignore[misc]


def test_bird_root_may_be_the_split_folder_or_its_parent(bird_root: Path) -> None:
    parent = load_examples("bird", root=bird_root, split="dev")
    folder = load_examples("bird", root=bird_root / "dev", split="dev")
    assert parent == folder


def test_split_folder_given_for_another_split_suggests_the_parent(tmp_path: Path) -> None:
    write_bird(tmp_path, split="dev")
    write_bird(tmp_path, split="train", records=BIRD_DEV[:1], dbs=("music",))
    with pytest.raises(DataError, match=rf"did you mean data.root={re.escape(str(tmp_path.resolve()))}\?"):
        load_examples("bird", root=tmp_path / "dev", split="train")
    assert len(load_examples("bird", root=tmp_path, split="train")) == 1


def test_bird_release_suffix_folder_and_minidev_file(tmp_path: Path) -> None:
    # BIRD's dev_20240627 release folder
    root = tmp_path / "bird"
    write_bird(root, split="dev")
    (root / "dev").rename(root / "dev_20240627")
    assert [e.id for e in load_examples("bird", root=root, split="dev")] == ["10", "11", "12", "13"]
    # MINIDEV: mini_dev_sqlite.json beside dev_databases/
    mini = tmp_path / "MINIDEV"
    write_bird(mini, split="dev", questions_name="mini_dev_sqlite.json")
    examples = load_examples("bird", root=mini / "dev", split="dev")
    assert len(examples) == 4 and examples[2].gold_tables == ("concert", "singer")


def test_missing_question_id_and_difficulty_use_index_and_unknown(tmp_path: Path) -> None:
    records = [{k: v for k, v in r.items() if k not in ("question_id", "difficulty")} for r in BIRD_DEV]
    write_bird(tmp_path, records=records)
    examples = load_examples("bird", root=tmp_path, split="dev")
    assert [e.id for e in examples] == ["0", "1", "2", "3"]
    assert {e.difficulty for e in examples} == {"unknown"}


def test_bird_accepts_common_key_spellings(tmp_path: Path) -> None:
    records = [{"id": "a1", "db_id": "music", "question": "Count singers.", "sql": "SELECT COUNT(*) FROM singer"}]
    write_bird(tmp_path, records=records, dbs=("music",))
    (only,) = load_examples("bird", root=tmp_path, split="dev")
    assert (only.id, only.gold_sql, only.gold_tables) == ("a1", "SELECT COUNT(*) FROM singer", ("singer",))


def test_limit_keeps_the_first_records(bird_root: Path) -> None:
    assert [e.id for e in load_examples("bird", root=bird_root, split="dev", limit=2)] == ["10", "11"]
    with pytest.raises(ConfigError, match="limit=0"):
        load_examples("bird", root=bird_root, split="dev", limit=0)


def test_all_layout_problems_are_reported_at_once(tmp_path: Path) -> None:
    records = [
        *BIRD_DEV,
        {"question_id": 20, "db_id": "ghost", "question": "q", "SQL": "SELECT 1", "difficulty": "simple"},
        {"question_id": 21, "db_id": "ghost", "question": "q", "SQL": "SELECT 2", "difficulty": "simple"},
        {"question_id": 22, "db_id": "music", "question": "bad sql", "SQL": "SELEC name FROM singer"},
        {"question_id": 23, "db_id": "music", "SQL": "SELECT 1"},  # no question
        {"question_id": 10, "db_id": "music", "question": "dup", "SQL": "SELECT 1"},  # repeated id: renamed 10@8
        ["not", "an", "object"],
    ]
    write_bird(tmp_path, records=records)
    with pytest.raises(DataError) as info:
        load_examples("bird", root=tmp_path, split="dev")
    message = str(info.value)
    assert "4 problem(s)" in message  # the two ghost examples are one problem
    expected_db = tmp_path / "dev" / "dev_databases" / "ghost" / "ghost.sqlite"
    assert f"db_id 'ghost' has no database at {expected_db.resolve()} (examples 20, 21)" in message
    assert "(example 22): gold SQL does not parse" in message
    assert "(example 23): missing or empty question" in message
    assert "already used" not in message  # BIRD pairs by position (tests/eval/test_minidev.py)
    assert "expected a JSON object, found list" in message
    assert str((tmp_path / "dev" / "dev.json").resolve()) in message


def test_missing_files_are_listed_with_the_paths_tried(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "dev_databases.zip").write_bytes(b"PK")
    with pytest.raises(DataError) as info:
        load_examples("bird", root=tmp_path, split="dev")
    message = str(info.value)
    assert "2 problem(s)" in message
    assert "missing questions file for split 'dev'; looked for dev.json, mini_dev_sqlite.json" in message
    assert "missing databases folder" in message and "unzip it first" in message
    with pytest.raises(DataError, match="does not exist"):
        load_examples("bird", root=tmp_path / "nowhere", split="dev")


def test_many_missing_ids_are_shortened(tmp_path: Path) -> None:
    records = [{"question_id": i, "db_id": "ghost", "question": "q", "SQL": "SELECT 1"} for i in range(20)]
    write_bird(tmp_path, records=records)
    with pytest.raises(DataError, match=f"and {20 - MAX_IDS_SHOWN} more"):
        load_examples("bird", root=tmp_path, split="dev")


def test_a_file_that_is_not_sqlite_is_a_layout_problem(tmp_path: Path) -> None:
    write_bird(tmp_path)
    (tmp_path / "dev/dev_databases/shop/shop.sqlite").write_bytes(b"this is not a database file")
    with pytest.raises(DataError, match="db_id 'shop'.*not a SQLite 3 database.*example 13"):
        load_examples("bird", root=tmp_path, split="dev")


def test_drop_failing_gold_drops_with_a_count_or_keeps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, private_cache: Path
) -> None:
    records = [*BIRD_DEV, {"question_id": 30, "db_id": "music", "question": "broken", "SQL": "SELECT nope FROM singer"}]
    write_bird(tmp_path, records=records)
    kept = load_examples("bird", root=tmp_path, split="dev", drop_failing_gold=False)
    assert [e.id for e in kept] == ["10", "11", "12", "13", "30"]
    with caplog.at_level(logging.WARNING, logger="eval.data.loaders"):
        dropped = load_examples("bird", root=tmp_path, split="dev", drop_failing_gold=True)
    assert [e.id for e in dropped] == ["10", "11", "12", "13"]
    assert "dropped 1 of 5 examples whose gold SQL fails to execute: 30 (no_such_column" in caplog.text
    # the verdicts are cached with the gold references, keyed by the database's hash
    entries = {
        sql: e
        for f in (private_cache / "eval-data").glob("gold-*.json")
        for sql, e in json.loads(f.read_text()).items()
    }
    assert entries["SELECT nope FROM singer"]["executes"].startswith("no_such_column")
    assert entries["SELECT COUNT(*) FROM singer"]["executes"] is None
    assert load_examples("bird", root=tmp_path, split="dev", drop_failing_gold=True) == dropped


def test_gold_references_are_cached_on_disk_and_a_broken_cache_is_ignored(bird_root: Path, private_cache: Path) -> None:
    first = load_examples("bird", root=bird_root, split="dev")
    files = sorted((private_cache / "eval-data").glob("gold-*.json"))
    assert len(files) >= 2  # one per database (music, shop)
    cached = {sql for f in files for sql in json.loads(f.read_text())}
    assert {e.gold_sql for e in first} <= cached
    for f in files:
        f.write_text("{not json")
    assert load_examples("bird", root=bird_root, split="dev") == first


def test_kind_and_root_errors(bird_root: Path) -> None:
    with pytest.raises(UnknownNameError, match="did you mean 'bird'"):
        load_examples("brid", root=bird_root)
    with pytest.raises(ConfigError, match="data.root is required"):
        load_examples("bird", root=None)


# ---------------------------------------------------------------------------- Spider


def _write_spider(root: Path) -> Path:
    root.mkdir(parents=True)
    make_music_db(root / "database" / "music" / "music.sqlite")
    make_shop_db(root / "database" / "shop" / "shop.sqlite")
    (root / "tables.json").write_text("[]")
    (root / "train_spider.json").write_text(
        json.dumps(
            [
                {"db_id": "music", "question": "Count singers.", "query": "SELECT count(*) FROM singer"},
                {
                    "db_id": "music",
                    "question": "Oldest singer?",
                    "query": "SELECT name FROM singer ORDER BY age DESC LIMIT 1",
                },
            ]
        )
    )
    (root / "train_others.json").write_text(
        json.dumps(
            [
                {"db_id": "shop", "question": "Prices?", "query": "SELECT price FROM item"},
            ]
        )
    )
    (root / "dev.json").write_text(
        json.dumps(
            [
                {
                    "db_id": "shop",
                    "question": "How many items?",
                    "query": "SELECT count(*) FROM item",
                    "query_toks": ["x"],
                },
            ]
        )
    )
    return root


def test_spider_layout(tmp_path: Path) -> None:
    root = _write_spider(tmp_path / "spider")
    train = load_examples("spider", root=root, split="train")
    assert [(e.id, e.db_id) for e in train] == [("0", "music"), ("1", "music"), ("2", "shop")]
    assert train[1].gold_columns == ("singer.age", "singer.name") and train[1].evidence == ""
    assert [e.difficulty for e in train] == ["easy", "medium", "easy"]  # Spider's hardness rules
    dev = load_examples("spider", root=root, split="dev")
    assert len(dev) == 1 and dev[0].gold_tables == ("item",) and dev[0].split == "dev"


def test_spider_train_others_alone_loads_with_a_warning(tmp_path: Path) -> None:
    root = _write_spider(tmp_path / "spider")
    (root / "train_spider.json").unlink()
    with pytest.warns(UserWarning, match="no train_spider.json, training on train_others.json alone"):
        train = load_examples("spider", root=root, split="train")
    assert [e.db_id for e in train] == ["shop"]


def test_spider_missing_pieces(tmp_path: Path) -> None:
    root = _write_spider(tmp_path / "spider")
    shutil.rmtree(root / "database")
    (root / "dev.json").unlink()
    with pytest.raises(DataError) as info:
        load_examples("spider", root=root, split="dev")
    assert "missing questions file for split 'dev'; looked for dev.json" in str(info.value)
    assert "missing databases folder; looked for dev_database, database" in str(info.value)


# ----------------------------------------------------------------------------- JSONL


def test_jsonl_file_and_folder(tmp_path: Path) -> None:
    make_music_db(tmp_path / "music.sqlite")
    make_shop_db(tmp_path / "databases" / "shop" / "shop.sqlite")
    lines = [
        {"db_id": "music", "question": "Count singers.", "sql": "SELECT COUNT(*) FROM singer", "difficulty": "Simple"},
        {"id": "q-7", "db_id": "shop", "question": "Cheapest item?", "evidence": "price is text"},  # no SQL: allowed
    ]
    (tmp_path / "dev.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")
    by_folder = load_examples("jsonl", root=tmp_path, split="dev")
    by_file = load_examples("jsonl", root=tmp_path / "dev.jsonl", split="dev")
    assert by_folder == by_file
    first, second = by_folder
    assert (first.id, first.difficulty, first.gold_tables) == ("0", "simple", ("singer",))
    assert (second.id, second.gold_sql, second.gold_tables, second.evidence) == ("q-7", "", (), "price is text")
    assert Path(second.db_path).name == "shop.sqlite"


def test_jsonl_problems(tmp_path: Path) -> None:
    make_music_db(tmp_path / "music.sqlite")
    (tmp_path / "dev.jsonl").write_text(
        '{"db_id": "music", "question": "ok", "sql": "SELECT 1"}\n{not json}\n'
        '{"db_id": "nowhere", "question": "q"}\n{"db_id": "music", "question": "q", "sql": "SELECT FROM WHERE ("}\n'
    )
    with pytest.raises(DataError) as info:
        load_examples("jsonl", root=tmp_path, split="dev")
    message = str(info.value)
    assert "3 problem(s)" in message
    assert "dev.jsonl:2: not valid JSON" in message
    assert "db_id 'nowhere' has no database" in message and "(example 2)" in message
    assert "dev.jsonl:4 (example 3): gold SQL does not parse" in message


def test_jsonl_is_read_line_by_line(tmp_path: Path) -> None:
    """A limit stops before a broken line further down (the rest is never read); a line
    separator inside a JSON string (U+2028, valid JSON) stays inside its line; ids are line
    numbers, blank lines counted, and keep counting across files."""
    make_music_db(tmp_path / "music.sqlite")
    rows = [
        {"db_id": "music", "question": f"Count singers\u2028{i}.", "sql": "SELECT COUNT(*) FROM singer"}
        for i in range(3)
    ]
    text = "\n".join(json.dumps(r, ensure_ascii=False) for r in rows)
    (tmp_path / "dev.jsonl").write_text(text + "\n\n{cut off")
    head = load_examples("jsonl", root=tmp_path, split="dev", limit=3)
    assert [e.id for e in head] == ["0", "1", "2"] and head[2].question == "Count singers\u20282."
    with pytest.raises(DataError, match=r"dev\.jsonl:5: not valid JSON"):
        load_examples("jsonl", root=tmp_path, split="dev")
    assert [e.id for e in load_examples("jsonl", root=tmp_path, split="dev", limit=1, offset=2)] == ["2"]


# ----------------------------------------------------------------- config and command


def test_load_from_config_and_compose(bird_root: Path) -> None:
    data = compose_data(["data=bird", f"data.root={bird_root}", "data.split=dev", "data.limit=3"])
    assert data == {
        "kind": "bird",
        "root": str(bird_root),
        "dsn": None,
        "split": "dev",
        "eval_split": "dev",
        "drop_failing_gold": True,
        "limit": 3,
        "offset": 0,
        "difficulties": None,
        "mixture": [],
        "train_ids": None,
        "eval_limit": None,
        "ex_metric": "ex",
    }
    assert [e.id for e in load_from_config(data, "train")] == ["10", "11", "12"]
    assert len(load_from_config(data, "eval")) == 4
    assert compose_data([])["kind"] == "minibird"
    with pytest.raises(ConfigError, match="data/spidr"):
        compose_data(["data=spidr"])


def test_every_data_config_has_the_same_keys() -> None:
    keys = {"kind", "root", "split", "eval_split", "drop_failing_gold", "limit", "offset", "difficulties", "mixture"}
    keys |= {"train_ids", "eval_limit", "ex_metric", "dsn"}  # dsn: null = the files
    for kind in ("minibird", "bird", "spider", "jsonl"):
        data = compose_data([f"data={kind}"])
        assert set(data) == keys and data["kind"] == kind and data["root"] is None
        assert data["ex_metric"] == ("spider" if kind == "spider" else "ex")  # each dataset's official EX


def test_stats_output_counts_per_database_and_difficulty(bird_root: Path) -> None:
    text = stats_text(
        {
            "kind": "bird",
            "root": str(bird_root),
            "split": "dev",
            "eval_split": "dev",
            "drop_failing_gold": False,
            "limit": None,
            "eval_limit": None,
        }
    )
    assert "split dev: 4 examples, 2 databases" in text
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines() if line.startswith("  ")}
    assert rows["music"] == ["2", "1", "3"] and rows["shop"] == ["1", "0", "1"]


@pytest.mark.slow
def test_stats_command_runs_from_any_directory(bird_root: Path, tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "eval.data",
            "stats",
            "data=bird",
            f"data.root={bird_root}",
            "data.split=dev",
            "data.eval_split=dev",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "split dev: 4 examples, 2 databases" in out.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "eval.data", "stats", "data=bird", f"data.root={tmp_path / 'none'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_train_ids_narrow_the_training_split(bird_root: Path, tmp_path: Path) -> None:
    """``data.train_ids`` (the RL filter's file, or the user's): the split's order, then the limit;
    a file from another split, an empty list or a malformed file is refused by name."""
    data = compose_data(["data=bird", f"data.root={bird_root}", "data.split=dev"])
    ids = tmp_path / "ids.json"
    ids.write_text(json.dumps({"ids": ["12", "10"], "questions": 3}))
    assert [e.id for e in load_from_config({**data, "train_ids": str(ids)}, "train")] == ["10", "12"]
    assert [e.id for e in load_from_config({**data, "train_ids": str(ids), "limit": 1}, "train")] == ["10"]
    assert len(load_from_config({**data, "train_ids": str(ids)}, "eval")) == 4  # held-out data is never narrowed
    ids.write_text(json.dumps(["10", "99"]))
    with pytest.raises(ConfigError, match=r"data.train_ids=.*1 of its 2 ids are not in this split \(e.g. 99\)"):
        load_from_config({**data, "train_ids": str(ids)}, "train")
    ids.write_text("[]")
    with pytest.raises(ConfigError, match="lists no question"):
        load_from_config({**data, "train_ids": str(ids)}, "train")
    ids.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read a JSON list of question ids"):
        load_from_config({**data, "train_ids": str(ids)}, "train")
