"""The layout mirrors the flow: no module imports from a later stage, and modules stay small.

Stages (docs/contributing.md): base -> ingest -> analysis -> findings -> report, then the
packages beside the flow (service, receiver, demo), then the CLI on top. Every module of the
package is placed; a new top-level module must be placed here too.
"""

from __future__ import annotations

import ast
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
    # the flow
    "audit.ingest": 1,
    "audit.analysis": 2,
    "audit.findings": 3,
    "audit.plotting": 4,
    "audit.report": 4,
    # beside the flow: they may use it, the flow never uses them
    "audit.service": 5,
    "audit.receiver": 5,
    "audit.demo": 5,
    # the notebooks' entry point: opens the built-in demo data when given no logs
    "audit.report.explore": 5,
    # on top
    "audit.cli": 6,
    "audit.console": 6,  # the script: loads audit.cli, a ^C meanwhile is one line
    "audit": 7,  # the package top: the curated public API
}
#: Beside the flow: the flow's stages must not import them.
SIDE = ("audit.service", "audit.receiver", "audit.demo", "audit.cli")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(name: str) -> int | None:
    if name == "audit":
        return STAGES["audit"]
    placed = [p for p in STAGES if p != "audit" and (name == p or name.startswith(p + "."))]
    best = max(placed, key=len, default=None)
    return None if best is None else STAGES[best]


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m == "audit" or m.startswith("audit.")}


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_is_placed_in_a_stage(path: Path):
    assert _stage(_module(path)) is not None, f"place {_module(path)} in STAGES"


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_import_from_a_later_stage_or_from_the_side(path: Path):
    here = _stage(_module(path))
    for imported in _imports(path):
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
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tops = [
        n.lineno for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "audit"
    ]
    assert tops == [], f"{_module(path)} imports from the package top at line(s) {tops}"


def test_the_check_sees_a_backward_import(tmp_path: Path):
    f = tmp_path / "x.py"
    f.write_text("from audit.plotting import plot_clock_skew\nimport audit.findings.runner\n")
    imported = _imports(f)
    assert imported == {"audit.plotting", "audit.findings.runner"}
    assert _stage("audit.findings.runner") == 3 > _stage("audit.analysis.metrics")
    assert _stage("audit.cli.client") == 6 > _stage("audit.service.client") == 5
    assert _stage("audit.tablesx") is None and _stage("audit") == 7


#: The size guide (docs/contributing.md): split a module when it passes about 400 lines.
MAX_LINES = 400


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_stays_small(path: Path):
    n = len(path.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_LINES, f"{path.relative_to(ROOT)} has {n} lines"
