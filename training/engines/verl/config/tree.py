"""The composed veRL tree: composing ``ppo_trainer``, applying ``verl.*`` overrides on top,
validating it as veRL does at start-up, and printing it (moved out of
:mod:`training.engines.verl.config.translate`, which re-exports every public name).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import logging
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from tools.errors import ConfigError
from training.engines.verl.shared import AGENT_LOOP_NAME, PROJECT_NAMESPACE, TRAINER_MODES, WorkerSettings, plain

if TYPE_CHECKING:
    from omegaconf import DictConfig

log = logging.getLogger("training.engines.verl.config.translate")

PPO_CONFIG_MODULE = "verl.trainer.config"
PPO_CONFIG_NAME = "ppo_trainer"


def compose_ppo_trainer() -> DictConfig:
    """veRL's own ``ppo_trainer`` config, composed with Hydra from its package: a copy of
    the tree composed once per process (the installed package's YAML does not change while
    it runs; a dry run, a sweep or a check composes it for every job), which the caller may
    change freely."""
    return copy.deepcopy(_composed_ppo_trainer())


@functools.cache
def _composed_ppo_trainer() -> DictConfig:
    """Inside the project's ``@hydra.main`` entry point Hydra's global state is already
    initialised (with the project's search path); it is set aside for this composition
    and restored afterwards, so the two configs never mix."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup = get_gh_backup()
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=PPO_CONFIG_MODULE, version_base=None):
            return compose(config_name=PPO_CONFIG_NAME)
    finally:
        restore_gh_from_backup(backup)


def apply_verl_overrides(
    cfg: DictConfig, block: Mapping[str, Any] | None = None, overrides: Iterable[str] = ()
) -> DictConfig:
    """Apply the recipe's ``verl:`` block, then ``verl.<path>=<value>`` strings, on top.

    Keys must already exist in veRL's tree (a typo fails with the key and the closest
    existing one); the ``sqlagent`` namespace is ours and accepts any key.
    """
    if block:
        for dotted, value in _flatten(plain(block)).items():
            _set_existing(cfg, dotted, value)
    for item in overrides:
        dotted, value = _parse_override(item)
        _set_existing(cfg, dotted, value)
    return cfg


def _parse_override(item: str) -> tuple[str, Any]:
    """``verl.<path>=<value>`` -> (path, value), parsed with Hydra's override grammar."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    text = item.strip()
    if not text.startswith("verl.") or "=" not in text:
        raise ConfigError(f"bad veRL override {item!r}: write verl.<path>=<value>, e.g. verl.trainer.save_freq=10")
    try:
        parsed = OverridesParser.create().parse_override(text)
    except HydraException as err:
        raise ConfigError(f"bad veRL override {item!r}: {err}") from err
    return parsed.key_or_group.removeprefix("verl."), plain(parsed.value())


def _flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mapping -> {"a.b.c": leaf}. Lists and empty dicts are leaves."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def _set_existing(cfg: DictConfig, dotted: str, value: Any) -> None:
    from omegaconf import OmegaConf, open_dict

    if dotted.split(".", 1)[0] == PROJECT_NAMESPACE:
        with open_dict(cfg):
            OmegaConf.update(cfg, dotted, value, merge=True, force_add=True)
        return
    parent_path, _, leaf = dotted.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path) if parent_path else cfg
    if parent is None or not hasattr(parent, "keys") or leaf not in parent:
        raise ConfigError(f"verl.{dotted}: no such key in veRL's ppo_trainer config{_closest_key(cfg, dotted)}")
    OmegaConf.update(cfg, dotted, value, merge=True)


def _closest_key(cfg: DictConfig, dotted: str) -> str:
    from omegaconf import OmegaConf

    from tools.spelling import close_matches

    container = OmegaConf.to_container(cfg, resolve=False)
    keys = list(_flatten({str(k): v for k, v in container.items()}).keys()) if isinstance(container, dict) else []
    close = close_matches(dotted, keys, n=1)
    return f"; did you mean verl.{close[0]}?" if close else "; see `engine=verl dry_run=true` for every key"


def validate_verl_config(cfg: DictConfig) -> None:
    """veRL's ``validate_config`` plus the conversions veRL does at start-up.

    Failures are re-raised as :class:`ConfigError` with the veRL message inside.
    """
    from hydra.errors import HydraException
    from verl.trainer.config import AlgoConfig  # noqa: F401  (registers _target_ classes)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    _check_namespace(cfg)
    chatter = io.StringIO()  # veRL prints progress lines; keep stdout for the YAML of a dry run
    try:
        with contextlib.redirect_stdout(chatter), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Disabled critic")  # GRPO needs no critic
            checked = _without_vllm_lora_check(cfg)
            validate_config(
                config=checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg)
            )
        omega_conf_to_dataclass(cfg.algorithm)
        omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    except (AssertionError, ValueError, TypeError, KeyError, HydraException) as err:
        raise ConfigError(f"veRL rejected the composed config: {err}") from err
    log.debug("veRL validate_config: %s", chatter.getvalue().strip())
    rollout = cfg.actor_rollout_ref.rollout
    if rollout.agent.default_agent_loop != AGENT_LOOP_NAME:
        log.warning(
            "rollout.agent.default_agent_loop=%s is not the project's agent loop", rollout.agent.default_agent_loop
        )
    if cfg.trainer.v1.trainer_mode not in TRAINER_MODES.values() or not cfg.trainer.use_v1:
        raise ConfigError(
            f"verl.trainer.v1.trainer_mode={cfg.trainer.v1.trainer_mode!r} (use_v1={cfg.trainer.use_v1}): the "
            "project's per-role and two-track advantages and the KL schedule live in its own trainers "
            f"({', '.join(TRAINER_MODES.values())}); leave trainer.use_v1=true and trainer.v1.trainer_mode unset, "
            "and choose the mode with trainer.mode=sync|colocate_async|separate_async"
        )
    if cfg.algorithm.filter_groups.enable and not cfg.algorithm.filter_groups.metric:
        raise ConfigError("algorithm.filter_groups.enable needs a metric (the project uses 'exec')")


def _without_vllm_lora_check(cfg: DictConfig) -> DictConfig:
    """``cfg`` for veRL's ``validate_config``: as is, except with a LoRA rank where vLLM is
    not installed (a CPU dry run). veRL's one LoRA check there (``get_vllm_max_lora_rank``)
    imports its vLLM rollout package, which refuses to import without vLLM; the same bound
    is checked on the project's keys first (``verl_settings.check_lora``)."""
    import importlib.util

    from omegaconf import DictConfig, OmegaConf

    model = cfg.actor_rollout_ref.model
    megatron_rank = int((model.get("lora") or {}).get("rank", 0) or 0)  # veRL reads this key first
    if not (int(model.get("lora_rank", 0) or 0) or megatron_rank) or importlib.util.find_spec("vllm"):
        return cfg
    copy = OmegaConf.create(OmegaConf.to_container(cfg))
    assert isinstance(copy, DictConfig)  # made from a mapping
    copy.actor_rollout_ref.model.lora_rank = 0
    if megatron_rank:
        copy.actor_rollout_ref.model.lora.rank = 0
    return copy


