"""DualSQL's demonstration: the linker writes the gold tables and columns as a ```json block,
the generator the gold SQL as a ```sql block."""

from __future__ import annotations

from agents.types import Example
from training.supervised.demonstrations import gold_sql_of, reasoning_line, register_script, schema_json


@register_script("dualsql")
def dualsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    if role == "linker":
        return [f"<think>\n{reasoning_line(ex)}\n</think>\n```json\n{schema_json(ex)}\n```"]
    return [f"<think>\n{reasoning_line(ex)}\n</think>\n```sql\n{gold_sql_of(ex)}\n```"]
