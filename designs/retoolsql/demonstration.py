"""ReToolSQL's demonstration: verify first (one ``sqlite_query`` of the gold SQL), then the
final answer with its table and column annotations; with a one-turn budget, answer at once."""

from __future__ import annotations

from agents.types import Example
from training.supervised.demonstrations import gold_sql_of, reasoning_line, register_script, tool_call_text


@register_script("retoolsql")
def retoolsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    sql = gold_sql_of(ex)
    # short scratch pads: the tool call and the final answer already carry the SQL twice,
    # and the laptop profile allows 128 tokens per turn
    final = (
        "<scratch_pad>\nThe result answers the question.\n</scratch_pad>\n"
        f"<relevant_tables>{', '.join(ex.gold_tables)}</relevant_tables>\n"
        f"<relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>\n"
        f"<final_answer>```sql\n{sql}\n```</final_answer>"
    )
    if max_turns < 2:
        return [final]
    check = f"<scratch_pad>\n{reasoning_line(ex)}\n</scratch_pad>\n{tool_call_text('sqlite_query', ex, sql)}"
    return [check, final]
