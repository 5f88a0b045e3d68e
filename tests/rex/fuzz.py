"""Random and adversarial model text for the never-raises tests (seeded, reproducible)."""

from __future__ import annotations

import random

TOKENS = [
    "SELECT", "select", "FROM", "WHERE", "JOIN", "ON", "AS", "WITH", "RECURSIVE", "UNION", "ORDER BY",
    "GROUP BY", "LIMIT", "DISTINCT", "COUNT(*)", "*", "(", ")", "((", "))", ",", ";", "'", '"', "`", "[", "]",
    "--", "/*", "*/", "\n", " ", "\t", "=", "<", ">", "||", "NULL", "1", "1.0", "-0", "1e309", "0x10",
    "students", "clubs", "s.name", "c.title", "students.*", "name", "id", "T1", "\"Full Name\"",
    "<answer>", "</answer>", "<final_answer>", "</final_answer>", "<think>", "</think>", "```sql", "```",
    "<relevant_tables>", "</relevant_tables>", "<relevant_columns>", "</relevant_columns>", "<tool_call>",
    "{\"name\": \"x\"}", "é", "\u202e", "\x00", "😀", "\\", "%", "$1", "?", ":x", "@p",
    "CASE WHEN", "END", "IIF(", "CAST(", "AS REAL)", "LIKE '%a%'", "IN (", "EXISTS (", "PRAGMA", "ATTACH",
]

ADVERSARIAL = [
    "",
    " ",
    ";",
    ";;;",
    "(" * 5000 + "1" + ")" * 5000,
    "SELECT " + "(" * 2000 + "1" + ")" * 2000,
    "SELECT 1" + " UNION SELECT 1" * 600,
    "SELECT * FROM students WHERE id IN (" + ",".join(map(str, range(5000))) + ")",
    "SELECT 1; DROP TABLE students",
    "DELETE FROM students",
    "ATTACH DATABASE ':memory:' AS x",
    "PRAGMA writable_schema = 1",
    "PRAGMA table_info(students)",
    "SELECT load_extension('evil')",
    "SELECT randomblob(1000000000)",
    "SELECT zeroblob(1000000000)",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r",
    "SELECT '" + "a" * 100000 + "'",
    "<answer>" * 500,
    "<think>" + "x" * 10000 + "</think><answer>SELECT name FROM students</answer>",
    "```sql\n```",
    "```sql\nSELECT 1",
    "<final_answer></final_answer>",
    "<final_answer>```sql\n;\n```</final_answer>",
    "SELECT \x00 FROM students",
    "SELECT * FROM \"students",
    "SELECT name FROM students -- unterminated /*",
    "/* SELECT 1",
    "WITH a AS (SELECT * FROM a) SELECT * FROM a",
    "SELECT * FROM students s, students s",
    "SELECT s.* FROM students",
    "SELECT * FROM (SELECT * FROM (SELECT * FROM students))",
    "\ud800",
    "SELECT '\ud800'",
]


def random_strings(n: int, seed: int = 0) -> list[str]:
    """``n`` strings: the adversarial list, token soup, and raw random characters."""
    rng = random.Random(seed)
    out = list(ADVERSARIAL)
    while len(out) < n:
        if rng.random() < 0.6:
            out.append("".join(rng.choice(TOKENS) + rng.choice(["", " "]) for _ in range(rng.randint(0, 40))))
        else:
            out.append("".join(chr(rng.randint(0, 0x2FFF)) for _ in range(rng.randint(0, 120))))
    return out[:n] if n >= len(ADVERSARIAL) else out
