"""DualSQL as one plugin: a schema linker and a SQL generator on one set of weights, rollout
guardrails, a REX-based reward and per-role GRPO groups.

Everything that is this design's lives in this folder: the agent (``agent.py``) and its
prompts (``prompts/``), the executor tool and preset (``tools.py``), the reward
(``reward.py``), the warm start's demonstration script (``demonstration.py``), the Hydra
recipe files (``recipes/``) and the design's page (``README.md``: the paper's settings, the
choices the paper leaves open and the departures from it). The project registers it through
the ``sqlagent_rl.designs`` entry point, exactly as an outside package registers its own.
"""

from __future__ import annotations

from pathlib import Path

from agents.designs import Design, EpisodeSchema
from designs.dualsql import agent, demonstration, reward, tools  # noqa: F401  (register the design's pieces)

HERE = Path(__file__).resolve().parent

design = Design(
    name="dualsql",
    title="DualSQL",
    paper="DualSQL: Text-to-SQL with Multi-Agent Reinforcement Learning",
    arxiv="2609.18135",
    agent="dualsql",
    reward="dualsql",
    recipes=HERE / "recipes",
    document=HERE / "README.md",
    linked_schema=EpisodeSchema("linker"),  # the linker's linked schema (§3.2), scored as in the paper's Table 2
    supervised_chain="mine",
)
