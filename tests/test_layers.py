"""The package layers hold, the import graph has no cycle, and modules stay small.

Imports flow one way (docs/INTERFACES.md, ARCHITECTURE.md "Contracts"):
tools → rex → agents → eval.data (+ the evaluation library training reads) → training →
eval.run / eval.compare and the other front ends. A module may import its own layer or a
lower one, never a higher one. The graph is read with ``ast`` from the source tree, so an
import inside a function counts as much as one at the top of a file (it runs all the same,
only later); an import under ``if TYPE_CHECKING:`` does not (it never runs).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("tools", "rex", "agents", "eval", "training")

LAYERS = ("tools", "rex", "agents", "eval library", "training", "eval front ends")
EVAL_LIBRARY = {
    "eval.data": "the loaders and the bundled benchmark",
    "eval.units": "number formatting shared by the trainers' consoles and the reports",
    "eval.scoring": "scoring predictions, also used on training trajectories (training.records)",
    "eval.voting": "self-consistency voting, used by eval.scoring",
    "eval.report": "per-difficulty summaries, also written for training runs (training.records)",
    "eval.records": "the evaluation records store",
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


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def imports_of(module: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """The project modules ``module`` imports at run time, with the line of each import."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
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


def import_graph() -> dict[str, dict[str, int]]:
    known = source_modules()
    return {m: imports_of(m, p, known) for m, p in known.items()}


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
    graph = import_graph()
    cycles = [describe_cycle(graph, c) for c in import_cycles(graph)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


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
