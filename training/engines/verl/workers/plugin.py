"""veRL plugin: found through the ``verl.plugins`` entry point (``sqlagent_rl``).

``import verl`` imports this module in every process, Ray workers included. What veRL looks
up by name is registered when veRL's own registry is imported in that process, not before
(wrapt's post-import hooks): a process that never builds an agent loop or a trainer - the
load balancer, the reward workers, a vLLM server - does not pay the ~1.3 s of CPU that
importing veRL's agent loop, the project's trainers and the designs costs there.

- after ``verl.experimental.agent_loop`` (veRL's agent-loop registry, imported by
  ``AgentLoopWorker``'s module): the agent loop ``sqlagent`` (``agent_loop.SqlAgentLoop``),
  looked up from each row's ``agent_name``, and every design;
- after ``verl.trainer.ppo.v1`` (the trainer registry, imported by ``TaskRunnerV1``): the
  trainers ``sqlagent_sync`` (``sync_trainer.SqlAgentTrainer``),
  ``sqlagent_colocate_async`` and ``sqlagent_separate_async`` (``async_trainers``), looked
  up from ``trainer.v1.trainer_mode``, and every design;
- every design (``agents.designs``, the ``sqlagent_rl.designs`` entry points: the project's
  and any installed outside package's), so its agent, reward, tools and script are
  registered before the first episode asks for them.

A hook runs inside the import that fires it, so the registrations exist as soon as that
import returns (and at once where the module was imported before this plugin). veRL
swallows a failing plugin import (logged at debug level), but not a failing hook: a broken
agent loop or trainer module fails the import of veRL's registry with its own error.
``tests/training/engines/verl/test_plugin.py`` imports ``verl`` in fresh interpreters and
checks both registries, and that a process that only imports ``verl`` loads neither.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

import wrapt

AGENT_LOOP_REGISTRY = "verl.experimental.agent_loop"
TRAINER_REGISTRY = "verl.trainer.ppo.v1"
AGENT_LOOP_MODULE = "training.engines.verl.workers.agent_loop"
SYNC_TRAINER_MODULE = "training.engines.verl.workers.sync_trainer"
ASYNC_TRAINERS_MODULE = "training.engines.verl.workers.async_trainers"

DESIGNS: tuple[str, ...] = ()
"""The designs loaded in this process (filled by the first hook that runs)."""


def load_designs() -> tuple[str, ...]:
    """Every registered design, loaded once per process; a broken one is logged (the first
    registry lookup of it raises its error again) rather than failing veRL's import."""
    global DESIGNS
    if not DESIGNS:
        from agents.designs import list_designs
        from tools.errors import ConfigError

        try:
            DESIGNS = tuple(list_designs())
        except ConfigError as err:
            logging.getLogger(__name__).error("a design failed to load in this worker: %s", err)
    return DESIGNS


def register_agent_loop(_registry: ModuleType | None = None) -> None:
    """The ``sqlagent`` agent loop (its module registers it) and the designs its episodes use."""
    importlib.import_module(AGENT_LOOP_MODULE)
    load_designs()


def register_trainers(_registry: ModuleType | None = None) -> None:
    """The project's sync and async trainers (their modules register them) and the designs."""
    sync_trainer = importlib.import_module(SYNC_TRAINER_MODULE)
    if hasattr(sync_trainer, "SqlAgentTrainerBase"):
        importlib.import_module(ASYNC_TRAINERS_MODULE)
    # else sync_trainer is itself being imported (it imports veRL's trainers first): it
    # registers its trainer when done; async_trainers, which needs it whole, registers the
    # async ones when its importer imports it after (as the tests' harness does).
    load_designs()


wrapt.register_post_import_hook(register_agent_loop, AGENT_LOOP_REGISTRY)
wrapt.register_post_import_hook(register_trainers, TRAINER_REGISTRY)

__all__ = ["DESIGNS", "load_designs", "register_agent_loop", "register_trainers"]
