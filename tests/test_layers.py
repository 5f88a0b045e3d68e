"""The package layers hold, the import graph has no cycle, and modules and folders stay small.

Imports flow one way (docs/architecture.md "Layers"):
tools → rex → agents → eval.data (+ the evaluation library training reads) → training →
eval.run / eval.compare and the other front ends → designs. A module may import its own
layer or a lower one, never a higher one; nothing imports a design (the registry loads
designs through their entry points) and no design imports another. The graph is read with
``ast`` from the source tree, so an import inside a function counts as much as one at the
top of a file (it runs all the same, only later); an import under ``if TYPE_CHECKING:``
does not run, but a cycle through one still ties two modules together, so the cycle check
counts it.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tools", "rex", "agents", "eval", "training", "designs")

LAYERS = ("tools", "rex", "agents", "eval library", "training", "eval front ends", "designs")
EVAL_LIBRARY = {
    "eval.data": "the loaders and the bundled benchmark",
    "eval.units": "number formatting shared by the trainers' consoles and the reports",
    "eval.scoring": "scoring predictions, also used on training trajectories (training.runs.samples)",
    "eval.voting": "self-consistency voting, used by eval.scoring",
    "eval.summary": "per-difficulty summaries, also written for training runs (training.runs.samples)",
    "eval.run_store": "the evaluation records store",
    "eval.predictions": "reading prediction files",
}
"""``eval`` modules below ``training`` (with why): everything else in ``eval`` sits on top."""

MAX_LINES = 500
DATA_TABLES = {
    "eval/data/minibird/questions.py": "the catalogue of ~30 question templates (one small function "
    "each) that generates the bundled benchmark; splitting it would scatter one table",
}
"""Modules allowed past ``MAX_LINES`` because they are data tables (with why)."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}


def layer_of(module: str) -> int:
    top = module.split(".")[0]
    if top != "eval":
        return LAYERS.index(top)
    if any(module == m or module.startswith(m + ".") for m in EVAL_LIBRARY):
        return LAYERS.index("eval library")
    return LAYERS.index("eval front ends")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """The imports that run (``type_checking``: those under ``if TYPE_CHECKING:`` too)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not type_checking:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(module: str, path: Path, known: dict[str, Path], type_checking: bool = False) -> dict[str, int]:
    """The project modules ``module`` imports at run time (``type_checking``: for the type
    checker too), with the line of each import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)), type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import name`` imports the submodule pkg.name when there is one
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for target in targets:
            while target and target not in known:  # ``import a.b.c`` of a package path
                target = target.rpartition(".")[0]
            if target and target != module:
                out.setdefault(target, node.lineno)
    return out


def import_graph(type_checking: bool = False) -> dict[str, dict[str, int]]:
    known = source_modules()
    return {m: imports_of(m, p, known, type_checking) for m, p in known.items()}


def layer_violations(graph: dict[str, dict[str, int]]) -> list[str]:
    bad = []
    for module, targets in sorted(graph.items()):
        if module.endswith(".__main__"):  # a command-line entry point: nothing imports it, it may use any layer
            continue
        for target, line in sorted(targets.items()):
            if layer_of(target) > layer_of(module):
                bad.append(
                    f"{module} (layer {LAYERS[layer_of(module)]}) imports {target} "
                    f"(layer {LAYERS[layer_of(target)]}) at line {line}"
                )
    return bad


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return sorted(cycles)


def describe_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> str:
    members = set(component)
    edges = [f"{a} -> {b} (line {line})" for a in component for b, line in sorted(graph[a].items()) if b in members]
    return "cycle among " + ", ".join(component) + ": " + "; ".join(edges)


def test_imports_follow_the_layers() -> None:
    violations = layer_violations(import_graph())
    assert not violations, "imports against the layers:\n" + "\n".join(violations)


