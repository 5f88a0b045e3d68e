"""Reading a large SynSQL-2.5M ``data.json`` with a ``limit``: seconds and peak memory.

Writes a SynSQL-2.5M folder whose ``data.json`` holds ``--entries`` entries shaped like the
release's (each with a ``cot`` of ``--cot-chars`` characters; the real file has about 2.5
million), then loads ``--limit`` questions from it in a fresh interpreter per code version
and prints the seconds of the load and the process's peak resident memory::

    python benchmarks/bench_question_files.py                        # this checkout
    python benchmarks/bench_question_files.py --compare /path/to/old/checkout
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the repository root, for tests.*

LOAD = """
import json, sys, time
from eval.data import load_examples
def peak_mb():  # VmHWM: this process's own peak (ru_maxrss can carry the parent's over exec)
    line = next(x for x in open("/proc/self/status") if x.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024
before = peak_mb()
start = time.perf_counter()
examples = load_examples("synsql", sys.argv[1], "train", limit=int(sys.argv[2]))
print(json.dumps({"seconds": time.perf_counter() - start, "examples": len(examples),
                  "peak_mb": peak_mb(), "import_mb": before}))
"""


def write_folder(root: Path, entries: int, cot_chars: int) -> Path:
    from tests.eval.conftest import make_music_db

    folder = root / "SynSQL-2.5M"
    make_music_db(folder / "databases" / "music_festival" / "music_festival.sqlite")
    entry = {
        "db_id": "music_festival",
        "sql_complexity": "Simple",
        "question_style": "Formal",
        "question": "How many singers are there?",
        "external_knowledge": "",
        "cot": "x" * cot_chars,
        "sql": "SELECT COUNT(*) FROM singer",
    }
    text = json.dumps(entry)
    with (folder / "data.json").open("w") as out:
        out.write("[" + ",\n".join([text] * entries) + "]")
    (folder / "tables.json").write_text("[]")
    return folder


def measure(checkout: Path, folder: Path, limit: int) -> dict[str, float]:
    env = {"PYTHONPATH": str(checkout), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, str(folder), str(limit)],
        capture_output=True,
        text=True,
        env=env,
        cwd=checkout,  # `python -c` puts the working folder first on sys.path
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--cot-chars", type=int, default=1_000)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--compare", type=Path, help="another checkout to time the same way (the baseline)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_questions_") as tmp:
        folder = write_folder(Path(tmp), args.entries, args.cot_chars)
        size_mb = (folder / "data.json").stat().st_size / 1e6
        print(f"# data.json: {args.entries:,} entries, {size_mb:.0f} MB; limit={args.limit}")
        rows = [("baseline", args.compare)] if args.compare else []
        rows.append(("this checkout", REPO))
        results = {name: measure(path, folder, args.limit) for name, path in rows}
    for name, r in results.items():
        print(
            f"{name:<14} {r['seconds']:7.2f} s  peak {r['peak_mb']:7.0f} MB "
            f"({r['import_mb']:.0f} MB after the imports; {r['examples']} questions)"
        )
    if args.compare:
        base, new = results["baseline"], results["this checkout"]
        speed, memory = base["seconds"] / new["seconds"], base["peak_mb"] / new["peak_mb"]
        print(f"ratio          {speed:7.1f}x faster, {memory:.1f}x less peak memory")


if __name__ == "__main__":
    main()
