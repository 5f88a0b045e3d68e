"""The project's own pages back every reference to them, and the design pages stay true.

Code, configs, tests and pages cite ``docs/<page>.md`` and ``designs/<name>/README.md``,
often with a section name in quotes (``docs/engines.md "The laptop profile"``): each cited
page must exist and each cited section must be one of its headings. Nothing refers to a
document outside the repository. Each design's page lists every setting its recipe carries
(the recipe file's leaf keys and those of the group files it selects) by its config key.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helpers.designs import project_designs

REPO = Path(__file__).resolve().parents[1]
PAGE = re.compile(r"(?<![\w/.])((?:docs/[\w/]+|designs/\w+/README)\.md)")
SECTION = re.compile(r"((?:docs/[\w/]+|designs/\w+/README)\.md)\s*(?:\"([^\"\n]{3,80})\"|'([^'\n]{3,80})')")
"""A cited section: its title in double quotes (which may hold an apostrophe) or single quotes."""
OUTSIDE = re.compile(r"\b(SPEC|FACTS|ARCHITECTURE|STYLE)(\.md\b|\s*§)|/work/shared|shared/seeds")
TEXT = (".py", ".md", ".yaml", ".toml", ".txt")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True)
    return [REPO / f for f in out.stdout.split() if f.endswith(TEXT) and (REPO / f).is_file()]


def headings(page: Path) -> set[str]:
    return {line.lstrip("#").strip() for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")}


def citations() -> list[tuple[str, str, str | None]]:
    """``(citing file, cited page, cited section or None)`` over the repository."""
    found = []
    for path in tracked_files():
        text = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix()
        sections = {(page, double or single) for page, double, single in SECTION.findall(text)}
        found += [(name, page, section) for page, section in sorted(sections)]
        found += [(name, page, None) for page in sorted(set(PAGE.findall(text))) if "<" not in page]
    return found


def test_every_cited_page_and_section_exists() -> None:
    bad = []
    for source, page, section in citations():
        target = REPO / page
        if not target.is_file():
            bad.append(f"{source}: {page} does not exist")
        elif section is not None and section not in headings(target):
            bad.append(f"{source}: {page} has no section {section!r}")
    assert not bad, "\n".join(bad)


def test_the_citation_reader_finds_pages_and_sections(tmp_path: Path) -> None:
    text = 'see docs/engines.md "The laptop profile" and designs/trustsql/README.md; not xdocs/a.md'
    assert SECTION.findall(text) == [("docs/engines.md", "The laptop profile", "")]
    quoted = """docs/results.md "TRUST-SQL's laptop step: one question", docs/engines.md 'The laptop profile'"""
    assert [(page, d or s) for page, d, s in SECTION.findall(quoted)] == [
        ("docs/results.md", "TRUST-SQL's laptop step: one question"),
        ("docs/engines.md", "The laptop profile"),
    ]
    assert PAGE.findall(text) == ["docs/engines.md", "designs/trustsql/README.md"]


def test_the_outside_reference_reader_finds_the_old_forms() -> None:
    for line in ("Think2SQL (SPEC §2)", "see FACTS.md", "ARCHITECTURE.md's layout", "../shared/seeds/001"):
        assert OUTSIDE.search(line), line
    for line in ('SPEC = "report_spec.json"', "the STYLE of a page", "docs/architecture.md"):
        assert not OUTSIDE.search(line), line


def test_nothing_refers_to_a_document_outside_the_repository() -> None:
    hits = [
        f"{path.relative_to(REPO).as_posix()}:{n}: {line.strip()[:80]}"
        for path in tracked_files()
        if path.name != "test_docs.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "references to documents outside the repository:\n" + "\n".join(hits)


def leaf_keys(tree: object, prefix: str = "") -> list[str]:
    """Dotted config keys; a mapping keyed by names that are not config keys (hub names in
    ``trainer.total_steps_by_backbone``) is one setting."""
    if isinstance(tree, dict) and all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(key)) for key in tree):
        return [k for key, value in tree.items() for k in leaf_keys(value, f"{prefix}{key}.")]
    return [prefix.rstrip(".")]


def recipe_keys(design: str) -> list[str]:
    """The config keys design ``design``'s recipe sets: its own leaf keys (one for the whole
    ``verl:`` block) and those of the group files it selects, prefixed by their group."""
    root = REPO / "designs" / design / "recipes"
    recipe = yaml.safe_load((root / "recipe" / f"{design}.yaml").read_text(encoding="utf-8"))
    keys = [k for k in leaf_keys({k: v for k, v in recipe.items() if k not in ("defaults", "recipe_name", "verl")})]
    keys += ["verl"] if "verl" in recipe else []
    for entry in recipe.get("defaults", []):
        ((group, option),) = entry.items()
        group = group.removeprefix("override ").strip("/")
        path = root / group / f"{option}.yaml"
        if path.is_file():
            selected = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            keys += [f"{group}.{k}" for k in leaf_keys({k: v for k, v in selected.items() if k != "defaults"})]
    return keys


@pytest.mark.parametrize("design", project_designs())
def test_a_design_page_names_every_setting_its_recipe_carries(design: str) -> None:
    page = (REPO / "designs" / design / "README.md").read_text(encoding="utf-8")
    for section in (
        "Settings",
        "What the paper leaves open, and what the project chose",
        "Departures from the paper, and why",
    ):
        assert f"## {section}" in page, f"designs/{design}/README.md has no section {section!r}"
    missing = [key for key in recipe_keys(design) if f"`{key}`" not in page]
    assert not missing, f"designs/{design}/README.md does not list {missing}"
