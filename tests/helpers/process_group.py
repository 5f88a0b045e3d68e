"""The one-rank gloo process group a test process needs (veRL's checkpoint managers ask it
for ranks; FSDP's ``fully_shard`` needs a device mesh).

An in-memory store: a TCP rendezvous on a port found free and then released can lose the
port to another process before ``init_process_group`` binds it (EADDRINUSE under xdist).
"""

from __future__ import annotations


def one_rank_process_group() -> None:
    """Start the default group with this process as its only rank (no-op if one exists)."""
    import torch.distributed as dist

    if dist.is_initialized():
        return
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
