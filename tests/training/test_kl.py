"""The KL-coefficient schedule and the KL loss term."""

from __future__ import annotations

import pytest
import torch

from tools.errors import ConfigError
from training.kl import KLSchedule, kl_loss


def test_retoolsql_schedule() -> None:
    s = KLSchedule.from_pairs([[0, 0.005], [40, 0.001], [80, 0.0]])
    assert [s.beta(t) for t in (0, 39, 40, 79, 80, 500)] == [0.005, 0.005, 0.001, 0.001, 0.0, 0.0]
    assert s.needs_reference(0) and s.needs_reference(79) and not s.needs_reference(80)


def test_zero_schedule_needs_no_reference() -> None:
    s = KLSchedule.from_pairs([[0, 0.0]])
    assert s.beta(10) == 0.0 and not s.needs_reference(0)


def test_a_later_positive_beta_keeps_the_reference() -> None:
    s = KLSchedule.from_pairs([[0, 0.0], [5, 0.01]])
    assert s.needs_reference(0) and s.beta(4) == 0.0 and s.beta(5) == 0.01


@pytest.mark.parametrize("pairs,match", [
    ([[1, 0.1]], "start with \\[0, beta\\]"),
    ([[0, 0.1], [0, 0.2]], "strictly increasing"),
    ([[0, -1.0]], ">= 0"),
    ([[0, 0.1, 3]], "from_step, beta"),
])
def test_bad_schedules_say_how_to_fix(pairs: list, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KLSchedule.from_pairs(pairs)


def test_low_var_kl_matches_formula_and_ignores_masked_tokens() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    ref = torch.tensor([[-1.5, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, value = kl_loss(logp, ref, mask)
    d = ref - logp
    expected = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert value == pytest.approx(expected.item(), rel=1e-6)
    same, _ = kl_loss(logp, logp.clone(), mask)
    assert same.item() == pytest.approx(0.0)
