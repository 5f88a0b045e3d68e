"""Typed configuration of a training run: dataclasses that mirror ``recipes/`` one to one.

Hydra composes the YAML (``recipes/config.yaml`` + groups + a recipe, the designs' recipes
on the search path: ``search_path``); ``TrainConfig.from_mapping`` converts the composed
tree once, checking every value against its field's annotation (and ``choices``) first -
the key, the expected type and the allowed values are named - and each ``__post_init__``
then checks its own values with a message that says how to fix a bad one.

One idea per module: the root and its conversion (``train``), the field helpers and
registry checks (``fields``), the design groups agent/reward/advantage (``design``), the
update settings algorithm/optim (``algorithm``), the rollout and evaluation decoding
(``sampling``), engine and model (``model``), the ``stage``/``supervised`` groups
(``stage``), the machine (``hardware``), the laptop profile (``laptop``, applied by
``laptop_apply``) and the command entry (``command``). Every public name imports from here.
"""

from __future__ import annotations

from training.config.algorithm import (
    AlgorithmConfig,
    DynamicSamplingConfig,
    OptimConfig,
    RolloutCorrectionConfig,
    warmup_steps,
)
from training.config.design import AdvantageConfig, AgentConfig, RewardConfig
from training.config.fields import checked_value, describe_type
from training.config.laptop import LaptopProfile
from training.config.laptop_apply import apply_laptop_profile
from training.config.model import EngineConfig, LoraConfig, ModelConfig
from training.config.sampling import EvaluationConfig, RolloutConfig
from training.config.search_path import compose_tree, list_recipes
from training.config.stage import CHAINS, STAGES, StageConfig, SupervisedConfig, WarmStartConfig
from training.config.train import DataConfig, TrainConfig, TrainerConfig, to_yaml_tree

__all__ = [
    "CHAINS",
    "STAGES",
    "AdvantageConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "DataConfig",
    "DynamicSamplingConfig",
    "EngineConfig",
    "EvaluationConfig",
    "LaptopProfile",
    "LoraConfig",
    "ModelConfig",
    "OptimConfig",
    "RewardConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "StageConfig",
    "SupervisedConfig",
    "TrainConfig",
    "TrainerConfig",
    "WarmStartConfig",
    "apply_laptop_profile",
    "checked_value",
    "compose_tree",
    "describe_type",
    "list_recipes",
    "to_yaml_tree",
    "warmup_steps",
]
