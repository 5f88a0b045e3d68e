"""TRUST-SQL's demonstration: explore_schema (the table DDL) -> propose_schema (the gold
tables and columns) -> generate_sql (run the gold SQL, when the budget has 4 turns) ->
confirm_answer."""

from __future__ import annotations

from agents.types import Example
from designs.trustsql.tools import TOOL
from tools.db.dialects import database_dialect, dialect_info
from training.supervised.demonstrations import (
    gold_sql_of,
    reasoning_line,
    register_script,
    schema_json,
    tool_call_text,
)


@register_script("trustsql")
def trustsql_script(ex: Example, role: str, max_turns: int) -> list[str]:
    sql = gold_sql_of(ex)
    explore_sql = dialect_info(database_dialect(ex.db_path)).table_ddl_sql  # sqlite_master on SQLite

    def turn(think: str, action: str, body: str) -> str:
        return f"<think>\n{think}\n</think>\n<action>{action}</action>\n{body}"

    turns = [
        turn("List the tables and their columns.", "explore_schema", tool_call_text(TOOL, ex, explore_sql)),
        turn(reasoning_line(ex), "propose_schema", f"<schema>{schema_json(ex, joins=True)}</schema>"),
    ]
    if max_turns >= 4:
        turns.append(turn("Run the candidate query.", "generate_sql", tool_call_text(TOOL, ex, sql)))
    turns.append(turn("The query answers the question.", "confirm_answer", f"<answer>```sql\n{sql}\n```</answer>"))
    return turns[-max_turns:] if len(turns) > max_turns else turns
