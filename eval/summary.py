"""From per-question records to the summary (JSON) and the readable report (Markdown).

Two EX numbers (docs/evaluation.md "Semantics"):
- ``ex`` (project): matches / questions whose gold SQL ran. A question whose gold SQL
  errors, times out or is past the result budget cannot be scored; it is reported as
  ``gold_error`` / ``gold_timeout`` / ``gold_too_large`` and left out of the denominator.
  Missing predictions stay in it.
- ``ex_official`` (BIRD ``evaluation_ex.py``-compatible): the script's own 0/1 per question
  (``rex.bird_ex``: the SQL run as written, so an empty prediction on a question whose gold
  result is empty matches and ``SELECT 1;;`` is an error) over all questions; every other
  error, timeout (gold's included) and missing prediction counts as wrong.
- ``ex_test_suite`` (when ``eval.test_suite``): ``ex`` confirmed on every neighbour
  database of the test suite (``rex.test_suite``), over the same questions as ``ex``.
The outcomes (``rex.OUTCOMES``, the too-large ones included, plus ``missing`` for a
predictions file) are counted separately.
REX, QATCH, pass@k and self-consistency are averaged over the scorable questions.
Schema linking (``linking``, designs with a linking step only): per level (tables,
columns) precision, recall and F1 of the linked schema against the gold schema, averaged
over the scorable questions whose gold SQL names something at that level, and C-Recall,
the share of them whose linked schema holds every gold element (DualSQL's Table 2).
``summary.json`` keeps fractions in [0, 1]; the report and the console show percent with
a ``%`` sign (``eval.units.pct``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from agents.types import difficulty_order
from eval.scoring import MISSING
from eval.units import pct
from eval.voting import pass_at_k, pass_k_values
from rex import OUTCOMES
from rex.linking import LEVELS

OUTCOME_ORDER = (*OUTCOMES, MISSING)


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def _block(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """EX (both), REX, QATCH and outcome counts of a set of records."""
    n = len(records)
    scorable = [r for r in records if not r["gold_failed"]]
    matches = sum(r["ex"] for r in records)
    # BIRD's script's own 0/1 per question (rex.bird_ex); records written before it fall back to ex
    official = sum(r.get("ex_official", r["ex"]) for r in records)
    outcomes = Counter(r["outcome"] for r in records)
    suite = [r["ex_test_suite"] for r in records if "ex_test_suite" in r]
    block = {
        "n": n,
        "scorable": len(scorable),
        "matches": matches,
        "ex": matches / len(scorable) if scorable else 0.0,
        "ex_official": official / n if n else 0.0,
        "rex": _mean([r["rex"] for r in scorable]),
        "qatch": {k: _mean([r["qatch"][k] for r in scorable]) for k in ("cp", "cr", "tc", "mean")},
        "outcomes": {o: outcomes.get(o, 0) for o in OUTCOME_ORDER if o in outcomes or o in OUTCOMES},
    }
    if suite:  # records written with eval.test_suite (the same denominator as ex)
        block["ex_test_suite"] = sum(suite) / len(scorable) if scorable else 0.0
    linked = [r["linking"] for r in scorable if r.get("linking")]
    if linked:  # a design with a linking step; absent (not zeros) for one without
        block["linking"] = {level: _linking_level([x[level] for x in linked if x.get(level)]) for level in LEVELS}
    return block


LINKING_FIGURES = ("precision", "recall", "f1", "c_recall")
"""The linking figures of each level, in report order (DualSQL's Table 2)."""


def _linking_level(scores: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean precision, recall, F1 and C-Recall (share with every gold element linked) of
    the questions scored at one level; the figures are None when none was."""
    if not scores:
        return {"n": 0, **dict.fromkeys(LINKING_FIGURES)}
    return {
        "n": len(scores),
        "precision": _mean([s["precision"] for s in scores]),
        "recall": _mean([s["recall"] for s in scores]),
        "f1": _mean([s["f1"] for s in scores]),
        "c_recall": _mean([float(s["complete"]) for s in scores]),
    }


def summarize(records: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of an evaluation (what ``summary.json`` holds)."""
    summary: dict[str, Any] = {"settings": dict(settings), **_block(records)}
    labels = difficulty_order([r["difficulty"] for r in records])
    summary["by_difficulty"] = {d: _block([r for r in records if r["difficulty"] == d]) for d in labels}
    summary["missing"] = sum(r["missing"] for r in records)
    summary["executable"] = _mean([float(r["pred_executed"]) for r in records])
    scorable = [r for r in records if not r["gold_failed"]]
    samples = max((r["n_samples"] for r in records), default=0)
    summary["samples"] = samples
    if samples >= 1 and scorable:
        summary["pass_at_k"] = {
            str(k): _mean([pass_at_k(r["n_samples"], r["n_correct"], k) for r in scorable if r["n_samples"] >= k])
            for k in pass_k_values(samples)
        }
        summary["sample_ex"] = _mean([r["n_correct"] / r["n_samples"] for r in scorable if r["n_samples"]])
        summary["unique_sql"] = _mean([float(r["unique_sql"]) for r in records])
    voted = [r for r in records if "vote" in r]
    if voted:
        summary["sc"] = {
            "ex": _mean([float(r["vote"]["match"]) for r in voted if not r["gold_failed"]]),
            "no_consensus": sum(not r["vote"]["consensus"] for r in voted),
            "support": _mean([float(r["vote"]["support"]) for r in voted]),
        }
    per_sample = [s for r in records for s in r.get("samples", ())]
    if per_sample:
        summary["behaviour"] = {
            key: _mean([float(s[key]) for s in per_sample])
            for key in ("turns", "tool_calls", "policy_tokens", "response_tokens", "prompt_tokens")
        }
        summary["behaviour"]["answered"] = _mean([float(s["sql"] is not None) for s in per_sample])
        summary["end_reasons"] = dict(Counter(s["end_reason"] for s in per_sample))
    return summary


def markdown(summary: Mapping[str, Any]) -> str:
    """A readable report: headline, per-difficulty table, outcomes, sampling, behaviour."""
    s = summary
    st = s.get("settings", {})
    title = st.get("recipe") or st.get("predictions") or st.get("agent") or "evaluation"
    where = " / ".join(str(st[k]) for k in ("data_kind", "split") if st.get(k)) or "data"
    suited = "ex_test_suite" in s
    lines = [
        f"# Evaluation: {title}",
        "",
        f"- data: {where} ({s['n']} questions, {s['scorable']} with a working gold SQL)",
        f"- mode: {st.get('mode')}"
        + (
            f", {st.get('samples')} samples at T={st.get('temperature')}"
            if st.get("mode") != "greedy" and st.get("samples")
            else ""
        ),
    ]
    if st.get("model"):
        lines.append(f"- model: {st['model']}")
    lines += [
        "",
        "| metric | value |",
        "|---|---|",
        f"| EX (project: gold errors excluded) | {pct(s['ex'])} |",
        f"| EX (official-compatible: every error is wrong) | {pct(s['ex_official'])} |",
        *(
            [f"| EX on the test suite (the database and its neighbours) | {pct(s['ex_test_suite'])} |"]
            if suited
            else []
        ),
        f"| REX | {pct(s['rex'])} |",
        (
            f"| QATCH mean (CP / CR / TC) | {pct(s['qatch']['mean'])} ({pct(s['qatch']['cp'])} / "
            f"{pct(s['qatch']['cr'])} / {pct(s['qatch']['tc'])}) |"
        ),
        f"| executable predictions | {pct(s['executable'])} |",
    ]
    if s.get("missing"):
        lines.append(f"| missing predictions | {s['missing']} |")
    lines += [
        "",
        "## By difficulty",
        "",
        "| difficulty | n | EX | EX official |" + (" EX suite |" if suited else "") + " REX | QATCH |",
        "|---|---|---|---|" + ("---|" if suited else "") + "---|---|",
    ]
    for label, b in [*s["by_difficulty"].items(), ("**all**", s)]:
        lines.append(
            f"| {label} | {b['n']} | {pct(b['ex'])} | {pct(b['ex_official'])} | "
            + (f"{pct(b.get('ex_test_suite', 0.0))} | " if suited else "")
            + f"{pct(b['rex'])} | {pct(b['qatch']['mean'])} |"
        )
    lines += ["", "## Outcomes", "", "| outcome | count |", "|---|---|"]
    lines += [f"| {o} | {c} |" for o, c in s["outcomes"].items()]
    if "linking" in s:
        lines += linking_markdown(s)
    if s.get("samples", 0) > 1:
        lines += ["", "## Sampling", "", "| k | pass@k |", "|---|---|"]
        lines += [f"| {k} | {pct(v)} |" for k, v in s.get("pass_at_k", {}).items()]
        lines += [
            "",
            f"- EX of a single sample (mean): {pct(s.get('sample_ex', 0.0))}",
            f"- unique SQL per {s['samples']} samples: {s.get('unique_sql', 0.0):.2f}",
        ]
        if "sc" in s:
            lines += [
                (
                    f"- self-consistency EX: {pct(s['sc']['ex'])}; no consensus on {s['sc']['no_consensus']} "
                    f"question(s); mean cluster support {s['sc']['support']:.2f} samples"
                )
            ]
    if "behaviour" in s:
        b = s["behaviour"]
        lines += [
            "",
            "## Behaviour (per sample)",
            "",
            ("| turns | tool calls | policy tokens | response tokens | prompt tokens | answered |"),
            "|---|---|---|---|---|---|",
            (
                f"| {b['turns']:.2f} | {b['tool_calls']:.2f} | {b['policy_tokens']:.1f} | {b['response_tokens']:.1f} | "
                f"{b['prompt_tokens']:.1f} | {pct(b['answered'])} |"
            ),
            "",
            "End reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(s.get("end_reasons", {}).items())),
        ]
    return "\n".join(lines) + "\n"


def linking_markdown(summary: Mapping[str, Any]) -> list[str]:
    """The report's schema-linking section: one row per difficulty and overall."""
    head = " | ".join(f"{level} {name}" for level in LEVELS for name in ("P", "R", "F1", "C-Recall"))
    lines = [
        "",
        "## Schema linking",
        "",
        'The linked schema against the gold SQL\'s tables and columns (docs/evaluation.md "Schema linking").',
        "",
        f"| difficulty | n | {head} |",
        "|---|---|" + "---|" * 4 * len(LEVELS),
    ]
    blocks = [(d, b) for d, b in summary["by_difficulty"].items() if "linking" in b]
    for label, b in [*blocks, ("**all**", summary)]:
        cells = [
            pct(b["linking"][level][f]) if b["linking"][level]["n"] else "-"
            for level in LEVELS
            for f in LINKING_FIGURES
        ]
        lines.append(f"| {label} | {b['linking']['tables']['n']} | " + " | ".join(cells) + " |")
    return lines


def console_summary(summary: Mapping[str, Any]) -> str:
    """The few lines printed at the end of a run."""
    s = summary
    parts = [
        f"EX {pct(s['ex'])} (official {pct(s['ex_official'])}) on {s['n']} questions",
        *([f"test-suite EX {pct(s['ex_test_suite'])}"] if "ex_test_suite" in s else []),
        f"REX {pct(s['rex'])}",
        f"QATCH {pct(s['qatch']['mean'])}",
    ]
    by = ", ".join(f"{d} {pct(b['ex'])} (n={b['n']})" for d, b in s["by_difficulty"].items())
    out = (
        " | ".join(parts)
        + f"\n  by difficulty: {by}\n  outcomes: "
        + ", ".join(f"{k}={v}" for k, v in s["outcomes"].items())
    )
    if "linking" in s:
        out += "\n  schema linking: " + ", ".join(
            f"{level} F1 {pct(s['linking'][level]['f1'])} C-Recall {pct(s['linking'][level]['c_recall'])}"
            for level in LEVELS
            if s["linking"][level]["n"]
        )
    if s.get("samples", 0) > 1:
        out += "\n  pass@k: " + ", ".join(f"@{k} {pct(v)}" for k, v in s.get("pass_at_k", {}).items())
        if "sc" in s:
            out += f" | SC EX {pct(s['sc']['ex'])}, no consensus {s['sc']['no_consensus']}"
    return out
