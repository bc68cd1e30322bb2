"""An unreadable line is stored once per content (issue 44): after a log is rewritten, the new
version's unreadable lines that its earlier version held too are not stored again. Before,
they were known by their file's sha256 and line, so a rewrite stored them a second time (3
counted twice), and the store's counts left the raw captures'."""

from __future__ import annotations

import importlib
import json
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from audit.cli import main
from audit.demo.simulate import simulate
from audit.ingest.store import ingest

TORN = [b'{"received_at": "2026-10-02T1', b'{"torn', b"not json at all"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("demo")
    sim = simulate(root / "sim", days=7, incidents=20)
    return sim.captures[0], sim.secrets


def _log(folder: Path, demo: tuple[Path, Path], torn: list[bytes]) -> Path:
    folder.mkdir()
    log = folder / "receiver-2026-10-02.jsonl"
    shutil.copy(demo[0], log)
    with log.open("ab") as f:
        f.write(b"".join(t + b"\n" for t in torn))
    return log


def _unreadable_rows(store: Path) -> list[tuple[int, str]]:
    """(line, detail) of every unreadable row, by DuckDB straight over the parts."""
    glob = str(store / "deliveries" / "*" / "*.parquet")
    sql = f"SELECT line, detail FROM read_parquet('{glob}') WHERE verdict = 'unreadable'"
    return sorted(duckdb.sql(sql).fetchall())


def _drop_first_line(log: Path) -> None:
    lines = log.read_bytes().split(b"\n", 1)
    log.write_bytes(lines[1])


def test_a_rewritten_log_s_unreadable_lines_are_stored_once(demo, tmp_path, capsys):
    log = _log(tmp_path / "c", demo, TORN)
    store = tmp_path / "store"
    lines = len(log.read_bytes().splitlines())
    assert ingest([log], demo[1], store).unreadable == 3
    _drop_first_line(log)  # rewritten: every line moves up one
    r = ingest([log], demo[1], store)
    assert r.files_changed == 1 and r.unreadable == 0
    assert len(_unreadable_rows(store)) == 3  # was 6: the same three lines stored again
    assert [n for n, _ in _unreadable_rows(store)] == [lines - 2, lines - 1, lines]
    # the store's reading of the log now is the raw reading of it, row for row
    raw, stored = tmp_path / "raw.csv", tmp_path / "stored.csv"
    args = ["--secrets", str(demo[1]), "--quiet"]
    assert main(["verify", str(log), *args, "--out", str(raw)]) == 0
    assert main(["verify", str(log), *args, "--store", str(store), "--out", str(stored)]) == 0
    a, b = pd.read_csv(raw), pd.read_csv(stored)
    assert (a["verdict"] == "unreadable").sum() == 3
    assert a["verdict"].tolist() == b["verdict"].tolist() and len(a) == lines - 1
    capsys.readouterr()


def test_a_torn_line_repeated_within_one_log_is_two_receipts(demo, tmp_path):
    log = _log(tmp_path / "c", demo, [TORN[1], TORN[1]])
    store = tmp_path / "store"
    assert ingest([log], demo[1], store).unreadable == 2
    assert len(_unreadable_rows(store)) == 2


def test_a_new_torn_line_in_the_rewritten_log_is_stored(demo, tmp_path):
    log = _log(tmp_path / "c", demo, TORN[:2])
    store = tmp_path / "store"
    ingest([log], demo[1], store)
    _drop_first_line(log)
    with log.open("ab") as f:
        f.write(TORN[2] + b"\n")
    assert ingest([log], demo[1], store).unreadable == 1
    assert len(_unreadable_rows(store)) == 3


def test_a_store_whose_unreadable_lines_were_known_by_their_place_still_reads(
    demo, tmp_path, monkeypatch
):
    # Stored by a release that knew them by file, line and reason; then the log rewritten.
    store_module = importlib.import_module("audit.ingest.store")
    log = _log(tmp_path / "c", demo, TORN)
    store = tmp_path / "store"
    with monkeypatch.context() as m:
        m.setattr(store_module, "_unreadable_by_their_lines", lambda p, w, *a: w)
        ingest([log], demo[1], store)
    _drop_first_line(log)
    with log.open("ab") as f:
        f.write(TORN[0] + b"\n")  # held by the earlier version, in a new place
    ingest([log], demo[1], store)
    out = tmp_path / "stored.csv"
    args = ["--secrets", str(demo[1]), "--quiet", "--store", str(store), "--out", str(out)]
    assert main(["verify", str(log), *args]) == 0
    assert (pd.read_csv(out)["verdict"] == "unreadable").sum() == 4
    manifest = json.loads((store / "manifest.json").read_text())
    assert sum(e["unreadable"] for e in manifest["files"]) == len(_unreadable_rows(store))
