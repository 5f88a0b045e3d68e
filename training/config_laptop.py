"""The CPU laptop profile (FACTS.md "CPU demo profile"): the ``laptop`` block of the typed
configuration and :func:`apply_laptop_profile`, which applies it to a built config."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError, UnknownNameError
from training.config_fields import _f

if TYPE_CHECKING:
    from training.config import TrainConfig


@dataclass
class LaptopProfile:
    """CPU demo sizes applied on the local engine (FACTS.md "CPU demo profile").

    Each value replaces the recipe's unless that key was set on the command line; the
    recipe's paper-size numbers stay in the YAML for GPU runs.
    """

    group_size: int = _f(4, "-> algorithm.group_size")
    batch_size: int = _f(2, "-> algorithm.batch_size")
    oversample: int = _f(1, "caps algorithm.dynamic_sampling.oversample (rollouts dominate CPU time)")
    dynamic_sampling_metric: str = _f(
        "total",
        "-> algorithm.dynamic_sampling.metric (a 135M model rarely gets EX right: exec-filtered groups would all drop)",
    )
    max_turns: int = _f(3, "caps every agent.*max_turns")
    max_new_tokens: int = _f(128, "caps rollout.max_new_tokens")
    observation_max_tokens: int = _f(256, "caps rollout.observation_max_tokens")
    max_response_tokens: int = _f(512, "caps rollout.max_response_tokens")
    max_prompt_tokens: int = _f(4096, "caps rollout.max_prompt_tokens")
    total_steps: int = _f(2, "-> trainer.total_steps")
    save_every: int = _f(2, "-> trainer.save_every")
    val_every: int = _f(0, "-> trainer.val_every")
    eval_limit: int = _f(8, "-> data.eval_limit (the fixed before/after subset; eval.run's count on CPU)")
    eval_mode: str = _f("greedy", "-> evaluation.mode (eval.run on CPU: one greedy answer per question)")
    eval_samples: int = _f(4, "caps evaluation.samples (eval.mode=sc / passk on CPU: 4 answers, not 16)")
    lr: float = _f(1e-5, "-> optim.lr (1e-6 moves a 135M model too little in a few steps)")
    micro_batch_size: int = _f(2, "-> optim.micro_batch_size")
    warm_start: bool = _f(
        True,
        "-> stage.warm_start.enable (SFT on demonstrations first: without it "
        "the 135M model writes no protocol and every reward is 0)",
    )
    warm_start_examples: int = _f(32, "caps stage.warm_start.examples (SFT time grows with prompt length)")
    supervised_questions: int = _f(16, "caps supervised.questions (traces per question cost rollouts)")
    supervised_samples: int = _f(4, "caps supervised.samples and rl_filter_samples (k on CPU)")
    agent_options: dict[str, Any] = _f(
        {}, "agent options set where the agent accepts them (shorter prompts: schema_format=compact, num_few_shot=1)"
    )


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
    # the supervised stages replace the demonstration warm start
    put("stage.warm_start.enable", p.warm_start and cfg.stage.name == "rl")
    put("stage.warm_start.examples", p.warm_start_examples, cap=True)
    if cfg.stage.name != "rl":
        put("supervised.questions", p.supervised_questions, cap=True)
        put("supervised.samples", p.supervised_samples, cap=True)
        put("supervised.rl_filter_samples", p.supervised_samples, cap=True)
        put(
            "supervised.rl_filter_pass",
            max(1, round(cfg.supervised.rl_filter_pass * p.supervised_samples / cfg.supervised.rl_filter_samples)),
            cap=True,
        )
    accepted = _agent_option_names(cfg.agent.name)
    options = data["agent"]["options"]
    for key, value in p.agent_options.items():
        old = options.get(key, "(agent default)")
        if key in accepted and f"agent.{key}" not in explicit and old != value:
            options[key] = value
            changes[f"agent.{key}"] = (old, value)
    return _rebuild(type(cfg), data), changes


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
