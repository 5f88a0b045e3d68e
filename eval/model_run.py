"""Mode A of ``eval.run`` from a composed config: the design's agent in inference mode,
the recipe's evaluation decoding and rollout limits, and a local model or an
OpenAI-compatible endpoint (``model.base_url``) producing the answers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agents.types import Example
from eval.decoding import Decoding, describe_decoding, policy_config, resolve_decoding, sampling_and_limits
from eval.evaluate import evaluate_policy, load_eval_examples
from eval.settings import EvalSettings, Say, default_out_dir, settings_from
from tools.errors import ToolkitError


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


def run_model(raw: Mapping[str, Any], explicit: set[str], say: Say = print) -> dict[str, Any]:
    """Mode A from a composed config: the recipe's agent, evaluation decoding and rollout
    limits, the model."""
    import torch

    from training.generation import autocast_for, hf_generate, load_model
    from training.rollout.setup import model_context

    requested = settings_from(raw)
    cfg, device, laptop = policy_config(raw, explicit, say)
    torch.manual_seed(cfg.seed)
    if cfg.model.base_url:  # an OpenAI-compatible endpoint (training/generation/sources.py), no weights loaded
        decoding, settings = _decoding_and_settings(cfg, requested, explicit, laptop, None, say)
        examples = load_eval_examples(cfg.data, decoding.questions, cfg.seed, say)
        agent, options = _eval_agent(cfg, say)
        return evaluate_endpoint(cfg, settings, decoding, examples, agent, options, say)
    loaded = load_model(cfg.model.path, device, say=say, trust_remote_code=cfg.model.trust_remote_code)
    decoding, settings = _decoding_and_settings(
        cfg, requested, explicit, laptop, model_context(loaded.model.config), say
    )
    examples = load_eval_examples(cfg.data, decoding.questions, cfg.seed, say)
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
        from training.generation import use_hybrid_cpu_attention

        use_hybrid_cpu_attention(loaded.model)  # the model only generates here
    # no log-probs: nothing is updated
    generate = hf_generate(loaded.model, loaded.tokenizer, device, autocast, prefix_reuse=cfg.model.prefix_reuse)
    return evaluate_policy(examples, agent, loaded.tokenizer, generate, sampling, limits, out, settings, info, say)


def _eval_agent(cfg: Any, say: Say) -> tuple[Any, dict[str, Any]]:
    """The design's agent in inference mode (TRUST-SQL's 15-turn budget), with few-shot
    examples from the training split where the design takes them."""
    from agents import make_agent, runtime_options

    name = cfg.agent.name
    options = runtime_options(
        name, cfg.agent.options, inference=True, few_shot_pool=lambda: _few_shot_pool(cfg.data, say)
    )
    return make_agent(name, **options), options


def _plain_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Agent options for run.json (the few-shot pool by size, not by content)."""
    return {k: (f"{len(v)} examples" if k == "few_shot_pool" else v) for k, v in sorted(options.items())}


def _few_shot_pool(data: Any, say: Say) -> list[Example]:
    """Few-shot examples come from the training split only (never the evaluated one)."""
    from eval.data import load_examples

    try:
        pool = load_examples(
            data.kind, data.root, data.split, bool(data.drop_failing_gold), data.limit, getattr(data, "dsn", None)
        )
    except ToolkitError as err:
        say(
            f"[data] no few-shot pool: the training split {data.split!r} could not be loaded ({err}); "
            "the agent runs without few-shot examples"
        )
        return []
    say(f"[data] few-shot pool: {len(pool)} examples from {data.kind}/{data.split}")
    return pool


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
    (``training/rollout/concurrent.py``); ``model.concurrency=1`` is the sequential path."""
    from transformers import AutoTokenizer

    from training.generation import (
        ConcurrentTextGenerate,
        EndpointSource,
        EndpointSpec,
        prepare_tokenizer,
        questions_per_batch,
        reasoning_tag,
        resolve_model_path,
    )

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
    sampling, limits = sampling_and_limits(decoding)  # the recipe's evaluation decoding (eval/decoding.py)
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
