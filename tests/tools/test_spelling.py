"""The one "did you mean" and identifier-quoting helper, as the registries, the config
errors and the tools' errors use it."""

from __future__ import annotations

import doctest
import sqlite3

import pytest

from tools import spelling
from tools.errors import UnknownNameError
from tools.plugins import Registry
from tools.spelling import close_matches, did_you_mean, list_hint, quote_identifier


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
