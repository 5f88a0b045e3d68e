"""Multi-node checks for ``engine=verl`` (``trainer.nnodes`` > 1), run before veRL starts.

On several nodes four things break silently or late, so they are checked here, through
the real Ray cluster the job will use:

1. **The project on every node.** Each node's Ray workers must import this project's
   ``verl.plugins`` entry point (``sqlagent_rl``) - veRL swallows a failed plugin import
   and later fails with "Agent loop sqlagent not registered" minutes into the run. A
   tiny task pinned to *every* alive node (``NodeAffinitySchedulingStrategy``, no CPU
   reserved) loads the entry point and resolves the agent-loop class and the trainer
   class from veRL's registries there; a failure names the node.
2. **Enough nodes.** Fewer alive nodes than ``trainer.nnodes`` would leave veRL waiting
   for placement groups forever.
3. **Shared storage.** The same probe checks that every node sees the databases, the run
   directory and the tool caches: each shared directory gets a marker file with a random
   token, which every node must read back (a same-named local directory is not enough),
   and every database file and built cache file must exist there.
4. **Built caches** (``python -m tools build-cache``): with ``trainer.nnodes`` > 1 a
   database whose profile and indexes are not built would be built by hundreds of rollout
   workers at step 1; ``engine.cache_check`` refuses (default), warns, or skips.

The cache root (``$SQLAGENT_RL_CACHE``) is passed to every worker through Ray's runtime
environment (:func:`worker_env`), so the workers read the cache the driver checked.

    python -m training.cluster recipe=<name> data=bird data.root=/shared/bird hardware=h100x8 \
        hardware.nnodes=2
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tools.cache import CACHE_ENV, cache_root
from tools.errors import ConfigError

Say = Callable[[str], None]
PLUGIN_ENTRY_POINT = "sqlagent_rl"
MARKER_PREFIX = ".sqlagent-node-check-"
CACHE_CHECKS = ("refuse", "warn", "off")


def worker_env() -> dict[str, str]:
    """Environment every Ray worker needs to share the driver's tool caches."""
    return {CACHE_ENV: str(cache_root().resolve())}


# ----------------------------------------------------------------------------- on each node


def probe_node(paths: Sequence[str], markers: dict[str, str], cache_files: Sequence[str]) -> dict[str, Any]:
    """Run on one node: the project's plugin, agent loop and trainer resolve; shared files
    are visible. Returns the node's identity and a list of problems (empty when fine)."""
    import ray

    problems: list[str] = []
    node = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "host": socket.gethostname(),
        "ip": ray.util.get_node_ip_address(),
        "python": sys.executable,
        "cache_root": str(cache_root()),
        "problems": problems,
    }
    problems += _plugin_problems()
    missing = [p for p in paths if not os.path.exists(p)]
    if missing:
        problems.append(
            f"{len(missing)} of {len(paths)} database/run files are not visible here, e.g. {missing[0]} "
            "(put them on storage every node mounts at the same path)"
        )
    for folder, token in markers.items():
        try:
            seen = (Path(folder) / f"{MARKER_PREFIX}{token}").read_text() == token
        except OSError:
            seen = False
        if not seen:
            problems.append(
                f"{folder} is not the driver's directory here (a marker written there by the driver "
                "is absent): put it on shared storage, mounted at the same path on every node"
            )
    root = cache_root()
    absent = [f for f in cache_files if not (root / f).exists()]
    if absent:
        problems.append(
            f"{len(absent)} of {len(cache_files)} built cache files are missing under {root} "
            f"(${CACHE_ENV} here: {os.environ.get(CACHE_ENV)!r}), e.g. {absent[0]}: set {CACHE_ENV} to "
            "the shared cache directory on every node"
        )
    return node


