"""``python -m training.export RUN_DIR [step=N] [out=DIR]``: a saved step as a HF model directory.

The result holds the weights, ``config.json``, ``generation_config.json``, the tokenizer and
its chat template: ``eval.run model.path=DIR`` and vLLM load it.

- veRL runs (``checkpoints/global_step_N/actor/``): veRL's own model merger
  (``verl.model_merger``'s ``FSDPModelMerger``) joins the FSDP model shards of every rank
  into one HF checkpoint (bf16, as veRL's merger writes it) and copies the tokenizer and
  generation config veRL saved beside them. It works whether or not the checkpoint also
  holds an ``hf_model`` copy (``trainer.save_weights``). A LoRA run's checkpoint
  (``model.lora.rank > 0``; veRL marks it with ``lora_train_meta.json``) holds the frozen
  base and the adapter: veRL's merger writes the base with the adapter beside it in
  ``lora_adapter/`` (PEFT's layout), which vLLM and transformers would ignore; the export
  merges that adapter into the weights with PEFT, so the directory is a plain HF model.
- local-engine runs (``checkpoints/step_NNNNNN/``): those checkpoints already are HF
  directories; the export hard-links their files (as the local engine's ``final/`` does).
  A LoRA run's checkpoints hold the adapter (``model.lora.rank > 0``): the export merges it
  onto its base model (``base_model_name_or_path`` of ``adapter_config.json``) with PEFT,
  into a plain HF directory (training/engines/local/lora.py).

Without ``step=`` the newest step whose weights are all there is exported; ``out`` defaults
to ``RUN_DIR/export/step_N``. The directory is written under a temporary name and renamed
when complete, so a killed export never leaves a directory that looks finished.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tools.errors import ConfigError, ToolkitError
from training.runs.resume_policy import STEP_PREFIX, actor_missing, verl_step_checkpoints

Say = Callable[[str], None]


def verl_actor_dirs(run_dir: str | Path) -> dict[int, Path]:
    """Steps of a veRL run whose ``actor/`` weights are complete, oldest first."""
    found = {}
    for ckpt in verl_step_checkpoints(Path(run_dir) / "checkpoints"):
        actor = ckpt.path / "actor"
        if actor.is_dir() and not actor_missing(actor):
            found[ckpt.step] = actor
    return found


def local_step_dirs(run_dir: str | Path) -> dict[int, Path]:
    """Steps of a local-engine run whose checkpoint holds HF weights, oldest first."""
    from training.engines.local import state as st

    root = st.checkpoint_root(run_dir)
    found = {}
    for path in sorted(root.glob("step_*")) if root.is_dir() else ():
        suffix = path.name.removeprefix("step_")
        if path.is_dir() and suffix.isdigit() and st.has_weights(path):
            found[int(suffix)] = path
    return found


def merge_fsdp_actor(actor: str | Path, target: str | Path, trust_remote_code: bool = False) -> Path:
    """veRL's FSDP model merger on one ``actor/`` checkpoint directory -> ``target`` (atomic)."""
    from verl.model_merger.base_model_merger import ModelMergerConfig
    from verl.model_merger.fsdp_model_merger import FSDPModelMerger

    actor, target = Path(actor), Path(target)
    tmp = _fresh_tmp(target)
    config = ModelMergerConfig(
        operation="merge",
        backend="fsdp",
        local_dir=str(actor),
        target_dir=str(tmp),
        hf_model_config_path=str(actor / "huggingface"),
        trust_remote_code=trust_remote_code,
    )
    merger = FSDPModelMerger(config)
    merger.merge_and_save()
    merger.cleanup()
    if (tmp / VERL_ADAPTER_DIR).is_dir():
        merge_verl_adapter(tmp, merger.get_transformers_auto_model_class(), trust_remote_code)
    return _publish(tmp, target)


VERL_ADAPTER_DIR = "lora_adapter"
"""Where veRL's model merger puts a LoRA checkpoint's adapter, beside the base weights."""
VERL_LORA_META = "lora_train_meta.json"
"""veRL's FSDP checkpoint manager writes it into ``actor/`` when the model has a LoRA adapter."""


def is_verl_lora(actor: str | Path) -> bool:
    """True for the ``actor/`` checkpoint of a LoRA run."""
    return (Path(actor) / VERL_LORA_META).is_file()


def merge_verl_adapter(directory: Path, auto_class: Any, trust_remote_code: bool = False) -> None:
    """The adapter veRL's merger wrote to ``directory/lora_adapter/`` merged (PEFT's
    ``merge_and_unload``: W + alpha/r * B A) into the base weights of ``directory``, in
    place; the adapter folder is removed, leaving a plain HF directory. bf16, as the
    merger writes (PEFT adds the update computed in fp32)."""
    import torch
    from peft import PeftModel

    adapter = directory / VERL_ADAPTER_DIR
    base = auto_class.from_pretrained(directory, dtype=torch.bfloat16, trust_remote_code=trust_remote_code)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    for old in [*directory.glob("*.safetensors"), directory / "model.safetensors.index.json"]:
        old.unlink(missing_ok=True)  # the base's shards: a different shard count would leave stale files
    merged.to(torch.bfloat16).save_pretrained(directory)
    shutil.rmtree(adapter)


