"""The fit tier's harness: veRL's real ``SqlAgentTrainer.fit()`` on CPU.

What is real: the project config composed from ``recipes/`` and mapped by the verl engine
(``verl_config_for``), the prompt parquet files (``write_prompt_file``), veRL's v1 trainer
loop, ``ReplayBuffer`` (with the project's dynamic sampling), TransferQueue, batch
balancing and padding, ``_compute_metrics``, checkpoint bookkeeping, ``Tracking`` (file
logger), veRL's ``RewardLoopManager`` (CPU reward workers), veRL's ``AgentLoopManagerTQ``
(Ray actor workers that find the project's agent loop through the ``verl.plugins`` entry
point), veRL's ``LLMServerClient`` and load balancer, the agents, tools, SQLite files and
rewards.

The seam: the trainer is built through its real constructor and its real ``init()``
(``_setup()`` then ``on_init_end()``). veRL's ``_setup`` creates, in one method, a Ray
placement group that asks for GPUs, the FSDP worker group, the vLLM replicas and the
checkpoint engine. :class:`CpuTrainer` overrides only ``_setup``: it runs veRL's own
``_init_tokenizer``, ``_init_dataloader``, ``_init_dump_executor`` and
``_load_checkpoint`` in veRL's order and puts the doubles of ``fsdp_double.py`` and
``vllm_double.py`` where the GPU pieces would be (``actor_rollout_wg``,
``llm_server_manager``, ``checkpoint_manager``), plus ``_get_n_gpus_for_throughput``
(veRL asks the resource pool). Everything else is inherited. The driver sequence is
``TaskRunnerV1.run``'s: resolve the config, build the trainer, ``init()``,
``fit(agent_loop_manager)``, ``Tracking.finish``.

One Ray and TransferQueue runtime per test process, shared by the fit tier's modules
(:func:`start_session`): the generation server, veRL's load balancer and reward worker and
TransferQueue are created once (each Ray actor's start costs seconds of CPU importing
veRL); a module gets the server reset to its config and script and its own agent-loop
workers, which serve every ``fit`` of the module; each ``fit`` gets a fresh trainer and
worker group. ``tests/conftest.py`` ends the runtime before any other module.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from omegaconf import OmegaConf, open_dict

from tests.helpers.agent_db import COUNT_SQL, JOIN_SQL, make_db
from tests.helpers.agent_scripts import SCRIPTS
from tests.helpers.process_group import one_rank_process_group
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tests.training.engines.verl.fit.fsdp_double import TinyActorWorkerGroup
from tests.training.engines.verl.fit.vllm_double import TinyCheckpointEngine, TinyServerManager
from training.engines.verl.workers.sync_trainer import SqlAgentTrainer

REPO = Path(__file__).resolve().parents[5]
DP = 2  # simulated data-parallel ranks of the worker group
POLL_SECONDS = 0.05
"""How often veRL's replay buffer looks for finished groups (veRL: every 2 s, a fixed
constructor default). A GPU step takes minutes; a CPU test step takes well under a second,
so at 2 s most of a test's wall time was spent waiting for the next look."""
GOLD = {"retoolsql": COUNT_SQL, "think2sql": COUNT_SQL, "trustsql": COUNT_SQL, "dualsql": JOIN_SQL}


