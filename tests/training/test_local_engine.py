"""The local engine on CPU with the tiny model: real agents, rewards and SQLite, a
scripted policy (multi-turn text with tool calls) so that rewards vary within groups."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from agents.types import Example
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from training.config import TrainConfig
from training.engines import local_policy as lp
from training.engines import local_state as st
from training.engines.local import LocalTrainer, TrainerInputs
from training.engines.local_batch import build_buffer
from training.rollout import GenerationOutput

RECIPES = ["retoolsql", "think2sql", "trustsql", "dualsql"]


# ----------------------------------------------------------------------------- data


def make_db(path: Path) -> Path:
    """Two tables, a foreign key, NULLs, a text-stored number and mixed-type cells."""
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE schools (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT,
                              enrollment INTEGER, misc);
        CREATE TABLE satscores (school_id INTEGER REFERENCES schools(id), year INTEGER,
                                avg_math REAL);
        """
    )
    conn.executemany(
        "INSERT INTO schools VALUES (?,?,?,?,?)",
        [
            (1, "Fresno High", "Fresno", 2100, 7),
            (2, "Roosevelt Arts", "Fresno", 850, "seven"),
            (3, "Clovis West", "Clovis", 1900, 7.5),
            (4, "Oakland Tech", None, None, None),
        ],
    )
    conn.executemany(
        "INSERT INTO satscores VALUES (?,?,?)", [(1, 2019, 512.5), (2, 2019, None), (2, 2020, "530"), (3, 2020, 541.0)]
    )
    conn.commit()
    conn.close()
    return path


QUESTIONS = [
    (
        "How many schools are in Fresno?",
        "SELECT COUNT(*) FROM schools WHERE city = 'Fresno'",
        ("schools",),
        ("schools.city",),
    ),
    (
        "Which school has the largest enrollment?",
        "SELECT name FROM schools ORDER BY enrollment DESC LIMIT 1",
        ("schools",),
        ("schools.enrollment", "schools.name"),
    ),
    (
        "List the years with SAT scores for Fresno High.",
        "SELECT year FROM satscores WHERE school_id = 1",
        ("satscores",),
        ("satscores.school_id", "satscores.year"),
    ),
    (
        "What is the name of school 3?",
        "SELECT name FROM schools WHERE id = 3",
        ("schools",),
        ("schools.id", "schools.name"),
    ),
]
WRONG_SQL = "SELECT name FROM schools WHERE id = 4"


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    db = make_db(tmp_path_factory.mktemp("db") / "schools.sqlite")
    return [
        Example(
            id=f"q{i}",
            db_id="schools",
            db_path=str(db),
            question=q,
            gold_sql=sql,
            difficulty="simple",
            gold_tables=t,
            gold_columns=c,
            split="train",
        )
        for i, (q, sql, t, c) in enumerate(QUESTIONS)
    ]


# ----------------------------------------------------------------------------- scripted policy


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def schema_json(ex: Example, good: bool) -> str:
    if not good:
        return json.dumps({"tables": ["satscores"], "columns": {"satscores": ["year"]}, "joins": []})
    columns: dict[str, list[str]] = {}
    for item in ex.gold_columns:
        table, column = item.split(".")
        columns.setdefault(table, []).append(column)
    return json.dumps({"tables": list(ex.gold_tables), "columns": columns, "joins": []})


def turn_text(recipe: str, role: str, turn: int, ex: Example, good: bool) -> str:
    """What a scripted policy writes: good turns answer with the gold SQL."""
    sql = ex.gold_sql if good else WRONG_SQL
    plan = "plan A" if good else "plan B"
    if recipe == "think2sql":
        return f"<think>{plan}</think>\n<answer>```sql\n{sql}\n```</answer>"
    if recipe == "retoolsql":
        if turn == 0:
            return f"<scratch_pad>{plan}: check</scratch_pad>" + call("sqlite_query", db_id="schools", sql=sql)
        return (
            f"<scratch_pad>{plan}: verified</scratch_pad><relevant_tables>{', '.join(ex.gold_tables)}"
            f"</relevant_tables><relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>"
            f"<final_answer>```sql\n{sql}\n```</final_answer>"
        )
    if recipe == "trustsql":
        if turn == 0:
            return f"<think>{plan}</think><action>explore_schema</action>" + call(
                "execute_sql_query", db_id="schools", sql="SELECT name FROM sqlite_master"
            )
        if turn == 1:
            return f"<think>{plan}</think><action>propose_schema</action><schema>{schema_json(ex, good)}</schema>"
        return f"<think>{plan}</think><action>confirm_answer</action><answer>```sql\n{sql}\n```</answer>"
    if role == "linker":
        return f"<think>{plan}</think>\n```json\n{schema_json(ex, good)}\n```"
    return f"<think>{plan}</think>\n```sql\n{sql}\n```"


