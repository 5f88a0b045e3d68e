"""Training questions from one or several datasets: a difficulty filter and a mixture.

A *source* is one split of one dataset (``DataSource``: kind, root, split, the records it
takes: ``offset`` and ``limit``, and the difficulty levels it keeps). A ``data`` config is
a source, plus ``mixture``: further sources whose examples are appended after its own
(concatenation, in the order given). In a mixture every id is prefixed with its source's
name (``bird/12``, ``spider/12``; the name defaults to the kind), so ids stay unique across
datasets that number their questions alike; a single source keeps its ids as they are.

Difficulty labels differ by dataset: BIRD (and minibird) label ``simple`` / ``moderate`` /
``challenging``, Spider's hardness rules ``easy`` / ``medium`` / ``hard`` / ``extra``,
SynSQL-2.5M ``Simple`` / ``Moderate`` / ``Complex`` / ``Highly Complex``. ``difficulties``
names the labels to keep: a dataset's own label keeps that label, and a label of BIRD's
scale keeps every label mapped onto it (``LEVELS``: medium -> moderate; hard, extra,
complex and highly complex -> challenging; a project choice), so ``[moderate,
challenging]`` is "Moderate or harder" in every dataset. An example without a label
(``unknown``) is dropped by any filter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.types import Example
from tools.errors import ConfigError, DataError

LEVELS = {
    "simple": "simple",
    "moderate": "moderate",
    "challenging": "challenging",
    "easy": "simple",
    "medium": "moderate",
    "hard": "challenging",
    "extra": "challenging",
    "complex": "challenging",
    "highly_complex": "challenging",
}
"""Every known difficulty label (normalised: ``difficulty_key``) -> its level on BIRD's scale."""

SOURCE_KEYS = ("kind", "root", "split", "drop_failing_gold", "limit", "offset", "difficulties", "name", "dsn")
INHERITED = ("split", "drop_failing_gold", "difficulties")
"""What a mixture entry takes from the ``data`` config it extends unless it sets its own."""


def difficulty_key(label: str) -> str:
    """A label as the filter compares it: lower case, words joined by ``_``.

    >>> difficulty_key("Highly Complex"), difficulty_key("extra")
    ('highly_complex', 'extra')
    """
    return "_".join(str(label).strip().lower().replace("-", " ").split())


def check_difficulties(values: Any, key: str) -> tuple[str, ...] | None:
    """``values`` as normalised labels (None: no filter), refusing an unknown label by name."""
    if values is None:
        return None
    if isinstance(values, str) or not isinstance(values, Sequence) or not values:
        raise ConfigError(f"{key}={values!r}: a non-empty list of difficulty labels, e.g. [moderate, challenging]")
    labels = tuple(difficulty_key(v) for v in values)
    unknown = [v for v, k in zip(values, labels, strict=True) if k not in LEVELS]
    if unknown:
        raise ConfigError(f"{key}: unknown difficulty label(s) {unknown}; known labels: {', '.join(LEVELS)}")
    return labels


def keep_difficulties(examples: Sequence[Example], wanted: Sequence[str] | None, where: str) -> list[Example]:
    """The examples whose label, or its level on BIRD's scale, is in ``wanted`` (None: all).
    A filter that keeps none of a non-empty split is an error naming the labels present."""
    if wanted is None:
        return list(examples)
    chosen = set(check_difficulties(wanted, f"{where} difficulties") or ())
    kept = [
        ex for ex in examples if {difficulty_key(ex.difficulty), LEVELS.get(difficulty_key(ex.difficulty))} & chosen
    ]
    if examples and not kept:
        present = sorted({ex.difficulty for ex in examples})
        raise DataError(
            f"{where}: difficulties={list(wanted)} keeps none of its {len(examples)} examples (their labels: "
            f"{', '.join(present)}); choose labels it has, or difficulties=null"
        )
    return kept


