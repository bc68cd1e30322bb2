"""Committed notebooks are thin, parameterised and without outputs."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = sorted((ROOT / "audit" / "report" / "notebooks").glob("*.ipynb"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb")) + PACKAGED


def test_the_four_notebooks_exist():
    assert {p.name for p in PACKAGED} == {"compliance_report.ipynb"}
    assert {"takedown.ipynb", "delivery_health.ipynb", "signature_audit.ipynb"} <= {
        p.name for p in NOTEBOOKS
    }


def test_the_report_notebook_takes_run_dir_only():
    """The run_dir contract (docs/report.md): the report notebook never sees an input path."""
    import papermill as pm

    assert set(pm.inspect_notebook(str(PACKAGED[0]))) == {"run_dir"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_committed_without_outputs_with_parameters_and_kernelspec(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    for cell in code:
        assert cell.get("outputs") == [], f"{path.name}: a cell has outputs"
        assert cell.get("execution_count") is None, f"{path.name}: a cell has an execution count"
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and code.index(tagged[0]) == 0, "first code cell is the parameters"
    assert nb.metadata["kernelspec"]["name"] == "python3"
    names = {
        t.id
        for node in ast.parse(tagged[0].source).body
        if isinstance(node, ast.Assign)
        for t in node.targets
    }
    # Secrets travel by file: the only secret-related parameter is the file's path.
    assert {n for n in names if "secret" in n or "key" in n} <= {"secrets_path"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_thin(path):
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert "def " not in cell.source and "class " not in cell.source
            assert len(cell.source.splitlines()) <= 15


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_papermill_sees_every_parameter(path):
    import papermill as pm

    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    names = {
        t.id
        for node in ast.parse(cell.source).body
        if isinstance(node, ast.Assign)
        for t in node.targets
    }
    assert set(pm.inspect_notebook(str(path))) == names
