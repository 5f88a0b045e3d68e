"""Command line for datasets.

    python -m eval.data minibird --out DIR          # write the bundled benchmark into DIR
    python -m eval.data minibird --out DIR --format duckdb   # the same with <db>.duckdb files
    python -m eval.data minibird --format postgres --dsn postgresql://admin@host/bench
        # one schema per db_id in that database, plus a SELECT-only role; prints its data.dsn
    python -m eval.data minibird                    # build (or find) the cached copy
    python -m eval.data stats data=minibird         # counts per split, database, difficulty
    python -m eval.data stats data=bird data.root=PATH data.split=dev

``stats`` takes the same Hydra overrides as training: the ``data`` group is composed
from the installed ``recipes`` package. It is the data card: counts per split, and the
question ids a BIRD-layout file repeats with the ids they were given (MINIDEV's
``mini_dev_sqlite.json``: ``137 -> 137@487``, ``138 -> 138@488``).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.types import difficulty_order
from tools.errors import ConfigError, ToolkitError


def compose_data(overrides: Sequence[str]) -> dict[str, Any]:
    """The ``data`` config after Hydra-style overrides (``data=bird data.root=PATH``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import OmegaConf

    import recipes

    fixed = [("+" + o) if o.startswith("data=") else o for o in overrides]
    if not any(o.startswith("+data=") for o in fixed):
        fixed.insert(0, "+data=minibird")
    bad = [o for o in fixed if not (o.startswith("+data=") or o.startswith("data."))]
    if bad:
        raise ConfigError(f"unexpected argument(s) {bad}; stats takes data=<kind> and data.<key>=<value> overrides")
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(Path(recipes.__file__).parent), version_base=None):
            cfg = compose(config_name=None, overrides=fixed)
    except (HydraException, OmegaConfBaseException) as err:
        raise ConfigError(f"cannot compose the data config from {list(overrides)}: {err}") from None
    finally:
        GlobalHydra.instance().clear()
    return OmegaConf.to_container(cfg.data, resolve=True)  # type: ignore[return-value]


def dsn_override(dsn: str) -> str:
    """``data.dsn=<dsn>`` as a shell word Hydra parses: a DSN holding characters outside
    Hydra's unquoted values (``?``, ``=``, ``&``, ``#``) is quoted for both.

    >>> dsn_override("postgresql://reader@db/bench")
    'data.dsn=postgresql://reader@db/bench'
    >>> print(dsn_override("postgresql://reader@/bench?host=/tmp/pg&port=5432"))
    'data.dsn="postgresql://reader@/bench?host=/tmp/pg&port=5432"'
    """
    import re
    import shlex

    if re.fullmatch(r"[\w/:@.+%~-]+", dsn):
        return f"data.dsn={dsn}"
    return shlex.quote(f'data.dsn="{dsn}"')


def stats_text(data: dict[str, Any]) -> str:
    """Counts per split, database and difficulty, as a plain-text table."""
    from eval.data.loaders import load_split
    from eval.data.question_order import describe_renames

    lines = [f"data: kind={data['kind']} root={data['root']}"]
    plan = [(data["split"], data.get("limit"))]
    if data.get("eval_split") and data["eval_split"] != data["split"]:
        plan.append((data["eval_split"], data.get("eval_limit")))
    for split, limit in plan:
        loaded = load_split(
            data["kind"], data["root"], split, bool(data.get("drop_failing_gold")), limit, data.get("dsn")
        )
        examples = loaded.examples
        difficulties = difficulty_order([e.difficulty for e in examples])
        lines.append(f"\nsplit {split}: {len(examples)} examples, {len({e.db_id for e in examples})} databases")
        lines.append(_table(examples, difficulties))
        if loaded.renamed:  # MINIDEV repeats ids 137 and 138 (eval/data/question_order.py)
            lines.append(
                f"  {len(loaded.renamed)} repeated question id(s) renamed <id>@<position> (the first question "
                "keeps the id; BIRD's evaluation pairs by position):\n    " + describe_renames(loaded.renamed, "\n    ")
            )
    return "\n".join(lines)


def _table(examples: list, difficulties: list[str]) -> str:
    per_db: dict[str, Counter] = {}
    for ex in examples:
        per_db.setdefault(ex.db_id, Counter())[ex.difficulty] += 1
    width = max([len("database"), *(len(db) for db in per_db)])
    header = f"  {'database':<{width}}  " + "  ".join(f"{d:>11}" for d in difficulties) + f"  {'total':>6}"
    rows = [header]
    for db in sorted(per_db):
        counts = per_db[db]
        rows.append(
            f"  {db:<{width}}  " + "  ".join(f"{counts[d]:>11}" for d in difficulties) + f"  {sum(counts.values()):>6}"
        )
    total = Counter(ex.difficulty for ex in examples)
    share = "  ".join(f"{total[d]:>5} ({100 * total[d] / max(1, len(examples)):3.0f}%)" for d in difficulties)
    rows.append(f"  {'all':<{width}}  " + share + f"  {len(examples):>6}")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.data", description="Datasets: build minibird, print statistics."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    mb = sub.add_parser("minibird", help="build the bundled benchmark")
    mb.add_argument("--out", type=Path, default=None, help="empty or new folder to write into (default: the cache)")
    mb.add_argument(
        "--format",
        choices=("sqlite", "duckdb", "postgres"),
        default="sqlite",
        help="database files to write (duckdb needs --out), or postgres: into the database --dsn names",
    )
    mb.add_argument("--dsn", default=None, help="postgres: a role that may create schemas and roles (postgresql://…)")
    mb.add_argument("--role", default=None, help="postgres: the SELECT-only role to create (default sqlagent_reader)")
    st = sub.add_parser("stats", help="counts per split, database and difficulty")
    st.add_argument("overrides", nargs="*", help="data=<kind> data.root=PATH data.split=dev ...")
    args = parser.parse_args(argv)
    try:
        if args.command == "minibird":
            from eval.data import minibird

            if args.format == "duckdb" and not args.out:
                raise ConfigError("--format duckdb writes a new folder: pass --out DIR (the cache holds SQLite files)")
            if (args.format == "postgres") != bool(args.dsn):
                raise ConfigError("--format postgres and --dsn postgresql://… go together: pass both or neither")
            root = minibird.build(args.out) if args.out else minibird.ensure()
            if args.format == "duckdb":
                from eval.data.duckdb_copy import replace_sqlite_files

                replace_sqlite_files(root)
            print(f"minibird {minibird.version()} at {root}")
            if args.format == "postgres":
                from eval.data.postgres_copy import READER_ROLE, write_postgres

                reader = write_postgres(root, args.dsn, args.role or READER_ROLE)
                print(
                    f"written into PostgreSQL, one schema per db_id; point a recipe at it with\n"
                    f"  data.root={root} {dsn_override(reader)}"
                )
            print(
                stats_text(
                    {
                        "kind": "minibird",
                        "root": str(root),
                        "split": "train",
                        "eval_split": "dev",
                        "drop_failing_gold": False,
                        "limit": None,
                        "eval_limit": None,
                    }
                )
            )
        else:
            print(stats_text(compose_data(args.overrides)))
    except (ToolkitError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
