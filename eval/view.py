"""``python -m eval.view RUN_OR_EVAL_DIR [--out FILE] [--serve [--port N]]``: read trajectories.

Writes one static HTML page (no server needed) of the sampled rollouts of a training run
(``samples.jsonl`` + ``prompts.jsonl``, training/runs/samples.py) or of the per-question records
of an evaluation (``records.jsonl``, eval/run_store.py): each trajectory turn by turn with
role, phase, the tool call and its observation, the tokens that carry loss highlighted
against the masked ones (observation, phase-prefix, error-turn masks; dropped by dynamic
sampling), reward components and advantages, the outcome, the reward-trust flags
(rex.trust.FLAGS), and the gold and predicted result tables side by side. Filters:
outcome, reward range, difficulty, design, step; and full-text search (flags included).

Large runs stay usable: the data is embedded once as JSON (each prompt once, referenced
by id) and the page renders one page of rows at a time (``PAGE_SIZE``), so the DOM holds
at most that many rows whatever the number of trajectories. ``--serve`` serves the page on
127.0.0.1 (a local HTTP server) instead of only writing it.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eval.compare import read_jsonl
from eval.reports.viewer_page import PAGE_SIZE, render_page
from tools.errors import DataError, ToolkitError

Say = Callable[[str], None]
PAGE = "view.html"


def training_rows(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows and prompts of a training run's samples.jsonl / prompts.jsonl."""
    from training.runs.samples import PROMPTS, SAMPLES

    rows = [dict(r, kind="train") for r in read_jsonl(folder / SAMPLES)]
    prompts = {p["prompt_id"]: p.get("messages") for p in read_jsonl(folder / PROMPTS)}
    return rows, prompts


def eval_rows(folder: Path) -> list[dict[str, Any]]:
    """Rows of an eval.run output: one per question (no token masks: nothing was trained)."""
    from eval.run_store import RECORDS, SETTINGS

    settings = json.loads((folder / SETTINGS).read_text()) if (folder / SETTINGS).is_file() else {}
    design = settings.get("recipe") or settings.get("agent") or ""
    rows = []
    for r in read_jsonl(folder / RECORDS):
        samples = r.get("samples") or [{}]
        chosen = samples[min(int(r.get("chosen", 0)), len(samples) - 1)]
        rows.append(
            {
                "kind": "eval",
                "example_id": str(r.get("id")),
                "db_id": r.get("db_id"),
                "difficulty": r.get("difficulty"),
                "question": r.get("question", ""),
                "gold_sql": r.get("gold_sql"),
                "final_sql": r.get("sql"),
                "outcome": r.get("outcome"),
                "design": design,
                "role": "",
                "step": None,
                "reward": float(r.get("ex", 0)),
                "components": {
                    "ex": float(r.get("ex", 0)),
                    "rex": float(r.get("rex", 0)),
                    "qatch": float((r.get("qatch") or {}).get("mean", 0.0)),
                },
                "text": chosen.get("last_turn", ""),
                "end_reason": chosen.get("end_reason", ""),
                "details": r.get("details") or {},
                "trust_flags": r.get("trust_flags") or [],
            }
        )
    return rows


def load_rows(path: str | Path) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """(rows, prompts, what) of a training run or an eval.run directory."""
    from eval.run_store import RECORDS
    from training.runs.samples import SAMPLES

    folder = Path(path).expanduser()
    if folder.is_file():
        folder = folder.parent
    if (folder / SAMPLES).is_file():
        rows, prompts = training_rows(folder)
        return rows, prompts, f"training run {folder}"
    if (folder / RECORDS).is_file():
        return eval_rows(folder), {}, f"evaluation {folder}"
    raise DataError(
        f"{path}: no {SAMPLES} (a training run) or {RECORDS} (an eval.run output) there; "
        "pass a training run_dir or an eval.run output folder"
    )


def write_view(path: str | Path, out: str | Path | None = None, say: Say = print) -> Path:
    """Write the page; return its path (default: ``view.html`` in the run directory)."""
    rows, prompts, what = load_rows(path)
    folder = Path(path).expanduser()
    target = Path(out) if out else (folder if folder.is_dir() else folder.parent) / PAGE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_page(rows, prompts, title=what), encoding="utf-8")
    size = target.stat().st_size
    say(
        f"[view] {len(rows)} trajectories of {what}, {len(prompts)} distinct prompts -> {target} "
        f"({size / 1e6:.1f} MB, {PAGE_SIZE} rows per page)"
    )
    return target


def serve(page: Path, port: int = 0, say: Say = print) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1 serving the page's folder (``port`` 0: any free port).
    Returns the server; ``serve_forever()`` runs it."""
    handler = functools.partial(_QuietHandler, directory=str(page.parent))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    say(f"[view] serving http://127.0.0.1:{server.server_address[1]}/{page.name} (Ctrl-C stops)")
    return server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        return


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.view", description=__doc__.split("\n\n")[0])
    parser.add_argument("run", metavar="RUN_OR_EVAL_DIR", help="a training run_dir or an eval.run output folder")
    parser.add_argument("--out", default=None, help=f"where the page goes (default RUN_OR_EVAL_DIR/{PAGE})")
    parser.add_argument("--serve", action="store_true", help="also serve it on http://127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="port for --serve (default 8765; 0 = any free one)")
    args = parser.parse_args(argv)
    try:
        page = write_view(args.run, args.out)
    except ToolkitError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.serve:
        server = serve(page, args.port)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
