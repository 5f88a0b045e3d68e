"""``eval.run`` against an OpenAI-compatible endpoint: questions/s sequential vs concurrent.

A fake server on loopback (``tests/helpers/fake_openai.py``) answers every request after a
fixed delay, standing in for a served checkpoint's generation time. ReToolSQL's episodes
run two turns: a ``sqlite_query`` tool call (run here, against the minibird dev databases)
and the final answer with the gold SQL. The same questions are evaluated through the real
``eval.run`` once with ``model.concurrency=1`` and once with ``model.concurrency=N``; the
script prints questions/s for both (timed from the first request to the written summary,
so loading data and tokenizer is left out), the ratio, the most requests the server saw in flight,
and checks that both runs wrote the same records.

    python benchmarks/bench_eval_endpoint.py                         # 32 questions x 4 samples, 200 ms, N=32
    python benchmarks/bench_eval_endpoint.py --questions 64 --samples 16 --delay 0.2 --concurrency 64
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root, for tests.helpers


def server_script(examples: list[Any], delay_s: float, first: list[float]) -> Any:
    """A ReToolSQL policy that checks its gold SQL with the tool, then answers with it
    (``first`` gets the time of the first request: the clock starts there, after loading)."""
    from tests.helpers.fake_openai import Reply, choice, completion

    def reply(body: dict[str, Any]) -> Reply:
        if not first:
            first.append(time.perf_counter())
        messages = body["messages"]
        ex = next(e for e in examples if any(e.question in str(m["content"]) for m in messages))
        if not any(m["role"] == "assistant" for m in messages):
            call = json.dumps({"name": "sqlite_query", "arguments": {"db_id": ex.db_id, "sql": ex.gold_sql}})
            text = f"<scratch_pad>check it</scratch_pad><tool_call>{call}"  # the stop string is stripped
        else:
            text = (
                f"<scratch_pad>verified</scratch_pad><relevant_tables>{', '.join(ex.gold_tables)}</relevant_tables>"
                f"<relevant_columns>{', '.join(ex.gold_columns)}</relevant_columns>"
                f"<final_answer>```sql\n{ex.gold_sql}\n```</final_answer>"
            )
        return Reply(body=completion(*[choice(text, i) for i in range(body.get("n", 1))]), delay_s=delay_s)

    return reply


def run_once(
    args: argparse.Namespace, tokenizer_dir: Path, out: Path, concurrency: int, examples: list[Any]
) -> tuple[float, dict[str, Any], int, int]:
    from eval.run import run
    from tests.helpers.fake_openai import FakeOpenAI
    from training.config import compose_tree

    first: list[float] = []
    with FakeOpenAI(server_script(examples, args.delay, first)) as server:
        overrides = [
            "recipe=retoolsql",
            f"model.path={tokenizer_dir}",
            f"model.base_url={server.base_url}",
            "model.name=served",
            f"model.concurrency={concurrency}",
            "data=minibird",
            "engine.device=cpu",
            "engine.laptop_profile=off",
            f"eval.limit={args.questions}",
            f"eval.out_dir={out}",
            "rollout.max_new_tokens=256",
        ]
        if args.samples > 1:
            overrides += ["eval.mode=sc", f"eval.samples={args.samples}", "eval.temperature=1.0"]
        raw = compose_tree("eval", overrides)
        summary = run(raw, {o.split("=", 1)[0] for o in overrides}, lambda _: None)
        seconds = time.perf_counter() - first[0]  # first request -> records, summary and report written
        return seconds, summary, server.max_in_flight, len(server.requests)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4, help="samples per question (eval.mode=sc when > 1)")
    parser.add_argument("--delay", type=float, default=0.2, help="seconds the server takes per request")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()

    from eval.data import load_examples
    from tests.helpers.tiny_model import tiny_tokenizer

    examples = load_examples("minibird", None, "dev")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_dir = Path(tmp) / "tok"
        tiny_tokenizer().save_pretrained(tokenizer_dir)
        rows = {}
        for n in (1, args.concurrency):
            seconds, summary, peak, requests = run_once(args, tokenizer_dir, Path(tmp) / f"c{n}", n, examples)
            records = sorted((Path(tmp) / f"c{n}" / "records.jsonl").read_text().splitlines())
            rows[n] = (seconds, summary, peak, requests, records)
            print(
                f"concurrency {n:>3}: {summary['n']} questions x {args.samples} samples in {seconds:6.2f} s = "
                f"{summary['n'] / seconds:7.2f} questions/s; {requests} requests, at most {peak} in flight; "
                f"EX {summary['ex']:.1%}, failed samples {summary['endpoint']['failed_samples']}"
            )
    seq, par = rows[1], rows[args.concurrency]
    print(
        f"server delay {args.delay * 1000:.0f} ms per request: concurrent / sequential = {seq[0] / par[0]:.1f}x "
        f"questions/s; same records: {seq[4] == par[4]}"
    )


if __name__ == "__main__":
    main()
