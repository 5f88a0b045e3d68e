"""The SFT warm start: its loss, that it learns, and the engine stage around it
(saved weights, reuse on resume, the KL reference, the summary)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from agents import make_agent
from agents.types import Example
from tests.helpers.local_trainer import changed, trainer, weights
from tests.helpers.tiny_model import tiny_model, tiny_tokenizer
from tests.training.supervised.test_demonstrations import AGENTS, LIMITS
from tests.training.supervised.test_demonstrations import examples as examples
from training.engines.local.warm_start import DONE, warm_start_dir
from training.supervised.demonstrations import get_script, record_demonstrations
from training.supervised.fine_tune import WarmStartSettings, nll_sum, supervised_fine_tune


def demos(name: str, examples: list[Example]) -> list:
    options, _ = AGENTS[name]
    return record_demonstrations(
        make_agent(name, **options), examples, tiny_tokenizer(), LIMITS, get_script(name)
    ).trajectories


def test_nll_is_the_policy_tokens_negative_log_likelihood(examples: list[Example]) -> None:
    """Against a plain forward pass of each whole sequence: policy tokens only."""
    model = tiny_model(seed=3).eval()
    trajectories = demos("trustsql", examples[:2])
    with torch.no_grad():
        loss, tokens = nll_sum(model, trajectories, tiny_tokenizer().pad_token_id, "cpu", None)
    hand, count = 0.0, 0
    for t in trajectories:
        ids = torch.tensor([t.prompt_ids + t.response_ids])  # [1, seq]
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)  # [seq-1, vocab]
        start = len(t.prompt_ids)
        for j, (token, m) in enumerate(zip(t.response_ids, t.response_mask, strict=True)):
            if m:
                hand -= float(logp[start + j - 1, token])
                count += 1
    assert tokens == count == sum(sum(t.response_mask) for t in trajectories)
    assert 0 < count < sum(len(t.response_ids) for t in trajectories)  # observations are excluded
    assert float(loss) == pytest.approx(hand, rel=1e-4)


EPOCHS = {"think2sql": 12, "dualsql": 8}
"""Enough for the NLL to fall below half its start at lr 1e-2 (DualSQL's long demonstrations,
the slow case: about a third after 8 epochs, 0.46 after 6; Think2SQL's short ones need 12)."""


@pytest.mark.parametrize("name", ["think2sql", pytest.param("dualsql", marks=pytest.mark.slow)])  # dualsql: slow tier
def test_fine_tuning_lowers_the_demonstrations_nll(name: str, examples: list[Example]) -> None:
    model = tiny_model(seed=1)
    trajectories = demos(name, examples)
    pad = tiny_tokenizer().pad_token_id
    with torch.no_grad():
        start, _ = nll_sum(model, trajectories, pad, "cpu", None)
    steps: list[dict] = []
    result = supervised_fine_tune(
        model,
        trajectories,
        WarmStartSettings(epochs=EPOCHS[name], lr=1e-2, batch_size=4),
        pad,
        on_step=lambda i, m: steps.append(m),
    )
    with torch.no_grad():
        end, _ = nll_sum(model, trajectories, pad, "cpu", None)
    assert result["steps"] == len(steps) == EPOCHS[name] * -(-len(trajectories) // 4)
    assert float(end) < 0.5 * float(start)
    assert result["nll_last"] < result["nll_first"]


def test_engine_warm_start_is_saved_reused_and_reported(tmp_path: Path, examples: list[Example]) -> None:
    on = (
        "stage.warm_start.enable=true",
        "stage.warm_start.examples=4",
        "stage.warm_start.epochs=2",
        "stage.warm_start.lr=1e-3",
        "trainer.eval_before_after=true",
        "trainer.total_steps=1",
    )
    t = trainer("think2sql", tmp_path, examples, *on)
    initial = weights(t.model)
    summary = t.fit()
    done = json.loads((warm_start_dir(tmp_path) / DONE).read_text())
    assert done["result"]["demonstrations"] == 4 and done["result"]["steps"] == 2
    assert (warm_start_dir(tmp_path) / "model.safetensors").exists()
    assert summary["warm_start"]["steps"] == 2 and summary["ex_warm_start"] is not None
    assert changed(initial, t.model) > 1e-6
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert (
        kinds.index("eval_before") < kinds.index("warm_start") < kinds.index("eval_warm_start") < kinds.index("train")
    )
    assert t._reference_path() == str(warm_start_dir(tmp_path))

    # a run killed after the warm start (no RL checkpoint yet) reuses it instead of redoing it
    shutil.rmtree(tmp_path / "checkpoints")
    again = trainer("think2sql", tmp_path, examples, *on, "resume=true")
    lines = []
    again.say = lines.append
    again.fit()
    assert any("reusing the finished warm start" in line for line in lines)

    # other settings make the saved warm start stale: it is redone
    other = trainer(
        "think2sql", tmp_path, examples, *on[:-1], "trainer.total_steps=1", "stage.warm_start.epochs=1", "fresh=true"
    )
    other_lines: list[str] = []
    other.say = other_lines.append
    other.fit()
    assert not any("reusing" in line for line in other_lines)
    assert json.loads((warm_start_dir(tmp_path) / DONE).read_text())["result"]["steps"] == 1


def test_a_design_without_a_script_is_refused_before_any_work(
    tmp_path: Path, examples: list[Example], monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.supervised.demonstrations as demonstrations
    from tools.errors import ConfigError
    from tools.plugins import Registry

    without = Registry("demonstration script")
    for name in demonstrations.SCRIPTS.names():
        if name != "think2sql":
            without.register(name)(demonstrations.SCRIPTS.get(name))
    monkeypatch.setattr(demonstrations, "SCRIPTS", without)
    with pytest.raises(ConfigError, match="no demonstration script for agent 'think2sql'"):
        trainer("think2sql", tmp_path, examples, "stage.warm_start.enable=true")
    assert not (tmp_path / "metrics.jsonl").exists()
