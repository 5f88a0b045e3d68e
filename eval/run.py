"""``python -m eval.run``: evaluate a model (a design's agent through the rollout driver,
no update) or a predictions file, and write records, a summary and a report.

    python -m eval.run recipe=trustsql model.path=runs/trustsql/final data=minibird data.eval_split=dev
    python -m eval.run recipe=retoolsql eval.mode=sc eval.samples=4 eval.limit=4
    python -m eval.run recipe=think2sql dry_run=true      # print the effective evaluation settings
    python -m eval.run predictions=preds.jsonl data=bird data.root=/data/bird

Decoding is the recipe's ``evaluation`` block - the paper's settings (Think2SQL: one sample
at T 0.7, top-p 0.95, 30k tokens; ReToolSQL: greedy, SC@16 at T 1.2; TRUST-SQL: greedy, 15
turns, majority vote at T 0.8) - unless ``eval.mode`` / ``eval.samples`` /
``eval.temperature`` or ``evaluation.*`` override it. On CPU the laptop profile applies
(greedy, ``laptop.eval_limit`` questions, its token and turn caps), printed; any value set
on the command line is kept. A generation never asks for more tokens than the model's
context minus the prompt.

The config is ``recipes/eval.yaml``: the training config plus an ``eval`` block, so a
design is evaluated with the same agent options, rollout limits and (on CPU) laptop
profile as training's before/after EX; ``model.path`` unset means the embedded default.
Output (``eval.out_dir``): ``records.jsonl`` (one line per question, appended as scored:
a killed run resumes where it stopped), ``run.json`` (settings), ``summary.json``,
``report.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.types import Example
from eval.predictions import BIRD_SEPARATOR, pair_predictions, read_predictions
from eval.records import REPORT, SUMMARY, RunStore
from eval.report import console_summary, markdown, summarize
from eval.scoring import Sample, sample_from_trajectories, score_question
from tools.errors import ConfigError, ToolkitError

Say = Callable[[str], None]
Producer = Callable[[Sequence[Example]], dict[str, list[Sample]]]
"""Answers for a batch of questions: example id -> its samples, in sample order."""

DEFAULT_SAMPLES = 16  # SPEC.md: ReToolSQL's self-consistency draws N = 16
MODES = ("greedy", "sample", "sc", "passk")
"""greedy: one temperature-0 answer; sample: one sampled answer (Think2SQL's protocol);
sc: a vote over N samples (self-consistency / majority voting); passk: N samples, sample 0
reported, pass@k over all."""


@dataclass(frozen=True)
class EvalSettings:
    """The ``eval`` block of ``recipes/eval.yaml`` (null = the recipe's ``evaluation``)."""

    mode: str | None = None
    samples: int | None = None
    temperature: float | None = None
    limit: int | None = None
    out_dir: str | None = None
    fresh: bool = False
    batch_size: int = 8
    timeout_s: float = 30.0
    ex_metric: str | None = None  # the reported EX rule: ex (BIRD) | spider; null = data.ex_metric

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in MODES:
            raise ConfigError(f"eval.mode={self.mode!r}; choose one of {', '.join(MODES)}")
        if self.samples is not None and (not isinstance(self.samples, int) or self.samples < 1):
            raise ConfigError(f"eval.samples={self.samples!r}: a positive integer or null")
        if self.mode in ("greedy", "sample") and self.samples not in (None, 1):  # (None: the recipe's)
            raise ConfigError(
                f"eval.samples={self.samples} with eval.mode={self.mode}: this mode gives one "
                "answer per question; use eval.mode=sc or eval.mode=passk to draw several"
            )
        if self.temperature is not None and self.temperature <= 0:
            raise ConfigError(f"eval.temperature={self.temperature}: sampling needs > 0 (greedy is eval.mode=greedy)")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 1):
            raise ConfigError(f"eval.limit={self.limit!r}: a positive integer or null")
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ConfigError(f"eval.batch_size={self.batch_size!r}: a positive integer")
        if self.timeout_s <= 0:
            raise ConfigError(f"eval.timeout_s={self.timeout_s}: a positive number of seconds")
        if self.ex_metric not in (None, "ex", "spider"):
            raise ConfigError(
                f"eval.ex_metric={self.ex_metric!r}; choose ex (BIRD's set rule) or spider "
                "(Spider's official execution match), or null for data.ex_metric"
            )

    @property
    def num_samples(self) -> int:
        if self.mode in (None, "greedy", "sample"):
            return 1
        return self.samples or DEFAULT_SAMPLES


# ----------------------------------------------------------------------------- the loop


def select_examples(examples: Sequence[Example], limit: int | None, seed: int = 0) -> list[Example]:
    """A fixed seeded subset of ``limit`` questions - the same one training's before/after EX
    uses for ``data.eval_limit`` with the same seed - or all of them."""
    from training.rollout_setup import fixed_subset

    return fixed_subset(examples, limit, seed)


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

    scorer = ExecScorer(timeout_s=settings.timeout_s)
    done = store.done
    pending = [ex for ex in examples if ex.id not in done]
    if len(pending) < len(examples):
        say(f"[eval] resuming {store.dir}: {len(examples) - len(pending)} of {len(examples)} questions already scored")
    bar = _bar(len(examples), len(examples) - len(pending)) if progress else None
    try:
        for start in range(0, len(pending), settings.batch_size):
            batch = pending[start : start + settings.batch_size]
            answers = produce(batch)
            store.append(
                score_question(
                    ex, answers[ex.id], scorer, settings.mode or "greedy", ex.id in missing, settings.ex_metric or "ex"
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
    """The chosen SQL of every question in BIRD's ``predict_dev.json`` format (keyed by
    question id, which is the position in BIRD's dev.json), so the official
    ``evaluation.py`` can be run on a model's answers too; no answer is written as ''."""
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
) -> dict[str, Any]:
    """Score a predictions file against ``examples`` (paired by question id, db_id checked)."""
    if settings.mode not in (None, "greedy"):
        raise ConfigError(f"eval.mode={settings.mode!r} needs a model; a predictions file has one SQL per question")
    pairing = pair_predictions(examples, read_predictions(predictions))
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
        **_split_of(examples),
        **(data_info or {}),
    }
    store = RunStore(out_dir, run_settings, fresh=settings.fresh)

    def produce(batch: Sequence[Example]) -> dict[str, list[Sample]]:
        return {ex.id: [Sample(sql=pairing.sql[ex.id])] for ex in batch}

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
    from tools import get_database
    from training.rollout import run_episodes

    n = settings.num_samples
    run_settings = {
        "mode": settings.mode,
        "samples": n,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "top_k": sampling.top_k,
        "max_new_tokens": sampling.max_new_tokens,
        "agent": getattr(agent, "name", type(agent).__name__),
        **_split_of(examples),
        **(info or {}),
    }
    store = RunStore(out_dir, run_settings, fresh=settings.fresh)

    def produce(batch: Sequence[Example]) -> dict[str, list[Sample]]:
        requests = [(ex, get_database(ex.db_path), s) for ex in batch for s in range(n)]
        episodes = getattr(generate, "run_episodes", run_episodes)  # a text source drives its own episodes
        trajectories = episodes(agent, requests, tokenizer, generate, sampling, limits)
        grouped: dict[tuple[str, int], list[Any]] = {}
        for t in trajectories:
            grouped.setdefault((t.example_id, t.sample_index), []).append(t)
        return {ex.id: [sample_from_trajectories(grouped.get((ex.id, s), [])) for s in range(n)] for ex in batch}

    return evaluate(examples, produce, store, settings, say, progress=progress)


# ----------------------------------------------------------------------------- the command line


def _settings(raw: Mapping[str, Any]) -> EvalSettings:
    block = dict(raw.get("eval") or {})
    known = {f.name for f in dataclasses.fields(EvalSettings)}
    unknown = sorted(set(block) - known)
    if unknown:
        raise ConfigError(f"unknown eval option(s) {unknown}; known: {', '.join(sorted(known))}")
    return EvalSettings(**block)


def default_out_dir(name: str, data_kind: str, split: str, settings: EvalSettings) -> str:
    mode = settings.mode or "greedy"
    suffix = mode if mode in ("greedy", "sample") else f"{mode}{settings.num_samples}"
    return str(Path("runs") / "eval" / f"{name}-{data_kind}-{split}-{suffix}")


def _load_eval_examples(data: Any, limit: int | None, seed: int, say: Say) -> list[Example]:
    from eval.data import load_examples

    examples = load_examples(data.kind, data.root, data.eval_split, bool(data.drop_failing_gold), None)
    chosen = select_examples(examples, limit, seed)
    say(f"[data] {data.kind}/{data.eval_split}: evaluating {len(chosen)} of {len(examples)} questions")
    return chosen


def run_predictions(raw: Mapping[str, Any], say: Say = print) -> dict[str, Any]:
    """Mode B from a composed config."""
    from training.config import DataConfig

    settings = _settings(raw)
    data = DataConfig(**raw["data"])
    settings = dataclasses.replace(settings, ex_metric=settings.ex_metric or data.ex_metric)
    examples = _load_eval_examples(data, settings.limit or data.eval_limit, int(raw.get("seed", 0)), say)
    path = str(raw["predictions"])
    out = settings.out_dir or default_out_dir(Path(path).stem, data.kind, data.eval_split, settings)
    info = {"data_kind": data.kind, "data_root": data.root, "split": data.eval_split, "ex_metric": settings.ex_metric}
    return evaluate_predictions(examples, path, out, settings, info, say)


def run_model(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any]:
    """Mode A from a composed config: the recipe's agent, evaluation decoding and rollout
    limits, the model."""
    import torch

    from training.model import autocast_for, load_model
    from training.rollout_setup import hf_generate, model_context

    requested = _settings(raw)
    cfg, device, laptop = policy_config(raw, explicit, say)
    torch.manual_seed(cfg.seed)
    if cfg.model.base_url:  # an OpenAI-compatible endpoint (training/generation.py), no weights loaded
        decoding, settings = _decoding_and_settings(cfg, requested, explicit, laptop, None, say)
        examples = _load_eval_examples(cfg.data, decoding.questions, cfg.seed, say)
        agent, options = _eval_agent(cfg, say)
        return evaluate_endpoint(cfg, settings, decoding, examples, agent, options, say)
    loaded = load_model(cfg.model.path, device, say=say, trust_remote_code=cfg.model.trust_remote_code)
    decoding, settings = _decoding_and_settings(
        cfg, requested, explicit, laptop, model_context(loaded.model.config), say
    )
    examples = _load_eval_examples(cfg.data, decoding.questions, cfg.seed, say)
    agent, options = _eval_agent(cfg, say)
    autocast = autocast_for(cfg.model.autocast, device)
    sampling, limits = sampling_and_limits(decoding)
    out = settings.out_dir or default_out_dir(cfg.recipe_name, cfg.data.kind, cfg.data.eval_split, settings)
    info = {
        "recipe": cfg.recipe_name,
        "model": loaded.source,
        "data_kind": cfg.data.kind,
        "data_root": cfg.data.root,
        "split": cfg.data.eval_split,
        "agent_options": _plain_options(options),
        "seed": cfg.seed,
        **dataclasses.asdict(decoding),
    }
    if device == "cpu" and cfg.model.decode_attention == "auto":
        from training.cpu_attention import use_hybrid_cpu_attention

        use_hybrid_cpu_attention(loaded.model)  # the model only generates here
    generate = hf_generate(loaded.model, loaded.tokenizer, device, autocast)  # no log-probs: nothing is updated
    return evaluate_policy(examples, agent, loaded.tokenizer, generate, sampling, limits, out, settings, info, say)


def policy_config(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> tuple[Any, str, bool]:
    """The validated ``TrainConfig``, the device, and whether the laptop profile applies. On
    CPU (``engine.laptop_profile=auto``) the profile's caps - greedy, ``laptop.eval_limit``
    questions, turns and token lengths - are applied and printed; values set on the command
    line are kept."""
    from training.config import TrainConfig, apply_laptop_profile, list_recipes
    from training.prepare import resolve_device

    if not raw.get("recipe_name"):
        raise ConfigError(
            "nothing to evaluate: pass recipe=<name> to evaluate a model "
            f"(recipes: {', '.join(list_recipes())}) or predictions=PATH to score a predictions file"
        )
    cfg = TrainConfig.from_mapping({k: v for k, v in raw.items() if k not in ("eval", "predictions", "hydra")})
    device = resolve_device(cfg.engine.device)
    mode = cfg.engine.laptop_profile
    laptop = mode == "on" or (mode == "auto" and device == "cpu")
    if laptop:
        kept = set(explicit) | {f"evaluation.{k}" for k in ("mode",) if "eval.mode" in explicit}
        if "eval.limit" in explicit:
            kept.add("data.eval_limit")
        cfg, changes = apply_laptop_profile(cfg, sorted(kept))
        shown = {k: v for k, v in changes.items() if k.startswith(("rollout.", "agent.", "evaluation.", "data."))}
        if shown:
            say(
                "[laptop profile] CPU: evaluation sized for a laptop (engine.laptop_profile=off keeps the recipe's; "
                "eval.limit / eval.mode / any key on the command line overrides):\n"
                + "\n".join(f"    {k}: {a} -> {b}" for k, (a, b) in sorted(shown.items()))
            )
    return cfg, device, laptop


@dataclass(frozen=True)
class Decoding:
    """The effective evaluation settings of a model run: printed (``dry_run=true`` prints
    only these), stored in run.json and listed in report.md."""

    mode: str
    samples: int
    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    max_response_tokens: int
    max_context_tokens: int
    max_prompt_tokens: int
    model_context: int | None
    observation_max_tokens: int | None
    turn_budgets: dict[str, int]
    questions: int | None
    laptop_profile: bool
    overridden: list[str]
    ex_metric: str = "ex"


def _decoding_and_settings(
    cfg: Any, requested: EvalSettings, explicit: set[str], laptop: bool, model_context: int | None, say: Say
) -> tuple[Decoding, EvalSettings]:
    """The effective decoding (printed) and the settings it implies."""
    decoding = resolve_decoding(cfg, requested, explicit, laptop, model_context)
    say(describe_decoding(decoding))
    settings = dataclasses.replace(
        requested, mode=decoding.mode, samples=decoding.samples, limit=decoding.questions, ex_metric=decoding.ex_metric
    )
    return decoding, settings


def resolve_decoding(
    cfg: Any, settings: EvalSettings, explicit: set[str], laptop: bool, model_context: int | None
) -> Decoding:
    """The recipe's ``evaluation`` block, then ``eval.*`` overrides; greedy/sample take one
    answer. ``max_context_tokens`` = prompt cap + response cap, never more than the model's
    context, so no generation asks for more than context - prompt (the rollout driver
    bounds every call by what is left)."""
    from training.rollout_setup import context_tokens

    ev, r = cfg.evaluation, cfg.rollout
    mode = settings.mode or ev.mode
    samples = 1 if mode in ("greedy", "sample") else (settings.samples or ev.samples)
    temperature = 0.0 if mode == "greedy" else (settings.temperature or ev.temperature)
    new_tokens = ev.max_new_tokens or r.max_new_tokens
    response = ev.max_response_tokens or r.max_response_tokens
    if "rollout.max_new_tokens" in explicit and "evaluation.max_new_tokens" not in explicit:
        new_tokens = min(new_tokens, r.max_new_tokens)  # a cap set on the command line is kept
    if "rollout.max_response_tokens" in explicit and "evaluation.max_response_tokens" not in explicit:
        response = min(response, r.max_response_tokens)
    context = context_tokens(r.max_prompt_tokens, response, model_context)
    if model_context:  # e.g. Think2SQL's 30k on a 32k model: response + prompt must fit
        response, new_tokens = min(response, context - 1), min(new_tokens, context - 1)
    budgets = {k: int(v) for k, v in cfg.agent.options.items() if k in cfg.agent.turn_budget_keys()}
    overridden = sorted(k for k in explicit if k.startswith(("eval.", "evaluation.")))
    return Decoding(
        mode=mode,
        samples=samples,
        temperature=temperature,
        top_p=ev.top_p if temperature > 0 else 1.0,
        top_k=ev.top_k if temperature > 0 else 0,
        max_new_tokens=new_tokens,
        max_response_tokens=response,
        max_context_tokens=context,
        max_prompt_tokens=min(r.max_prompt_tokens, context - 1),
        model_context=model_context,
        observation_max_tokens=r.observation_max_tokens,
        turn_budgets=budgets,
        questions=settings.limit or cfg.data.eval_limit,
        laptop_profile=laptop,
        overridden=overridden,
        ex_metric=settings.ex_metric or cfg.data.ex_metric,
    )


def describe_decoding(d: Decoding) -> str:
    """One block of text: what this evaluation decodes with."""
    sampling = (
        "greedy (temperature 0)"
        if d.mode == "greedy"
        else (
            f"{d.mode}: {d.samples} sample(s) at T {d.temperature}, top-p {d.top_p}"
            + (f", top-k {d.top_k}" if d.top_k else "")
        )
    )
    lines = [
        f"[eval settings] decoding: {sampling}",
        f"    tokens: {d.max_new_tokens} per call, {d.max_response_tokens} per episode, context "
        f"{d.max_context_tokens} (model {d.model_context or 'unknown'})",
        f"    observations: {d.observation_max_tokens or 'no token cap (tools own limits)'}; turn budgets: "
        f"{', '.join(f'{k}={v}' for k, v in sorted(d.turn_budgets.items())) or 'one turn'}",
        f"    questions: {d.questions or 'all'}; EX rule: {d.ex_metric}; "
        f"laptop profile: {'on' if d.laptop_profile else 'off'}"
        + (f"; set on the command line: {', '.join(d.overridden)}" if d.overridden else ""),
    ]
    return "\n".join(lines)


def model_context_from_path(path: str | None) -> int | None:
    """The model's context length from its config.json, without loading weights (dry run);
    None when the checkpoint is not on disk yet."""
    from training.model import embedded_checkpoint_dir

    folder = Path(path) if path else embedded_checkpoint_dir()
    config = folder / "config.json"
    if not config.is_file():
        return None
    import json

    data = json.loads(config.read_text())
    value = data.get("max_position_embeddings") or (data.get("text_config") or {}).get("max_position_embeddings")
    return int(value) if value else None


def dry_run(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> None:
    """Print the effective evaluation settings and exit (no model loaded, nothing written)."""
    settings = _settings(raw)
    if raw.get("predictions"):
        say(
            f"[eval settings] scoring {raw['predictions']}: one SQL per question, greedy; questions: "
            f"{settings.limit or (raw.get('data') or {}).get('eval_limit') or 'all'}"
        )
        return
    cfg, _device, laptop = policy_config(raw, explicit, say)
    say(describe_decoding(resolve_decoding(cfg, settings, explicit, laptop, model_context_from_path(cfg.model.path))))


def _eval_agent(cfg: Any, say: Say) -> tuple[Any, dict[str, Any]]:
    """The design's agent in inference mode (TRUST-SQL's 15-turn budget), with few-shot
    examples from the training split where the design takes them."""
    from agents import agent_options, make_agent

    options = dict(cfg.agent.options)
    accepted = agent_options(cfg.agent.name)
    if "inference" in accepted:
        options["inference"] = True
    if "few_shot_pool" in accepted:
        options["few_shot_pool"] = tuple(_few_shot_pool(cfg.data, say))
    return make_agent(cfg.agent.name, **options), options


def sampling_and_limits(d: Decoding) -> tuple[Any, Any]:
    """Sampling parameters and rollout limits from the effective settings (the context of
    ``training.rollout_setup.rollout_limits`` is ``d.max_context_tokens``: the same rule)."""
    from training.rollout_setup import rollout_limits, sampling_params

    sampling = sampling_params(d.temperature, d.top_p, d.top_k, d.max_new_tokens)
    limits = rollout_limits(
        d.max_prompt_tokens, d.max_response_tokens, d.max_new_tokens, d.observation_max_tokens, d.model_context
    )
    return sampling, limits


def _plain_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Agent options for run.json (the few-shot pool by size, not by content)."""
    return {k: (f"{len(v)} examples" if k == "few_shot_pool" else v) for k, v in sorted(options.items())}


def _few_shot_pool(data: Any, say: Say) -> list[Example]:
    """Few-shot examples come from the training split only (never the evaluated one)."""
    from eval.data import load_examples

    try:
        pool = load_examples(data.kind, data.root, data.split, bool(data.drop_failing_gold), data.limit)
    except ToolkitError as err:
        say(
            f"[data] no few-shot pool: the training split {data.split!r} could not be loaded ({err}); "
            "the agent runs without few-shot examples"
        )
        return []
    say(f"[data] few-shot pool: {len(pool)} examples from {data.kind}/{data.split}")
    return pool


def run(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any] | None:
    """Mode B when ``predictions`` is set, else mode A; ``dry_run=true`` only prints the settings."""
    if raw.get("dry_run"):
        dry_run(raw, explicit, say)
        return None
    if raw.get("predictions"):
        return run_predictions(raw, say)
    return run_model(raw, explicit, say)


def _hydra_main() -> None:
    from training.prepare import hydra_entry

    hydra_entry("eval", run)


if __name__ == "__main__":
    _hydra_main()


def evaluate_endpoint(
    cfg: Any,
    settings: Any,
    decoding: Any,
    examples: Sequence[Example],
    agent: Any,
    options: Mapping[str, Any],
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """``eval.run model.base_url=... model.name=...``: score an OpenAI-compatible endpoint
    with the design's agent, exactly like a local model (same sampling, limits, records).
    Up to ``model.concurrency`` requests are in flight, each episode at its own pace
    (``training/concurrent_episodes.py``); ``model.concurrency=1`` is the sequential path."""
    from transformers import AutoTokenizer

    from training.concurrent_episodes import ConcurrentTextGenerate, questions_per_batch
    from training.generation import EndpointSource, EndpointSpec, reasoning_tag
    from training.model import prepare_tokenizer, resolve_model_path

    m = cfg.model
    spec = EndpointSpec(
        base_url=m.base_url,
        model=m.name,
        api_key_env=m.api_key_env,
        timeout_s=m.timeout_s,
        concurrency=m.concurrency,
        reasoning_tag=reasoning_tag(cfg.agent.name),
    )
    source = EndpointSource(spec)
    tokenizer = prepare_tokenizer(
        AutoTokenizer.from_pretrained(
            resolve_model_path(m.path, say, tokenizer_only=True), trust_remote_code=m.trust_remote_code
        )
    )
    sampling, limits = sampling_and_limits(decoding)  # the recipe's evaluation decoding (eval/run.py)
    name = f"{cfg.recipe_name}-{m.name.replace('/', '_')}"
    out = settings.out_dir or default_out_dir(name, cfg.data.kind, cfg.data.eval_split, settings)
    info = {
        "recipe": cfg.recipe_name,
        "model": f"{m.name} @ {m.base_url}",
        "data_kind": cfg.data.kind,
        "data_root": cfg.data.root,
        "split": cfg.data.eval_split,
        "agent_options": _plain_options(options),
        "seed": cfg.seed,
        **dataclasses.asdict(decoding),
    }
    settings = dataclasses.replace(
        settings, batch_size=questions_per_batch(settings.batch_size, m.concurrency, settings.num_samples)
    )
    say(
        f"[eval] scoring the endpoint {m.base_url} (model {m.name}), up to {m.concurrency} requests in flight "
        f"(model.concurrency); tools run here, text carried by the "
        f"{resolve_model_path(m.path, lambda _: None, tokenizer_only=True)} tokenizer"
    )
    generate = ConcurrentTextGenerate(source, m.concurrency)
    try:
        summary = evaluate_policy(examples, agent, tokenizer, generate, sampling, limits, out, settings, info, say)
    finally:
        source.close()
    if generate.failed or source.stats["failed"]:
        say(f"[eval] {len(generate.failed)} samples had a failed request (no answer); endpoint stats {source.stats}")
    summary["endpoint"] = {**source.stats, "failed_samples": len(generate.failed), "concurrency": m.concurrency}
    return summary
