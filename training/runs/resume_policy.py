"""Run-directory policy: resume modes, veRL checkpoint completeness, shared storage.

``resume`` (top-level config key) decides what an existing run directory means:

- ``never`` (the default): a run directory that holds a checkpoint is refused (pass
  ``resume=auto`` / ``must`` to continue it, ``fresh=true`` to start over, or another
  ``run_dir``), so an ablation never silently continues an earlier run.
- ``auto``: continue from the latest *complete* checkpoint, or start at step 0 when there is
  none. A requeued cluster job reruns the same command with ``resume=auto`` and continues.
- ``must``: like ``auto``, but a run directory without a complete checkpoint is refused
  (a job meant to continue never restarts from scratch by mistake).

``true`` and ``false`` stay accepted: ``true`` is ``auto`` (what ``resume=true`` always did),
``false`` is ``never``.

A veRL checkpoint is complete when veRL finished writing it. veRL's trainer writes
``global_step_N/actor/`` (the worker group's blocking ``save_checkpoint``: every rank's
``model/optim/extra_state_world_size_W_rank_R.pt``, ``fsdp_config.json``, ``huggingface/``),
then ``global_step_N/data.pt``, then ``latest_checkpointed_iteration.txt`` - the last with a
plain ``open("w")``, so a kill can leave it empty, and with ``max_actor_ckpt_to_keep=1``
veRL removes the previous step's ``actor/`` before the tracker names the new step. The
tracker is therefore not trusted: the newest ``global_step_N`` whose ``data.pt`` and actor
files are all there and readable (``torch.save`` archives are zip files; a cut one has no
central directory) is the resume point, and veRL is pointed at it with
``resume_mode=resume_path``.

:func:`resume_decision` is engine-neutral: the caller passes how to find the latest complete
checkpoint (:func:`latest_verl_checkpoint` here, the local engine's own finder there).
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.errors import ConfigError

RESUME_MODES = ("never", "auto", "must")
VERL_TRACKER = "latest_checkpointed_iteration.txt"
STEP_PREFIX = "global_step_"


def resume_mode(value: Any) -> str:
    """The resume mode of a config value: ``auto`` | ``never`` | ``must`` (``true`` = auto,
    ``false`` = never); anything else is a ConfigError naming the value and the choices."""
    if isinstance(value, bool):
        return "auto" if value else "never"
    text = str(value).strip().lower()
    aliases = {"true": "auto", "false": "never"}
    text = aliases.get(text, text)
    if text not in RESUME_MODES:
        raise ConfigError(f"resume={value!r}: choose one of auto, never, must (true = auto, false = never)")
    return text


# ----------------------------------------------------------------------------- veRL checkpoints


@dataclass(frozen=True)
class StepCheckpoint:
    """One ``global_step_N`` directory and what is missing from it (nothing: complete)."""

    step: int
    path: Path
    missing: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.missing


def _readable_archive(path: Path) -> bool:
    """A ``torch.save`` file that was written to the end (its zip central directory is there)."""
    try:
        return path.is_file() and zipfile.is_zipfile(path)
    except OSError:
        return False


def actor_missing(actor: Path) -> list[str]:
    """What an FSDP ``actor/`` checkpoint directory lacks (empty when complete): the
    ``fsdp_config.json`` veRL writes, a model shard per rank, optimizer and extra shards
    for every rank when any rank has one, the HF config, and every HF weight file the
    ``huggingface/`` index names (when ``hf_model`` was saved)."""
    config = actor / "fsdp_config.json"
    try:
        world = int(json.loads(config.read_text())["world_size"])
    except (OSError, ValueError, KeyError, TypeError):
        return [f"{config.name} (readable, with world_size)"]
    missing = []
    for kind in ("model", "optim", "extra_state"):
        shards = [actor / f"{kind}_world_size_{world}_rank_{rank}.pt" for rank in range(world)]
        if kind == "model" or any(p.exists() for p in shards):
            missing += [p.name for p in shards if not _readable_archive(p)]
    hf = actor / "huggingface"
    if not (hf / "config.json").is_file():
        missing.append("huggingface/config.json")
    index = hf / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError):
            files = {index.name}
        missing += [f"huggingface/{name}" for name in sorted(files) if not (hf / name).is_file()]
    return missing


def verl_step_checkpoints(ckpt_dir: str | Path) -> list[StepCheckpoint]:
    """Every ``global_step_N`` under veRL's ``default_local_dir``, oldest first."""
    root = Path(ckpt_dir)
    steps = []
    for path in root.glob(f"{STEP_PREFIX}*") if root.is_dir() else ():
        suffix = path.name[len(STEP_PREFIX) :]
        if not (path.is_dir() and suffix.isdigit()):
            continue
        missing = [] if _readable_archive(path / "data.pt") else ["data.pt"]
        missing += actor_missing(path / "actor") if (path / "actor").is_dir() else ["actor/"]
        steps.append(StepCheckpoint(int(suffix), path, tuple(missing)))
    return sorted(steps, key=lambda c: c.step)


