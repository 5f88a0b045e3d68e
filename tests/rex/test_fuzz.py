"""rex.sql never raises on random or adversarial text."""

from __future__ import annotations

from rex.sql import SqlReference, extract_sql, has_top_level_order_by, is_select_only, normalize_sql, referenced_schema
from tests.rex.fuzz import random_strings

SCHEMA = {"students": ["id", "name", "grade", "club_id"], "clubs": ["id", "title"]}


def test_sql_readers_never_raise() -> None:
    parsed = 0
    for text in random_strings(2000, seed=1):
        sql = extract_sql(text)
        assert sql is None or (isinstance(sql, str) and sql)
        for candidate in (text, sql or ""):
            ref = referenced_schema(candidate, SCHEMA)
            assert isinstance(ref, SqlReference)
            assert ref.parsed or ref.error
            parsed += ref.parsed
            assert isinstance(is_select_only(candidate), bool)
            assert isinstance(has_top_level_order_by(candidate), bool)
            assert isinstance(normalize_sql(candidate), str)
    assert parsed > 100  # the soup does contain readable SQL, so both paths ran
