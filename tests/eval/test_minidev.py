"""BIRD as its official tools read it, on files in MINIDEV's real layout: the question file
repeats ids 137 and 138 (the repeats load renamed ``<id>@<position>``), and a
``predict_mini_dev_*.json`` file is paired by position, as ``evaluation_ex.py`` pairs it:
the published files are keyed 0..499 while mini-dev's question ids are not positions."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.data import load_examples
from eval.data.__main__ import stats_text
from eval.evaluate import evaluate_predictions
from tests.eval.conftest import make_music_db, make_shop_db, quiet, write_jsonl
from tools.errors import DataError
from training.config import compose_tree

REPO = Path(__file__).resolve().parents[2]
SEP = "\t----- bird -----\t"


def _q(qid: int, db: str, question: str, sql: str, difficulty: str) -> dict:
    return {"question_id": qid, "db_id": db, "question": question, "evidence": "", "SQL": sql, "difficulty": difficulty}


SPAIN = _q(137, "music", "Name the singers from Spain.", "SELECT name FROM singer WHERE country = 'Spain'", "simple")
VENUES = _q(
    138, "music", "Which venues hosted a 2021 concert?", "SELECT venue FROM concert WHERE year = '2021'", "moderate"
)
# mini_dev_sqlite.json's shape: ids are not positions, and 137/138 come again three places
# later (the real file: positions 484/487 and 485/488)
MINIDEV = [
    _q(1471, "shop", "List every item.", "SELECT * FROM item", "simple"),
    _q(1472, "shop", "Which items have a price?", "SELECT label FROM item WHERE price IS NOT NULL", "moderate"),
    _q(5, "music", "How many singers are there?", "SELECT COUNT(*) FROM singer", "simple"),
    SPAIN,
    VENUES,
    _q(2, "music", "Which countries do singers come from?", "SELECT DISTINCT country FROM singer", "challenging"),
    dict(SPAIN),
    dict(VENUES),
    _q(3, "shop", "Label of the item priced 3?", "SELECT label FROM item WHERE price = '3'", "moderate"),
]
# one answer per position, in the published files' format; the outcome each should get
ANSWERS = [
    ("shop", "SELECT * FROM item", "match"),
    ("shop", "SELECT label FROM item", "mismatch"),
    ("music", "SELECT COUNT(singer_id) FROM singer", "match"),
    ("music", "SELECT name FROM singer WHERE country = 'Spain'", "match"),
    ("music", "SELECT venue FROM concert", "mismatch"),
    ("music", "SELECT DISTINCT country FROM singer WHERE country IS NOT NULL", "mismatch"),
    ("music", "SELECT name FROM singer WHERE country = 'Brazil'", "mismatch"),  # the repeat of 137, answered wrong
    ("music", "SELECT venue FROM concert WHERE year = '2021'", "match"),
    ("shop", "SELECT label FROM item WHERE price = '3'", "match"),
]
IDS = ["1471", "1472", "5", "137", "138", "2", "137@6", "138@7", "3"]


def write_minidev(root: Path, questions: list[dict] = MINIDEV) -> Path:
    """MINIDEV/{mini_dev_sqlite.json, mini_dev_sqlite_gold.sql, dev_tables.json, dev_databases/}."""
    folder = root / "MINIDEV"
    folder.mkdir(parents=True)
    (folder / "mini_dev_sqlite.json").write_text(json.dumps(questions, indent=4))
    (folder / "mini_dev_sqlite_gold.sql").write_text("".join(f"{q['SQL']}\t{q['db_id']}\n" for q in questions))
    (folder / "dev_tables.json").write_text("[]")
    make_music_db(folder / "dev_databases" / "music" / "music.sqlite")
    make_shop_db(folder / "dev_databases" / "shop" / "shop.sqlite")
    return folder


def write_predict(path: Path, answers: list[tuple[str, str, str]] = ANSWERS, keys: list[str] | None = None) -> Path:
    """A predict file as BIRD's scripts write it: keys "0".."n-1", values SQL<sep>db_id."""
    keys = keys or [str(i) for i in range(len(answers))]
    path.write_text(json.dumps({k: f"{sql}{SEP}{db}" for k, (db, sql, _) in zip(keys, answers, strict=True)}, indent=4))
    return path


def outcomes(out: Path) -> dict[str, str]:
    return {r["id"]: r["outcome"] for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}


# ------------------------------------------------------------------ item 1: repeated ids


