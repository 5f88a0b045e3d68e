"""The veRL launch builds the test suites before Ray starts when the reward (and so dynamic
sampling and validation, which score with it) uses ``reward.exec_metric=test_suite``: the
reward workers then only load them. On the bundled minibird benchmark, on CPU."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from training.config import TrainConfig, compose_tree
from training.engines.verl import launch as L

SIZES = (
    "algorithm.batch_size=2",
    "algorithm.group_size=4",
    "data.limit=3",
    "data.eval_limit=2",
    "rollout.max_prompt_tokens=1024",
    "rollout.max_response_tokens=2048",
    "logger=[]",
)


@pytest.fixture
def prepared_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path, Path]]:
    """(the minibird root, a tiny model directory, a fresh cache root for the suites)."""
    from eval.data.minibird.builder import ensure
    from rex.test_suite.suites import forget_loaded
    from tests.helpers.tiny_model import tiny_model, tiny_tokenizer

    root = ensure()  # the bundled build in the usual cache
    model = tmp_path / "policy"
    tiny_tokenizer().save_pretrained(model)
    tiny_model().save_pretrained(model)
    for key in ("VERL_FILE_LOGGER_PATH", "WANDB_MODE"):
        monkeypatch.setenv(key, "restored-after-test")
    monkeypatch.setenv("SQLAGENT_RL_CACHE", str(tmp_path / "cache"))
    forget_loaded()
    yield root, model, tmp_path / "cache"
    forget_loaded()


def project_config(run: Path, root: Path, model: Path, *extra: str) -> TrainConfig:
    overrides = ["recipe=trustsql", "engine=verl", f"run_dir={run}", f"model.path={model}", f"data.root={root}"]
    return TrainConfig.from_mapping(compose_tree("config", [*overrides, *SIZES, *extra]))


@pytest.mark.slow
def test_prepare_builds_the_suites_of_training_and_validation_questions(
    prepared_inputs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    from eval.data import load_from_config
    from rex.test_suite import find_suites
    from rex.test_suite.build import SuiteSettings, gold_digest
    from tools import get_database

    root, model, cache = prepared_inputs
    cfg = project_config(tmp_path / "run", root, model, "reward.exec_metric=test_suite")
    said: list[str] = []
    verl_cfg, _ = L.prepare(cfg, say=said.append, check_devices=False)
    assert verl_cfg.sqlagent.exec_metric == "test_suite"  # what the reward workers score with
    examples = [*load_from_config(cfg.data, "train"), *load_from_config(cfg.data, "eval")]
    databases = {ex.db_path for ex in examples}
    (line,) = [s for s in said if "test suites for reward.exec_metric=test_suite" in s]
    assert f"{len(databases)} built, 0 cached" in line and str(cache) in line
    for path in databases:
        (suite,) = find_suites(get_database(path), SuiteSettings())  # one per database, in the shared cache
        golds = {ex.gold_sql for ex in examples if ex.db_path == path}
        assert set(gold_digest(sorted(golds))) <= suite.golds  # chosen for its training and validation golds
        assert suite.neighbours and suite.folder.parent == cache / "test_suites"


@pytest.mark.slow
def test_other_execution_metrics_build_no_suite(prepared_inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    root, model, cache = prepared_inputs
    said: list[str] = []
    L.prepare(project_config(tmp_path / "run", root, model), say=said.append, check_devices=False)
    assert not any("test suites" in s for s in said)
    assert not (cache / "test_suites").exists()
