"""The run-directory policy (training/runs/resume_policy.py) on real veRL FSDP checkpoints.

The checkpoints are written by veRL's ``FSDPCheckpointManager`` on CPU
(``tests/helpers/fsdp_checkpoint.py``); what a kill leaves is made from them the way a kill
makes it: a file cut short mid-write (``torch.save`` was writing it), a step directory
without its ``data.pt``, an empty tracker (veRL writes it with a plain ``open("w")``), and
veRL's own rotation having removed the tracker's step before the tracker moved on
(``max_actor_ckpt_to_keep=1``). The real SIGKILL of veRL's ``fit()`` is in
``tests/training/verl/fit/test_resume.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tools.errors import ConfigError
from training.runs import resume_policy as R

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("fsdp") / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.helpers.fsdp_checkpoint", str(run), "--steps", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


@pytest.fixture
def run(saved: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(saved / "checkpoints", copy / "checkpoints")
    return copy


def cut(path: Path) -> None:
    """What a kill during ``torch.save`` leaves: the first part of the file."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.slow
def test_two_complete_steps(run: Path) -> None:
    steps = R.verl_step_checkpoints(run / "checkpoints")
    assert [(c.step, c.complete) for c in steps] == [(1, True), (2, True)]
    decision = R.resume_decision(run, "auto")
    assert (decision.action, decision.step, decision.discard) == ("resume", 2, ())
    assert R.verl_resume_values(decision) == {
        "trainer.resume_mode": "resume_path",
        "trainer.resume_from_path": str((run / "checkpoints/global_step_2").resolve()),
    }
    assert R.resume_decision(run, "must").step == 2
    with pytest.raises(ConfigError, match=r"already holds checkpoint .*global_step_2; pass resume=auto"):
        R.resume_decision(run, "never")


@pytest.mark.slow
def test_a_kill_mid_save_resumes_from_the_step_before(run: Path) -> None:
    ckpt = run / "checkpoints"
    shutil.copytree(ckpt / "global_step_2", ckpt / "global_step_3")
    (ckpt / "global_step_3" / "data.pt").unlink()  # the trainer writes it after the actor's save returns
    cut(ckpt / "global_step_3" / "actor" / "optim_world_size_1_rank_0.pt")
    third = R.verl_step_checkpoints(ckpt)[-1]
    assert third.step == 3 and set(third.missing) == {"data.pt", "optim_world_size_1_rank_0.pt"}
    decision = R.resume_decision(run, "auto")
    assert (decision.step, decision.discard) == (2, (ckpt / "global_step_3",))
    assert "discarding half-written checkpoint" in decision.notes[0]
    R.apply_verl_decision(decision, ckpt)
    assert not (ckpt / "global_step_3").exists() and (ckpt / R.VERL_TRACKER).read_text() == "2"


@pytest.mark.slow
def test_an_empty_tracker_or_a_rotated_tracker_step_still_finds_the_newest_complete_step(run: Path) -> None:
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    ckpt = run / "checkpoints"
    (ckpt / R.VERL_TRACKER).write_text("")  # killed while veRL rewrote it
    with pytest.raises(ValueError):
        find_latest_ckpt_path(str(ckpt))  # veRL's own reader
    assert R.resume_decision(run, "auto").step == 2
    # keep=1: veRL removed step 1's actor/ when step 2 registered, before the tracker said 2
    (ckpt / R.VERL_TRACKER).write_text("1")
    shutil.rmtree(ckpt / "global_step_1" / "actor")
    assert find_latest_ckpt_path(str(ckpt)) == str(ckpt / "global_step_1")  # veRL would load a step without weights
    decision = R.resume_decision(run, "auto")
    assert decision.step == 2 and decision.discard == ()  # the rotation leftover (data.pt only) is left alone


