"""The SFT dataset: conversations in the design's turn format, a data card, and replay.

``train.jsonl`` has one row per kept trace: ``messages`` (the final episode's whole
conversation — system, user, assistant turns and tool observations in place, exactly as
the policy saw it) and ``episodes`` (every episode: DualSQL's linker then generator), plus
the question id, source, band and difficulty. ``train.parquet`` holds the same rows when
pyarrow is installed; both load with ``datasets.load_dataset("json"|"parquet", ...)``.
``card.json`` / ``card.md`` count rows per band, difficulty and source, every drop by
reason, and name the teachers and settings.

Bring your own: any JSONL with ``question_id`` (a training question's id) and either
``episodes`` (``[{"role", "messages"}]``) or ``messages`` works as ``supervised
.dataset=PATH``. SFT never reads token ids from the file: it *replays* the assistant turns
through the agent and the rollout driver (``training/supervised/demonstrations.py``), so tool
observations are re-run and the token ids and loss masks are the rollout driver's own.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.types import Example, Trajectory
from tools.errors import ConfigError
from tools.files import atomic_write_text

TRAIN_JSONL, TRAIN_PARQUET, CARD_JSON, CARD_MD = "train.jsonl", "train.parquet", "card.json", "card.md"


def dataset_row(trace: Mapping[str, Any], band: str) -> dict[str, Any]:
    episodes = [{"role": e["role"], "messages": e["messages"]} for e in trace["episodes"]]
    return {
        "id": f"{trace['question_id']}:{trace['sample']}:{trace['source']}",
        "question_id": trace["question_id"],
        "sample": trace["sample"],
        "source": trace["source"],
        "db_id": trace["db_id"],
        "question": trace["question"],
        "difficulty": trace["difficulty"],
        "band": band,
        "final_sql": trace["final_sql"],
        "messages": episodes[-1]["messages"],
        "episodes": episodes,
    }


def write_dataset(out: Path, rows: Sequence[dict[str, Any]], card: dict[str, Any]) -> dict[str, Any]:
    """Write the rows and the card; returns the card with the files written."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / TRAIN_JSONL, "".join(json.dumps(r) + "\n" for r in rows))
    files = [TRAIN_JSONL]
    if _has_pyarrow():
        import pyarrow as pa
        import pyarrow.parquet as pq

        if rows:
            pq.write_table(pa.Table.from_pylist([_flat(r) for r in rows]), out / TRAIN_PARQUET)
            files.append(TRAIN_PARQUET)
    counts = {
        "rows": len(rows),
        "by_band": dict(Counter(r["band"] for r in rows)),
        "by_difficulty": dict(Counter(r["difficulty"] for r in rows)),
        "by_source": dict(Counter(r["source"] for r in rows)),
        "questions": len({r["question_id"] for r in rows}),
    }
    card = {**card, **counts, "files": files}
    (out / CARD_JSON).write_text(json.dumps(card, indent=2))
    (out / CARD_MD).write_text(card_markdown(card))
    return card


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """Parquet wants one schema: message contents as strings, episodes as JSON text."""
    out = dict(row)
    out["messages"] = [{"role": str(m.get("role")), "content": str(m.get("content", ""))} for m in row["messages"]]
    out["episodes"] = json.dumps(row["episodes"])
    return out


def _has_pyarrow() -> bool:
    import importlib.util

    return importlib.util.find_spec("pyarrow") is not None


def card_markdown(card: Mapping[str, Any]) -> str:
    lines = [
        f"# SFT data card: {card.get('design')}",
        "",
        f"{card['rows']} conversations on {card['questions']} training questions.",
        "",
    ]
    for title, key in (
        ("band", "by_band"),
        ("difficulty", "by_difficulty"),
        ("source", "by_source"),
        ("dropped (reason)", "dropped"),
    ):
        items = card.get(key) or {}
        lines += [f"| {title} | rows |", "|---|---|"] + [f"| {k} | {v} |" for k, v in sorted(items.items())]
        if not items:
            lines.append("| (none) | 0 |")
        lines.append("")
    lines += [
        "## Teachers and settings",
        "",
        "```json",
        json.dumps({k: card.get(k) for k in ("teachers", "settings", "pass_at_k")}, indent=2),
        "```",
        "",
    ]
    return "\n".join(lines)


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a dataset JSONL (ours or the user's)."""
    p = Path(path)
    if p.is_dir():
        p = p / TRAIN_JSONL
    if not p.exists():
        raise ConfigError(
            f"SFT dataset {p} does not exist; run stage=sft to build one or point supervised.dataset at a JSONL file"
        )
    rows = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    for i, row in enumerate(rows):
        if "question_id" not in row or not (row.get("episodes") or row.get("messages")):
            raise ConfigError(f"{p} line {i + 1}: a row needs question_id and episodes or messages")
    return rows


def assistant_turns(row: Mapping[str, Any]) -> dict[str, list[str]]:
    """The assistant turns of each episode role of a row."""
    episodes = row.get("episodes") or [{"role": None, "messages": row["messages"]}]
    out: dict[str, list[str]] = {}
    for e in episodes:
        out[e.get("role") or "*"] = [str(m.get("content", "")) for m in e["messages"] if m.get("role") == "assistant"]
    return out


def replay(
    agent: Any,
    rows: Sequence[Mapping[str, Any]],
    examples: Mapping[str, Example],
    tokenizer: Any,
    limits: Any,
    drop_phases: Sequence[str] = (),
) -> tuple[list[Trajectory], dict[str, int]]:
    """Token trajectories of every row, through the agent and the rollout driver.

    ``drop_phases`` removes turns of those phases before replay; the phases the agent's
    protocol lacks (its ``omitted_phases``: TRUST-SQL with ``propose_phase=false``, the SFT
    ablation of App. B.3) are removed too, so four-phase traces replay under the agent's
    own three-phase prompt. Rows that no longer play as a valid
    episode are dropped and counted by reason.
    """
    from training.supervised.demonstrations import phase_dropped, record_demonstrations

    kept: list[Trajectory] = []
    dropped: Counter[str] = Counter()
    missing = sorted({r["question_id"] for r in rows} - set(examples))
    if missing:
        raise ConfigError(
            f"SFT rows name question ids that are not in the training split: {missing[:10]}; "
            "check data.split / data.kind for this dataset"
        )
    for row in rows:
        turns = {
            role: [t for t in texts if not phase_dropped(t, drop_phases)]
            for role, texts in assistant_turns(row).items()
        }

        def script(ex: Example, role: str, max_turns: int, turns: dict = turns) -> list[str]:
            return turns.get(role) or turns.get("*") or []

        demos = record_demonstrations(agent, [examples[row["question_id"]]], tokenizer, limits, script)
        kept.extend(demos.trajectories)
        dropped.update({f"replay: {k}": v for k, v in demos.dropped.items()})
    return kept, dict(dropped)
