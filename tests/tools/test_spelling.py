"""The one "did you mean" and identifier-quoting helper, as the registries, the config
errors and the tools' errors use it."""

from __future__ import annotations

import ctypes
import doctest
import sqlite3

import pytest

from tools import spelling
from tools.errors import UnknownNameError
from tools.plugins import Registry
from tools.spelling import SQLITE_KEYWORDS, close_matches, did_you_mean, list_hint, needs_quotes, quote_identifier


def test_doctests() -> None:
    result = doctest.testmod(spelling)
    assert result.attempted >= 3 and result.failed == 0


def test_suggestions_ignore_case_and_keep_the_real_spelling() -> None:
    assert close_matches("SCHOOL", ["Schools", "satscores"]) == ["Schools"]
    assert did_you_mean("TrustSQL", ["dualsql", "trustsql"]) == "; did you mean 'trustsql'?"
    assert did_you_mean("zzz", ["dualsql", "trustsql"]) == ""
    assert list_hint("tables", ["a", "b", "c"], limit=2) == "the tables are: a, b, …"


def test_a_registry_miss_names_the_closest_registered_name() -> None:
    reg: Registry[int] = Registry("metric")
    reg.register("rex")(1)
    reg.register("qatch")(2)
    expected = r"unknown metric 'Rexx'; did you mean 'rex'\? registered metrics: qatch, rex"
    with pytest.raises(UnknownNameError, match=expected):
        reg.get("Rexx")


@pytest.mark.parametrize("name", ["plain", "with space", 'quo"te', "select", "Ünïcode", 'a""b'])
def test_a_quoted_identifier_round_trips_through_sqlite(name: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE {quote_identifier(name)} ({quote_identifier(name)} INTEGER)")
    conn.execute(f"INSERT INTO {quote_identifier(name)} VALUES (7)")
    assert conn.execute(f"SELECT {quote_identifier(name)} FROM {quote_identifier(name)}").fetchall() == [(7,)]
    assert conn.execute("SELECT name FROM sqlite_master").fetchall() == [(name,)]
    assert quote_identifier("plain", only_if_needed=True) == "plain"
    assert quote_identifier("with space", only_if_needed=True) == '"with space"'


def sqlite_library_keywords() -> set[str]:
    """The keywords of the SQLite library Python runs on (``sqlite3_keyword_name``)."""
    import _sqlite3

    try:
        library = ctypes.CDLL(_sqlite3.__file__)
        count = library.sqlite3_keyword_count()
    except (OSError, AttributeError):
        pytest.skip("this sqlite3 build does not expose sqlite3_keyword_name")
    words = set()
    for i in range(count):
        text, size = ctypes.c_char_p(), ctypes.c_int()
        assert library.sqlite3_keyword_name(i, ctypes.byref(text), ctypes.byref(size)) == 0
        words.add((text.value or b"")[: size.value].decode())
    return words


def test_the_keyword_list_holds_every_keyword_of_this_sqlite() -> None:
    assert len(SQLITE_KEYWORDS) == 147
    missing = sqlite_library_keywords() - SQLITE_KEYWORDS
    assert not missing, f"add to tools.spelling.SQLITE_KEYWORDS: {sorted(missing)}"


def test_every_keyword_is_quoted_and_then_works_as_a_name() -> None:
    conn = sqlite3.connect(":memory:")
    for word in sorted(SQLITE_KEYWORDS):
        for cased in (word, word.lower(), word.title()):
            printed = quote_identifier(cased, only_if_needed=True)
            assert printed == f'"{cased}"'
        table = quote_identifier(f"{word}_table", only_if_needed=True)
        assert table == f"{word}_table"  # not a keyword: bare
        conn.execute(f"CREATE TABLE {table} ({quote_identifier(word, only_if_needed=True)})")
        conn.execute(f"INSERT INTO {table} VALUES ('kept')")
        assert conn.execute(f"SELECT {quote_identifier(word, only_if_needed=True)} FROM {table}").fetchall() == [
            ("kept",)
        ]


@pytest.mark.parametrize(
    "name",
    [
        "order",
        "Order",
        "SELECT",
        "group",
        "from",
        "current_date",
        "key",
        "",
        "2nd",
        "odd name",
        "x-y",
        "a.b",
        'a"b',
        "désignation",
        "abc\n",
        "tab\t",
    ],
)
def test_names_sql_cannot_take_bare_are_quoted(name: str) -> None:
    assert needs_quotes(name)
    printed = quote_identifier(name, only_if_needed=True)
    conn = sqlite3.connect(":memory:")
    conn.execute(f"CREATE TABLE t ({printed})")
    assert conn.execute("SELECT name FROM pragma_table_info('t')").fetchall() == [(name,)]


@pytest.mark.parametrize("name", ["frpm", "schools", "T1", "_x", "order_id", "year", "date", "name", "type", "text"])
def test_plain_names_stay_bare(name: str) -> None:
    assert quote_identifier(name, only_if_needed=True) == name
