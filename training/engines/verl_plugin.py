"""veRL plugin: found through the ``verl.plugins`` entry point (``sqlagent_rl``).

``import verl`` imports this module in every process, Ray workers included, so the
registrations veRL looks up by name in those processes exist there:

- the agent loop ``sqlagent`` (``verl_agent_loop.SqlAgentLoop``), looked up by
  ``AgentLoopWorker`` from each row's ``agent_name``;
- the trainer ``sqlagent_sync`` (``verl_trainer.SqlAgentTrainer``), looked up by
  ``TaskRunnerV1`` from ``trainer.v1.trainer_mode``.

veRL swallows plugin import errors (logged at debug level), so a broken import here
would only show up as "agent loop not registered"; ``tests/training/verl`` imports
``verl`` in a fresh interpreter and checks both registries.
"""

from __future__ import annotations

from training.engines import verl_agent_loop, verl_trainer

AGENT_LOOP_CLASS = verl_agent_loop.SqlAgentLoop
TRAINER_CLASS = verl_trainer.SqlAgentTrainer

__all__ = ["AGENT_LOOP_CLASS", "TRAINER_CLASS"]
