"""Each design page's settings tables state the values its recipe runs with: every row that
names a config key and opens its value cell with a literal (a number, a percentage, a
backticked name, on/off, none, or a β schedule) is checked against the composed recipe, so
a page cannot go stale when a recipe changes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.designs import project_designs
from training.config import compose_tree

REPO = Path(__file__).resolve().parents[2]
NUMBER = re.compile(r"-?\d[\d,]*(\.\d+)?(e-?\d+)?")
SCHEDULE_STEP = re.compile(r"(\S+) from step (\d+)")
NOT_CHECKED = object()
MIN_CHECKED = 30  # each page states at least this many recipe values as literals


def table_rows(page: str) -> list[tuple[str, str, str]]:
    """(setting, value, first config key) of every 4-column table row that names one."""
    out = []
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or cells[0] == "setting" or set(cells[0]) <= {"-"}:
            continue
        keys = re.findall(r"`([^`]+)`", cells[3])
        if keys and re.fullmatch(r"[a-z_]+(\.[a-z_0-9]+)*", keys[0]):
            out.append((cells[0], cells[1], keys[0]))
    return out


def stated(value: str) -> Any:
    """The literal a value cell opens with, or NOT_CHECKED for prose."""
    if "${" in value:
        return NOT_CHECKED  # an interpolation: the page names the source, not a value
    steps = SCHEDULE_STEP.findall(value)
    if steps and value.startswith(steps[0][0]):
        return [[int(step), _number(x)] for x, step in steps]
    head = re.split(r"[:(;]|,(?!\d{3})| throughout| per | for | of ", value)[0].strip()
    if head.endswith(" throughout"):
        head = head.removesuffix(" throughout")
    if match := re.fullmatch(r'`"?([^`"]+)"?`', head):
        return match.group(1)
    if head.endswith("%") and NUMBER.fullmatch(head[:-1].strip()):
        return _number(head[:-1].strip()) / 100
    if (number := re.fullmatch(rf"({NUMBER.pattern})( [a-z ]+)?", head)) is not None:
        return _number(number.group(1))  # "8,192 tokens", "6,000 policy tokens"
    return {"on": True, "off": False, "none": None}.get(head, NOT_CHECKED)


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def configured(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return NOT_CHECKED  # an agent option or a code name: not part of the composed tree
        node = node[part]
    return node


def agrees(page_value: Any, config_value: Any, key: str, value_cell: str) -> bool:
    if key == "algorithm.kl_schedule" and isinstance(page_value, float):
        page_value = [[0, page_value]] if "throughout" in value_cell or "from step 0" in value_cell else page_value
    if isinstance(page_value, list) and isinstance(config_value, list):
        return [[int(s), float(b)] for s, b in config_value] == page_value
    if page_value is None:
        return config_value in (None, {}, [], "")
    if isinstance(page_value, float) and isinstance(config_value, (int, float)) and not isinstance(config_value, bool):
        return abs(config_value - page_value) <= 1e-12 * max(1.0, abs(page_value))
    return bool(config_value == page_value)


def stale_rows(design: str, page: str) -> tuple[list[str], int]:
    """The rows whose stated value differs from the recipe, and how many rows were checked."""
    tree = compose_tree("config", [f"recipe={design}"])
    stale, checked = [], 0
    for setting, value, key in table_rows(page):
        page_value, config_value = stated(value), configured(tree, key)
        if page_value is NOT_CHECKED or config_value is NOT_CHECKED:
            continue
        checked += 1
        if not agrees(page_value, config_value, key, value):
            stale.append(f"{setting!r} ({key}): the page says {value!r}, the recipe runs {config_value!r}")
    return stale, checked


SOURCE = re.compile(r"§\s?\d|App\. [A-Z]|Table \d|Figure \d|[Ee]q\. \d|authors' code|project choice")
"""What a source cell must name: a section, appendix, table, figure or equation of the
paper, the authors' code, or "project choice"."""


