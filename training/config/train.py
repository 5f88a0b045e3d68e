"""The root of the typed configuration (``TrainConfig``), its conversion from a composed tree,
and the run's own ``data`` and ``trainer`` groups; the other groups live beside it, one idea
per module (``training.config`` lists them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tools.errors import ConfigError
from training.config.algorithm import (
    AlgorithmConfig,
    OptimConfig,
)
from training.config.design import AdvantageConfig, AgentConfig, RewardConfig
from training.config.fields import _f, _need, _type_hints, checked_value, data_kind_names, need_choice
from training.config.hardware import HardwareConfig
from training.config.laptop import LaptopProfile
from training.config.model import EngineConfig, ModelConfig
from training.config.sampling import EvaluationConfig, RolloutConfig
from training.config.search_path import list_recipes
from training.config.stage import StageConfig, SupervisedConfig

# a dataset's execution match: BIRD's set rule | Spider's official one | Spider's comparison on the SQL as written
EX_RULES = ("ex", "spider", "spider_strict")
LOGGERS = ("console", "jsonl", "wandb")
TRAINER_MODES = ("sync", "colocate_async", "separate_async")
STALE_ROLLOUTS = ("drop", "wait")


@dataclass
class DataConfig:
    """``data`` group (written with eval.data): which examples train and evaluate."""

    kind: str = _f(
        "minibird",
        "eval.data.load_examples kind: minibird | bird | spider | spider_syn | spider_dk | spider_realistic | "
        "jsonl (eval.data.KINDS)",
        data_kind_names,
    )
    root: str | None = _f(None, "dataset root; null = the loader's default (minibird builds its own)")
    dsn: str | None = _f(
        None,
        "a PostgreSQL database (postgresql://role@host/db) holding one schema per db_id, or with "
        "#<schema> one schema holding every db_id's tables (BIRD mini-dev's dump), read instead "
        "of the database files beside the questions (tools.db.postgres_backend); null = the files",
    )
    split: str = _f("train", "split the policy trains on")
    eval_split: str = _f("dev", "held-out split for validation and before/after EX")
    drop_failing_gold: bool = _f(True, "skip examples whose gold SQL fails to execute")
    limit: int | None = _f(None, "use at most this many training examples (the first records of the split)")
    offset: int = _f(0, "skip the split's first N records (offset + limit: a part of the split)")
    difficulties: list[str] | None = _f(
        None,
        "keep training examples of these difficulty labels: a dataset's own (simple, moderate, challenging; "
        "easy, medium, hard, extra; complex, highly_complex) or BIRD's scale covering the rest "
        "(eval/data/selection.py LEVELS); null = all",
    )
    mixture: list[dict[str, Any]] = _f(
        [],
        "more training sources appended to this split: [{kind, root, split, limit, offset, difficulties, "
        "drop_failing_gold, name}] (split, drop_failing_gold and difficulties inherited); ids become <name>/<id>",
    )
    train_ids: str | None = _f(
        None,
        "a JSON file of training question ids narrowing the split (the RL filter of stage=sft_rl "
        "writes supervised/rl_filter/questions.json); null = the whole split",
    )
    eval_limit: int | None = _f(None, "evaluate on a fixed subset of this many held-out examples")
    ex_metric: str = _f(
        "ex",
        "the dataset's official execution match, used for the reported EX and by the "
        "EX-based reward groups: ex (BIRD: set of rows) | spider (Spider: multiset, "
        "ordered with ORDER BY, column permutation); data=spider sets spider",
    )

    def __post_init__(self) -> None:
        need_choice("data.kind", self.kind, data_kind_names)
        _need(self.ex_metric in EX_RULES, f"data.ex_metric={self.ex_metric!r}; choose one of {', '.join(EX_RULES)}")
        for key in ("limit", "eval_limit"):
            value = getattr(self, key)
            _need(value is None or value >= 1, f"data.{key}={value}: a positive integer or null")
        from eval.data.selection import training_sources

        training_sources(self)  # offset, difficulties and the mixture's entries, refused by name

    def check_held_out(self) -> None:
        """A run with a training split (training; a model's evaluation, whose few-shot pool
        is that split) must validate on another split. Scoring a predictions file has none,
        so ``eval.run predictions=...`` builds a ``DataConfig`` without this check."""
        _need(
            self.split != self.eval_split or self.kind == "jsonl",
            f"data.split and data.eval_split are both {self.split!r}: validation must be held out",
        )


@dataclass
class TrainerConfig:
    """Steps, checkpoints, validation and logging."""

    total_steps: int | None = _f(
        None, "optimizer steps; null = total_steps_by_backbone's entry for the backbone, else one epoch"
    )
    total_steps_by_backbone: dict[str, int] = _f(
        {},
        "run length per backbone (hub name -> steps; a directory named as the hub name's last part "
        "matches too) when total_steps is null; the backbone is model.path, else gpu_backbone "
        "(training/config/backbone_rules.py)",
    )
    save_every: int = _f(10, "checkpoint every N steps (and at the end)")
    keep_checkpoints: int = _f(2, "how many step checkpoints to keep")
    val_every: int = _f(0, "greedy validation EX every N steps; 0 = only before and after")
    eval_before_after: bool = _f(True, "greedy EX on the held-out subset before and after training")
    eval_test_suite: bool = _f(True, "held-out evaluations also report ex_test_suite (EX on the test suite)")
    project: str = _f("sqlagent-rl", "wandb project")
    save_weights: bool = _f(True, "write model weights into checkpoints")
    shared_run_dir_check: bool = _f(True, "engine=verl with nnodes > 1: refuse a run_dir only this node sees")
    samples_per_step: int = _f(16, "rollouts per step written to samples.jsonl with their masks (0 = none)")
    mode: str = _f(
        "sync",
        "engine=verl: sync | colocate_async | separate_async, veRL's trainer the run uses; the local engine "
        "runs sync only (docs/engines.md 'Sync or async training')",
        TRAINER_MODES,
    )
    staleness: int = _f(
        1,
        "async modes: a rollout trains at most this many weight versions behind the policy it updates "
        "(veRL's trainer.v1.sampler.max_off_policy_threshold = staleness + 1)",
    )
    stale_rollouts: str = _f(
        "drop",
        "async modes, a rollout past trainer.staleness: drop (its prompt is drawn again) | wait (the step "
        "waits for in-flight rollouts about to pass it; none is dropped)",
        STALE_ROLLOUTS,
    )
    warmup_batches: float = _f(1.0, "async modes: batches of prompts generating ahead of the step that trains them")
    async_correction: str | None = _f(
        "token",
        "async modes with algorithm.rollout_correction off: the IS level that corrects the weight-version lag, "
        "token | sequence | null (none); a recipe's own rollout_correction wins",
    )
    rollout_gpus: int = _f(
        0, "separate_async: GPUs per node of the standalone rollout pool (veRL's rollout.n_gpus_per_node)"
    )
    rollout_nodes: int = _f(1, "separate_async: nodes of the standalone rollout pool (veRL's rollout.nnodes)")

    def __post_init__(self) -> None:
        _need(
            self.total_steps is None or self.total_steps >= 1,
            f"trainer.total_steps={self.total_steps}: a positive integer or null",
        )
        _need(self.save_every >= 1, f"trainer.save_every={self.save_every}: must be >= 1")
        _need(self.keep_checkpoints >= 1, f"trainer.keep_checkpoints={self.keep_checkpoints}: >= 1")
        _need(self.val_every >= 0, f"trainer.val_every={self.val_every}: 0 or positive")
        _need(self.samples_per_step >= 0, f"trainer.samples_per_step={self.samples_per_step}: 0 or positive")
        need_choice("trainer.mode", self.mode, TRAINER_MODES)
        need_choice("trainer.stale_rollouts", self.stale_rollouts, STALE_ROLLOUTS)
        _need(self.staleness >= 0, f"trainer.staleness={self.staleness}: 0 or positive (weight versions)")
        _need(self.warmup_batches >= 0, f"trainer.warmup_batches={self.warmup_batches}: 0 or positive")
        _need(
            self.async_correction in (None, "token", "sequence"),
            f"trainer.async_correction={self.async_correction!r}; choose token, sequence or null",
        )
        _need(self.rollout_gpus >= 0, f"trainer.rollout_gpus={self.rollout_gpus}: 0 or positive")
        _need(self.rollout_nodes >= 1, f"trainer.rollout_nodes={self.rollout_nodes}: 1 or more")


@dataclass
class TrainConfig:
    """The whole project configuration (``recipes/config.yaml``)."""

    recipe_name: str | None = _f(
        None, "set by recipe=<name>: a registered design's recipe (training.config.search_path.list_recipes)"
    )
    seed: int = _f(0, "seeds python, numpy and torch")
    dry_run: bool = _f(False, "print the effective configuration and exit")
    resume: bool | str = _f(
        "never",
        "never | auto | must: what an existing run_dir means (training/runs/resume_policy.py); "
        "true = auto, false = never",
    )
    fresh: bool = _f(False, "delete run_dir's checkpoints and start over")
    run_dir: str = _f("runs/default", "checkpoints, metrics.jsonl and the wandb run go here")
    logger: list[str] = _f(["console", "wandb"], "console | jsonl | wandb (metrics.jsonl is always written)")
    gpu_backbone: str | None = _f(
        None,
        "hub name engine=verl trains when model.path is null: the recipe's paper "
        "backbone (training/engines/verl/checks/backbones.py); the local engine keeps the embedded model. "
        "Top-level, not in the model group, so model=<group> always wins whole",
    )
    agent: AgentConfig = field(default_factory=AgentConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)  # recipes/hardware/, training/config/hardware.py
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    stage: StageConfig = field(default_factory=StageConfig)
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    evaluation: EvaluationConfig = field(default_factory=EvaluationConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    laptop: LaptopProfile = field(default_factory=LaptopProfile)
    verl: dict[str, Any] = _f({}, "veRL ppo_trainer overrides for engine=verl (dotted paths allowed)")
    sweep: str | None = _f(None, "the sweep this run belongs to (its wandb group); set by a Hydra multirun")
    ablation: dict[str, Any] = _f({}, "swept key -> this run's value (flat); set by a Hydra multirun")

    def __post_init__(self) -> None:
        self.data.check_held_out()
        recipes = list_recipes()
        _need(self.recipe_name is not None, f"no recipe chosen; run with recipe=<name>, one of: {', '.join(recipes)}")
        _need(self.recipe_name in recipes, f"unknown recipe {self.recipe_name!r}; available: {', '.join(recipes)}")
        bad = [name for name in self.logger if name not in LOGGERS]
        _need(not bad, f"logger={self.logger}: unknown {bad}; choose from {', '.join(LOGGERS)}")
        from training.runs.resume_policy import resume_mode

        self.resume = resume_mode(self.resume)
        _need(not (self.resume != "never" and self.fresh), f"resume={self.resume} and fresh=true contradict; pick one")
        self._resolve_backbone_settings()

    def _resolve_backbone_settings(self) -> None:
        """The run length and the SFT learning rate that follow the backbone
        (``training/config/backbone_rules.py``): a value the recipe or the command line sets wins."""
        from training.config.backbone_rules import sft_learning_rate, steps_for_backbone

        if self.trainer.total_steps is None:
            backbone = self.model.path or self.gpu_backbone
            self.trainer.total_steps = steps_for_backbone(self.trainer.total_steps_by_backbone, backbone)
        if self.supervised.lr is None:
            self.supervised.lr, _ = sft_learning_rate(self.model.path, self.model.lora.enabled)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Convert a composed (resolved) config tree, rejecting unknown keys by name."""
        return _build(cls, dict(data), "")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