def export_verl_actor(actor: str | Path, target: str | Path, trust_remote_code: bool = False) -> Path:
    """One veRL ``actor/`` checkpoint as a HF directory: veRL's ``hf_model`` copy when the
    checkpoint holds one, else (or under LoRA, whose ``hf_model`` copy veRL writes with the
    PEFT wrapper's names, which no plain model loads) veRL's merger, adapter merged."""
    actor = Path(actor)
    hf_dir = actor / "huggingface"
    weights = [*hf_dir.glob("*.safetensors"), *hf_dir.glob("*.bin")] if hf_dir.exists() else []
    if weights and not is_verl_lora(actor):
        return copy_hf_dir(hf_dir, target)
    return merge_fsdp_actor(actor, target, trust_remote_code=trust_remote_code)


def copy_hf_dir(source: str | Path, target: str | Path, link: bool = False) -> Path:
    """A HF model directory's files (sub-folders too) into ``target``, atomically; ``link``
    hard-links them where the filesystem allows (no second copy on disk)."""
    import os

    source, target = Path(source), Path(target)
    tmp = _fresh_tmp(target)
    if link:

        def link_or_copy(src: str, dst: str) -> None:
            try:
                os.link(src, dst)
            except OSError:
                shutil.copy2(src, dst)

        shutil.copytree(source, tmp, copy_function=link_or_copy, dirs_exist_ok=True)
    else:
        shutil.copytree(source, tmp, dirs_exist_ok=True)
    for name in ("trainer_state.pt", "meta.json"):  # the local engine's resume state is not part of a model
        (tmp / name).unlink(missing_ok=True)
    return _publish(tmp, target)


def _fresh_tmp(target: Path) -> Path:
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    return tmp


def _publish(tmp: Path, target: Path) -> Path:
    import os

    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)
    return target


def export_step(run_dir: str | Path, step: int | None = None, out: str | Path | None = None, say: Say = print) -> Path:
    """Export one saved step of a run (the newest complete one when ``step`` is None) as a
    HF model directory; returns its path. A step that is not there is a ConfigError that
    lists the steps that are."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ConfigError(f"run directory {run_dir} does not exist; pass the run_dir of a training run")
    verl_steps, local_steps = verl_actor_dirs(run_dir), local_step_dirs(run_dir)
    steps = verl_steps or local_steps
    if not steps:
        raise ConfigError(
            f"{run_dir} holds no checkpoint with weights (checkpoints/{STEP_PREFIX}N/actor/ of a veRL "
            "run, or checkpoints/step_N/ of a local run)"
        )
    chosen = max(steps) if step is None else int(step)
    if chosen not in steps:
        raise ConfigError(
            f"{run_dir} holds no complete checkpoint of step {chosen}; saved steps with weights: "
            f"{', '.join(map(str, sorted(steps)))} (older ones are removed by trainer.keep_checkpoints)"
        )
    from training.engines.local.lora import is_adapter_dir

    target = Path(out) if out is not None else run_dir / "export" / f"step_{chosen}"
    if verl_steps:
        lora = " (LoRA: the adapter merged into the weights)" if is_verl_lora(steps[chosen]) else ""
        say(f"[export] step {chosen}: veRL's FSDP model merger on {steps[chosen]} -> {target}{lora}")
        merge_fsdp_actor(steps[chosen], target)
    elif is_adapter_dir(steps[chosen]):
        say(f"[export] step {chosen}: the LoRA adapter {steps[chosen]} merged onto its base -> {target}")
        merge_lora_checkpoint(steps[chosen], target)
    else:
        say(f"[export] step {chosen}: the local checkpoint {steps[chosen]} -> {target} (hard links)")
        copy_hf_dir(steps[chosen], target, link=True)
    return target


def merge_lora_checkpoint(checkpoint: str | Path, target: str | Path) -> Path:
    """A local LoRA checkpoint's adapter merged onto its base into ``target`` (atomic)."""
    from training.engines.local.lora import merge_adapter_dir

    target = Path(target)
    tmp = _fresh_tmp(target)
    merge_adapter_dir(checkpoint, tmp)
    return _publish(tmp, target)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    usage = "usage: python -m training.export RUN_DIR [step=N] [out=DIR]"
    if not args or args[0] in ("-h", "--help") or "=" in args[0]:
        print(usage + "\n\n" + (__doc__ or "").strip(), file=sys.stderr if args[:1] != ["--help"] else sys.stdout)
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    options: dict[str, str] = {}
    for item in args[1:]:
        key, sep, value = item.partition("=")
        if not sep or key not in ("step", "out"):
            print(f"bad argument {item!r}; {usage}", file=sys.stderr)
            return 2
        options[key] = value
    step = options.get("step")
    if step is not None and not step.isdigit():
        print(f"step={step!r}: expected a step number (e.g. step=40); {usage}", file=sys.stderr)
        return 2
    try:
        path = export_step(args[0], int(step) if step is not None else None, options.get("out"))
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"[export] done: {path}  (python -m eval.run recipe=<design> model.path={path})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
