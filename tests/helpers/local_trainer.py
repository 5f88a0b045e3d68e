"""A tiny ``LocalTrainer`` on the schools world (tests/helpers/schools.py): the recipe's
config shrunk to a few seconds a step, the tiny model and tokenizer, a scripted policy;
the ``examples`` fixture; weight snapshots and the buffers of a whole run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.schools import ScriptedPolicy, make_db, school_examples
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.config import TrainConfig, compose_tree
from training.engines.local.trainer import LocalTrainer, TrainerInputs


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    """The four schools questions on a fresh database (tests/training/conftest.py offers it)."""
    return school_examples(make_db(tmp_path_factory.mktemp("db") / "schools.sqlite"))


def config(recipe: str, run_dir: Path, *extra: str) -> TrainConfig:
    overrides = [
        f"recipe={recipe}",
        "engine=local",
        "engine.device=cpu",
        "algorithm.group_size=4",
        "algorithm.batch_size=2",
        "algorithm.dynamic_sampling.oversample=2",
        "trainer.total_steps=1",
        "trainer.eval_before_after=false",
        "optim.weight_decay=0.0",
        "optim.warmup_ratio=0.0",
        "optim.lr=1e-3",
        "optim.micro_batch_size=3",
        "logger=[]",
        f"run_dir={run_dir}",
        "trainer.save_every=1",
        "rollout.max_new_tokens=200",
        "rollout.max_response_tokens=3000",
        "rollout.max_prompt_tokens=6000",
        "data.eval_limit=2",
        *extra,
    ]
    raw = compose_tree("config", overrides)
    raw.pop("hydra", None)
    turns = 4 if recipe == "trustsql" else 3  # TRUST-SQL's phase order needs 4 turns to reach an answer
    raw["agent"] = {k: (min(v, turns) if "max_turns" in k else v) for k, v in raw["agent"].items()}
    return TrainConfig.from_mapping(raw)


def tiny_inputs(
    train_examples: list[Example], eval_examples: list[Example] | None = None, generate: Any = None
) -> TrainerInputs:
    """The tiny model (seed 1) and tokenizer with the given data and policy."""
    return TrainerInputs(
        model=tiny_model(seed=1),
        tokenizer=tiny_tokenizer(),
        train_examples=train_examples,
        eval_examples=eval_examples,
        generate=generate,
    )


def trainer(
    recipe: str, run_dir: Path, examples: list[Example], *extra: str, seed: int = 0, always_good: Any = False
) -> LocalTrainer:
    cfg = config(recipe, run_dir, f"seed={seed}", *extra)
    inputs = tiny_inputs(examples, examples[:2], ScriptedPolicy(recipe, examples, always_good))
    return LocalTrainer(cfg, inputs, say=lambda _: None)


def weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(before: dict[str, torch.Tensor], model: Any) -> float:
    return max(float((before[k] - v).abs().max()) for k, v in model.state_dict().items())


def fit_keeping_buffers(t: Any) -> list[Any]:
    """Run ``t.fit()`` and return the update buffer of each step (the masks the loss used)."""
    buffers: list[Any] = []
    original = t.train_step

    def step_and_keep() -> dict[str, Any]:
        out = original()
        buffers.append(t.last_buffer)
        return out

    t.train_step = step_and_keep  # type: ignore[method-assign]
    t.fit()
    return buffers
