"""The layout mirrors the flow: no module imports from a later stage, and modules stay small.

Stages (docs/contributing.md): ingest -> analysis -> findings -> report. The modules this test
places are those already in their stage's home; a module it does not place is not checked.
``service``, ``receiver`` and ``demo`` sit beside the flow: nothing in the flow imports them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1] / "audit"

#: Module name prefix -> stage number (a longer prefix wins).
STAGES = {
    "audit.errors": 0,
    "audit.spec": 0,
    "audit.timeutil": 0,
    "audit.ingest.signatures": 1,
    "audit.analysis.survival": 2,
    "audit.analysis.takedown": 2,
    "audit.analysis.deliveries": 2,
    "audit.analysis.metrics": 2,
    "audit.findings": 3,
    "audit.plotting": 4,
}
#: Beside the flow: the flow's stages must not import them.
SIDE = ("audit.service", "audit.receiver", "audit.demo", "audit.cli")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _stage(name: str) -> int | None:
    best = max((p for p in STAGES if name == p or name.startswith(p + ".")), key=len, default=None)
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
def test_no_import_from_a_later_stage_or_from_the_side(path: Path):
    here = _stage(_module(path))
    if here is None:
        return
    for imported in _imports(path):
        there = _stage(imported)
        assert there is None or there <= here, f"{_module(path)} (stage {here}) imports {imported}"
        assert not imported.startswith(SIDE), f"{_module(path)} imports {imported} from the side"


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


@pytest.mark.parametrize(
    "package", ["findings", "demo", "service", "plotting"], ids=lambda p: f"audit/{p}"
)
def test_modules_of_the_stage_packages_stay_small(package: str):
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").splitlines())
        for p in (ROOT / package).rglob("*.py")
    }
    assert {name: n for name, n in sizes.items() if n > 400} == {}