@dataclass(frozen=True)
class DataSource:
    """One split of one dataset, the records taken from it and the difficulties kept."""

    kind: str
    root: str | None = None
    split: str = "train"
    drop_failing_gold: bool = True
    limit: int | None = None
    offset: int = 0
    difficulties: tuple[str, ...] | None = None
    name: str | None = None  # the id prefix in a mixture; None = the kind
    dsn: str | None = None  # a PostgreSQL database holding the questions' databases (one schema each)

    @property
    def label(self) -> str:
        return self.name or self.kind

    @classmethod
    def from_mapping(cls, raw: Any, key: str, defaults: Mapping[str, Any] | None = None) -> DataSource:
        """A source from a config mapping (``key`` names it in messages); ``defaults`` fill
        the keys it leaves out."""
        if not isinstance(raw, Mapping) or not raw.get("kind"):
            raise ConfigError(
                f"{key}={raw!r}: a mapping with at least kind (and root), e.g. {{kind: spider, root: /data/spider}}"
            )
        unknown = sorted(set(raw) - set(SOURCE_KEYS))
        if unknown:
            raise ConfigError(f"{key}: unknown key(s) {unknown}; a data source takes {', '.join(SOURCE_KEYS)}")
        from eval.data.loaders import KINDS

        if raw["kind"] not in KINDS.names():
            raise ConfigError(f"{key}.kind={raw['kind']!r}; choose one of {', '.join(KINDS.names())}")
        values = {**dict(defaults or {}), **{k: v for k, v in raw.items() if v is not None or k == "root"}}
        limit, offset = values.get("limit"), values.get("offset", 0)
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"{key}.limit={limit!r}: a positive integer or null")
        if not isinstance(offset, int) or offset < 0:
            raise ConfigError(f"{key}.offset={offset!r}: 0 or a positive integer (records skipped first)")
        return cls(
            kind=str(values["kind"]),
            root=None if values.get("root") in (None, "") else str(values["root"]),
            split=str(values.get("split", "train")),
            drop_failing_gold=bool(values.get("drop_failing_gold", True)),
            limit=limit,
            offset=offset,
            difficulties=check_difficulties(values.get("difficulties"), f"{key}.difficulties"),
            name=values.get("name"),
            dsn=values.get("dsn") or None,
        )

    def load(self) -> list[Example]:
        from eval.data.loaders import load_examples

        examples = load_examples(
            self.kind, self.root, self.split, self.drop_failing_gold, self.limit, dsn=self.dsn, offset=self.offset
        )
        return keep_difficulties(examples, self.difficulties, f"{self.kind} {self.split}")


def training_sources(data: Any, key: str = "data") -> list[DataSource]:
    """The sources of a ``data``-like config (a mapping or a dataclass): its own split, then
    its ``mixture`` entries (each inherits ``split``, ``drop_failing_gold`` and
    ``difficulties`` unless it sets them)."""
    own = {k: _get(data, k) for k in SOURCE_KEYS if _get(data, k) is not None or k == "root"}
    first = DataSource.from_mapping(own, key)
    defaults = {k: getattr(first, k) for k in INHERITED}
    mixture = _get(data, "mixture") or []
    if not isinstance(mixture, Sequence) or isinstance(mixture, str):
        raise ConfigError(f"{key}.mixture={mixture!r}: a list of data sources ({{kind, root, ...}})")
    sources = [first] + [DataSource.from_mapping(m, f"{key}.mixture[{i}]", defaults) for i, m in enumerate(mixture)]
    names = [s.label for s in sources]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(
            f"{key}.mixture: several sources are named {repeated} (a name defaults to the kind); give each a "
            "distinct name (name: ...): it prefixes the source's question ids"
        )
    return sources


def load_sources(sources: Sequence[DataSource]) -> list[Example]:
    """The sources' examples, concatenated in order; with several sources each id becomes
    ``<name>/<id>`` (unique: the names are distinct and each split's ids are)."""
    loaded = [(s, s.load()) for s in sources]
    if len(loaded) == 1:
        return loaded[0][1]
    return [dataclasses.replace(ex, id=f"{s.label}/{ex.id}") for s, examples in loaded for ex in examples]


def load_from_config(data: Any, which: str = "train") -> list[Example]:
    """The examples a ``data`` config names (a mapping or the typed dataclass).

    ``which="train"`` uses the training sources (``split``, ``offset``, ``difficulties``,
    ``mixture``), then ``train_ids`` (a file of ids narrowing them, ``eval/data/question_ids.py``)
    and ``limit``; ``which="eval"`` uses ``eval_split`` and ``eval_limit`` of the first source.
    """
    from eval.data.loaders import load_examples

    if which not in ("train", "eval"):
        raise ConfigError(f"which={which!r}: use 'train' or 'eval'")
    if which == "eval":
        return load_examples(
            _get(data, "kind"),
            _get(data, "root"),
            _get(data, "eval_split"),
            bool(_get(data, "drop_failing_gold")),
            _get(data, "eval_limit"),
            dsn=_get(data, "dsn"),
        )
    sources = training_sources(data)
    ids_file, limit = _get(data, "train_ids"), _get(data, "limit")
    if not ids_file:
        return load_sources(sources)
    from eval.data.question_ids import keep_ids

    kept = keep_ids(load_sources([dataclasses.replace(sources[0], limit=None), *sources[1:]]), ids_file)
    return kept[:limit] if limit else kept


def _get(data: Any, key: str) -> Any:
    return data.get(key) if isinstance(data, Mapping) else getattr(data, key, None)
