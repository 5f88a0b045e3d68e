"""The KL schedule of :class:`~training.engines.verl.workers.sync_trainer.SqlAgentTrainer`.

veRL's ``kl_loss_coef`` is fixed, and ``ActorConfig`` is frozen. At each
``on_step_begin`` the trainer reads the project's ``KLSchedule`` and, when beta changes,
sends the actor workers a new loss function (``set_loss_fn``) built from a
``dataclasses.replace``-d config; once beta is 0 for good, the KL term and the reference
log-prob pass are switched off.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import partial
from typing import TYPE_CHECKING, Any

from verl.trainer.ppo.v1.trainer_base import PPOTrainer

if TYPE_CHECKING:
    from training.engines.verl.shared import WorkerSettings

log = logging.getLogger(__name__)


class KLScheduleMixin(PPOTrainer):
    """veRL's trainer hooks (any mode) that follow the project's KL schedule (see the module doc)."""

    if TYPE_CHECKING:  # the host class's (SqlAgentTrainer.settings), declared for the type checker

        @property
        def settings(self) -> WorkerSettings: ...

    def on_init_end(self) -> None:
        super().on_init_end()
        self.init_kl_schedule()

    def init_kl_schedule(self) -> None:
        """Read the project's schedule and the KL settings the actor workers started with."""
        from training.algorithm.kl import KLSchedule

        self.kl_schedule = KLSchedule.from_pairs([list(p) for p in self.settings.kl_schedule])
        actor = self.config.actor_rollout_ref.actor
        self._kl_state = (bool(actor.use_kl_loss), float(actor.kl_loss_coef))

    def on_step_begin(self) -> None:
        super().on_step_begin()
        self.apply_kl_schedule(self.global_steps - 1)  # veRL counts steps from 1

    def apply_kl_schedule(self, step: int) -> tuple[bool, float]:
        """Send the actor a loss with this step's beta when it differs from the current one."""
        use_kl, coef = self._kl_state
        beta = self.kl_schedule.beta(step)
        if not use_kl or beta == coef:
            return self._kl_state
        keep_kl = self.kl_schedule.needs_reference(step)
        self.actor_rollout_wg.set_loss_fn(kl_loss_fn(self._actor_config(), beta, keep_kl))
        if not keep_kl:
            self.use_reference_policy = False  # beta is 0 from here on: skip the reference pass
        self._kl_state = (keep_kl, beta)
        log.info("KL schedule: step %d beta %.6g (reference pass %s)", step, beta, "on" if keep_kl else "off")
        return self._kl_state

    def _actor_config(self) -> Any:
        cached = getattr(self, "_cached_actor_config", None)
        if cached is None:
            cached = actor_config_from(self.config)
            self._cached_actor_config = cached
        return cached


def actor_config_from(config: Any, with_model: bool = True) -> Any:
    """The ``ActorConfig`` the actor worker builds at init (model config attached, which
    loads the tokenizer and HF config from the model path)."""
    from verl.utils.config import omega_conf_to_dataclass

    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    if with_model:
        actor.model_config = omega_conf_to_dataclass(config.actor_rollout_ref.model)
    return actor


def kl_loss_fn(actor_config: Any, beta: float, use_kl: bool = True) -> Any:
    """veRL's PPO loss bound to a copy of ``actor_config`` with this KL coefficient."""
    from verl.workers.utils.losses import ppo_loss

    updated = dataclasses.replace(actor_config, kl_loss_coef=float(beta), use_kl_loss=bool(use_kl))
    updated.model_config = getattr(actor_config, "model_config", None)
    return partial(ppo_loss, config=updated)
