"""Dynamic sampling on veRL's replay buffer: the papers' one-draw rule and veRL's refill, both
with ``min_std`` and with rows dropped for prompt length left out of the spread.

veRL 0.9.1's sync ``ReplayBuffer`` implements DAPO's ``filter_groups``: a finished group
whose metric is identical on every row (``std == 0.0`` exactly) is evicted and two new
prompts are dispatched for each eviction until ``B`` groups are kept. The papers ask for
something else: draw ``B x K`` prompts once, keep a group only if the std of its metric
is at least ``min_std``, keep up to ``B`` groups and zero-mask the unfilled slots.
:class:`SqlAgentReplayBuffer` does both, chosen by ``dynamic_sampling.refill`` (default
``false``, the papers' rule):

- ``refill=false``: the trainer submits ``B x K`` prompts per step; :meth:`sample` waits
  until all of them are finished, keeps the informative groups (in the order the trainer
  drew them, at most ``B``), fills the remaining slots with uninformative groups whose
  rows are tagged ``zero_mask`` (the trainer zeroes their loss mask, so they train nothing
  and the batch keeps its shape), and clears the rest from TransferQueue. The groups not
  kept are remembered (:class:`GroupChoice`) so that the trainer can hand their questions
  back to the backup pool (``return_unkept``, :mod:`training.engines.verl.workers.backup_pool`),
  as the local engine does;
- ``refill=true``: veRL's own loop, with this class's classification (``min_std``,
  dropped rows ignored).

The metric is read from each row's ``extra_fields["reward_extra_info"]`` as veRL does;
a row whose episode record says ``dropped`` (its prompt was over the length limit) does
not count, nor, with ``flagged_positive_as_unknown``, a row whose positive execution
reward carries a reward-trust flag (its reward breakdown's ``flags``); a group with fewer
than two counted rows has no spread.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import transfer_queue as tq
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

from rex.trust import flagged_positive
from training.engines.verl.shared import EPISODE_KEY, REWARD_KEY, DynamicSampling

log = logging.getLogger(__name__)

ZERO_MASK_TAG = "zero_mask"
"""Tag of a row kept only to fill a slot: its loss mask is zeroed by the trainer."""


def metric_key(metric: str) -> str:
    """The ``reward_extra_info`` key of a dynamic-sampling metric ("total" is stored as "score")."""
    return "score" if metric == "total" else metric


def group_spread(values: Sequence[float]) -> float | None:
    """Population std of a group's metric (as veRL's filter computes it); None below two rows."""
    return float(np.std(values)) if len(values) > 1 else None


def informative(values: Sequence[float], min_std: float) -> bool:
    """the papers' rule: keep a group when the std of its metric is at least ``min_std``."""
    spread = group_spread(values)
    return spread is not None and spread >= min_std and spread > 0.0


@dataclass
class GroupChoice:
    """One draw's groups (prompt uids) sorted by the papers' rule: ``keep`` trains, ``fill``
    holds the unfilled slots zero-masked, ``unkept_varying`` varied but fell beyond the B
    kept, ``unkept_flat`` had no spread (the ``fill`` groups among them: they train nothing)."""

    keep: list[str] = field(default_factory=list)
    fill: list[str] = field(default_factory=list)
    unkept_varying: list[str] = field(default_factory=list)
    unkept_flat: list[str] = field(default_factory=list)

    def to_return(self, mode: str) -> list[str]:
        """The uids whose questions go back to the pool under ``return_unkept=mode`` (the
        local engine's ``unkept_to_return``)."""
        if mode == "none":
            return []
        return list(self.unkept_varying) + (list(self.unkept_flat) if mode == "all" else [])


def choose_groups(
    ordered: Sequence[str],
    values: Mapping[str, Sequence[float]],
    finished: set[str],
    min_std: float,
    batch_size: int,
) -> GroupChoice:
    """The papers' one draw over groups in draw order: the first ``batch_size`` informative
    finished groups are kept, the first of the others fill the remaining slots.

    >>> c = choose_groups(["a", "b", "c", "d"], {"a": [1, 0], "b": [0, 0], "c": [1, 0], "d": [0, 1]},
    ...                   {"a", "b", "c", "d"}, 1e-6, 2)
    >>> c.keep, c.fill, c.unkept_varying, c.unkept_flat, c.to_return("varying")
    (['a', 'c'], [], ['d'], ['b'], ['d'])
    """
    varying = [uid for uid in ordered if uid in finished and informative(values.get(uid, []), min_std)]
    keep = varying[:batch_size]
    fill = [uid for uid in ordered if uid not in keep][: batch_size - len(keep)]
    return GroupChoice(
        keep=keep,
        fill=fill,
        unkept_varying=varying[batch_size:],
        unkept_flat=[uid for uid in ordered if uid not in varying],
    )


