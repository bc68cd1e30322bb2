"""The Makefile's targets, planned by ``make -n`` in a copy (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _plan(folder: Path, target: str, *env: str) -> str:
    out = subprocess.run(
        ["make", "-n", target, *env], cwd=folder, capture_output=True, text=True, check=True
    )
    return out.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    bin_ = tmp_path / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "python").write_text("")
    (tmp_path / ".venv" / ".installed-dev").write_text("")
    return tmp_path


def test_make_lab_installs_the_lab_extra_once(checkout: Path) -> None:
    first = _plan(checkout, "lab")
    assert "pip install" in first and ".[dev,lab]" in first
    (checkout / ".venv" / ".installed-lab").write_text("")
    again = _plan(checkout, "lab")
    assert "pip install" not in again
    assert "jupyter lab notebooks" in again


def test_make_lab_allows_root_only_as_root(checkout: Path) -> None:
    (checkout / ".venv" / ".installed-lab").write_text("")
    planned = _plan(checkout, "lab")
    assert ("--allow-root" in planned) == (os.geteuid() == 0)


def test_make_test_oldest_pins_the_lower_bounds_and_stays_out_of_make_test(checkout: Path) -> None:
    subprocess.run(
        ["make", ".venv-oldest/constraints.txt"], cwd=checkout, capture_output=True, check=True
    )
    pins = (checkout / ".venv-oldest" / "constraints.txt").read_text().split()
    assert pins == ["pandas==3", "pyarrow==22", "duckdb==1.4.4"]  # pyproject.toml's >= bounds
    planned = _plan(checkout, "test-oldest")
    assert "-c .venv-oldest/constraints.txt" in planned and "pytest" in planned
    assert ".venv-oldest" not in _plan(checkout, "test")  # not "oldest": the tmp path holds it
