"""The main job on a laptop (``python -m training.run recipe=<design>``) starts with a warm
start on demonstrations: under each recipe's laptop limits, with the embedded default's
tokenizer, most of those demonstrations must fit, or the job stops before its first step
(as TRUST-SQL's did when its four turns met the profile's 512-token response cap)."""

from __future__ import annotations

import pytest

from tests.helpers.designs import project_designs
from training.config import compose_tree

DESIGNS = tuple(project_designs())


@pytest.mark.slow
@pytest.mark.parametrize("recipe", DESIGNS)
def test_laptop_demonstrations_fit_the_laptop_limits(recipe: str, tmp_path) -> None:

    from training.config.command import prepare_config
    from training.engines.local.trainer import LocalTrainer, TrainerInputs
    from training.rollout.setup import fixed_subset
    from training.supervised.demonstrations import get_script, record_demonstrations

    overrides = [f"recipe={recipe}", "engine=local", "logger=[]", f"run_dir={tmp_path}"]
    raw = compose_tree("config", overrides)
    cfg = prepare_config(raw, {o.split("=", 1)[0] for o in overrides}, say=lambda *_: None)
    assert cfg.stage.warm_start.enable, "the laptop profile turns the warm start on"
    trainer = LocalTrainer(cfg, TrainerInputs(), lambda *_: None)
    examples = fixed_subset(trainer.train_examples, cfg.stage.warm_start.examples, cfg.seed)
    demos = record_demonstrations(trainer.agent, examples, trainer.tokenizer, trainer.limits, get_script(recipe))
    assert demos.kept_examples >= len(examples) // 2, (
        f"{recipe}: {demos.kept_examples}/{len(examples)} demonstrations fit {trainer.limits}; dropped {demos.dropped}"
    )
