"""The ``verl`` engine: veRL 0.9.1 on Ray with vLLM rollouts (the GPU path of ``training.run``).

``describe`` (``dry_run=true``) prints the complete veRL config, resolved, after the same
checks a real run makes; ``train`` prepares the run (config, checks, GPU count, model
directory, run-directory rules, prompt files, logging environment) and launches veRL's
v1 trainer (our registered ``sqlagent_sync`` trainer) through
``verl.trainer.main_ppo.run_ppo``. The mapping lives in :mod:`.config.translate`, the rows in
:mod:`.config.data_files`, the start-up rules in :mod:`.checks.rules`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.data import load_from_config
from tools.errors import ConfigError, ToolkitError
from training.engines.verl.config.hardware_keys import sizing_report
from training.engines.verl.config.translate import (
    PPO_CONFIG_MODULE,
    checkpoint_dir,
    policy_path,
    to_yaml,
    verl_config_for,
)
from training.engines.verl.shared import VERL_METRICS_FILE
from training.runs.preemption import REQUEUE_EXIT_STATUS, StopSignals, raise_if_stopped
from training.runs.resume_policy import ResumeDecision, check_shared_storage

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from training.config import TrainConfig
    from training.engines.verl.checks.backbones import ModelCard

Say = Callable[[str], None]


# ----------------------------------------------------------------------------- the engine API


def describe(cfg: TrainConfig) -> str:
    """``dry_run=true``: the complete veRL config as resolved YAML, after the checks a real
    run makes (nothing is downloaded, written or started). A config that would crash is
    refused here with the same message ``prepare()`` gives."""
    from training.engines.verl.checks.rules import check_run

    notes: list[str] = []
    with quiet_verl_import():
        try:
            count: int | None = len(load_from_config(cfg.data, "train"))
        except ToolkitError as err:
            count = cfg.algorithm.batch_size * (cfg.trainer.total_steps or 1)
            notes.append(f"data unreadable here ({err}); trainer.total_epochs assumes {count} training prompts")
        verl_cfg = verl_config_for(cfg, num_train_examples=count)
        card = expected_card(cfg)
        report = check_run(verl_cfg, card)
        sized = sizing_report(cfg, verl_cfg)
    dataclasses.replace(report, failures=report.failures + sized.failures).raise_first()
    notes += [f"sizing: {line}" for line in sized.lines]
    shared = check_shared_storage(cfg.run_dir, int(verl_cfg.trainer.nnodes), cfg.trainer.shared_run_dir_check)
    notes += [shared.removeprefix("[run] ")] if shared else []
    if card.known:
        notes.append(
            f"model {card.path}: {card.max_position_embeddings} positions, {card.num_attention_heads} "
            f"heads, {card.num_key_value_heads} KV heads - {card.origin}"
        )
    notes += [f"unchecked: {item}" for item in report.unchecked] + [f"note: {item}" for item in report.notes]
    header = (
        f"# engine=verl: veRL {_verl_version()} ppo_trainer composed from pkg://{PPO_CONFIG_MODULE}, "
        f"filled from recipe={cfg.recipe_name}, then the recipe's verl: block and verl.* overrides\n"
        + "".join(f"# {note}\n" for note in notes)
    )
    return header + to_yaml(verl_cfg)


def train(cfg: TrainConfig, say: Say = print) -> dict[str, Any]:
    """Prepare the run and run veRL's trainer on Ray (blocks until training ends).

    A job of a Hydra multirun (``cfg.sweep`` set) launches in a child process of its own:
    Hydra's basic launcher runs every job in this one process, and veRL's ``run_ppo``
    starts Ray only when it is not running yet (the second job would join the first
    job's Ray session, with its runtime environment: the first job's wandb group, tags
    and worker settings) and keeps module state (registries, TransferQueue) across calls.

    SIGTERM / SIGUSR1 during training: the trainer stops after the step in progress with a
    checkpoint, and this raises ``Preempted`` (exit status 75; training/runs/preemption.py).
    """
    verl_cfg, summary = prepare(cfg, say)
    if summary.get("finished"):
        return summary
    from training.engines.verl.checks.multinode import prepare_multinode

    prepare_multinode(cfg, verl_cfg, say)  # the cache root for every worker; trainer.nnodes > 1: node checks
    with StopSignals(say, run_dir=Path(cfg.run_dir).resolve(), what="the veRL step in progress") as stop:
        if cfg.sweep:
            launch_in_child(verl_cfg, cfg.run_dir, say)
        else:
            launch(verl_cfg, stop)
    raise_if_stopped(cfg.run_dir)
    return summary


CHILD_CONFIG = "verl_config.yaml"
"""The resolved veRL config a sweep job's child process launches (in the run directory)."""


