"""Real veRL FSDP checkpoints on CPU: ``python -m tests.helpers.fsdp_checkpoint RUN_DIR --steps N``.

The tiny test model is wrapped with PyTorch's FSDP2 (``fully_shard`` on a one-rank CPU
device mesh, gloo process group), trained one AdamW step per "training step", and saved by
veRL's own ``FSDPCheckpointManager`` - the class veRL's FSDP engine saves actor checkpoints
with - into the layout veRL's trainer writes: ``RUN_DIR/checkpoints/global_step_N/actor/``
(DTensor model/optim/extra shards, ``fsdp_config.json``, ``huggingface/`` with config,
tokenizer, chat template and generation config, plus HF weights with ``--hf``), then
``global_step_N/data.pt`` and ``latest_checkpointed_iteration.txt`` in that order, as
``PPOTrainer._save_checkpoint`` does. The full weights after each step are saved to
``RUN_DIR/expected_step_N.pt`` for comparison. ``--lora R`` wraps the model with PEFT
first, as veRL's FSDP engine does under ``lora_rank`` (only the adapter trains; the
checkpoint manager then also writes ``lora_train_meta.json``).

Run in a subprocess: it initialises a process group and wraps modules in place.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def with_lora(model, rank: int):  # type: ignore[no-untyped-def]
    """``FSDPEngine._build_lora_module`` of veRL 0.9.1 with its defaults (all-linear, no
    dropout, alpha 2 x rank here so the scale is not 1)."""
    from peft import LoraConfig, TaskType, get_peft_model

    model.enable_input_require_grads()
    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM, r=rank, lora_alpha=2 * rank, target_modules="all-linear", bias="none"
    )
    model = get_peft_model(model, config)
    for name, param in model.named_parameters():  # B starts at zero: move it, so the adapter does something
        if "lora_B" in name:
            torch_init(param)
    return model


def torch_init(param) -> None:  # type: ignore[no-untyped-def]
    import torch

    with torch.no_grad():
        param.normal_(0.0, 0.02)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--keep", type=int, default=None)
    parser.add_argument("--hf", action="store_true", help="save_contents includes hf_model")
    parser.add_argument("--lora", type=int, default=0, help="train LoRA adapters of this rank, as veRL's FSDP engine")
    args = parser.parse_args(argv)

    import torch
    import torch.distributed as dist
    from omegaconf import OmegaConf
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    from tests.helpers.process_group import one_rank_process_group
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    one_rank_process_group()
    run_dir = Path(args.run_dir)
    source = run_dir / "policy"  # veRL loads the actor from a model directory (architectures, name_or_path)
    tiny_tokenizer().save_pretrained(source)
    tiny_model().save_pretrained(source)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    if args.lora:
        model = with_lora(model, args.lora)
    layers = model.base_model.model.model.layers if args.lora else model.model.layers
    mesh = init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _step: 1.0)
    contents = ["model", "optimizer", "extra"] + (["hf_model"] if args.hf else [])
    checkpoint = OmegaConf.create(
        {"save_contents": contents, "load_contents": ["model", "optimizer", "extra"], "async_save": False}
    )
    manager = FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        lr_scheduler=scheduler,
        processing_class=tiny_tokenizer(),
        checkpoint_config=checkpoint,
    )
    ckpt = run_dir / "checkpoints"
    generator = torch.Generator().manual_seed(0)
    for step in range(1, args.steps + 1):
        ids = torch.randint(3, 500, (2, 16), generator=generator)
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        step_dir = ckpt / f"global_step_{step}"
        manager.save_checkpoint(str(step_dir / "actor"), global_step=step, max_ckpt_to_keep=args.keep)
        torch.save({"_iterator_finished": False, "step": step}, step_dir / "data.pt")  # the dataloader state
        with open(ckpt / "latest_checkpointed_iteration.txt", "w") as tracker:
            tracker.write(str(step))
        full = {k: v.full_tensor().detach().clone() for k, v in model.state_dict().items()}
        torch.save(full, run_dir / f"expected_step_{step}.pt")
    dist.destroy_process_group()
    os.sync()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
