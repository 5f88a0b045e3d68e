"""What the veRL driver and the veRL workers share: names, keys, data conversions, settings.

A leaf module (it imports neither veRL nor the driver), so the agent loop, the reward
adapter and the trainer subclass - which run inside Ray workers - and the driver that
builds the config all take their constants from one place.

:class:`WorkerSettings` is the typed form of the ``sqlagent`` block the driver adds to
veRL's config (a namespace veRL does not own). The driver builds it and writes
``to_dict()``; the workers read it back with :meth:`WorkerSettings.from_config`. Its
defaults are the only defaults: nothing on the worker side re-declares them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.types import Example, TrainingSpec

AGENT_LOOP_NAME = "sqlagent"
"""The agent loop's registered name (``agent_name`` of every prompt row)."""
TRAINER_MODE = "sqlagent_sync"
"""The sync trainer's registered name (``trainer.v1.trainer_mode``), the default."""
TRAINER_MODES = {
    "sync": TRAINER_MODE,
    "colocate_async": "sqlagent_colocate_async",
    "separate_async": "sqlagent_separate_async",
}
"""The project's ``trainer.mode`` -> the registered trainer that runs it. veRL's own trainer
of that mode (the key's name) is each one's base, and veRL's ``trainer.v1.<mode>`` section
holds its settings."""
VERSION_SEGMENTS = "weight_versions"
"""Key of a generation call's ``[[tokens, version], ...]`` (which weight version wrote which
of its tokens, in order) in the output's ``extra_fields`` (``async_trainers.VersionedAsyncClient``)."""
VERL_MODE_OF = {name: mode for mode, name in TRAINER_MODES.items()}
"""A registered trainer name -> veRL's mode (``sync`` | ``colocate_async`` | ``separate_async``)."""
PROJECT_NAMESPACE = "sqlagent"
"""The top-level block of the veRL config that holds :class:`WorkerSettings`."""
REWARD_FUNCTION_MODULE = "training.engines.verl.workers.reward_adapter"
REWARD_FUNCTION_NAME = "compute_score"
DATA_SOURCE = "sqlagent"
EPISODE_KEY = "sqlagent"
"""Key of the per-output episode record in ``AgentLoopOutput.extra_fields``."""
REWARD_KEY = "sqlagent_reward"
"""Key of the full per-output reward breakdown in ``AgentLoopOutput.extra_fields``."""
VALIDATION_MARK = "sqlagent_validate"
"""Key the trainer sets in a validation row's ``extra_info`` (veRL does not tell an agent
loop whether it serves validation; the agent runs in inference mode there)."""
VERL_METRICS_FILE = "verl_metrics.jsonl"
"""veRL's own metrics file in the run directory (its ``{"step", "data"}`` records)."""