def _plugin_problems() -> list[str]:
    """What stops veRL from finding this project's agent loop and trainer on this node."""
    from importlib.metadata import entry_points

    from training.engines.verl.shared import AGENT_LOOP_NAME, TRAINER_MODE

    found = [ep for ep in entry_points(group="verl.plugins") if ep.name == PLUGIN_ENTRY_POINT]
    if not found:
        return [
            f"the verl.plugins entry point {PLUGIN_ENTRY_POINT!r} is not installed for {sys.executable}: "
            "run `pip install -e .` (or install the same wheel) on this node, in the environment `ray start` "
            "ran from"
        ]
    try:
        import hydra.utils
        import verl  # noqa: F401  (loads the plugins exactly as veRL's own workers do)
        from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
        from verl.trainer.ppo.v1 import get_trainer_cls
    except Exception as err:  # any import failure on a node is what this probe reports
        return [f"veRL does not import: {type(err).__name__}: {err}"]
    problems = []
    entry = _agent_loop_registry.get(AGENT_LOOP_NAME)
    if entry is None:  # veRL logs a failed plugin import at debug level only: say why
        try:
            found[0].load()
            why = (
                f"VERL_USE_EXTERNAL_PLUGINS={os.environ.get('VERL_USE_EXTERNAL_PLUGINS', 'auto')!r} here; "
                "unset it or list sqlagent_rl in it"
            )
        except Exception as err:  # the plugin's own import error, reported with the node
            why = f"importing the plugin fails: {type(err).__name__}: {err}"
        return [
            f"veRL did not load the {PLUGIN_ENTRY_POINT!r} plugin, so its agent-loop registry has no "
            f"{AGENT_LOOP_NAME!r} ({why})"
        ]
    else:
        try:
            hydra.utils.get_class(entry["_target_"])
        except Exception as err:  # hydra raises ImportError wrapped in its own errors
            problems.append(f"the agent loop class {entry['_target_']} does not resolve: {err}")
    try:
        get_trainer_cls(TRAINER_MODE)
    except ValueError as err:
        problems.append(f"veRL's trainer registry: {err}")
    return problems


# ----------------------------------------------------------------------------- from the driver


def check_nodes(
    nnodes: int,
    paths: Iterable[str] = (),
    shared_dirs: Iterable[str] = (),
    cache_files: Sequence[str] = (),
    timeout_s: float = 180.0,
    say: Say = print,
) -> list[dict[str, Any]]:
    """Probe every alive node of the connected Ray cluster (``ray.init`` done by the
    caller); raise ``ConfigError`` naming each node with a problem, or too few nodes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    if len(nodes) < nnodes:
        raise ConfigError(
            f"trainer.nnodes={nnodes} but the Ray cluster has {len(nodes)} alive node(s): start the head with "
            "`ray start --head --port=6379` and each other node with `ray start --address=<head ip>:6379`, "
            "then launch on the head (or set RAY_ADDRESS)"
        )
    markers = _write_markers(shared_dirs)
    try:
        probe = ray.remote(num_cpus=0)(probe_node)
        futures = {
            probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(
                list(paths), markers, list(cache_files)
            ): n
            for n in nodes
        }
        ready, pending = ray.wait(list(futures), num_returns=len(futures), timeout=timeout_s)
        reports, failures = [], []
        for future in pending:
            failures.append(
                f"{_name(futures[future])}: no answer within {timeout_s:.0f} s (is the node busy or unreachable?)"
            )
        for future in ready:
            try:
                report = ray.get(future)
            except Exception as err:  # the task could not even run there (e.g. the project is not importable)
                failures.append(
                    f"{_name(futures[future])}: the check could not run: {type(err).__name__}: "
                    f"{str(err).strip().splitlines()[-1] if str(err).strip() else err}"
                )
                continue
            reports.append(report)
            failures += [f"{_name(futures[future])}: {p}" for p in report["problems"]]
    finally:
        _remove_markers(markers)
    if failures:
        raise ConfigError("multi-node check failed:\n  " + "\n  ".join(failures))
    say(
        f"[cluster] {len(reports)} node(s) checked: the sqlagent_rl plugin, agent loop and trainer resolve on each; "
        f"{len(list(paths))} database/run files, {len(markers)} shared directories and {len(cache_files)} cache "
        "files visible everywhere"
    )
    return reports


def _name(node: dict[str, Any]) -> str:
    resources = {k: v for k, v in node.get("Resources", {}).items() if not k.startswith(("node:", "object_store"))}
    return (
        f"node {node.get('NodeManagerAddress')} ({node.get('NodeManagerHostname')}, id {node['NodeID'][:12]}, "
        f"resources {resources})"
    )


def _write_markers(folders: Iterable[str]) -> dict[str, str]:
    markers = {}
    for folder in dict.fromkeys(str(Path(f).resolve()) for f in folders):
        token = secrets.token_hex(8)
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / f"{MARKER_PREFIX}{token}").write_text(token)
        markers[folder] = token
    return markers


def _remove_markers(markers: dict[str, str]) -> None:
    for folder, token in markers.items():
        (Path(folder) / f"{MARKER_PREFIX}{token}").unlink(missing_ok=True)


def check_cache(db_paths: Iterable[str], policy: str, say: Say = print) -> list[str]:
    """``engine.cache_check``: refuse / warn when a training database's caches are not built."""
    from tools.build_cache import missing

    if policy not in CACHE_CHECKS:
        raise ConfigError(f"engine.cache_check={policy!r}; choose refuse, warn or off")
    if policy == "off":
        return []
    absent = missing(db_paths)
    if absent:
        message = (
            f"{len(absent)} training database(s) have no built tool caches under {cache_root()} (e.g. "
            f"{absent[0]}): every rollout worker would build their profiles and indexes at step 1. Run "
            f"`python -m tools build-cache data=...` with the same data overrides (and ${CACHE_ENV}) first, "
            "or pass engine.cache_check=warn|off"
        )
        if policy == "refuse":
            raise ConfigError(message)
        say(f"[cluster] warning: {message}")
    return absent


