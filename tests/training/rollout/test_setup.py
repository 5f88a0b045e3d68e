"""The rollout set-up shared by the local engine and ``eval.run``: the seeded subset that
picks held-out and warm-start questions (pinned: the README's numbers depend on it) and
the rollout limits both build."""

from __future__ import annotations

import pytest

from eval.data import load_examples
from tests.helpers.designs import project_designs
from tests.training.config.test_paper_settings import recipe
from training.rollout.setup import fixed_subset, rollout_limits

# The README's CPU numbers: minibird dev, data.eval_limit=8 (the laptop profile), seed 0;
# the warm start's 48 training questions (stage.warm_start.examples), seed 0.
DEV_8_SEED_0 = ["40", "72", "86", "111", "119", "158", "177", "193"]
TRAIN_48_SEED_0 = [
    "22",
    "32",
    "36",
    "46",
    "54",
    "69",
    "70",
    "72",
    "78",
    "88",
    "92",
    "102",
    "114",
    "145",
    "148",
    "156",
    "170",
    "196",
    "214",
    "227",
    "245",
    "247",
    "253",
    "283",
    "301",
    "342",
    "357",
    "369",
    "404",
    "419",
    "451",
    "465",
    "468",
    "508",
    "512",
    "518",
    "522",
    "525",
    "540",
    "546",
    "555",
    "590",
    "605",
    "622",
    "626",
    "627",
    "631",
    "657",
]


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


@pytest.mark.parametrize("name", project_designs())
@pytest.mark.parametrize("model_context", [None, 2048, 8192, 40960])
def test_eval_run_limits_keep_the_context_it_prints(name: str, model_context: int | None) -> None:
    """eval.run's limits come from the shared ``rollout_limits``: the context they carry is
    the one its settings print (prompt + response caps, within the model's context)."""
    from eval.decoding import resolve_decoding, sampling_and_limits
    from eval.settings import EvalSettings

    decoding = resolve_decoding(recipe(name), EvalSettings(), set(), laptop=False, model_context=model_context)
    sampling, limits = sampling_and_limits(decoding)
    assert limits.max_context_tokens == decoding.max_context_tokens
    assert (limits.max_prompt_tokens, limits.max_response_tokens, limits.max_tokens_per_turn) == (
        decoding.max_prompt_tokens,
        decoding.max_response_tokens,
        decoding.max_new_tokens,
    )
    assert sampling.top_k == (decoding.top_k if decoding.top_k > 0 else -1)


def test_training_limits_are_the_rollout_caps_within_the_model_context() -> None:
    limits = rollout_limits(4096, 2048, 512, 256, model_context=5000)
    assert (limits.max_context_tokens, limits.max_prompt_tokens, limits.max_tokens_per_turn) == (5000, 4096, 512)
    assert rollout_limits(4096, 2048, 512, None, model_context=None).max_context_tokens == 6144
