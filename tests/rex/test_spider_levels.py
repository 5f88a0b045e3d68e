"""Spider's hardness levels as evaluation.py gives them, quirks included (rex.spider_levels).

Queries marked "dev" are Spider dev gold queries as the test-suite evaluator's
evaluation_examples/gold.txt spells them; the others are in Spider's style on Spider's schemas.
Each expected level was worked out by hand from evaluation.py's ``count_component1``,
``count_component2``, ``count_others`` on process_sql's parse, as each comment says, and
``eval_hardness``'s thresholds:
    easy:   c1 <= 1 and others == 0 and c2 == 0
    medium: (others <= 2 and c1 <= 1 and c2 == 0) or (c1 <= 2 and others < 2 and c2 == 0)
    hard:   (others > 2 and c1 <= 2 and c2 == 0) or (2 < c1 <= 3 and others <= 2 and c2 == 0)
            or (c1 <= 1 and others == 0 and c2 <= 1)
    extra:  otherwise
"""

from __future__ import annotations

import pytest

from rex.spider import spider_hardness as reexported
from rex.spider_levels import hardness_counts, spider_hardness

# (SQL, (c1, c2, others), level); every level differs from what counting aggregates, nested
# queries and ORs as they appear in the SQL gives
QUIRKS = {
    "negated condition counts as an aggregate": [
        # dev. c1: WHERE. c2: the NOT IN subquery. others: avg + the negated WHERE condition
        # (its not_op flag is what count_agg tests) = 2 aggregates -> 1. c2 = 1 and others = 1: extra
        (
            "SELECT avg(age) FROM student WHERE stuid NOT IN "
            "(SELECT T1.stuid FROM student AS T1 JOIN has_pet AS T2 ON T1.stuid  =  T2.stuid)",
            (1, 1, 1),
            "extra",
        ),
        # dev. The same counts with sum
        (
            "SELECT sum(Population) FROM country WHERE Name NOT IN (SELECT T1.Name FROM country AS T1 "
            'JOIN countrylanguage AS T2 ON T1.Code  =  T2.CountryCode WHERE T2.Language  =  "English")',
            (1, 1, 1),
            "extra",
        ),
        # c1: WHERE. others: count + NOT BETWEEN = 2 aggregates -> 1. c1 <= 1, others <= 2: medium
        ("SELECT count(*) FROM singer WHERE age NOT BETWEEN 20 AND 30", (1, 0, 1), "medium"),
    ],
    "FROM subquery is not nested": [
        # dev. c1: one FROM item (the subquery), no top-level clause -> 0. c2: only condition
        # operands and set operations are nested -> 0. others: one aggregate, one item -> 0: easy
        (
            "SELECT COUNT(*) FROM (SELECT T1.Name FROM country AS T1 JOIN countrylanguage AS T2 ON T1.Code  =  "
            'T2.CountryCode WHERE T2.Language  =  "English" INTERSECT SELECT T1.Name FROM country AS T1 JOIN '
            'countrylanguage AS T2 ON T1.Code  =  T2.CountryCode WHERE T2.Language  =  "Dutch")',
            (0, 0, 0),
            "easy",
        ),
        # Spider train (school_finance). The subquery's WHERE / GROUP BY / HAVING are its own: easy
        (
            "SELECT count(*) FROM (SELECT * FROM endowment WHERE amount  >  8.5 GROUP BY school_id "
            "HAVING count(*)  >  1)",
            (0, 0, 0),
            "easy",
        ),
    ],
    "HAVING aggregates are not counted, its connectors are": [
        # dev. c1: JOIN + GROUP BY = 2. others: aggregates = the selected COUNT only (HAVING's
        # COUNT(*) > 2 has not_op False) -> 0; two items -> 1. c1 <= 2, others < 2: medium
        (
            "SELECT COUNT(T2.Language) ,  T1.Name FROM country AS T1 JOIN countrylanguage AS T2 ON T1.Code  =  "
            "T2.CountryCode GROUP BY T1.Name HAVING COUNT(*)  >  2",
            (2, 0, 1),
            "medium",
        ),
        # concert_singer. The same counts
        (
            "SELECT T2.name ,  count(*) FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id  =  T2.stadium_id "
            "GROUP BY T1.stadium_id HAVING count(*)  >=  2",
            (2, 0, 1),
            "medium",
        ),
        # c1: GROUP BY. others: count_agg over the HAVING list counts its 'and' string (its first
        # character is not 0), not count(*) or avg(age) -> 1 aggregate -> 0: easy
        ("SELECT country FROM singer GROUP BY country HAVING count(*)  >  1 AND avg(age)  >  30", (1, 0, 0), "easy"),
    ],
    "chained set operations count once": [
        # c1: the first query's WHERE. c2: its UNION; the second UNION belongs to the nested
        # query (A union= (B UNION C)) -> 1. others 0. c1 <= 1, others 0, c2 <= 1: hard
        (
            "SELECT name FROM singer WHERE age  >  30 UNION SELECT name FROM singer WHERE age  <  20 "
            'UNION SELECT name FROM singer WHERE country  =  "France"',
            (1, 1, 0),
            "hard",
        ),
        # world_1. The same with INTERSECT
        (
            'SELECT Name FROM country WHERE Continent  =  "Europe" INTERSECT SELECT Name FROM country '
            "WHERE Population  >  80000 INTERSECT SELECT Name FROM country WHERE GNP  >  1000",
            (1, 1, 0),
            "hard",
        ),
        # INTERSECT then EXCEPT: the first query has no clause -> c1 0, c2 1: hard
        (
            "SELECT name FROM singer INTERSECT SELECT name FROM singer WHERE age  >  20 EXCEPT "
            'SELECT name FROM singer WHERE country  =  "France"',
            (0, 1, 0),
            "hard",
        ),
    ],
    "OR after a column-valued comparison vanishes": [
        # dev. parse_value reads the column value T2.DestAirport up to the next 'and' or clause
        # keyword, swallowing "OR T1.AirportCode = T2.SourceAirport". c1: JOIN only: easy
        (
            "SELECT T1.AirportCode FROM AIRPORTS AS T1 JOIN FLIGHTS AS T2 ON T1.AirportCode  =  T2.DestAirport "
            "OR T1.AirportCode  =  T2.SourceAirport",
            (1, 0, 0),
            "easy",
        ),
        # concert_singer. In WHERE: the OR and "T1.age > 20" vanish, so one WHERE condition.
        # c1: JOIN + WHERE = 2, others 0: medium
        (
            "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id  =  T2.singer_id "
            "WHERE T1.singer_id  =  T2.concert_id OR T1.age  >  20",
            (2, 0, 0),
            "medium",
        ),
    ],
    "spaced operators are joined": [
        # dev. The tokenizer joins '!' '=' into '!='. c1: WHERE. c2: EXCEPT. others 0: hard
        (
            'SELECT Code FROM country WHERE GovernmentForm ! =  "Republic" EXCEPT SELECT CountryCode '
            'FROM countrylanguage WHERE LANGUAGE  =  "English"',
            (1, 1, 0),
            "hard",
        ),
        # dev. c1: WHERE only: easy
        ('SELECT DISTINCT CountryCode FROM countrylanguage WHERE LANGUAGE ! =  "English"', (1, 0, 0), "easy"),
    ],
}
QUIRK_CASES = [
    pytest.param(sql, counts, level, id=f"{quirk}-{i}")
    for quirk, cases in QUIRKS.items()
    for i, (sql, counts, level) in enumerate(cases)
]