def launch_in_child(verl_cfg: DictConfig, run_dir: str, say: Say = print, dry_run: bool = False) -> str:
    """Write ``verl_cfg`` to ``run_dir/verl_config.yaml`` and run ``python -m
    training.engines.verl.launch <file>`` on it (the child inherits this environment:
    the logging and wandb variables). ``dry_run``: the child prints what it would launch
    instead (the experiment name and Ray runtime environment). Returns the child's output
    in a dry run; a failed child is a ``ToolkitError`` naming its exit status."""
    import subprocess
    import sys

    from omegaconf import OmegaConf

    path = Path(run_dir).resolve() / CHILD_CONFIG
    path.parent.mkdir(parents=True, exist_ok=True)
    OmegaConf.save(verl_cfg, path, resolve=True)
    command = [sys.executable, "-m", "training.engines.verl.launch", str(path)] + (["--dry-run"] if dry_run else [])
    say(f"[verl] sweep job: launching veRL in its own process ({' '.join(command[1:])})")
    done = subprocess.run(command, capture_output=dry_run, text=True, check=False)
    if done.returncode == REQUEUE_EXIT_STATUS:
        raise_if_stopped(run_dir)  # it stopped on a signal after a checkpoint: this process requeues too
    if done.returncode != 0:
        detail = f":\n{done.stderr}" if dry_run else " (its output is above)"
        raise ToolkitError(f"the veRL process of sweep job {run_dir} exited with status {done.returncode}{detail}")
    return done.stdout if dry_run else ""


