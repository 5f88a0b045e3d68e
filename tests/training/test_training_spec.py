"""Agents declare their training needs (``Agent.training_spec()``) and both engines read them.

DualSQL's ``guardrails`` defaults to on in the agent: a config without the key must still
cut episodes at the first bad turn *and* train them with the error-turn mask (the local
engine here, the veRL workers' settings below; veRL's own agent-loop worker running the
project's agent loop: tests/training/engines/verl/test_agent_loop.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from agents import make_agent, training_spec
from agents.types import ERROR_TURN_MASK, Example, TrainingSpec
from tests.helpers.local_trainer import changed, config, tiny_inputs, weights
from tests.helpers.schools import QUESTIONS, make_db, schema_json
from tests.helpers.tiny_model import tiny_tokenizer
from tools.errors import ConfigError
from training.engines.local.trainer import LocalTrainer
from training.engines.verl import shared as C
from training.rollout import GenerationOutput


@pytest.fixture(scope="module")
def schools(tmp_path_factory: pytest.TempPathFactory) -> list[Example]:
    """The local-engine tests' questions (gold tables and columns, for the linker)."""
    db = make_db(tmp_path_factory.mktemp("db") / "schools.sqlite")
    return [
        Example(
            id=f"q{i}",
            db_id="schools",
            db_path=str(db),
            question=q,
            gold_sql=sql,
            gold_tables=t,
            gold_columns=c,
            split="train",
        )
        for i, (q, sql, t, c) in enumerate(QUESTIONS)
    ]


class GuardrailPolicy:
    """DualSQL turns: the linker links the gold schema at once; per question, every other
    generator episode answers with the gold SQL, the others make a valid tool call and then
    write a turn without ``<think>`` (a guardrail failure: the episode is cut there)."""

    def __init__(self, examples: list[Example]) -> None:
        self.tok, self.examples, self.starts = tiny_tokenizer(), examples, {ex.id: 0 for ex in examples}

    def __call__(self, prompts: list[list[int]], params: Any) -> list[GenerationOutput]:
        return [self._one(self.tok.decode(p)) for p in prompts]

    def _one(self, prompt: str) -> GenerationOutput:
        ex = next(e for e in self.examples if e.question in prompt)
        turn = prompt.count("<|im_start|>assistant") - 1
        if "SQL generator of a text-to-SQL" not in prompt:
            text = f"<think>link</think>\n```json\n{schema_json(ex, True)}\n```"
        elif turn > 0:
            text = f"{ex.gold_sql}"  # no <think>: fails guardrail 1
        else:
            k, self.starts[ex.id] = self.starts[ex.id], self.starts[ex.id] + 1
            call = json.dumps({"name": "execute_sql", "arguments": {"db_id": "schools", "sql": ex.gold_sql}})
            text = (
                f"<think>answer</think>\n```sql\n{ex.gold_sql}\n```"
                if k % 2 == 0
                else f"<think>try it</think>\n<tool_call>{call}</tool_call>"
            )
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        return GenerationOutput(token_ids=ids, logprobs=None, finish_reason="stop")


def test_dualsql_without_a_guardrails_key_trains_with_the_error_turn_mask(
    tmp_path: Path, schools: list[Example]
) -> None:
    cfg = config("dualsql", tmp_path, "~agent.guardrails", "algorithm.dynamic_sampling.enable=false")
    assert "guardrails" not in cfg.agent.options  # the agent's default (on) decides
    trainer = LocalTrainer(cfg, tiny_inputs(schools[:2], schools[:2], GuardrailPolicy(schools)), say=lambda _: None)
    before = weights(trainer.model)
    metrics = trainer.train_step()

    buffer = trainer.last_buffer
    cut = [i for i, t in enumerate(buffer.trajectories) if t.result.end_reason == "format_cutoff"]
    assert len(cut) == 4 and metrics["mask/error_turn_rows"] == 4.0  # 2 questions x 2 of 4 generator episodes
    for i in cut:
        t = buffer.trajectories[i]
        assert [turn.format_ok for turn in t.result.turns] == [True, False]
        expected = [float(m) if turn == 1 else 0.0 for m, turn in zip(t.response_mask, t.turn_index, strict=True)]
        assert buffer.masks["full"][i] == expected  # the tool-call turn carries no loss, the bad turn does
        assert 0 < sum(expected) < sum(t.response_mask)
    assert changed(before, trainer.model) > 0


def test_each_design_declares_its_needs() -> None:
    assert training_spec("dualsql").masks == (ERROR_TURN_MASK,)
    assert training_spec("dualsql", {"guardrails": False}).masks == ()
    assert training_spec("dualsql").roles == ("linker", "generator")
    assert training_spec("trustsql").tracks == ("schema",) and training_spec("trustsql").masks == ()
    for name in ("retoolsql", "think2sql"):
        assert training_spec(name) == TrainingSpec(roles=("agent",), group_key="role")
    with pytest.raises(ValueError, match="group_key='prompt'"):
        TrainingSpec(group_key="prompt")


def test_an_agent_without_a_spec_is_told_what_to_add(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.helpers.registries import isolate_registry

    agents = isolate_registry(monkeypatch, "agents.registry.AGENTS")

    class Bare:
        def start(self, example: Any, db: Any, previous: Any = ()) -> None:
            return None

    agents.register("bare")(Bare)
    with pytest.raises(ConfigError, match="'bare' .*has no training_spec\\(\\); add one returning agents.types"):
        training_spec("bare")


@pytest.mark.parametrize("options,mask", [({}, True), ({"guardrails": True}, True), ({"guardrails": False}, False)])
def test_veRL_workers_take_the_mask_from_the_agent(options: dict[str, Any], mask: bool) -> None:
    written = C.WorkerSettings(
        agent="dualsql", agent_options=options, reward="dualsql"
    ).to_dict()  # the driver writes it
    settings = C.WorkerSettings.from_config(OmegaConf.create({C.PROJECT_NAMESPACE: written}))
    assert settings.training_spec == make_agent("dualsql", **options).training_spec()
    assert settings.error_turn_mask is mask
    assert C.WorkerSettings(agent="trustsql").error_turn_mask is False
