"""The evaluation loop: answers for a batch of questions (from a predictions file, or a
policy through the rollout driver) are scored and appended to a ``RunStore`` batch by
batch, then the summary, report.md and BIRD's predict.json are written over all of them.
The output directory is locked meanwhile (tools/run_lock.py): a second evaluation into it
is refused."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.types import Example
from eval.data.question_order import QuestionSlot
from eval.predictions import BIRD_SEPARATOR, pair_predictions, read_predictions
from eval.run_store import REPORT, SUMMARY, RunStore
from eval.scoring import Sample, sample_from_trajectories, score_question
from eval.settings import EvalSettings, Say
from eval.summary import console_summary, markdown, summarize
from tools.errors import ConfigError
from tools.run_lock import hold_run_dir

Producer = Callable[[Sequence[Example]], dict[str, list[Sample]]]
"""Answers for a batch of questions: example id -> its samples, in sample order."""


def select_examples(examples: Sequence[Example], limit: int | None, seed: int = 0) -> list[Example]:
    """A fixed seeded subset of ``limit`` questions - the same one training's before/after EX
    uses for ``data.eval_limit`` with the same seed - or all of them."""
    from training.rollout.setup import fixed_subset

    return fixed_subset(examples, limit, seed)


def load_eval_examples(data: Any, limit: int | None, seed: int, say: Say) -> list[Example]:
    """The evaluated split (``data.eval_split``), cut to the seeded subset of ``limit``."""
    return load_eval_split(data, limit, seed, say)[0]


def load_eval_split(data: Any, limit: int | None, seed: int, say: Say) -> tuple[list[Example], Sequence[QuestionSlot]]:
    """``load_eval_examples`` and every question of the split in file order (the
    ``QuestionSlot``s a BIRD predict file pairs with by position, whatever the subset)."""
    from eval.data.loaders import load_split

    loaded = load_split(
        data.kind, data.root, data.eval_split, bool(data.drop_failing_gold), None, getattr(data, "dsn", None)
    )
    chosen = select_examples(loaded.examples, limit, seed)
    say(f"[data] {data.kind}/{data.eval_split}: evaluating {len(chosen)} of {len(loaded.examples)} questions")
    return chosen, loaded.order


def evaluate(
    examples: Sequence[Example],
    produce: Producer,
    store: RunStore,
    settings: EvalSettings,
    say: Say = print,
    missing: frozenset[str] = frozenset(),
    progress: bool = True,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Score every example not yet in ``store`` batch by batch (records are on disk after
    each batch), then write the summary (plus ``extra``) and the report over all of them."""
    from rex import ExecScorer

    scorer = ExecScorer(
        timeout_s=settings.timeout_s,
        max_result_rows=settings.max_result_rows,
        max_result_bytes=settings.max_result_bytes,
    )
    done = store.done
    pending = [ex for ex in examples if ex.id not in done]
    if len(pending) < len(examples):
        say(f"[eval] resuming {store.dir}: {len(examples) - len(pending)} of {len(examples)} questions already scored")
    if settings.test_suite and pending:
        prepare_suites(pending, say)
    bar = _bar(len(examples), len(examples) - len(pending)) if progress else None
    try:
        for start in range(0, len(pending), settings.batch_size):
            batch = pending[start : start + settings.batch_size]
            answers = produce(batch)
            store.append(
                score_question(
                    ex,
                    answers[ex.id],
                    scorer,
                    settings.mode or "greedy",
                    ex.id in missing,
                    settings.ex_metric or "ex",
                    settings.test_suite,
                )
                for ex in batch
            )
            if bar is not None:
                bar.update(len(batch))
    finally:
        if bar is not None:
            bar.close()
    summary = summarize(store.records([ex.id for ex in examples]), _settings_of(store))
    summary.update(extra or {})
    import json

    store.write(SUMMARY, json.dumps(summary, indent=2, sort_keys=False))
    store.write(REPORT, markdown(summary) + decoding_section(summary.get("settings", {})))
    store.write(PREDICT, json.dumps(official_predictions(store.records([ex.id for ex in examples])), indent=2))
    say(console_summary(summary))
    say(f"[eval] wrote {store.records_path}, {store.dir / SUMMARY}, {store.dir / REPORT}, {store.dir / PREDICT}")
    return summary


def prepare_suites(examples: Sequence[Example], say: Say) -> None:
    """Build (or find cached) the test suite of each database, chosen for the gold queries
    of the questions on it (``rex.test_suite``), before anything is scored."""
    from rex.test_suite.suites import ensure_suites, on_sqlite

    # SQLite-only: questions on another dialect get no ex_test_suite (eval.scoring)
    built, cached = ensure_suites((ex.db_path, ex.gold_sql) for ex in examples if on_sqlite(ex.db_path))
    say(f"[eval] test suites: {built} built, {cached} cached (ex_test_suite; eval.test_suite=false skips)")


PREDICT = "predict.json"

DECODING_KEYS = (
    "ex_metric",
    "mode",
    "samples",
    "temperature",
    "top_p",
    "top_k",
    "max_new_tokens",
    "max_response_tokens",
    "max_context_tokens",
    "model_context",
    "observation_max_tokens",
    "turn_budgets",
    "questions",
    "laptop_profile",
    "overridden",
)


def decoding_section(settings: Mapping[str, Any]) -> str:
    """The evaluation settings the run used, as a Markdown list (appended to report.md)."""
    rows = [f"- {k}: {settings[k]}" for k in DECODING_KEYS if k in settings]
    return "\n## Evaluation settings\n\n" + "\n".join(rows) + "\n" if rows else ""


