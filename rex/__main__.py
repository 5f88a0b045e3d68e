"""``python -m rex compare --db PATH --gold "SQL" --pred "SQL"``: one JSON object on stdout.

``python -m rex suite build [data=<kind> data.<key>=<value> ...]``: build the test suite
(``rex.test_suite``) of every database of a benchmark's training and held-out splits,
chosen for the gold queries of its questions, with a progress bar (default data=minibird).

The object holds the EX outcome (project and official-script modes; ``ex_official`` runs
both queries as BIRD's evaluation script does, ``rex.bird_ex``), the REX score with
its column mapping, the QATCH scores, and for each query its tables/columns, whether it
has a top-level ORDER BY, and its row count or error.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from rex.bird_ex import official_result
from rex.metrics import execution_match, qatch_scores, rex_compare
from rex.scorer import ExecScorer
from rex.sql import has_top_level_order_by, is_select_only, referenced_schema
from rex.tables import Failure, as_outcome


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m rex", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("compare", help="execute a gold and a predicted query and compare them")
    compare.add_argument("--db", required=True, help="path of the SQLite database file")
    compare.add_argument("--gold", required=True, help="the gold SQL")
    compare.add_argument("--pred", required=True, help="the predicted SQL")
    compare.add_argument("--timeout", type=float, default=30.0, help="seconds per query (default 30)")
    suite = sub.add_parser("suite", help="test-suite neighbour databases (rex.test_suite)")
    suite.add_argument("action", choices=("build",))
    suite.add_argument("overrides", nargs="*", metavar="data=<kind> data.<key>=<value>")
    suite.add_argument("--neighbours", type=int, default=4, help="neighbour databases per database (default 4)")
    suite.add_argument("--rows-per-table", type=int, default=30, help="rows per table at most (default 30)")
    suite.add_argument("--candidates", type=int, default=8, help="candidates fuzzed per neighbour kept (default 8)")
    return parser


def build_suites(overrides: Sequence[str], settings: Any, say: Any = print) -> list[dict[str, Any]]:
    """Build (or find cached) the suite of every database of a benchmark's splits; one
    line per database, returned as dicts."""
    from tqdm.auto import tqdm

    from eval.data import load_examples
    from eval.data.__main__ import compose_data
    from rex.test_suite import ensure_suite
    from tools import get_database

    data = compose_data(list(overrides) or ["data=minibird"])
    golds: dict[str, list[str]] = {}
    for split, limit in dict.fromkeys(
        [(data["split"], data.get("limit")), (data.get("eval_split"), data.get("eval_limit"))]
    ):
        if split:
            for ex in load_examples(data["kind"], data["root"], split, bool(data.get("drop_failing_gold")), limit):
                golds.setdefault(ex.db_path, []).append(ex.gold_sql)
    rows = []
    bar = tqdm(total=len(golds) * settings.neighbours * settings.candidates, desc="test suites", unit="candidate")
    try:
        for path, sqls in golds.items():
            db = get_database(path)
            bar.set_postfix_str(db.db_id)
            suite, built = ensure_suite(db, sqls, settings, progress=bar.update)
            if not built:
                bar.update(settings.neighbours * settings.candidates)
            stats = suite.info["stats"]
            rows.append({"db_id": db.db_id, "built": built, "folder": str(suite.folder), **stats})
    finally:
        bar.close()
    for r in rows:
        say(
            f"[suite] {r['db_id']}: {'built' if r['built'] else 'cached'} in {r['folder']} "
            f"({r['bytes'] / 1024:.0f} KiB, {r['seconds']:.1f} s to build); {r['mutants']} mutants of "
            f"{r['golds']} gold queries, {r['caught_share']:.1%} told apart"
        )
    return rows


def _describe(sql: str, result: Any, schema: dict[str, list[str]]) -> dict[str, Any]:
    ref = referenced_schema(sql, schema)
    out: dict[str, Any] = {
        "sql": sql,
        "tables": list(ref.tables),
        "columns": list(ref.columns),
        "parsed": ref.parsed,
        "select_only": is_select_only(sql),
        "ordered": has_top_level_order_by(sql),
    }
    if ref.error:
        out["parse_error"] = ref.error
    if ref.unresolved:
        out["unresolved"] = list(ref.unresolved)
    outcome = as_outcome(result)
    if isinstance(outcome, Failure):
        out["error"] = {"kind": outcome.kind, "message": outcome.message}
    else:
        out["columns_returned"] = list(outcome.columns)
        out["row_count"] = len(outcome.rows)
    return out


def compare(db_path: str, gold_sql: str, pred_sql: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """Everything ``python -m rex compare`` prints, as a dict."""
    from tools import get_database

    db = get_database(db_path)
    scorer = ExecScorer(timeout_s=timeout_s)
    gold = scorer.gold(db, gold_sql)
    pred = scorer.execute(db, pred_sql)
    report: dict[str, Any] = {
        "db": str(db.path),
        "ex": execution_match(gold.result, pred),
        "ex_official": execution_match(
            official_result(scorer, db, gold_sql, gold.result),
            official_result(scorer, db, pred_sql, pred),
            official=True,
        ),
        "rex": None,
        "qatch": None,
    }
    both = not isinstance(as_outcome(gold.result), Failure) and not isinstance(as_outcome(pred), Failure)
    if both:
        rex = rex_compare(gold.result, pred, gold.ordered)
        report["rex"] = rex.score
        report["rex_details"] = rex.to_json()
        report["qatch"] = qatch_scores(gold.result, pred).to_json()
    schema = db.schema()
    report["gold"] = _describe(gold_sql, gold.result, schema)
    report["pred"] = _describe(pred_sql, pred, schema)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from tools.errors import ToolkitError

    if args.command == "suite":
        from rex.test_suite import SuiteSettings

        try:
            build_suites(args.overrides, SuiteSettings(args.neighbours, args.rows_per_table, args.candidates))
        except ToolkitError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        report = compare(args.db, args.gold, args.pred, args.timeout)
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(report, ensure_ascii=False, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
