"""``python -m eval.run``: evaluate a model (a design's agent through the rollout driver,
no update) or a predictions file, and write records, a summary and a report.

    python -m eval.run recipe=trustsql model.path=runs/trustsql/final data=minibird data.eval_split=dev
    python -m eval.run recipe=retoolsql eval.mode=sc eval.samples=4 eval.limit=4
    python -m eval.run recipe=think2sql dry_run=true      # print the effective evaluation settings
    python -m eval.run predictions=preds.jsonl data=bird data.root=/data/bird
    python -m eval.run predictions=predict_dev.json data=bird data.root=/data/bird data.split=dev

Decoding is the recipe's ``evaluation`` block - the paper's settings (Think2SQL: one sample
at T 0.7, top-p 0.95, 30k tokens; ReToolSQL: greedy, SC@16 at T 1.2; TRUST-SQL: greedy, 15
turns, majority vote at T 0.8) - unless ``eval.mode`` / ``eval.samples`` /
``eval.temperature`` or ``evaluation.*`` override it. On CPU the laptop profile applies
(greedy, ``laptop.eval_limit`` questions, its token and turn caps), printed; any value set
on the command line is kept, and a model served elsewhere (``model.base_url``) is scored on
every question unless ``eval.limit`` says otherwise. A generation never asks for more
tokens than the model's context minus the prompt. Scoring a predictions file has no
training split: ``data.split`` there names the split to score (as ``data.eval_split``).

The config is ``recipes/eval.yaml``: the training config plus an ``eval`` block, so a
design is evaluated with the same agent options, rollout limits and (on CPU) laptop
profile as training's before/after EX; ``model.path`` unset means the embedded default.
Output (``eval.out_dir``): ``records.jsonl`` (one line per question, appended as scored:
a killed run resumes where it stopped), ``run.json`` (settings), ``summary.json``,
``report.md``.

One process writes an output directory at a time: a run holds ``<eval.out_dir>/run.lock``
(tools/run_lock.py) while it scores, so a second evaluation into the same directory exits
at once with status 2, naming the first. With ``eval.out_dir`` set the lock is taken before
a model is loaded; the default directory is known once the decoding is, and is locked by
the evaluation loop (``eval.evaluate``). A dry run takes no lock.

The parts: ``eval.settings`` (the ``eval`` block), ``eval.evaluate`` (the scoring loop for
a predictions file or a policy), ``eval.decoding`` (the effective decoding of a model run)
and ``eval.model_run`` (mode A from a config: a local model or an endpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from eval.decoding import describe_decoding, model_context_from_path, policy_config, resolve_decoding
from eval.evaluate import evaluate_predictions, load_eval_split
from eval.model_run import run_model
from eval.settings import Say, default_out_dir, settings_from
from tools.errors import ConfigError
from tools.run_lock import hold_run_dir


def scored_split(data: Mapping[str, Any], explicit: Collection[str]) -> str:
    """The split a predictions file is scored on: ``data.eval_split``, or ``data.split`` when
    only that one was set on the command line (no training happens, so it can only mean the
    split to score); both set to different splits is an error."""
    split, eval_split = data.get("split"), data.get("eval_split")
    if "data.split" not in explicit or split == eval_split:
        return str(eval_split)
    if "data.eval_split" in explicit:
        raise ConfigError(
            f"data.split={split} and data.eval_split={eval_split}: scoring a predictions file reads one split; "
            "pass only one of them"
        )
    return str(split)


def run_predictions(raw: Mapping[str, Any], say: Say = print, explicit: Collection[str] = ()) -> dict[str, Any]:
    """Mode B from a composed config: the file scored on ``scored_split``."""
    from training.config import DataConfig

    settings = settings_from(raw)
    data = DataConfig(**{**raw["data"], "eval_split": scored_split(raw["data"], explicit)})
    settings = dataclasses.replace(settings, ex_metric=settings.ex_metric or data.ex_metric)
    examples, order = load_eval_split(data, settings.limit or data.eval_limit, int(raw.get("seed", 0)), say)
    path = str(raw["predictions"])
    out = settings.out_dir or default_out_dir(Path(path).stem, data.kind, data.eval_split, settings)
    info = {"data_kind": data.kind, "data_root": data.root, "split": data.eval_split, "ex_metric": settings.ex_metric}
    return evaluate_predictions(examples, path, out, settings, info, say, order=order)


def dry_run(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> None:
    """Print the effective evaluation settings and exit (no model loaded, nothing written)."""
    settings = settings_from(raw)
    if raw.get("predictions"):
        data = raw.get("data") or {}
        say(
            f"[eval settings] scoring {raw['predictions']} on {data.get('kind')}/{scored_split(data, explicit)}: "
            f"one SQL per question, greedy; questions: {settings.limit or data.get('eval_limit') or 'all'}"
        )
        return
    cfg, _device, laptop = policy_config(raw, explicit, say)
    say(describe_decoding(resolve_decoding(cfg, settings, explicit, laptop, model_context_from_path(cfg.model.path))))


def run(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any] | None:
    """Mode B when ``predictions`` is set, else mode A; ``dry_run=true`` only prints the settings."""
    if raw.get("dry_run"):
        dry_run(raw, explicit, say)
        return None
    out_dir = settings_from(raw).out_dir
    with hold_run_dir(out_dir, "eval.out_dir", say) if out_dir else contextlib.nullcontext():
        if raw.get("predictions"):
            return run_predictions(raw, say, explicit)
        return run_model(raw, explicit, say)


def _hydra_main() -> None:
    from training.config.command import hydra_entry

    hydra_entry("eval", run)


if __name__ == "__main__":
    _hydra_main()
