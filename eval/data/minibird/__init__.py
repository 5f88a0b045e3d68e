"""minibird: a small benchmark in exact BIRD layout, generated deterministically.

Eight databases in different domains (six train, two dev, disjoint) with the noise that
breaks real queries on BIRD, and ~900 checked questions with evidence, gold SQL and
BIRD-like difficulty labels. Pure Python with a fixed seed: the same version always
produces the same bytes (``MANIFEST.json`` lists every file's sha256).

``ensure()`` builds it once into ``tools.cache.cache_root()/minibird-<version>`` (built in
a temporary folder and renamed, so an interrupted build never leaves a half cache);
``build(out_dir)`` writes it anywhere (``python -m eval.data minibird --out DIR``).
"""

from __future__ import annotations

from eval.data.minibird.builder import FORMAT, SPLITS, build, ensure, version

__all__ = ["FORMAT", "SPLITS", "build", "ensure", "version"]