class CpuSetup:
    """veRL's ``_setup`` minus the GPU pieces (see the module doc), for any of the
    project's trainers (``_replicas`` says where the generation server goes)."""

    session: FitSession  # set on the instance before init()
    worker_group_cls: Any = TinyActorWorkerGroup
    config: Any
    use_reference_policy: bool

    def _setup(self) -> None:
        self._init_tokenizer()  # type: ignore[attr-defined]
        self._init_dataloader()  # type: ignore[attr-defined]
        self._init_dump_executor()  # type: ignore[attr-defined]
        model = self.config.actor_rollout_ref.model  # veRL's _setup: LoRA's reference is the actor, adapter off
        lora_rank = model.get("lora", {}).get("rank", 0) or model.get("lora_rank", 0)
        self.ref_in_actor = lora_rank > 0 or model.get("lora_adapter_path") is not None
        self.actor_rollout_wg = self.worker_group_cls(self.config, dp_size=self.dp_size)
        if self.use_reference_policy and not self.ref_in_actor:  # Role.ActorRolloutRef: the reference workers
            self.ref_policy_wg = self.actor_rollout_wg
        self.reward_loop_manager = self.session.rewards
        self.teacher_model_manager = None
        self.distillation_config = None
        self._replicas()
        self.checkpoint_manager.sleep_replicas()
        self._load_checkpoint()  # type: ignore[attr-defined]

    def _replicas(self) -> None:
        """The colocated (hybrid) replica: veRL's naive checkpoint engine wakes it."""
        self.llm_server_manager = self.session.servers
        self.checkpoint_manager = TinyCheckpointEngine(self.actor_rollout_wg, self.session.servers.server)

    def _build_replay_buffer(self) -> Any:
        buffer = super()._build_replay_buffer()  # type: ignore[misc]
        buffer.poll_interval = POLL_SECONDS
        return buffer

    @property
    def dp_size(self) -> int:
        """One simulated rank per GPU the config asks for (one node)."""
        return int(self.config.trainer.n_gpus_per_node) * int(self.config.trainer.nnodes)

    def _get_n_gpus_for_throughput(self) -> int:
        return self.dp_size


class CpuTrainer(CpuSetup, SqlAgentTrainer):
    """``SqlAgentTrainer`` with veRL's ``_setup`` minus the GPU pieces (see the module doc)."""


@dataclass
class FitSession:
    recipe: str
    root: Path
    model_dir: Path
    base: Any  # the veRL config the module's workers were built with
    servers: TinyServerManager
    rewards: Any
    agent_loops: Any
    runs: list[Any] = field(default_factory=list)


def tiny_model_dir(root: Path) -> Path:
    path = root / "policy"
    if not (path / "config.json").exists():
        tiny_tokenizer().save_pretrained(path)
        tiny_model().save_pretrained(path)
    return path


def examples(
    root: Path,
    recipe: str,
    n_train: int,
    n_val: int,
    long_train: int = 0,
    long_val: int = 0,
    long_words: int = 0,
    gold: str | None = None,
) -> tuple[list[Any], list[Any]]:
    """Questions on two copies of the test database (two db_ids, so ReToolSQL's retriever
    has shots from another database); ``long_*`` of them carry an evidence of
    ``long_words`` words, which pushes their prompt past the length limit. ``gold``: the
    gold SQL (default: the project design's ``GOLD`` entry)."""
    from agents.types import Example

    dbs = [
        make_db(root / f"{name}.sqlite") if not (root / f"{name}.sqlite").exists() else root / f"{name}.sqlite"
        for name in ("schools", "district")
    ]
    long_text = " ".join(["enrollment"] * long_words)

    def make(prefix: str, i: int, long: bool) -> Example:
        db = dbs[i % 2]
        return Example(
            id=f"{prefix}{i}",
            db_id=db.stem,
            db_path=str(db),
            gold_sql=gold if gold is not None else GOLD[recipe],
            question=f"How many schools are in Fresno? (variant {prefix}{i})",
            evidence=long_text if long else "",
        )

    train = [make("t", i, i >= n_train - long_train) for i in range(n_train)]
    val = [make("v", i, i >= n_val - long_val) for i in range(n_val)]
    return train, val


def project_config(recipe: str, run_dir: Path, overrides: list[str]) -> Any:
    """The typed project config for ``recipe`` with engine=verl, as ``training.run`` builds it."""
    from training.config import TrainConfig, compose_tree

    tree = compose_tree("config", [f"recipe={recipe}", "engine=verl", f"run_dir={run_dir}", *overrides])
    return TrainConfig.from_mapping(tree)


TEST_VERL = [
    f"+verl.trainer.n_gpus_per_node={DP}",
    "+verl.actor_rollout_ref.rollout.full_determinism=true",  # the sticky request id reaches the server
    "+verl.actor_rollout_ref.rollout.agent.num_workers=1",
    "+verl.reward.num_workers=1",
    "+verl.data.dataloader_num_workers=0",
    "+verl.trainer.log_val_generations=0",
]
"""veRL settings of this machine, not of the recipe: two simulated ranks, one agent-loop
and one reward worker, no dataloader subprocesses, sessions addressable by the server."""


