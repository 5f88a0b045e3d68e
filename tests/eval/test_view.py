"""``eval.view`` on a real local-engine run (TRUST-SQL, scripted multi-turn policy with
tool calls), opened in headless Chromium: counts, masks token for token against the
update's masks, filters, search, paging with 10,000 trajectories, --serve on loopback."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from eval.reports.viewer_page import PAGE_SIZE
from eval.view import load_rows, serve, write_view
from tests.helpers.browser import chromium, console_errors
from tests.helpers.local_trainer import examples, fit_keeping_buffers, trainer  # noqa: F401 - the fixture is used below


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory, examples: list) -> tuple[Path, list[Any]]:  # noqa: F811
    """A two-step run; returns its directory and the update's buffer of each step."""
    run = tmp_path_factory.mktemp("run")
    t = trainer("trustsql", run, examples, "algorithm.dynamic_sampling.enable=false", "trainer.total_steps=2")
    return run, fit_keeping_buffers(t)


def _js(driver: Any, script: str) -> Any:
    return driver.execute_script(script)


def _set(driver: Any, ident: str, value: str) -> None:
    driver.execute_script(
        "const e = document.getElementById(arguments[0]); e.value = arguments[1];"
        "e.dispatchEvent(new Event(e.tagName === 'INPUT' && e.type === 'search' ? 'input' : 'change'));",
        ident,
        value,
    )


def _count(driver: Any) -> int:
    return int(_js(driver, "return document.getElementById('count').textContent").split()[0])


@pytest.mark.slow
def test_viewer_shows_the_run_with_training_masks_and_filters(trained: tuple[Path, list[Any]], tmp_path: Path) -> None:
    run, buffers = trained
    page = write_view(run, say=lambda _: None)
    rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == sum(len(b.trajectories) for b in buffers) == 16
    with chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert _js(driver, "return document.body.dataset.ready") == "1"
        assert _count(driver) == 16 and _js(driver, "return document.querySelectorAll('.traj').length") == 16
        # masks, token for token, for every trajectory and both loss tracks
        for i, row in enumerate(rows):
            buffer = buffers[row["step"] - 1]
            k = [j for j, r in enumerate(rows) if r["step"] == row["step"]].index(i)
            driver.find_element("css selector", f'.traj[data-i="{i}"] .head').click()
            for track in ("full", "schema"):
                _js(
                    driver,
                    f"const s = document.querySelector('.traj[data-i=\"{i}\"] select.track');"
                    f"s.value = '{track}'; s.dispatchEvent(new Event('change'));",
                )
                classes = _js(
                    driver,
                    f"return [...document.querySelectorAll('.traj[data-i=\"{i}\"] .tok')]"
                    ".filter(t => !t.closest('.legend')).map(t => t.classList[1])",
                )
                assert [float(c == "L") for c in classes] == buffer.masks[track][k], (i, track)
                texts = _js(
                    driver,
                    f"return [...document.querySelectorAll('.traj[data-i=\"{i}\"] .tokens .tok')]"
                    ".map(t => t.textContent)",
                )
                assert texts == row["tokens"]
        body = _js(driver, "return document.querySelector('.traj[data-i=\"0\"] .body').innerText")
        assert "phase explore_schema" in body and "observation · tool execute_sql_query" in body
        # every schools gold is one row: each row's flags show in its head and, explained, in its body
        assert all(r["trust_flags"] == ["gold_one_row"] for r in rows)
        head = _js(driver, "return document.querySelector('.traj[data-i=\"0\"] .head').innerText")
        assert "flags: gold_one_row" in head and "wrong SQL can match by chance" in body
        assert "gold" in body and "predicted" in body and rows[0]["gold_sql"] in body
        # filters and search change what is shown
        _set(driver, "f-step", "2")
        assert _count(driver) == 8
        _set(driver, "f-step", "")
        _set(driver, "f-outcome", "match")
        assert _count(driver) == sum(r["outcome"] == "match" for r in rows) < 16
        _set(driver, "f-outcome", "")
        _set(driver, "f-rmin", "0.5")
        assert _count(driver) == sum(r["reward"] >= 0.5 for r in rows)
        _set(driver, "f-rmin", "")
        _set(driver, "q", rows[0]["question"][:30])
        assert _count(driver) == sum(rows[0]["question"][:30].lower() in r["question"].lower() for r in rows) < 16
        _set(driver, "q", "")
        _set(driver, "f-design", "trustsql")
        assert _count(driver) == 16
        shot = tmp_path / "view.png"
        driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:4] == b"\x89PNG" and shot.stat().st_size > 10_000
        assert console_errors(driver) == []


