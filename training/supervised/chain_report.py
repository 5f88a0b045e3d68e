"""What the supervised chain reports: pass@k and its bands, hard questions gained, drop
counts, and the closing summary printed after ``stage=data | sft | sft_rl``."""

from __future__ import annotations

from typing import Any

from training.supervised import collect as col


def pass_summary(records: dict[str, dict], k: int) -> dict[str, Any]:
    bands = {b: sum(r["band"] == b for r in records.values()) for b in col.BANDS}
    n = len(records) or 1
    return {
        "k": k,
        "questions": len(records),
        "pass_at_k": sum(r["correct"] > 0 for r in records.values()) / n,
        "mean_correct": sum(r["correct"] / max(r["samples"], 1) for r in records.values()) / n,
        "bands": bands,
        "failed_requests": sum(r.get("failed", 0) for r in records.values()),
    }


def hard_gained(before: dict[str, dict], after: dict[str, dict]) -> dict[str, int]:
    hard = [q for q, r in before.items() if r["band"] == "all_wrong"]
    return {"hard_before": len(hard), "solved_after": sum(after.get(q, {}).get("correct", 0) > 0 for q in hard)}


def counts(items: dict[str, int]) -> str:
    return ", ".join(f"{n} x {why}" for why, n in sorted(items.items())) or "none"


def describe_summary(s: dict[str, Any]) -> str:
    def ex(v: Any) -> str:
        return "-" if v is None else f"{v:.3f}"

    lines = [
        f"[summary] {s['recipe']} stage={s['stage']} (chain {s['chain']}), {s['questions']} questions, "
        f"{s.get('wall_time_s', 0):.0f}s"
    ]
    if s.get("pass_at_k"):
        p = s["pass_at_k"]
        lines.append(f"    pass@{p['k']} before SFT {p['pass_at_k']:.3f}; bands {p['bands']}")
    if s.get("pass_at_k_after_sft"):
        p = s["pass_at_k_after_sft"]
        lines.append(f"    pass@{p['k']} after SFT {p['pass_at_k']:.3f}; hard questions gained {s.get('hard_gained')}")
    lines.append(f"    SFT dataset: {s.get('rows', 0)} conversations; dropped {counts(s.get('dropped') or {})}")
    lines.append(
        f"    EX before {ex(s.get('ex_before'))} -> after SFT {ex(s.get('ex_after_sft'))}"
        + (f" -> after RL {ex(s.get('ex_after_rl'))}" if s["stage"] == "sft_rl" else "")
    )
    return "\n".join(lines)
