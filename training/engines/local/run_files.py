"""The local engine's run directory: clearing it, finished runs, ``metrics.jsonl`` records,
the ``final/`` model directory and ``summary.json``.

Whether a run starts new, starts over, resumes or is finished is decided by
``training.runs.resume_policy`` (shared with the veRL engine); this module reads and writes
the files that decision and the training loop need.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eval.units import pct
from tools.errors import DiskFullError
from tools.files import atomic_write_text, disk_full_error, disk_is_full
from training.engines.local import state as st
from training.engines.local.warm_start import warm_start_dir
from training.runs.samples import RUN_DIR_FULL_HINT
from training.runs.usage import process_usage

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
CONFIG = "config.yaml"
FINAL_DIR = "final"
RECORDS = ("metrics.jsonl", "samples.jsonl", "prompts.jsonl", "summary.json")


def clear_run(run_dir: str | Path) -> None:
    """``fresh=true``: checkpoints, records, the final model and the warm start go."""
    st.clear_checkpoints(run_dir)
    for name in RECORDS:
        (Path(run_dir) / name).unlink(missing_ok=True)
    shutil.rmtree(Path(run_dir) / FINAL_DIR, ignore_errors=True)
    shutil.rmtree(warm_start_dir(run_dir), ignore_errors=True)


def finished_summary(run_dir: str | Path, total_steps: int) -> dict[str, Any] | None:
    """The summary of a run that already finished ``total_steps`` (or more), else None."""
    path = st.latest_checkpoint(run_dir)
    summary_path = Path(run_dir) / SUMMARY
    if path is None or not summary_path.is_file():
        return None
    summary = json.loads(summary_path.read_text())
    step = st.read_meta(path).step
    if summary.get("steps") != step or step < total_steps:
        return None
    return summary


def read_records(path: Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` ([] when absent; a line cut by a kill is skipped)."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def last_record(records: Sequence[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [r for r in records if r.get("kind") == kind]
    return found[-1] if found else {}


def recorded(run_dir: str | Path, kind: str, step: int) -> dict[str, Any]:
    """The last ``kind`` record of ``metrics.jsonl`` at ``step`` ({} when none)."""
    found = [r for r in read_records(Path(run_dir) / METRICS) if r.get("kind") == kind and r.get("step") == step]
    return found[-1] if found else {}


def weights_identity(model_source: str) -> list[Any]:
    """A model directory's weight files by name, size and modification time (a retrained
    directory at the same path is other weights); other sources by their name."""
    folder = Path(model_source)
    if not folder.is_dir():
        return [model_source]
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    return [model_source, *([p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in files)]


def eval_inputs(model_source: str, question_ids: Sequence[str], settings: Any) -> str:
    """What an evaluation is made from, as a digest kept in its record: a resumed run reuses
    a recorded evaluation only when it was made from the same weights, held-out questions
    and settings (a run directory reused with other data or another model evaluates anew)."""
    import hashlib

    text = json.dumps([weights_identity(model_source), list(question_ids), settings], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def relabel_records(path: Path, kind: str, new_kind: str, before_step: int) -> None:
    """Rename ``kind`` records before ``before_step`` (a finished run continued with more
    steps: its old final evaluation is now a validation record), atomically."""
    records = read_records(path)
    if not any(r.get("kind") == kind and r.get("step", 0) < before_step for r in records):
        return
    for r in records:
        if r.get("kind") == kind and r.get("step", 0) < before_step:
            r["kind"] = new_kind
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records), hint=RUN_DIR_FULL_HINT)


def save_final(run_dir: str | Path, step: int, model: Any, tokenizer: Any) -> Path:
    """A plain HF model directory (model + tokenizer) that eval.run and model.path load:
    hard links to the last checkpoint's files when it holds these weights (no second
    copy on disk), else written out (under LoRA: the adapter merged in). A full disk raises
    ``DiskFullError`` (the model's size needed) and leaves no half-written ``final.tmp``."""
    final = Path(run_dir) / FINAL_DIR
    tmp = final.with_name(final.name + ".tmp")
    try:
        from training.engines.local.lora import is_lora, save_merged

        last = st.latest_checkpoint(run_dir)
        lora = is_lora(model)  # its checkpoints hold the adapter: final/ is the merged model
        if not lora and last is not None and st.read_meta(last).step == step and st.has_weights(last):
            st.link_model_dir(last, final)
            return final
        shutil.rmtree(tmp, ignore_errors=True)
        if lora:
            save_merged(model, tokenizer, tmp)
        else:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        return final
    except Exception as err:
        if isinstance(err, DiskFullError) or not disk_is_full(err, final.parent):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        needed = sum(p.numel() * p.element_size() for p in model.parameters())
        raise disk_full_error(final.parent, f"the final model ({FINAL_DIR}/)", needed, RUN_DIR_FULL_HINT) from err


def discard_unfinished_checkpoint(run_dir: str | Path, step: int) -> int:
    """After a failed save of ``step``: remove what it wrote (``step_N.tmp``, a renamed
    ``step_N`` that ``latest`` does not name yet, ``latest.tmp``), so the space comes back and
    the last complete checkpoint stays the one ``latest`` names. Returns the bytes removed."""
    root = st.checkpoint_root(run_dir)
    name = f"step_{step:06d}"
    leftovers = [root / f"{name}.tmp", root / f"{st.LATEST}.tmp"]
    if st.latest_checkpoint(run_dir) != root / name:
        leftovers.append(root / name)
    removed = 0
    for path in leftovers:
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        removed += sum(p.stat().st_size for p in files)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def write_summary(
    run_dir: str | Path,
    head: dict[str, Any],
    before: dict[str, Any],
    after: dict[str, Any],
    warm: dict[str, Any],
    final_dir: Path,
    wandb_dir: Any,
) -> tuple[dict[str, Any], dict[str, int]]:
    """summary.json (``head``: recipe, steps, sweep, ablation) and the disk use per part;
    evaluations of earlier processes of a resumed run are read back from metrics.jsonl (so
    a resumed run keeps its EX before)."""
    run_dir = Path(run_dir)
    records = read_records(run_dir / METRICS)
    before = before or last_record(records, "eval_before")
    if not warm and last_record(records, "warm_start"):
        warm = {k: v for k, v in last_record(records, "warm_start").items() if k not in ("step", "kind", "wall_time")}
        warm["ex"] = last_record(records, "eval_warm_start").get("ex")
    summary = {
        "recipe": head["recipe"],
        "steps": head["steps"],
        "run_dir": str(run_dir),
        "final_model": str(final_dir),
        "metrics": str(run_dir / METRICS),
        "checkpoint": str(st.latest_checkpoint(run_dir)),
        "wandb_dir": wandb_dir,
        "ex_before": before.get("ex"),
        "ex_warm_start": warm.get("ex"),
        "ex_after": after.get("ex"),
        "ex_test_suite_before": before.get("ex_test_suite"),
        "ex_test_suite_after": after.get("ex_test_suite"),
        "eval_questions": before.get("n", after.get("n")),
        "warm_start": warm or None,
        "sweep": head["sweep"],
        "ablation": head["ablation"],
    }
    atomic_write_text(run_dir / SUMMARY, json.dumps(summary, indent=2), hint=RUN_DIR_FULL_HINT)
    total, parts = st.disk_usage(run_dir)
    summary["disk_bytes"] = total
    summary.update(process_usage())  # this process's: a resumed run counts from its restart
    atomic_write_text(run_dir / SUMMARY, json.dumps(summary, indent=2), hint=RUN_DIR_FULL_HINT)
    return summary, parts


def summary_text(summary: dict[str, Any], parts: dict[str, int]) -> str:
    """The closing lines of a run: EX (percent), where everything is, and the disk it takes."""
    delta = ""
    if summary["ex_before"] is not None and summary["ex_after"] is not None:
        middle = f" -> after warm start {pct(summary['ex_warm_start'])}" if summary["ex_warm_start"] is not None else ""
        delta = (
            f"EX before {pct(summary['ex_before'])}{middle} -> after {pct(summary['ex_after'])} on "
            f"{summary['eval_questions']} held-out questions (greedy)"
        )
        if summary.get("ex_test_suite_before") is not None and summary.get("ex_test_suite_after") is not None:
            delta += (
                f"; on the test suite {pct(summary['ex_test_suite_before'])} -> {pct(summary['ex_test_suite_after'])}"
            )
    run_dir = summary["run_dir"]
    shares = ", ".join(
        f"{name} {st.human_size(size)}"
        for name, size in sorted(parts.items(), key=lambda kv: -kv[1])
        if size >= 1 << 20
    )
    weights = Path(summary["final_model"]) / "model.safetensors"
    if weights.is_file() and weights.stat().st_nlink > 1:
        shares += "; final/ shares the last checkpoint's weights"
    return (
        f"[summary] {summary['recipe']}: {summary['steps']} steps. {delta}\n"
        f"    checkpoint {summary['checkpoint']}\n    final model {summary['final_model']}\n"
        f"    metrics {summary['metrics']}\n    wandb {summary['wandb_dir']}\n"
        f"    run directory {run_dir}: {st.human_size(summary['disk_bytes'])} on disk"
        + (f" ({shares})" if shares else "")
        + usage_text(summary)
    )


def usage_text(summary: dict[str, Any]) -> str:
    """``this command: 612 s wall, peak resident memory 3.1 GB`` (empty when not measured)."""
    wall, peak = summary.get("wall_seconds"), summary.get("peak_rss_bytes")
    if wall is None:
        return ""
    memory = f", peak resident memory {st.human_size(peak)}" if peak else ""
    return f"\n    this command: {wall:.0f} s wall{memory}"
