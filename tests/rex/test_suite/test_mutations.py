"""The mutants of a gold query: one change each, only changes EX can see."""

from __future__ import annotations

from rex.test_suite import mutants

SCHEMA = {"orders": ["id", "customer_id", "amount", "status"], "customers": ["id", "name", "city"]}


def kinds_and_sql(sql: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in mutants(sql, SCHEMA):
        out.setdefault(m.kind, []).append(m.sql)
    return out


def test_predicates_comparisons_numbers_and_columns_are_mutated() -> None:
    found = kinds_and_sql("SELECT COUNT(*) FROM orders WHERE amount > 100 AND status = 'paid'")
    assert "SELECT COUNT(*) FROM orders WHERE status = 'paid'" in found["drop predicate"]
    assert "SELECT COUNT(*) FROM orders" in found["drop where"]
    assert "SELECT COUNT(*) FROM orders WHERE amount >= 100 AND status = 'paid'" in found["change comparison"]
    assert "SELECT COUNT(*) FROM orders WHERE amount > 101 AND status = 'paid'" in found["change number"]
    assert "SELECT COUNT(*) FROM orders WHERE amount > 100 OR status = 'paid'" in found["change connective"]
    assert "SELECT COUNT(*) FROM orders WHERE status > 100 AND status = 'paid'" in found["swap column"]


def test_aggregates_distinct_joins_and_limits_are_mutated() -> None:
    found = kinds_and_sql(
        "SELECT c.name, MAX(o.amount), COUNT(DISTINCT o.status) FROM customers AS c "
        "JOIN orders AS o ON o.customer_id = c.id GROUP BY c.id ORDER BY c.name LIMIT 3"
    )
    assert any("MIN(o.amount)" in s for s in found["change aggregate"])
    assert any("COUNT(o.status)" in s for s in found["drop DISTINCT"])
    assert any("LEFT JOIN" in s for s in found["outer join"])
    assert any("LIMIT" not in s for s in found["drop LIMIT"])
    assert any("ORDER BY" not in s for s in found["drop ORDER BY"])
    assert any("DESC" in s for s in found["reverse ORDER BY"])


def test_changes_a_set_comparison_cannot_see_are_not_made() -> None:
    found = kinds_and_sql("SELECT DISTINCT name FROM customers ORDER BY name")
    assert all("DISTINCT" in s and "ORDER BY" in s for group in found.values() for s in group)


def test_a_filtered_outer_join_is_not_a_mutant() -> None:
    """WHERE c.city = ... drops the NULL rows a LEFT JOIN would add: the same query."""
    found = kinds_and_sql(
        "SELECT o.id FROM orders AS o JOIN customers AS c ON o.customer_id = c.id WHERE c.city = 'Rome'"
    )
    assert "outer join" not in found


def test_every_mutant_differs_from_the_gold_and_from_each_other() -> None:
    sql = "SELECT name FROM customers WHERE city = 'Oslo' AND id > 2"
    texts = [m.sql for m in mutants(sql, SCHEMA)]
    assert len(texts) == len(set(texts)) >= 8
    assert sql not in texts


def test_unparseable_sql_has_no_mutants() -> None:
    assert mutants("SELEC name FROM", SCHEMA) == []
    assert mutants("SELECT 1; SELECT 2", SCHEMA) == []