def official_predictions(records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """The chosen SQL of every question in BIRD's ``predict_dev.json`` format, in the
    question file's order and keyed by question id (BIRD's dev.json ids are positions), so
    the official ``evaluation.py``, which pairs by position, can be run on a model's answers
    when every question was evaluated; no answer is written as ''. An ``eval.limit``
    subset's file is keyed by id out of position: reading it back is refused by name."""
    return {str(r["id"]): f"{r['sql'] or ''}{BIRD_SEPARATOR}{r['db_id']}" for r in records}


def _settings_of(store: RunStore) -> dict[str, Any]:
    import json

    return json.loads((store.dir / "run.json").read_text(encoding="utf-8"))


def _bar(total: int, initial: int) -> Any:
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc="eval", unit="q", dynamic_ncols=True)


# ----------------------------------------------------------------------------- mode B: a file


def _split_of(examples: Sequence[Example]) -> dict[str, str]:
    """The split named by the examples themselves (the config's names take precedence)."""
    splits = sorted({ex.split for ex in examples if ex.split})
    return {"split": splits[0]} if len(splits) == 1 else {}


def _file_hash(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def evaluate_predictions(
    examples: Sequence[Example],
    predictions: str | Path,
    out_dir: str | Path,
    settings: EvalSettings = EvalSettings(),
    data_info: Mapping[str, Any] | None = None,
    say: Say = print,
    progress: bool = True,
    order: Sequence[QuestionSlot] | None = None,
) -> dict[str, Any]:
    """Score a predictions file against ``examples``, db_id checked: JSONL paired by question
    id, BIRD's predict files by position in ``order`` (the split's questions in file order,
    ``load_eval_split``; None: ``examples`` are the whole split in file order)."""
    if settings.mode not in (None, "greedy"):
        raise ConfigError(f"eval.mode={settings.mode!r} needs a model; a predictions file has one SQL per question")
    pairing = pair_predictions(examples, read_predictions(predictions), order)
    for note in pairing.notes:
        say(f"[eval] {note}")
    if pairing.missing:
        say(
            f"[eval] {len(pairing.missing)} of {len(examples)} questions have no prediction (counted as missing): "
            f"{', '.join(pairing.missing[:10])}{' ...' if len(pairing.missing) > 10 else ''}"
        )
    if pairing.unmatched:
        say(
            f"[eval] {len(pairing.unmatched)} predictions are for questions outside this evaluation (ignored): "
            f"{', '.join(pairing.unmatched[:10])}{' ...' if len(pairing.unmatched) > 10 else ''}"
        )
    run_settings = {
        "mode": "greedy",
        "samples": 1,
        "predictions": str(predictions),
        "predictions_sha256": _file_hash(predictions),
        "test_suite": settings.test_suite,  # records with and without ex_test_suite are never mixed
        **_split_of(examples),
        **(data_info or {}),
    }

    def produce(batch: Sequence[Example]) -> dict[str, list[Sample]]:
        return {ex.id: [Sample(sql=pairing.sql[ex.id])] for ex in batch}

    with hold_run_dir(out_dir, "eval.out_dir", say):
        store = RunStore(out_dir, run_settings, fresh=settings.fresh)
        return evaluate(
            examples,
            produce,
            store,
            settings,
            say,
            frozenset(pairing.missing),
            progress,
            extra={"unmatched_predictions": len(pairing.unmatched)},
        )


# ----------------------------------------------------------------------------- mode A: a model


def evaluate_policy(
    examples: Sequence[Example],
    agent: Any,
    tokenizer: Any,
    generate: Any,
    sampling: Any,
    limits: Any,
    out_dir: str | Path,
    settings: EvalSettings = EvalSettings(),
    info: Mapping[str, Any] | None = None,
    say: Say = print,
    progress: bool = True,
) -> dict[str, Any]:
    """Run ``agent`` on every example (``settings.num_samples`` requests each) through the
    rollout driver with ``generate``, and score the answers. ``sampling`` is used as given
    (greedy: temperature 0)."""
    from agents.designs import linked_schema_reader
    from tools import get_database
    from training.rollout import run_episodes

    n = settings.num_samples
    # the design's schema-linking hook (None: no linking step, so no linking figures)
    linked_schema = linked_schema_reader(getattr(agent, "name", ""))
    run_settings = {
        "mode": settings.mode,
        "samples": n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "max_new_tokens": sampling.max_new_tokens,
        "agent": getattr(agent, "name", type(agent).__name__),
        "test_suite": settings.test_suite,
        **_split_of(examples),
        **(info or {}),
    }

    def produce(batch: Sequence[Example]) -> dict[str, list[Sample]]:
        requests = [(ex, get_database(ex.db_path), s) for ex in batch for s in range(n)]
        episodes = getattr(generate, "run_episodes", run_episodes)  # a text source drives its own episodes
        trajectories = episodes(agent, requests, tokenizer, generate, sampling, limits)
        grouped: dict[tuple[str, int], list[Any]] = {}
        for t in trajectories:
            grouped.setdefault((t.example_id, t.sample_index), []).append(t)
        return {
            ex.id: [sample_from_trajectories(grouped.get((ex.id, s), []), linked_schema) for s in range(n)]
            for ex in batch
        }

    with hold_run_dir(out_dir, "eval.out_dir", say):
        store = RunStore(out_dir, run_settings, fresh=settings.fresh)
        return evaluate(examples, produce, store, settings, say, progress=progress)
