"""``eval.run`` with a local model generates through prefix reuse
(training/generation/prefix_reuse.py) by default, and ``model.prefix_reuse=false`` gives the
plain path - with the same answers on a tiny model in fp32."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.lively_model import lively_model
from tests.helpers.tiny_model import tiny_tokenizer
from training.generation.hf import ChunkedGenerate
from training.generation.prefix_reuse import PrefixReuseGenerate


def test_eval_run_uses_prefix_reuse_and_switching_it_off_gives_the_same_answers(
    bird: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import training.generation as generation
    from eval.run import run
    from training.config import compose_tree

    model_dir = tmp_path / "tiny"
    lively_model().save_pretrained(model_dir)  # greedy text that depends on the conversation
    tiny_tokenizer().save_pretrained(model_dir)
    made: list[object] = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        made.append(real(*args, **kwargs))
        return made[-1]

    real = generation.hf_generate
    monkeypatch.setattr(generation, "hf_generate", spy)
    answers = {}
    for switch in ("true", "false"):
        out = tmp_path / f"out-{switch}"
        overrides = [
            "recipe=retoolsql",
            f"model.path={model_dir}",
            f"model.prefix_reuse={switch}",
            "data=bird",
            f"data.root={bird}",
            "data.split=dev2",
            "eval.limit=2",
            "rollout.max_new_tokens=6",
            "engine.device=cpu",
            f"eval.out_dir={out}",
        ]
        run(compose_tree("eval", overrides), {o.split("=", 1)[0] for o in overrides}, say=lambda _: None)
        answers[switch] = {p.name: p.read_text() for p in out.glob("*.jsonl")}
    assert isinstance(made[0], PrefixReuseGenerate) and made[0].reused_tokens > 0
    assert type(made[1]) is ChunkedGenerate
    assert "records.jsonl" in answers["true"] and answers["true"] == answers["false"]
