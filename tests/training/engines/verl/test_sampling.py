"""Dynamic sampling's group rule (``min_std``) and its settings."""

from __future__ import annotations

import pytest

from training.engines.verl.shared import DynamicSampling
from training.engines.verl.workers import replay_buffer as S


def test_min_std_decides_which_groups_are_kept() -> None:
    assert S.informative([1.0, 0.0], min_std=1e-6)  # std 0.5
    assert not S.informative([1.0, 0.0], min_std=0.6)  # spread below the configured minimum
    assert not S.informative([1.0, 1.0, 1.0], min_std=0.0)  # no spread is never informative
    assert not S.informative([1.0], min_std=0.0)  # one counted row (the others dropped) has no spread
    assert S.group_spread([0.0, 0.0, 1.0, 1.0]) == pytest.approx(0.5)  # population std, as veRL's filter


def test_total_is_read_under_veRLs_score_key() -> None:
    assert S.metric_key("total") == "score" and S.metric_key("exec") == "exec"


def test_bad_settings_name_the_value() -> None:
    with pytest.raises(ValueError, match="oversample=0"):
        DynamicSampling(oversample=0)
    with pytest.raises(ValueError, match="min_std=-0.1"):
        DynamicSampling(min_std=-0.1)