def settings_rows(page: str) -> list[tuple[str, str]]:
    """(setting, source) of every row of the page's settings tables (``| setting | value |
    source | config key |``)."""
    out, in_settings = [], False
    for line in page.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.strip().startswith("|"):
            in_settings = False
            continue
        if cells[:4] == ["setting", "value", "source", "config key"]:
            in_settings = True
            continue
        if in_settings and len(cells) == 4 and not set(cells[0]) <= {"-"}:
            out.append((cells[0], cells[2]))
    return out


@pytest.mark.parametrize("design", project_designs())
def test_every_setting_says_where_it_comes_from(design: str) -> None:
    """Each row of a settings table names its source: a paper section, the authors' code, or
    "project choice" (a value the seed does not contain is the project's, and says so)."""
    page = (REPO / "designs" / design / "README.md").read_text(encoding="utf-8")
    rows = settings_rows(page)
    assert len(rows) >= MIN_CHECKED, f"designs/{design}/README.md: {len(rows)} settings rows found"
    unsourced = [f"{setting!r}: {source!r}" for setting, source in rows if not SOURCE.search(source)]
    assert not unsourced, f"designs/{design}/README.md rows without a source:\n" + "\n".join(unsourced)


def test_a_row_without_a_source_is_caught() -> None:
    page = "| setting | value | source | config key |\n|---|---|---|---|\n| lr | 1e-6 | §4.4 | `optim.lr` |\n"
    assert settings_rows(page) == [("lr", "§4.4")]
    assert not SOURCE.search(settings_rows(page.replace("§4.4", " "))[0][1])
    assert not SOURCE.search("not in the paper") and SOURCE.search("not in the paper; project choice")


@pytest.mark.parametrize("design", project_designs())
def test_the_settings_tables_state_what_the_recipe_runs(design: str) -> None:
    page = (REPO / "designs" / design / "README.md").read_text(encoding="utf-8")
    stale, checked = stale_rows(design, page)
    assert not stale, f"designs/{design}/README.md is stale:\n" + "\n".join(stale)
    assert checked >= MIN_CHECKED, f"only {checked} rows of designs/{design}/README.md were checked"


def test_a_changed_recipe_value_is_caught() -> None:
    page = (REPO / "designs" / "retoolsql" / "README.md").read_text(encoding="utf-8")
    row = next(line for line in page.splitlines() if "`supervised.teacher_samples`" in line)
    stale, _ = stale_rows("retoolsql", page.replace(row, row.replace("| 8 sampled", "| 4 sampled", 1)))
    assert len(stale) == 1 and "supervised.teacher_samples" in stale[0] and "runs 8" in stale[0]
    kl = next(line for line in page.splitlines() if "`algorithm.kl_schedule`" in line)
    stale, _ = stale_rows("retoolsql", page.replace(kl, kl.replace("0.001 from step 40", "0.001 from step 50")))
    assert len(stale) == 1 and "algorithm.kl_schedule" in stale[0] and "[40, 0.001]" in stale[0]
    group = next(line for line in page.splitlines() if "`algorithm.group_size`" in line)
    stale, _ = stale_rows("retoolsql", page.replace(group, group.replace("| 16", "| 8", 1)))
    assert len(stale) == 1 and "algorithm.group_size" in stale[0]


@pytest.mark.parametrize(
    "cell,value",
    [
        ("16 (16 × 16 = 256 completions)", 16.0),
        ("8,192 tokens (gold-table schema only)", 8192.0),
        ("1e-6", 1e-6),
        ("3 % of the steps (3 of 80)", 0.03),
        ('`"0.5_2.0"`', "0.5_2.0"),
        ("`mine`", "mine"),
        ("off: the teacher sees question", False),
        ("none (the shared `verl: {}`)", None),
        ("0.005 from step 0, 0.001 from step 40, 0 from step 80", [[0, 0.005], [40, 0.001], [80, 0.0]]),
        ("`${data.ex_metric}`: `ex` on BIRD", NOT_CHECKED),
        ("8 sampled (pass@8) and one greedy per question", 8.0),
        ("one greedy and 8 sampled per question", NOT_CHECKED),
    ],
)
def test_value_cells_are_read_as_their_opening_literal(cell: str, value: Any) -> None:
    assert stated(cell) == value if value is not NOT_CHECKED else stated(cell) is NOT_CHECKED
