"""The veRL SFT path on CPU: veRL's own ``create_sft_dataset`` loads our custom dataset class
from the composed config, reads the dataset stage's files, and emits exactly the rollout
driver's token ids and loss masks; ``dry_run=true`` composes it for all four designs.
Also ``eval.run`` scoring an OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from eval.data import load_examples
from tests.helpers.designs import project_designs
from tests.helpers.fake_openai import FakeOpenAI
from tests.helpers.local_trainer import config
from tests.helpers.schools import ScriptedPolicy, make_db, school_rows
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tests.training.generation.test_sources import teacher_reply
from training.engines.local.trainer import TrainerInputs
from training.engines.verl import sft as verl_sft
from training.supervised.chain import run_stage

RECIPES = project_designs()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL dataset (train + dev) beside its SQLite file, as users bring their own."""
    root = tmp_path_factory.mktemp("jsonl")
    make_db(root / "schools.sqlite")
    rows = school_rows()
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    return root


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tok")
    tiny_tokenizer().save_pretrained(out)
    return out


def data_config(recipe: str, run_dir: Path, root: Path, *extra: str) -> Any:
    return config(
        recipe,
        run_dir,
        "data=jsonl",
        f"data.root={root}",
        "stage=data",
        "supervised.chain=mine",
        "supervised.samples=1",
        # the SFT questions' own dataset (TRUST-SQL's recipe names SynSQL-2.5M): the replay reads it
        f"supervised.data={{kind:jsonl,root:'{root}',difficulties:null}}",
        "trainer.eval_before_after=false",
        *extra,
    )


@pytest.mark.parametrize("recipe", RECIPES)
def test_verl_sft_dataset_emits_the_rollout_drivers_ids_and_masks(
    recipe: str, tmp_path: Path, data_root: Path, tokenizer_dir: Path
) -> None:
    from verl.trainer.sft_trainer import create_sft_dataset

    from tools import get_database
    from training.rollout import SamplingParams, run_episodes

    cfg = data_config(recipe, tmp_path, data_root)
    examples = load_examples("jsonl", data_root, "train")
    policy = ScriptedPolicy(recipe, examples, always_good=True)
    inputs = TrainerInputs(model=tiny_model(seed=1), tokenizer=tiny_tokenizer(), generate=policy)
    summary = run_stage(cfg, inputs, lambda _: None)
    assert summary["rows"] == len(examples)
    if recipe == "think2sql":
        _datasets_reads_the_files(tmp_path / "supervised" / "dataset", len(examples), tmp_path / "hf_cache")
    # what the rollout driver produced for the same (deterministic) policy: the reference
    trainer_agent = _agent(cfg, examples)
    requests = [(ex, get_database(ex.db_path), 0) for ex in examples]
    expected = run_episodes(
        trainer_agent,
        requests,
        tiny_tokenizer(),
        ScriptedPolicy(recipe, examples, True),
        SamplingParams(temperature=1.0, max_new_tokens=cfg.rollout.max_new_tokens),
        _limits(cfg),
    )
    verl_cfg = verl_sft.compose_sft_config(cfg, str(tokenizer_dir))
    assert verl_cfg.data.custom_cls.name == "RolloutDriverSFTDataset"
    assert Path(verl_cfg.data.train_files) == tmp_path / "supervised" / "dataset" / "train.jsonl"
    dataset = create_sft_dataset(verl_cfg.data.train_files, verl_cfg.data, tiny_tokenizer(), None)
    assert len(dataset) == len(expected) == len(examples) * (2 if recipe == "dualsql" else 1)
    for item, t in zip(
        sorted((dataset[i] for i in range(len(dataset))), key=lambda x: x["input_ids"].tolist()),
        sorted(expected, key=lambda t: t.prompt_ids + t.response_ids),
        strict=True,
    ):
        assert item["input_ids"].tolist() == t.prompt_ids + t.response_ids
        assert item["loss_mask"].tolist() == [0] * len(t.prompt_ids) + list(t.response_mask)
        assert item["position_ids"].tolist() == list(range(len(item["input_ids"])))
        assert 0 < sum(t.response_mask) < len(t.response_mask)  # the end-of-turn/observation tokens carry no loss


def _datasets_reads_the_files(folder: Path, rows: int, cache: Path) -> None:
    """``datasets.load_dataset`` reads the JSONL and the Parquet file (when both libraries are here)."""
    datasets = pytest.importorskip("datasets")
    card = json.loads((folder / "card.json").read_text())
    assert card["rows"] == rows and card["by_band"] == {"all_solved": rows} and card["by_source"] == {"policy": rows}
    jsonl = datasets.load_dataset("json", data_files=str(folder / "train.jsonl"), cache_dir=str(cache))["train"]
    assert len(jsonl) == rows and jsonl[0]["messages"][0]["role"] == "system"
    if (folder / "train.parquet").exists():
        parquet = datasets.load_dataset("parquet", data_files=str(folder / "train.parquet"), cache_dir=str(cache))
        assert parquet["train"]["id"] == jsonl["id"]


