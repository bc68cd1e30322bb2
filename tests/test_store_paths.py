"""Counts keyed by file use one name for it (its resolved path), however the path was typed.

Issue 42, point 9: a store ingested from a relative path (``cd /x && audit ingest caps/``) kept
the path as typed in its rows and the resolved one in its manifest; an unreadable line of a
later month's file then counted in the earlier month too (an August report showed 2 unreadable
lines instead of 1). The known answers below come from the files themselves: their lines parsed
with :mod:`json` here, each unreadable line in the month of its file's readable records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import audit
import audit.ingest.store as store_module
from audit.ingest.query import load_deliveries, store_inputs
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_paths_never_printed"
DAYS = {"2026-08-30": "1788048000", "2026-09-02": "1788307200"}  # date -d @... -u


def _signed(day: str, n: int) -> list[dict]:
    body = json.dumps(
        {
            "id": f"evt_{day}",
            "event": "incident.created",
            "timestamp": f"{day}T00:00:00Z",
            "data": {"incidentId": f"inc_{day}", "status": "new", "timestamp": f"{day}T00:00:00Z"},
        },
        separators=(",", ":"),
    )
    ts = DAYS[day]
    return [
        capture(
            body,
            signature=sign(SECRET, ts, body.encode()),
            timestamp=ts,
            received_at=f"{day}T00:00:05Z",
            response_status=204,
            response_ms=3,
        )
        for _ in range(n)
    ]


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``caps/`` with an August and a September log, one torn line each, and a secrets file,
    in the working folder (so that ``caps`` is a relative path)."""
    caps = tmp_path / "caps"
    caps.mkdir()
    write_jsonl(caps / "august.jsonl", [*_signed("2026-08-30", 2), '{"received_at": "2026-'])
    write_jsonl(caps / "september.jsonl", [*_signed("2026-09-02", 3), "{not json"])
    write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _by_hand(caps: Path, month: str) -> int:
    """Torn lines of the files whose readable records were received in ``month``."""
    total = 0
    for log in caps.glob("*.jsonl"):
        torn, months = 0, set()
        for text in log.read_text().splitlines():
            try:
                months.add(json.loads(text)["received_at"][:7])
            except ValueError:
                torn += 1
        total += torn if months == {month} else 0
    return total


def _unreadable(**where: object) -> int:
    counts = audit.open(secrets="s.json", period="2026-08", progress=False, **where)
    got = counts.verdict_counts()
    return int(got.loc[got["verdict"] == "unreadable", "count"].sum())


def _stored_names(store: Path) -> set[str]:
    """The names the store's parts hold, read with pyarrow (not the code under test)."""
    parts = store.glob("deliveries/month=*/*.parquet")
    return {s for p in parts for s in pq.read_table(p, columns=["source"])["source"].to_pylist()}


def _as_typed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingest as releases before this change did: rows name their file as it was typed."""
    monkeypatch.setattr(store_module, "source_name", lambda p: os.path.relpath(p))


@pytest.mark.parametrize("legacy", [False, True], ids=["now", "store-of-an-earlier-release"])
def test_a_relative_ingest_counts_unreadable_lines_as_the_raw_captures_do(
    folder, monkeypatch, legacy
):
    want = _by_hand(folder / "caps", "2026-08")
    assert want == 1  # the August log's torn line; September's belongs to September
    if legacy:
        _as_typed(monkeypatch)
    ingest(["caps"], "s.json", "relative", workers=1)
    ingest([folder / "caps"], "s.json", folder / "absolute", workers=1)
    monkeypatch.undo()  # reading is today's code either way
    monkeypatch.chdir(folder)
    stored = _stored_names(folder / "relative")
    assert all(os.path.isabs(s) for s in stored) is not legacy, stored  # as each release stores
    assert _unreadable(logs=["caps"]) == want
    assert _unreadable(store="absolute") == want
    assert _unreadable(store="relative") == want
    # One name per file, the manifest's: rows and the per-file counts agree.
    files = sorted(store_inputs("relative")["source"])
    assert files == [
        str((folder / "caps" / n).resolve()) for n in ("august.jsonl", "september.jsonl")
    ]
    assert set(load_deliveries("relative")["source"]) == set(files)
    raw = audit.open(logs=["caps"], secrets="s.json", progress=False)  # typed as relative
    assert set(raw.deliveries["source"]) == set(files)
    logs = raw.inputs[raw.inputs["kind"] == "capture log"]
    assert sorted(logs["source"]) == files


def test_two_files_typed_alike_in_a_store_of_an_earlier_release_stay_two(folder, monkeypatch):
    """Two folders' ``log.jsonl`` ingested from each folder: the rows of an earlier release
    hold the same name for both; each counts as its own file (by the part it is stored in)."""
    for name in ("august", "september"):
        (folder / name).mkdir()
        (folder / "caps" / f"{name}.jsonl").rename(folder / name / "log.jsonl")
    _as_typed(monkeypatch)
    for name in ("august", "september"):
        monkeypatch.chdir(folder / name)
        ingest(["log.jsonl"], folder / "s.json", folder / "store", workers=1)
    monkeypatch.undo()
    monkeypatch.chdir(folder)
    assert _stored_names(folder / "store") == {"log.jsonl"}
    d = load_deliveries("store")
    assert sorted(d["source"].unique()) == [
        str(folder / n / "log.jsonl") for n in ("august", "september")
    ]
    assert _unreadable(store="store") == 1
