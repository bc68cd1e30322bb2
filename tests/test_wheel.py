"""The package works from a wheel: built, installed in a fresh venv outside the checkout, it
runs `audit demo` and writes a report (the notebook and templates are package data).

About 40 s on two cores, most of it `pip install` of the dependencies from pip's cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_runs_the_demo(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    (wheel,) = wheels.glob("audit-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        capture_output=True,
        env=env,
        timeout=600,
    )
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import audit; print(audit.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(venv)) and not where.startswith(str(ROOT))
    proc = subprocess.run(
        [str(venv / "bin" / "audit"), "demo", "--out", "demo"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    (report,) = (work / "demo" / "reports").glob("2026-10/*/report.html")
    assert f"report:    {report}" in proc.stdout
    page = report.read_text()
    assert "Webhook delivery compliance report" in page and "DLV-03" in page
    assert "TCP" not in proc.stderr and "Traceback" not in proc.stderr
