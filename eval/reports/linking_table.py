"""The schema-linking comparison table of ``eval.compare``: per run and difficulty, precision,
recall, F1 and C-Recall of the linked schema at table and column level (the ``linking`` blocks
of ``eval.summary.summarize``; docs/evaluation.md "Schema linking").

A run whose design has no linking step (Think2SQL) has no such block: its row says so with
'-' cells, never zeros.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents.types import difficulty_order
from eval.summary import LINKING_FIGURES
from rex.linking import LEVELS

LABELS = {"precision": "P", "recall": "R", "f1": "F1", "c_recall": "C-Recall"}
HEADER = ["run", "difficulty", "n", *[f"{level} {LABELS[f]}" for level in LEVELS for f in LINKING_FIGURES]]
"""The table's columns: run, difficulty, questions scored, then the figures per level."""


def linking_scores(summary: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``"all"`` and each difficulty -> ``{"n", "tables_precision", ..., "columns_c_recall"}``
    from a summary's linking blocks; empty when the summary has none."""

    def flat(block: Mapping[str, Any]) -> dict[str, Any]:
        linking = block["linking"]
        out: dict[str, Any] = {"n": linking["tables"]["n"]}
        out.update({f"{level}_{f}": linking[level][f] for level in LEVELS for f in LINKING_FIGURES})
        return out

    if "linking" not in summary:
        return {}
    out = {"all": flat(summary)}
    out.update({d: flat(b) for d, b in (summary.get("by_difficulty") or {}).items() if "linking" in b})
    return out


def linking_table(views: Sequence[Any]) -> tuple[list[str], list[list[Any]]] | None:
    """Header and rows (one per run and difficulty, then the run overall), or None when no
    run has linking figures. ``views``: ``eval.compare.RunView``s (their ``name`` and ``linking``)."""
    if not any(v.linking for v in views):
        return None
    rows: list[list[Any]] = []
    figures = [f"{level}_{f}" for level in LEVELS for f in LINKING_FIGURES]
    for v in views:
        if not v.linking:
            rows.append([v.name, "all", None, *[None] * len(figures)])
            continue
        labels = [*difficulty_order([d for d in v.linking if d != "all"]), "all"]
        rows += [[v.name, d, v.linking[d]["n"], *[v.linking[d][k] for k in figures]] for d in labels]
    return list(HEADER), rows
