"""veRL plugin: found through the ``verl.plugins`` entry point (``sqlagent_rl``).

``import verl`` imports this module in every process, Ray workers included, so the
registrations veRL looks up by name in those processes exist there:

- the agent loop ``sqlagent`` (``agent_loop.SqlAgentLoop``), looked up by
  ``AgentLoopWorker`` from each row's ``agent_name``;
- the trainers ``sqlagent_sync`` (``sync_trainer.SqlAgentTrainer``),
  ``sqlagent_colocate_async`` and ``sqlagent_separate_async`` (``async_trainers``), looked
  up by ``TaskRunnerV1`` from ``trainer.v1.trainer_mode``;
- every design (``agents.designs``, the ``sqlagent_rl.designs`` entry points: the project's
  and any installed outside package's), so its agent, reward, tools and script are
  registered in the worker before the first episode asks for them.

veRL swallows plugin import errors (logged at debug level), so a broken import here
would only show up as "agent loop not registered"; ``tests/training/engines/verl`` imports
``verl`` in a fresh interpreter and checks both registries.
"""

from __future__ import annotations

import logging

from agents.designs import list_designs
from tools.errors import ConfigError
from training.engines.verl.workers import agent_loop as verl_agent_loop
from training.engines.verl.workers import async_trainers as verl_async_trainers
from training.engines.verl.workers import sync_trainer as verl_trainer

AGENT_LOOP_CLASS = verl_agent_loop.SqlAgentLoop
TRAINER_CLASS = verl_trainer.SqlAgentTrainer
ASYNC_TRAINER_CLASSES = (verl_async_trainers.SqlAgentColocateAsync, verl_async_trainers.SqlAgentSeparateAsync)

try:
    DESIGNS = tuple(list_designs())
except ConfigError as err:  # veRL would hide it; the first registry lookup raises it again
    logging.getLogger(__name__).error("a design failed to load in this worker: %s", err)
    DESIGNS = ()

__all__ = ["AGENT_LOOP_CLASS", "ASYNC_TRAINER_CLASSES", "DESIGNS", "TRAINER_CLASS"]