@pytest.mark.parametrize("sql,counts,level", QUIRK_CASES)
def test_evaluation_py_quirks(sql: str, counts: tuple[int, int, int], level: str) -> None:
    assert hardness_counts(sql) == counts
    assert spider_hardness(sql) == level


@pytest.mark.parametrize(
    "sql,counts",
    [
        # dev. The vanished OR changes the counts, not the level: c1 = JOIN + GROUP BY + ORDER BY
        # + LIMIT = 4 (5 with the OR); extra either way
        (
            "SELECT T1.AirportCode FROM AIRPORTS AS T1 JOIN FLIGHTS AS T2 ON T1.AirportCode  =  T2.DestAirport "
            "OR T1.AirportCode  =  T2.SourceAirport GROUP BY T1.AirportCode ORDER BY count(*) DESC LIMIT 1",
            (4, 0, 0),
        ),
        # HAVING: count(*) > 1 is no aggregate, the selected count(*) is: 1 -> 0; two items -> 1
        ("SELECT country ,  count(*) FROM singer GROUP BY country HAVING count(*)  >  1", (1, 0, 1)),
        # string and number values do not swallow an OR: c1 = WHERE + two ORs + LIKE = 4;
        # three WHERE conditions -> others 1
        ('SELECT name FROM singer WHERE age  =  20 OR age  =  30 OR name LIKE "%b%"', (4, 0, 1)),
        # nor does a subquery value: c1 = WHERE + OR; c2 = two subqueries; two conditions -> others 1
        (
            "SELECT name FROM singer WHERE age  >  (SELECT avg(age) FROM singer) "
            "OR age  <  (SELECT min(age) FROM singer)",
            (2, 2, 1),
        ),
    ],
)
def test_counts_where_the_level_agrees(sql: str, counts: tuple[int, int, int]) -> None:
    assert hardness_counts(sql) == counts


@pytest.mark.parametrize(
    "sql,level",
    [
        ("SELECT count(*) FROM singer", "easy"),  # nothing counted
        ("SELECT name FROM singer WHERE age > 20", "easy"),  # c1 1 (WHERE)
        ("SELECT name, country FROM singer WHERE age > 20", "medium"),  # c1 1, others 1 (two items)
        (  # c1 2 (JOIN, GROUP BY)
            "SELECT T2.name FROM concert AS T1 JOIN stadium AS T2 ON T1.stadium_id = T2.stadium_id GROUP BY T2.name",
            "medium",
        ),
        ("SELECT name FROM singer WHERE age > (SELECT avg(age) FROM singer)", "hard"),  # c1 1, c2 1
        ("SELECT name FROM a WHERE x = 1 EXCEPT SELECT name FROM a WHERE y = 2", "hard"),  # c1 1, c2 1
        (  # c1 7 (WHERE, GROUP BY, ORDER BY, LIMIT, JOIN, OR, LIKE); others 1 (one aggregate: 0;
            # two WHERE conditions: 1)
            "SELECT T1.name FROM singer AS T1 JOIN concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.year = '2014' "
            "OR T1.name LIKE '%y%' GROUP BY T1.name ORDER BY count(*) DESC LIMIT 1",
            "extra",
        ),
        ("SELECT FROM WHERE (", "unknown"),
    ],
)
def test_spider_hardness_levels(sql: str, level: str) -> None:
    assert spider_hardness(sql) == level
    assert reexported(sql) == level  # eval.data reads it from rex.spider