def child_main(argv: list[str] | None = None) -> int:
    """``python -m training.engines.verl.launch CONFIG.yaml [--dry-run]``: launch veRL on a
    config written by :func:`launch_in_child` (``--dry-run``: print its experiment name and
    Ray runtime environment instead)."""
    import argparse
    import json

    from omegaconf import DictConfig, OmegaConf

    parser = argparse.ArgumentParser(prog="python -m training.engines.verl.launch")
    parser.add_argument("config", help="a veRL config written by a sweep job (run_dir/verl_config.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="print what would launch, start nothing")
    args = parser.parse_args(argv)
    cfg = OmegaConf.load(args.config)
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{args.config} holds a list; pass the veRL config mapping a sweep job wrote")
    if args.dry_run:
        runtime_env = OmegaConf.to_container(cfg.ray_kwargs.ray_init.runtime_env, resolve=True)
        print(
            json.dumps(
                {
                    "experiment_name": cfg.trainer.experiment_name,
                    "runtime_env": runtime_env,
                    "environment": {k: os.environ.get(k) for k in ("WANDB_RUN_GROUP", "WANDB_TAGS")},
                }
            )
        )
        return 0
    run_dir = Path(cfg.sqlagent.run_dir)
    with StopSignals(print, run_dir=run_dir, what="the veRL step in progress") as stop:
        launch(cfg, stop)
    raise_if_stopped(run_dir)
    return 0


def prepare(cfg: TrainConfig, say: Say = print, check_devices: bool = True) -> tuple[DictConfig, dict[str, Any]]:
    """Everything before the Ray launch, failing before anything is downloaded or written:
    the validated veRL config, the start-up checks, the GPU count; then the model
    directory, the run-directory rules, the prompt files and the logging environment."""
    from training.config import to_yaml_tree
    from training.engines.verl.checks.rules import check_run
    from training.engines.verl.config.data_files import data_files, write_prompt_file
    from training.runs.samples import write_config_record

    train_examples = load_from_config(cfg.data, "train")  # data.train_ids narrows it (the RL filter)
    val_examples = load_from_config(cfg.data, "eval")
    if not (cfg.model.path or cfg.stage.init_from) and cfg.gpu_backbone:
        say(
            f"[verl] model.path is null: training recipe {cfg.recipe_name}'s GPU backbone {cfg.gpu_backbone} "
            "(model.path=<dir or hub name> to change)"
        )
    verl_cfg = verl_config_for(cfg, num_train_examples=len(train_examples))
    report = check_run(verl_cfg, expected_card(cfg))
    sized = sizing_report(cfg, verl_cfg)
    dataclasses.replace(report, failures=report.failures + sized.failures).raise_first()
    for item in report.unchecked + report.notes + sized.lines:
        say(f"[verl] {item}")
    if check_devices:
        check_gpus(verl_cfg)
    _say_note(check_shared_storage(cfg.run_dir, int(verl_cfg.trainer.nnodes), cfg.trainer.shared_run_dir_check), say)
    model_path = _model_directory(cfg, say)
    verl_cfg = verl_config_for(cfg, model_path, len(train_examples))
    _check_model_directory(verl_cfg, model_path, say)
    decision = prepare_run_dir(cfg.run_dir, cfg.resume, cfg.fresh, say)
    apply_resume(verl_cfg, decision)
    total = int(verl_cfg.trainer.total_training_steps)
    if decision.step >= total and (Path(cfg.run_dir) / "final").is_dir():
        say(
            f"[resume] {cfg.run_dir} is finished ({decision.step} steps; trainer.total_steps={total}): nothing to "
            "do, nothing changed. Pass a larger trainer.total_steps to continue it, or fresh=true to start over."
        )
        return verl_cfg, {
            "engine": "verl",
            "run_dir": cfg.run_dir,
            "finished": True,
            "final_dir": str(Path(cfg.run_dir).resolve() / "final"),
        }
    write_config_record(cfg.run_dir, decision.step, to_yaml_tree(cfg))
    train_file, val_file = data_files(cfg.run_dir)
    write_prompt_file(train_examples, train_file)
    write_prompt_file(val_examples, val_file)
    if cfg.reward.exec_metric == "test_suite":
        prebuild_test_suites([*train_examples, *val_examples], say)
    say(
        f"[verl] {len(train_examples)} train / {len(val_examples)} validation prompts in {train_file.parent}; "
        f"{verl_cfg.trainer.total_training_steps} steps over {verl_cfg.trainer.total_epochs} epoch(s)"
    )
    verl_metrics = _set_logging_env(verl_cfg, cfg.run_dir)
    summary = {
        "engine": "verl",
        "run_dir": cfg.run_dir,
        "model_path": model_path,
        "metrics": str(Path(cfg.run_dir).resolve() / "metrics.jsonl"),
        "verl_metrics": verl_metrics,
        "final_dir": verl_cfg.sqlagent.get("final_dir"),
        "train_examples": len(train_examples),
        "val_examples": len(val_examples),
    }
    return verl_cfg, summary


def prebuild_test_suites(examples: Sequence[Any], say: Say = print) -> tuple[int, int]:
    """The test suite of every database of ``examples`` (training and validation), chosen for
    the gold queries on it, built here before Ray starts: the reward workers (the reward,
    dynamic sampling and validation all score with ``reward.exec_metric=test_suite``) then
    only load them from the shared cache and never build one concurrently."""
    from rex.test_suite import ensure_suites
    from tools.cache import cache_root

    built, cached = ensure_suites((ex.db_path, ex.gold_sql) for ex in examples)
    say(f"[verl] test suites for reward.exec_metric=test_suite: {built} built, {cached} cached in {cache_root()}")
    return built, cached


def launch(cfg: DictConfig, stop: StopSignals | None = None) -> None:
    """Run veRL's v1 trainer (our ``sqlagent_sync``) on Ray; blocks until training ends.
    ``stop``: the driver's signal handlers, installed again right after ``ray.init``, which
    replaces the SIGTERM handler with one that shuts Ray down at once (no checkpoint)."""
    import ray
    from verl.trainer.main_ppo import TaskRunnerV1, run_ppo
    from verl.utils.device import auto_set_device

    import training.engines.verl.workers.plugin  # noqa: F401  (registers the agent loop + trainers here too, at once if veRL's registries are loaded)

    auto_set_device(cfg)
    real_init = ray.init

    def init_keeping_handlers(*args: Any, **kwargs: Any) -> Any:
        try:
            return real_init(*args, **kwargs)
        finally:
            stop.install()  # type: ignore[union-attr]

    if stop is not None:
        ray.init = init_keeping_handlers
    try:
        run_ppo(cfg, task_runner_class=TaskRunnerV1)
    finally:
        ray.init = real_init


def _verl_version() -> str:
    import verl

    return str(getattr(verl, "__version__", "?"))


@contextlib.contextmanager
def quiet_verl_import() -> Iterator[None]:
    """Import veRL with its import-time chatter (no accelerator found, torchtitan,
    megatron, ... warnings, log records and prints) kept off the console of a dry run.

    veRL's loggers carry their own levels, so their records reach the console handler
    whatever the root level is: logging is disabled up to WARNING for the import instead.
    """
    import sys

    if "verl" in sys.modules:
        yield
        return
    out = io.StringIO()
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import verl  # noqa: F401
            import verl.trainer.config  # noqa: F401
            import verl.workers.engine  # noqa: F401  (warns about each optional engine it lacks)
    finally:
        logging.disable(logging.NOTSET)
    logging.getLogger(__name__).debug("veRL import said: %s", out.getvalue().strip())
    yield


# ----------------------------------------------------------------------------- model directory


def expected_card(cfg: TrainConfig) -> ModelCard:
    """The model card the run will have: the configured model's (local config.json or the
    backbone table), with ``model.context_factor`` applied as the derived directory will."""
    from training.engines.verl.checks.backbones import model_card

    card = model_card(policy_path(cfg))
    factor = cfg.model.context_factor
    if factor and card.max_position_embeddings:
        return dataclasses.replace(
            card,
            max_position_embeddings=int(card.max_position_embeddings * factor),
            origin=f"{card.origin}, x model.context_factor={factor}",
        )
    return card


def _model_directory(cfg: TrainConfig, say: Say) -> str:
    """The local model directory veRL loads: resolved (downloaded once for a hub name),
    then derived with rope scaling when ``model.context_factor`` asks for a longer context."""
    from training.engines.verl.checks.backbones import derive_long_context_model
    from training.generation.loading import resolve_model_path

    path = resolve_model_path(cfg.stage.init_from or cfg.model.path or cfg.gpu_backbone, say)
    factor = cfg.model.context_factor
    if not factor:
        return str(path)
    if not Path(path).is_dir():  # a hub name: the derived directory links the downloaded files
        from huggingface_hub import snapshot_download

        say(f"[verl] downloading {path} to derive its long-context directory")
        path = snapshot_download(path)
    target = Path(cfg.run_dir).resolve() / "model_long_context"
    say(f"[verl] model.context_factor={factor}: {target} carries YaRN rope scaling over {path}")
    return str(derive_long_context_model(path, target, factor))


def _check_model_directory(verl_cfg: DictConfig, model_path: str, say: Say) -> None:
    """The real ``config.json`` checked again (it may differ from the table): the local
    directory's, or for a hub name the hub's (downloaded alone; veRL fetches the weights)."""
    from training.engines.verl.checks.backbones import model_card
    from training.engines.verl.checks.rules import check_run

    where = model_path
    if not (Path(model_path) / "config.json").is_file():
        try:
            from huggingface_hub import hf_hub_download

            where = str(Path(hf_hub_download(model_path, "config.json")).parent)
        except (OSError, ValueError) as err:  # offline, gated, or not a hub name: the table's numbers stand
            say(
                f"[verl] could not read {model_path}'s config.json from the hub ({type(err).__name__}); "
                "checked against training/engines/verl/checks/backbones.py"
            )
    card = model_card(where)
    check_run(verl_cfg, dataclasses.replace(card, path=model_path)).raise_first()


# ----------------------------------------------------------------------------- run directory, devices, logging


def prepare_run_dir(run_dir: str | Path, resume: str | bool, fresh: bool, say: Say = print) -> ResumeDecision:
    """The run-directory policy of :mod:`training.runs.resume_policy` for veRL checkpoints: ``fresh``
    deletes them (and the records and wandb id of the old run); otherwise ``resume``
    (never | auto | must) decides, half-written checkpoints newer than the resume point are
    removed, and veRL's tracker names that point."""
    import shutil

    from training.runs.preemption import clear_stop_files
    from training.runs.resume_policy import apply_verl_decision, resume_decision

    clear_stop_files(run_dir)  # an earlier process's stop request is spent
    ckpt = checkpoint_dir(run_dir)
    if fresh:
        shutil.rmtree(ckpt, ignore_errors=True)
        for name in ("metrics.jsonl", "samples.jsonl", "prompts.jsonl", VERL_METRICS_FILE, WANDB_ID_FILE):
            (Path(run_dir) / name).unlink(missing_ok=True)
        shutil.rmtree(Path(run_dir) / "final", ignore_errors=True)
        resume = "never"
    decision = resume_decision(run_dir, resume)
    for note in decision.notes:
        say(note)
    if decision.action == "resume" or decision.discard:
        apply_verl_decision(decision, ckpt)
    if decision.action == "resume" or resume != "never":
        say(decision.message)
    return decision


def apply_resume(verl_cfg: DictConfig, decision: ResumeDecision) -> None:
    """Point veRL's loader at the decided step (``resume_path``) or switch it off."""
    from omegaconf import OmegaConf, open_dict

    from training.runs.resume_policy import verl_resume_values

    with open_dict(verl_cfg):
        for key, value in verl_resume_values(decision).items():
            OmegaConf.update(verl_cfg, key, value, merge=False)


def _say_note(note: str, say: Say) -> None:
    if note:
        say(note)


def check_gpus(verl_cfg: DictConfig) -> None:
    """On one node, fail fast when the config asks for more GPUs than are visible (Ray
    would otherwise wait for resources that never come)."""
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wanted = int(verl_cfg.trainer.n_gpus_per_node)
    if visible == 0:
        raise ConfigError(
            "engine=verl needs CUDA GPUs (and vLLM) and none is visible; use engine=local or engine=auto "
            "(dry_run=true still prints the veRL config on any machine)"
        )
    if verl_cfg.trainer.nnodes == 1 and visible < wanted:
        raise ConfigError(
            f"trainer.n_gpus_per_node={wanted} but {visible} CUDA GPU(s) are visible; pass "
            f"+verl.trainer.n_gpus_per_node={visible} (batch sizes must stay divisible) or use engine=local"
        )


def _set_logging_env(verl_cfg: DictConfig, run_dir: str) -> str:
    """veRL's file logger and wandb read environment variables: set them here and in the
    Ray runtime environment (every actor gets them). wandb goes offline unless the user
    is logged in (``WANDB_API_KEY`` or ``~/.netrc``, as the local engine decides) or set
    ``WANDB_MODE``, and resumes the run's own wandb run (:func:`wandb_resume_env`).
    Returns veRL's metrics JSONL path."""
    from omegaconf import open_dict

    from training.runs.logger import wandb_mode

    metrics = str(Path(run_dir).resolve() / VERL_METRICS_FILE)
    env = {"VERL_FILE_LOGGER_PATH": metrics}
    if "wandb" in verl_cfg.trainer.logger:
        env.update(wandb_resume_env(run_dir), WANDB_MODE=wandb_mode())
    os.environ.update(env)
    with open_dict(verl_cfg):
        runtime_env = verl_cfg.ray_kwargs.ray_init.runtime_env
        runtime_env.env_vars = {**(runtime_env.get("env_vars") or {}), **env}
    return metrics


WANDB_ID_FILE = "wandb_run_id"
"""The run's wandb id, kept in the run directory so every process of the run logs to one wandb run."""


def wandb_resume_env(run_dir: str | Path) -> dict[str, str]:
    """wandb's variables for veRL's ``Tracking`` (its ``wandb.init`` takes no id or resume
    argument, and wandb reads these instead): the run's id - made once and kept in
    ``run_dir/wandb_run_id``, so a resumed or requeued job logs to the same wandb run -,
    ``WANDB_RESUME=allow`` and ``WANDB_DIR`` (the offline run stays in the run directory)."""
    import secrets
    import string

    path = Path(run_dir).resolve() / WANDB_ID_FILE
    run_id = path.read_text().strip() if path.is_file() else ""
    if not run_id:
        run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(run_id + "\n")
    return {"WANDB_RUN_ID": run_id, "WANDB_RESUME": "allow", "WANDB_DIR": str(path.parent)}


if __name__ == "__main__":
    import sys

    sys.exit(child_main())