class GroupSpread(ReplayBuffer):
    """The project's classification of a finished group (``min_std``, dropped rows and
    flagged positives left out) in veRL's ``filter_groups`` hook, for either of veRL's
    replay buffers (sync: evict and refill two; async: evict and refill one)."""

    dynamic: DynamicSampling
    draw_order: dict[str, int]  # prompt uid -> its place in the trainer's draw (the papers' "oldest first")
    last_choice: GroupChoice  # the last one draw's groups, until the trainer takes the unkept ones

    @classmethod
    def from_buffer(cls, buffer: ReplayBuffer, dynamic: DynamicSampling) -> Any:
        """This class over a buffer veRL built (its constructor arguments resolved by veRL)."""
        out = cls.__new__(cls)
        out.__dict__.update(buffer.__dict__)
        out.dynamic = dynamic
        out.draw_order = {}
        out.last_choice = GroupChoice()
        if dynamic.enable:
            out.filter_groups_metric = metric_key(dynamic.metric)
        return out

    def take_unkept(self) -> list[str]:
        """The uids of the last draw whose questions go back to the pool
        (``return_unkept``); each draw's are handed out once."""
        out, self.last_choice = self.last_choice.to_return(self.dynamic.return_unkept), GroupChoice()
        return out

    # ------------------------------------------------------------------ classification

    def _group_values(self, partition_id: str, uids: set[str]) -> dict[str, list[float]]:
        """uid -> the metric of each counted (not dropped) row."""
        keys = [key for key in self.partitions[partition_id] if key.split("_")[0] in uids]
        values: dict[str, list[float]] = defaultdict(list)
        if not keys:
            return values
        rows = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
        name = metric_key(self.dynamic.metric)
        for key, extra in zip(keys, list(rows["extra_fields"]), strict=True):
            extra = getattr(extra, "data", extra)
            extra = extra if isinstance(extra, Mapping) else {}
            if (extra.get(EPISODE_KEY) or {}).get("dropped") or self._unknown(extra):
                continue
            info = extra.get("reward_extra_info") or {}
            if name not in info:
                raise RuntimeError(
                    f"row {key} has no reward_extra_info[{name!r}] for dynamic sampling: the agent loop writes the "
                    "components named by algorithm.dynamic_sampling.metric (set it to 'exec' or 'total')"
                )
            values[key.split("_")[0]].append(float(info[name]))
        return values

    def _unknown(self, extra: Mapping[str, Any]) -> bool:
        """A flagged positive under ``flagged_positive_as_unknown`` (see the module doc)."""
        if not self.dynamic.flagged_positive_as_unknown:
            return False
        reward = extra.get(REWARD_KEY) or {}
        return flagged_positive(float((reward.get("components") or {}).get("exec", 0.0)), reward.get("flags") or ())

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        """veRL's refill path: finished groups without enough spread (``min_std``)."""
        if partition_id == "val" or not self.dynamic.enable:
            return set(), Counter()
        finished = set(self.finished_keys[partition_id])
        values = self._group_values(partition_id, finished)
        filtered = {
            uid: (values[uid][0] if values[uid] else 0.0)
            for uid in finished
            if not informative(values[uid], self.dynamic.min_std)
        }
        return set(filtered), Counter(filtered.values())


class SqlAgentAsyncReplayBuffer(GroupSpread, ReplayBufferAsync):
    """veRL's async replay buffer (staleness bound, evict-and-refill-one) with the project's
    classification; the papers' one draw is refused in async modes
    (:mod:`training.engines.verl.checks.async_rules`)."""


class SqlAgentReplayBuffer(GroupSpread, ReplayBuffer):
    """veRL's sync replay buffer with the project's dynamic sampling (see the module doc)."""

    @property
    def one_draw(self) -> bool:
        return bool(self.dynamic.enable and not self.dynamic.refill)

    # ------------------------------------------------------------------ the papers' one draw

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        if partition_id == "val" or not self.one_draw:
            return super().sample(global_steps=global_steps, partition_id=partition_id, batch_size=batch_size)
        return self._sample_one_draw(partition_id, batch_size)

    def _sample_one_draw(self, partition_id: str, batch_size: int) -> tuple[Any, dict]:
        last_debug = 0.0
        while True:
            self._sync_metadata_from_transfer_queue()
            inflight = len(self.pending_keys[partition_id]) + len(self.running_keys[partition_id])
            terminal = self.finished_keys[partition_id] | self.failure_keys[partition_id]
            if inflight == 0 and terminal:
                break
            last_debug = self._wait_for_next_poll(partition_id, last_debug)
        with_rows = {key.split("_")[0] for key in self.partitions[partition_id]}
        steps, drawn = self.prompt_global_steps[partition_id], self.draw_order
        ordered = sorted(terminal & with_rows, key=lambda uid: (steps.get(uid, 0), drawn.get(uid, len(drawn)), uid))
        values = self._group_values(partition_id, set(ordered))
        choice = choose_groups(ordered, values, self.finished_keys[partition_id], self.dynamic.min_std, batch_size)
        keep, fill = choice.keep, choice.fill
        if not keep and not fill:
            raise RuntimeError("dynamic sampling: no group of this step produced rows (every rollout failed)")
        self.last_choice = choice
        surplus = terminal - set(keep) - set(fill)
        snapshot = dict(self.partitions[partition_id])
        self._clear_groups(partition_id, surplus)
        batch = self._materialize_batch(partition_id, keep + fill, snapshot)
        filled = set(fill)
        batch.tags = [
            dict(tag, **{ZERO_MASK_TAG: key.split("_")[0] in filled})
            for key, tag in zip(batch.keys, batch.tags, strict=True)
        ]
        # Stored too: the trainer's later steps take the tags TransferQueue returns with each write.
        tq.kv_batch_put(keys=batch.keys, partition_id=partition_id, tags=batch.tags)
        metrics = {
            "training/dynamic_sampling/drawn_groups": len(terminal),
            "training/dynamic_sampling/kept_groups": len(keep),
            "training/dynamic_sampling/zero_masked_groups": len(fill),
            "training/dynamic_sampling/fill_rate": len(keep) / batch_size,
            "training/dynamic_sampling/unkept_varying_groups": len(choice.unkept_varying),
        }
        log.info(
            "dynamic sampling: %d of %d groups informative, %d slot(s) zero-masked", len(keep), len(terminal), len(fill)
        )
        return batch, metrics