def _agent(cfg: Any, examples: list) -> Any:
    from agents import agent_options, make_agent

    options = dict(cfg.agent.options)
    if "few_shot_pool" in agent_options(cfg.agent.name):
        options["few_shot_pool"] = tuple(examples)
    return make_agent(cfg.agent.name, **options)


def _limits(cfg: Any) -> Any:
    from training.rollout import RolloutLimits

    return RolloutLimits(**verl_sft.sqlagent_block(cfg)["limits"])


@pytest.mark.parametrize("recipe", RECIPES)
def test_dry_run_composes_verl_sft_for_every_design(recipe: str, tmp_path: Path) -> None:
    from training.run import run

    with initialize_config_module("recipes", version_base=None):
        raw = OmegaConf.to_container(
            compose(
                "config",
                overrides=[f"recipe={recipe}", "engine=verl", "stage=sft", "dry_run=true", f"run_dir={tmp_path}"],
            ),
            resolve=True,
        )
    out: list[str] = []
    assert run(raw, {"recipe", "engine", "stage", "dry_run"}, out.append) is None
    text = "\n".join(out)
    assert "sft_trainer_engine" in text and "RolloutDriverSFTDataset" in text
    assert f"train_files: {tmp_path}/supervised/dataset/train.jsonl" in text
    assert f"agent: {recipe}" in text
    # model.path is null: veRL fine-tunes the recipe's GPU backbone, as its RL launch does
    backbone = raw["gpu_backbone"]
    assert backbone and f"; model {backbone}\n" in text and f"path: {backbone}" in text
    # what a GPU run launches: the standalone YAML that veRL's entry point loads with --config-path/--config-name
    from hydra import initialize_config_dir

    from training.config import TrainConfig
    from training.run import prepare_config

    raw.pop("hydra", None)
    cfg = prepare_config(raw, set(), lambda _: None)
    assert isinstance(cfg, TrainConfig)
    path = verl_sft.write_sft_config(cfg, "/models/some-model")
    with initialize_config_dir(config_dir=str(path.parent), version_base=None):
        launched = compose(config_name=path.stem)
    assert launched.data.sqlagent.agent == recipe and launched.model.path == "/models/some-model"
    assert launched.data.custom_cls.path == str(Path(verl_sft.__file__).resolve())


def served_policy(recipe: str, examples: list, solved: set[str]) -> Any:
    """A served policy (vLLM's OpenAI server in production): right on ``solved`` questions,
    wrong on the others, stop strings stripped as servers do; its first answer is an HTTP
    503 (retried by the client)."""
    from tests.helpers.fake_openai import Reply, choice, completion
    from tests.helpers.schools import turn_text

    calls = {"n": 0}

    def reply(body: dict) -> Reply:
        calls["n"] += 1
        if calls["n"] == 1:
            return Reply(503, {"error": "warming up"})
        messages = body["messages"]
        ex = next(e for e in examples if any(e.question in str(m["content"]) for m in messages))
        role = "generator" if "SQL generator of a text-to-SQL" in messages[0]["content"] else "linker"
        text = turn_text(recipe, role, sum(m["role"] == "assistant" for m in messages), ex, ex.id in solved)
        text = next((text[: -len(s)] for s in body.get("stop", []) if text.endswith(s)), text)
        return Reply(body=completion(*[choice(text, i) for i in range(body.get("n", 1))]))

    return reply


