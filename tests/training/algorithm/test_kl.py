"""The KL-coefficient schedule and the KL term of the loss training runs."""

from __future__ import annotations

import pytest
import torch

from tools.errors import ConfigError
from training.algorithm.kl import KLSchedule
from training.engines.local import loss as lp


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


@pytest.mark.parametrize(
    "pairs,match",
    [
        ([[1, 0.1]], "start with \\[0, beta\\]"),
        ([[0, 0.1], [0, 0.2]], "strictly increasing"),
        ([[0, -1.0]], ">= 0"),
        ([[0, 0.1, 3]], "from_step, beta"),
    ],
)
def test_bad_schedules_say_how_to_fix(pairs: list, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        KLSchedule.from_pairs(pairs)


def _loss_with_kl(logp: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, beta: float) -> tuple:
    """The local engine's loss on one sequence with zero advantage: only the KL term is left."""
    masks, advantages = {"full": mask}, {"full": torch.zeros(logp.shape[0])}
    settings = lp.LossSettings(kl_type="low_var_kl", loss_agg_mode="token-mean")
    return lp.grpo_loss(
        logp, logp.detach(), masks, advantages, lp.track_totals(masks), settings, beta=beta, ref_log_probs=ref
    )


def test_the_loss_adds_beta_times_low_var_kl_over_policy_tokens_only() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5]], requires_grad=True)
    ref = torch.tensor([[-1.5, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the last token is an observation token
    loss, metrics = _loss_with_kl(logp, ref, mask, beta=0.01)
    d = ref - logp.detach()
    expected = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    assert metrics["kl"] == pytest.approx(expected.item(), rel=1e-6)
    assert loss.item() == pytest.approx(0.01 * expected.item(), rel=1e-6)
    loss.backward()
    assert logp.grad is not None and logp.grad[0, 2] == 0.0 and logp.grad[0, :2].abs().sum() > 0


def test_no_kl_term_at_beta_zero_or_at_the_reference() -> None:
    logp = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.ones(1, 3)
    loss, metrics = _loss_with_kl(logp, logp - 0.5, mask, beta=0.0)
    assert "kl" not in metrics and loss.item() == pytest.approx(0.0)
    same, metrics = _loss_with_kl(logp, logp.clone(), mask, beta=0.01)
    assert metrics["kl"] == pytest.approx(0.0) and same.item() == pytest.approx(0.0)
