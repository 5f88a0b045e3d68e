"""Applying the CPU laptop profile (``training.config.laptop.LaptopProfile``) to a built config:
sizes shrink, caps only ever lower a value, and a value set on the command line is kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError, UnknownNameError

if TYPE_CHECKING:
    from training.config.train import TrainConfig


def apply_laptop_profile(
    cfg: TrainConfig, explicit: Sequence[str] = ()
) -> tuple[TrainConfig, dict[str, tuple[Any, Any]]]:
    """Return a copy with the laptop sizes applied, and ``{path: (recipe value, new value)}``.

    ``explicit`` holds config paths set on the command line (``algorithm.group_size``):
    those keep the user's value. Caps (turns, lengths) only ever lower a value.
    """
    p = cfg.laptop
    changes: dict[str, tuple[Any, Any]] = {}
    data = cfg.to_dict()

    def put(path: str, value: Any, cap: bool = False) -> None:
        if path in explicit or path.replace(".options.", ".") in explicit:
            return
        node = data
        *parents, leaf = path.split(".")
        for part in parents:
            node = node[part]
        old = node.get(leaf)
        new = min(old, value) if cap and old is not None else value
        if new != old:
            node[leaf] = new
            changes[path.replace(".options.", ".")] = (old, new)

    put("algorithm.group_size", p.group_size)
    put("algorithm.batch_size", p.batch_size)
    put("algorithm.dynamic_sampling.oversample", p.oversample, cap=True)
    if cfg.algorithm.dynamic_sampling.enable:
        put("algorithm.dynamic_sampling.metric", p.dynamic_sampling_metric)
    for key in cfg.agent.turn_budget_keys():
        put(f"agent.options.{key}", p.max_turns, cap=True)
    put("rollout.max_new_tokens", p.max_new_tokens, cap=True)
    put("rollout.observation_max_tokens", p.observation_max_tokens, cap=True)
    put("rollout.max_response_tokens", p.max_response_tokens, cap=True)
    put("rollout.max_prompt_tokens", p.max_prompt_tokens, cap=True)
    put("trainer.total_steps", p.total_steps)
    put("trainer.save_every", p.save_every)
    put("trainer.val_every", p.val_every)
    put("data.eval_limit", p.eval_limit, cap=True)
    put("evaluation.mode", p.eval_mode)
    put("evaluation.samples", p.eval_samples, cap=True)
    put("evaluation.max_new_tokens", p.max_new_tokens, cap=True)
    put("evaluation.max_response_tokens", p.max_response_tokens, cap=True)
    put("optim.lr", p.lr)
    put("optim.micro_batch_size", p.micro_batch_size)
    put("stage.warm_start.micro_batch_size", p.micro_batch_size)
    put("rollout.generation_rows", p.generation_rows)
    put("model.gradient_checkpointing", p.gradient_checkpointing)
    put("optim.spill_state", p.spill_optimizer_state)
    # the supervised stages replace the demonstration warm start
    put("stage.warm_start.enable", p.warm_start and cfg.stage.name == "rl")
    put("stage.warm_start.examples", p.warm_start_examples, cap=True)
    if cfg.stage.name != "rl":
        put("supervised.questions", p.supervised_questions, cap=True)
        put("supervised.samples", p.supervised_samples, cap=True)
        put("supervised.rl_filter_samples", p.supervised_samples, cap=True)
        put("supervised.teacher_samples", p.supervised_samples, cap=True)
        put("supervised.lr", p.supervised_lr)
        put("supervised.micro_batch_size", p.micro_batch_size)
        put(
            "supervised.rl_filter_pass",
            max(1, round(cfg.supervised.rl_filter_pass * p.supervised_samples / cfg.supervised.rl_filter_samples)),
            cap=True,
        )
    _split_stages(cfg, data, explicit, changes, put)
    accepted = _agent_option_names(cfg.agent.name)
    options = data["agent"]["options"]
    for key, value in p.agent_options.items():
        old = options.get(key, "(agent default)")
        if key in accepted and f"agent.{key}" not in explicit and old != value:
            options[key] = value
            changes[f"agent.{key}"] = (old, value)
    return _rebuild(type(cfg), data), changes


def _split_stages(
    cfg: TrainConfig, data: dict[str, Any], explicit: Sequence[str], changes: dict[str, tuple[Any, Any]], put: Any
) -> None:
    """Two disjoint parts of minibird's training split for a design whose SFT questions come
    from their own dataset (``supervised.data``; TRUST-SQL's SynSQL-2.5M, which a laptop does
    not hold): SFT draws from the first ``split_stages_at`` records, RL from the rest."""
    sup = cfg.supervised
    if cfg.stage.name == "rl" or sup.data is None or cfg.data.kind != "minibird" or cfg.data.mixture:
        return
    if any(k == "supervised.data" or k.startswith("supervised.data.") for k in explicit):
        return
    n = cfg.laptop.split_stages_at
    subset: dict[str, Any] = {"kind": "minibird", "root": cfg.data.root, "split": cfg.data.split, "limit": n}
    if sup.data.get("difficulties"):
        subset["difficulties"] = list(sup.data["difficulties"])
    data["supervised"]["data"] = subset
    changes["supervised.data"] = (sup.data, subset)
    put("data.offset", max(cfg.data.offset, n))
    if sup.rl_filter:
        put("supervised.rl_questions", cfg.laptop.supervised_questions, cap=True)


def _agent_option_names(name: str) -> set[str]:
    """Options the registered agent accepts. ``agent.name`` was checked against the agent
    registry when the config was built, so a miss here is an error, never an empty set
    (that silently left the profile's agent options unapplied)."""
    from agents import agent_options

    try:
        return set(agent_options(name))
    except UnknownNameError as err:
        raise ConfigError(
            f"agent.name={name!r}: {err} (the laptop profile sets only options the agent accepts)"
        ) from err


def _rebuild(config_class: type[TrainConfig], data: dict[str, Any]) -> TrainConfig:
    agent = data["agent"]
    reward = data["reward"]
    flat = dict(data)
    flat["agent"] = {"name": agent["name"], **agent["options"]}
    flat["reward"] = {"name": reward["name"], "exec_metric": reward["exec_metric"], **reward["options"]}
    return config_class.from_mapping(flat)
