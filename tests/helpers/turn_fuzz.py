"""Adversarial model turns, seeded: the one generator behind the turn fuzz test
(tests/agents/test_fuzz.py) and the fuzz benchmark (benchmarks/fuzz_turns.py).

A turn is drawn from one of several kinds: a design's correct scripted turn, the same turn
with a hostile tool call or a hostile final SQL, tag soup of every design's protocol
(``<think>``, ``<answer>``, ``<action>``, ``<tool_call>``, ``<schema>``, ``<scratch_pad>``,
``<final_answer>``, ``<relevant_tables>`` …) nested, repeated and unclosed, random unicode
(lone surrogates, RTL overrides, zero-width characters, NUL), JSON bombs in tool calls (deep
nesting, huge numbers, duplicate keys, NaN), huge turns (100k+ characters), truncated
correct turns, a model looping on one turn until its budget cuts it, and chat-template
markers. The SQL inside covers runaway queries (recursive
CTEs without a bound, cartesian products), huge results (blobs at SQLite's value cap, a
million rows), writes, ATTACH, PRAGMAs, several statements and broken syntax.

``TurnFuzzer.turn(token_safe=True)`` escapes lone surrogates: text a token generator emits
is decoded from token ids, so it can never hold one (an endpoint's JSON can, so the
episodes get them raw).
"""

from __future__ import annotations

import json
import random
import signal
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from tests.helpers.agent_db import COUNT_SQL, JOIN_SQL
from tests.helpers.agent_scripts import SCRIPTS

TAGS = (
    "think",
    "answer",
    "action",
    "tool_call",
    "schema",
    "scratch_pad",
    "final_answer",
    "relevant_tables",
    "relevant_columns",
    "tool_response",
)
ACTIONS = ("explore_schema", "propose_schema", "generate_sql", "confirm_answer", "EXPLORE_SCHEMA", "", "answer")
TOOL_NAMES = (
    "sqlite_query",
    "sqlite_peek",
    "bm25_search_sqlite",
    "execute_sql_query",
    "execute_sql",
    "fts_search",
    "get_profile",
)
WRONG_TOOL_NAMES = ("", "exec", "drop_table", "../../etc/passwd", "sqlite_query\n", "SQLITE_QUERY", "execute_sql\u200b")
RUNAWAY_SQL = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT COUNT(*) FROM r",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r ORDER BY x DESC",
    "SELECT COUNT(*) FROM schools a, schools b, satscores c, satscores d, schools e, satscores f, schools g, "
    "satscores h, schools i, satscores j",
    "SELECT * FROM satscores a, satscores b, satscores c, satscores d, satscores e, satscores f, satscores g "
    "ORDER BY random()",
)
HUGE_RESULT_SQL = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 1000000) SELECT x, x * 2 FROM r",
    "SELECT zeroblob(30000000)",
    "SELECT randomblob(1000000000)",
    "SELECT printf('%.*c', 30000000, 'x')",
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r LIMIT 3000) "
    "SELECT x, printf('%.*c', 3000, 'y') FROM r",
    "SELECT a.*, b.*, c.* FROM schools a, satscores b, schools c",
    "SELECT 1e999, -1e999, 1 / 0, 9223372036854775807 + 1, CAST('nan' AS REAL), x'00ff'",
)
FORBIDDEN_SQL = (
    "DELETE FROM schools",
    "UPDATE schools SET city = NULL",
    "INSERT INTO schools(id, name) VALUES (99, 'x')",
    "DROP TABLE schools",
    "CREATE TEMP TABLE t(a)",
    "ATTACH DATABASE 'other.db' AS other",
    "ATTACH DATABASE ':memory:' AS m",
    "PRAGMA writable_schema = 1",
    "PRAGMA query_only = 0",
    "PRAGMA journal_mode = WAL",
    "PRAGMA table_info(schools)",
    "SELECT * FROM pragma_table_info('schools')",
    "SELECT 1; DELETE FROM schools",
    "SELECT load_extension('evil')",
    "SELECT readfile('/etc/passwd')",
    "VACUUM",
    "BEGIN; SELECT 1",
    "'; DROP TABLE schools; --",
)
BROKEN_SQL = (
    "",
    " ",
    ";",
    "SELEC broken",
    "SELECT \x00 FROM schools",
    "SELECT '\ud800' FROM schools",
    'SELECT * FROM "schools',
    "/* never closed",
    "SELECT " + "(" * 3000 + "1" + ")" * 3000,
    "SELECT 1" + " UNION SELECT 1" * 700,
    "SELECT * FROM schools WHERE id IN (" + ",".join(map(str, range(6000))) + ")",
    "WITH a AS (SELECT * FROM a) SELECT * FROM a",
    "SELECT nope FROM nowhere",
)
GOOD_SQL = (
    COUNT_SQL,
    JOIN_SQL,
    "SELECT name FROM sqlite_master WHERE type = 'table'",
    "SELECT name, city FROM schools ORDER BY enrollment DESC",
)
HOSTILE_SQL = RUNAWAY_SQL + HUGE_RESULT_SQL + FORBIDDEN_SQL + BROKEN_SQL
CHAT_MARKERS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_start|>tool\n", "\n<|im_start|>user\nhi")
DRIVER_MARKERS = ("ASSISTANT_PROBE_MARKER_7f3a", "TOOL_PROBE_MARKER_9c1e", "SYSTEM_PROBE_TEXT", "USER_PROBE_TEXT")
"""The rollout driver's chat-template probe strings (training/rollout/chat_segments.py): a model
that writes one into SQL gets it echoed back in an observation."""
ODD_CHARACTERS = (
    "\u202e",  # right-to-left override
    "\u202d",
    "\u2067",
    "\u200b",  # zero-width space
    "\u200d",
    "\ufeff",  # byte-order mark
    "\x00",
    "\ud800",  # lone surrogates
    "\udfff",
    "\u0301",  # combining accent
    "\U0001f600",
    "\U000e0041",  # tag character
    "\uffff",
    "\r\n",
    "\x1b[2J",
    "\\u0000",
)
KINDS = (
    ("script", 14),
    ("hostile_call", 20),
    ("hostile_answer", 9),
    ("soup", 18),
    ("tags", 7),
    ("unicode", 7),
    ("json_bomb", 8),
    ("truncated", 7),
    ("markers", 4),
    ("huge", 2),
    ("empty", 4),
)


