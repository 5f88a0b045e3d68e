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
        self.questions = fixed_subset(trainer.train_examples, self.sup.questions, self.cfg.seed)
        self.by_id = {ex.id: ex for ex in trainer.train_examples}
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
        }

    def stage(self, name: str, fingerprint: dict[str, Any]) -> StageDir:
        return StageDir(self.root / name, fingerprint, self.say)

    def root_stage(self, name: str) -> StageDir:
        return StageDir(self.root / name, {}, self.say)
