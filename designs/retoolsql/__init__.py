"""ReToolSQL as one plugin: one agent, verify-first tool use over M-Schema and BM25 few-shot
prompts, a composite reward (max 3.8), GRPO with dynamic sampling and an annealed KL.

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
from designs.retoolsql import agent, demonstration, reward, tools  # noqa: F401  (register the design's pieces)

HERE = Path(__file__).resolve().parent

design = Design(
    name="retoolsql",
    title="ReToolSQL",
    paper="ReToolSQL: Agentic Reinforcement Learning for Robust Text-to-SQL",
    arxiv="",
    agent="retoolsql",
    reward="composite",
    recipes=HERE / "recipes",
    document=HERE / "README.md",
    linked_schema=EpisodeSchema("agent"),  # the final answer's <relevant_tables> / <relevant_columns>
    supervised_chain="mine",
)