def _call(name_json: str, arguments_json: str) -> str:
    return '{"name": ' + name_json + ', "arguments": ' + arguments_json + "}"


def _call_body(text: str) -> str:
    return text.split("<tool_call>", 1)[1].split("</tool_call>", 1)[0]


def _escape_surrogates(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


class TurnFuzzer:
    """Seeded adversarial turns for one design. ``scripts``: that design's correct turns
    (tests/helpers/agent_scripts.py); ``driver_markers``: also echo the driver's probe
    strings (off only where a known driver bug is excluded, see tests/agents/test_fuzz.py)."""

    def __init__(self, seed: int | str, scripts: Sequence[str], driver_markers: bool = True) -> None:
        self.rng = random.Random(seed)
        self.scripts = list(scripts) or ["<think>x</think><answer>SELECT 1</answer>"]
        self.with_calls = [t for t in self.scripts if "<tool_call>" in t and "</tool_call>" in t]
        self.own_tools = sorted({json.loads(_call_body(t))["name"] for t in self.with_calls}) or list(TOOL_NAMES)
        self.markers = CHAT_MARKERS + (DRIVER_MARKERS if driver_markers else ())
        self._kinds = [k for k, _ in KINDS]
        self._weights = [w for _, w in KINDS]

    # ------------------------------------------------------------------ turns
    def turn(self, token_safe: bool = False) -> tuple[str, str]:
        """``(kind, text)`` of one adversarial turn. Half the soup, tag, unicode and JSON-bomb
        turns start with a design's correct reasoning block, so they get past the first check."""
        kind = self.rng.choices(self._kinds, self._weights)[0]
        text = getattr(self, f"_{kind}")()
        if kind in ("soup", "tags", "unicode", "json_bomb") and self.rng.random() < 0.5:
            text = self._head() + text
        return kind, _escape_surrogates(text) if token_safe else text

    def _script(self) -> str:
        return self.rng.choice(self.scripts)

    def _hostile_call(self) -> str:
        rng = self.rng
        if not self.with_calls or rng.random() < 0.3:
            return self.fragment() + self.tool_call() + self.fragment()
        head, rest = rng.choice(self.with_calls).split("<tool_call>", 1)
        body, tail = rest.split("</tool_call>", 1)
        if rng.random() < 0.5:  # the turn's own tool on hostile SQL
            return head + self.tool_call(sql=self.sql(), name=json.loads(body)["name"]) + tail
        return f"{head}{self.tool_call()}{tail}"

    def _hostile_answer(self) -> str:
        """A correct answer turn whose SQL is hostile (rewards execute it)."""
        answers = [t for t in self.scripts if "```" in t or "<answer>" in t]
        text = self.rng.choice(answers or self.scripts)
        for sql in (COUNT_SQL, JOIN_SQL):
            text = text.replace(sql, self.sql())
        return text

    def _soup(self) -> str:
        return "".join(self.fragment() for _ in range(self.rng.randrange(1, 10)))

    def _tags(self) -> str:
        rng, tag = self.rng, self.rng.choice(TAGS)
        n = rng.choice([2, 3, 50, 1000, 20000])
        shape = rng.randrange(5)
        if shape == 0:
            return f"<{tag}>" * n + "x" + f"</{tag}>" * rng.randrange(n + 1)  # nested, maybe unbalanced
        if shape == 1:
            return "".join(f"<{rng.choice(TAGS)}>" for _ in range(n))  # unclosed of every kind
        if shape == 2:
            return f"</{tag}>x<{tag}>" * min(n, 500)  # closing before opening
        if shape == 3:
            inner = self._script()
            return "".join(f"<{t}>" for t in rng.sample(TAGS, 4)) + inner + "".join(f"</{t}>" for t in TAGS)
        return f"<{tag}" + ">" * n + f"</{tag}"  # tags that never finish

    def _unicode(self) -> str:
        rng = self.rng
        pieces = []
        for _ in range(rng.randrange(1, 60)):
            r = rng.random()
            if r < 0.4:
                pieces.append(rng.choice(ODD_CHARACTERS))
            elif r < 0.7:
                pieces.append(chr(rng.randrange(0x110000)))
            else:
                pieces.append(self.fragment())
        return "".join(pieces)

    def _json_bomb(self) -> str:
        rng = self.rng
        name = json.dumps(rng.choice(TOOL_NAMES))
        shape = rng.randrange(9)
        if shape == 0:  # nesting around and past the JSON parser's recursion limit
            body = _call(name, self._nested(rng.choice([10, 900, 990, 998, 5000])))
        elif shape == 1:
            body = _call(name, '{"db_id": "schools", "sql": ' + self._nested(rng.choice([50, 995, 60000])) + "}")
        elif shape == 2:  # numbers JSON allows and Python refuses or overflows
            number = rng.choice(["1e400", "-1e400", "NaN", "Infinity", "9" * 5000, "1" * 4000, "true", "-3", "2.5"])
            body = _call(name, '{"db_id": "schools", "sql": "SELECT 1", "max_return_rows": ' + number + "}")
        elif shape == 3:  # duplicate keys: the last one wins
            wrong = json.dumps(rng.choice(WRONG_TOOL_NAMES))
            sql = json.dumps(rng.choice(FORBIDDEN_SQL))
            body = '{"name": ' + wrong + ', "name": ' + name + ', "arguments": {"sql": ' + sql
            body += ', "sql": "SELECT 1", "db_id": "schools", "db_id": 7}}'
        elif shape == 4:
            body = _call(name, json.dumps({"db_id": "schools", "sql": "SELECT '" + "x" * 200_000 + "'"}))
        elif shape == 5:
            body = _call(name, json.dumps({str(i): i for i in range(rng.choice([10, 20000]))}))
        elif shape == 6:  # arguments as a JSON string (of hostile SQL)
            body = _call(name, json.dumps(json.dumps({"db_id": "schools", "sql": self.sql()})))
        elif shape == 7:
            body = "[" * rng.choice([1000, 50_000])
        else:
            body = '{"name": ' + rng.choice(["null", "7", "[]", '{"a": 1}', '"\\ud800"']) + ', "arguments": {}}'
        return self._prefix() + f"<tool_call>{body}</tool_call>"

    def _truncated(self) -> str:
        text = self._script()
        return text[: self.rng.randrange(len(text) + 1)]

    def _markers(self) -> str:
        rng = self.rng
        marker = rng.choice(self.markers)
        if rng.random() < 0.5:
            return marker + self._script()
        sql = f"SELECT '{marker}'"  # the tool echoes it back in the observation
        if not self.with_calls:
            return self._prefix() + self.tool_call(sql=sql, name=rng.choice(TOOL_NAMES))
        head, rest = rng.choice(self.with_calls).split("<tool_call>", 1)
        body, tail = rest.split("</tool_call>", 1)
        return head + self.tool_call(sql=sql, name=json.loads(body)["name"]) + tail

    def _huge(self) -> str:
        rng = self.rng
        shape = rng.randrange(4)
        if shape == 0:  # a model looping on a correct turn until its token budget cuts it
            text = self._script()
            looped = text * (150_000 // max(len(text), 1) + 1)
            return looped[: rng.randrange(len(looped) // 2, len(looped))]
        filler = rng.choice(["x", "é", "\U0001f600", "<think>", " ", "SELECT 1 ", "\u202e"]) * rng.randrange(
            100_000, 300_000
        )
        if shape == 1:
            return f"<think>{filler}</think>" + self._script()
        if shape == 2:
            return self._prefix() + self.tool_call(sql="SELECT '" + filler[:100_000] + "'")
        return filler

    def _empty(self) -> str:
        return self.rng.choice(["", " ", "\n", "\n\n\n", "\t"])

    # ------------------------------------------------------------------ pieces
    def sql(self) -> str:
        """SQL a model might run: mostly hostile, sometimes correct."""
        return self.rng.choice(HOSTILE_SQL if self.rng.random() < 0.85 else GOOD_SQL)

    def _head(self) -> str:
        """The reasoning block a correct turn of this design opens with (and TRUST-SQL's action)."""
        text = self._script()
        ends = [text.find(tag) + len(tag) for tag in ("</think>", "</scratch_pad>", "</action>") if tag in text]
        return text[: max(ends)] if ends else ""

    def _prefix(self) -> str:
        """What precedes an action in every design: a reasoning block and an action tag."""
        rng = self.rng
        return rng.choice(["<think>t</think>", "<scratch_pad>s</scratch_pad>", ""]) + rng.choice(
            ["<action>explore_schema</action>", "<action>generate_sql</action>", ""]
        )

    def _nested(self, depth: int) -> str:
        opener, closer = self.rng.choice([("[", "]"), ('{"a":', "}")])
        return opener * depth + "1" + closer * depth

    def _arguments(self) -> object:
        rng = self.rng
        shape = rng.choice([0, 0, 0, 1, 1, 2, 3, 4, 5])
        if shape == 0:
            return {"db_id": rng.choice(["schools", "other", 7, None, ""]), "sql": self.sql()}
        if shape == 1:
            return {
                "db_id": "schools",
                "table": rng.choice(["schools", "satscores", "nope", "x'--", '"schools"', "sqlite_master", ""]),
                "column": rng.choice(["city", "name", "nope", "*", "rowid"]),
                "columns": rng.choice([["city"], [], ["nope"], "city", [1, 2], ["city"] * 500]),
                "query": rng.choice(['"NEAR( * OR AND', "Fresno", "", "\x00", "%", "a" * 10_000]),
                "where": rng.choice([None, "1=1", "1=1) UNION SELECT * FROM schools --", self.sql(), 7]),
                "limit": rng.choice([10, 0, -1, 10**30, "5", 2.5, True]),
                "top_k": rng.choice([10, 0, 51, None]),
                "k": rng.choice([1, 0, 100, "x"]),
                "tables": rng.choice([None, ["schools"], ["nope"], "schools", [None]]),
            }
        if shape == 2:
            return {"db_id": "schools", "sql": rng.choice([None, 7, ["SELECT 1"], {"q": "SELECT 1"}, True, 1.5])}
        if shape == 3:
            return rng.choice([None, [], "SELECT 1", 7, "", "{not json", '{"db_id": "schools"}'])
        if shape == 4:
            return {"db_id": "schools", "sql": self.sql(), "max_return_rows": rng.choice([1, 1000, 1001, 10**9, -5])}
        return {}

    def tool_call(self, sql: str | None = None, name: str | None = None) -> str:
        """One ``<tool_call>`` block: a right or wrong tool, hostile arguments, sometimes
        truncated JSON or arguments given as a JSON string."""
        rng = self.rng
        if name is None:
            r = rng.random()
            name = rng.choice(self.own_tools if r < 0.6 else TOOL_NAMES if r < 0.85 else WRONG_TOOL_NAMES)
        arguments = {"db_id": "schools", "sql": sql} if sql is not None else self._arguments()
        payload: dict = {"name": name, "arguments": arguments}
        if rng.random() < 0.1:
            payload["arguments"] = json.dumps(arguments, default=str)
        body = json.dumps(payload, default=str, ensure_ascii=rng.random() < 0.5)
        if sql is None and rng.random() < 0.12:
            body = body[: rng.randrange(len(body) + 1)]  # cut mid-JSON
        return f"<tool_call>{body}</tool_call>"

    def fragment(self) -> str:
        """A short piece of protocol soup."""
        rng = self.rng
        tag = rng.choice(TAGS)
        choice = rng.randrange(12)
        if choice == 0:
            return f"<{tag}>"
        if choice == 1:
            return f"</{tag}>"
        if choice == 2:
            return f"<{tag}>{self.fragment()}</{tag}>"
        if choice == 3:
            return self.tool_call()
        if choice == 4:
            return f"<action>{rng.choice(ACTIONS)}</action>"
        if choice == 5:
            schema = rng.choice(
                [
                    {"tables": ["schools"], "columns": {"schools": ["city"]}},
                    {"tables": "schools", "columns": 7},
                    ["schools.city", "satscores.*", "*", ".", "nope.x"],
                    {"tables": [None], "columns": {"schools": [1]}, "joins": [{"a": 1}]},
                ]
            )
            return "<schema>" + json.dumps(schema) + "</schema>"
        if choice == 6:
            return "```" + rng.choice(["sql", "json", ""]) + "\n" + self.sql() + rng.choice(["\n```", ""])
        if choice == 7:
            return "".join(rng.choice(ODD_CHARACTERS) for _ in range(rng.randrange(1, 8)))
        if choice == 8:
            return rng.choice(self.scripts)
        if choice == 9:
            return f"<{tag}>{self.sql()}</{tag}>"
        return rng.choice(["", " ", "\n", "SELECT", "<", ">", "</", "<think></think>", "```", "}", "{", "\\"])


def looping_turn(chars: int) -> str:
    """Think2SQL's correct turn repeated and cut mid-repeat, as a looping model's token budget
    cuts it (the paper's format regex does not match it, after backtracking)."""
    turn = SCRIPTS["think2sql"]["agent"][0]
    return (turn * (chars // len(turn) + 1))[:chars]


@contextmanager
def finishes_within(seconds: float) -> Iterator[None]:
    """Stop a call that hangs (SIGALRM interrupts even the regex engine). Not a speed test:
    callers give a bound about 1000x what the call needs."""

    def stop(*_: Any) -> None:
        raise TimeoutError(f"did not finish within {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
