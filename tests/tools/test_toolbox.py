"""The dispatcher: OpenAI schemas, presets, and structured errors for every bad call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tools import ToolBox, ToolResponse, get_database, tool_schemas, toolbox
from tools.errors import ConfigError, UnknownNameError

ALL_TOOLS = [
    "sqlite_query",
    "sqlite_peek",
    "bm25_search_sqlite",
    "execute_sql_query",
    "execute_sql",
    "fts_search",
    "get_profile",
]


@pytest.fixture
def box(school_db: Path) -> ToolBox:
    return ToolBox(get_database(school_db), ALL_TOOLS)


def _error(response: ToolResponse) -> dict[str, Any]:
    assert not response.ok and response.error_kind == response.payload["error"]["kind"]
    assert json.loads(response.text) == response.payload
    return response.payload["error"]


def test_schemas_are_openai_function_schemas() -> None:
    assert sorted(tool_schemas()) == sorted(ALL_TOOLS)
    for name, schema in tool_schemas().items():
        fn = schema["function"]
        assert schema["type"] == "function" and fn["name"] == name and fn["description"]
        params = fn["parameters"]
        assert params["type"] == "object" and "db_id" in params["required"]
        assert set(params["required"]) <= set(params["properties"])
        assert list(params["properties"])[0] == "db_id"
        json.dumps(schema)


def test_toolbox_offers_only_its_tools(school_db: Path) -> None:
    box = ToolBox(get_database(school_db), ["execute_sql_query"])
    assert [s["function"]["name"] for s in box.schemas()] == ["execute_sql_query"]
    err = _error(box.call("sqlite_query", {"db_id": "schools", "sql": "SELECT 1"}))
    assert err["kind"] == "unknown_tool" and "execute_sql_query" in err["suggestion"]
    with pytest.raises(UnknownNameError, match="did you mean 'sqlite_query'"):
        ToolBox(get_database(school_db), ["sqlite_qurey"])
    with pytest.raises(ConfigError, match="retoolsql"):
        ToolBox(get_database(school_db), ["sqlite_query"], preset="retool")


def test_sql_tools_share_one_executor_with_presets(box: ToolBox) -> None:
    ok = box.call("sqlite_query", '{"db_id": "schools", "sql": "SELECT event_id FROM events", "max_return_rows": 4}')
    assert ok.ok and ok.error_kind is None and len(ok.payload["rows"]) == 4 and ok.payload["row_count"] == 31
    assert len(box.call("sqlite_query", {"db_id": "schools", "sql": "SELECT * FROM events"}).payload["rows"]) == 31
    assert len(box.call("execute_sql", {"db_id": "schools", "sql": "SELECT * FROM events"}).payload["rows"]) == 10
    pragma = {"db_id": "schools", "sql": "PRAGMA table_info(events)"}
    assert box.call("execute_sql_query", pragma).ok
    assert _error(box.call("sqlite_query", pragma))["kind"] == "forbidden"
    dual = ToolBox(box.db, ["sqlite_query"], preset="dualsql")
    assert (
        len(
            dual.call(
                "sqlite_query", {"db_id": "schools", "sql": "SELECT * FROM events", "max_return_rows": 50}
            ).payload["rows"]
        )
        == 31
    )
    assert len(dual.call("sqlite_query", {"db_id": "schools", "sql": "SELECT * FROM events"}).payload["rows"]) == 31


def test_other_tools_through_the_dispatcher(box: ToolBox) -> None:
    peek = box.call("sqlite_peek", {"db_id": "schools", "table": "schools", "columns": "city, rate", "limit": 2})
    assert peek.ok and list(peek.payload["columns"]) == ["city", "rate"]
    hits = box.call("bm25_search_sqlite", {"db_id": "schools", "table": "events", "column": "kind", "query": "fair"})
    assert hits.ok and {h["value"] for h in hits.payload["hits"]} == {"science fair", "sports fair"}
    fts = box.call("fts_search", {"db_id": "schools", "query": "berkeley"})
    assert fts.ok and fts.payload["value_matches"]
    prof = box.call("get_profile", {"db_id": "schools", "tables": ["events", "schools"]})
    assert prof.ok and [t["name"] for t in prof.payload["tables"]] == ["schools", "events"]
    assert prof.payload["foreign_keys"] == [{"from": "events.schools_id", "to": "schools.id", "inferred": True}]
    enrollment = next(c for c in prof.payload["tables"][0]["columns"] if c["name"] == "enrollment")
    assert enrollment["numbers_stored_as_text"] is True and enrollment["nulls"] == 1
    assert _error(box.call("get_profile", {"db_id": "schools", "tables": ["evnts"]}))["kind"] == "no_such_table"


@pytest.mark.parametrize(
    ("name", "arguments", "kind", "needle"),
    [
        ("sqlite_qery", {"db_id": "schools", "sql": "SELECT 1"}, "unknown_tool", "did you mean 'sqlite_query'"),
        (None, {}, "unknown_tool", "None"),
        ("sqlite_query", '{"db_id": "schools", "sql": "SELECT 1"', "bad_arguments", "not valid JSON"),
        ("sqlite_query", "[1, 2]", "bad_arguments", "JSON object"),
        ("sqlite_query", 42, "bad_arguments", "JSON object"),
        ("sqlite_query", {"db_id": "schools"}, "bad_arguments", "missing required argument 'sql'"),
        ("sqlite_query", None, "bad_arguments", "missing required argument 'db_id'"),
        ("sqlite_query", {"db_id": "schools", "sql": 5}, "bad_arguments", "'sql' must be string"),
        ("sqlite_query", {"db_id": "schools", "sql": "SELECT 1", "max_return_rows": "ten"}, "bad_arguments", "integer"),
        (
            "sqlite_query",
            {"db_id": "schools", "sql": "SELECT 1", "max_return_rows": 0},
            "bad_arguments",
            "out of range",
        ),
        ("sqlite_query", {"db_id": "schools", "sql": "SELECT 1", "max_return_rows": True}, "bad_arguments", "integer"),
        ("sqlite_query", {"db_id": "schools", "query": "SELECT 1"}, "bad_arguments", "unknown argument 'query'"),
        (
            "sqlite_peek",
            {"db_id": "schools", "table": "schools", "columns": [1, 2]},
            "bad_arguments",
            "list of strings",
        ),
        (
            "sqlite_peek",
            {"db_id": "schools", "table": "schools", "columns": 7},
            "bad_arguments",
            "'columns' must be array",
        ),
        ("bm25_search_sqlite", {"db_id": "schools", "table": "events", "column": "kind"}, "bad_arguments", "'query'"),
        ("sqlite_query", {"db_id": "california_schools", "sql": "SELECT 1"}, "unknown_database", "california_schools"),
        ("sqlite_query", {"db_id": "schools", "sql": "DELETE FROM events"}, "forbidden", "SELECT"),
        ("sqlite_query", {"db_id": "schools", "sql": "SELECT * FROM event"}, "no_such_table", "events"),
    ],
)
def test_dispatcher_errors_never_raise(box: ToolBox, name: Any, arguments: Any, kind: str, needle: str) -> None:
    err = _error(box.call(name, arguments))
    assert err["kind"] == kind
    assert needle in err["message"] + err.get("suggestion", "")


def test_double_encoded_json_and_float_integers(box: ToolBox) -> None:
    inner = json.dumps({"db_id": "schools", "sql": "SELECT 1", "max_return_rows": 5.0})
    response = box.call("sqlite_query", json.dumps(inner))
    assert response.ok and response.payload["rows"] == [[1]]


def test_internal_failures_become_errors(box: ToolBox, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("disk on fire")

    # The fts_search spec looks the function up in tools.toolbox at call time.
    monkeypatch.setattr(toolbox, "fts_search", boom)
    err = _error(box.call("fts_search", {"db_id": "schools", "query": "x"}))
    assert err["kind"] == "other" and "disk on fire" in err["message"]