def _many(rows: list[dict], n: int) -> list[dict]:
    """``n`` rows made from the real ones (new ids and steps, the same prompts)."""
    return [dict(rows[i % len(rows)], example_id=f"x{i}", step=1 + i // len(rows)) for i in range(n)]


@pytest.mark.slow
def test_ten_thousand_trajectories_keep_the_dom_small(trained: tuple[Path, list[Any]], tmp_path: Path) -> None:
    from eval.reports.viewer_page import render_page

    run, _ = trained
    rows, prompts, _ = load_rows(run)
    many = _many(rows, 10_000)
    page = tmp_path / "view.html"
    page.write_text(render_page(many, prompts, "big"), encoding="utf-8")
    text = page.read_text()
    for messages in prompts.values():  # each prompt once (its question-specific user message), referenced by id
        assert text.count(json.dumps(messages[-1]["content"], ensure_ascii=False)[1:-1].replace("</", "<\\/")) == 1
    per_row = len(json.dumps(rows[0], separators=(",", ":"), ensure_ascii=False))
    assert page.stat().st_size < 1.2 * 10_000 * per_row + 100_000
    with chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert _count(driver) == 10_000
        assert _js(driver, "return document.querySelectorAll('.traj').length") == PAGE_SIZE <= 200
        driver.find_element("id", "next").click()
        assert _js(driver, "return document.querySelector('.traj').dataset.i") == str(PAGE_SIZE)
        assert _js(driver, "return document.querySelectorAll('.traj').length") == PAGE_SIZE
        _set(driver, "q", "x9999")  # a search over every row, still one page in the DOM
        assert _count(driver) == 1 and _js(driver, "return document.querySelectorAll('.traj').length") == 1
        assert console_errors(driver) == []


def test_serve_answers_on_loopback(trained: tuple[Path, list[Any]]) -> None:
    page = write_view(trained[0], say=lambda _: None)
    server = serve(page, 0, say=lambda _: None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/{page.name}"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200 and b'<script id="data"' in response.read()
    finally:
        server.shutdown()
        server.server_close()


def test_eval_run_records_open_too(tmp_path: Path) -> None:
    from eval.data import load_examples
    from eval.evaluate import evaluate_predictions
    from tests.eval.conftest import write_bird

    bird = write_bird(tmp_path / "bird").parent
    preds = tmp_path / "preds.jsonl"
    preds.write_text(
        "".join(
            json.dumps(p) + "\n"
            for p in [
                {"question_id": 10, "db_id": "music", "sql": "SELECT COUNT(*) FROM singer"},
                {"question_id": 11, "db_id": "music", "sql": "SELECT 1"},
            ]
        )
    )
    out = tmp_path / "eval"
    evaluate_predictions(load_examples("bird", bird, "dev"), preds, out, say=lambda _: None, progress=False)
    rows, _, what = load_rows(out)
    assert what.startswith("evaluation") and {r["outcome"] for r in rows} >= {"match", "mismatch"}
    # records.jsonl carries the reward-trust flags: a count and a one-name gold are one row,
    # and "List every item." is the whole item table
    records = {r["id"]: r["trust_flags"] for r in map(json.loads, (out / "records.jsonl").read_text().splitlines())}
    assert records == {
        "10": ["gold_one_row"],
        "11": ["gold_one_row"],
        "12": ["gold_one_row"],
        "13": ["gold_whole_table"],
    }
    page = write_view(out, say=lambda _: None)
    with chromium() as driver:
        driver.get(page.resolve().as_uri())
        assert _count(driver) == len(rows)
        heads = _js(driver, "return [...document.querySelectorAll('.traj .head')].map(h => h.innerText)")
        assert sum("flags: gold_whole_table" in h for h in heads) == 1
        assert sum("flags: gold_one_row" in h for h in heads) == 3
        _set(driver, "q", "gold_whole_table")  # the search reads the flags too
        assert _count(driver) == 1
        _set(driver, "q", "")
        _set(driver, "f-outcome", "match")
        assert _count(driver) == sum(r["outcome"] == "match" for r in rows)
        assert console_errors(driver) == []


def test_a_folder_without_records_says_what_to_pass(tmp_path: Path) -> None:
    from tools.errors import DataError

    with pytest.raises(DataError, match="training run_dir or an eval.run output"):
        load_rows(tmp_path)
