"""The token-in/token-out rollout driver: agent conversations → token-level trajectories.

One ``EpisodeRunner`` (``episode``) drives one episode: ``next_request()`` gives the token
ids to continue and the sampling parameters, ``feed(output)`` takes what the model
generated, steps the agent and appends the observation tokens. One ``EpisodeScheduler``
(``scheduler``) runs every request's episodes; its front ends only decide how answers come:
``run_episodes`` (sync, one batched ``generate`` call per round - the local engine and
``eval.run``), ``run_episode_async`` (one request, an async generate - the veRL agent
loop), the text front ends of ``training.generation`` (teachers, endpoints) and the
demonstration replay.

The pieces: ``types`` (sampling parameters, outputs, limits), ``chat_segments`` (the
chat-template segments), ``episode`` (one episode and the token rules), ``scheduler`` and
``setup`` (the driver's parameters from the configured numbers). Their public names import
from here, the driver's one entry point (docs/INTERFACES.md).
"""

from __future__ import annotations

from agents.types import Trajectory
from training.rollout.driver_types import (
    AsyncGenerateFn,
    CachingGenerate,
    GenerateFn,
    GenerateWrapper,
    GenerationOutput,
    Request,
    RolloutLimits,
    SamplingParams,
)
from training.rollout.scheduler import EpisodeScheduler, EpisodeSlot, run_episode_async, run_episodes

__all__ = [
    "AsyncGenerateFn",
    "CachingGenerate",
    "EpisodeScheduler",
    "EpisodeSlot",
    "GenerateFn",
    "GenerateWrapper",
    "GenerationOutput",
    "Request",
    "RolloutLimits",
    "SamplingParams",
    "run_episode_async",
    "run_episodes",
    "token_phases",
]


def token_phases(trajectory: Trajectory) -> list[str]:
    """The phase of every response token (its turn's phase; "" past the last record)."""
    phases = [turn.phase for turn in trajectory.result.turns]
    return [phases[i] if 0 <= i < len(phases) else "" for i in trajectory.turn_index]
