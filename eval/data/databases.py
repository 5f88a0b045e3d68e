"""Which database files a benchmark's splits use (``python -m tools build-cache data=...``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

Say = Callable[[str], None]


def databases_of_data(overrides: Sequence[str], say: Say = print) -> list[str]:
    """The database files of a benchmark's training and held-out splits (``data=bird
    data.root=PATH``, the same Hydra overrides as training), loaded the way training loads
    them (which also fills the gold-SQL cache training reads at start)."""
    from eval.data import load_examples
    from eval.data.__main__ import compose_data

    data = compose_data(overrides)
    paths: dict[str, None] = {}
    splits = dict.fromkeys([(data["split"], data.get("limit")), (data.get("eval_split"), data.get("eval_limit"))])
    for split, limit in splits:
        if not split:
            continue
        examples = load_examples(data["kind"], data["root"], split, bool(data.get("drop_failing_gold")), limit)
        found = dict.fromkeys(ex.db_path for ex in examples)
        say(f"[build-cache] data={data['kind']} split {split}: {len(examples)} questions on {len(found)} database(s)")
        paths.update(found)
    return list(paths)
