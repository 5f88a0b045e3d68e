"""Reading model text: tags, tool calls, stop strings and schema lists.

Everything here is total on arbitrary text: malformed input gives ``None`` or an error
string, never an exception. Tag scanning uses ``str.find`` rather than backtracking
regular expressions so adversarial text (thousands of unclosed tags) stays linear.

Tool calls sit behind the small ``ToolCallParser`` protocol; ``HermesParser`` reads the
``<tool_call>{json}</tool_call>`` format that Qwen-family chat templates emit. Another
format is added by registering another parser class with ``@register_parser(name)`` and
setting an agent's ``parser=<name>`` option.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agents.types import SchemaSelection, ToolCall
from tools.plugins import DESIGN_GROUP, Registry

# ---------------------------------------------------------------------------- tags


@dataclass(frozen=True)
class Block:
    """One ``<tag>content</tag>`` occurrence; ``start``/``end`` span the whole block."""

    content: str
    start: int
    end: int


def tag_counts(text: str, tag: str) -> tuple[int, int]:
    """How many ``<tag>`` and ``</tag>`` occur in ``text``."""
    return text.count(f"<{tag}>"), text.count(f"</{tag}>")


def find_blocks(text: str, tag: str) -> list[Block]:
    """Every well-formed, non-nested ``<tag>…</tag>`` block, left to right.

    An opening tag with no closing tag after it ends the scan (it is not a block).
    """
    open_tag, close_tag = f"<{tag}>", f"</{tag}>"
    blocks: list[Block] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            return blocks
        close = text.find(close_tag, start + len(open_tag))
        if close < 0:
            return blocks
        end = close + len(close_tag)
        blocks.append(Block(text[start + len(open_tag) : close], start, end))
        pos = end


def single_block(text: str, tag: str) -> tuple[Block | None, str]:
    """The one ``<tag>…</tag>`` block of ``text``, or ``(None, reason)``.

    Exactly one opening and one closing tag, opening first. Nested or repeated tags fail.
    """
    opens, closes = tag_counts(text, tag)
    if opens == 0 and closes == 0:
        return None, f"missing <{tag}>…</{tag}>"
    if opens != 1 or closes != 1:
        return None, f"expected exactly one <{tag}> and one </{tag}>, found {opens} and {closes}"
    blocks = find_blocks(text, tag)
    if not blocks:
        return None, f"</{tag}> comes before <{tag}>"
    return blocks[0], ""


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, str | None]:
    """Cut ``text`` just after the earliest stop string; returns (kept, stop or None).

    Generation engines may run past a stop string (batched calls, coarse stop checks);
    the rollout driver and every agent cut here so both see the same turn.
    """
    best_end, best_stop = -1, None
    for stop in stops:
        if not stop:
            continue
        idx = text.find(stop)
        if idx >= 0 and (best_end < 0 or idx + len(stop) < best_end):
            best_end, best_stop = idx + len(stop), stop
    if best_stop is None:
        return text, None
    return text[:best_end], best_stop


# ---------------------------------------------------------------------- tool calls


@dataclass(frozen=True)
class ParsedCall:
    """One tool-call block: the call when it parsed, else the reason it did not."""

    call: ToolCall | None
    raw: str
    error: str = ""


class ToolCallParser(Protocol):
    """Finds tool calls in an assistant turn. ``stop`` ends generation after a call."""

    name: str
    stop: tuple[str, ...]

    def parse(self, text: str) -> list[ParsedCall]:
        """Every tool-call block of ``text`` (parsed or not), never raising."""
        ...

    def count(self, text: str) -> int:
        """How many tool-call blocks ``text`` opens (closed or not)."""
        ...


def _load_json(text: str) -> tuple[Any, str]:
    """``json.loads`` that reports instead of raising (deep nesting included)."""
    try:
        return json.loads(text), ""
    except (ValueError, RecursionError) as exc:
        return None, f"{type(exc).__name__}: {str(exc)[:120]}"


PARSERS: Registry[Callable[[], ToolCallParser]] = Registry("tool-call parser", plugins=DESIGN_GROUP)
"""``parser`` option name -> a zero-argument factory (usually the parser class)."""


def register_parser(name: str, replace: bool = False) -> Callable[[Any], Any]:
    """Class decorator: a :class:`ToolCallParser` that agents pick with ``parser=<name>``."""
    return PARSERS.register(name, replace=replace)


@register_parser("hermes")
class HermesParser:
    """``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` (Qwen / Hermes format)."""

    name = "hermes"
    open_tag = "<tool_call>"
    close_tag = "</tool_call>"
    stop = ("</tool_call>",)

    def count(self, text: str) -> int:
        return max(tag_counts(text, "tool_call"))

    def parse(self, text: str) -> list[ParsedCall]:
        calls = [self._parse_one(b.content) for b in find_blocks(text, "tool_call")]
        opens = text.count(self.open_tag)
        if opens > len(calls):  # an opening tag left unclosed (or nested inside a block)
            calls.append(ParsedCall(None, "", "a <tool_call> is not closed by </tool_call>"))
        return calls

    @staticmethod
    def _parse_one(body: str) -> ParsedCall:
        obj, error = _load_json(body.strip())
        if error:
            return ParsedCall(None, body, f"tool call is not valid JSON ({error})")
        if not isinstance(obj, dict):
            return ParsedCall(None, body, "tool call must be a JSON object with 'name' and 'arguments'")
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return ParsedCall(None, body, "tool call has no string 'name'")
        arguments = obj.get("arguments", {})
        if isinstance(arguments, str):  # some models emit the arguments as a JSON string
            arguments, error = _load_json(arguments)
            if error:
                return ParsedCall(None, body, f"tool call 'arguments' string is not JSON ({error})")
        if not isinstance(arguments, dict):
            return ParsedCall(None, body, "tool call 'arguments' must be a JSON object")
        return ParsedCall(ToolCall(name=name, arguments=arguments), body)


def get_parser(name: str) -> ToolCallParser:
    """A new tool-call parser registered as ``name`` (``hermes``); ``UnknownNameError``
    lists the registered names."""
    return PARSERS.get(name)()


def call_key(call: ToolCall) -> str:
    """A canonical string for a call, so identical repeats can be detected."""
    try:
        args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        args = repr(call.arguments)
    return f"{call.name}:{args}"


# -------------------------------------------------------------------- schema lists


def _clean_name(part: str) -> str:
    return part.strip().strip("`\"'[]").strip().lower()