def test_the_import_graph_has_no_cycle() -> None:
    """Not at run time, and not through imports made only for the type checker."""
    graph = import_graph(type_checking=True)
    cycles = [describe_cycle(graph, c) for c in import_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_design_imports_another_design() -> None:
    bad = [
        f"{module} imports {target} at line {line}"
        for module, targets in sorted(import_graph().items())
        if module.startswith("designs.")
        for target, line in sorted(targets.items())
        if target.startswith("designs.") and target.split(".")[1] != module.split(".")[1]
    ]
    assert not bad, "a design is one plugin and imports no other:\n" + "\n".join(bad)


def test_no_module_is_longer_than_the_limit() -> None:
    paths = [p for top in (*PACKAGES, "tests", "benchmarks") for p in sorted((REPO / top).rglob("*.py"))]
    lengths = {p.relative_to(REPO).as_posix(): len(p.read_text(encoding="utf-8").splitlines()) for p in paths}
    too_long = [
        f"{name}: {n} lines" for name, n in sorted(lengths.items()) if n > MAX_LINES and name not in DATA_TABLES
    ]
    assert not too_long, f"modules over {MAX_LINES} lines (split them, or list a data table in DATA_TABLES):\n" + (
        "\n".join(too_long)
    )
    stale = sorted(name for name in DATA_TABLES if lengths.get(name, 0) <= MAX_LINES)
    assert not stale, f"DATA_TABLES lists modules that are no longer over the limit: {stale}"


MAX_MODULES_PER_FOLDER = 15
"""A folder of product code holding more modules than this needs subpackages that say what they hold."""
ENTRY_MODULES = {"__init__", "__main__"}
COMMANDS = {"training/run.py", "eval/run.py"}
"""``python -m training.run`` and ``python -m eval.run``: the names are the user's commands."""


def _product_folders() -> dict[Path, list[Path]]:
    folders: dict[Path, list[Path]] = {}
    for pkg in PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            folders.setdefault(path.parent, []).append(path)
    return folders


def test_no_folder_holds_more_than_the_limit() -> None:
    crowded = [
        f"{folder.relative_to(REPO).as_posix()}/: {len(paths)} modules"
        for folder, paths in sorted(_product_folders().items())
        if len(paths) > MAX_MODULES_PER_FOLDER
    ]
    assert not crowded, f"folders with more than {MAX_MODULES_PER_FOLDER} modules (group them):\n" + "\n".join(crowded)


def test_no_two_modules_share_a_name_outside_the_designs() -> None:
    """One name, one meaning: ``records.py`` three times says nothing. Each design folder
    repeats the same plugin layout (agent, reward, tools, ...) on purpose, so designs are
    left out."""
    seen: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        if pkg == "designs":
            continue
        for path in sorted((REPO / pkg).rglob("*.py")):
            if path.stem not in ENTRY_MODULES and path.relative_to(REPO).as_posix() not in COMMANDS:
                seen.setdefault(path.stem, []).append(path.relative_to(REPO).as_posix())
    repeated = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not repeated, f"module names used twice: {repeated}"


def _docstring_positions(tree: ast.AST) -> set[tuple[int, int]]:
    """Where the string statements are (module, class and function docstrings, attribute notes)."""
    return {
        (node.lineno, node.col_offset)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def design_name_uses(path: Path, names: list[str], root: Path = REPO) -> list[str]:
    """Identifiers and string literals (not comments or docstrings) of ``path`` that name a design."""
    import io
    import re
    import tokenize

    pattern = re.compile("|".join(re.escape(n) for n in names), re.IGNORECASE)
    source = path.read_text(encoding="utf-8")
    docstrings = _docstring_positions(ast.parse(source))
    kinds = {tokenize.NAME, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    hits = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in kinds and tok.start not in docstrings and pattern.search(tok.string):
            hits.append(f"{path.relative_to(root).as_posix()}:{tok.start[0]}: {tok.string[:70]}")
    return hits


def test_no_product_module_outside_a_design_names_a_design() -> None:
    """A design is one folder: the code outside ``designs/`` reaches a design only through
    the registries, so adding or removing one edits no other module. The names come from
    the design registry (an installed outside design counts too)."""
    from agents.designs import list_designs

    names = list_designs()
    assert names, "no design is registered: is the project installed (pip install -e .)?"
    hits = [
        hit
        for pkg in PACKAGES
        if pkg != "designs"
        for path in sorted((REPO / pkg).rglob("*.py"))
        for hit in design_name_uses(path, names)
    ]
    assert not hits, "design names outside designs/ (ask a registry instead):\n" + "\n".join(hits)


def test_the_shared_config_names_no_design() -> None:
    """The shared Hydra config (``recipes/``) names no design: a recipe picks one."""
    import re

    from agents.designs import list_designs

    pattern = re.compile("|".join(re.escape(n) for n in list_designs()), re.IGNORECASE)
    hits = []
    for path in sorted((REPO / "recipes").rglob("*.yaml")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code):
                hits.append((path.relative_to(REPO).as_posix(), number, code.strip()))
    assert not hits, hits


def test_the_name_check_sees_names_and_strings_but_not_docs(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        '"""About MyDesign."""\n'
        "# mydesign in a comment\n"
        'X = "uses mydesign"\n'
        "def f():\n"
        '    """mydesign in a docstring."""\n'
        "    return MYDESIGN_LIMIT\n"
    )
    hits = design_name_uses(module, ["mydesign"], root=tmp_path)
    assert hits == ['m.py:3: "uses mydesign"', "m.py:6: MYDESIGN_LIMIT"]


def test_the_checks_see_what_they_check(tmp_path: Path) -> None:
    """The graph reader finds relative, function-level and ``from pkg import module``
    imports, skips TYPE_CHECKING ones, and the cycle finder reports a two-module cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import pkg.c\ndef f():\n    from . import b\n"
    )
    (pkg / "b.py").write_text("from pkg.a import f\n")
    (pkg / "c.py").write_text("")
    known = {"pkg": pkg / "__init__.py", "pkg.a": pkg / "a.py", "pkg.b": pkg / "b.py", "pkg.c": pkg / "c.py"}
    a_imports = imports_of("pkg.a", known["pkg.a"], known)
    assert a_imports == {"pkg.b": 5}
    graph = {m: imports_of(m, p, known) for m, p in known.items()}
    assert import_cycles(graph) == [["pkg.a", "pkg.b"]]
    assert layer_of("training.run") > layer_of("eval.data.loaders") > layer_of("agents.base") > layer_of("tools")
    assert layer_of("eval.run") > layer_of("training.run")
