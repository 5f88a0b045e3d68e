"""``python -m training.preflight recipe=<name> [hardware=h100x8] [overrides]``: is this node
ready for the run? One line per check, ``OK`` / ``FAIL`` / ``SKIP`` with what to fix; the
exit status is 1 when any check fails. The checks: ``training.engines.verl.checks.node``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from training.engines.verl.checks.node import Check, context_of, gather_facts, run_checks


def main(raw: dict[str, Any], explicit: set[str], say: Callable[[str], None] = print) -> list[Check]:
    from training.config import TrainConfig

    cfg = TrainConfig.from_mapping({k: v for k, v in raw.items() if k != "hydra"})
    ctx = context_of(cfg)
    say(f"preflight: recipe={cfg.recipe_name} model={ctx.model} hardware={ctx.hardware} nodes={ctx.nnodes}")
    checks = run_checks(gather_facts(ctx), ctx)
    for check in checks:
        say(check.line())
    failed = [c.name for c in checks if c.status == "FAIL"]
    say(f"{len(failed)} check(s) failed: {', '.join(failed)}" if failed else "all checks passed")
    if failed:
        sys.exit(1)
    return checks


if __name__ == "__main__":
    from training.config.command import hydra_entry

    hydra_entry("config", main)
