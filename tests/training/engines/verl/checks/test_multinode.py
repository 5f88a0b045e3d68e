"""Multi-node on CPU: a real two-node Ray cluster on loopback (``ray.cluster_utils.Cluster``
starts a separate raylet per node; the second node carries a custom resource), the real
``verl.plugins`` entry point and veRL registries resolved by a task pinned to each node,
the tool caches built by ``python -m tools build-cache`` and seen from each node through
Ray tasks, and ``engine=verl``'s launch-time checks with ``trainer.nnodes=2``.

How far veRL itself goes: the composed and validated veRL config with ``trainer.nnodes=2``,
``import verl`` with its plugin discovery and the agent-loop / trainer registries in the
workers of both nodes. veRL's ``run_ppo`` is not started: its resource pool asks Ray for
``{'GPU': n_gpus_per_node}`` on every node and waits forever on CPU (docs/engines.md "The veRL engine").

The cluster lives in a private Ray temp directory (``RAY_TMPDIR``), so no other Ray user on
the machine can join it, and it is shut down (its own processes only) even on failure."""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tools.build_cache import build, manifest_files
from tools.cache import CACHE_ENV
from tools.errors import ConfigError
from training.engines.verl.checks import multinode as cl

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_ADDRESS")}
    tmp = tempfile.mkdtemp(prefix="sqr", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    os.environ["RAY_TMPDIR"] = tmp
    cache = str(Path(tmp) / "shared-cache")  # each node's own $SQLAGENT_RL_CACHE, as `ray start` would see it
    cluster = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "env_vars": {CACHE_ENV: cache}})
        cluster.add_node(num_cpus=1, resources={"second_node": 1}, env_vars={CACHE_ENV: cache})
        cluster.sqlagent_cache = cache
        os.environ["RAY_ADDRESS"] = cluster.address  # as `ray start --head` + RAY_ADDRESS on a real head
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def shared(ray_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Databases, a run directory and the nodes' cache root (all "shared": one machine)."""
    monkeypatch.setenv(CACHE_ENV, ray_cluster.sqlagent_cache)
    dbs = []
    for name in ("alpha", "beta"):
        path = tmp_path / "data" / f"{name}.sqlite"
        path.parent.mkdir(exist_ok=True)
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, city TEXT)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i, f"city {i}") for i in range(20)])
        conn.commit()
        conn.close()
        dbs.append(str(path))
    return {"dbs": dbs, "run_dir": str(tmp_path / "run"), "cache": ray_cluster.sqlagent_cache}


def test_every_node_resolves_the_plugin_and_sees_the_built_caches(ray_cluster: Any, shared: dict[str, Any]) -> None:
    import ray

    with pytest.raises(ConfigError, match="build-cache"):
        cl.check_cache(shared["dbs"], "refuse")
    notes: list[str] = []
    assert cl.check_cache(shared["dbs"], "warn", notes.append) == shared["dbs"] and "warning" in notes[0]
    build(shared["dbs"], progress=False, say=lambda _: None)
    assert cl.check_cache(shared["dbs"], "refuse") == []

    files = manifest_files(shared["dbs"])
    said: list[str] = []
    reports = cl.connect_and_check(2, shared["dbs"], [shared["run_dir"], shared["cache"]], files, say=said.append)
    assert not ray.is_initialized()  # disconnected again: veRL's run_ppo starts its own session
    node_ids = {
        n.node_id.hex() if hasattr(n.node_id, "hex") else n.node_id
        for n in [ray_cluster.head_node, *ray_cluster.worker_nodes]
    }
    assert {r["node_id"] for r in reports} == node_ids and len(node_ids) == 2
    assert all(r["problems"] == [] and r["cache_root"] == shared["cache"] for r in reports)
    assert "2 node(s) checked" in said[0] and f"{len(files)} cache files" in said[0]
    assert not list(Path(shared["run_dir"]).glob(f"{cl.MARKER_PREFIX}*"))  # markers removed

    with pytest.raises(ConfigError, match=r"trainer.nnodes=3 but the Ray cluster has 2 alive node\(s\)"):
        cl.connect_and_check(3, shared["dbs"], [], [])


