"""GRPO, two-track and per-role advantages against hand computations; dynamic sampling."""

from __future__ import annotations

import math
import random

import pytest
import torch

from tools.errors import ConfigError, UnknownNameError
from training.algorithm.advantages import (
    AdvantageOptions,
    dynamic_sampling_filter,
    get_estimator,
    group_keys,
    grpo_advantages,
    token_advantages,
)


def hand_grpo(scores: list[float], groups: list[str], eps: float) -> list[float]:
    """(r - mean) / (std + eps) per group, unbiased std (veRL's torch.std)."""
    out = []
    for s, g in zip(scores, groups, strict=True):
        members = [x for x, h in zip(scores, groups, strict=True) if h == g]
        mean = sum(members) / len(members)
        std = math.sqrt(sum((x - mean) ** 2 for x in members) / (len(members) - 1))
        out.append((s - mean) / (std + eps))
    return out


def test_grpo_matches_hand_computation() -> None:
    scores = [3.8, 0.7, 0.2, 0.7, 1.0, 1.0, 0.0, 2.5]
    groups = ["a"] * 4 + ["b"] * 4
    got = grpo_advantages(torch.tensor(scores), groups, epsilon=1e-8)
    assert got.tolist() == pytest.approx(hand_grpo(scores, groups, 1e-8), rel=1e-5)


def test_grpo_without_std_is_mean_centred() -> None:
    got = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), ["q"] * 4, norm_by_std=False)
    assert got.tolist() == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_two_track_normalises_each_track_separately() -> None:
    full = [1.1, 0.2, 0.3, 1.1, 0.0, 1.0]
    schema = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    groups = ["q1"] * 4 + ["q2"] * 2
    tracks = {"full": torch.tensor(full), "schema": torch.tensor(schema)}
    out = get_estimator("two_track")(tracks, groups, AdvantageOptions(epsilon=1e-6, clamp=10.0))
    assert out["full"].tolist() == pytest.approx(hand_grpo(full, groups, 1e-6), rel=1e-5)
    # q2's schema rewards are all 0: its schema advantages are 0 whatever the full track says
    assert out["schema"].tolist() == pytest.approx(hand_grpo(schema, groups, 1e-6), rel=1e-5, abs=1e-6)
    assert out["schema"][4:].abs().max().item() == pytest.approx(0.0)


def test_two_track_clamps_to_ten() -> None:
    n = 400
    scores = torch.zeros(n)
    scores[0] = 1.0  # one outlier in a big group: (1 - 1/n) / std is about 20
    tracks = {"full": scores, "schema": scores.clone()}
    out = get_estimator("two_track")(tracks, ["q"] * n, AdvantageOptions(clamp=10.0))
    assert out["full"][0].item() == pytest.approx(10.0)
    assert out["schema"][0].item() == pytest.approx(10.0)
    unclamped = get_estimator("grpo")({"full": scores}, ["q"] * n, AdvantageOptions())
    assert unclamped["full"][0].item() > 10.0


def test_two_track_without_schema_reward_says_how_to_fix() -> None:
    with pytest.raises(ConfigError, match="advantage=grpo"):
        get_estimator("two_track")({"full": torch.ones(2)}, ["q", "q"], AdvantageOptions())


def test_dualsql_roles_form_separate_groups() -> None:
    ids = ["q1"] * 4
    roles = ["linker", "generator", "linker", "generator"]
    keys = group_keys(ids, roles, "role")
    scores = [0.9, 1.1, 0.5, 0.0]
    got = grpo_advantages(torch.tensor(scores), keys)
    # linker group {0.9, 0.5}, generator group {1.1, 0.0}: each pair normalises to +-1/sqrt(2)
    assert got.tolist() == pytest.approx(hand_grpo(scores, keys, 1e-6), rel=1e-5)
    merged = grpo_advantages(torch.tensor(scores), group_keys(ids, roles, "question"))
    assert merged.tolist() != pytest.approx(got.tolist())


def test_token_advantages_follow_the_mask() -> None:
    mask = torch.tensor([[1, 1, 0, 1], [0, 1, 1, 0]], dtype=torch.float32)
    out = token_advantages(torch.tensor([2.0, -1.0]), mask)
    assert out.tolist() == [[2.0, 2.0, 0.0, 2.0], [0.0, -1.0, -1.0, 0.0]]


def test_dynamic_sampling_drops_exactly_zero_variance_groups() -> None:
    rng = random.Random(7)
    metric, groups, varying = [], [], []
    for g in range(30):
        kind = rng.choice(["all0", "all1", "mixed"])
        values = [0.0] * 4 if kind == "all0" else [1.0] * 4 if kind == "all1" else [1.0, 0.0, 0.0, 1.0]
        metric += values
        groups += [f"g{g}"] * 4
        if kind == "mixed":
            varying.append(f"g{g}")
    res = dynamic_sampling_filter(metric, groups, target_groups=100)
    assert res.kept_groups == varying
    assert set(res.zero_variance_groups) == {f"g{g}" for g in range(30)} - set(varying)
    assert res.keep == [g in varying for g in groups]
    assert res.fill_rate == pytest.approx(len(varying) / 100)


def test_dynamic_sampling_fills_up_to_target_in_order() -> None:
    metric = [0, 1] * 5 + [1, 1]
    groups = ["a", "a", "b", "b", "c", "c", "d", "d", "e", "e", "f", "f"]
    res = dynamic_sampling_filter(metric, groups, target_groups=3)
    assert res.kept_groups == ["a", "b", "c"]
    assert res.fill_rate == 1.0
    assert res.zero_variance_groups == ["f"]
    assert sum(res.keep) == 6


def test_unknown_estimator_lists_names() -> None:
    with pytest.raises(UnknownNameError, match="two_track"):
        get_estimator("two_trak")
