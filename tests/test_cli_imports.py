"""``audit verify --out x.parquet`` and ``audit --help`` never import pandas (nor matplotlib,
httpx, papermill, nbconvert, jinja2): start-up is most of a small run. That route writes what
the pandas route writes: ``tests/test_verify_arrow.py``."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import audit
from tests.builders import capture, write_jsonl, write_secrets
from tests.test_fast_path import valid
from tests.test_signatures import SECRET

HEAVY = ("pandas", "matplotlib", "httpx", "papermill", "nbconvert", "jinja2")
#: The checkout under test: a subprocess must import this one, not an installed copy.
ROOT = Path(audit.__file__).resolve().parents[1]

_MAIN = f"""
import json, sys
from audit.cli.main import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""

#: The same work in this process (``workers=1``): the Arrow columns are built here too.
_IN_PROCESS = f"""
import json, sys, warnings
from audit.cli.store import write_table
from audit.ingest.verdicts import verdict_table
warnings.simplefilter("ignore")
write_table(verdict_table([sys.argv[1]], sys.argv[2], workers=1), __import__("pathlib").Path(
    sys.argv[3]))
print(json.dumps({{"code": 0, "loaded": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


def write_logs(tmp_path: Path) -> tuple[Path, Path]:
    """A folder with every kind of input (JSONL with a broken line, a naive time and a bad
    signature; gzip; HAR) and a secrets file: 47 records."""
    folder = tmp_path / "logs"
    folder.mkdir()
    records = [valid(received_at=1790812801 + i) for i in range(20)]
    records += ["{broken", valid(received_at="2026-10-01T00:00:07"), capture("{}", signature="x")]
    write_jsonl(folder / "a.jsonl", records)
    # Other records than a.jsonl's (a copy of it would be read once: tests/test_copies.py).
    write_jsonl(folder / "b.jsonl.gz", [valid(received_at=1790812901 + i) for i in range(20)]
                + records[20:])  # fmt: skip
    (folder / "b.jsonl.gz").write_bytes(gzip.compress((folder / "b.jsonl.gz").read_bytes()))
    rec = valid()
    entry = {
        "startedDateTime": "2026-10-01T00:00:10Z",
        "request": {
            "headers": [{"name": k, "value": v} for k, v in rec["headers"].items()],
            "postData": {"text": rec["body"]},
        },
    }
    (folder / "c.har").write_text(json.dumps({"log": {"entries": [entry]}}))
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    return folder, secrets


@pytest.fixture
def logs(tmp_path):
    return write_logs(tmp_path)


def _run(script: str, *args: str) -> dict:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": path},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a fresh interpreter (subprocess)
def test_verify_to_parquet_imports_no_heavy_package(logs, tmp_path):
    folder, secrets = logs
    out = tmp_path / "v.parquet"
    got = _run(_MAIN, "verify", str(folder), "--secrets", str(secrets), "--out", str(out))
    assert got == {"code": 0, "loaded": []}
    assert pq_rows(out) == 47


@pytest.mark.slow
def test_verifying_in_process_imports_no_heavy_package(logs, tmp_path):
    folder, secrets = logs
    got = _run(_IN_PROCESS, str(folder), str(secrets), str(tmp_path / "v.parquet"))
    assert got == {"code": 0, "loaded": []}
    assert pq_rows(tmp_path / "v.parquet") == 47


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--help"], ["verify", "--help"], ["--version"]])
def test_help_imports_no_heavy_package(args):
    assert _run(_MAIN, *args) == {"code": 0, "loaded": []}


def pq_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows


def test_the_report_notebooks_imports_leave_matplotlib_and_the_pipeline_out():
    # What the packaged notebook's first cell imports: matplotlib (0.3 s) is imported only
    # where a figure is drawn, the pipeline (DuckDB's queries, the controls) never in the kernel.
    code = "\n".join(
        [
            "from IPython.display import display",
            "import audit.report.figures, audit.report.views",
            "import json, sys",
            "names = ('matplotlib', 'duckdb', 'audit.report.pipeline', 'audit.findings.run')",
            "print(json.dumps([m for m in names if m in sys.modules]))",
        ]
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    assert json.loads(out) == []
