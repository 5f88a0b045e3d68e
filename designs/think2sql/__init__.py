"""Think2SQL as one plugin: one turn of <think> then <answer> over the gold tables' schema, a
dense QATCH (or EX) reward with format and tag-count terms, plain GRPO.

Everything that is this design's lives in this folder: the agent (``agent.py``) and its
prompts (``prompts/``), the executor tool and preset (``tools.py``), the reward
(``reward.py``), the warm start's demonstration script (``demonstration.py``), the Hydra
recipe files (``recipes/``) and the design's page (``README.md``: the paper's settings, the
choices the paper leaves open and the departures from it). The project registers it through
the ``sqlagent_rl.designs`` entry point, exactly as an outside package registers its own.
"""

from __future__ import annotations

from pathlib import Path

from agents.designs import Design
from designs.think2sql import agent, demonstration, reward  # noqa: F401  (register the design's pieces)

HERE = Path(__file__).resolve().parent

design = Design(
    name="think2sql",
    title="Think2SQL",
    paper="Think2SQL: Reinforce LLM Reasoning Capabilities for Text2SQL",
    arxiv="2504.15077",
    agent="think2sql",
    reward="think2sql",
    recipes=HERE / "recipes",
    document=HERE / "README.md",
    linked_schema=None,  # no linking step: the prompt gives the gold tables' schema, no figures are reported
    supervised_chain="annotate",
)