def _check_namespace(cfg: DictConfig) -> None:
    """The ``sqlagent`` block reads back as the workers will read it (a ``verl.sqlagent.*``
    override with a bad key or value fails here, not in a Ray worker)."""
    try:
        WorkerSettings.from_config(cfg)
    except (ValueError, TypeError) as err:
        raise ConfigError(str(err)) from err


def split_verl_block(block: Mapping[str, Any] | None) -> tuple[dict[str, Any], list[str]]:
    """The project's ``verl`` node -> (nested block, dotted overrides).

    Recipes write nested YAML (``verl: {trainer: {save_freq: 5}}``); the command line's
    ``+verl.a.b=1`` arrives nested too, and a key written with dots in YAML
    (``"actor_rollout_ref.actor.optim.lr": 2e-6``) is kept as a dotted override.
    """
    nested: dict[str, Any] = {}
    dotted: list[str] = []
    for key, value in plain(block or {}).items():
        if "." in str(key):
            dotted.append(f"verl.{key}={json.dumps(value)}")
        else:
            nested[str(key)] = value
    return nested, dotted


def resolved_tree(cfg: DictConfig) -> tuple[dict[str, Any], list[str]]:
    """The config as plain values with every interpolation resolved that can be, and the
    dotted keys of those that cannot (kept as written, e.g. a ``${oc.env:...}`` whose
    variable is unset on this machine)."""
    from omegaconf import DictConfig as _Dict
    from omegaconf import ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    unresolved: list[str] = []

    def walk(node: Any, path: str) -> Any:
        if isinstance(node, _Dict):
            return {str(k): walk_key(node, k, path + str(k)) for k in node.keys()}
        if isinstance(node, ListConfig):
            return [walk_key(node, i, f"{path}{i}") for i in range(len(node))]
        return node

    def walk_key(parent: Any, key: Any, path: str) -> Any:
        try:
            value = parent[key]
        except OmegaConfBaseException:
            unresolved.append(path)
            raw: Any = OmegaConf.to_container(parent, resolve=False)  # the unresolved text, e.g. ${oc.env:X}
            return raw[key]
        return walk(value, path + ".")

    return walk(cfg, ""), unresolved


def to_yaml(cfg: DictConfig) -> str:
    """The config as YAML with interpolations resolved (what veRL will run); any that
    cannot be resolved here are listed in a comment above it."""
    import yaml

    tree, unresolved = resolved_tree(cfg)
    head = ""
    if unresolved:
        head = "# left as written (cannot be resolved here): " + ", ".join(unresolved) + "\n"
    return head + yaml.safe_dump(tree, sort_keys=False, default_flow_style=False, width=120)
