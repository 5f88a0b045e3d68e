"""LoRA settings veRL 0.9.1 accepts at start-up but that fail or do nothing later, refused
before anything starts (run by :func:`training.engines.verl.checks.rules.check_run`, so
``verl.*`` overrides are checked too). Each message names the key to change.

Where each rule comes from in veRL 0.9.1 / PEFT:
- reference without adapter: the trainer takes the reference from the actor with its
  adapter disabled (``ref_in_actor``) when ``model.lora.rank > 0`` (the Megatron-style key)
  or ``model.lora_adapter_path`` is set, but the FSDP engine builds an adapter only from
  ``model.lora_rank`` (``FSDPEngine._is_lora``); without one the first reference pass calls
  ``disable_adapter()`` on a plain model and fails;
- layered summon: under LoRA with ``rollout.load_format=dummy`` (veRL's default, vLLM
  starts without weights) the first weight sync sends the base, and
  ``collect_lora_params`` raises when ``rollout.layered_summon`` is on;
- target modules: PEFT places an adapter on each linear layer whose name is an entry or
  ends with ``.<entry>``; it refuses the run when no entry matches and silently skips an
  entry that matches nothing (a misspelt name trains fewer layers than asked). Checked
  against the model's own layers (built on the meta device from its ``config.json``);
- adapter-only model directory: veRL loads the policy (and so the KL reference, the
  frozen base under LoRA) with ``from_pretrained`` from ``model.path``; a directory that
  holds only a LoRA adapter (a local-engine LoRA checkpoint) has no weights to load.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.engines.verl.checks.backbones import ModelCard


def _lora_rank(cfg: DictConfig) -> int:
    return int(cfg.actor_rollout_ref.model.get("lora_rank", 0) or 0)


def reference_without_adapter_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    model = cfg.actor_rollout_ref.model
    megatron_rank = int((model.get("lora") or {}).get("rank", 0) or 0)
    adapter_path = model.get("lora_adapter_path")
    if _lora_rank(cfg) > 0 or (megatron_rank <= 0 and adapter_path is None):
        return []
    if megatron_rank > 0:
        why = f"actor_rollout_ref.model.lora.rank={megatron_rank}"
        fix = f"set model.lora.rank={megatron_rank} (the project's key) instead of that +verl override"
    else:
        why = f"actor_rollout_ref.model.lora_adapter_path={adapter_path}"
        fix = "set model.lora.rank to that adapter's rank (the actor then loads it to train on), or drop the override"
    return [
        f"{why} makes veRL's trainer take the KL reference from the actor with its adapter disabled, but its FSDP "
        f"actor builds an adapter only from actor_rollout_ref.model.lora_rank (0 here): the first reference pass "
        f"fails. {fix[0].upper() + fix[1:]}"
    ]


def layered_summon_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    rollout = cfg.actor_rollout_ref.rollout
    if _lora_rank(cfg) <= 0 or not rollout.get("layered_summon", False):
        return []
    if "dummy" not in str(rollout.get("load_format", "")):
        return []
    return [
        f"actor_rollout_ref.rollout.layered_summon=true with load_format={rollout.load_format} under LoRA: vLLM "
        "starts without weights, and veRL's first weight sync (the base) refuses layered_summon. Set "
        "+verl.actor_rollout_ref.rollout.layered_summon=false, or +verl.actor_rollout_ref.rollout.load_format="
        "safetensors (vLLM loads the base itself)"
    ]


def target_modules_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    targets = cfg.actor_rollout_ref.model.get("target_modules")
    if _lora_rank(cfg) <= 0 or targets is None or targets == "all-linear" or not card.config_dir:
        return []
    names = linear_layer_names(card.config_dir)
    if names is None:
        return []
    leaves = sorted({name.rsplit(".", 1)[-1] for name in names})
    if isinstance(targets, str):  # PEFT: a regular expression over the full module names
        if any(re.fullmatch(targets, name) for name in names):
            return []
        missing = [targets]
    else:
        missing = [t for t in targets if not any(n == t or n.endswith(f".{t}") for n in names)]
    if not missing:
        return []
    shown = targets if isinstance(targets, str) else "[" + ",".join(targets) + "]"
    if isinstance(targets, str) or len(missing) == len(list(targets)):
        effect = "PEFT refuses the run"
    else:
        effect = "PEFT would skip them silently and train fewer layers"
    return [
        f"model.lora.target_modules={shown}: {', '.join(missing)} names no linear layer of {card.path} ({effect}). "
        f"Its linear layers: {', '.join(leaves)}; use those names or model.lora.target_modules=all-linear"
    ]


def adapter_only_model_rule(cfg: DictConfig, card: ModelCard) -> list[str]:
    path = Path(str(cfg.actor_rollout_ref.model.path))
    if not (path / "adapter_config.json").is_file() or (path / "config.json").is_file():
        return []
    return [
        f"model {path} holds a LoRA adapter only (adapter_config.json, no config.json): veRL loads the policy and "
        f"its KL reference from full weights. Merge it first (python -m training.export <its run_dir>, or the "
        "local engine's final/) and pass that directory as model.path or stage.init_from"
    ]


@lru_cache(maxsize=8)
def linear_layer_names(config_dir: str) -> frozenset[str] | None:
    """Full names of the ``nn.Linear`` layers of the model ``config_dir/config.json``
    describes, built on the meta device (no weights read); None when transformers cannot
    build it here (an unknown architecture or remote code)."""
    import torch
    import transformers

    try:
        config = transformers.AutoConfig.from_pretrained(config_dir)
        architecture = (getattr(config, "architectures", None) or [None])[0]
        model_class: Any = getattr(transformers, architecture, None) if architecture else None
        if model_class is None:
            return None
        with torch.device("meta"):
            model = model_class._from_config(config)
    except (OSError, ValueError, TypeError, ImportError, AttributeError, KeyError):
        return None
    return frozenset(name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear))


LORA_RULES = (reference_without_adapter_rule, layered_summon_rule, target_modules_rule, adapter_only_model_rule)
