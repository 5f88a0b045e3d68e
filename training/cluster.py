"""``python -m training.cluster recipe=<name> data=bird data.root=/shared/bird hardware=h100x8
hardware.nnodes=2``: the multi-node checks ``engine=verl`` runs at launch, on their own
(the project on every node, the caches, the shared run directory). The checks:
``training.engines.verl.checks.multinode``.
"""

from __future__ import annotations

from training.engines.verl.checks.multinode import run_checks

if __name__ == "__main__":
    from training.config.command import hydra_entry

    hydra_entry("config", run_checks)
