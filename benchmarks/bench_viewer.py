"""Size and load time of the trajectory viewer's page (eval.view) with many trajectories.

Builds ``--rows`` sample records (default 10,000) with the real record builder
(training/runs/samples.py): TRUST-SQL-like episodes of ``--tokens`` response tokens in four
turns (two of them tool observations), groups of 8 sharing a prompt of ~3,000 characters,
as a training run writes them. Prints the page's size (and what it would be with each
prompt repeated in every row), the time to write it, and in headless Chromium (Debian's
``chromium`` + ``chromium-driver``) the time from navigation to the first rendered page,
the rows in the DOM, and the time a full-text search over every row takes.

Run: ``python benchmarks/bench_viewer.py [--rows 10000] [--tokens 400]``.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.reports.viewer_page import render_page  # noqa: E402
from training.runs.samples import prompt_id, sample_record  # noqa: E402

WORDS = "SELECT name FROM schools WHERE city = 'Fresno' <think> explore </think> <action> table column".split()


def make_rows(n: int, tokens: int, group: int = 8, seed: int = 0) -> tuple[list[dict], dict]:
    rng = random.Random(seed)
    rows, prompts = [], {}
    quarter = tokens // 4
    for i in range(n):
        q = i // group
        prompt = [
            {"role": "system", "content": "You are a database agent. " * 60},
            {"role": "user", "content": f"Question {q}: how many schools are in city {q}? " * 3},
        ]
        key = prompt_id([q])
        prompts[key] = prompt
        policy = [1] * quarter + [0] * quarter + [1] * quarter + [0] * (tokens - 3 * quarter)
        turn = [0] * (2 * quarter) + [1] * (tokens - 2 * quarter)
        full = [float(p) for p in policy]
        rows.append(
            sample_record(
                step=1 + i // 64,
                engine="local",
                design="trustsql",
                example={
                    "id": f"q{q}",
                    "db_id": "schools",
                    "question": f"How many schools are in city {q}?",
                    "gold_sql": "SELECT COUNT(*) FROM schools WHERE city = 'x'",
                    "difficulty": "simple",
                },
                role="agent",
                group=f"q{q}:agent",
                sample=i % group,
                prompt=key,
                tokens=[rng.choice(WORDS) + " " for _ in range(tokens)],
                turn_index=turn,
                response_mask=policy,
                loss_masks={"full": full, "schema": full[: 2 * quarter] + [0.0] * (tokens - 2 * quarter)},
                advantages={"full": rng.uniform(-1, 1), "schema": 0.0},
                reward=rng.choice([0.0, 0.1, 1.1]),
                components={"exec": 0.0, "format": 0.1},
                tracks={"full": 0.1, "schema": 0.0},
                reward_error=None,
                outcome=rng.choice(["match", "mismatch", "pred_error"]),
                final_sql="SELECT 1",
                end_reason="answer",
                turns=[
                    {"index": 0, "phase": "explore_schema", "format_ok": True, "tool_name": "execute_sql_query"},
                    {"index": 1, "phase": "confirm_answer", "format_ok": True},
                ],
                tables={"gold": {"columns": ["n"], "rows": [[3]], "row_count": 1, "truncated": False}},
            )
        )
    return rows, prompts


def chromium_load(page: Path) -> dict[str, float] | None:
    browser, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver_path):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        out = {}
        for _ in range(3):
            driver.get(page.as_uri())
            out.setdefault("ready_ms", []).append(driver.execute_script("return window.viewReadyMs"))
        out["dom_rows"] = driver.execute_script("return document.querySelectorAll('.traj').length")
        out["search_ms"] = driver.execute_script(
            "const t = performance.now(); const e = document.getElementById('q'); e.value = 'city 77?';"
            "e.dispatchEvent(new Event('input')); return performance.now() - t;"
        )
        out["matches"] = driver.execute_script("return document.getElementById('count').textContent")
        return out
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--tokens", type=int, default=400)
    args = parser.parse_args()
    rows, prompts = make_rows(args.rows, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "view.html"
        start = time.perf_counter()
        page.write_text(render_page(rows, prompts, "benchmark"), encoding="utf-8")
        write_s = time.perf_counter() - start
        inlined = sum(len(json.dumps(prompts[r["prompt_id"]])) for r in rows)
        size = page.stat().st_size
        print(f"{args.rows} trajectories x {args.tokens} tokens, {len(prompts)} distinct prompts")
        print(
            f"page: {size / 1e6:.1f} MB written in {write_s:.2f} s "
            f"(prompts once: {sum(len(json.dumps(p)) for p in prompts.values()) / 1e6:.2f} MB; "
            f"repeated per row they would add {inlined / 1e6:.1f} MB)"
        )
        load = chromium_load(page)
        if load is None:
            print("chromium / chromedriver not found: load time not measured")
            return
        ready = ", ".join(f"{x:.0f}" for x in load["ready_ms"])
        print(
            f"chromium: first page rendered after {ready} ms (3 loads); {load['dom_rows']} rows in the DOM; "
            f"search over all rows {load['search_ms']:.0f} ms ({load['matches']})"
        )


if __name__ == "__main__":
    main()
