"""Extension points from outside the packages: ``tests/training/example_plugins.py`` registers
a metric, an advantage estimator, an agent, a parser and a demonstration script, and the
local engine trains one step with the first three on the tiny model - chosen by name in
the config exactly like the built-in ones."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from agents.types import Example
from tests.helpers.local_trainer import changed, config, tiny_inputs, weights
from tests.helpers.registries import import_plugins
from tests.helpers.schools import make_db
from tests.helpers.tiny_model import tiny_tokenizer
from training.engines.local.trainer import LocalTrainer
from training.rollout import GenerationOutput

PLUGINS = "tests.training.example_plugins"
# Two-row gold results, so that a prediction returning one of the rows scores 0.5 under
# row_overlap (EX would give it 0): the reward then shows which metric scored it.
QUESTIONS = [
    ("List the names of the schools in Fresno.", "SELECT name FROM schools WHERE city = 'Fresno'"),
    ("List the years with SAT scores.", "SELECT DISTINCT year FROM satscores"),
]
WRONG_SQL = "SELECT name FROM schools WHERE id = 4"


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    db = make_db(tmp_path_factory.mktemp("db") / "schools.sqlite")
    return [
        Example(id=f"e{i}", db_id="schools", db_path=str(db), question=q, gold_sql=sql, split="train")
        for i, (q, sql) in enumerate(QUESTIONS)
    ]


@pytest.fixture(scope="module")
def plugins() -> Iterator[ModuleType]:
    with pytest.MonkeyPatch.context() as mp:
        yield import_plugins(mp, PLUGINS)


class FencePolicy:
    """Per question, its k-th sample is (k mod 4): the gold SQL, one of its two rows, a
    wrong query, or prose without a ```sql block (a format error the agent cuts at)."""

    def __init__(self, examples: list[Example]) -> None:
        self.tok, self.examples, self.calls = tiny_tokenizer(), examples, {ex.id: 0 for ex in examples}

    def __call__(self, prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        return [self._one(self.tok.decode(p)) for p in prompts]

    def _one(self, prompt: str) -> GenerationOutput:
        ex = next(e for e in self.examples if e.question in prompt)
        kind, self.calls[ex.id] = self.calls[ex.id] % 4, self.calls[ex.id] + 1
        sql = [ex.gold_sql, f"SELECT * FROM ({ex.gold_sql}) LIMIT 1", WRONG_SQL, None][kind]
        text = f"```sql\n{sql}\n```" if sql else "The answer is in the schools table."
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        return GenerationOutput(token_ids=ids, logprobs=None, finish_reason="stop")


@pytest.fixture(scope="module")
def step(plugins: ModuleType, examples: list[Example], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One local step with agent=fence_sql, reward.exec_metric=row_overlap, advantage.estimator=sign."""
    estimated: list[torch.Tensor] = []
    sign = plugins.sign_estimator

    def recording_sign(tracks: Any, groups: Any, opts: Any) -> dict[str, torch.Tensor]:
        out = sign(tracks, groups, opts)
        estimated.append(out["full"].clone())
        return out

    from training.algorithm.advantages import ESTIMATORS

    ESTIMATORS.register("sign", replace=True)(recording_sign)  # the plugins' copy of the registry
    cfg = config(
        "think2sql",
        tmp_path_factory.mktemp("run"),
        "agent.name=fence_sql",
        "~agent.schema_scope",  # think2sql's own agent options, which fence_sql does not take
        "~agent.reasoning",
        "reward=composite",
        "reward.exec_metric=row_overlap",
        "advantage.estimator=sign",
        "algorithm.dynamic_sampling.enable=false",
        "trainer.samples_per_step=0",
    )
    trainer = LocalTrainer(cfg, tiny_inputs(examples, examples, FencePolicy(examples)), say=lambda _: None)
    before = weights(trainer.model)
    metrics = trainer.train_step()
    return {"trainer": trainer, "metrics": metrics, "before": before, "estimated": estimated}


def test_the_config_accepts_the_registered_names(step: dict[str, Any], plugins: ModuleType) -> None:
    cfg = step["trainer"].cfg
    assert (cfg.agent.name, cfg.reward.exec_metric, cfg.advantage.estimator) == ("fence_sql", "row_overlap", "sign")
    assert isinstance(step["trainer"].agent, plugins.FenceSQLAgent)


def test_the_metric_scores_the_reward(step: dict[str, Any]) -> None:
    # per question: gold 1, one of two rows 0.5, wrong 0, no SQL 0 -> mean 0.375 (EX: 0.25)
    assert step["metrics"]["reward/exec"] == pytest.approx(0.375)


def test_the_estimator_advantages_reach_the_buffer_and_move_the_weights(step: dict[str, Any]) -> None:
    buffer = step["trainer"].last_buffer
    (estimated,) = step["estimated"]
    assert buffer.advantages["full"] == estimated.tolist()
    assert set(buffer.advantages["full"]) == {-1.0, 1.0}  # signs only: GRPO would give z-scores
    assert changed(step["before"], step["trainer"].model) > 0


def test_the_engine_reads_the_agent_spec(step: dict[str, Any]) -> None:
    """The spec asks for the error-turn mask: the engine finds the two cut episodes (with
    one turn, that turn is the error turn, so its tokens keep their loss)."""
    buffer = step["trainer"].last_buffer
    cut = [i for i, t in enumerate(buffer.trajectories) if t.result.end_reason == "format_cutoff"]
    assert len(cut) == 2 and step["metrics"]["mask/error_turn_rows"] == 2.0
    for i, t in enumerate(buffer.trajectories):
        assert buffer.masks["full"][i] == [float(m) for m in t.response_mask]


def test_the_parser_and_the_script_are_found_by_name(plugins: ModuleType, examples: list[Example]) -> None:
    from agents import make_agent
    from agents.parsing import get_parser
    from agents.types import ToolCall
    from tests.training.supervised.test_demonstrations import LIMITS
    from training.supervised.demonstrations import get_script, record_demonstrations

    (call,) = get_parser("xml_call").parse('<call name="execute_sql">{"sql": "SELECT 1"}</call>')
    assert call.call == ToolCall("execute_sql", {"sql": "SELECT 1"})
    assert make_agent("trustsql", parser="xml_call").parser.stop == ("</call>",)
    demos = record_demonstrations(make_agent("fence_sql"), examples, tiny_tokenizer(), LIMITS, get_script("fence_sql"))
    assert demos.kept_examples == len(examples)


def test_the_documented_examples_are_this_code() -> None:
    """docs/INTERFACES.md "Extension points" shows example_plugins.py verbatim."""
    root = Path(__file__).resolve().parents[2]
    section = (root / "docs" / "INTERFACES.md").read_text().split("## Extension points", 1)[1]
    blocks = section.split("```python\n")[1:]
    source = (root / "tests" / "training" / "example_plugins.py").read_text()
    assert len(blocks) == 5
    for block in blocks:
        code = block.split("\n```\n", 1)[0]
        assert code in source, code[:80]


def test_a_second_plugin_under_a_taken_name_is_refused(plugins: ModuleType) -> None:
    from rex import register_metric
    from training.supervised.demonstrations import register_script

    with pytest.raises(ValueError, match="already registered.*replace=True"):
        register_metric("row_overlap")(lambda gold, pred, ordered, outcome: (0.0, {}))
    with pytest.raises(ValueError, match="demonstration script 'fence_sql' is already registered"):
        register_script("fence_sql")(lambda ex, role, max_turns: [])