def _split_column(item: str) -> str:
    """``"T.c"``, ``"`T`.`c`"`` → ``"t.c"``; a bare name stays bare."""
    item = item.strip()
    if "." not in item:
        return _clean_name(item)
    table, column = item.split(".", 1) if not item.startswith(("`", '"', "[")) else _split_quoted(item)
    return f"{_clean_name(table)}.{_clean_name(column)}"


def _split_quoted(item: str) -> tuple[str, str]:
    """Split a quoted ``table.column`` on the first dot outside quotes."""
    quote_pairs = {"`": "`", '"': '"', "[": "]"}
    opener = item[0]
    close = item.find(quote_pairs[opener], 1)
    if close > 0 and close + 1 < len(item) and item[close + 1] == ".":
        return item[: close + 1], item[close + 2 :]
    head, _, tail = item.partition(".")
    return head, tail


def parse_name_list(text: str) -> tuple[str, ...]:
    """A comma/newline separated (or JSON list) of names, cleaned and lower-cased.

    Order is kept, duplicates and empty entries dropped. Used for ``<relevant_tables>``.
    """
    return tuple(dict.fromkeys(n for n in map(_clean_name, _split_list(text)) if n))


def parse_column_list(text: str) -> tuple[str, ...]:
    """Like ``parse_name_list`` for ``table.column`` entries (``<relevant_columns>``)."""
    columns = (_split_column(c) for c in _split_list(text) if c.strip())
    return tuple(dict.fromkeys(c for c in columns if c and not c.endswith(".")))