def prepare_multinode(cfg: Any, verl_cfg: Any, say: Say = print) -> None:
    """Before ``engine=verl`` launches: the cache root in every worker's environment; with
    ``trainer.nnodes`` > 1 the built-cache check (``engine.cache_check``) and the per-node
    check (``engine.node_check``) on the cluster veRL will join (``ray.init`` with the
    config's ``ray_init`` address, then disconnected so veRL starts its own session with
    its own runtime environment)."""
    from omegaconf import open_dict

    with open_dict(verl_cfg):
        runtime_env = verl_cfg.ray_kwargs.ray_init.runtime_env
        runtime_env.env_vars = {**(runtime_env.get("env_vars") or {}), **worker_env()}
    nnodes = int(verl_cfg.trainer.nnodes)
    if nnodes <= 1:
        return
    paths = training_databases(cfg)
    check_cache(paths, cfg.engine.cache_check, say)
    if cfg.engine.node_check:
        from tools.build_cache import manifest_files

        connect_and_check(
            nnodes,
            paths,
            [cfg.run_dir, str(cache_root())],
            manifest_files(paths),
            address=verl_cfg.ray_kwargs.ray_init.get("address"),
            say=say,
        )


def connect_and_check(
    nnodes: int,
    paths: Sequence[str],
    shared_dirs: Sequence[str],
    cache_files: Sequence[str],
    address: str | None = None,
    say: Say = print,
) -> list[dict[str, Any]]:
    """Join the running cluster (``address``, else ``RAY_ADDRESS`` or the one `ray start`
    recorded), probe every node, disconnect."""
    import ray

    if ray.is_initialized():
        return check_nodes(nnodes, paths, shared_dirs, cache_files, say=say)
    ray.init(address=address, runtime_env={"env_vars": worker_env()}, log_to_driver=False)
    try:
        return check_nodes(nnodes, paths, shared_dirs, cache_files, say=say)
    finally:
        ray.shutdown()


def run_checks(raw: dict[str, Any], explicit: set[str], say: Say = print) -> list[dict[str, Any]]:
    """``python -m training.cluster <training overrides>``: the launch's multi-node checks
    alone, on the running cluster (the same overrides as the training command)."""
    from tools.build_cache import manifest_files
    from training.config.command import prepare_config
    from training.engines.verl.config.translate import verl_config_for

    cfg = prepare_config({**raw, "engine": {**raw["engine"], "name": "verl"}}, explicit, say)
    verl_cfg = verl_config_for(cfg, num_train_examples=cfg.algorithm.batch_size)
    paths = training_databases(cfg)
    check_cache(paths, cfg.engine.cache_check, say)
    return connect_and_check(
        int(verl_cfg.trainer.nnodes),
        paths,
        [cfg.run_dir, str(cache_root())],
        manifest_files(paths),
        address=verl_cfg.ray_kwargs.ray_init.get("address"),
        say=say,
    )


def training_databases(cfg: Any) -> list[str]:
    """The database files of the training and held-out splits, as training loads them."""
    from eval.data import load_examples

    data = cfg.data
    paths: dict[str, None] = {}
    for split, limit in ((data.split, data.limit), (data.eval_split, data.eval_limit)):
        examples = load_examples(
            kind=data.kind, root=data.root, split=split, drop_failing_gold=data.drop_failing_gold, limit=limit
        )
        paths.update(dict.fromkeys(ex.db_path for ex in examples))
    return list(paths)
