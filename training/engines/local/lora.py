"""LoRA on the local engine, through PEFT: wrap the policy, save and load its adapter,
merge it into a plain HF directory, and run the KL reference on the same weights.

With ``model.lora.rank > 0`` the policy is a ``peft.PeftModel``: the base weights are
frozen (``requires_grad=False``, so AdamW holds state for the adapter only) and stay
bit-identical through training. What is written where:

- checkpoints (``checkpoints/step_N/``): the adapter only (``adapter_config.json``,
  ``adapter_model.safetensors``, PEFT's layout) with the tokenizer and the resume state;
  resume loads the base from ``model.path`` again and the adapter from the checkpoint;
- ``final/``, ``training.export`` and a warm start's ``warm_start/``: the adapter merged
  into a plain HF directory (``eval.run model.path=`` and vLLM load it); ``warm_start/adapter/``
  keeps the adapter itself, for reuse on resume and as the KL reference;
- the KL reference is the policy with its adapter disabled (the base, as veRL's
  ``ref_in_actor`` does), or with the warm start's adapter swapped in when the run made
  one: no second copy of the base weights.
"""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from training.config import LoraConfig

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
WARM_START_ADAPTER = "adapter"  # warm_start/adapter/: the warm start's adapter (warm_start/ is merged)


def apply_lora(model: Any, settings: LoraConfig) -> Any:
    """``model`` wrapped with fresh LoRA adapters (PEFT); base weights frozen."""
    from peft import LoraConfig as PeftLoraConfig
    from peft import TaskType, get_peft_model

    targets = settings.target_modules
    config = PeftLoraConfig(
        task_type=TaskType.CAUSAL_LM,
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets if isinstance(targets, str) else list(targets),
        bias="none",
    )
    try:
        return get_peft_model(model, config)
    except ValueError as err:  # PEFT: target modules not found in the base model
        from tools.errors import ConfigError

        raise ConfigError(
            f"model.lora.target_modules={targets!r} does not fit this model ({str(err).splitlines()[0]}); "
            "use all-linear or names of its linear layers (e.g. q_proj, v_proj)"
        ) from err


def is_lora(model: Any) -> bool:
    """True for a PEFT-wrapped policy."""
    return hasattr(model, "peft_config") and hasattr(model, "disable_adapter")


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path) / ADAPTER_CONFIG).is_file() and (Path(path) / ADAPTER_WEIGHTS).is_file()


def adapter_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter's weights (PEFT's state dict: the names ``save_pretrained`` writes)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_adapter(model: Any, directory: str | Path) -> None:
    """Copy the adapter saved in ``directory`` into the PEFT policy ``model``, exactly."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(model, load_file(str(Path(directory) / ADAPTER_WEIGHTS)))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        from tools.errors import ConfigError

        raise ConfigError(
            f"the adapter in {directory} does not fit this model.lora setting ({len(unexpected)} unknown "
            f"weights, e.g. {unexpected[0]}); resume with the same model.lora.* or start with fresh=true"
        )


def merged_model(model: Any) -> Any:
    """A plain transformers model with the adapter merged into its weights (a copy: the
    policy keeps its frozen base and its adapter)."""
    return copy.deepcopy(model).merge_and_unload()


def save_merged(model: Any, tokenizer: Any, out: str | Path) -> None:
    """The adapter merged into a plain HF directory (weights, config, tokenizer)."""
    merged = merged_model(model)
    merged.save_pretrained(out)
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def merge_adapter_dir(adapter_dir: str | Path, out: str | Path, trust_remote_code: bool = False) -> Path:
    """A saved adapter (a LoRA checkpoint) merged onto its base model into ``out``: the base
    is ``base_model_name_or_path`` of its ``adapter_config.json``; the tokenizer saved beside
    the adapter is copied."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_dir, out = Path(adapter_dir), Path(out)
    base_path = json.loads((adapter_dir / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path")
    if not base_path:
        from tools.errors import ConfigError

        raise ConfigError(f"{adapter_dir / ADAPTER_CONFIG} names no base_model_name_or_path to merge the adapter into")
    base = AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32, trust_remote_code=trust_remote_code)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(out)
    tokenizer_source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base_path
    AutoTokenizer.from_pretrained(tokenizer_source, trust_remote_code=trust_remote_code).save_pretrained(out)
    return out


@contextlib.contextmanager
def reference_weights(model: Any, adapter: dict[str, torch.Tensor] | None) -> Iterator[Any]:
    """The KL reference on the policy's own weights: the adapter disabled (``adapter`` None:
    the base model), or ``adapter``'s weights swapped in for the duration (a warm start's
    adapter). Yields the model to run, in eval mode (as the full-weight reference runs); the
    policy's adapter and mode are back afterwards, exactly."""
    from peft import set_peft_model_state_dict

    was_training = model.training
    model.eval()
    try:
        if adapter is None:
            with model.disable_adapter():
                yield model
            return
        current = adapter_state(model)
        try:
            set_peft_model_state_dict(model, adapter)
            yield model
        finally:
            set_peft_model_state_dict(model, current)
    finally:
        model.train(was_training)


def parameter_summary(model: Any) -> str:
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return f"LoRA: {trainable / 1e6:.2f}M trainable of {total / 1e6:.1f}M parameters ({100 * trainable / total:.2f} %)"
