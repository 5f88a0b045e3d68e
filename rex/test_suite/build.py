"""Building a database's test suite: candidates fuzzed, the most telling ones kept.

The gold queries' mutants (``rex.test_suite.mutations``) that EX cannot tell from their gold
on the original database are the ones a neighbour must catch. For each of the
``neighbours`` slots, ``candidates`` fuzzed databases are written and the one that catches
the most of the mutants still alive is kept (ties: the one on which the most gold queries
return rows). A neighbour does not judge a gold query that fails on it or whose ORDER BY
... LIMIT cuts through tied rows there (``rex.test_suite.reader.tie_probe``).

Everything is written into a temporary folder beside the cache folder and renamed into
place (``tools.cache.writing_cache_folder``); the original database is only ever opened
read-only.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rex.tables import Failure, Table
from rex.test_suite.domain import read_plan
from rex.test_suite.fuzz import write_neighbour
from rex.test_suite.mutations import mutants
from rex.test_suite.reader import Reader, limit_cuts_tie, same, tie_probe
from tools.errors import ConfigError

SUITE_VERSION = 1
Progress = Callable[[int], object]


@dataclass(frozen=True)
class SuiteSettings:
    """How a suite is built (part of its cache key)."""

    neighbours: int = 4
    rows_per_table: int = 30
    candidates: int = 8
    timeout_s: float = 5.0
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("neighbours", "rows_per_table", "candidates"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ConfigError(f"test_suite.{name}={value!r}; use a positive integer")
        if not (isinstance(self.timeout_s, (int, float)) and self.timeout_s > 0):
            raise ConfigError(f"test_suite.timeout_s={self.timeout_s!r}; use a positive number of seconds")

    def key(self) -> str:
        return json.dumps({"version": SUITE_VERSION, **asdict(self)}, sort_keys=True)


@dataclass
class BuildStats:
    """What a build found: gold queries used, mutants, how many each stage caught."""

    golds: int = 0
    golds_failing: int = 0
    mutants: int = 0
    caught_by_original: int = 0
    caught_by_neighbours: int = 0
    seconds: float = 0.0
    bytes: int = 0
    uncaught: list[dict[str, str]] = field(default_factory=list)

    @property
    def caught_share(self) -> float:
        """Mutants the suite (original + neighbours) tells from their gold, over all mutants."""
        return (self.caught_by_original + self.caught_by_neighbours) / self.mutants if self.mutants else 1.0


@dataclass
class _Gold:
    sql: str
    alive: list[str]  # mutants EX cannot yet tell from it


def gold_digest(sqls: Sequence[str]) -> list[str]:
    """Short hashes of the gold queries a suite was chosen for (sorted, unique)."""
    return sorted({hashlib.sha256(" ".join(s.split()).encode()).hexdigest()[:16] for s in sqls})


def build_into(
    folder: Path, db_path: Path, gold_sqls: Sequence[str], settings: SuiteSettings, seed: str, progress: Progress | None
) -> tuple[list[str], BuildStats]:
    """Write the chosen neighbours into ``folder`` (``neighbour_<i>.sqlite``); their names
    and the build's statistics. ``progress(n)`` is called as work is done."""
    started = time.monotonic()
    plan = read_plan(db_path, gold_sqls)
    stats = BuildStats()
    golds = _alive_mutants(db_path, list(dict.fromkeys(gold_sqls)), plan.schema(), settings, stats)
    names = []
    for slot in range(settings.neighbours):
        best: tuple[tuple[int, int], Path, dict[int, set[str]]] | None = None
        for c in range(settings.candidates):
            path = folder / f"candidate_{slot}_{c}.sqlite"
            digest = hashlib.sha256(f"{seed}:{settings.seed}:{slot}:{c}".encode()).hexdigest()
            write_neighbour(plan, path, int(digest[:12], 16), settings.rows_per_table)
            caught, nonempty = _judge(path, golds, settings.timeout_s)
            score = (sum(len(v) for v in caught.values()), nonempty)
            if best is None or score > best[0]:
                if best is not None:
                    best[1].unlink()
                best = (score, path, caught)
            else:
                path.unlink()
            if progress is not None:
                progress(1)
        assert best is not None
        name = f"neighbour_{slot}.sqlite"
        best[1].rename(folder / name)
        names.append(name)
        for i, killed in best[2].items():
            golds[i].alive = [m for m in golds[i].alive if m not in killed]
            stats.caught_by_neighbours += len(killed)
    stats.uncaught = [{"gold": g.sql, "mutant": m} for g in golds for m in g.alive]
    stats.seconds = time.monotonic() - started
    stats.bytes = sum((folder / n).stat().st_size for n in names)
    return names, stats


def _alive_mutants(
    db_path: Path, gold_sqls: list[str], schema: dict[str, list[str]], settings: SuiteSettings, stats: BuildStats
) -> list[_Gold]:
    reader = Reader(db_path, settings.timeout_s)
    out = []
    try:
        for sql in gold_sqls:
            gold = reader.run(sql)
            if isinstance(gold, Failure):
                stats.golds_failing += 1
                continue
            stats.golds += 1
            alive = []
            for m in mutants(sql, schema):
                stats.mutants += 1
                if same(gold, reader.run(m.sql)):
                    alive.append(m.sql)
                else:
                    stats.caught_by_original += 1
            out.append(_Gold(sql, alive))
    finally:
        reader.close()
    return out


def _judge(path: Path, golds: list[_Gold], timeout_s: float) -> tuple[dict[int, set[str]], int]:
    """The alive mutants a candidate catches (per gold index) and how many gold queries
    return rows on it."""
    reader = Reader(path, timeout_s)
    caught: dict[int, set[str]] = {}
    nonempty = 0
    try:
        for i, g in enumerate(golds):
            result = judged_gold(reader, g.sql)
            if result is None:
                continue
            nonempty += bool(result.rows)
            killed = {m for m in g.alive if not same(result, reader.run(m))}
            if killed:
                caught[i] = killed
    finally:
        reader.close()
    return caught, nonempty


def judged_gold(reader: Reader, sql: str) -> Table | None:
    """The gold result on a neighbour, or None when the neighbour cannot judge the query
    (it fails there, or its LIMIT cuts through tied rows)."""
    result = reader.run(sql)
    if isinstance(result, Failure):
        return None
    probe = tie_probe(sql)
    if probe is not None and limit_cuts_tie(reader.run(probe[0]), probe[1], probe[2]):
        return None
    return result


def stats_json(stats: BuildStats) -> dict[str, Any]:
    return {**asdict(stats), "caught_share": stats.caught_share}