def test_minidev_question_file_loads_with_repeated_ids_renamed_by_position(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = write_minidev(tmp_path)
    with caplog.at_level(logging.WARNING, logger="eval.data.loaders"):
        examples = load_examples("bird", root, "dev")
    assert [e.id for e in examples] == IDS
    assert examples[6].question == examples[3].question  # the repeat is kept, in its place
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "2 question id(s) repeat" in warning and "position" in warning
    assert "137 -> 137@6 (" in warning and "mini_dev_sqlite.json[6]; 137 stays " in warning
    assert "mini_dev_sqlite.json[3])" in warning and "138 -> 138@7" in warning
    from eval.data.loaders import load_split

    loaded = load_split("bird", root, "dev")  # stable: the same ids every time
    assert [e.id for e in loaded.examples] == IDS
    assert [(s.position, s.id, s.original_id) for s in loaded.order][6:8] == [(6, "137@6", "137"), (7, "138@7", "138")]
    card = stats_text({"kind": "bird", "root": str(root), "split": "dev", "limit": None})
    assert "split dev: 9 examples, 2 databases" in card
    assert "2 repeated question id(s) renamed <id>@<position>" in card
    assert "\n    137 -> 137@6 (" in card and "\n    138 -> 138@7 (" in card


def test_repeated_ids_stay_an_error_where_predictions_pair_by_id(tmp_path: Path) -> None:
    make_music_db(tmp_path / "music.sqlite")
    rows = [{"id": "a", "db_id": "music", "question": "q", "sql": "SELECT 1"}] * 2
    write_jsonl(tmp_path / "dev.jsonl", rows)
    with pytest.raises(DataError, match="dev.jsonl:2: example id a already used at .*dev.jsonl:1; ids must be unique"):
        load_examples("jsonl", tmp_path, "dev")


# ------------------------------------------------------------ item 2: pairing by position


def test_a_published_style_predict_file_pairs_by_position(tmp_path: Path) -> None:
    """Without the repeats (this is the pairing alone): keys 0..6 are positions, and keys 2,
    3, 5 are also question ids of other questions - read as ids, key 3 lands on a shop
    question with a music answer."""
    keep = [0, 1, 2, 3, 4, 5, 8]
    root = write_minidev(tmp_path, [MINIDEV[i] for i in keep])
    preds = write_predict(tmp_path / "predict_mini_dev_gpt_sqlite.json", [ANSWERS[i] for i in keep])
    summary = evaluate_predictions(
        load_examples("bird", root, "dev"), preds, tmp_path / "out", say=quiet, progress=False
    )
    assert outcomes(tmp_path / "out") == {IDS[i]: ANSWERS[i][2] for i in keep}
    assert summary["outcomes"]["match"] == 4 and summary["n"] == 7


def test_minidev_predictions_with_repeated_ids_score_every_position(tmp_path: Path) -> None:
    root = write_minidev(tmp_path)
    preds = write_predict(tmp_path / "predict_mini_dev.json")
    s = evaluate_predictions(load_examples("bird", root, "dev"), preds, tmp_path / "out", say=quiet, progress=False)
    assert outcomes(tmp_path / "out") == dict(zip(IDS, [a[2] for a in ANSWERS], strict=True))
    assert (s["n"], s["outcomes"]["match"], s["missing"]) == (9, 5, 0)
    # keyed by the file's own question ids, 137 and 138 twice: every value is read, in order
    body = ",\n".join(
        f"{json.dumps(str(q['question_id']))}: {json.dumps(a[1] + SEP + a[0])}"
        for q, a in zip(MINIDEV, ANSWERS, strict=True)
    )
    by_ids = tmp_path / "by_ids.json"
    by_ids.write_text("{\n" + body + "\n}")
    evaluate_predictions(load_examples("bird", root, "dev"), by_ids, tmp_path / "o2", say=quiet, progress=False)
    assert outcomes(tmp_path / "o2") == outcomes(tmp_path / "out")
    # the project's JSONL still pairs by id, renamed ids included
    rows = [
        {"question_id": "137@6", "db_id": "music", "sql": SPAIN["SQL"]},
        {"question_id": 137, "db_id": "music", "sql": "SELECT 1"},
    ]
    evaluate_predictions(
        load_examples("bird", root, "dev"),
        write_jsonl(tmp_path / "p.jsonl", rows),
        tmp_path / "o3",
        say=quiet,
        progress=False,
    )
    got = outcomes(tmp_path / "o3")
    assert (got["137@6"], got["137"], got["138"]) == ("match", "mismatch", "missing")


def test_a_wrong_predict_file_is_named_by_position(tmp_path: Path) -> None:
    root = write_minidev(tmp_path)
    examples = load_examples("bird", root, "dev")
    wrong_db = [*ANSWERS]
    wrong_db[1] = ("music", "SELECT 1", "")
    with pytest.raises(DataError) as err:
        evaluate_predictions(examples, write_predict(tmp_path / "a.json", wrong_db), tmp_path / "a", say=quiet)
    assert "1 prediction(s) name another database" in str(err.value)
    assert "position 1 (key '1'): the prediction is for db_id 'music' but question 1472 at that position" in str(
        err.value
    )
    assert "is on db_id 'shop'" in str(err.value)
    longer = [*ANSWERS, ("shop", "SELECT 1", "")]
    with pytest.raises(DataError, match="has 10 predictions but the question file has 9 questions"):
        evaluate_predictions(examples, write_predict(tmp_path / "b.json", longer), tmp_path / "b", say=quiet)
    swapped = [ANSWERS[1], ANSWERS[0], *ANSWERS[2:]]
    keys = ["1", "0", *map(str, range(2, 9))]
    with pytest.raises(
        DataError,
        match=r"not in the question file's order.*\n  position 0: key '1', but the question there has id 1471",
    ):
        evaluate_predictions(examples, write_predict(tmp_path / "c.json", swapped, keys), tmp_path / "c", say=quiet)
    said: list[str] = []
    s = evaluate_predictions(
        examples, write_predict(tmp_path / "d.json", ANSWERS[:7]), tmp_path / "d", say=said.append, progress=False
    )
    assert s["missing"] == 2 and outcomes(tmp_path / "d")["138@7"] == "missing"
    assert any(
        "has 7 predictions for the 9 questions of the question file: positions 7..8 have none" in line for line in said
    )


def test_eval_limit_pairs_with_the_file_positions_and_the_run_predict_json_reads_back(tmp_path: Path) -> None:
    """eval.run on a seeded subset still pairs by the question file's positions; its
    predict.json (keyed by id, out of position) is refused by name; a full run's reads back."""
    from eval.run import run

    root = write_minidev(tmp_path)
    preds = write_predict(tmp_path / "predict_mini_dev.json")
    expected = dict(zip(IDS, [a[2] for a in ANSWERS], strict=True))

    def score(path: Path, out: Path, *extra: str) -> dict:
        overrides = [f"predictions={path}", "data=bird", f"data.root={root}", f"eval.out_dir={out}", *extra]
        return run(compose_tree("eval", overrides), {o.split("=")[0] for o in overrides}, quiet)

    score(preds, tmp_path / "subset", "eval.limit=4")
    got = outcomes(tmp_path / "subset")
    assert len(got) == 4 and got == {i: expected[i] for i in got}
    answered = [json.loads(line) for line in (tmp_path / "subset" / "records.jsonl").read_text().splitlines()]
    assert all(r["sql"] == ANSWERS[IDS.index(r["id"])][1] for r in answered)  # the answer at its file position
    with pytest.raises(DataError, match="not in the question file's order"):
        score(tmp_path / "subset" / "predict.json", tmp_path / "again")
    score(preds, tmp_path / "full")
    score(tmp_path / "full" / "predict.json", tmp_path / "back")
    assert outcomes(tmp_path / "back") == outcomes(tmp_path / "full") == expected


@pytest.mark.slow
def test_the_command_a_user_types_scores_minidev(tmp_path: Path) -> None:
    """``python -m eval.run predictions=predict_mini_dev_….json data=bird data.root=… data.split=dev``."""
    root = write_minidev(tmp_path)
    preds = write_predict(tmp_path / "predict_mini_dev_gpt-4_SQLite.json")
    proc = subprocess.run(
        [sys.executable, "-m", "eval.run", f"predictions={preds}", "data=bird", f"data.root={root}", "data.split=dev"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "137 -> 137@6" in proc.stdout + proc.stderr  # the loader's warning
    out = tmp_path / "runs" / "eval" / "predict_mini_dev_gpt-4_SQLite-bird-dev-greedy"
    assert outcomes(out) == dict(zip(IDS, [a[2] for a in ANSWERS], strict=True))
    assert "EX 55.6%" in proc.stdout  # 5 of 9
