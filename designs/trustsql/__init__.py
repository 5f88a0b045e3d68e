"""TRUST-SQL as one plugin: no schema in the prompt, four actions with a propose checkpoint,
phase-aware two-track GRPO.

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
from designs.trustsql import agent, demonstration, reward, tools  # noqa: F401  (register the design's pieces)

HERE = Path(__file__).resolve().parent

design = Design(
    name="trustsql",
    title="TRUST-SQL",
    paper="TRUST-SQL: Tool-Integrated Multi-Turn Reinforcement Learning for Text-to-SQL over Unknown Schemas",
    arxiv="",
    agent="trustsql",
    reward="trustsql",
    recipes=HERE / "recipes",
    document=HERE / "README.md",
    linked_schema=EpisodeSchema("agent"),  # the last valid proposed schema (the Propose checkpoint, §3.1)
    supervised_chain="annotate",
)
