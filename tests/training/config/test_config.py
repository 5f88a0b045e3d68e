"""Recipes compose into typed, validated configs; command-line overrides beat recipes."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest

from tests.helpers.designs import project_designs
from tools.errors import ConfigError
from training.config import TrainConfig, apply_laptop_profile, compose_tree, list_recipes, to_yaml_tree
from training.config.search_path import group_options
from training.run import explicit_keys, prepare_config

RECIPES = project_designs()


def composed(*overrides: str) -> dict[str, Any]:
    """The composed tree, a copy of its caller's own: Hydra composes each override list once
    per module (a compose takes about a second on two cores and hundreds of tests share a few)."""
    return copy.deepcopy(_composed_once(overrides))


@functools.cache
def _composed_once(overrides: tuple[str, ...]) -> dict[str, Any]:
    return compose_tree("config", overrides)


def build(*overrides: str) -> TrainConfig:
    return TrainConfig.from_mapping(composed(*overrides))


def test_every_design_has_its_recipe() -> None:
    from agents.designs import list_designs

    assert set(list_designs()) <= set(list_recipes()) and set(RECIPES) <= set(list_recipes())


@pytest.mark.parametrize("name", RECIPES)
def test_each_recipe_builds_and_selects_its_design(name: str) -> None:
    cfg = build(f"recipe={name}")
    assert cfg.recipe_name == name
    assert cfg.agent.name == name
    assert cfg.run_dir == f"runs/{name}"


def test_paper_numbers_stay_in_the_recipes() -> None:
    r = build("recipe=retoolsql")
    assert (r.algorithm.group_size, r.algorithm.batch_size) == (16, 12)  # 12 groups of 16 = 192 completions
    assert r.algorithm.kl_schedule == [[0, 0.005], [40, 0.001], [80, 0.0]]
    assert (r.algorithm.clip_ratio_low, r.algorithm.clip_ratio_high) == (0.2, 0.28)
    assert r.algorithm.dynamic_sampling.enable and r.algorithm.dynamic_sampling.oversample == 12
    assert (r.rollout.temperature, r.rollout.top_p, r.optim.lr) == (1.2, 0.95, 1e-6)
    assert r.agent.options["max_turns"] == 8 and r.reward.name == "composite"
    t = build("recipe=trustsql")
    assert t.advantage.estimator == "two_track" and t.advantage.schema_weight == 0.25
    assert t.advantage.clamp == 10.0 and t.algorithm.group_size == 8 and t.rollout.temperature == 0.8
    assert t.rollout.max_new_tokens == 2048 and t.rollout.observation_max_tokens == 1024
    d = build("recipe=dualsql")
    assert d.reward.exec_metric == "rex" and d.agent.options["guardrails"] is True
    assert (d.rollout.top_k, d.rollout.top_p, d.optim.lr) == (20, 0.99, 2e-6)
    assert d.advantage.group_by == "role"
    k = build("recipe=think2sql")
    assert k.reward.name == "think2sql" and k.reward.exec_metric == "qatch"


def test_command_line_overrides_beat_the_recipe() -> None:
    assert build("recipe=trustsql", "reward.exec_metric=rex").reward.exec_metric == "rex"
    single = build("recipe=trustsql", "advantage=grpo")
    assert single.advantage.estimator == "grpo" and single.agent.name == "trustsql"
    assert build("recipe=dualsql", "agent.guardrails=false").agent.options["guardrails"] is False
    assert build("recipe=retoolsql", "reward.exec_metric=qatch").reward.exec_metric == "qatch"
    assert build("recipe=retoolsql", "algorithm.group_size=8").algorithm.group_size == 8


def test_group_size_below_two_explains_why() -> None:
    with pytest.raises(ConfigError, match="G >= 2.*no baseline"):
        build("recipe=trustsql", "algorithm.group_size=1")


def test_missing_recipe_lists_the_recipes() -> None:
    with pytest.raises(ConfigError, match="recipe=<name>, one of: " + ", ".join(list_recipes())):
        build()
    raw = composed("recipe=trustsql")
    raw["recipe_name"] = None
    with pytest.raises(ConfigError, match="recipe=<name>, one of: " + ", ".join(list_recipes())):
        TrainConfig.from_mapping(raw)


def test_unknown_recipe_lists_the_recipes() -> None:
    with pytest.raises(Exception, match="trustsql"):
        composed("recipe=trustsq")
    raw = composed("recipe=trustsql")
    raw["recipe_name"] = "trustsq"
    with pytest.raises(ConfigError, match="unknown recipe 'trustsq'; available: dualsql"):
        TrainConfig.from_mapping(raw)


@pytest.mark.parametrize(
    "override,match",
    [
        ("reward.exec_metric=bleu", "exec_metric='bleu'; choose one of ex, qatch, rex, spider"),
        ("reward.exec_metric=rexx", "exec_metric='rexx'; did you mean 'rex'\\? choose one of ex, qatch, rex, spider"),
        (
            "advantage.estimator=two-track",
            "estimator='two-track'; did you mean 'two_track'\\? choose one of grpo, two_track",
        ),
        ("agent.name=trustsq", "agent.name='trustsq'; did you mean 'trustsql'\\?"),
        ("rollout.temperature=0", "GRPO samples"),
        ("algorithm.clip_ratio_c=1.0", "clip_ratio_c"),
        ("optim.warmup_ratio=1.5", "warmup_ratio"),
        ("algorithm.kl_schedule=[[5,0.1]]", "start with"),
        ("logger=[console,tensorboard]", "tensorboard"),
        ("agent.max_turns=0", "turn budget"),
    ],
)
def test_bad_values_name_the_key_and_the_fix(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        build("recipe=trustsql", override)


def test_unknown_key_is_rejected_by_name() -> None:
    raw = composed("recipe=trustsql")
    raw["algorithm"]["groupsize"] = 4
    with pytest.raises(ConfigError, match="algorithm.'groupsize'|'groupsize'"):
        TrainConfig.from_mapping(raw)


def test_laptop_profile_shrinks_sizes_but_keeps_explicit_values() -> None:
    cfg = build("recipe=retoolsql", "algorithm.batch_size=3")
    small, changes = apply_laptop_profile(cfg, ["algorithm.batch_size"])
    assert small.algorithm.group_size == 4 and small.algorithm.batch_size == 3
    # retoolsql's own laptop block beats the shared one: 2 turns, 256 response tokens
    assert small.agent.options["max_turns"] == 2 and small.rollout.max_new_tokens == 128
    assert small.rollout.max_response_tokens == 256
    assert small.rollout.observation_max_tokens == 256 and small.data.eval_limit == 8
    assert small.algorithm.kl_schedule == cfg.algorithm.kl_schedule  # algorithm settings untouched
    assert changes["algorithm.group_size"] == (16, 4)
    assert "algorithm.batch_size" not in changes
    assert changes["agent.max_turns"] == (8, 2)


def test_laptop_profile_only_lowers_caps() -> None:
    cfg = build("recipe=trustsql", "agent.max_turns=2", "rollout.max_new_tokens=100")
    small, _ = apply_laptop_profile(cfg, [])
    assert small.agent.options["max_turns"] == 2 and small.rollout.max_new_tokens == 100


def test_prepare_config_applies_the_profile_on_cpu_and_prints_it() -> None:
    lines: list[str] = []
    cfg = prepare_config(
        composed("recipe=dualsql", "engine=local", "engine.device=cpu"), explicit_keys(["recipe=dualsql"]), lines.append
    )
    assert cfg.engine.name == "local" and cfg.algorithm.group_size == 4
    assert cfg.agent.options["linker_max_turns"] == 2 and cfg.algorithm.batch_size == 1
    text = "\n".join(lines)
    assert "laptop profile" in text and "algorithm.group_size: 16 -> 4" in text
    assert cfg.optim.spill_state and "optim.spill_state: False -> True" in text
    off = prepare_config(
        composed("recipe=dualsql", "engine=local", "engine.device=cpu", "engine.laptop_profile=off"),
        set(),
        lines.append,
    )
    assert off.algorithm.group_size == 16 and not off.optim.spill_state


def test_yaml_tree_round_trips() -> None:
    cfg = build("recipe=dualsql")
    again = TrainConfig.from_mapping(to_yaml_tree(cfg))
    assert again == cfg


def test_warm_start_is_off_in_recipes_and_on_in_the_laptop_profile() -> None:
    cfg = build("recipe=think2sql")
    assert cfg.stage.warm_start.enable is False and cfg.stage.warm_start.examples >= 1
    small, changes = apply_laptop_profile(cfg, [])
    assert small.stage.warm_start.enable is True
    assert changes["stage.warm_start.enable"] == (False, True)
    assert small.stage.warm_start.examples == 48  # think2sql's own laptop block: short prompts
    retool, _ = apply_laptop_profile(build("recipe=retoolsql"), [])
    assert retool.stage.warm_start.enable and retool.stage.warm_start.examples == 24
    kept, _ = apply_laptop_profile(
        build("recipe=think2sql", "stage.warm_start.enable=false"), ["stage.warm_start.enable"]
    )
    assert kept.stage.warm_start.enable is False


def test_warm_start_settings_are_validated() -> None:
    with pytest.raises(ConfigError, match=r"stage.warm_start.examples=0"):
        build("recipe=think2sql", "stage.warm_start.examples=0")
    with pytest.raises(ConfigError, match=r"stage.warm_start.lr"):
        build("recipe=think2sql", "stage.warm_start.lr=0")


def test_verl_engine_refuses_the_warm_start_and_says_what_to_do() -> None:
    from training.engines.verl.config.translate import settings_from_project

    with pytest.raises(ConfigError, match="local engine only.*stage.init_from"):
        settings_from_project(build("recipe=think2sql", "stage.warm_start.enable=true"), model_path="/tmp/m")


# ----------------------------------------------------------------------------- types of every field


def _leaves(cls: type, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted path, annotation) of every field of the typed config, nested groups included."""
    import dataclasses
    import typing

    out: list[tuple[str, Any]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if f.name == "options" and cls.__name__ in ("AgentConfig", "RewardConfig"):
            continue  # the design's own keyword options, checked by make_agent / get_reward
        if dataclasses.is_dataclass(hint):
            out.append((prefix + f.name, hint))
            out += _leaves(hint, f"{prefix}{f.name}.")
        else:
            out.append((prefix + f.name, hint))
    return out


def _wrong_value(hint: Any) -> Any:
    """A value no field of this annotation accepts."""
    import typing

    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if str in args and any(typing.get_origin(a) is list for a in args):  # text or a list of it: a mapping is neither
        return {"not": "text"}
    base = args[0] if typing.get_origin(hint) is not list and args else hint
    if base in (int, float, dict) or typing.get_origin(base) in (dict, list) or base is list:
        return "abc"
    if base is bool and str not in args:  # with text allowed too (resume: true | auto ...), "maybe" is text
        return "maybe"
    return ["not", "text"]  # text fields and nested groups


def _set(tree: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree[part]
    tree[leaf] = value


@pytest.mark.parametrize("path,hint", _leaves(TrainConfig), ids=[p for p, _ in _leaves(TrainConfig)])
def test_every_field_refuses_a_value_of_the_wrong_type(path: str, hint: Any) -> None:
    from training.config import describe_type

    raw = composed("recipe=trustsql")
    value = _wrong_value(hint)
    _set(raw, path, value)
    with pytest.raises(ConfigError) as err:
        TrainConfig.from_mapping(raw)
    message = str(err.value)
    assert message.startswith(f"{path}={value!r}: expected "), message
    import dataclasses

    if not dataclasses.is_dataclass(hint):
        assert describe_type(hint) in message


def test_type_errors_name_the_key_the_type_and_the_allowed_values() -> None:
    with pytest.raises(ConfigError, match=r"^fresh='maybe': expected a boolean \(true or false\)$"):
        build("recipe=trustsql", "fresh=maybe")
    with pytest.raises(ConfigError, match=r"^trainer.total_steps='abc': expected an integer or null$"):
        build("recipe=trustsql", "trainer.total_steps=abc")
    with pytest.raises(ConfigError, match=r"engine.laptop_profile=\[1\]: expected text; allowed values: auto, on, off"):
        build("recipe=trustsql", "engine.laptop_profile=[1]")
    with pytest.raises(ConfigError, match=r"advantage.estimator='ppo'; choose one of grpo, two_track"):
        build("recipe=trustsql", "advantage.estimator=ppo")
    ok = build("recipe=trustsql", "optim.lr=1", "trainer.total_steps=3", "run_dir=2024")
    assert ok.optim.lr == 1.0 and isinstance(ok.optim.lr, float) and ok.run_dir == "2024"


# ----------------------------------------------------------------------------- group overrides


GROUP_CHOICES = [
    (recipe, group, option)
    for recipe in RECIPES
    for group in ("agent", "reward", "advantage", "data", "model", "stage")
    for option in group_options(group)
]


@pytest.mark.parametrize("recipe,group,option", GROUP_CHOICES, ids=[f"{r}-{g}={o}" for r, g, o in GROUP_CHOICES])
def test_choosing_a_group_gives_that_groups_own_values(recipe: str, group: str, option: str) -> None:
    """recipe=trustsql advantage=grpo is plain GRPO: a recipe sets group values only
    through the group files it selects, so a group chosen on the command line wins whole."""
    alone = composed(f"{group}={option}")[group]
    with_recipe = composed(f"recipe={recipe}", f"{group}={option}")[group]
    assert with_recipe == alone


def test_trustsql_with_plain_grpo_has_no_clamp() -> None:
    cfg = build("recipe=trustsql", "advantage=grpo")
    assert cfg.advantage.estimator == "grpo" and cfg.advantage.clamp is None
    assert build("recipe=trustsql").advantage.clamp == 10.0
    assert build("recipe=retoolsql").advantage.epsilon == 1e-8
    assert build("recipe=retoolsql", "advantage=grpo").advantage.epsilon == 1e-6
    assert build("recipe=think2sql", "reward=ex").reward.exec_metric == "ex"
    assert build("recipe=retoolsql", "advantage=grpo", "advantage.clamp=5").advantage.clamp == 5.0


@pytest.mark.parametrize(
    "module",
    [
        "training.config.algorithm",
        "training.config.command",
        "training.generation.loading",
        "training.engines.local.state",
        "eval.units",
    ],
)
def test_docstring_examples_run(module: str) -> None:
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


def test_the_type_descriptions_match_their_documented_examples() -> None:
    import doctest

    import training.config.fields

    outcome = doctest.testmod(training.config.fields)
    assert outcome.attempted >= 2 and outcome.failed == 0, outcome