@pytest.mark.slow
def test_no_checkpoint_auto_starts_must_refuses(run: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    assert R.resume_decision(empty, "auto").action == "start"
    assert R.resume_decision(empty, "never").action == "start"
    with pytest.raises(ConfigError, match="resume=must but .* holds no complete checkpoint"):
        R.resume_decision(empty, "must")
    for step in (1, 2):
        cut(run / "checkpoints" / f"global_step_{step}" / "actor" / "model_world_size_1_rank_0.pt")
    decision = R.resume_decision(run, "auto")
    assert decision.action == "start" and len(decision.discard) == 2
    R.apply_verl_decision(decision, run / "checkpoints")
    assert not (run / "checkpoints" / R.VERL_TRACKER).exists()
    assert R.verl_resume_values(decision)["trainer.resume_mode"] == "disable"


@pytest.mark.slow
def test_keep_checkpoints_across_processes(run: Path) -> None:
    removed = R.prune_verl_checkpoints(run / "checkpoints", keep=1)
    assert removed == [run / "checkpoints" / "global_step_1" / "actor"] and not removed[0].exists()
    assert R.prune_verl_checkpoints(run / "checkpoints", keep=None) == []


@pytest.mark.parametrize(
    "value,mode",
    [(True, "auto"), (False, "never"), ("auto", "auto"), ("MUST", "must"), ("true", "auto"), ("never", "never")],
)
def test_resume_modes(value: object, mode: str) -> None:
    assert R.resume_mode(value) == mode


def test_resume_in_the_project_config() -> None:
    from tests.training.config.test_config import build

    assert build("recipe=trustsql").resume == "never"
    assert build("recipe=trustsql", "resume=true").resume == "auto"
    assert build("recipe=trustsql", "resume=must").resume == "must"
    with pytest.raises(ConfigError, match=r"^resume='maybe': choose one of auto, never, must"):
        build("recipe=trustsql", "resume=maybe")
    with pytest.raises(ConfigError, match="resume=auto and fresh=true contradict"):
        build("recipe=trustsql", "resume=auto", "fresh=true")


MOUNTS = """overlay / overlay rw 0 0
tmpfs /tmp tmpfs rw 0 0
server:/export /shared nfs4 rw 0 0
/dev/nvme0n1 /scratch ext4 rw 0 0
lustre@o2ib:/fs /lus lustre rw 0 0
"""


def test_shared_storage_is_checked_for_several_nodes() -> None:
    assert R.check_shared_storage("/tmp/run", nnodes=1, mounts=MOUNTS) == ""
    assert "shared storage for 2 nodes" in R.check_shared_storage("/shared/runs/a", nnodes=2, mounts=MOUNTS)
    assert "lustre" in R.check_shared_storage("/lus/x/run", nnodes=4, mounts=MOUNTS)
    with pytest.raises(ConfigError, match=r"trainer.nnodes=2: run_dir /scratch/run is on ext4 .* not a network"):
        R.check_shared_storage("/scratch/run", nnodes=2, mounts=MOUNTS)
    with pytest.raises(ConfigError, match="under /tmp, which is local to each node"):
        R.check_shared_storage("/tmp/run", nnodes=2, mounts=MOUNTS)
    note = R.check_shared_storage("/scratch/run", nnodes=2, required=False, mounts=MOUNTS)
    assert note.startswith("[run] warning:") and "trainer.shared_run_dir_check=false" in note
    assert R.mount_of("/shared/deeper/not/yet/made", MOUNTS) == ("/shared", "nfs4")


def test_records_of_redone_steps_are_dropped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "kind": "eval_before"}\n{"step": 1}\n{"step": 2}\n{"step": 3}\n{"step": 3, "ki')
    assert R.drop_records_after(path, 2) == 2
    assert path.read_text() == '{"step": 0, "kind": "eval_before"}\n{"step": 1}\n{"step": 2}\n'
    assert R.drop_records_after(path, 2) == 0 and R.drop_records_after(tmp_path / "none.jsonl", 0) == 0


def test_the_wandb_id_is_kept_in_the_run_directory(tmp_path: Path) -> None:
    from training.engines.verl.launch import WANDB_ID_FILE, wandb_resume_env

    first = wandb_resume_env(tmp_path / "run")
    again = wandb_resume_env(tmp_path / "run")
    assert first == again and first["WANDB_RESUME"] == "allow" and len(first["WANDB_RUN_ID"]) == 8
    assert (tmp_path / "run" / WANDB_ID_FILE).read_text().strip() == first["WANDB_RUN_ID"]
    assert first["WANDB_DIR"] == str((tmp_path / "run").resolve())
    assert wandb_resume_env(tmp_path / "other")["WANDB_RUN_ID"] != first["WANDB_RUN_ID"]
