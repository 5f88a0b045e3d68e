"""Reading model text: tags, stop strings, hermes tool calls, fences and schema lists."""

from __future__ import annotations

import pytest

from agents.parsing import (
    HermesParser,
    call_key,
    cut_at_stop,
    find_blocks,
    find_fences,
    get_parser,
    parse_column_list,
    parse_name_list,
    parse_schema_json,
    single_block,
)
from agents.types import ToolCall
from tools.errors import UnknownNameError


def test_cut_at_the_earliest_stop() -> None:
    assert cut_at_stop("a</schema>b</answer>c", ("</answer>", "</schema>")) == ("a</schema>", "</schema>")
    assert cut_at_stop("no stop here", ("</tool_call>",)) == ("no stop here", None)
    assert cut_at_stop("x</a>", ("", "</a>")) == ("x</a>", "</a>")


def test_blocks_and_single_block_reasons() -> None:
    assert [b.content for b in find_blocks("<t>1</t> <t>2</t> <t>3", "t")] == ["1", "2"]
    assert single_block("<t>x</t>", "t")[0].content == "x"
    assert single_block("nothing", "t") == (None, "missing <t>…</t>")
    assert "found 2 and 1" in single_block("<t><t>x</t>", "t")[1]
    assert single_block("</t>x<t>", "t") == (None, "</t> comes before <t>")
    # linear on thousands of unclosed tags
    assert find_blocks("<t>" * 100_000, "t") == []


def test_hermes_parser() -> None:
    parser = get_parser("hermes")
    (ok,) = parser.parse('<tool_call>{"name": "q", "arguments": {"sql": "SELECT 1"}}</tool_call>')
    assert ok.call == ToolCall("q", {"sql": "SELECT 1"}) and ok.error == ""
    (as_string,) = parser.parse('<tool_call>{"name": "q", "arguments": "{\\"sql\\": \\"x\\"}"}</tool_call>')
    assert as_string.call.arguments == {"sql": "x"}
    (no_args,) = parser.parse('<tool_call>{"name": "q"}</tool_call>')
    assert no_args.call.arguments == {}
    for body, reason in [
        ("{bad", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"name": 3}', "no string 'name'"),
        ('{"name": "q", "arguments": [1]}', "'arguments' must be a JSON object"),
        ('{"name": "q", "arguments": "nope"}', "'arguments' string is not JSON"),
        ("[" * 100_000, "RecursionError"),
    ]:
        (bad,) = parser.parse(f"<tool_call>{body}</tool_call>")
        assert bad.call is None and reason in bad.error
    unclosed = parser.parse('<tool_call>{"name": "q"}')
    assert len(unclosed) == 1 and "not closed" in unclosed[0].error
    assert parser.count("<tool_call><tool_call>") == 2 and parser.count("</tool_call>") == 1
    with pytest.raises(UnknownNameError, match="hermes"):
        get_parser("mistral")
    assert isinstance(parser, HermesParser)


def test_call_key_ignores_argument_order() -> None:
    assert call_key(ToolCall("q", {"a": 1, "b": 2})) == call_key(ToolCall("q", {"b": 2, "a": 1}))
    assert call_key(ToolCall("q", {"a": 1})) != call_key(ToolCall("p", {"a": 1}))


def test_fences() -> None:
    fences, unclosed = find_fences("x ```sql\nSELECT 1\n``` y ```SELECT 2``` z ```open")
    assert [(f.lang, f.body) for f in fences] == [("sql", "SELECT 1\n"), ("", "SELECT 2")] and unclosed
    assert find_fences("plain") == ([], False)


def test_name_and_column_lists() -> None:
    assert parse_name_list(" Schools, `frpm`\n- satscores, schools ,, ") == ("schools", "frpm", "satscores")
    assert parse_name_list('["A", "b"]') == ("a", "b")
    assert parse_column_list('schools.City, `frpm`.`Free Meal Count (K-12)`, "t"."a.b", bare, t.') == (
        "schools.city",
        "frpm.free meal count (k-12)",
        "t.a.b",
        "bare",
    )


def test_schema_json_forms_and_errors() -> None:
    sel, _ = parse_schema_json('```json\n{"tables": ["A"], "columns": {"B": ["x"]}, "joins": [{"l": "a"}]}\n```')
    assert sel.tables == ("a", "b") and sel.columns == ("b.x",) and sel.joins == ('{"l": "a"}',)
    sel, _ = parse_schema_json('["t.c", "u.d"]')
    assert sel.tables == ("t", "u") and sel.columns == ("t.c", "u.d")
    for text, reason in [
        ("{tables}", "not valid JSON"),
        ('"t"', "must be a JSON object"),
        ('{"tables": "t"}', "'tables' must be a list"),
        ('{"columns": {"t": "c"}}', "'columns'['t'] must be a list"),
        ('{"columns": 3}', "'columns' must map"),
        ('{"joins": "a=b"}', "'joins' must be a list"),
    ]:
        sel, why = parse_schema_json(text)
        assert sel is None and reason in why
