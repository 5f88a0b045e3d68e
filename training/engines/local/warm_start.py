"""The local engine's warm-start stage: demonstrations → SFT → saved weights.

Runs once, before the first GRPO step. The fine-tuned weights are written to
``<run_dir>/warm_start/`` with ``done.json`` last (written atomically), so a run killed
after the warm start reuses it on ``resume=true`` (and the KL reference policy is these
weights, not the base model's). ``done.json`` holds a fingerprint of everything that
shaped the weights; a stale directory (another recipe, other settings) is redone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from training.config import WarmStartConfig

WARM_START_DIR = "warm_start"
DONE = "done.json"


def warm_start_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / WARM_START_DIR


def fingerprint(cfg: Any, model_source: str, limits: Any) -> dict[str, Any]:
    """Everything that shapes the warm-started weights (a saved warm start is reused only
    for the same fingerprint)."""
    return {
        "model": model_source,
        "agent": cfg.agent.name,
        "agent_options": dict(cfg.agent.options),
        "data": [cfg.data.kind, cfg.data.root, cfg.data.split],
        "seed": cfg.seed,
        "settings": asdict(cfg.stage.warm_start),
        "limits": asdict(limits),
        **({"lora": asdict(cfg.model.lora)} if cfg.model.lora.enabled else {}),  # an adapter, not weights
    }


def finished_warm_start(run_dir: str | Path, expected: dict[str, Any]) -> dict[str, Any] | None:
    """The saved result when ``run_dir`` holds a finished warm start for ``expected``."""
    done = warm_start_dir(run_dir) / DONE
    if not done.exists():
        return None
    record = json.loads(done.read_text())
    return record if record.get("fingerprint") == json.loads(json.dumps(expected)) else None


def run_warm_start(
    model: Any,
    tokenizer: Any,
    agent: Any,
    examples: Sequence[Any],
    limits: Any,
    ws: WarmStartConfig,
    *,
    run_dir: str | Path,
    agent_name: str,
    expected: dict[str, Any],
    seed: int,
    grad_clip: float,
    device: str = "cpu",
    autocast: Any = None,
    progress: bool = False,
    say: Callable[[str], None] = print,
    spill_dir: str | Path | None = None,
    share_prefix: bool = True,
) -> dict[str, Any]:
    """Fine-tune ``model`` on demonstrations of ``agent`` on ``examples`` (or reload the
    finished warm start in ``run_dir`` when its fingerprint is ``expected``)."""
    from training.supervised.demonstrations import get_script, record_demonstrations
    from training.supervised.fine_tune import WarmStartSettings, supervised_fine_tune

    out = warm_start_dir(run_dir)
    saved = finished_warm_start(run_dir, expected)
    if saved is not None:
        load_warm_start(model, out)
        say(f"[warm start] reusing the finished warm start in {out}")
        return saved["result"]
    script = get_script(agent_name)
    demos = record_demonstrations(agent, examples, tokenizer, limits, script)
    dropped = ", ".join(f"{n} × {why}" for why, n in sorted(demos.dropped.items())) or "none"
    say(
        f"[warm start] {demos.kept_examples}/{len(examples)} training questions demonstrated in the "
        f"{agent_name} protocol ({len(demos.trajectories)} episodes); dropped: {dropped}"
    )
    if not demos.trajectories:
        from tools.errors import ConfigError

        raise ConfigError(
            "no demonstration fits the rollout limits (every one was dropped: " + dropped + "); raise "
            "rollout.max_new_tokens / rollout.max_response_tokens or set stage.warm_start.enable=false"
        )
    settings = WarmStartSettings(
        epochs=ws.epochs,
        lr=ws.lr,
        batch_size=ws.batch_size,
        micro_batch_size=ws.micro_batch_size,
        warmup_ratio=ws.warmup_ratio,
        grad_clip=grad_clip,
    )
    result = supervised_fine_tune(
        model,
        demos.trajectories,
        settings,
        tokenizer.pad_token_id,
        device,
        autocast,
        seed=seed,
        progress=progress,
        spill_dir=spill_dir,
        share_prefix=share_prefix,
    )
    result.update(
        {
            "demonstrations": float(len(demos.trajectories)),
            "questions": float(demos.kept_examples),
            "dropped": float(sum(demos.dropped.values())),
        }
    )
    say(
        f"[warm start] SFT: {int(result['steps'])} steps, NLL {result['nll_first']:.3f} -> "
        f"{result['nll_last']:.3f} on {int(result['policy_tokens'])} policy tokens ({result['duration_s']:.0f}s)"
    )
    save_warm_start(model, tokenizer, out, expected, result)
    return result


def save_warm_start(model: Any, tokenizer: Any, out: Path, expected: dict[str, Any], result: dict[str, Any]) -> None:
    """A plain HF checkpoint (``eval.run model=<run_dir>/warm_start`` loads it), then the
    marker. Under LoRA: the adapter merged in, and the adapter itself in ``adapter/``."""
    from training.engines.local.lora import WARM_START_ADAPTER, is_lora, save_merged

    out.mkdir(parents=True, exist_ok=True)
    (out / DONE).unlink(missing_ok=True)
    if is_lora(model):
        save_merged(model, tokenizer, out)
        model.save_pretrained(out / WARM_START_ADAPTER)
    else:
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)
    tmp = out / (DONE + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": expected, "result": result}, indent=2))
    os.replace(tmp, out / DONE)


def load_warm_start(model: Any, directory: Path) -> None:
    """A finished warm start into ``model``: its weights, or under LoRA its adapter."""
    from training.engines.local.lora import WARM_START_ADAPTER, is_adapter_dir, is_lora, load_adapter

    if is_lora(model):
        if not is_adapter_dir(directory / WARM_START_ADAPTER):
            from tools.errors import ConfigError

            raise ConfigError(
                f"{directory} holds a warm start without LoRA; this run has model.lora.rank > 0: "
                "start over with fresh=true"
            )
        load_adapter(model, directory / WARM_START_ADAPTER)
    else:
        load_weights(model, directory)


def load_weights(model: Any, directory: Path) -> None:
    """Copy the weights saved in ``directory`` into ``model`` (same architecture)."""
    import torch

    loaded = type(model).from_pretrained(directory, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
