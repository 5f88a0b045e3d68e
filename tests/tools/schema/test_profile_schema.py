"""Profiles, BIRD descriptions, inferred keys, the on-disk cache and the serialisers."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import tools.schema.profile as profile_mod
from tests.tools.conftest import make_school_db
from tools import get_database
from tools.schema import compact_schema, ddl_schema, m_schema
from tools.schema.descriptions import decode_tolerant, read_descriptions
from tools.schema.profile import DatabaseProfile, ForeignKey

DESCRIPTION_HEADER = "original_column_name,column_name,column_description,data_format,value_description\n"


@pytest.fixture
def bird_db(tmp_path: Path) -> Path:
    """BIRD layout: <db_id>/<db_id>.sqlite + database_description/*.csv in mixed encodings."""
    folder = tmp_path / "school_district"
    (folder / "database_description").mkdir(parents=True)
    path = make_school_db(folder / "school_district.sqlite")
    schools = DESCRIPTION_HEADER + (
        "id,School ID,unique school identifier,integer,\n"
        "name,School Name,the name of the école,text,\n"
        'enrollment ,enrollment (K-12),"number of pupils, as text",text,"e.g. ""1200"""\n'
        "rate,Free Meal Rate,share of pupils with free meals,real,0.85 means 85%\n"
    )
    (folder / "database_description" / "schools.csv").write_bytes(schools.encode("cp1252"))
    scores = DESCRIPTION_HEADER + "avg_math,average math score,mean SAT math score,real,\n"
    (folder / "database_description" / "scores.csv").write_bytes(b"\xef\xbb\xbf" + scores.encode("utf-8"))
    return path


def test_profile_statistics_on_mixed_types(school_db: Path) -> None:
    profile = get_database(school_db).profile()
    schools = profile.table("SCHOOLS")
    assert schools is not None and schools.row_count == 6 and schools.primary_key == ("id",)
    city = schools.column("city")
    assert city is not None and (city.nulls, city.non_null, city.distinct) == (1, 5, 5)
    assert (city.min, city.max, city.avg) == ("Alameda", "Fremont", None)
    enrollment = schools.column("enrollment")
    assert enrollment is not None and enrollment.numeric_text
    # Text-stored numbers compare as numbers: min 75 (not "1200"), max 2100.
    assert (enrollment.min, enrollment.max) == (75, 2100)
    assert enrollment.avg == pytest.approx((1200 + 450 + 980 + 75 + 2100) / 5)
    opened = schools.column("opened")
    assert opened is not None and not opened.numeric_text and opened.avg is None
    assert (opened.min, opened.max) == ("1975-09-02", "2010-09-07")
    misc = schools.column("misc")
    assert misc is not None and misc.storage == {"number": 3, "text": 1, "blob": 1}
    assert misc.top_values[0] == (7, 2) and misc.avg is None
    assert any(str(v).startswith("<blob 2 bytes") for v, _ in misc.top_values)
    rate = schools.column("rate")
    assert rate is not None and rate.avg == pytest.approx((0.85 + 0.5 + 1.0 + 0.33 + 0.91) / 5)
    kind = profile.column("events", "kind")
    assert kind is not None and kind.top_values[0] == ("open day", 9)
    assert len(kind.examples) == 3
    note = profile.column("events", "note")
    assert note is not None and "\ufffdA\ufffd" in (note.min, note.max)


def test_declared_and_inferred_foreign_keys(school_db: Path) -> None:
    profile = get_database(school_db).profile()
    assert profile.declared_foreign_keys == (ForeignKey("scores", "school_id", "schools", "id"),)
    inferred = profile.inferred_foreign_keys
    assert [(fk.table, fk.column, fk.ref_table, fk.ref_column) for fk in inferred] == [
        ("events", "schools_id", "schools", "id")
    ]
    assert inferred[0].inferred and inferred[0].overlap == 1.0


def test_no_foreign_key_inferred_without_value_overlap(tmp_path: Path) -> None:
    path = tmp_path / "no_overlap.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE player (pid INTEGER PRIMARY KEY, team_id INTEGER);"
        "INSERT INTO team VALUES (1, 'a'), (2, 'b');"
        "INSERT INTO player VALUES (1, 50), (2, 60), (3, 1);"
    )
    conn.commit()
    conn.close()
    assert get_database(path).profile().foreign_keys == ()


def test_bird_descriptions_in_mixed_encodings(bird_db: Path) -> None:
    profile = get_database(bird_db).profile()
    name = profile.column("schools", "name")
    assert name is not None and name.description == "the name of the école" and name.full_name == "School Name"
    enrollment = profile.column("schools", "enrollment")  # "enrollment " in the CSV: spaces tolerated
    assert enrollment is not None and enrollment.description == "number of pupils, as text"
    assert enrollment.value_description == 'e.g. "1200"'
    rate = profile.column("schools", "rate")
    assert rate is not None and rate.value_description == "0.85 means 85%"
    math = profile.column("scores", "avg_math")  # utf-8 with BOM
    assert math is not None and math.description == "mean SAT math score"
    text = m_schema(profile, tables=["schools"])
    assert "Meaning: School Name; the name of the école" in text
    assert "values: 0.85 means 85%" in text


def test_decode_tolerant_and_broken_csv(tmp_path: Path) -> None:
    assert decode_tolerant("é".encode()) == "é"
    assert decode_tolerant("é".encode("cp1252")) == "é"
    assert decode_tolerant(b"\x81\x8d") == "\x81\x8d"  # undefined in cp1252: latin-1 fallback
    folder = tmp_path / "database_description"
    folder.mkdir()
    (folder / "t.csv").write_bytes(b"Original_Column_Name , Column_Description\nA,first\n,orphan\nb\n")
    (folder / "empty.csv").write_bytes(b"")
    assert read_descriptions(folder) == {
        "t": {"a": {"original_column_name": "A", "column_description": "first"}, "b": {"original_column_name": "b"}}
    }


def test_m_schema_layout(school_db: Path) -> None:
    text = m_schema(get_database(school_db).profile())
    lines = text.splitlines()
    assert lines[:4] == ["[DB_ID] schools", "[Schema]", "# Table: schools (6 rows, 7 columns)", "["]
    assert (
        "(id:INTEGER, Primary Key, Nulls: 0, Non-null: 6, Distinct: 6, Min: 1, Avg: 3.5, Max: 6, Examples: [1, 2, 3]),"
        in lines
    )
    city = next(line for line in lines if line.startswith("(city:"))
    assert "Nulls: 1, Non-null: 5, Distinct: 5" in city
    enrollment = next(line for line in lines if line.startswith("(enrollment:"))
    assert "Numbers stored as text" in enrollment and "Min: 75, Avg: 961.0, Max: 2100" in enrollment
    rate = next(line for line in lines if line.startswith("(rate:REAL"))
    assert "Max: 1.0" in rate
    kind = next(line for line in lines if line.startswith("(kind:"))
    assert "Top values: [open day (9), sports fair (8), board meeting (7), science fair (7)]" in kind
    assert lines[-3:] == ["[Foreign keys]", "scores.school_id=schools.id", "events.schools_id=schools.id (inferred)"]


def test_serialisers_restrict_to_tables_and_columns(school_db: Path) -> None:
    profile = get_database(school_db).profile()
    text = m_schema(profile, tables=["Scores"], columns=["schools.ID", "schools.name", "ghost.col"])
    assert "# Table: schools" in text and "# Table: scores" in text and "# Table: events" not in text
    assert "(city:" not in text and "(name:TEXT" in text and "(year:INTEGER" in text
    assert text.endswith("[Foreign keys]\nscores.school_id=schools.id")
    assert "events" not in compact_schema(profile, tables=["schools", "scores"])
    assert compact_schema(profile, columns=["events.kind"]) == "events(kind)"
    assert m_schema(profile, tables=[]) == "[DB_ID] schools\n[Schema]"


def test_ddl_and_compact_forms(school_db: Path) -> None:
    profile = get_database(school_db).profile()
    ddl = ddl_schema(profile)
    assert "CREATE TABLE scores (\n  score_id INTEGER PRIMARY KEY,\n  school_id INTEGER," in ddl
    assert "FOREIGN KEY (school_id) REFERENCES schools(id)\n);" in ddl
    assert (
        "schools_id INTEGER,\n" in ddl and "REFERENCES schools(id)\n);\n\nCREATE TABLE events" in ddl
    )  # inferred keys stay out of DDL
    # The rebuilt DDL is valid SQL.
    conn = sqlite3.connect(":memory:")
    conn.executescript(ddl)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == [
        "schools",
        "scores",
        "events",
    ]
    compact = compact_schema(profile)
    assert compact.splitlines()[0] == "schools(id, name, city, enrollment, opened, rate, misc)"
    assert (
        compact.splitlines()[-1] == "Foreign keys: scores.school_id=schools.id, events.schools_id=schools.id (inferred)"
    )


def test_quoted_names_in_ddl(tmp_path: Path) -> None:
    path = tmp_path / "odd.sqlite"
    conn = sqlite3.connect(path)
    conn.execute('CREATE TABLE "order items" ("item id" INTEGER PRIMARY KEY, "Price ($)" REAL)')
    conn.commit()
    conn.close()
    profile = get_database(path).profile()
    ddl = ddl_schema(profile)
    assert ddl.startswith('CREATE TABLE "order items" (\n  "item id" INTEGER PRIMARY KEY,')
    sqlite3.connect(":memory:").executescript(ddl)
    assert "(item id:INTEGER, Primary Key, Nulls: 0, Non-null: 0, Distinct: 0)," in m_schema(profile)


def test_profile_cache_reused_and_rebuilt_on_change(school_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = get_database(school_db)
    first = db.profile()
    path = profile_mod.profile_cache_path(db)
    assert path.is_file()
    assert DatabaseProfile.from_json(json.loads(path.read_text())) == first
    # A fresh Database object (a new process) loads from disk instead of rebuilding.
    calls: list[str] = []
    real_build = profile_mod.build_profile
    monkeypatch.setattr(profile_mod, "build_profile", lambda d: calls.append("build") or real_build(d))
    from tools.db.connection import Database

    assert Database(school_db).profile() == first and calls == []
    # Changing the database changes the key: the profile is rebuilt.
    conn = sqlite3.connect(school_db)
    conn.execute("INSERT INTO schools(id, name) VALUES (7, 'Galt Middle')")
    conn.commit()
    conn.close()
    second = Database(school_db).profile()
    assert calls == ["build"] and second.table("schools").row_count == 7  # type: ignore[union-attr]
    assert profile_mod.profile_cache_path(Database(school_db)) != path


def test_db_schema_and_profile_agree(school_db: Path) -> None:
    db = get_database(school_db)
    profile = db.profile()
    assert db.schema() == {t.name: [c.name for c in t.columns] for t in profile.tables}


def test_long_texts_are_cut_in_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "long.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE posts (id INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO posts(body) VALUES (?)", [("word " * 5000 + str(i),) for i in range(3)])
    conn.commit()
    conn.close()
    body = get_database(path).profile().column("posts", "body")
    assert body is not None and body.distinct == 3
    assert all(len(v) <= profile_mod.PROFILE_VALUE_CHARS for v in (body.min, body.max, *body.examples))
    assert all(len(v) <= profile_mod.PROFILE_VALUE_CHARS for v, _ in body.top_values)
