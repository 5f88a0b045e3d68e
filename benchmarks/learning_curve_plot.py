"""The figure of ``benchmarks/learning_curve.py``: training reward per step of each arm,
and held-out EX and EX on the test suite of the warm start and of each arm after training."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4), gridspec_kw={"width_ratios": [2, 1]})
    for arm, color in (("grpo", "tab:blue"), ("control", "tab:gray")):
        if arm not in summary["reward_per_step"]:
            continue
        r = np.asarray(summary["reward_per_step"][arm])
        x = np.arange(1, r.size + 1)
        label = arm + (" (lr = 0)" if arm == "control" else "")
        left.plot(
            x,
            r,
            color=color,
            alpha=0.4 if r.size > 5 else 1.0,
            lw=1,
            marker="o",
            ms=3,
            label=None if r.size > 5 else label,
        )
        if r.size > 5:  # a 5-step moving mean over the noisy per-step rewards
            smooth = np.convolve(r, np.ones(5) / 5, mode="valid")
            left.plot(np.arange(5, r.size + 1), smooth, color=color, lw=2, label=f"{label}, 5-step mean")
    left.set_xlabel("GRPO step")
    left.set_ylabel("mean training reward")
    reward = " ".join(summary.get("overrides") or []) or "recipe default reward"
    left.set_title(f"{summary['recipe']} ({reward}): training reward per step")
    left.legend()
    labels = ["warm start", *(f"{a} after" for a in summary["ex_after"])]
    ex = [summary["ex_warm_start"], *summary["ex_after"].values()]
    suite = [summary["ex_test_suite_warm_start"], *summary["ex_test_suite_after"].values()]
    x = np.arange(len(labels))
    right.bar(x - 0.2, [100 * v for v in ex], width=0.4, color="tab:blue", label="EX")
    right.bar(x + 0.2, [100 * v for v in suite], width=0.4, color="tab:orange", label="EX on the test suite")
    right.set_xticks(x, labels)
    right.legend(fontsize=8)
    d = summary["ex_diff"]
    right.set_title(
        f"held-out EX, {summary['held_out_questions']} questions\n"
        f"GRPO - {summary['ex_diff_against']} {100 * d['mean']:+.1f} pt [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}]"
    )
    right.set_ylabel("EX (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
