"""Think2SQL's demonstration: one turn, the reasoning line then the gold SQL as the answer."""

from __future__ import annotations

from agents.types import Example
from training.supervised.demonstrations import gold_sql_of, reasoning_line, register_script


@register_script("think2sql")
def think2sql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    sql = gold_sql_of(ex)
    return [f"<think>\n{reasoning_line(ex)}\n</think>\n<answer>\n```sql\n{sql}\n```\n</answer>"]
