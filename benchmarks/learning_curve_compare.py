"""Reward arms of ``benchmarks/learning_curve.py`` side by side, in one figure and one table.

Each arm is a ``--out`` directory of the script (same warm start, another reward): its
``learning_curve.json`` and the GRPO arm's ``grpo-seed<N>/samples.jsonl``. The figure has
the training reward per step (5-step mean), the share of sampled SQL with a ``WHERE``
clause per block of 5 steps (the shortcut a reward that pays for result shapes teaches is
to drop filters), and held-out EX and EX on the test suite before and after each arm.

    python benchmarks/learning_curve_compare.py test_suite=runs/lc/test_suite qatch=runs/lc/qatch \\
        ex=runs/lc/ex --out docs/learning_curve/arms_20steps.png
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

BLOCK = 5


def has_where(sql: str) -> bool | None:
    """Whether ``sql`` filters with a WHERE clause (sqlglot, SQLite dialect); None when it
    does not parse.

    >>> has_where("SELECT COUNT(*) FROM t WHERE a = 1"), has_where("SELECT COUNT(*) FROM t")
    (True, False)
    >>> has_where("SELECT a FROM t JOIN u ON t.id = u.id WHERE u.b > (SELECT 1)"), has_where("SELECT a FROM t WHERE")
    (True, None)
    >>> has_where("SELECT 'where' FROM t"), has_where("SELECT a FROM t WHERE b = 'x")
    (False, None)
    """
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read="sqlite")
    except sqlglot.errors.SqlglotError:  # parse and tokenizer errors (an unclosed quote)
        return None
    return tree is not None and tree.find(exp.Where) is not None


def where_share(samples: Path, steps: int) -> list[tuple[int, int, int]]:
    """(first step, SQL with WHERE, parseable SQL) per block of ``BLOCK`` steps."""
    counts: dict[int, list[int]] = {}
    for line in samples.read_text().splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        verdict = has_where(row.get("final_sql") or "") if row.get("final_sql") else None
        if verdict is None:
            continue
        block = (int(row["step"]) - 1) // BLOCK
        counts.setdefault(block, [0, 0])
        counts[block][0] += int(verdict)
        counts[block][1] += 1
    return [(b * BLOCK + 1, *counts.get(b, [0, 0])) for b in range((steps + BLOCK - 1) // BLOCK)]


def load_arm(folder: Path) -> dict[str, Any]:
    summary = json.loads((folder / "learning_curve.json").read_text())
    samples = folder / f"grpo-seed{summary['seed']}" / "samples.jsonl"
    summary["where_share"] = where_share(samples, summary["steps"])
    return summary


def table(arms: dict[str, dict[str, Any]]) -> str:
    """One Markdown row per arm (the warm start's figures are the first arm's)."""
    first = next(iter(arms.values()))
    lines = [
        f"warm start: held-out EX {100 * first['ex_warm_start']:.1f} %, on the test suite "
        f"{100 * first['ex_test_suite_warm_start']:.1f} %, {first['suite_rejected_warm_start']} EX matches "
        f"the suite rejects ({first['held_out_questions']} questions)",
        "",
        "| arm | training reward, last steps | held-out EX after | on the test suite | EX matches the suite "
        "rejects | suspect-positive rate | SQL with WHERE, first → last 5 steps |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, s in arms.items():
        d, w = s["ex_diff"], s["where_share"]
        positives = s["exec_positive"]["grpo"]
        flagged = round(s["suspect_positive_rate"]["grpo"] * positives)
        lines.append(
            f"| {name} | {s['reward_last_mean']['grpo']:.3f} | {100 * s['ex_after']['grpo']:.1f} % "
            f"({100 * d['mean']:+.1f} pt [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]) | "
            f"{100 * s['ex_test_suite_after']['grpo']:.1f} % | {s['suite_rejected_after']['grpo']} | "
            f"{flagged} of {positives} | {_pct(w[0])} → {_pct(w[-1])} |"
        )
    return "\n".join(lines)


def _pct(block: tuple[int, int, int]) -> str:
    return f"{100 * block[1] / block[2]:.0f} % ({block[1]}/{block[2]})" if block[2] else "no SQL"


def plot(arms: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward, where, heldout) = plt.subplots(1, 3, figsize=(15, 4))
    for name, s in arms.items():
        r = np.asarray(s["reward_per_step"]["grpo"])
        window = min(BLOCK, r.size)
        reward.plot(np.arange(window, r.size + 1), np.convolve(r, np.ones(window) / window, "valid"), lw=2, label=name)
        blocks = [b for b in s["where_share"] if b[2]]
        where.plot(
            [b[0] + BLOCK / 2 - 0.5 for b in blocks], [100 * b[1] / b[2] for b in blocks], marker="o", label=name
        )
    reward.set(xlabel="GRPO step", ylabel=f"training reward ({BLOCK}-step mean)", title="training reward")
    where.set(xlabel="GRPO step", ylabel="% of sampled SQL", title="sampled SQL with a WHERE clause", ylim=(0, 100))
    first = next(iter(arms.values()))
    labels = ["warm start", *arms]
    ex = [first["ex_warm_start"], *(s["ex_after"]["grpo"] for s in arms.values())]
    suite = [first["ex_test_suite_warm_start"], *(s["ex_test_suite_after"]["grpo"] for s in arms.values())]
    x = np.arange(len(labels))
    heldout.bar(x - 0.2, [100 * v for v in ex], width=0.4, label="EX")
    heldout.bar(x + 0.2, [100 * v for v in suite], width=0.4, label="EX on the test suite")
    heldout.set_xticks(x, labels)
    heldout.set(ylabel="EX (%)", title=f"held-out EX, {first['held_out_questions']} questions")
    heldout.set_ylim(0, 135 * max(*ex, *suite, 0.01))  # room for the legend above the bars
    for axis in (reward, where, heldout):
        axis.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("arms", nargs="+", help="name=DIR: a learning_curve.py --out directory")
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    args = parser.parse_args()
    arms = {}
    for spec in args.arms:
        name, sep, folder = spec.partition("=")
        if not sep or not (Path(folder) / "learning_curve.json").is_file():
            parser.error(f"{spec!r}: expected name=DIR with DIR/learning_curve.json")
        arms[name] = load_arm(Path(folder))
    plot(arms, args.out)
    print(table(arms))
    print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
