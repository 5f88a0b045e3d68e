"""Datasets: BIRD, Spider and JSONL loaders and the bundled ``minibird`` benchmark.

```python
from eval.data import load_examples, minibird
examples = load_examples("bird", root="/data/bird", split="dev", drop_failing_gold=True)
root = minibird.ensure()        # the bundled benchmark, built once into the cache
```
Command line: ``python -m eval.data minibird --out DIR`` and
``python -m eval.data stats data=bird data.root=PATH data.split=dev``.
"""

from __future__ import annotations

from eval.data import minibird
from eval.data.loaders import KINDS, load_examples
from eval.data.selection import DataSource, keep_difficulties, load_from_config, load_sources

__all__ = [
    "KINDS",
    "DataSource",
    "keep_difficulties",
    "load_examples",
    "load_from_config",
    "load_sources",
    "minibird",
]