def verl_config(
    recipe: str, run_dir: Path, model_dir: Path, train: list[Any], val: list[Any], overrides: list[str]
) -> Any:
    """Project config -> veRL config (the verl engine's own mapping) and its prompt files."""
    from training.engines.verl.config.data_files import data_files, write_prompt_file
    from training.engines.verl.config.translate import verl_config_for

    cfg = project_config(recipe, run_dir, [*TEST_VERL, *overrides])
    verl_cfg = verl_config_for(cfg, model_path=str(model_dir), num_train_examples=len(train))
    train_file, val_file = data_files(run_dir)
    write_prompt_file(train, train_file)
    write_prompt_file(val, val_file)
    with open_dict(verl_cfg):
        verl_cfg.transfer_queue.enable = True  # as TaskRunnerV1.run sets it
        verl_cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
    OmegaConf.resolve(verl_cfg)
    return verl_cfg


def env_for_workers(repo: Path, cache: Path) -> dict[str, str]:
    """Environment of the Ray workers: the project importable (with whatever else this
    process's ``PYTHONPATH`` holds: the outside-design test's site directory), caches in the
    test's temp dir."""
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(repo)]
    return {
        "PYTHONPATH": os.pathsep.join([str(repo), *inherited]),
        "SQLAGENT_RL_CACHE": str(cache),
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "VERL_LOGGING_LEVEL": os.environ.get("VERL_LOGGING_LEVEL", "WARN"),
    }


NO_PRESTART = {"prestart_worker_first_driver": False, "enable_worker_prestart": False}
"""Ray starts one idle worker per CPU for tasks by default; the fit tier runs actors only,
each in a worker of its own, so those idle workers were interpreters started for nothing
(9 of 65 s of a TRUST-SQL module alone, more on two busy cores)."""


@dataclass
class Runtime:
    """What the fit tier's modules in one process share: Ray, TransferQueue, the
    generation server (with veRL's load balancer) and veRL's reward workers."""

    pythonpath: str
    servers: TinyServerManager
    rewards: Any
    saved_env: dict[str, str | None]  # this process's values before the runtime set the workers' ones


_RUNTIME: Runtime | None = None
_CURRENT: FitSession | None = None


def start_session(
    recipe: str,
    root: Path,
    base: Any,
    writers: dict[str, str],
    wrong: dict[str, list[str]] | None = None,
    script: dict[str, list[str]] | None = None,
    client_cls: Any = None,
) -> FitSession:
    """A module's session: the process's :class:`Runtime` (started on first use, or again
    when the workers need another ``PYTHONPATH``), its server reset to this module's config
    and script, TransferQueue emptied, and veRL's agent-loop manager for ``base`` (its
    workers hold the recipe's settings).
    ``script``: the server's scripted turns per role (default: the project design's ``SCRIPTS`` entry);
    ``client_cls``: the agent loops' LLM client (default veRL's ``LLMServerClient``, the sync trainer's)."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    global _CURRENT
    script = script if script is not None else SCRIPTS[recipe]
    runtime = _runtime(root, base, script, writers, wrong)
    clear_transfer_queue()
    agent_loops = AgentLoopManagerTQ.create(
        config=base,
        llm_client=runtime.servers.get_client(client_cls),
        teacher_client=None,
        reward_loop_worker_handles=runtime.rewards.reward_loop_worker_handles,
    )
    model_dir = Path(base.actor_rollout_ref.model.path)
    _CURRENT = FitSession(recipe, root, model_dir, base, runtime.servers, runtime.rewards, agent_loops)
    return _CURRENT


def stop_session() -> None:
    """The module is done: its agent-loop workers end and TransferQueue is emptied; the
    runtime stays for the next module (:func:`release_runtime` ends it)."""
    global _CURRENT
    if _CURRENT is None:
        return
    try:
        for worker in _CURRENT.agent_loops.agent_loop_workers:
            ray.kill(worker)
        clear_transfer_queue()
    finally:
        _CURRENT = None


def _runtime(
    root: Path, base: Any, script: dict[str, list[str]], writers: dict[str, str], wrong: dict[str, list[str]] | None
) -> Runtime:
    """Each new Ray actor imports veRL (about 9 s of CPU), so the server, its load balancer,
    the reward worker and TransferQueue's actors are started once per process."""
    import transfer_queue as tq
    from verl.experimental.reward_loop import RewardLoopManager

    global _RUNTIME
    env = env_for_workers(REPO, root / "cache")
    if _RUNTIME is not None and _RUNTIME.pythonpath == env["PYTHONPATH"]:
        _RUNTIME.servers.reconfigure(base, script, writers, wrong)
        return _RUNTIME
    release_runtime()
    driver_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    saved_env = {k: os.environ.get(k) for k in [*driver_env, "VERL_FILE_LOGGER_PATH"]}  # run_fit sets the last
    os.environ.update(driver_env)
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        log_to_driver=False,
        _system_config=NO_PRESTART,
    )
    one_rank_process_group()
    tq.init(base.transfer_queue)
    servers = TinyServerManager(base, script, writers, wrong)
    rewards = RewardLoopManager(config=base, rm_resource_pool=None)
    _RUNTIME = Runtime(env["PYTHONPATH"], servers, rewards, saved_env)
    return _RUNTIME