def test_a_node_without_the_plugin_or_the_shared_cache_is_named(
    ray_cluster: Any, shared: dict[str, Any], tmp_path: Path
) -> None:
    import ray

    build(shared["dbs"], progress=False, say=lambda _: None)
    elsewhere = str(tmp_path / "node-local-cache")
    bad = ray_cluster.add_node(
        num_cpus=1, resources={"third_node": 1}, env_vars={"VERL_USE_EXTERNAL_PLUGINS": "none", CACHE_ENV: elsewhere}
    )
    bad_id = bad.node_id.hex() if hasattr(bad.node_id, "hex") else bad.node_id
    try:
        ray.init(address=ray_cluster.address, log_to_driver=False)  # no runtime env: each node's own cache setting
        with pytest.raises(ConfigError) as err:
            cl.check_nodes(3, shared["dbs"], [shared["cache"]], manifest_files(shared["dbs"]))
    finally:
        ray.shutdown()
        ray_cluster.remove_node(bad)
    message = str(err.value)
    lines = message.splitlines()[1:]
    assert len(lines) == 2 and all(bad_id[:12] in line and "third_node" in line for line in lines), message
    assert "VERL_USE_EXTERNAL_PLUGINS='none'" in message and "agent-loop registry has no 'sqlagent'" in message
    assert f"built cache files are missing under {elsewhere}" in message


def test_the_verl_launch_checks_a_two_node_config(ray_cluster: Any, shared: dict[str, Any], tmp_path: Path) -> None:
    import json

    from tests.helpers.local_trainer import config
    from tests.helpers.schools import QUESTIONS
    from training.engines.verl.config.translate import verl_config_for

    root = Path(shared["dbs"][0]).parent
    rows = [
        {"id": f"q{i}", "db_id": "alpha", "question": q, "sql": "SELECT COUNT(*) FROM t", "difficulty": "simple"}
        for i, (q, _, _, _) in enumerate(QUESTIONS)
    ]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    cfg = config(
        "think2sql",
        Path(shared["run_dir"]),
        "data=jsonl",
        f"data.root={root}",
        "engine=verl",
        "+verl.trainer.nnodes=2",
        "+verl.trainer.n_gpus_per_node=1",
    )
    verl_cfg = verl_config_for(cfg, num_train_examples=len(rows))
    assert verl_cfg.trainer.nnodes == 2
    with pytest.raises(ConfigError, match="no built tool caches"):  # engine.cache_check=refuse (the default)
        cl.prepare_multinode(cfg, verl_cfg, lambda _: None)
    build([shared["dbs"][0]], progress=False, say=lambda _: None)
    said: list[str] = []
    cl.prepare_multinode(cfg, verl_cfg, said.append)
    assert "2 node(s) checked" in said[-1]
    assert verl_cfg.ray_kwargs.ray_init.runtime_env.env_vars[CACHE_ENV] == shared["cache"]


def test_the_standalone_check_command(ray_cluster: Any, shared: dict[str, Any], tmp_path: Path) -> None:
    """``python -m training.cluster <the training overrides>`` on the running cluster."""
    import json
    import subprocess
    import sys

    root = Path(shared["dbs"][1]).parent
    row = {"id": "q0", "db_id": "beta", "question": "How many cities?", "sql": "SELECT COUNT(*) FROM t"}
    for split in ("train", "dev"):
        (root / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    build([shared["dbs"][1]], progress=False, say=lambda _: None)
    repo = Path(__file__).resolve().parents[5]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "training.cluster",
            "recipe=think2sql",
            "data=jsonl",
            f"data.root={root}",
            f"run_dir={shared['run_dir']}",
            "+verl.trainer.nnodes=2",
            "+verl.trainer.n_gpus_per_node=1",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        env=dict(os.environ, PYTHONPATH=str(repo), RAY_ADDRESS=ray_cluster.address),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 node(s) checked" in proc.stdout
