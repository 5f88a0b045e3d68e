"""kill -9 and ``resume=auto`` (tests/helpers/soak.py, short): a real ``python -m training.run``
of the tiny model killed with SIGKILL right after a step's record appears - before that
step's checkpoint is written, the window where a rerun would record the step twice - and
restarted with ``resume=auto`` until it finishes, equals an uninterrupted run: every weight
tensor, every record file record by record, the summary's EX. The 200-step, 10-kill soak is
benchmarks/soak_local.py."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.helpers.soak import Kill, command, compare_runs, run_once, run_with_kills
from tests.helpers.sweep import save_tiny_model

STEPS = 4


@pytest.mark.slow
def test_a_run_killed_twice_with_sigkill_and_resumed_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    model = save_tiny_model(tmp_path / "tiny-model")
    reference, soaked = tmp_path / "uninterrupted", tmp_path / "soaked"
    # the uninterrupted run goes on beside the soaked one (each is one thread: two cores, half the wait)
    with ThreadPoolExecutor(max_workers=1) as pool:
        straight = pool.submit(
            run_once, command(reference, model, STEPS, 0, "think2sql"), tmp_path, tmp_path / "reference.log", 900
        )
        kills = [Kill(step=1, delay_s=0.0), Kill(step=3, delay_s=0.0)]  # the first before any checkpoint
        landed = run_with_kills(
            command(soaked, model, STEPS, 0, "think2sql"), soaked, tmp_path, tmp_path / "soaked.log", kills, 900
        )
        assert straight.result() == 0
    assert [k.step for k in landed] == [1, 3], landed
    assert all(k.last_record.startswith("train") for k in landed), landed  # killed mid-training
    assert compare_runs(reference, soaked) == []
    log = (tmp_path / "soaked.log").read_text()
    assert log.count("==== soak: start") == 2 and "[summary]" in log
    assert_the_comparison_sees(reference, tmp_path / "altered")


def assert_the_comparison_sees(reference: Path, altered: Path) -> None:
    """What the soak must catch, made on a copy of a real run: a step recorded twice, a
    sample lost, one weight changed by one ulp."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(reference, altered)
    metrics = altered / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    train = next(i for i, line in enumerate(lines) if '"kind": "train"' in line)
    metrics.write_text("".join(lines[: train + 1] + lines[train:]))
    samples = altered / "samples.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[1:]))
    weights_file = altered / "final" / "model.safetensors"
    weights = load_file(weights_file)
    name = sorted(weights)[0]
    weights[name] = weights[name].clone()
    weights[name].view(-1)[0] = torch.nextafter(weights[name].view(-1)[0], torch.tensor(float("inf")))
    weights_file.unlink()  # a hard link to the checkpoint's file: write a new one
    save_file(weights, weights_file)
    problems = compare_runs(reference, altered)
    assert any("written more than once" in p for p in problems), problems
    assert any(p.startswith("samples.jsonl") for p in problems), problems
    assert any(p.startswith("final weights: 1 of") for p in problems), problems