def latest_verl_checkpoint(ckpt_dir: str | Path) -> StepCheckpoint | None:
    """The newest complete veRL checkpoint (None when there is none)."""
    complete = [c for c in verl_step_checkpoints(ckpt_dir) if c.complete]
    return complete[-1] if complete else None


def incomplete_after(ckpt_dir: str | Path, step: int) -> list[StepCheckpoint]:
    """Half-written checkpoints newer than ``step`` (a kill mid-save): what a resume discards.
    Older incomplete ones are veRL's rotation leftovers (``data.pt`` without ``actor/``)."""
    return [c for c in verl_step_checkpoints(ckpt_dir) if c.step > step and not c.complete]


# ----------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class ResumeDecision:
    """What a run does with its run directory: ``start`` at step 0 or ``resume`` from
    ``path`` at ``step``; ``discard`` lists half-written checkpoints to remove first;
    ``message`` says it in one line."""

    action: str  # "start" | "resume"
    step: int = 0
    path: Path | None = None
    discard: tuple[Path, ...] = ()
    message: str = ""
    notes: list[str] = field(default_factory=list)


def resume_decision(
    run_dir: str | Path,
    mode: Any,
    latest: Callable[[Path], StepCheckpoint | None] | None = None,
    any_checkpoint: Callable[[Path], Path | None] | None = None,
) -> ResumeDecision:
    """The resume policy (see the module doc) for ``run_dir``; a refusal is a ConfigError.

    ``latest(run_dir)`` finds the newest complete checkpoint and ``any_checkpoint(run_dir)``
    any checkpoint at all, complete or not (``never`` refuses both); the defaults read
    veRL's layout under ``run_dir/checkpoints``.
    """
    mode = resume_mode(mode)
    run_dir = Path(run_dir)
    ckpt_dir = run_dir / "checkpoints"
    found = (latest or (lambda _d: latest_verl_checkpoint(ckpt_dir)))(run_dir)
    if mode == "never":
        existing = (any_checkpoint or (lambda _d: _any_verl_step(ckpt_dir)))(run_dir)
        if existing is not None:
            raise ConfigError(
                f"{run_dir} already holds checkpoint {existing}; pass resume=auto (or resume=true) to continue it, "
                "fresh=true to start over, or run_dir=<another directory>"
            )
        return ResumeDecision("start", message=f"[run] new run in {run_dir}")
    step = found.step if found is not None else 0
    discard = tuple(c.path for c in incomplete_after(ckpt_dir, step)) if latest is None else ()
    notes = [f"[resume] discarding half-written checkpoint {p} (a run killed while saving it)" for p in discard]
    if found is None:
        if mode == "must":
            raise ConfigError(
                f"resume=must but {run_dir} holds no complete checkpoint to continue; pass resume=auto to start "
                "from step 0 when there is none, or point run_dir at the run to continue"
            )
        return ResumeDecision(
            "start",
            discard=discard,
            notes=notes,
            message=f"[resume] no complete checkpoint in {run_dir}; starting from step 0",
        )
    return ResumeDecision(
        "resume",
        step=found.step,
        path=found.path,
        discard=discard,
        notes=notes,
        message=f"[resume] continuing from {found.path} (step {found.step})",
    )


def _any_verl_step(ckpt_dir: Path) -> Path | None:
    steps = verl_step_checkpoints(ckpt_dir)
    return steps[-1].path if steps else None


def apply_verl_decision(decision: ResumeDecision, ckpt_dir: str | Path) -> None:
    """Remove the half-written checkpoints the decision discards and make veRL's tracker
    name the resume point (veRL's next save rewrites it; this keeps the directory coherent
    for anything that reads the tracker before then)."""
    for path in decision.discard:
        shutil.rmtree(path, ignore_errors=True)
    root = Path(ckpt_dir)
    tracker = root / VERL_TRACKER
    if decision.action == "resume":
        tmp = tracker.with_name(tracker.name + ".tmp")
        tmp.write_text(str(decision.step))
        os.replace(tmp, tracker)
    elif tracker.exists() and not any(c.complete for c in verl_step_checkpoints(root)):
        tracker.unlink()  # it names a step that is not there: veRL's own reader would fail on it