def plain(value: Any) -> Any:
    """Mappings/sequences (OmegaConf nodes included: DictConfig is a Mapping, ListConfig
    a Sequence) as plain, resolved dicts/lists."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(v) for v in value]
    return value


# ----------------------------------------------------------------------------- examples <-> rows


def example_to_json(example: Example) -> str:
    return json.dumps(dataclasses.asdict(example), ensure_ascii=False)


def example_from_json(text: str) -> Example:
    """Inverse of :func:`example_to_json` (tuples restored)."""
    from agents.types import Example

    data = json.loads(text)
    for key in ("gold_tables", "gold_columns"):
        data[key] = tuple(data.get(key) or ())
    return Example(**data)


def example_to_row(example: Example, index: int) -> dict[str, Any]:
    """One prompt row of veRL's RLHFDataset for one example.

    The chat ``prompt`` is a placeholder (the agent builds the real prompt from the
    example); the example itself travels as JSON in ``extra_info`` so the agent loop in
    the Ray worker can rebuild it exactly.
    """
    return {
        "data_source": DATA_SOURCE,
        "agent_name": AGENT_LOOP_NAME,
        "prompt": [{"role": "user", "content": example.question}],
        "reward_model": {"style": "rule", "ground_truth": example.gold_sql},
        "extra_info": {"index": index, "example_id": example.id, "example": example_to_json(example)},
    }


def example_from_row(extra_info: Mapping[str, Any] | None) -> Example:
    """The example a prompt row stands for (written by :func:`example_to_row`)."""
    if not extra_info or "example" not in extra_info:
        raise ValueError(
            "prompt row has no extra_info.example: write the data with the verl engine's "
            "write_prompt_file (rows for agent_name=sqlagent)"
        )
    return example_from_json(str(extra_info["example"]))


def examples_from_parquet(path: str) -> list[Example]:
    """Every example of a prompt parquet file (the driver's ``data.train_files``)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path, columns=["extra_info"])
    return [example_from_row(info) for info in table.column("extra_info").to_pylist()]


# ----------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class AdvantageSettings:
    """The ``sqlagent.advantage`` block: the ``training.algorithm.advantages`` estimator and options."""

    estimator: str = "grpo"  # "grpo" | "two_track"
    group_by: str = "role"  # "role": one GRPO group per (question, role); "question"
    epsilon: float = 1e-6
    norm_by_std: bool = True
    clamp: float | None = None
    schema_weight: float = 0.25  # lambda of the schema track
    schema_track: str = "schema"

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> AdvantageSettings:
        return cls(**_known(cls, data))


RETURN_UNKEPT = ("none", "varying", "all")
"""``algorithm.dynamic_sampling.return_unkept``: which drawn-but-not-kept questions go back to the pool."""


@dataclass(frozen=True)
class DynamicSampling:
    """The ``sqlagent.dynamic_sampling`` block.

    A group is informative when the std of ``metric`` over its rows is at least
    ``min_std``. ``refill=False`` is the papers' rule (the default): one draw of
    ``B x oversample`` prompts per step, keep up to ``B`` informative groups and
    zero-mask the unfilled slots (no second draw). ``refill=True`` is veRL's
    ``filter_groups``: keep dispatching prompts until ``B`` informative groups are
    finished, at most ``oversample`` batches in flight. ``flagged_positive_as_unknown``:
    a row whose positive execution reward carries a reward-trust flag does not count.
    ``return_unkept`` (one draw only): the questions of groups drawn but not kept go back
    to the backup pool and are drawn first at the next step, as on the local engine -
    ``varying`` those that varied beyond the B kept, ``all`` the zero-variance ones too,
    ``none`` no question.
    """

    enable: bool = False
    metric: str = "exec"
    min_std: float = 1e-6
    refill: bool = False
    oversample: int = 1
    flagged_positive_as_unknown: bool = False
    return_unkept: str = "varying"

    def __post_init__(self) -> None:
        if self.min_std < 0:
            raise ValueError(f"dynamic_sampling.min_std={self.min_std}: must be >= 0 (1e-6 keeps any spread)")
        if int(self.oversample) < 1:
            raise ValueError(f"dynamic_sampling.oversample={self.oversample}: must be a positive integer (K)")
        if self.return_unkept not in RETURN_UNKEPT:
            raise ValueError(
                f"dynamic_sampling.return_unkept={self.return_unkept!r}: choose one of {', '.join(RETURN_UNKEPT)}"
            )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> DynamicSampling:
        data = dict(data or {})
        data.pop("batch_size", None)  # B is veRL's data.train_batch_size; older drivers repeated it here
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class WorkerSettings:
    """What the Ray workers (agent loop, trainer subclass) read from the veRL config.

    Validation rollouts build the agent with ``inference=True`` where the agent accepts
    it (TRUST-SQL's 15-turn inference budget), as the local engine and ``eval.run`` do.
    ``final_dir`` is where the HF weights of the last step go (None: not exported).
    ``few_shot_pool`` is a prompt parquet file whose examples the agent retrieves demonstrations from when it
    accepts ``few_shot_pool`` (ReToolSQL); None means ``data.train_files``.
    """

    agent: str
    agent_options: Mapping[str, Any] = field(default_factory=dict)
    reward: str = ""
    reward_options: Mapping[str, Any] = field(default_factory=dict)
    max_new_tokens_per_turn: int | None = None
    observation_max_tokens: int | None = None
    advantage: AdvantageSettings = field(default_factory=AdvantageSettings)
    kl_schedule: tuple[tuple[int, float], ...] = ((0, 0.0),)
    dynamic_sampling: DynamicSampling = field(default_factory=DynamicSampling)
    run_dir: str | None = None
    final_dir: str | None = None
    exec_metric: str = "ex"
    eval_after: bool = False
    few_shot_pool: str | None = None
    samples_per_step: int = 0  # rollouts per step written to samples.jsonl (the driver sets trainer.samples_per_step)
    max_concurrent_episodes: int | None = (
        None  # live episodes per agent-loop worker (training/engines/verl/checks/memory.py); None: all
    )

    @property
    def schema_track(self) -> str:
        return self.advantage.schema_track

    @property
    def filter_metric(self) -> str | None:
        """The reward component dynamic sampling reads, or None when it is off."""
        return self.dynamic_sampling.metric if self.dynamic_sampling.enable else None

    @functools.cached_property
    def training_spec(self) -> TrainingSpec:
        """What the configured agent's episodes need from the trainer, asked of the agent
        built with ``agent_options`` (its own defaults fill the rest); built once per worker."""
        from agents.registry import training_spec

        return training_spec(self.agent, self.agent_options)

    @property
    def error_turn_mask(self) -> bool:
        """Whether an episode ending in a failed turn trains on that turn only (DualSQL with
        its guardrails on, whether the config says so or the agent's default does)."""
        from agents.types import ERROR_TURN_MASK

        return self.training_spec.needs(ERROR_TURN_MASK)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-like values (they survive OmegaConf and Ray pickling)."""
        return {
            "agent": {"name": self.agent, "options": plain(self.agent_options)},
            "reward": {"name": self.reward, "options": plain(self.reward_options)},
            "rollout": {
                "max_new_tokens_per_turn": self.max_new_tokens_per_turn,
                "observation_max_tokens": self.observation_max_tokens,
            },
            "advantage": dataclasses.asdict(self.advantage),
            "kl_schedule": [[int(a), float(b)] for a, b in self.kl_schedule],
            "dynamic_sampling": dataclasses.asdict(self.dynamic_sampling),
            "run_dir": self.run_dir,
            "final_dir": self.final_dir,
            "exec_metric": self.exec_metric,
            "eval_after": bool(self.eval_after),
            "few_shot_pool": self.few_shot_pool,
            "samples_per_step": int(self.samples_per_step),
            "max_concurrent_episodes": self.max_concurrent_episodes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WorkerSettings:
        """Inverse of :meth:`to_dict`; missing keys take the defaults above."""
        data = plain(data)
        agent, reward = data.get("agent") or {}, data.get("reward") or {}
        if not agent.get("name"):
            raise ValueError(
                f"{PROJECT_NAMESPACE}.agent.name is empty: set agent=<name> "
                "(one of the registered agents: python -m agents list)"
            )
        if not reward.get("name"):
            raise ValueError(f"{PROJECT_NAMESPACE}.reward.name is empty: set reward=<name> (the recipe picks one)")
        rollout = data.get("rollout") or {}
        sampling = dict(data.get("dynamic_sampling") or {})
        if "dynamic_sampling" not in data and data.get("filter_metric"):  # the driver's older spelling
            sampling = {"enable": True, "metric": data["filter_metric"]}
        defaults = cls(agent=agent["name"])
        return cls(
            agent=agent["name"],
            agent_options=agent.get("options") or {},
            reward=reward["name"],
            reward_options=reward.get("options") or {},
            max_new_tokens_per_turn=rollout.get("max_new_tokens_per_turn"),
            observation_max_tokens=rollout.get("observation_max_tokens"),
            advantage=AdvantageSettings.from_mapping(data.get("advantage")),
            kl_schedule=tuple((int(a), float(b)) for a, b in (data.get("kl_schedule") or defaults.kl_schedule)),
            dynamic_sampling=DynamicSampling.from_mapping(sampling),
            run_dir=data.get("run_dir"),
            final_dir=data.get("final_dir"),
            exec_metric=str(data.get("exec_metric") or defaults.exec_metric),
            eval_after=bool(data.get("eval_after", defaults.eval_after)),
            few_shot_pool=data.get("few_shot_pool"),
            samples_per_step=int(data.get("samples_per_step") or defaults.samples_per_step),
            max_concurrent_episodes=data.get("max_concurrent_episodes"),
        )

    @classmethod
    def from_config(cls, config: Any) -> WorkerSettings:
        """The settings inside a veRL config (DictConfig or mapping)."""
        ns = config.get(PROJECT_NAMESPACE) if hasattr(config, "get") else None
        if ns is None:
            raise ValueError(
                f"the veRL config has no '{PROJECT_NAMESPACE}' block: launch through "
                "`python -m training.run engine=verl ...`, which builds it"
            )
        return cls.from_dict(ns)


def _known(cls: type, data: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keys of ``data`` that are fields of dataclass ``cls``; an unknown key is an error."""
    data = dict(data or {})
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"{PROJECT_NAMESPACE}: unknown {cls.__name__} key(s) {unknown}; known: {sorted(names)}")
    return data