def test_verl_data_stage_mines_through_a_served_policy(data_root: Path, tmp_path: Path) -> None:
    """``training.run engine=verl stage=data`` with ``supervised.policy_endpoint``: the k samples
    come from the served policy over HTTP (tools run here), all-wrong questions go to the
    privileged teacher, and the traces land in the dataset files veRL's SFT trainer reads,
    through the same filters as the local stage."""
    from verl.trainer.sft_trainer import create_sft_dataset

    from training.config import TrainConfig
    from training.run import prepare_config, run

    model_dir = tmp_path / "policy"
    tiny_tokenizer().save_pretrained(model_dir)
    tiny_model(seed=1).save_pretrained(model_dir)
    examples = load_examples("jsonl", data_root, "train")
    run_dir = tmp_path / "run"
    with (
        FakeOpenAI(served_policy("retoolsql", examples, {"q0"})) as policy,
        FakeOpenAI(teacher_reply("retoolsql", examples)) as teacher,
    ):
        overrides = [
            "recipe=retoolsql",
            "engine=verl",
            "stage=data",
            f"run_dir={run_dir}",
            f"model.path={model_dir}",
            "data=jsonl",
            f"data.root={data_root}",
            "logger=[]",
            "trainer.eval_before_after=false",
            "rollout.max_new_tokens=200",
            "supervised.samples=2",
            "supervised.teacher_samples=1",
            f"supervised.policy_endpoint={{base_url:'{policy.base_url}',model:served-policy,backoff_s:0}}",
            f"supervised.teachers=[{{base_url:'{teacher.base_url}',model:teacher}}]",
        ]
        with initialize_config_module("recipes", version_base=None):
            raw = OmegaConf.to_container(compose("config", overrides=[*overrides, "dry_run=true"]), resolve=True)
        out: list[str] = []
        assert run(raw, {"recipe", "engine", "stage", "dry_run"}, out.append) is None
        assert f"pass@2 of the served policy served-policy at {policy.base_url}" in "\n".join(out)
        with initialize_config_module("recipes", version_base=None):
            raw = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
        log: list[str] = []
        summary = run(raw, {o.split("=", 1)[0] for o in overrides}, log.append)
        served = [r for r in policy.requests if r.get("model") == "served-policy"]
    assert served and all(r["n"] == 2 for r in served[1:])  # the k samples of a question share a request
    assert any("the policy answers through endpoint:served-policy" in line for line in log)
    assert summary["pass_at_k"]["bands"] == {"all_wrong": 3, "partly_solved": 0, "all_solved": 1}
    records = [json.loads(x) for x in (run_dir / "supervised" / "mine" / "questions.jsonl").read_text().splitlines()]
    assert {r["question_id"]: r["correct"] for r in records} == {"q0": 2, "q1": 0, "q2": 0, "q3": 0}
    folder = run_dir / "supervised" / "dataset"
    rows = [json.loads(x) for x in (folder / "train.jsonl").read_text().splitlines()]
    by_question = {r["question_id"]: r for r in rows}
    assert set(by_question) == {"q0", "q1", "q2", "q3"}
    assert by_question["q0"]["source"] == "policy" and by_question["q0"]["band"] == "all_solved"
    assert all(by_question[q]["source"].startswith("teacher0-") for q in ("q1", "q2", "q3"))
    # the mined duplicate (both samples of q0 are the same text) is dropped by the local stage's filters
    card = json.loads((folder / "card.json").read_text())
    assert card["rows"] == 4 and card["dropped"].get("duplicate", 0) >= 1
    # veRL's SFT trainer reads these files: the config points at them and its dataset loader replays them
    raw.pop("hydra", None)
    cfg = prepare_config(raw, set(), lambda _: None)
    assert isinstance(cfg, TrainConfig) and verl_sft.dataset_file(cfg) == folder / "train.jsonl"
    verl_cfg = verl_sft.compose_sft_config(cfg, str(model_dir))
    dataset = create_sft_dataset(verl_cfg.data.train_files, verl_cfg.data, tiny_tokenizer(), None)
    assert len(dataset) == 4 and dataset.dropped == {}


def test_eval_run_scores_an_endpoint(data_root: Path, tokenizer_dir: Path, tmp_path: Path) -> None:
    from eval.run import run

    examples = load_examples("jsonl", data_root, "dev")
    with FakeOpenAI(teacher_reply("think2sql", examples)) as server:
        with initialize_config_module("recipes", version_base=None):
            raw = OmegaConf.to_container(
                compose(
                    "eval",
                    overrides=[
                        "recipe=think2sql",
                        f"model.path={tokenizer_dir}",
                        f"model.base_url={server.base_url}",
                        "model.name=served-model",
                        "data=jsonl",
                        f"data.root={data_root}",
                        "engine.device=cpu",
                        "rollout.max_new_tokens=200",
                        f"eval.out_dir={tmp_path / 'out'}",
                    ],
                ),
                resolve=True,
            )
        summary = run(raw, {"recipe", "model.path", "model.base_url", "model.name"}, lambda _: None)
    assert summary["n"] == 2 and summary["ex"] == 1.0
    assert summary["endpoint"]["failed_samples"] == 0 and server.requests[0]["model"] == "served-model"
    assert summary["settings"]["model"] == f"served-model @ {server.base_url}"


