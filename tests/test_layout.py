"""The layout mirrors the flow: no module imports from a later stage, and no import cycle.

Stages (docs/contributing.md): base -> ingest -> analysis -> findings -> report, then the
packages beside the flow (service, receiver, demo), then the CLI on top. Every module of the
package is placed; a new top-level module must be placed here too.

Every import counts, function-level ones included: they run too, and hiding one in a function
only hides the dependency. A function-level import stays only for a heavy third-party library on
a start-up-sensitive path (or a platform's own module) and says why on its line; a project module
imported in a function says ``# start-up:`` and must itself load a heavy library.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "audit"

#: Module name prefix -> stage number (a longer prefix wins).
STAGES = {
    # base: facts, declarations and helpers every stage may use
    "audit.errors": 0,
    "audit.spec": 0,
    "audit.version": 0,
    "audit.timeutil": 0,
    "audit.schema": 0,
    "audit.tables": 0,
    "audit.paths": 0,
    "audit.atomic": 0,
    "audit.locks": 0,
    "audit.safe": 0,
    "audit.redaction": 0,
    "audit.lazy": 0,
    "audit.memory": 0,
    "audit.interrupts": 0,
    "audit.text": 0,
    "audit.progress": 0,
    # the flow
    "audit.ingest": 1,
    "audit.analysis": 2,
    "audit.words": 2,  # the spec's and the verdicts' codes as words, for pages and figures
    "audit.findings": 3,
    "audit.plotting": 4,
    "audit.report": 4,
    # beside the flow: they may use it, the flow never uses them
    "audit.service": 5,
    "audit.receiver": 5,
    "audit.demo": 5,
    # the notebooks' entry point: opens the built-in demo data when given no logs
    "audit.report.explore": 5,
    "audit.workbench": 5,
    "audit.figures": 5,
    "audit.notebook": 5,  # in IPython: an AuditError a cell raises is one line
    # on top
    "audit.cli": 6,
    "audit.console": 6,  # the script: loads audit.cli, a ^C meanwhile is one line
    "audit": 7,  # the package top: the curated public API
}
#: Beside the flow: the flow's stages must not import them.
SIDE = ("audit.service", "audit.receiver", "audit.demo", "audit.cli")
#: Third-party libraries whose import costs a start-up (tens to hundreds of milliseconds).
HEAVY = (
    "pandas",
    "numpy",
    "pyarrow",
    "matplotlib",
    "httpx",
    "papermill",
    "nbconvert",
    "nbformat",
    "jinja2",
    "duckdb",
    "uvicorn",
    "ipykernel",
    "jupyter_client",
    "yaml",
)


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES = sorted(ROOT.rglob("*.py"))
MODULES = {_module(p): p for p in FILES}


def _stage(name: str) -> int | None:
    if name == "audit":
        return STAGES["audit"]
    placed = [p for p in STAGES if p != "audit" and (name == p or name.startswith(p + "."))]
    best = max(placed, key=len, default=None)
    return None if best is None else STAGES[best]


@dataclass(frozen=True)
class Import:
    """One imported module: where the statement is, and whether it runs at import time."""

    module: str
    line: int
    in_function: bool
    comment: str  # the comment on the statement's first line, "" when none


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, package: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (a.name for a in node.names)
        return
    base = node.module or ""
    if node.level:  # relative: resolve against this module's package
        parent = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parent, *([node.module] if node.module else [])])
    for a in node.names:
        sub = f"{base}.{a.name}"
        # ``from audit.ingest import store`` imports the module audit.ingest.store
        yield sub if sub in MODULES else base


def imports(path: Path) -> list[Import]:
    """Every import of the module at ``path`` that runs (``if TYPE_CHECKING:`` blocks never do)."""
    name = _module(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imports_of(path.read_text(encoding="utf-8"), package)


def imports_of(source: str, package: str) -> list[Import]:
    """Every import of ``source``, a module of ``package``, that runs."""
    lines = source.splitlines()
    out: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for other in child.orelse:
                    visit(other, in_function)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                text = lines[child.lineno - 1]
                comment = text.split("#", 1)[1].strip() if "#" in text else ""
                for target in _targets(child, package):
                    out.append(Import(target, child.lineno, in_function, comment))
            inner = in_function or isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            visit(child, inner)

    visit(ast.parse(source), False)
    return out


def _project(name: str) -> bool:
    return name == "audit" or name.startswith("audit.")


GRAPH = {
    name: sorted({i.module for i in imports(path) if i.module in MODULES})
    for name, path in MODULES.items()
}


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module importing itself),
    by Tarjan's algorithm, iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph.get(node, ()):
                        found.append(sorted(component))
    return found


def test_no_import_cycle_anywhere_in_the_package():
    found = cycles(GRAPH)
    described = [
        " ; ".join(
            sorted(
                {f"{a} -> {i.module} (line {i.line})" for a in c for i in imports(MODULES[a])}
                & {f"{a} -> {b} (line {i.line})" for a in c for b in c for i in imports(MODULES[a])}
            )
        )
        for c in found
    ]
    assert found == [], "import cycles:\n" + "\n".join(described)


def test_the_cycle_check_sees_cycles():
    assert cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]
    assert cycles({"a": ["a"]}) == [["a"]]
    assert cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_is_placed_in_a_stage(path: Path):
    assert _stage(_module(path)) is not None, f"place {_module(path)} in STAGES"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_from_a_later_stage_or_from_the_side(path: Path):
    here = _stage(_module(path))
    assert here is not None
    for imported in {i.module for i in imports(path) if _project(i.module)}:
        there = _stage(imported)
        assert there is not None and there <= here, f"{_module(path)} ({here}) imports {imported}"
        if here < min(STAGES[s] for s in SIDE):
            assert not imported.startswith(SIDE), f"{_module(path)} imports {imported} (side)"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_from_the_package_top(path: Path):
    # ``from audit import x`` runs audit/__init__.py, which imports every stage: a cycle waiting
    # to happen (the client once took ``__version__`` from there).
    if path == ROOT / "__init__.py":
        return
    tops = [i.line for i in imports(path) if i.module == "audit"]
    assert tops == [], f"{_module(path)} imports from the package top at line(s) {tops}"


def _loads_heavy(name: str, seen: set[str] | None = None) -> bool:
    """Whether importing the project module ``name`` imports a heavy library at module level."""
    seen = set() if seen is None else seen
    if name in seen or name not in MODULES:
        return False
    seen.add(name)
    for i in imports(MODULES[name]):
        if i.in_function:
            continue
        if i.module.split(".")[0] in HEAVY:
            return True
        if _project(i.module) and _loads_heavy(i.module, seen):
            return True
    return False


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_function_level_import_says_why_and_is_worth_it(path: Path):
    for i in imports(path):
        if not i.in_function:
            continue
        where = f"{path.relative_to(ROOT.parent)}:{i.line} imports {i.module} in a function"
        assert i.comment, f"{where} without a comment saying why"
        if _project(i.module):
            assert i.comment.startswith("start-up:"), f"{where}: import it at module top"
            assert _loads_heavy(i.module), f"{where}, but it loads no heavy library"


def test_the_import_reader_sees_function_level_and_skips_type_checking():
    found = imports_of(
        "from typing import TYPE_CHECKING\n"
        "import audit.errors\n"
        "if TYPE_CHECKING:\n"
        "    from audit.report.pipeline import run\n"
        "def f():\n"
        "    import pandas as pd  # start-up: only here\n"
        "    from audit.ingest import store\n"
        "    from . import deliveries  # start-up: relative\n",
        "audit.analysis",
    )
    assert [(i.module, i.in_function, i.comment) for i in found] == [
        ("typing", False, ""),
        ("audit.errors", False, ""),
        ("pandas", True, "start-up: only here"),
        ("audit.ingest.store", True, ""),
        ("audit.analysis.deliveries", True, "start-up: relative"),
    ]
    assert _loads_heavy("audit.analysis.deliveries") and not _loads_heavy("audit.errors")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_is_laid_out_by_the_formatter(path: Path):
    # A module holds one concept, whatever its length; no code is squeezed past ``ruff format``.
    text = path.read_text(encoding="utf-8")
    markers = re.findall(r"#\s*fmt:\s*(?:skip|off|on)\b", text)
    assert markers == [], f"{path.relative_to(ROOT)} holds {markers}"


_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_type_ignore_names_its_code_and_why(path: Path):
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _IGNORE.search(line)
        if m is None:
            continue
        assert m["codes"], f"{path.relative_to(ROOT)}:{n}: name the error code"
        assert re.match(r"\s*#\s*\S", m["rest"]), f"{path.relative_to(ROOT)}:{n}: say why"


def _wide_tuples(annotation: ast.expr | None) -> Iterator[int]:
    for node in ast.walk(annotation) if annotation is not None else ():
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name | ast.Attribute)
            and (node.value.id if isinstance(node.value, ast.Name) else node.value.attr)
            in ("tuple", "Tuple")
            and isinstance(node.slice, ast.Tuple)
            and not any(isinstance(e, ast.Constant) and e.value is ... for e in node.slice.elts)
            and len(node.slice.elts) > 3
        ):
            yield len(node.slice.elts)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_positional_tuple_wider_than_three_crosses_a_function_boundary(path: Path):
    # Named fields instead (a NamedTuple, a dataclass): a 24-field tuple once crossed three calls.
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for f in ast.walk(tree):
        if not isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        args = [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]
        annotations = [f.returns, *(a.annotation for a in args)]
        widths = [w for a in annotations for w in _wide_tuples(a)]
        assert widths == [], f"{path.relative_to(ROOT)}:{f.lineno} {f.name} passes {widths}-tuples"
