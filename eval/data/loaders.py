"""Loading BIRD, Spider, JSONL and minibird examples into immutable ``Example`` objects.

One pipeline for every kind: resolve the layout (``eval.data.layout``), read the records,
validate them (required fields, unique ids, a database for every db_id, gold SQL that
parses), and only then build examples — every problem found is reported together in one
``DataError``; only a BIRD-layout file may repeat an id (MINIDEV's ``mini_dev_sqlite.json``
does): BIRD's evaluation pairs questions by position, so the later questions are renamed
``<id>@<position>`` with a warning (``eval.data.question_order``). Gold tables and
columns come from ``rex.sql.referenced_schema`` against the database's schema. With
``drop_failing_gold`` the gold SQL is executed through the shared read-only helper
(``tools.execute`` with the ``metric`` preset) and failures are dropped with a logged count.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import ijson

from agents.types import Example
from eval.data.gold_refs import GoldCache
from eval.data.layout import Layout, Problems, resolve_bird, resolve_jsonl, resolve_spider, show_ids
from eval.data.question_order import QuestionSlot, RenamedId, describe_renames, renamed_id
from eval.data.spider_variants import resolve_spider_dk, resolve_spider_realistic, resolve_spider_syn
from eval.data.synsql import resolve_synsql
from tools.errors import ConfigError, DataError
from tools.plugins import DESIGN_GROUP, Registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Fields:
    """Which record keys hold what, per dataset kind (first present key wins)."""

    ids: tuple[str, ...]
    sql: tuple[str, ...]
    sql_required: bool
    evidence: tuple[str, ...] = ("evidence",)
    difficulty: tuple[str, ...] = ("difficulty",)
    question: tuple[str, ...] = ("question",)


BIRD_FIELDS = Fields(ids=("question_id", "id"), sql=("SQL", "sql", "query"), sql_required=True)
SPIDER_FIELDS = Fields(ids=(), sql=("query",), sql_required=True, evidence=(), difficulty=())
SPIDER_SYN_FIELDS = replace(SPIDER_FIELDS, question=("SpiderSynQuestion", "question"))
JSONL_FIELDS = Fields(ids=("id", "question_id"), sql=("sql", "SQL", "query"), sql_required=False)
# SynSQL-2.5M's data.json (eval/data/synsql.py): no ids (positions), external_knowledge, sql_complexity
SYNSQL_FIELDS = Fields(
    ids=(), sql=("sql",), sql_required=True, evidence=("external_knowledge",), difficulty=("sql_complexity",)
)


@dataclass(frozen=True)
class Record:
    """One validated question record, before its database is looked at."""

    id: str
    original_id: str  # as the file writes it (``id`` differs for a renamed repeat)
    db_id: str
    question: str
    evidence: str
    sql: str
    difficulty: str
    where: str  # "file:line" or "file[index]" for messages
    position: int  # index in the question file (after the records of earlier files)


Resolver = Callable[[Path, str, Problems], Layout]


@dataclass(frozen=True)
class Kind:
    """A dataset kind: how to find its files, which keys its records use, how to read
    them, and (for bundled data) where it lives when no root is given."""

    resolve: Resolver
    fields: Fields
    reader: str  # "json" | "jsonl"
    default_root: Callable[[], Path] | None = None
    difficulty_of: Callable[[str], str] | None = None  # gold SQL -> level, when the records carry none
    rename_repeated_ids: bool = False  # BIRD: its evaluation pairs by position, so a repeated id is renamed
    # A published evaluation set is read as published: a gold query that does not parse
    # (Spider-DK has one) is kept with a warning and scores as gold_error, as in the set's
    # own evaluation, instead of refusing the whole file.
    keep_unparsed_gold: bool = False


def _spider_hardness(sql: str) -> str:
    from rex.spider import spider_hardness

    return spider_hardness(sql)


def _minibird_root() -> Path:
    from eval.data import minibird

    return minibird.ensure()


KINDS: Registry[Kind] = Registry("dataset kind", plugins=DESIGN_GROUP)
KINDS.register("bird")(Kind(resolve_bird, BIRD_FIELDS, "json", rename_repeated_ids=True))
KINDS.register("spider")(Kind(resolve_spider, SPIDER_FIELDS, "json", difficulty_of=_spider_hardness))
KINDS.register("jsonl")(Kind(resolve_jsonl, JSONL_FIELDS, "jsonl"))
KINDS.register("synsql")(Kind(resolve_synsql, SYNSQL_FIELDS, "json"))
for _name, _resolve, _fields in (
    ("spider_syn", resolve_spider_syn, SPIDER_SYN_FIELDS),
    ("spider_dk", resolve_spider_dk, SPIDER_FIELDS),
    ("spider_realistic", resolve_spider_realistic, SPIDER_FIELDS),
):
    KINDS.register(_name)(Kind(_resolve, _fields, "json", difficulty_of=_spider_hardness, keep_unparsed_gold=True))
KINDS.register("minibird")(
    Kind(resolve_bird, BIRD_FIELDS, "json", default_root=_minibird_root, rename_repeated_ids=True)
)


@dataclass(frozen=True)
class LoadedSplit:
    """A split's examples, its questions in file order (``order``: what BIRD's predict files
    pair by position, including questions ``drop_failing_gold`` dropped) and the repeated
    ids that were renamed."""

    examples: list[Example]
    order: tuple[QuestionSlot, ...]
    renamed: tuple[RenamedId, ...]


def load_examples(
    kind: str = "minibird",
    root: str | os.PathLike[str] | None = None,
    split: str = "dev",
    drop_failing_gold: bool = False,
    limit: int | None = None,
    dsn: str | None = None,
    offset: int = 0,
) -> list[Example]:
    """The examples of one split, validated up front.

    ``root`` is the dataset folder (BIRD: the split folder or its parent; Spider: the
    folder with ``tables.json``; JSONL: the ``.jsonl`` file or a folder with
    ``<split>.jsonl``); for ``minibird`` None means the cached build (built on first use).
    ``limit`` keeps the first N records of the file (before validation, so a quick run
    does not parse a whole training set); ``offset`` skips the first N records before that
    (ids stay those of the whole file), so two calls can take disjoint parts of a split.
    ``drop_failing_gold`` executes each gold SQL and drops the examples whose SQL errors
    or times out, logging how many; otherwise they are kept without executing anything.
    ``dsn`` (a ``postgresql://`` URI): the databases are the schemas of that PostgreSQL
    database, one per ``db_id`` (``tools.db.postgres_backend``), instead of the files beside
    the questions; a DSN ending ``#<schema>`` puts every ``db_id`` in that one schema (BIRD
    mini-dev's PostgreSQL dump). A BIRD layout's ``mini_<split>_postgresql.json`` is then
    read instead of the SQLite question file (its gold SQL is PostgreSQL's).

    A BIRD-layout file that repeats a question id (MINIDEV's ``mini_dev_sqlite.json``
    repeats 137 and 138) loads: the first question keeps the id, later ones become
    ``<id>@<position>`` (``137@487``), with a logged warning naming each rename.

    Raises ``DataError`` listing every layout problem (missing files, db_ids without a
    database, unparseable gold SQL, duplicate ids in other kinds, malformed records) with
    paths and example ids; ``UnknownNameError`` for an unknown kind; ``ConfigError`` for
    bad arguments.
    """
    return load_split(kind, root, split, drop_failing_gold, limit, dsn, offset).examples


def load_split(
    kind: str = "minibird",
    root: str | os.PathLike[str] | None = None,
    split: str = "dev",
    drop_failing_gold: bool = False,
    limit: int | None = None,
    dsn: str | None = None,
    offset: int = 0,
) -> LoadedSplit:
    """``load_examples`` with the question order and the renamed ids (same arguments, same
    errors)."""
    spec = KINDS.get(kind)
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise ConfigError(f"limit={limit!r}: pass a positive integer or None")
    if not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"offset={offset!r}: pass 0 or a positive integer (records skipped first)")
    if not split or not isinstance(split, str):
        raise ConfigError(f"split={split!r}: pass a split name such as 'train' or 'dev'")
    base = _root(kind, spec, root)
    problems = Problems(kind, base, split)
    if not base.exists():
        problems.add(f"dataset root {base} does not exist; set data.root to the folder holding the dataset")
        problems.raise_if_any()
    layout = _question_files_for(spec.resolve(base, split, problems), dsn, problems)
    records, renamed = _unique_ids(_read_all(layout, spec, problems, limit, offset), spec.rename_repeated_ids, problems)
    caches = {db_id: GoldCache(db) for db_id, db in _databases(records, layout, problems, dsn).items()}
    try:
        examples = _build_examples(records, caches, split, problems, spec)
        problems.raise_if_any()
        if drop_failing_gold:
            examples = _drop_failing(examples, caches, f"{kind} {split}")
    finally:
        for cache in caches.values():
            cache.flush()
    if renamed:
        log.warning(
            "%s %s: %d question id(s) repeat an earlier question's; BIRD's evaluation pairs questions by "
            "position, so each keeps its place and the repeat is renamed <id>@<position>: %s",
            kind,
            split,
            len(renamed),
            describe_renames(renamed),
        )
    order = tuple(QuestionSlot(i, r.id, r.original_id, r.db_id) for i, r in enumerate(records))
    return LoadedSplit(examples, order, tuple(renamed))


def _question_files_for(layout: Layout, dsn: str | None, problems: Problems) -> Layout:
    """With ``dsn`` the layout's PostgreSQL question file (MINIDEV's
    ``mini_dev_postgresql.json``: gold SQL in PostgreSQL's dialect) replaces the SQLite one;
    without, a layout that has only that file is a problem."""
    postgres = layout.dialect_question_files.get("postgres")
    if dsn and postgres:
        return replace(layout, question_files=postgres)
    if postgres and not layout.question_files:
        problems.add(
            f"only {postgres[0]} holds the questions, its gold SQL in PostgreSQL's dialect: set data.dsn "
            f"to the PostgreSQL database holding the databases, or add the SQLite question file beside it"
        )
    return layout


def _root(kind: str, spec: Kind, root: str | os.PathLike[str] | None) -> Path:
    if root is not None and str(root) != "":
        return Path(root).expanduser().resolve()
    if spec.default_root is not None:
        return spec.default_root()
    raise ConfigError(
        f"data.root is required for kind {kind!r}: set it to the dataset folder (e.g. data.root=/data/{kind})"
    )


# ----------------------------------------------------------------------------- records


def _read_all(layout: Layout, spec: Kind, problems: Problems, limit: int | None, skip: int = 0) -> list[Record]:
    """Records of every question file in order. An example without an id gets its position
    in the file (JSON: list index; JSONL: line number - 1), offset by the sizes of earlier
    files, so Spider's two train files give unique ids and fixing a broken line keeps ids."""
    records: list[Record] = []
    offset = 0
    for path in layout.question_files:
        if limit is not None and len(records) >= limit:
            return records
        lines = [0]  # JSONL: lines read so far, blank ones included (ids are line numbers)
        raw = _stream_jsonl(path, problems, lines) if spec.reader == "jsonl" else _stream_json(path, problems)
        seen = 0
        for where, index, item in raw:
            seen = index + 1
            if offset + index < skip:
                continue
            rec = _record(item, offset + index, where, spec.fields, problems)
            if rec is not None:
                records.append(rec)
            if limit is not None and len(records) >= limit:
                return records  # before the next entry is parsed
        offset += lines[0] if spec.reader == "jsonl" else seen
    return records


def _stream_json(path: Path, problems: Problems) -> Iterator[tuple[str, int, Any]]:
    """The entries of a JSON list file, parsed one at a time (ijson): SynSQL-2.5M's
    ``data.json`` is one list of 2.5 million entries, and a ``limit`` stops reading it early
    instead of holding the whole document. A syntax error ends the file there (the entries
    before it are read; the error is a problem, unless a limit stopped reading before it)."""
    try:
        handle = path.open("rb")
    except OSError as err:
        problems.add(f"{path}: cannot read the questions file ({err})")
        return
    with handle:
        first = handle.read(4096).lstrip()[:1]
        if first != b"[":
            found = {b"{": "an object", b"": "an empty file"}.get(first, "a single value")
            problems.add(f"{path}: expected a JSON list of question objects, found {found}")
            return
        handle.seek(0)
        index = -1
        try:
            for index, item in enumerate(ijson.items(handle, "item", use_float=True)):
                yield f"{path}[{index}]", index, item
        except (ijson.JSONError, UnicodeDecodeError, OSError) as err:
            problems.add(f"{path}: cannot read the questions file after entry {index + 1} ({err})")


def _stream_jsonl(path: Path, problems: Problems, lines: list[int]) -> Iterator[tuple[str, int, Any]]:
    """The entries of a JSONL file, one line at a time (a limit stops reading early); a line
    that is not JSON is a problem and the reading goes on. ``lines[0]``: lines read so far."""
    try:
        handle = path.open(encoding="utf-8")
    except OSError as err:
        problems.add(f"{path}: cannot read the questions file ({err})")
        return
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                lines[0] = number
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError as err:
                    problems.add(f"{path}:{number}: not valid JSON ({err.msg})")
                    continue
                yield f"{path}:{number}", number - 1, item
        except UnicodeDecodeError as err:
            problems.add(f"{path}: cannot read the questions file after line {lines[0]} ({err})")


def _get(item: Mapping[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in item and item[key] is not None:
            return item[key]
    return None


def _record(item: Any, index: int, where: str, fields: Fields, problems: Problems) -> Record | None:
    if not isinstance(item, dict):
        problems.add(f"{where}: expected a JSON object, found {type(item).__name__}")
        return None
    raw_id = _get(item, fields.ids)
    ex_id = str(raw_id) if raw_id is not None else str(index)
    question = _get(item, fields.question)
    missing = [k for k in ("db_id",) if not isinstance(item.get(k), str) or not item[k].strip()]
    if not isinstance(question, str) or not question.strip():
        missing.append("/".join(fields.question))
    sql = _get(item, fields.sql)
    if fields.sql_required and (not isinstance(sql, str) or not sql.strip()):
        missing.append("/".join(fields.sql))
    if missing:
        problems.add(f"{where} (example {ex_id}): missing or empty {', '.join(missing)}")
        return None
    difficulty = _get(item, fields.difficulty)
    difficulty = str(difficulty).strip().lower() if difficulty not in (None, "") else "unknown"
    evidence = _get(item, fields.evidence)
    return Record(
        id=ex_id,
        original_id=ex_id,
        db_id=item["db_id"].strip(),
        question=question.strip(),
        evidence=str(evidence).strip() if evidence is not None else "",
        sql=sql.strip() if isinstance(sql, str) else "",
        difficulty=difficulty,
        where=where,
        position=index,
    )


def _unique_ids(records: list[Record], rename: bool, problems: Problems) -> tuple[list[Record], list[RenamedId]]:
    """Records with unique ids: with ``rename`` a repeated id becomes ``<id>@<position>``
    (``eval.data.question_order``), otherwise it is a problem."""
    seen: dict[str, str] = {}
    out: list[Record] = []
    renamed: list[RenamedId] = []
    for rec in records:
        if rec.id in seen and rename:
            new = renamed_id(rec.id, rec.position)
            renamed.append(RenamedId(rec.id, new, rec.where, seen[rec.id]))
            rec = replace(rec, id=new)
        if rec.id in seen:
            problems.add(f"{rec.where}: example id {rec.id} already used at {seen[rec.id]}; ids must be unique")
            continue
        seen[rec.id] = rec.where
        out.append(rec)
    return out, renamed


# --------------------------------------------------------------------------- databases


def _databases(records: list[Record], layout: Layout, problems: Problems, dsn: str | None = None) -> dict[str, Any]:
    """``{db_id: tools.Backend}`` for every db_id that has a readable database: a file of
    the layout, or with ``dsn`` the schema ``db_id`` of that PostgreSQL database."""
    from tools import get_database
    from tools.db.postgres_backend import postgres_locator

    # ``data.dsn`` names the schema after ``#`` when every database shares it (BIRD mini-dev's
    # PostgreSQL dump loads all of them into one); otherwise each db_id is a schema.
    shared_schema = urllib.parse.unquote(dsn.partition("#")[2]) if dsn else ""
    by_db: dict[str, list[str]] = {}
    for rec in records:
        by_db.setdefault(rec.db_id, []).append(rec.id)
    out: dict[str, Any] = {}
    for db_id, ids in by_db.items():
        path: Any = postgres_locator(dsn, shared_schema or db_id, db_id) if dsn else layout.database(db_id)
        if path is None:
            problems.add(f"db_id {db_id!r} has no database at {layout.expected_database(db_id)} ({show_ids(ids)})")
            continue
        try:
            db = get_database(path, db_id)
            db.schema()
        except DataError as err:
            problems.add(f"db_id {db_id!r}: {err} ({show_ids(ids)})")
            continue
        out[db_id] = db
    return out


def _build_examples(
    records: list[Record],
    caches: Mapping[str, GoldCache],
    split: str,
    problems: Problems,
    spec: Kind,
) -> list[Example]:
    """Examples from records; the kind's ``difficulty_of`` (Spider's hardness rules) labels
    records that carry no difficulty."""
    difficulty_of = spec.difficulty_of
    examples = []
    for rec in records:
        cache = caches.get(rec.db_id)
        if cache is None:
            continue  # already reported once per db_id
        tables: tuple[str, ...] = ()
        columns: tuple[str, ...] = ()
        if rec.sql:
            tables, columns, error = cache.reference(rec.sql)
            if error is not None and spec.keep_unparsed_gold:
                log.warning("%s (example %s): gold SQL does not parse, kept as published: %s", rec.where, rec.id, error)
            elif error is not None:
                problems.add(f"{rec.where} (example {rec.id}): gold SQL does not parse: {error}")
                continue
        examples.append(
            Example(
                id=rec.id,
                db_id=rec.db_id,
                db_path=cache.db.locator,
                question=rec.question,
                evidence=rec.evidence,
                gold_sql=rec.sql,
                difficulty=(
                    difficulty_of(rec.sql)
                    if difficulty_of and rec.difficulty == "unknown" and rec.sql
                    else rec.difficulty
                ),
                gold_tables=tables,
                gold_columns=columns,
                split=split,
            )
        )
    return examples


def _drop_failing(examples: list[Example], caches: Mapping[str, GoldCache], label: str) -> list[Example]:
    """Keep the examples whose gold SQL executes (or that have none); log what was dropped."""
    kept, dropped = [], []
    for ex in examples:
        error = caches[ex.db_id].execution_error(ex.gold_sql) if ex.gold_sql else None
        if error is None:
            kept.append(ex)
        else:
            dropped.append(f"{ex.id} ({error})")
    if dropped:
        log.warning(
            "%s: dropped %d of %d examples whose gold SQL fails to execute: %s",
            label,
            len(dropped),
            len(examples),
            "; ".join(dropped[:5]) + (" ..." if len(dropped) > 5 else ""),
        )
    return kept