def verl_resume_values(decision: ResumeDecision) -> dict[str, Any]:
    """veRL's keys for the decision: ``resume_path`` at the chosen step (veRL's own loader
    then reads it, whatever the tracker says), or ``disable``."""
    if decision.action == "resume" and decision.path is not None:
        return {"trainer.resume_mode": "resume_path", "trainer.resume_from_path": str(decision.path.resolve())}
    return {"trainer.resume_mode": "disable", "trainer.resume_from_path": None}


def prune_verl_checkpoints(ckpt_dir: str | Path, keep: int | None) -> list[Path]:
    """Remove ``actor/`` of complete checkpoints older than the newest ``keep`` (as veRL's
    rotation does). veRL's rotation only knows the checkpoints its own process saved, so
    after a resume the earlier process's ones would stay forever. Returns what it removed."""
    if not keep or keep < 1:
        return []
    complete = [c for c in verl_step_checkpoints(ckpt_dir) if c.complete]
    removed = []
    for old in complete[:-keep]:
        shutil.rmtree(old.path / "actor", ignore_errors=True)
        removed.append(old.path / "actor")
    return removed


# ----------------------------------------------------------------------------- shared storage

SHARED_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "cephfs",
        "glusterfs",
        "fuse.glusterfs",
        "cifs",
        "smb3",
        "smbfs",
        "wekafs",
        "fuse.juicefs",
        "fuse.gcsfuse",
        "fuse.s3fs",
        "fuse.mountpoint-s3",
        "fuse.sshfs",
        "9p",
        "fuse.cephfs",
        "fuse.lustre",
        "panfs",
        "pvfs2",
        "orangefs",
        "virtiofs",
        "fuse.rclone",
        "fuse.blobfuse",
        "fuse.blobfuse2",
        "afs",
        "xtreemfs",
        "quobyte",
        "fuse.quobyte",
        "mmfs",
        "vast",
        "fuse.weka",
        "dvs",
    }
)
"""Network and parallel filesystems: every node of a cluster can mount the same one."""
LOCAL_ONLY_PREFIXES = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def mount_of(path: str | Path, mounts: str | None = None) -> tuple[str, str]:
    """(mount point, filesystem type) of ``path`` (made or not yet: the longest mount point
    that contains it), from ``/proc/self/mounts`` or the given text in that format."""
    if mounts is None:
        try:
            mounts = Path("/proc/self/mounts").read_text()
        except OSError:
            return ("", "unknown")
    target = Path(path).resolve()
    best = ("", "unknown")
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = str(target) == point or str(target).startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[0]):
            best = (point, fields[2])
    return best


def check_shared_storage(run_dir: str | Path, nnodes: int, required: bool = True, mounts: str | None = None) -> str:
    """With ``nnodes > 1`` every node writes its checkpoint shards and reads the prompt
    files under ``run_dir``: refuse a directory that only this node sees (under /tmp,
    /dev/shm, or on a filesystem that is not a network or parallel one). Returns a note
    for the console; ``required=False`` (``trainer.shared_run_dir_check=false``) turns the
    refusal into that note."""
    if int(nnodes) <= 1:
        return ""
    resolved = Path(run_dir).resolve()
    point, fstype = mount_of(resolved, mounts)
    local_prefix = next(
        (p for p in LOCAL_ONLY_PREFIXES if str(resolved) == p or str(resolved).startswith(p + "/")), None
    )
    shared = fstype in SHARED_FILESYSTEMS and local_prefix is None
    what = f"run_dir {resolved} is on {fstype} (mounted at {point or '?'})"
    if shared:
        return f"[run] {what}: shared storage for {nnodes} nodes"
    reason = (
        f"under {local_prefix}, which is local to each node"
        if local_prefix
        else f"{fstype} is not a network or parallel filesystem"
    )
    message = (
        f"trainer.nnodes={nnodes}: {what}; {reason}. Every node writes its checkpoint shards there and a "
        "requeued job must find them: put run_dir on storage every node mounts (NFS, Lustre, GPFS, "
        "BeeGFS, CephFS, ...), or pass trainer.shared_run_dir_check=false if this mount is shared after all"
    )
    if required:
        raise ConfigError(message)
    return f"[run] warning: {message}"


# ----------------------------------------------------------------------------- records


def drop_records_after(path: str | Path, step: int) -> int:
    """Remove the JSONL records of ``path`` whose ``step`` is after ``step`` (and a line a
    kill cut short), atomically; returns how many were removed. A resumed run redoes those
    steps and writes them again."""
    path = Path(path)
    if not path.is_file():
        return 0
    kept, dropped = [], 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            record_step = int(json.loads(line).get("step", 0))
        except (ValueError, TypeError, AttributeError):
            dropped += 1
            continue
        if record_step > step:
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(item + "\n" for item in kept), encoding="utf-8")
        os.replace(tmp, path)
    return dropped
