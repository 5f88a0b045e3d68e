"""Dynamic sampling's group rule (``min_std``), the one draw's choice of groups, the backup pool
(``return_unkept``) and their settings."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from training.engines.verl.shared import DynamicSampling
from training.engines.verl.workers import replay_buffer as S
from training.engines.verl.workers.backup_pool import BackupPool


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


# ----------------------------------------------------------------------------- the backup pool


def test_one_draw_keeps_in_draw_order_and_names_the_unkept_groups() -> None:
    """B = 2 of four drawn groups: the first two that vary are kept; the third that varies is
    the surplus ``return_unkept=varying`` hands back, with the flat one too under ``all``."""
    values = {"a": [1.0, 0.0], "b": [0.0, 0.0], "c": [0.0, 1.0], "d": [1.0, 0.0]}
    choice = S.choose_groups(["d", "b", "a", "c"], values, set(values), min_std=1e-6, batch_size=2)
    assert (choice.keep, choice.fill) == (["d", "a"], [])
    assert (choice.unkept_varying, choice.unkept_flat) == (["c"], ["b"])
    assert [choice.to_return(mode) for mode in ("varying", "all", "none")] == [["c"], ["c", "b"], []]
    short = S.choose_groups(["b", "a"], values, set(values), min_std=1e-6, batch_size=2)
    assert (short.keep, short.fill, short.to_return("all")) == (
        ["a"],
        ["b"],
        ["b"],
    )  # a zero-masked slot trains nothing


def test_replay_buffer_hands_each_draws_unkept_groups_out_once() -> None:
    buffer = S.SqlAgentReplayBuffer.from_buffer(
        SimpleNamespace(),  # type: ignore[arg-type]  # no veRL buffer state is read here
        DynamicSampling(enable=True, return_unkept="varying"),
    )
    buffer.last_choice = S.GroupChoice(keep=["a"], unkept_varying=["c"], unkept_flat=["b"])
    assert buffer.take_unkept() == ["c"]
    assert buffer.take_unkept() == []  # a checkpoint and the next draw both ask: one hand-back


def _loader(questions: int, chunk: int) -> Any:
    """veRL's ``_fetch_one_gen_batch`` over ``questions`` prompt rows in chunks of ``chunk``
    (its collate_fn, fresh uids, get_tensordict), cycling as its dataloader does."""
    from verl.utils import tensordict_utils as tu
    from verl.utils.dataset.rl_dataset import collate_fn

    rows = [
        {
            "raw_prompt": [{"role": "user", "content": f"question {i}"}],
            "extra_info": {"example_id": f"t{i}", "index": i},
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
            "agent_name": "sqlagent",
        }
        for i in range(questions)
    ]
    position = {"next": 0}

    def fetch() -> Any:
        start = position["next"] % questions
        position["next"] += chunk
        batch = collate_fn(rows[start : start + chunk])
        batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(chunk)], dtype=object)
        return tu.get_tensordict(batch)

    return fetch


def _ids(batch: Any) -> list[str]:
    return [info["example_id"] for info in batch["extra_info"]]


def test_backup_pool_serves_handed_back_questions_first_with_new_uids(tmp_path: Path) -> None:
    pool = BackupPool(_loader(questions=9, chunk=3))
    first = pool.take(4)
    assert _ids(first) == ["t0", "t1", "t2", "t3"]
    uids = [str(u) for u in first["uid"]]
    assert list(pool.drawn) == uids and first["raw_prompt"][2] == [{"role": "user", "content": "question 2"}]
    pool.give_back([uids[2], uids[0], "not-drawn"])
    second = pool.take(4)
    assert _ids(second) == ["t0", "t2", "t4", "t5"]  # handed back (in draw order), then the read-ahead t4, t5
    assert not {str(u) for u in second["uid"]} & set(uids)  # rolled out again: new groups
    assert second["dummy_tensor"].shape == (4, 1)
    pool.give_back([uids[1]])  # not of the last draw: ignored
    assert pool.returned == []
    pool.give_back([str(second["uid"][3])])
    torch.save(pool.state_dict(), tmp_path / "pool.pt")
    resumed = BackupPool(_loader(questions=9, chunk=3))
    resumed.load_state_dict(torch.load(tmp_path / "pool.pt", weights_only=False))
    resumed.fetch = _loader(questions=9, chunk=3)  # the dataloader state after t0..t5 was read
    resumed.fetch(), resumed.fetch()
    assert _ids(resumed.take(3)) == ["t5", "t6", "t7"]  # the queue survives a checkpoint
    with pytest.raises(ValueError, match="asked for 0 prompts"):
        pool.take(0)


def test_return_unkept_reaches_the_workers() -> None:
    from training.config import TrainConfig, compose_tree
    from training.engines.verl.config.translate import verl_config_for
    from training.engines.verl.shared import WorkerSettings

    tree = compose_tree("config", ["recipe=retoolsql", "engine=verl", "algorithm.dynamic_sampling.return_unkept=all"])
    config = verl_config_for(TrainConfig.from_mapping(tree), model_path="m")
    assert WorkerSettings.from_config(config).dynamic_sampling.return_unkept == "all"
    with pytest.raises(ValueError, match="return_unkept='sometimes'"):
        DynamicSampling(return_unkept="sometimes")


def test_the_trainer_saves_the_pool_with_the_steps_unkept_questions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint taken after a step holds that step's surplus question (handed back at
    save time, not only at the next draw); a resumed trainer draws it first."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    from training.engines.verl.shared import WorkerSettings
    from training.engines.verl.workers import sync_trainer as T

    monkeypatch.setattr(PPOTrainer, "_save_checkpoint", lambda self: None)  # veRL's actor, critic and data.pt
    monkeypatch.setattr(PPOTrainer, "_load_checkpoint", lambda self: setattr(self, "global_steps", 1))

    def trainer() -> Any:
        out = object.__new__(T.SqlAgentTrainer)
        out.config = OmegaConf.create(
            {"trainer": {"default_local_dir": str(tmp_path), "resume_mode": "auto", "max_actor_ckpt_to_keep": None}}
        )
        out._settings = WorkerSettings(agent="retoolsql", dynamic_sampling=DynamicSampling(enable=True, oversample=2))
        out.replay_buffer = S.SqlAgentReplayBuffer.from_buffer(SimpleNamespace(), out._settings.dynamic_sampling)  # type: ignore[arg-type]
        out._fetch_one_gen_batch = _loader(questions=9, chunk=2)  # type: ignore[method-assign]  # the dataloader
        return out

    first = trainer()
    first.global_steps = 1
    drawn = first._backup_pool().take(4)
    uids = [str(u) for u in drawn["uid"]]
    first.replay_buffer.last_choice = S.GroupChoice(keep=uids[:2], unkept_varying=[uids[3]], unkept_flat=[uids[2]])
    (tmp_path / "global_step_1").mkdir()
    first._save_checkpoint()
    assert (tmp_path / "global_step_1" / T.BACKUP_POOL_FILE).is_file()
    resumed = trainer()
    resumed._load_checkpoint()
    assert _ids(resumed._backup_pool().take(1)) == ["t3"]  # the surplus of step 1, not the next question
