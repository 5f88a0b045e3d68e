"""ReToolSQL's "backup pool" (§3.5) on veRL: the prompts a one-draw step takes, with the
questions of groups drawn but not kept served first at the next step.

veRL's trainer fetches prompts from its dataloader in whole ``gen_batch_size`` chunks and
forgets them once submitted. :class:`BackupPool` sits between the two, as the local
engine's ``CandidatePool`` sits in front of its epoch sampler:

- :meth:`BackupPool.take` serves the rows handed back first, then rows of the dataloader
  in its order (a chunk's rows the step did not need wait for the next step, so no
  question of the epoch is skipped), and gives every row a fresh ``uid``: a question
  handed back is rolled out again with the current policy, never trained on its old
  rollouts;
- :meth:`BackupPool.give_back` takes the uids of the last draw whose groups were not kept
  (``algorithm.dynamic_sampling.return_unkept``, chosen by the replay buffer) and queues
  their rows, in draw order, for the next :meth:`take`.

Rows are the dicts veRL's ``collate_fn`` builds a batch from, so a drawn batch is built the
way veRL builds its own. The queue is part of the checkpoint (:meth:`state_dict`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

BATCH_ONLY_KEYS = ("uid", "global_steps")
"""Keys veRL adds to a fetched batch (the group id, the step): not part of a question's row."""


class BackupPool:
    """Prompt rows for the one draw: handed-back questions first, then the dataloader's."""

    def __init__(self, fetch: Callable[[], Any]) -> None:
        self.fetch = fetch  # one dataloader chunk as a TensorDict (veRL's _fetch_one_gen_batch)
        self.returned: list[dict[str, Any]] = []
        self.read_ahead: list[dict[str, Any]] = []
        self.drawn: dict[str, dict[str, Any]] = {}  # uid -> row, of the last take

    def take(self, count: int) -> Any:
        """``count`` prompts as a veRL batch (TensorDict) with fresh uids."""
        if count <= 0:
            raise ValueError(f"backup pool: asked for {count} prompts; a step draws B x K > 0")
        rows, self.returned = self.returned[:count], self.returned[count:]
        while len(rows) + len(self.read_ahead) < count:
            self.read_ahead.extend(_rows(self.fetch()))
        need = count - len(rows)
        rows, self.read_ahead = rows + self.read_ahead[:need], self.read_ahead[need:]
        uids = [str(uuid.uuid4()) for _ in rows]
        self.drawn = dict(zip(uids, rows, strict=True))
        return _batch(rows, uids)

    def give_back(self, uids: Sequence[str]) -> None:
        """Queue the rows of these uids of the last draw (in draw order) for the next take;
        uids not drawn last are ignored (each draw is handed back once)."""
        back = set(uids)
        self.returned.extend(row for uid, row in self.drawn.items() if uid in back)
        self.drawn = {uid: row for uid, row in self.drawn.items() if uid not in back}

    def state_dict(self) -> dict[str, Any]:
        """The rows waiting to be drawn (handed back, then read ahead of the dataloader's state)."""
        return {"returned": list(self.returned), "read_ahead": list(self.read_ahead)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.returned = list(state.get("returned") or [])
        self.read_ahead = list(state.get("read_ahead") or [])
        self.drawn = {}


def _rows(batch: Any) -> list[dict[str, Any]]:
    """A fetched TensorDict as one dict per prompt, without the batch-only keys."""
    return [{k: v for k, v in row.items() if k not in BATCH_ONLY_KEYS} for row in batch.tolist()]


def _batch(rows: Sequence[dict[str, Any]], uids: Sequence[str]) -> Any:
    """Rows -> the TensorDict veRL's ``_fetch_one_gen_batch`` builds (``collate_fn``, uids,
    ``get_tensordict``)."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    batch = collate_fn(list(rows))
    batch["uid"] = np.array(list(uids), dtype=object)
    return tu.get_tensordict(batch)
