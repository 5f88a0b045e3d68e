"""The rollout set-up shared by the local engine and ``eval.run``: the seeded subset that
picks held-out and warm-start questions (pinned: the README's numbers depend on it)."""

from __future__ import annotations

from eval.data import load_examples
from training.rollout_setup import fixed_subset

# The README's CPU numbers: minibird dev, data.eval_limit=8 (the laptop profile), seed 0;
# the warm start's 48 training questions (stage.warm_start.examples), seed 0.
DEV_8_SEED_0 = ["40", "72", "86", "111", "119", "158", "177", "193"]
TRAIN_48_SEED_0 = ["22", "32", "36", "46", "54", "69", "70", "72", "78", "88", "92", "102", "114", "145", "148",
                   "156", "170", "196", "214", "227", "245", "247", "253", "283", "301", "342", "357", "369", "404",
                   "419", "451", "465", "468", "508", "512", "518", "522", "525", "540", "546", "555", "590", "605",
                   "622", "626", "627", "631", "657"]


def test_the_seeded_subset_is_pinned() -> None:
    """Same seed, same questions, in the original order; no limit (or a limit beyond the
    list) keeps everything."""
    items = list(range(20))
    assert fixed_subset(items, 5, 0) == [1, 14, 15, 16, 17]
    assert fixed_subset(items, 5, 7) == [0, 7, 10, 13, 19]
    assert fixed_subset(items, None, 0) == items and fixed_subset(items, 20, 3) == items


def test_the_readme_subsets_of_minibird_are_pinned() -> None:
    dev = load_examples(kind="minibird", root=None, split="dev")
    train = load_examples(kind="minibird", root=None, split="train")
    assert [ex.id for ex in fixed_subset(dev, 8, 0)] == DEV_8_SEED_0
    assert [ex.id for ex in fixed_subset(train, 48, 0)] == TRAIN_48_SEED_0
