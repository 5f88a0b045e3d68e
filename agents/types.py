"""Shared types: the contracts between tools, rex, agents, eval.data and training.

Everything here is plain data (no torch, no veRL), so every package can import it.
See docs/architecture.md "Contracts". Imports flow one way:
tools -> rex -> agents -> eval.data -> training -> eval.run / eval.compare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:  # tools.Backend is the runtime type of every ``db`` argument
    from tools import Backend

Message = dict[str, Any]
"""A chat message: ``{"role": "system"|"user"|"assistant"|"tool", "content": str}``."""

Difficulty = str
"""BIRD labels ``simple`` / ``moderate`` / ``challenging``; ``unknown`` when absent."""

DIFFICULTY_ORDER: tuple[Difficulty, ...] = ("simple", "moderate", "challenging")
"""BIRD's labels, easiest first: the one order every table and report lists them in."""


def difficulty_order(labels: Sequence[str]) -> list[str]:
    """The distinct ``labels``: BIRD's order first, then any other labels alphabetically.

    >>> difficulty_order(["unknown", "challenging", "simple", "simple"])
    ['simple', 'challenging', 'unknown']
    """
    known = [d for d in DIFFICULTY_ORDER if d in labels]
    return known + sorted(set(labels) - set(known))


@dataclass(frozen=True)
class Example:
    """One benchmark question, produced by the loaders in ``eval.data``; immutable.

    ``gold_tables`` are lower-cased table names, ``gold_columns`` lower-cased
    ``"table.column"`` strings, both extracted from ``gold_sql`` with sqlglot against the
    database schema (``*`` expands to every column of the tables it covers).
    """

    id: str
    db_id: str
    db_path: str
    question: str
    evidence: str = ""
    gold_sql: str = ""
    difficulty: Difficulty = "unknown"
    gold_tables: tuple[str, ...] = ()
    gold_columns: tuple[str, ...] = ()
    split: str = ""


