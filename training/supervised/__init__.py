"""The papers' supervised stages: traces, filters, an SFT dataset, SFT, and SFT -> RL.

``python -m training.run recipe=<design> stage=data|sft|sft_rl`` (``runner.py``); the
generation sources (policy, local model, OpenAI-compatible endpoint) are in
``training/generation/sources.py``; veRL's SFT trainer reads the dataset through
``training/engines/verl/sft.py``.
"""

from __future__ import annotations

from typing import Any


def run_stage(cfg: Any, inputs: Any = None, say: Any = print) -> dict[str, Any]:
    from training.supervised.chain import run_stage as run

    return run(cfg, inputs, say)


def stage_entry(cfg: Any, say: Any = print) -> dict[str, Any] | None:
    """``training.run`` with ``stage`` other than rl: the local chain, or veRL's SFT trainer."""
    if cfg.engine.name == "verl":
        from training.engines.verl import sft as verl_sft

        if cfg.dry_run:
            say(verl_sft.describe(cfg))
            return None
        return verl_sft.train(cfg, say)
    if cfg.dry_run:
        from training.engines.local.trainer import describe

        say(describe(cfg))
        return None
    return run_stage(cfg, None, say)