@pytest.mark.slow
def test_verl_sft_rl_runs_rl_only_on_the_questions_the_filter_keeps(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``engine=verl stage=sft_rl`` for TRUST-SQL: after veRL's SFT trainer (a double that writes
    its HF checkpoint, as ``verl.trainer.sft_trainer`` does on GPUs) the SFT policy samples
    each RL question (``data``, difficulty-filtered; not the SFT questions of
    ``supervised.data``) through the local chain at RL's temperature, and the RL launch writes
    prompt files with only the questions it solved fewer than ``rl_filter_pass`` of
    ``rl_filter_samples`` times."""
    import pandas as pd

    from training.config import TrainConfig
    from training.engines.verl import launch as verl_launch
    from training.engines.verl import shared as verl_common

    base = tmp_path / "base"
    tiny_tokenizer().save_pretrained(base)
    tiny_model(seed=1).save_pretrained(base)
    run_dir = tmp_path / "run"
    rl_root = tmp_path / "rl"  # RL's own questions: ids r0..r3, two levels of difficulty
    rl_root.mkdir()
    make_db(rl_root / "schools.sqlite")
    levels = ["moderate", "moderate", "simple", "challenging"]
    rl_rows = [{**r, "id": f"r{i}", "difficulty": levels[i]} for i, r in enumerate(school_rows())]
    (rl_root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rl_rows))
    (rl_root / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rl_rows[:2]))
    overrides = [
        "recipe=trustsql",
        "engine=verl",
        "stage=sft_rl",
        f"run_dir={run_dir}",
        f"model.path={base}",
        "data=jsonl",
        f"data.root={rl_root}",
        "data.difficulties=[moderate,challenging]",
        f"supervised.data={{kind:jsonl,root:'{data_root}',difficulties:null}}",
        "data.eval_limit=2",
        "logger=[]",
        "trainer.eval_before_after=false",
        "rollout.max_new_tokens=200",
        "rollout.max_prompt_tokens=2048",
        "rollout.max_response_tokens=2048",
        "algorithm.batch_size=2",
        "algorithm.group_size=4",
        "supervised.samples=1",
        # the policy is the teacher here (no endpoint): one greedy and one sampled trace per
        # question shows both modes; more only repeats the tiny model's 200-token turns
        "supervised.teacher_samples=1",
        "supervised.rl_filter_samples=2",
        "supervised.rl_filter_pass=2",
    ]
    with initialize_config_module("recipes", version_base=None):
        cfg = TrainConfig.from_mapping(OmegaConf.to_container(compose("config", overrides=overrides), resolve=True))
    examples = load_examples("jsonl", rl_root, "train")
    policy = ScriptedPolicy("trustsql", examples, always_good=lambda ex, k: ex.id == "r0")

    def verl_sft_trainer(command: list[str], check: bool) -> None:
        assert "verl.trainer.sft_trainer" in command and check
        out = run_dir / "supervised" / "sft_verl" / "global_step_1" / "huggingface"
        tiny_tokenizer().save_pretrained(out)
        tiny_model(seed=2).save_pretrained(out)

    launched: dict[str, Any] = {}

    def rl_launch(rl_cfg: Any, say: Any) -> dict[str, Any]:
        launched["cfg"] = rl_cfg
        return {"engine": "verl"}

    monkeypatch.setattr(verl_sft, "gpu_count", lambda: 1)
    monkeypatch.setattr(verl_sft.subprocess, "run", verl_sft_trainer)
    monkeypatch.setattr(verl_launch, "train", rl_launch)
    log: list[str] = []
    summary = verl_sft.train(cfg, log.append, TrainerInputs(generate=policy))
    hf = run_dir / "supervised" / "sft_verl" / "global_step_1" / "huggingface"
    assert summary == {"sft_checkpoint": str(hf), "rl": {"engine": "verl"}}
    filtered = "[rl filter] 2 of 3 questions solved < 2/2 times by the SFT policy (temperature 0.8)"
    assert any(filtered in line for line in log), "\n".join(log)
    taught = (run_dir / "supervised" / "teachers" / "questions.jsonl").read_text().splitlines()
    assert {json.loads(x)["question_id"] for x in taught} == {"q0", "q1", "q2", "q3"}  # supervised.data's
    rl_cfg = launched["cfg"]
    assert rl_cfg.stage.name == "rl" and rl_cfg.stage.init_from == str(hf)
    kept = json.loads(Path(rl_cfg.data.train_ids).read_text())
    assert kept == {"ids": ["r1", "r3"], "questions": 3}  # r2 (simple) never reached the filter
    # the RL launch's own preparation reads data.train_ids: only those questions become prompts
    _, prepared = verl_launch.prepare(rl_cfg, say=lambda _: None, check_devices=False)
    train_file, _ = verl_common_data_files(run_dir)
    rows = pd.read_parquet(train_file)
    ids = [verl_common.example_from_json(e["example"]).id for e in rows["extra_info"]]
    assert prepared["train_examples"] == 2 and ids == ["r1", "r3"]


def verl_common_data_files(run_dir: Path) -> tuple[Path, Path]:
    from training.engines.verl.config.data_files import data_files

    return data_files(run_dir)
