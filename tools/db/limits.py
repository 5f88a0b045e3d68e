"""What one query may do: ``QueryLimits``, the per-design presets and the statement and
PRAGMA lists the read-only guards (``tools.db.guards``) enforce."""

from __future__ import annotations

from dataclasses import dataclass

from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, Registry

METADATA_PRAGMAS: frozenset[str] = frozenset(
    {"table_info", "table_xinfo", "index_list", "index_info", "foreign_key_list"}
)
READONLY_PRAGMAS: frozenset[str] = METADATA_PRAGMAS | {"index_xinfo"}
"""PRAGMAs that only read the schema; the only ones a preset may allow."""

DENIED_FUNCTIONS: frozenset[str] = frozenset(
    {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "sqlite_dbpage"}
)
SCHEMA_TABLES: frozenset[str] = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master"})
SELECT_KEYWORDS: frozenset[str] = frozenset({"SELECT", "WITH", "VALUES"})
OTHER_STATEMENT_KEYWORDS: frozenset[str] = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "REPLACE",
        "UPSERT",
        "CREATE",
        "DROP",
        "ALTER",
        "ATTACH",
        "DETACH",
        "PRAGMA",
        "BEGIN",
        "COMMIT",
        "END",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "VACUUM",
        "REINDEX",
        "ANALYZE",
        "EXPLAIN",
    }
)
"""First keywords of non-SELECT statements: refused up front with a clear message (any
other first word goes to SQLite, which reports the syntax error)."""


@dataclass(frozen=True)
class QueryLimits:
    """What one execution may do and how much of its result comes back.

    ``max_rows``: rows returned (``None`` = all); ``max_cell_chars``: text cells longer than
    this are cut with a marker; ``timeout_s``: wall-clock deadline; ``max_vm_steps``: SQLite
    VM instruction budget (``None`` = unlimited); ``select_only``: the statement must start
    with SELECT/WITH/VALUES (or PRAGMA when ``allowed_pragmas`` is non-empty);
    ``allowed_pragmas``: read-only metadata PRAGMAs allowed (statement or table-valued
    ``pragma_x(...)`` form); ``full_schema_queries``: queries that read ``sqlite_master``
    or a metadata PRAGMA ignore the row and cell caps (an executor that shows the schema in full).
    ``max_result_rows`` / ``max_result_bytes``: the budget of the rows a run holds (the
    whole result when ``max_rows`` is None; ``None`` = no budget): past either, fetching
    stops and the run is a ``too_large`` error (``tools.db.budget``; bytes are estimated).
    """

    max_rows: int | None = 100
    max_cell_chars: int | None = None
    timeout_s: float = 5.0
    max_vm_steps: int | None = 15_000_000
    select_only: bool = True
    allowed_pragmas: frozenset[str] = frozenset()
    full_schema_queries: bool = False
    max_result_rows: int | None = None
    max_result_bytes: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "allowed_pragmas", frozenset(p.lower() for p in self.allowed_pragmas))
        bad = sorted(self.allowed_pragmas - READONLY_PRAGMAS)
        if bad:
            raise ConfigError(
                f"QueryLimits.allowed_pragmas holds {bad}, which are not read-only metadata "
                f"PRAGMAs; allow only some of {sorted(READONLY_PRAGMAS)}"
            )
        for name in ("max_rows", "max_cell_chars", "max_vm_steps"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 0):
                raise ConfigError(f"QueryLimits.{name}={value!r}; use a non-negative int or None")
        if not self.timeout_s > 0:
            raise ConfigError(f"QueryLimits.timeout_s={self.timeout_s!r}; use a positive number of seconds")
        check_result_budget("QueryLimits.", self.max_result_rows, self.max_result_bytes)


def check_result_budget(prefix: str, max_result_rows: object, max_result_bytes: object) -> None:
    """A ``ConfigError`` naming ``<prefix>max_result_rows`` / ``max_result_bytes`` unless
    each is a positive int or None (no budget)."""
    for name, value in (("max_result_rows", max_result_rows), ("max_result_bytes", max_result_bytes)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            unit = "rows" if name == "max_result_rows" else "bytes, e.g. 134217728 for 128 MiB"
            raise ConfigError(f"{prefix}{name}={value!r}; use a positive int ({unit}) or null for no budget")


DEFAULT_LIMITS = QueryLimits()
"""SELECT/WITH only, 100 rows, 5 s, 15M VM steps: what a query runs under when no preset is named."""

PRESETS: Registry[QueryLimits] = Registry("executor preset", plugins=DESIGN_GROUP)
"""Named ``QueryLimits``: ``metric`` (rewards and evaluation) here; each design registers the
preset of its own executor tool (``register_preset``)."""


def register_preset(name: str, limits: QueryLimits) -> QueryLimits:
    """Register ``limits`` as executor preset ``name`` (a design's ``tools.py`` does this)."""
    return PRESETS.register(name)(limits)


METRIC_MAX_RESULT_ROWS = 1_000_000
METRIC_MAX_RESULT_BYTES = 128 * 1024 * 1024
"""The result budget of rewards and evaluation: well above ordinary gold results (128 MiB
holds about 250,000 rows of nine cells, or a million rows of one or two), far below what a
cross join returns (``SELECT * FROM t a, t b, t c`` on 3,000 rows stops at the budget
after about 0.6 s of CPU time and about 110 MiB, instead of holding gigabytes until the
30 s deadline; ``benchmarks/bench_result_budget.py``)."""

# Rewards and evaluation (EX/REX/QATCH): whole results within the budget, 30 s per query.
register_preset(
    "metric",
    QueryLimits(
        max_rows=None,
        timeout_s=30.0,
        max_vm_steps=None,
        max_result_rows=METRIC_MAX_RESULT_ROWS,
        max_result_bytes=METRIC_MAX_RESULT_BYTES,
    ),
)

INTERNAL_LIMITS = QueryLimits(max_rows=None, timeout_s=600.0, max_vm_steps=None, allowed_pragmas=READONLY_PRAGMAS)
"""For the toolkit's own metadata and profiling queries (still read-only)."""