class ScriptedPolicy:
    """A GenerateFn writing each recipe's turns. The first turn of each episode draws
    good/bad from torch's RNG (so resume must restore it) unless ``always_good``; later
    turns read the choice back from the conversation."""

    def __init__(
        self, recipe: str, examples: list[Example], always_good: bool | Callable[[Example, int], bool] = False
    ):
        self.recipe, self.tok = recipe, tiny_tokenizer()
        self.by_question = {ex.question: ex for ex in examples}
        self.always_good = always_good
        self.first_turns: dict[tuple[str, str], int] = {}

    def __call__(self, prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        return [self._one(self.tok.decode(p)) for p in prompts]

    def _one(self, text: str) -> GenerationOutput:
        ex = next(e for q, e in self.by_question.items() if q in text)
        role = "generator" if "SQL generator of a text-to-SQL" in text else "linker"
        turn = text.count("<|im_start|>assistant") - 1
        if "plan A" in text.split("<|im_start|>assistant", 1)[-1] and turn > 0:
            good = True
        elif "plan B" in text.split("<|im_start|>assistant", 1)[-1] and turn > 0:
            good = False
        elif callable(self.always_good):
            k = self.first_turns.get((ex.id, role), 0)
            self.first_turns[(ex.id, role)] = k + 1
            good = self.always_good(ex, k)
        elif self.always_good:
            good = True
        else:
            good = bool(torch.randint(0, 2, (1,)).item())
        ids = self.tok.encode(turn_text(self.recipe, role, turn, ex, good), add_special_tokens=False)
        return GenerationOutput(token_ids=ids + [self.tok.eos_token_id], logprobs=None, finish_reason="stop")


# ----------------------------------------------------------------------------- config


def config(recipe: str, run_dir: Path, *extra: str) -> TrainConfig:
    overrides = [
        f"recipe={recipe}",
        "engine=local",
        "engine.device=cpu",
        "algorithm.group_size=4",
        "algorithm.batch_size=2",
        "algorithm.dynamic_sampling.oversample=2",
        "trainer.total_steps=1",
        "trainer.eval_before_after=false",
        "optim.weight_decay=0.0",
        "optim.warmup_ratio=0.0",
        "optim.lr=1e-3",
        "optim.micro_batch_size=3",
        "logger=[]",
        f"run_dir={run_dir}",
        "trainer.save_every=1",
        "rollout.max_new_tokens=200",
        "rollout.max_response_tokens=3000",
        "rollout.max_prompt_tokens=6000",
        "data.eval_limit=2",
        *extra,
    ]
    with initialize_config_module("recipes", version_base=None):
        raw = OmegaConf.to_container(compose("config", overrides=overrides), resolve=True)
    raw.pop("hydra", None)
    raw["agent"] = {k: (min(v, 3) if "max_turns" in k else v) for k, v in raw["agent"].items()}
    return TrainConfig.from_mapping(raw)


def trainer(
    recipe: str, run_dir: Path, examples: list[Example], *extra: str, seed: int = 0, always_good: Any = False
) -> LocalTrainer:
    cfg = config(recipe, run_dir, f"seed={seed}", *extra)
    inputs = TrainerInputs(
        model=tiny_model(seed=1),
        tokenizer=tiny_tokenizer(),
        train_examples=examples,
        eval_examples=examples[:2],
        generate=ScriptedPolicy(recipe, examples, always_good),
    )
    return LocalTrainer(cfg, inputs, say=lambda _: None)


def weights(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def changed(before: dict[str, torch.Tensor], model: Any) -> float:
    return max(float((before[k] - v).abs().max()) for k, v in model.state_dict().items())


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("recipe", RECIPES)
def test_one_step_of_each_recipe_changes_the_weights(recipe: str, tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0
    assert 0.0 < metrics["ex/batch"] < 1.0, metrics  # the scripted policy mixes right and wrong answers
    assert metrics["reward/exec"] > 0.0 and "time/generation" in metrics
    assert changed(before, t.model) > 1e-6


@pytest.mark.parametrize("recipe", RECIPES)
def test_zero_advantage_control_leaves_weights_unchanged(recipe: str, tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(recipe, tmp_path, examples, "algorithm.dynamic_sampling.enable=false", always_good=True)
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["sampling/trajectories_updated"] > 0 and metrics["ex/batch"] == 1.0
    assert changed(before, t.model) == 0.0


def test_loss_ignores_observation_tokens(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
    rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
    rows = list(range(buffer.size))
    batch = buffer.policy_batch(rows, t.tokenizer.pad_token_id)
    full = batch.masks["full"]  # [batch, resp_len]
    observation = torch.zeros_like(full)
    for j, tr in enumerate(buffer.trajectories):
        observation[j, : len(tr.response_mask)] = 1.0 - torch.tensor(tr.response_mask, dtype=torch.float32)
    assert observation.sum() > 0, "the scripted episodes must contain tool observations"
    assert float((full * observation).sum()) == 0.0
    totals = lp.track_totals(batch.masks)

    logp, _ = lp.response_log_probs(t.model, batch)
    logp = logp.detach().requires_grad_(True)
    loss, _ = lp.grpo_loss(logp, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings)
    loss.backward()
    assert float((logp.grad.abs() * observation).sum()) == 0.0
    assert float(logp.grad.abs().sum()) > 0.0
    # changing an observation token's log-prob (its logit contribution) changes nothing
    moved = logp.detach() + 5.0 * observation
    again, _ = lp.grpo_loss(moved, logp.detach(), batch.masks, batch.advantages, totals, t.loss_settings)
    assert again.item() == pytest.approx(loss.item(), abs=1e-7)


def test_trustsql_buffer_two_track_advantages_and_prefix_mask(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false")
    trajectories = t.rollout(examples[:2], 4, t.agent, t.sampling)
    rewards = [t._score(tr, examples[int(tr.example_id[1:])]) for tr in trajectories]
    buffer = build_buffer(trajectories, rewards, t.cfg, target_questions=2)
    assert set(buffer.advantages) == {"full", "schema"}
    for track in ("full", "schema"):
        for q in ("q0", "q1"):
            idx = [i for i, tr in enumerate(buffer.trajectories) if tr.example_id == q]
            scores = torch.tensor([rewards[i].tracks[track] for i in idx])
            hand = (scores - scores.mean()) / (scores.std() + 1e-6) if scores.std() > 0 else scores * 0
            got = torch.tensor([buffer.advantages[track][i] for i in idx])
            assert torch.allclose(got, hand.clamp(-10, 10), atol=1e-5), (track, q)
    for i, tr in enumerate(buffer.trajectories):
        propose = max(turn.index for turn in tr.result.turns if turn.phase == "propose_schema")
        expect = [m if turn <= propose else 0 for m, turn in zip(tr.response_mask, tr.turn_index, strict=True)]
        assert buffer.masks["schema"][i] == [float(x) for x in expect]
        assert buffer.masks["full"][i] == [float(x) for x in tr.response_mask]


def test_dynamic_sampling_drops_flat_groups_in_the_engine(tmp_path: Path, examples: list[Example]) -> None:
    flat = {"q0", "q2", "q3"}
    t = trainer(
        "retoolsql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=true",
        "algorithm.batch_size=2",
        "algorithm.dynamic_sampling.oversample=2",
        always_good=lambda ex, k: ex.id in flat or k % 2 == 0,
    )
    before = weights(t.model)
    metrics = t.train_step()  # B*K = 4 questions drawn: all four examples
    assert {tr.example_id for tr in t.last_buffer.trajectories} == {"q1"}
    assert len(t.last_buffer.trajectories) == 4
    assert metrics["sampling/zero_variance_groups"] == 3 and metrics["sampling/groups_kept"] == 1
    assert metrics["sampling/fill_rate"] == pytest.approx(0.5)
    assert changed(before, t.model) > 0


def test_resume_matches_an_uninterrupted_run(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.total_steps=2", "algorithm.dynamic_sampling.enable=false")
    straight = trainer("think2sql", tmp_path / "a", examples, *extra, seed=5)
    straight.fit()

    interrupted = trainer("think2sql", tmp_path / "b", examples, *extra, seed=5)
    original = interrupted.train_step

    def crash_on_second_step() -> dict[str, Any]:
        if interrupted.step == 1:
            interrupted.rollout(examples[:2], 4, interrupted.agent, interrupted.sampling)  # consumes RNG
            raise KeyboardInterrupt("killed mid-step")
        return original()

    interrupted.train_step = crash_on_second_step  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        interrupted.fit()
    assert st.latest_checkpoint(tmp_path / "b").name == "step_000001"

    resumed = trainer("think2sql", tmp_path / "b", examples, *extra, "resume=true", seed=5)
    summary = resumed.fit()
    assert summary["steps"] == 2
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert changed({k: v for k, v in a.items()}, tiny_model(seed=1)) > 0


def test_existing_checkpoints_need_resume_or_fresh(tmp_path: Path, examples: list[Example]) -> None:
    trainer("think2sql", tmp_path, examples).fit()
    with pytest.raises(Exception, match="resume=true"):
        trainer("think2sql", tmp_path, examples).fit()
    summary = trainer("think2sql", tmp_path, examples, "fresh=true").fit()
    assert summary["steps"] == 1
    assert (tmp_path / "metrics.jsonl").is_file() and (tmp_path / "final" / "config.json").is_file()


def test_response_log_probs_match_a_per_row_forward() -> None:
    model = tiny_model()
    prompts, responses = [[5, 6, 7, 8], [9, 10]], [[11, 12], [13, 14, 15, 16]]
    batch = lp.build_policy_batch(prompts, responses, {"full": [[1, 1], [1, 1, 1, 1]]}, {"full": [1.0, -1.0]}, 0)
    got, _ = lp.response_log_probs(model, batch)
    for i, (p, r) in enumerate(zip(prompts, responses, strict=True)):
        logits = model(torch.tensor([p + r])).logits[0].log_softmax(-1)
        want = [logits[len(p) + j - 1, r[j]].item() for j in range(len(r))]
        assert got[i, : len(r)].tolist() == pytest.approx(want, abs=1e-5)


def test_trim_row_cuts_padding_after_a_stop_string() -> None:
    tok = tiny_tokenizer()
    eos = tok.eos_token_id
    body = tok.encode("SELECT 1</tool_call>", add_special_tokens=False)
    stopped = lp._trim_row(body + [eos, eos], [eos], eos, tok, ["</tool_call>"])
    assert stopped.token_ids == body and stopped.finish_reason == "stop"
    ended = lp._trim_row(body[:3] + [eos, eos], [eos], eos, tok, ["</tool_call>"])
    assert ended.token_ids == body[:3] + [eos]
    assert lp._trim_row(body, [eos], eos, tok, ()).finish_reason == "length"


def test_checkpoint_round_trip_restores_rng_and_sampler(tmp_path: Path) -> None:
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    sampler = st.DataSampler(7, seed=2)
    sampler.take(5)
    torch.manual_seed(11)
    st.save_checkpoint(tmp_path, st.CheckpointMeta(step=3, sampler=sampler.state_dict()), model, opt, sched)
    expected = torch.rand(3)
    torch.manual_seed(99)
    other = tiny_model(seed=4)
    meta = st.load_checkpoint(st.latest_checkpoint(tmp_path), other, opt, sched)
    assert torch.equal(torch.rand(3), expected)
    assert meta.step == 3 and meta.sampler["cursor"] == 5
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True))


def test_several_mini_batches_use_old_log_probs_and_clip(tmp_path: Path, examples: list[Example]) -> None:
    """With two optimizer steps per buffer the second one sees a moved policy: the ratio
    leaves 1 and clipping can act (old log-probs come from a forward pass before step one)."""
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "algorithm.dynamic_sampling.enable=false",
        "algorithm.mini_batches=2",
        "optim.lr=5e-2",
    )
    before = weights(t.model)
    metrics = t.train_step()
    assert metrics["time/logprob"] > 0.0
    assert metrics["policy/ppo_kl"] != 0.0
    assert changed(before, t.model) > 0


def test_validation_and_summary_report_ex_before_and_after(tmp_path: Path, examples: list[Example]) -> None:
    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "trainer.eval_before_after=true",
        "trainer.val_every=1",
        "trainer.total_steps=2",
        always_good=True,
    )
    summary = t.fit()
    assert summary["ex_before"] == 1.0 and summary["ex_after"] == 1.0 and summary["eval_questions"] == 2
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert kinds == ["config", "eval_before", "train", "eval_val", "train", "eval_after"]
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 2


# ----------------------------------------------------------------------------- finished runs, disk, records


def files_of(run_dir: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and "wandb" not in p.parts
    }


def records(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl's evaluation and training rows (config rows: the validation-and-summary test)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["kind"] != "config"]


def test_resuming_a_finished_run_changes_nothing(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    first = trainer("think2sql", tmp_path, examples, *extra).fit()
    before = files_of(tmp_path)
    said: list[str] = []
    again = trainer("think2sql", tmp_path, examples, *extra, "resume=true")
    again.say = said.append
    summary = again.fit()
    assert files_of(tmp_path) == before
    assert summary == first and summary["ex_before"] is not None
    assert any("is finished" in line and "nothing changed" in line for line in said), said


def test_a_finished_run_continues_with_more_steps_and_keeps_its_records(
    tmp_path: Path, examples: list[Example]
) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    first = trainer("think2sql", tmp_path, examples, *extra, always_good=True).fit()
    old = records(tmp_path)
    summary = trainer(
        "think2sql", tmp_path, examples, *extra, "resume=true", "trainer.total_steps=2", always_good=True
    ).fit()
    rows = records(tmp_path)
    assert [(r["kind"], r["step"]) for r in rows] == [
        ("eval_before", 0),
        ("train", 1),
        ("eval_val", 1),
        ("train", 2),
        ("eval_after", 2),
    ]
    assert [r["wall_time"] for r in rows[:3]] == [r["wall_time"] for r in old]  # earlier rows kept as written
    assert summary["steps"] == 2 and summary["ex_before"] == first["ex_before"] == 1.0
    assert summary["ex_after"] == 1.0 and summary["eval_questions"] == 2
    assert json.loads((tmp_path / "summary.json").read_text())["ex_before"] == 1.0


def test_a_run_killed_after_its_final_evaluation_reuses_it(tmp_path: Path, examples: list[Example]) -> None:
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    t = trainer("think2sql", tmp_path, examples, *extra)

    def killed(*args: Any) -> Any:
        raise KeyboardInterrupt("killed before the summary")

    t._save_final = killed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        t.fit()
    summary = trainer("think2sql", tmp_path, examples, *extra, "resume=true").fit()
    assert [r["kind"] for r in records(tmp_path)] == ["eval_before", "train", "eval_after"]
    assert summary["ex_before"] is not None and summary["ex_after"] is not None


def test_metrics_records_name_times_by_what_they_mean(tmp_path: Path, examples: list[Example]) -> None:
    trainer("think2sql", tmp_path, examples, "trainer.eval_before_after=true").fit()
    rows = records(tmp_path)
    assert rows and all("time" not in r and isinstance(r["wall_time"], float) for r in rows)
    assert all(r["wall_time"] > 1.6e9 for r in rows)  # seconds since the epoch
    evals = [r for r in rows if r["kind"].startswith("eval_")]
    assert evals and all(0 <= r["duration_s"] < 600 for r in evals)
    assert all(r["time/step"] >= r["time/generation"] for r in rows if r["kind"] == "train")


def test_checkpoints_store_weights_once(tmp_path: Path, examples: list[Example]) -> None:
    from safetensors.torch import load_file

    t = trainer(
        "think2sql",
        tmp_path,
        examples,
        "trainer.total_steps=3",
        "trainer.keep_checkpoints=2",
        "algorithm.dynamic_sampling.enable=false",
    )
    summary = t.fit()
    steps = sorted(p.name for p in (tmp_path / "checkpoints").glob("step_*"))
    assert steps == ["step_000002", "step_000003"]
    last, older = tmp_path / "checkpoints" / "step_000003", tmp_path / "checkpoints" / "step_000002"
    assert (last / "model.safetensors").is_file() and (last / "trainer_state.pt").is_file()
    assert not (older / "trainer_state.pt").exists() and (older / "model.safetensors").is_file()
    assert not list(tmp_path.rglob("model.pt")) and not list(tmp_path.rglob("trainer.pt"))
    final = tmp_path / "final"
    assert os.path.samefile(final / "model.safetensors", last / "model.safetensors")  # one copy on disk
    assert not (final / "trainer_state.pt").exists() and (final / "tokenizer.json").is_file()
    saved = load_file(final / "model.safetensors")
    state = t.model.state_dict()
    assert all(torch.equal(saved[k], state[k]) for k in saved)
    total, parts = st.disk_usage(tmp_path)
    assert abs(summary["disk_bytes"] - total) < 4096 and parts["final"] < 64 * 1024  # links only
    model_bytes = (last / "model.safetensors").stat().st_size
    assert total < 2 * model_bytes + 3 * model_bytes  # weights x2 checkpoints + AdamW state (2x) + small files


def test_the_summary_line_shows_ex_in_percent_and_the_disk_used() -> None:
    from training.engines.local_run import summary_text

    summary = {
        "recipe": "trustsql",
        "steps": 2,
        "ex_before": 0.0,
        "ex_warm_start": 0.125,
        "ex_after": 0.375,
        "eval_questions": 8,
        "checkpoint": "c",
        "final_model": "f",
        "metrics": "m",
        "wandb_dir": None,
        "run_dir": "runs/trustsql",
        "disk_bytes": 3 * 1024**3,
    }
    text = summary_text(summary, {"checkpoints": 2 * 1024**3, "warm_start": 1024**3, "run.log": 10})
    assert "EX before 0.0% -> after warm start 12.5% -> after 37.5% on 8 held-out questions" in text
    assert "run directory runs/trustsql: 3.0 GB on disk (checkpoints 2.0 GB, warm_start 1.0 GB)" in text


def fit_keeping_buffers(t: Any) -> list[Any]:
    """Run ``t.fit()`` and return the update buffer of each step (the masks the loss used)."""
    buffers: list[Any] = []
    original = t.train_step

    def step_and_keep() -> dict[str, Any]:
        out = original()
        buffers.append(t.last_buffer)
        return out

    t.train_step = step_and_keep  # type: ignore[method-assign]
    t.fit()
    return buffers


def test_samples_records_match_the_update_and_the_metrics_step(tmp_path: Path, examples: list[Example]) -> None:
    """samples.jsonl: the metrics row's step, the question / gold SQL / database, and per
    token the masks the update used (training/records.py), prompts stored once."""
    t = trainer("trustsql", tmp_path, examples, "algorithm.dynamic_sampling.enable=false", "trainer.total_steps=2")
    buffers = fit_keeping_buffers(t)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    train_steps = [json.loads(x)["step"] for x in lines if json.loads(x)["kind"] == "train"]
    samples = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert sorted({s["step"] for s in samples}) == train_steps == [1, 2]
    by_id = {ex.id: ex for ex in examples}
    for s in samples:
        ex = by_id[s["example_id"]]
        assert (s["question"], s["gold_sql"], s["db_id"], s["difficulty"]) == (
            ex.question,
            ex.gold_sql,
            "schools",
            "simple",
        )
        assert s["design"] == "trustsql" and s["engine"] == "local"
        assert s["tables"]["gold"]["columns"] and s["outcome"] in ("match", "mismatch", "pred_error")
    for step, buffer in zip((1, 2), buffers, strict=True):
        rows = [s for s in samples if s["step"] == step]
        assert len(rows) == len(buffer.trajectories) == 8  # samples_per_step 16 > G*B
        for s, traj in zip(rows, buffer.trajectories, strict=True):
            for track in ("full", "schema"):
                assert [float(c == "L") for c in s["why"][track]] == buffer.masks[track][rows.index(s)]
            assert s["policy"] == "".join(str(m) for m in traj.response_mask)
            assert "o" in s["why"]["full"] and "p" in s["why"]["schema"]
    prompts = [json.loads(x) for x in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == len({p["prompt_id"] for p in prompts}) == len({s["prompt_id"] for s in samples})


def test_a_recorded_evaluation_from_other_inputs_is_not_reused(tmp_path: Path, examples: list[Example]) -> None:
    """A run directory reused with other held-out questions (or weights, or settings) must
    not report the old run's EX before as its own."""
    extra = ("trainer.eval_before_after=true", "algorithm.dynamic_sampling.enable=false")
    first = trainer("think2sql", tmp_path, examples, *extra)

    def killed(*args: Any) -> Any:
        raise KeyboardInterrupt("killed after the first evaluation")

    first.train_step = killed  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    again = trainer("think2sql", tmp_path, examples, *extra, "resume=true")
    again.eval_examples = examples[1:2]
    summary = again.fit()
    befores = [r for r in records(tmp_path) if r["kind"] == "eval_before"]
    assert [r["n"] for r in befores] == [2, 1] and befores[0]["inputs"] != befores[1]["inputs"]
    assert summary["eval_questions"] == 1
