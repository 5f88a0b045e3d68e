"""The bundled benchmark: determinism, checked gold SQL, disjoint splits, and its noise.

Noise kinds are detected by querying the built dev databases (and reading their
description CSVs), not by trusting the generator's own description of them.
"""

from __future__ import annotations

import csv
import difflib
import io
import json
import re
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from eval.data import load_examples, minibird
from eval.data.minibird import builder as build_module
from eval.data.minibird.questions import GenerationError
from rex.sql import referenced_schema

SPLITS = ("train", "dev")


def _questions(root: Path, split: str) -> list[dict]:
    return json.loads((root / split / f"{split}.json").read_text(encoding="utf-8"))


def _db_paths(root: Path, split: str) -> dict[str, Path]:
    folder = root / split / f"{split}_databases"
    return {p.name: p / f"{p.name}.sqlite" for p in sorted(folder.iterdir())}


def _connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)


def _columns(conn: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(table, column, declared type) for every column."""
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
    return [(t, r[1], r[2].upper()) for t in tables for r in conn.execute(f"PRAGMA table_info({t})")]


def _read_csv(path: Path) -> list[dict[str, str]]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("cp1252")
    return list(csv.DictReader(io.StringIO(text)))


# ------------------------------------------------------------------------ structure


@pytest.mark.slow
def test_two_builds_are_byte_identical(minibird_root: Path, tmp_path: Path) -> None:
    second = minibird.build(tmp_path / "b")
    files_a = sorted(p.relative_to(minibird_root) for p in minibird_root.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    assert files_a == files_b
    different = [str(f) for f in files_a if (minibird_root / f).read_bytes() != (second / f).read_bytes()]
    assert different == []
    manifest = json.loads((minibird_root / "MANIFEST.json").read_text())
    assert len(manifest["files"]) == len(files_a) - 1 and manifest["version"] == minibird.version()
    assert sum(p.stat().st_size for p in minibird_root.rglob("*") if p.is_file()) < 8_000_000


def test_bird_layout_sizes_and_splits(minibird_root: Path) -> None:
    train, dev = _questions(minibird_root, "train"), _questions(minibird_root, "dev")
    assert len(train) >= 600 and len(dev) >= 200
    train_dbs, dev_dbs = _db_paths(minibird_root, "train"), _db_paths(minibird_root, "dev")
    assert len(train_dbs) + len(dev_dbs) >= 8 and len(dev_dbs) >= 2
    assert not set(train_dbs) & set(dev_dbs)
    assert {q["db_id"] for q in train} == set(train_dbs) and {q["db_id"] for q in dev} == set(dev_dbs)
    for split in SPLITS:
        tables = json.loads((minibird_root / split / f"{split}_tables.json").read_text())
        assert sorted(t["db_id"] for t in tables) == sorted(_db_paths(minibird_root, split))
        for entry in tables:
            assert len(entry["column_names_original"]) == len(entry["column_types"]) and entry["foreign_keys"]
    for path in {**train_dbs, **dev_dbs}.values():
        conn = _connect(path)
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        assert 3 <= len(tables) <= 8
        assert all(any(r[5] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables)  # every table has a PK
        assert sum(len(conn.execute(f"PRAGMA foreign_key_list({t})").fetchall()) for t in tables) >= 2
        assert max(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables) >= 2000
        descriptions = path.parent / "database_description"
        assert sorted(p.stem for p in descriptions.glob("*.csv")) == sorted(tables)
        conn.close()


def test_questions_have_bird_fields_and_difficulty_mix(minibird_root: Path) -> None:
    for split in SPLITS:
        questions = _questions(minibird_root, split)
        assert [q["question_id"] for q in questions] == list(range(len(questions)))
        assert all(set(q) == {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"} for q in questions)
        assert len({(q["db_id"], q["question"]) for q in questions}) == len(questions)
        mix = Counter(q["difficulty"] for q in questions)
        assert set(mix) == {"simple", "moderate", "challenging"}
        for label, share in (("simple", 0.56), ("moderate", 0.29), ("challenging", 0.15)):
            assert abs(mix[label] / len(questions) - share) < 0.05, (split, mix)
        assert sum(bool(q["evidence"]) for q in questions) / len(questions) > 0.3


def test_every_gold_sql_executes_and_is_non_empty(minibird_root: Path) -> None:
    for split in SPLITS:
        conns = {db: _connect(p) for db, p in _db_paths(minibird_root, split).items()}
        for q in _questions(minibird_root, split):
            rows = conns[q["db_id"]].execute(q["SQL"]).fetchall()
            assert rows and any(v is not None for row in rows for v in row), (split, q["question_id"], q["SQL"])
        for conn in conns.values():
            conn.close()


def test_gold_sql_covers_the_constructs(minibird_root: Path) -> None:
    sqls = [q["SQL"].upper() for split in SPLITS for q in _questions(minibird_root, split)]
    for construct in (
        " JOIN ",
        "COUNT(",
        "AVG(",
        "SUM(",
        "GROUP BY",
        "HAVING",
        "ORDER BY",
        "LIMIT 1",
        "(SELECT",
        "CASE WHEN",
        "CAST(",
        "AS REAL",
        "STRFTIME(",
        "SUBSTR(",
        "DISTINCT",
        "IS NULL",
        "JULIANDAY(",
    ):
        assert sum(construct in s for s in sqls) >= 3, construct


def test_easy_single_table_questions_are_plentiful(minibird_root: Path) -> None:
    dev = load_examples("minibird", root=minibird_root, split="dev")
    easy = [e for e in dev if e.difficulty == "simple" and len(e.gold_tables) == 1]
    assert len(easy) / len(dev) >= 0.4
    counts = [e for e in easy if re.match(r"SELECT COUNT\(\*\) FROM \w+( WHERE \w+ = '[^']*')?$", e.gold_sql)]
    assert len(counts) >= 10


@pytest.mark.slow
def test_gold_tables_and_columns_present(minibird_root: Path) -> None:
    for split in SPLITS:
        examples = load_examples("minibird", root=minibird_root, split=split, drop_failing_gold=True)
        assert len(examples) == len(_questions(minibird_root, split))
        for ex in examples:
            conn = _connect(Path(ex.db_path))
            schema = {t.lower(): {c.lower() for tt, c, _ in _columns(conn) if tt == t} for t, *_ in _columns(conn)}
            conn.close()
            assert ex.gold_tables and set(ex.gold_tables) <= set(schema), ex
            assert all(c.split(".")[1] in schema[c.split(".")[0]] for c in ex.gold_columns), ex
            assert not referenced_schema(ex.gold_sql, {t: sorted(c) for t, c in schema.items()}).unresolved, ex
            if "COUNT(*)" not in ex.gold_sql or "WHERE" in ex.gold_sql:
                assert ex.gold_columns, ex


# -------------------------------------------------------------------- noise, queried


@pytest.fixture(scope="module")
def dev_dbs(minibird_root: Path) -> dict[str, Path]:
    return _db_paths(minibird_root, "dev")


DATE_PATTERNS = {
    "iso": r"^\d{4}-\d{2}-\d{2}( \d{2}:\d{2}(:\d{2})?)?$",
    "slash": r"^\d{2}/\d{2}/\d{4}$",
    "long": r"^[A-Z][a-z]+ \d{2}, \d{4}$",
}


def _text_values(conn: sqlite3.Connection, table: str, column: str) -> list[str]:
    return [r[0] for r in conn.execute(f"SELECT {column} FROM {table} WHERE {column} IS NOT NULL")]


def test_noise_dates_as_text_in_several_formats(dev_dbs: dict[str, Path]) -> None:
    formats = set()
    for path in dev_dbs.values():
        conn = _connect(path)
        for table, column, decl in _columns(conn):
            values = _text_values(conn, table, column)
            if decl != "TEXT" or not values or not all(isinstance(v, str) for v in values):
                continue
            for name, pattern in DATE_PATTERNS.items():
                if all(re.match(pattern, v) for v in values):
                    formats.add(name)
        conn.close()
    assert len(formats) >= 2, formats


def test_noise_percentages_as_fractions_and_as_0_to_100(dev_dbs: dict[str, Path]) -> None:
    fraction = hundred = None
    for path in dev_dbs.values():
        conn = _connect(path)
        for csv_path in sorted((path.parent / "database_description").glob("*.csv")):
            table = csv_path.stem
            for row in _read_csv(csv_path):
                text = (row["column_description"] + " " + row["column_name"]).lower()
                if not re.search(r"share|rate|percent|score", text):
                    continue
                col = row["original_column_name"]
                low, high, n, non_int = conn.execute(
                    f"SELECT MIN({col}), MAX({col}), COUNT({col}), SUM({col} != CAST({col} AS INTEGER)) FROM {table}"
                ).fetchone()
                if not n or isinstance(low, str) or isinstance(high, str):
                    continue  # not a numeric column
                if 0 <= low and high <= 1 and non_int:
                    fraction = fraction or f"{table}.{col}"
                elif 0 <= low and 20 < high <= 100:
                    hundred = hundred or f"{table}.{col}"
        conn.close()
    assert fraction and hundred, (fraction, hundred)


def test_noise_nulls(dev_dbs: dict[str, Path]) -> None:
    nullable = []
    for path in dev_dbs.values():
        conn = _connect(path)
        for table, column, _ in _columns(conn):
            if conn.execute(f"SELECT COUNT(*) FROM {table} WHERE {column} IS NULL").fetchone()[0]:
                nullable.append(f"{table}.{column}")
        conn.close()
    assert len(nullable) >= 3, nullable


def test_noise_case_and_spelling_variants(dev_dbs: dict[str, Path]) -> None:
    case_variants, spelling_variants = [], []
    for path in dev_dbs.values():
        conn = _connect(path)
        for table, column, decl in _columns(conn):
            if decl != "TEXT":
                continue
            values = [r[0] for r in conn.execute(f"SELECT DISTINCT {column} FROM {table} WHERE {column} IS NOT NULL")]
            if len(values) > 30 or not all(isinstance(v, str) for v in values):
                continue  # categorical columns only
            lowered = Counter(v.lower() for v in values)
            if any(n > 1 for n in lowered.values()):
                case_variants.append(f"{table}.{column}")
            keys = sorted(lowered)
            if any(
                difflib.SequenceMatcher(None, a, b).ratio() >= 0.85 for i, a in enumerate(keys) for b in keys[i + 1 :]
            ):
                spelling_variants.append(f"{table}.{column}")
        conn.close()
    assert case_variants and spelling_variants, (case_variants, spelling_variants)


def test_noise_numbers_stored_as_text(dev_dbs: dict[str, Path]) -> None:
    found = []
    for path in dev_dbs.values():
        conn = _connect(path)
        for table, column, decl in _columns(conn):
            if decl != "TEXT":
                continue
            n, numeric = conn.execute(
                f"SELECT COUNT({column}), SUM(typeof({column}) = 'text' AND {column} GLOB '[0-9]*' "
                f"AND CAST({column} AS REAL) > 0 AND CAST(CAST({column} AS REAL) AS TEXT) != {column}) FROM {table}"
            ).fetchone()
            if n >= 100 and numeric == n:
                found.append(f"{table}.{column}")
        conn.close()
    assert found


def test_noise_integer_text_join_key(dev_dbs: dict[str, Path]) -> None:
    found = []
    for path in dev_dbs.values():
        conn = _connect(path)
        types = {(t, c): d for t, c, d in _columns(conn)}
        for table, *_ in {(t,) for t, _, _ in _columns(conn)}:
            for fk in conn.execute(f"PRAGMA foreign_key_list({table})"):
                parent, child_col, parent_col = fk[2], fk[3], fk[4]
                if types[(table, child_col)] == "TEXT" and types[(parent, parent_col)] == "INTEGER":
                    text_rows, joined = conn.execute(
                        f"SELECT SUM(typeof(c.{child_col}) = 'text'), SUM(p.{parent_col} IS NOT NULL) "
                        f"FROM {table} AS c "
                        f"LEFT JOIN {parent} AS p ON CAST(c.{child_col} AS INTEGER) = p.{parent_col}"
                    ).fetchone()
                    if text_rows and joined == text_rows:
                        found.append(f"{table}.{child_col} -> {parent}.{parent_col}")
        conn.close()
    assert found


def test_noise_abbreviations_explained_only_in_descriptions(minibird_root: Path, dev_dbs: dict[str, Path]) -> None:
    tables_json = json.loads((minibird_root / "dev" / "dev_tables.json").read_text())
    readable = {e["db_id"]: {name for _, name in e["column_names"]} for e in tables_json}
    explained = []
    for db_id, path in dev_dbs.items():
        for csv_path in sorted((path.parent / "database_description").glob("*.csv")):
            for row in _read_csv(csv_path):
                raw, expanded = row["original_column_name"], row["column_name"]
                short = any(len(tok) <= 3 and tok not in ("id",) for tok in raw.split("_"))
                if short and expanded and expanded.replace(" ", "_") != raw and expanded not in readable[db_id]:
                    explained.append(f"{db_id}.{csv_path.stem}.{raw} = {expanded}")
    assert len(explained) >= 5, explained


def test_a_description_csv_is_cp1252(dev_dbs: dict[str, Path]) -> None:
    legacy = []
    for path in dev_dbs.values():
        for csv_path in sorted((path.parent / "database_description").glob("*.csv")):
            data = csv_path.read_bytes()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                text = data.decode("cp1252")
                assert any(ord(ch) > 127 for ch in text)
                legacy.append(csv_path.name)
    assert legacy


# --------------------------------------------------------------------------- caching


@pytest.mark.slow
def test_ensure_builds_once_and_atomically(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))

    def interrupted(out_dir: Path) -> Path:
        (Path(out_dir) / "train").mkdir(parents=True)
        raise KeyboardInterrupt  # a build killed half way

    monkeypatch.setattr(build_module, "build", interrupted)
    with pytest.raises(KeyboardInterrupt):
        minibird.ensure()
    assert list((tmp_path / "cache").iterdir()) == []  # no half cache, no temp folder left
    monkeypatch.undo()
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))

    root = minibird.ensure()
    assert root == tmp_path / "cache" / f"minibird-{minibird.version()}"
    stamp = (root / "MANIFEST.json").stat().st_mtime_ns
    assert minibird.ensure() == root and (root / "MANIFEST.json").stat().st_mtime_ns == stamp
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [root.name]
    assert len(load_examples("minibird", split="dev", limit=5)) == 5


def test_build_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not empty"):
        minibird.build(tmp_path)


def test_the_tool_layer_reads_minibird_descriptions_and_noise(
    minibird_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared profile reader sees what the benchmark promises (cp1252 CSV included)."""
    from tools import get_database

    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    profile = get_database(_db_paths(minibird_root, "dev")["clinic"]).profile()
    assert "°C" in profile.column("lab_results", "unit").description
    assert profile.column("visits", "dx_cd").full_name == "diagnosis code"
    assert profile.column("visits", "fee").numeric_text
    assert profile.column("patients", "ins_plan").nulls > 0


def test_verify_fails_loudly_on_a_gold_sql_that_errors_or_returns_nothing(minibird_root: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(minibird_root, copy)
    questions = _questions(copy, "dev")
    questions[3]["SQL"] = "SELECT COUNT(*) FROM no_such_table"
    questions[7]["SQL"] = f"SELECT * FROM {questions[7]['SQL'].split('FROM ')[1].split()[0]} WHERE 1 = 0"
    (copy / "dev" / "dev.json").write_text(json.dumps(questions))
    with pytest.raises(GenerationError) as info:
        build_module.verify(copy)
    assert "2 minibird gold SQL failed" in str(info.value)
    assert "dev question 3" in str(info.value) and "no such table" in str(info.value)
    assert "dev question 7" in str(info.value) and "empty result" in str(info.value)


@pytest.mark.slow
def test_command_line_build(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from eval.data.__main__ import main

    assert main(["minibird", "--out", str(tmp_path / "mb")]) == 0
    out = capsys.readouterr().out
    assert f"minibird {minibird.version()} at {tmp_path / 'mb'}" in out and re.search(
        r"split dev: \d{3} examples, 2 databases", out
    )
    assert main(["minibird", "--out", str(tmp_path / "mb")]) == 2
    assert "not empty" in capsys.readouterr().err