def release_runtime() -> None:
    """End the process's runtime (the next module that is not of the fit tier, and the
    end of the test session, call this)."""
    import torch.distributed as dist
    import transfer_queue as tq

    global _RUNTIME
    stop_session()
    if _RUNTIME is None:
        return
    runtime, _RUNTIME = _RUNTIME, None
    for key, value in runtime.saved_env.items():  # later tests (and their subprocesses) see the usual cache
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    try:
        tq.close()
    finally:
        ray.shutdown()
        if dist.is_initialized():
            dist.destroy_process_group()


def clear_transfer_queue() -> None:
    """Remove every key of every partition."""
    import transfer_queue as tq

    for partition, items in (tq.kv_list() or {}).items():
        if items:
            tq.kv_clear(keys=list(items), partition_id=partition)


def run_fit(session: FitSession, config: Any, before_fit: Any = None, trainer_cls: Any = None) -> Any:
    """``TaskRunnerV1.run`` without its TransferQueue set-up (the module's session holds it);
    ``before_fit(trainer)`` sees the trainer after ``init()`` (e.g. the resumed weights);
    ``trainer_cls``: a :class:`CpuSetup` trainer (default :class:`CpuTrainer`)."""
    os.environ["VERL_FILE_LOGGER_PATH"] = str(Path(config.sqlagent.run_dir) / "verl_metrics.jsonl")
    trainer = (trainer_cls or CpuTrainer)(config=config)
    trainer.session = session
    trainer.init()
    if before_fit is not None:
        before_fit(trainer)
    succeeded = False
    try:
        trainer.fit(session.agent_loops)
        succeeded = True
    finally:
        tracking = getattr(trainer, "logger", None)
        if tracking is not None:
            tracking.finish(exit_code=0 if succeeded else 1)
    session.runs.append(trainer)
    return trainer


def with_changes(config: Any, changes: dict[str, Any]) -> Any:
    """A copy of ``config`` with dotted keys changed (trainer-side settings of one run)."""
    out = OmegaConf.create(OmegaConf.to_container(config, resolve=True))
    with open_dict(out):
        for key, value in changes.items():
            OmegaConf.update(out, key, value, merge=False, force_add=True)
    return out


def verl_records(run_dir: Path) -> list[dict[str, Any]]:
    """veRL's ``{"step", "data"}`` records from the run's ``verl_metrics.jsonl``."""
    path = Path(run_dir) / "verl_metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def step_metrics(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Training-step records (they carry ``training/global_step``) by step."""
    return {int(r["step"]): r["data"] for r in verl_records(run_dir) if "training/global_step" in r["data"]}


def fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
