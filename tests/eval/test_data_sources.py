"""Training questions from several datasets: SynSQL-2.5M in its release layout, the
difficulty filter over BIRD's, Spider's and SynSQL's labels, a mixture whose ids stay
unique, and disjoint parts of one split (``offset`` + ``limit``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.data import DataSource, load_examples, load_from_config, load_sources
from eval.data.selection import training_sources
from tests.eval.conftest import make_music_db
from tools.errors import ConfigError, DataError

# data.json entries as SynSQL-2.5M writes them (OmniSQL's release): no id, sql_complexity
SYNSQL = [
    ("Simple", "How many singers are there?", "SELECT COUNT(*) FROM singer", ""),
    (
        "Moderate",
        "Which singers from Brazil performed after 2018?",
        "SELECT DISTINCT s.name FROM singer s JOIN concert c ON c.singer_id = s.singer_id "
        "WHERE s.country = 'Brazil' AND c.year > '2018'",
        "Performed after 2018 refers to year > '2018'.",
    ),
    (
        "Complex",
        "How many concerts did each singer give, most first?",
        "SELECT s.name, COUNT(c.concert_id) AS n FROM singer s LEFT JOIN concert c ON c.singer_id = s.singer_id "
        "GROUP BY s.name ORDER BY n DESC",
        "",
    ),
    (
        "Highly Complex",
        "Which singers gave more concerts than the average singer?",
        "WITH counts AS (SELECT singer_id, COUNT(*) AS n FROM concert GROUP BY singer_id) "
        "SELECT s.name FROM singer s JOIN counts ON counts.singer_id = s.singer_id "
        "WHERE counts.n > (SELECT AVG(n) FROM counts)",
        "",
    ),
]


def write_synsql(root: Path) -> Path:
    """A SynSQL-2.5M folder: data.json, tables.json and databases/<db_id>/<db_id>.sqlite."""
    folder = root / "SynSQL-2.5M"
    make_music_db(folder / "databases" / "music_festival" / "music_festival.sqlite")
    entries = [
        {
            "db_id": "music_festival",
            "sql_complexity": level,
            "question_style": "Formal",
            "question": question,
            "external_knowledge": knowledge,
            "cot": "Count the rows of singer.",
            "sql": sql,
        }
        for level, question, sql, knowledge in SYNSQL
    ]
    (folder / "data.json").write_text(json.dumps(entries, indent=2))
    (folder / "tables.json").write_text("[]")
    return folder


def write_jsonl(root: Path, rows: list[dict]) -> Path:
    make_music_db(root / "music.sqlite")
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def test_synsql_reads_its_release_layout(tmp_path: Path) -> None:
    folder = write_synsql(tmp_path)
    for root in (folder, tmp_path):  # the release folder, or the folder holding SynSQL-2.5M/
        examples = load_examples("synsql", root, "train", drop_failing_gold=True)
        assert [e.id for e in examples] == ["0", "1", "2", "3"]  # positions in data.json
        assert [e.difficulty for e in examples] == ["simple", "moderate", "complex", "highly complex"]
    first, second = examples[0], examples[1]
    assert first.db_path == str(folder.resolve() / "databases" / "music_festival" / "music_festival.sqlite")
    assert second.evidence == "Performed after 2018 refers to year > '2018'."
    assert second.gold_tables == ("concert", "singer")
    assert "singer.country" in second.gold_columns and "concert.year" in second.gold_columns
    kept = DataSource("synsql", str(folder), difficulties=("moderate", "challenging")).load()
    assert [e.difficulty for e in kept] == ["moderate", "complex", "highly complex"]  # App. A.2's three levels


def test_synsql_refuses_other_splits_and_a_missing_databases_folder(tmp_path: Path) -> None:
    folder = write_synsql(tmp_path)
    with pytest.raises(DataError, match="one split, train, not 'dev'"):
        load_examples("synsql", folder, "dev")
    (folder / "databases" / "music_festival" / "music_festival.sqlite").unlink()
    (folder / "databases" / "music_festival").rmdir()
    (folder / "databases").rmdir()
    with pytest.raises(DataError, match=r"missing databases folder .*databases/<db_id>/<db_id>.sqlite"):
        load_examples("synsql", folder, "train")


def test_a_limit_reads_only_the_head_of_synsqls_data_json(tmp_path: Path) -> None:
    """data.json is read one entry at a time: with a limit, a file whose tail is cut off (as a
    download can be) still gives its first entries, which shows the rest was never parsed;
    without one the cut is named with the entry it came after, and earlier errors stop the
    read at the same place."""
    folder = write_synsql(tmp_path)
    data = folder / "data.json"
    whole = data.read_text()
    data.write_text(whole[: whole.index('"Complex"') + 5])  # cut inside the third entry
    head = load_examples("synsql", folder, "train", limit=2)
    assert [e.id for e in head] == ["0", "1"] and head[1].evidence.startswith("Performed after 2018")
    with pytest.raises(DataError, match=r"data\.json: cannot read the questions file after entry 2"):
        load_examples("synsql", folder, "train")
    data.write_text(json.dumps({"entries": []}))
    with pytest.raises(DataError, match="expected a JSON list of question objects, found an object"):
        load_examples("synsql", folder, "train", limit=2)


def test_the_difficulty_filter_maps_each_datasets_labels_onto_birds_scale(tmp_path: Path) -> None:
    rows = [
        {"id": str(i), "db_id": "music", "question": f"q{i}", "sql": "SELECT name FROM singer", "difficulty": d}
        for i, d in enumerate(["easy", "medium", "hard", "extra", "simple", "challenging"])
    ]
    root = write_jsonl(tmp_path, rows)
    source = DataSource("jsonl", str(root))
    labels = [e.difficulty for e in DataSource("jsonl", str(root), difficulties=("moderate", "challenging")).load()]
    assert labels == ["medium", "hard", "extra", "challenging"]
    assert [e.difficulty for e in load_sources([source])] == [r["difficulty"] for r in rows]  # no filter
    extra_only = DataSource("jsonl", str(root), difficulties=("extra",)).load()  # a dataset's own label
    assert [e.difficulty for e in extra_only] == ["extra"]
    with pytest.raises(ConfigError, match=r"unknown difficulty label\(s\) \['modrate'\]; known labels: simple"):
        DataSource.from_mapping({"kind": "jsonl", "root": str(root), "difficulties": ["modrate"]}, "data")
    with pytest.raises(DataError, match=r"keeps none of its 6 examples \(their labels: challenging, easy"):
        DataSource("jsonl", str(root), difficulties=("highly_complex",)).load()


def test_a_mixture_concatenates_its_sources_with_unique_ids(tmp_path: Path) -> None:
    """minibird and a JSONL set both number questions 0, 1, ...: prefixed, they stay apart."""
    rows = [
        {"id": str(i), "db_id": "music", "question": f"q{i}", "sql": "SELECT name FROM singer", "difficulty": d}
        for i, d in enumerate(["simple", "moderate", "challenging"])
    ]
    root = write_jsonl(tmp_path / "mine", rows)
    data = {
        "kind": "minibird",
        "root": None,
        "split": "train",
        "limit": 10,
        "difficulties": ["moderate", "challenging"],
        "mixture": [{"kind": "jsonl", "root": str(root)}],  # inherits split and the difficulty filter
    }
    examples = load_from_config(data, "train")
    ids = [e.id for e in examples]
    minibird = [e for e in load_examples("minibird", None, "train", True, 10) if e.difficulty != "simple"]
    assert ids == [f"minibird/{e.id}" for e in minibird] + ["jsonl/1", "jsonl/2"]
    assert len(set(ids)) == len(ids)
    assert {e.difficulty for e in examples} == {"moderate", "challenging"}
    ids_file = tmp_path / "ids.json"
    ids_file.write_text(json.dumps({"ids": ["jsonl/2", ids[0]]}))  # what the RL filter writes
    narrowed = load_from_config({**data, "train_ids": str(ids_file)}, "train")
    assert [e.id for e in narrowed] == [ids[0], "jsonl/2"]
    twice = {**data, "mixture": [{"kind": "jsonl", "root": str(root)}, {"kind": "jsonl", "root": str(root)}]}
    with pytest.raises(ConfigError, match=r"several sources are named \['jsonl'\].*distinct name"):
        training_sources(twice)
    named = {
        **data,
        "mixture": [{"kind": "jsonl", "root": str(root)}, {"kind": "jsonl", "root": str(root), "name": "b"}],
    }
    assert [e.id for e in load_from_config(named, "train")][-2:] == ["b/1", "b/2"]
    with pytest.raises(ConfigError, match=r"data.mixture\[0\]: unknown key\(s\) \['weight'\]"):
        training_sources({**data, "mixture": [{"kind": "jsonl", "root": str(root), "weight": 2}]})


def test_offset_and_limit_take_disjoint_parts_of_a_split() -> None:
    first = load_examples("minibird", None, "train", True, limit=30)
    rest = load_examples("minibird", None, "train", True, offset=30)
    whole = load_examples("minibird", None, "train", True)
    assert not {e.id for e in first} & {e.id for e in rest}
    assert [e.id for e in first + rest] == [e.id for e in whole]  # ids are those of the whole file