def _split_list(text: str) -> list[str]:
    """Split a list without cleaning names (``table.column`` quoting is kept)."""
    stripped = text.strip()
    if stripped.startswith("["):
        obj, error = _load_json(stripped)
        if not error and isinstance(obj, list):
            return [str(x) for x in obj if isinstance(x, (str, int, float))]
        stripped = stripped.strip("[]")
    return [item.lstrip("-* ").strip() for item in stripped.replace("\n", ",").split(",")]


def schema_from_json(obj: Any) -> tuple[SchemaSelection | None, str]:
    """A ``SchemaSelection`` from a proposed / linked schema JSON value, or a reason.

    Accepts ``{"tables": [...], "columns": {table: [col, ...]} | ["t.c", ...],
    "joins": [...]}`` or a bare list of ``"table.column"`` strings. Tables named only
    through their columns are added to ``tables``.
    """
    if isinstance(obj, list):
        obj = {"columns": obj}
    if not isinstance(obj, dict):
        return None, "schema must be a JSON object with 'tables' and 'columns'"
    tables_raw = obj.get("tables", [])
    columns_raw = obj.get("columns", {})
    joins_raw = obj.get("joins", [])
    if not isinstance(tables_raw, list) or not all(isinstance(t, str) for t in tables_raw):
        return None, "'tables' must be a list of table names"
    columns: list[str] = []
    if isinstance(columns_raw, dict):
        for table, cols in columns_raw.items():
            if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
                return None, f"'columns'[{str(table)[:40]!r}] must be a list of column names"
            columns.extend(f"{_clean_name(str(table))}.{_clean_name(c)}" for c in cols)
    elif isinstance(columns_raw, list) and all(isinstance(c, str) for c in columns_raw):
        columns.extend(_split_column(c) for c in columns_raw)
    else:
        return None, "'columns' must map table names to lists of columns"
    if not isinstance(joins_raw, list):
        return None, "'joins' must be a list"
    tables = [_clean_name(t) for t in tables_raw]
    tables += [c.split(".", 1)[0] for c in columns if "." in c]
    joins = [j if isinstance(j, str) else json.dumps(j, sort_keys=True, default=str) for j in joins_raw]
    return (
        SchemaSelection(
            tables=tuple(dict.fromkeys(t for t in tables if t)),
            columns=tuple(dict.fromkeys(c for c in columns if c and not c.endswith("."))),
            joins=tuple(joins),
        ),
        "",
    )


def parse_schema_json(text: str) -> tuple[SchemaSelection | None, str]:
    """``schema_from_json`` on text (code fences around the JSON are allowed)."""
    body = strip_fence(text)
    obj, error = _load_json(body)
    if error:
        return None, f"schema is not valid JSON ({error})"
    return schema_from_json(obj)


# ------------------------------------------------------------------- code fences


@dataclass(frozen=True)
class Fence:
    """A fenced code block: its language tag, body, and the span of the whole block."""

    lang: str
    body: str
    start: int
    end: int


def find_fences(text: str) -> tuple[list[Fence], bool]:
    """Every closed ``` block, and whether an opening fence is left unclosed."""
    fences: list[Fence] = []
    pos = 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            return fences, False
        line_end = text.find("\n", start + 3)
        close = text.find("```", start + 3)
        if close < 0:
            return fences, True
        if 0 <= line_end < close:  # ```lang\n body ```
            lang, body_start = text[start + 3 : line_end].strip(), line_end + 1
        else:  # ```body``` on one line
            lang, body_start = "", start + 3
        end = close + 3
        fences.append(Fence(lang, text[body_start:close], start, end))
        pos = end


def strip_fence(text: str) -> str:
    """The body of the first code block in ``text``, or the stripped text."""
    fences, _ = find_fences(text)
    return fences[0].body.strip() if fences else text.strip()
