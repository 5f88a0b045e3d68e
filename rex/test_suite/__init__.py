"""Test-suite execution accuracy: a database's fuzzed neighbours that tell a gold query
from its near misses (the distilled test suites of Zhong, Yu and Klein, EMNLP 2020).

``ensure_suite(db, gold_sqls)`` builds (once, cached by the database's content hash) a
few neighbour databases with the same schema and keys and fuzzed contents, chosen so that
the gold queries' mutants (``mutants``) no longer match them. The ``test_suite`` metric
(``rex.test_suite.metric``) counts a prediction correct only when it matches the gold
result on the original and on every neighbour. ``python -m rex suite build data=...``
builds the suites of a benchmark's databases. See docs/evaluation.md "Test-suite EX".
"""

from __future__ import annotations

from rex.test_suite.build import BuildStats, SuiteSettings
from rex.test_suite.mutations import Mutant, mutants
from rex.test_suite.suites import Suite, ensure_suite, ensure_suites, find_suites, suite_for_scoring, suites_dir

__all__ = [
    "BuildStats",
    "Mutant",
    "Suite",
    "SuiteSettings",
    "ensure_suite",
    "ensure_suites",
    "find_suites",
    "mutants",
    "suite_for_scoring",
    "suites_dir",
]
