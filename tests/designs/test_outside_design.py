"""An outside design, installed for real: the Fence package of docs/writing_a_design.md.

The package is read FROM the page, so the page cannot drift from what is tested. The
format: every fenced code block of ``docs/writing_a_design.md`` whose info string carries
``title=<path>`` is one file of the package, at ``<path>`` relative to the package root::

    ```toml title=pyproject.toml
    ...
    ```

(a block whose file itself holds a fence is opened with four backticks and closed with the
same four). Exactly the files in ``PACKAGE_FILES`` must be there. They are written into a
temporary directory and installed with ``pip install --no-deps --no-build-isolation
--target SITE`` once per module into a site directory of its own: the fresh interpreters
the tests start get SITE on ``PYTHONPATH`` (and this process on ``sys.path`` while the
module runs), so the package is found exactly as an installed one, while parallel test
workers sharing this environment never see it. It is driven only through the real entry
points, each in a fresh interpreter:

- ``python -m agents list`` lists agent ``fence``; ``python -m tools fence_query`` runs the
  design's executor tool under its preset;
- ``python -m training.run recipe=fence dry_run=true`` composes the design's recipe (found
  on Hydra's search path through the ``Design`` record);
- one local training step on the tiny model: the warm start plays the design's
  demonstration script, the step's rewards are the fence reward's components;
- (slow) one step of veRL 0.9.1's real ``SqlAgentTrainer.fit()``, the CPU tier of
  ``tests/training/engines/verl/fit/`` (doubles for the FSDP worker group and the vLLM
  server only): the agent-loop and reward workers are Ray processes that know nothing of
  the design but find it through the entry points. This module is also that fit's child
  process (``python -m tests.designs.test_outside_design fit ROOT``); when the test is
  selected, the fixture starts the child right after the install, and it runs (mostly
  waiting on Ray) beside the fast tests, so the module takes about one fit's time;
- a broken entry point (a second tiny package naming a missing module) is a ``ConfigError``
  naming the entry point and its distribution.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tools.errors import ConfigError
from tools.plugins import DESIGN_GROUP, entry_points, forget_plugins, load_plugins

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "writing_a_design.md"
DISTRIBUTION = "fence-design"
PACKAGE_FILES = {
    "pyproject.toml",
    "fence_design/__init__.py",
    "fence_design/recipes/recipe/fence.yaml",
    "fence_design/README.md",
}
FILE_BLOCK = re.compile(
    r"^(?P<fence>`{3,})[^\n`]*\btitle=(?P<path>\S+)[^\n]*\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S
)
FIT_TEST = "test_one_verl_fit_step"
SITES: list[str] = []  # the site directories installed into, for the fresh interpreters' PYTHONPATH
COUNT_SQL = "SELECT COUNT(*) FROM schools WHERE city = 'Fresno'"  # tests/helpers/agent_db.py's, 2 rows

LOCAL_STEP = [
    "engine=local",
    "engine.device=cpu",
    "trainer.total_steps=1",
    "algorithm.group_size=2",
    "algorithm.batch_size=1",
    "data.limit=4",
    "data.eval_limit=2",
    "rollout.max_new_tokens=8",
    "stage.warm_start.examples=4",  # the laptop profile turns the warm start on: 4 demonstrations
    "stage.warm_start.eval_after=false",
    "trainer.eval_before_after=false",
    "logger=[console]",
]
FIT_OVERRIDES = [
    "algorithm.group_size=2",
    "algorithm.batch_size=2",
    "trainer.total_steps=1",
    "trainer.val_every=0",
    "trainer.eval_before_after=false",
    "agent.schema_format=compact",
    "rollout.max_prompt_tokens=1024",
    "rollout.max_response_tokens=256",
    "rollout.max_new_tokens=48",
    "optim.lr=1e-3",
    "optim.warmup_ratio=0.0",
    "logger=[]",
]


# ----------------------------------------------------------------------------- the package, from the page


def page_files(text: str) -> dict[str, str]:
    """``{path: contents}`` of the page's ``title=<path>`` code blocks."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer(text):
        path = match.group("path")
        assert path not in files, f"{PAGE.name} has two blocks titled {path}"
        files[path] = match.group("body")
    return files


def pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=300, check=False
    )


