"""Settings that follow the backbone a run trains rather than the design: the run length a
paper gives per backbone (``trainer.total_steps_by_backbone``, DualSQL App. B: 100 steps for
Qwen3-4B, 300 for Qwen3-8B) and the SFT learning rate scaled to the backbone's size
(``supervised.lr: null``). ``TrainConfig`` resolves both when it is built, so every engine,
the dry run and the tests see the value that runs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePath

from tools.errors import ConfigError

LARGE_MODEL_PARAMS = 15e9
"""Above this many stored parameters a backbone gets the lower SFT rate of each pair below."""

SFT_LR_FULL = (2e-5, 1e-5)
"""Full fine-tuning: 2e-5 for 7B/13B models, 1e-5 for 70B (Tulu 2: Ivison et al. 2023,
"Camels in a Changing Climate", training details).
A project choice for papers that give no SFT rate."""

SFT_LR_LORA = (2e-4, 1e-4)
"""LoRA: 2e-4 for 7B/13B models, 1e-4 for 33B/65B (QLoRA: Dettmers et al. 2023,
its hyperparameter appendix)."""

EMBEDDED_PARAMS = 134_515_008
"""SmolLM2-135M-Instruct, the embedded default (``model.path: null`` on the local engine)."""


def same_backbone(path: str, name: str) -> bool:
    """``path`` (a hub name or a local directory) is backbone ``name``: the same hub name, or
    a directory named as the hub name's last part (``/models/Qwen3-4B`` is ``Qwen/Qwen3-4B``)."""
    if path == name:
        return True
    return PurePath(path.rstrip("/")).name.lower() == PurePath(name).name.lower()


def steps_for_backbone(by_backbone: Mapping[str, int], backbone: str | None) -> int | None:
    """The run length ``by_backbone`` gives ``backbone`` (None when it lists no such backbone)."""
    for name, steps in by_backbone.items():
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ConfigError(
                f"trainer.total_steps_by_backbone[{name!r}]={steps!r}: a positive number of optimizer steps "
                "(on the command line: 'trainer.total_steps_by_backbone={Qwen/Qwen3-4B:100}')"
            )
    if backbone is None:
        return None
    if backbone in by_backbone:  # the exact name first, then a directory named as a hub model
        return by_backbone[backbone]
    return next((steps for name, steps in by_backbone.items() if same_backbone(backbone, name)), None)


def parameters_of(model_path: str | None) -> int | None:
    """Stored parameters of the policy ``model_path`` (None: the embedded default): its local
    ``config.json``, else the backbone table; None when neither knows it."""
    if model_path is None:
        return EMBEDDED_PARAMS
    from training.engines.verl.checks.backbones import architecture_of
    from training.engines.verl.checks.memory import parameter_count

    arch, _ = architecture_of(model_path)
    return None if arch is None else parameter_count(arch)


def sft_learning_rate(model_path: str | None, lora: bool) -> tuple[float, str]:
    """The SFT learning rate scaled to the policy ``model_path`` (None: the embedded default),
    with the reason. A backbone of unknown size gets the smaller-model rate, and says so."""
    small, large = SFT_LR_LORA if lora else SFT_LR_FULL
    kind = "LoRA (QLoRA's rates)" if lora else "full fine-tuning (Tulu 2's rates)"
    params = parameters_of(model_path)
    name = model_path or "the embedded SmolLM2-135M"
    if params is None:
        return small, f"{kind}: {name} is of unknown size, so the rate for models up to 15B"
    lr = large if params > LARGE_MODEL_PARAMS else small
    return lr, f"{kind}: {name} has {params / 1e9:.1f}B parameters"
