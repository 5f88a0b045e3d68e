"""The effective evaluation settings of a model run: the recipe's config under the laptop
profile on CPU, then its ``evaluation`` decoding with the ``eval.*`` overrides, printed and
turned into the rollout driver's sampling parameters and limits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.settings import EvalSettings, Say
from tools.errors import ConfigError


def policy_config(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> tuple[Any, str, bool]:
    """The validated ``TrainConfig``, the device, and whether the laptop profile applies. On
    CPU (``engine.laptop_profile=auto``) the profile's caps - greedy, ``laptop.eval_limit``
    questions, turns and token lengths - are applied and printed; values set on the command
    line are kept. A model served elsewhere (``model.base_url``) costs this machine no
    compute per question, so its question count is never capped: every question unless
    ``eval.limit`` (or ``data.eval_limit``) is given."""
    from training.config import TrainConfig, apply_laptop_profile, list_recipes
    from training.config.command import resolve_device

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
        if "eval.limit" in explicit or cfg.model.base_url:
            kept.add("data.eval_limit")
        cfg, changes = apply_laptop_profile(cfg, sorted(kept))
        shown = {k: v for k, v in changes.items() if k.startswith(("rollout.", "agent.", "evaluation.", "data."))}
        if shown:
            say(
                "[laptop profile] CPU: evaluation sized for a laptop (engine.laptop_profile=off keeps the recipe's; "
                "eval.limit / eval.mode / any key on the command line overrides):\n"
                + "\n".join(f"    {k}: {a} -> {b}" for k, (a, b) in sorted(shown.items()))
            )
        if cfg.model.base_url and "eval.limit" not in explicit:
            say(
                f"[laptop profile] question count not capped: the model is served at {cfg.model.base_url}, "
                "so this machine does no model compute (eval.limit=N evaluates a subset)"
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


def resolve_decoding(
    cfg: Any, settings: EvalSettings, explicit: set[str], laptop: bool, model_context: int | None
) -> Decoding:
    """The recipe's ``evaluation`` block, then ``eval.*`` overrides; greedy/sample take one
    answer. ``max_context_tokens`` = prompt cap + response cap, never more than the model's
    context, so no generation asks for more than context - prompt (the rollout driver
    bounds every call by what is left)."""
    from training.rollout.setup import context_tokens

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
    from training.generation import embedded_checkpoint_dir

    folder = Path(path) if path else embedded_checkpoint_dir()
    config = folder / "config.json"
    if not config.is_file():
        return None
    import json

    data = json.loads(config.read_text())
    value = data.get("max_position_embeddings") or (data.get("text_config") or {}).get("max_position_embeddings")
    return int(value) if value else None


def sampling_and_limits(d: Decoding) -> tuple[Any, Any]:
    """Sampling parameters and rollout limits from the effective settings (the context of
    ``training.rollout.setup.rollout_limits`` is ``d.max_context_tokens``: the same rule)."""
    from training.rollout.setup import rollout_limits, sampling_params

    sampling = sampling_params(d.temperature, d.top_p, d.top_k, d.max_new_tokens)
    limits = rollout_limits(
        d.max_prompt_tokens, d.max_response_tokens, d.max_new_tokens, d.observation_max_tokens, d.model_context
    )
    return sampling, limits
