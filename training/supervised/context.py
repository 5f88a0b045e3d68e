"""What the stages of one supervised run share: the trainer (policy, agent, data, limits),
the chain it follows, the question subset, and the fingerprinted stage directories."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from training.supervised import collect as col
from training.supervised.store import StageDir, digest


def chain_of(cfg: Any) -> str:
    """``supervised.chain``; ``auto`` is the chain of the design whose agent runs (``annotate``
    for an agent no design names)."""
    from agents.designs import design_of_agent

    sup = cfg.supervised
    if sup.chain != "auto":
        return sup.chain
    design = design_of_agent(cfg.agent.name)
    return design.supervised_chain if design is not None else "annotate"


def supervised_examples(trainer: Any, say: Any) -> list[Any]:
    """The questions the SFT stages draw from: the trainer's inputs' ``supervised_examples``
    when given (tests), else ``supervised.data``'s training sources, else the RL data's
    (``data``: both stages share one dataset)."""
    given = getattr(trainer.inputs, "supervised_examples", None)
    if given is not None:
        return list(given)
    data = trainer.cfg.supervised.data
    if data is None:
        return list(trainer.train_examples)
    from eval.data import KINDS, load_from_config
    from tools.errors import ConfigError

    if not data.get("root") and KINDS.get(data["kind"]).default_root is None:
        raise ConfigError(
            f"supervised.data names kind {data.get('kind')!r} without a root: set supervised.data.root=PATH "
            "(the dataset of the SFT questions; TRUST-SQL's recipe names SynSQL-2.5M, App. A.2), or "
            "supervised.data=null to draw them from data"
        )
    examples = load_from_config(data, "train")
    if not examples:
        raise ConfigError(f"supervised.data ({data.get('kind')}) has no training examples; check its root / limit")
    say(
        f"[data] {len(examples)} SFT questions from supervised.data ({data.get('kind')}/{data.get('split', 'train')}), "
        f"apart from the {len(trainer.train_examples)} RL questions of data"
    )
    return examples


class ChainContext:
    """The trainer's policy, agent, data and limits, shared by every stage of the chain."""

    def __init__(self, trainer: Any, root: Path, say: Any) -> None:
        from rex import ExecScorer
        from training.rollout.setup import fixed_subset

        self.t, self.root, self.say = trainer, root, say
        self.cfg = trainer.cfg
        self.sup = self.cfg.supervised
        self.chain = chain_of(self.cfg)
        self.privileged = self.sup.privileged if self.sup.privileged is not None else self.chain == "mine"
        self.supervised_examples = supervised_examples(trainer, say)
        self.questions = fixed_subset(self.supervised_examples, self.sup.questions, self.cfg.seed)
        self.by_id = {ex.id: ex for ex in self.supervised_examples}
        self.correct = col.execution_match(ExecScorer())
        self.chunk = max(1, self.cfg.algorithm.batch_size)
        self.sft_dir: Path | None = None

    # ------------------------------------------------------------------ fingerprints
    def base_fingerprint(self) -> dict[str, Any]:
        c = self.cfg
        return {
            "model": self.t.model_source,
            "agent": c.agent.name,
            "agent_options": dict(c.agent.options),
            "data": [c.data.kind, c.data.root, c.data.split, c.data.limit],
            "seed": c.seed,
            "limits": dataclasses.asdict(self.t.limits),
            "questions": digest([ex.id for ex in self.questions]),
        } | ({"supervised_data": c.supervised.data} if c.supervised.data is not None else {})

    def stage(self, name: str, fingerprint: dict[str, Any]) -> StageDir:
        return StageDir(self.root / name, fingerprint, self.say)

    def root_stage(self, name: str) -> StageDir:
        return StageDir(self.root / name, {}, self.say)
