"""Plugin agents: the four designs as pure protocol state machines (no torch, no veRL).

``make_agent(name, **options)`` builds one; ``agent.start(example, db, previous)`` gives
the next ``Episode``. Importing this package registers the four designs.
"""

from agents import dualsql, retoolsql, think2sql, trustsql  # noqa: E402,F401  (registers the designs)
from agents.registry import AGENTS, agent_options, get_agent, list_agents, make_agent, register_agent, training_spec

__all__ = ["AGENTS", "agent_options", "get_agent", "list_agents", "make_agent", "register_agent", "training_spec"]