_OPTIONS_GROUPS = {AgentConfig: "options", RewardConfig: "options"}


def _build(cls: type, data: dict[str, Any], prefix: str) -> Any:
    """Build dataclass ``cls`` from ``data``; nested dataclasses recurse."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields or (cls in _OPTIONS_GROUPS and key == _OPTIONS_GROUPS[cls]):
            if cls in _OPTIONS_GROUPS:
                extra[key] = value
                continue
            raise ConfigError(f"unknown config key {prefix}{key!r}; known keys here: {', '.join(sorted(fields))}")
        hint = _type_hints(cls)[key]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"{prefix}{key}={value!r}: expected a group of keys "
                    f"({', '.join(f.name for f in dataclasses.fields(hint))}), e.g. {prefix}{key}.<key>=<value>"
                )
            kwargs[key] = _build(hint, dict(value), f"{prefix}{key}.")
        else:
            kwargs[key] = checked_value(f"{prefix}{key}", value, hint, fields[key].metadata.get("choices"))
    if cls in _OPTIONS_GROUPS:
        kwargs[_OPTIONS_GROUPS[cls]] = extra
    try:
        return cls(**kwargs)
    except TypeError as err:
        raise ConfigError(f"bad config under {prefix or 'root'}: {err}") from err


def to_yaml_tree(cfg: TrainConfig) -> dict[str, Any]:
    """The config as the YAML layout (agent/reward options flattened back into their group)."""
    data = cfg.to_dict()
    data["agent"] = {"name": cfg.agent.name, **cfg.agent.options}
    data["reward"] = {"name": cfg.reward.name, "exec_metric": cfg.reward.exec_metric, **cfg.reward.options}
    return data