def install(package: Path, site: Path) -> None:
    """``pip install`` the package into ``site`` and put ``site`` on this process's path."""
    proc = pip("install", "--no-deps", "--no-build-isolation", "--no-input", "--target", str(site), str(package))
    if proc.returncode != 0:
        pytest.fail(f"pip install {package} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    forget_plugins(DESIGN_GROUP)  # this process's registries load the group afresh at their next lookup


def uninstall(site: Path) -> None:
    """Take ``site`` off this process's path (its folder goes with the test's temporary files)."""
    while str(site) in sys.path:
        sys.path.remove(str(site))
    forget_plugins(DESIGN_GROUP)
    importlib.invalidate_caches()


def child_env() -> dict[str, str]:
    """A fresh job's environment: the project importable, wandb offline and of its own."""
    path = os.pathsep.join([str(REPO), *SITES])
    env = dict(os.environ, PYTHONPATH=path, WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    for key in ("WANDB_SERVICE", "WANDB_RUN_ID", "WANDB_RESUME", "WANDB_DIR", "WANDB_RUN_GROUP", "WANDB_TAGS"):
        env.pop(key, None)
    return env


def python(*args: str, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=child_env(), capture_output=True, text=True, timeout=timeout, check=False
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"{proc.args}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


@dataclass
class Installed:
    """The installed package's directory, and the veRL fit started in the background for it."""

    root: Path
    fit_dir: Path | None = None
    fit: subprocess.Popen | None = None

    def wait_for_fit(self, timeout: float) -> int | None:
        """The fit's exit status once it ended (None: no fit was started)."""
        return None if self.fit is None else self.fit.wait(timeout=timeout)


def start_fit(root: Path) -> subprocess.Popen:
    """``python -m tests.designs.test_outside_design fit ROOT`` in a session of its own (so
    what it starts, Ray included, can be ended with it); output in ROOT/fit.{out,err}."""
    with open(root / "fit.out", "w") as out, open(root / "fit.err", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.designs.test_outside_design", "fit", str(root)],
            cwd=root,
            env=child_env(),
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


@pytest.fixture(scope="module")
def fence(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    """The page's package, written out and installed (editable) for this module only. When
    the veRL fit test is selected, its child process starts here, right after the install:
    it mostly waits on Ray, so it runs while the other tests do."""
    root = tmp_path_factory.mktemp("fence-design")
    files = page_files(PAGE.read_text(encoding="utf-8"))
    assert set(files) == PACKAGE_FILES, f"{PAGE.name}'s title= blocks: {sorted(files)}"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    site = tmp_path_factory.mktemp("fence-site")
    install(root, site)
    SITES.append(str(site))
    package = Installed(root)
    try:
        if any(item.nodeid.endswith(f"{Path(__file__).name}::{FIT_TEST}") for item in request.session.items):
            package.fit_dir = tmp_path_factory.mktemp("fence-fit")
            package.fit = start_fit(package.fit_dir)
        yield package
    finally:
        if package.fit is not None and package.fit.poll() is None:  # the fit test did not wait for it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(package.fit.pid, signal.SIGKILL)
            package.fit.wait(timeout=60)
        SITES.remove(str(site))
        uninstall(site)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_tokenizer().save_pretrained(folder)
    tiny_model().save_pretrained(folder)
    return folder


# ----------------------------------------------------------------------------- the tests


@pytest.mark.slow
def test_the_installed_entry_point_is_the_pages(fence: Installed) -> None:
    found = {ep.name: ep for ep in entry_points(DESIGN_GROUP)}
    assert found["fence"].value == "fence_design:design"
    assert found["fence"].dist is not None and found["fence"].dist.name == DISTRIBUTION
    assert {"retoolsql", "think2sql", "trustsql", "dualsql"} <= set(found)  # the project's own, beside it


@pytest.mark.slow
def test_agents_list_and_the_design_tool(fence: Installed, tmp_path: Path) -> None:
    from tests.helpers.agent_db import make_db

    listed = ok(python("-m", "agents", "list", cwd=tmp_path))
    assert "fence: schema_format='ddl'" in listed.splitlines()
    db = make_db(tmp_path / "schools.sqlite")
    many = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30) SELECT i FROM n"
    result = json.loads(ok(python("-m", "tools", "fence_query", "--db", str(db), "--sql", many, cwd=tmp_path)))
    assert len(result["rows"]) == 20 and result["truncated"] is True  # the preset "fence": 20 rows
    counted = json.loads(ok(python("-m", "tools", "fence_query", "--db", str(db), "--sql", COUNT_SQL, cwd=tmp_path)))
    assert counted["rows"] == [[2]]


@pytest.mark.slow
def test_the_recipe_composes(fence: Installed, tmp_path: Path) -> None:
    args = ["recipe=fence", "dry_run=true", "engine=local", "engine.device=cpu", "reward.w_fence=0.2"]
    text = ok(python("-m", "training.run", *args, cwd=tmp_path))
    cfg = yaml.safe_load(text[text.index("# effective configuration") :])
    assert cfg["recipe_name"] == "fence" and cfg["run_dir"] == "runs/fence"
    assert cfg["agent"] == {"name": "fence", "schema_format": "compact"}  # the laptop profile's schema format
    # the recipe's own values; the command line wins over them
    assert cfg["reward"] == {"name": "fence", "exec_metric": "ex", "w_exec": 0.9, "w_fence": 0.2}
    assert cfg["gpu_backbone"] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert list(tmp_path.iterdir()) == []  # a dry run writes nothing


@pytest.mark.slow
def test_one_local_training_step(fence: Installed, tiny_model_dir: Path, tmp_path: Path) -> None:
    console = ok(
        python(
            "-m", "training.run", "recipe=fence", "model=hf", f"model.path={tiny_model_dir}", *LOCAL_STEP, cwd=tmp_path
        )
    )
    assert "[summary] fence: 1 steps." in console
    assert "4/4 training questions demonstrated in the fence protocol" in console  # the design's script, kept
    run_dir = tmp_path / "runs" / "fence"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    (train,) = [r for r in records if r["kind"] == "train"]
    assert train["step"] == 1
    rewards = {k for k in train if k.startswith("reward/")}
    assert {"reward/exec", "reward/fenced", "reward/total"} <= rewards and "reward/format" not in rewards
    config = next(r for r in records if r["kind"] == "config")["config"]
    assert config["agent"]["name"] == "fence" and config["reward"]["name"] == "fence"
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    assert samples and all(s["design"] == "fence" and set(s["components"]) == {"exec", "fenced"} for s in samples)
    # the random tiny model writes no fence: the agent's own verdict, from the installed module
    assert all("does not open with a ```sql block" in s["turns"][0]["format_reason"] for s in samples)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["recipe"] == "fence" and summary["warm_start"]["demonstrations"] == 4


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_one_verl_fit_step(fence: Installed) -> None:
    """veRL's real ``fit()`` (CPU tier) for one step of recipe=fence, in a child process
    (started by the ``fence`` fixture): session 0 of each question writes the design's
    demonstration, session 1 samples from the tiny model."""
    assert fence.fit is not None and fence.fit_dir is not None
    status = fence.wait_for_fit(timeout=840)
    out, err = ((fence.fit_dir / f"fit.{kind}").read_text() for kind in ("out", "err"))
    assert status == 0, f"the fit child exited {status}\n{out[-3000:]}\n{err[-6000:]}"
    assert "[fence fit] ended at step 1" in out
    run_dir = fence.fit_dir / "run"
    verl = [json.loads(line) for line in (run_dir / "verl_metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = {r["step"]: r["data"] for r in verl if "training/global_step" in r["data"]}
    assert sorted(steps) == [1]
    assert steps[1]["sqlagent/agent/component/fenced"] == 0.5  # half the sessions wrote the fence
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in records if r.get("kind") == "train" and "reward/fenced" in r] == [1]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines() if line.strip()]
    assert samples and all(s["step"] == 1 and s["design"] == "fence" for s in samples)
    # scored by the fence reward in veRL's agent-loop worker, a Ray process that found it by its entry point
    assert all(set(s["components"]) == {"exec", "fenced"} for s in samples)
    scripted = [s for s in samples if s["final_sql"] == COUNT_SQL]
    assert scripted and all(s["components"] == {"exec": 1.0, "fenced": 1.0} for s in scripted)
    assert all(s["reward"] == pytest.approx(1.0) for s in scripted)  # 0.9 x EX + 0.1 x fenced
    sampled = [s for s in samples if s not in scripted]
    assert sampled and all(s["components"]["fenced"] == 0.0 for s in sampled)


@pytest.mark.slow
def test_a_broken_entry_point_names_itself(fence: Installed, tmp_path: Path) -> None:
    """A package whose design entry point names a missing module: every lookup of the group
    says which entry point, of which distribution, failed and why."""
    broken = tmp_path / "broken-design"
    broken.mkdir()
    (broken / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "broken-design"\nversion = "0.1.0"\n\n'
        '[project.entry-points."sqlagent_rl.designs"]\nbroken = "broken_design_missing:design"\n\n'
        "[tool.setuptools]\npy-modules = []\n"
    )
    site = tmp_path / "broken-site"
    install(broken, site)
    SITES.append(str(site))
    try:
        with pytest.raises(ConfigError) as err:
            load_plugins(DESIGN_GROUP)  # "broken" is the group's first entry point: nothing else is imported
        message = str(err.value)
        assert "plugin 'broken' = 'broken_design_missing:design'" in message
        assert "(distribution broken-design)" in message and "ModuleNotFoundError" in message
        proc = python("-m", "training.run", "recipe=fence", "dry_run=true", cwd=tmp_path)
        assert proc.returncode == 2 and "error: plugin 'broken' = 'broken_design_missing:design'" in proc.stderr
    finally:
        SITES.remove(str(site))
        uninstall(site)


# ----------------------------------------------------------------------------- the fit's child process


def fit_child(root: Path) -> int:
    """One veRL ``fit()`` step of recipe=fence through the fit tier's harness."""
    from tests.training.engines.verl.fit import harness as H
    from training.supervised.demonstrations import get_script

    # the harness's questions ask for this count on its test database
    train, val = H.examples(root, "fence", n_train=2, n_val=1, gold=COUNT_SQL)
    script = {"agent": get_script("fence")(train[0], "agent", 1)}  # the server's "script" writer
    config = H.verl_config("fence", root / "run", H.tiny_model_dir(root), train, val, FIT_OVERRIDES)
    config = H.with_changes(
        config, {"trainer.val_before_train": False, "sqlagent.eval_after": False, "sqlagent.final_dir": None}
    )
    session = H.start_session("fence", root, config, writers={"0": "script", "1": "sample"}, script=script)
    try:
        trainer = H.run_fit(session, config)
        print(f"[fence fit] ended at step {trainer.global_steps}", flush=True)
    finally:
        H.release_runtime()
    return 0


def _main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "fit":
        return fit_child(Path(argv[1]))
    print("usage: python -m tests.designs.test_outside_design fit ROOT", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