@dataclass(frozen=True)
class ToolCall:
    """A tool call parsed from model text (hermes ``<tool_call>{json}</tool_call>``)."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class SchemaSelection:
    """A set of tables and ``"table.column"`` names, lower-cased.

    Used for TRUST-SQL's proposed schema, DualSQL's linked schema and ReToolSQL's
    ``<relevant_tables>`` / ``<relevant_columns>`` annotations.
    """

    tables: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    joins: tuple[str, ...] = ()


EndReason = Literal[
    "answer",  # the agent produced its final answer / finished its role
    "turn_budget",  # max turns reached without an answer
    "format_cutoff",  # a guardrail failed and the design cuts the rollout at once
    "context_limit",  # the rollout driver ran out of context tokens
    "response_limit",  # the rollout driver ran out of response tokens
]


@dataclass(frozen=True)
class TurnRecord:
    """What happened in one assistant turn (kept in ``EpisodeResult.turns``)."""

    index: int
    phase: str  # the turn's action, e.g. "tool_call", "final_answer", "explore_schema", "answer"
    text_chars: int
    format_ok: bool
    format_reason: str = ""  # why the turn failed the format check ("" when ok)
    tool_name: str | None = None
    tool_arguments: Mapping[str, Any] | None = None
    tool_outcome: str | None = None  # "ok" or a ToolError kind ("syntax", "timeout", ...)
    text: str = ""  # the assistant text of the turn as kept (Think2SQL's format reward reads it)


@dataclass(frozen=True)
class Step:
    """What ``Episode.step`` returns for one assistant turn.

    ``observations`` are the messages to append after the assistant turn (role ``tool``;
    the rollout driver re-roles them as ``user`` + ``<tool_response>`` when the chat
    template cannot render ``tool``). ``text`` is the assistant text the episode kept: an
    agent may cut a turn (DualSQL cuts after a closing code fence); the driver then keeps
    only the tokens of that prefix.
    """

    observations: tuple[Message, ...]
    done: bool
    phase: str
    format_ok: bool
    format_reason: str = ""
    text: str | None = None


@dataclass
class EpisodeResult:
    """The outcome of one episode, read by rewards, masks and evaluation."""

    role: str
    final_sql: str | None
    schema: SchemaSelection | None  # proposed / linked / annotated schema, if any
    turns: list[TurnRecord]
    end_reason: EndReason
    flags: dict[str, Any] = field(default_factory=dict)  # e.g. {"full_schema_fallback": True}

    @property
    def used_tool_successfully(self) -> bool:
        return any(t.tool_name and t.tool_outcome == "ok" for t in self.turns)

    @property
    def all_turns_valid(self) -> bool:
        return bool(self.turns) and all(t.format_ok for t in self.turns)


class Episode(Protocol):
    """One agent conversation (skyrl-gym's environment contract: one object per episode).

    ``step`` runs tools synchronously and never raises on model text; async callers run
    it in a thread. Only ``step`` and ``end`` mutate the episode.
    """

    role: str
    messages: list[Message]  # the initial chat messages (system + user)
    tool_schemas: list[dict[str, Any]]  # OpenAI function schemas of the tools it offers
    stop: tuple[str, ...]  # strings that end a turn (EOS is implied)
    max_turns: int

    def step(self, assistant_text: str) -> Step: ...

    def end(self, reason: EndReason) -> None:
        """Called by the rollout driver when it stops the episode (limits)."""

    def result(self) -> EpisodeResult: ...


ERROR_TURN_MASK = "error_turn"
"""Mask name: when an episode ends in a failed turn, the loss on its earlier turns is masked,
so the update concentrates on the error turn (DualSQL's guardrails end an episode at its
first bad turn; designs/dualsql/README.md)."""
GROUP_KEYS = ("role", "question")
SCHEMA_TRACK = "schema"
"""Track name: TRUST-SQL's schema track, trained on the turns up to its proposed schema."""


def span_flag(track: str) -> str:
    """The ``EpisodeResult.flags`` key where an episode records the last turn of track
    ``track``'s token span (-1: the episode adds nothing to that track). An agent that names
    a track in ``TrainingSpec.tracks`` records it; the masks read it (``training.algorithm.masks``).

    >>> span_flag("schema")
    'schema_span_turn'
    """
    return f"{track}_span_turn"


@dataclass(frozen=True)
class TrainingSpec:
    """What an agent's episodes need from a trainer. Both engines ask the agent for it
    (``agent.training_spec()``) instead of guessing from its option names, so it follows
    the agent's *effective* options, its own defaults included.

    ``roles``: the episode roles one example produces, in order (``agent``; DualSQL:
    ``linker`` then ``generator``). ``group_key``: how the agent's trajectories form GRPO
    groups when ``advantage.group_by`` does not say otherwise - ``role`` (one group per
    question and role) or ``question``. ``masks``: extra loss masks by name
    (``ERROR_TURN_MASK``). ``tracks``: reward tracks beyond ``full`` whose token span the
    episodes mark, each in ``result.flags[span_flag(track)]`` (TRUST-SQL's ``schema``: the
    turns up to the proposed schema).

    >>> TrainingSpec(roles=("linker", "generator"), masks=(ERROR_TURN_MASK,)).needs(ERROR_TURN_MASK)
    True
    """

    roles: tuple[str, ...] = ("agent",)
    group_key: str = "role"
    masks: tuple[str, ...] = ()
    tracks: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.roles:
            raise ValueError("TrainingSpec.roles is empty: name the role(s) of the agent's episodes, e.g. ('agent',)")
        if self.group_key not in GROUP_KEYS:
            raise ValueError(f"TrainingSpec.group_key={self.group_key!r}; use one of {', '.join(GROUP_KEYS)}")

    def needs(self, mask: str) -> bool:
        """Whether the agent's episodes need the loss mask named ``mask``."""
        return mask in self.masks


class Agent(Protocol):
    """A registered design. ``start`` returns the next episode for the example, or None.

    ``previous`` holds the results of this example's earlier episodes (DualSQL: the
    linker's result, from which the generator episode is built). ``training_spec`` says
    what its episodes need from a trainer (roles, group key, masks, tracks).
    """

    name: str

    def start(self, example: Example, db: Backend, previous: Sequence[EpisodeResult] = ()) -> Episode | None: ...

    def training_spec(self) -> TrainingSpec: ...


@dataclass
class Trajectory:
    """The token-level record of one episode, made by ``training.rollout``.

    All per-token lists have ``len(response_ids)`` entries.
    ``response_mask``: 1 for policy (generated) tokens, 0 for observation / template tokens.
    ``turn_index``: index of the assistant turn a token belongs to; observation tokens
    carry the index of the turn whose tool call produced them.
    ``logprobs``: sampling log-probs of policy tokens (0.0 elsewhere), when the generate
    function returned them.
    """

    example_id: str
    role: str
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    turn_index: list[int]
    result: EpisodeResult
    logprobs: list[float] | None = None
    group_id: str = ""  # GRPO group: example id + role ("q17:linker")
    sample_index: int = 0  # index within the group
    messages: list[Message] = field(default_factory=list)
    """The conversation as the chat template rendered it (prompt messages, assistant turns
    as generated, observations in the roles the template accepts): rendering it reproduces
    ``prompt_ids + response_ids`` when the episode ended at a turn boundary."""

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.response_mask)


@dataclass(frozen=True)
class RewardBreakdown:
    """A reward with every named component logged.

    ``components`` always holds ``exec`` (execution score under the configured metric, in
    [0, 1]); ``tracks`` always holds ``full`` (= total unless the design has more tracks,
    e.g. TRUST-SQL's ``schema``). ``error`` says why a reward could not be computed; such
    rewards are logged and counted, never silently 0. ``flags``: the reward-trust flags of
    the execution score (``rex.trust.FLAGS``, from ``ExecScore.flags``).
    """

    total: float
    components: Mapping[str, float]
    tracks: Mapping[str, float]
    error: str | None = None
    flags: tuple[str, ...] = ()


RewardFn = Callable[[Trajectory, Example, "Backend"], RewardBreakdown]
"""``get_reward(name, **options)`` returns one of these."""


def final_sql(trajectories: Sequence[Trajectory]) -> str | None:
    """A request's prediction: the last of its episodes' final SQL that exists (DualSQL's
    linker episode has none, its generator's is the answer); None when no episode has one."""
    sqls = [t.result.final_sql for t in trajectories if t.result.final_sql]
    return sqls[-1] if sqls else None
