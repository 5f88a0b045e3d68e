"""Plugin agents: protocol state machines (no torch, no veRL) and the design registry.

``make_agent(name, **options)`` builds one; ``agent.start(example, db, previous)`` gives
the next ``Episode``. The designs (``designs/<name>/`` and any installed package) register
their agents through the ``sqlagent_rl.designs`` entry point; a lookup loads them.
"""

from agents.designs import Design, design_of_agent, get_design, list_designs, register_design
from agents.registry import (
    AGENTS,
    agent_options,
    get_agent,
    list_agents,
    make_agent,
    register_agent,
    runtime_options,
    training_spec,
)

__all__ = [
    "AGENTS",
    "Design",
    "agent_options",
    "design_of_agent",
    "get_agent",
    "get_design",
    "list_agents",
    "list_designs",
    "make_agent",
    "register_agent",
    "register_design",
    "runtime_options",
    "training_spec",
]
