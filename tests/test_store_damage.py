"""The evidence store against rotated logs and damage: a log renamed or compressed after it
was ingested is the same file; a missing or damaged part, a lost manifest, a mistyped folder
each give one line, and nothing is deleted or counted twice."""

from __future__ import annotations

import gzip
import json

import pytest

from audit.cli import main
from audit.errors import InputError
from audit.ingest.query import load_deliveries
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

T0 = 1790812800  # 2026-10-01T00:00:00Z


def _rec(n: int) -> dict:
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    ts = str(T0 + n)
    return capture(
        body, signature=sign("k1", ts, body.encode()), timestamp=ts, received_at=T0 + n + 1
    )


@pytest.fixture
def secrets(tmp_path):
    return write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})


def _ids(store) -> list[str]:
    return sorted(load_deliveries(store, columns=["event_id"])["event_id"])


def _gzip(path):
    gz = path.with_name(path.name + ".gz")
    gz.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    return gz


def test_a_log_rotated_then_compressed_is_not_stored_twice(tmp_path, secrets):
    """logrotate with delaycompress: recv.jsonl -> recv.jsonl.1 -> recv.jsonl.1.gz."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    log = write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5)])
    ingest([logs], secrets, store)
    log.rename(logs / "recv.jsonl.1")
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5, 8)])
    ingest([logs], secrets, store)
    _gzip(logs / "recv.jsonl.1")
    r = ingest([logs], secrets, store)
    assert (r.files_added, r.files_unchanged, r.records) == (0, 2, 0)
    assert _ids(store) == [f"evt_{i}" for i in range(8)]  # each record once


def test_a_log_compressed_under_a_name_read_first_keeps_its_records(tmp_path, secrets):
    """Compressed at rotation (no delaycompress) to a name sorted before the new log's: the
    stored entry follows its content, so the new log under the old name is a new file."""
    logs, store = tmp_path / "logs", tmp_path / "store"
    logs.mkdir()
    log = write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5)])
    ingest([logs], secrets, store)
    old = log.rename(logs / "a-recv.jsonl")
    _gzip(old)
    write_jsonl(logs / "recv.jsonl", [_rec(i) for i in range(5, 8)])
    r = ingest([logs], secrets, store)
    assert (r.files_added, r.files_unchanged, r.files_changed) == (1, 1, 0)
    assert any("renamed since" in m for m in r.messages)
    assert _ids(store) == [f"evt_{i}" for i in range(8)]
    again = ingest([logs], secrets, store)
    assert (again.files_unchanged, again.records) == (2, 0)


def test_a_missing_part_is_named_and_the_next_ingest_restores_it(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(5)])
    ingest([log], secrets, store)
    next((store / "deliveries").rglob("*.parquet")).unlink()
    with pytest.raises(InputError, match=r"1 part\(s\) its manifest lists are missing"):
        load_deliveries(store, columns=["event_id"])
    r = ingest([log], secrets, store)
    assert r.files_changed == 1 and r.records == 5
    assert any("parts are missing" in m for m in r.messages)
    assert _ids(store) == [f"evt_{i}" for i in range(5)]


def test_a_damaged_part_is_one_line_not_an_internal_error(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(1)])], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    part.write_bytes(part.read_bytes()[:100])  # truncated
    code = main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")])
    err = capsys.readouterr().err
    assert code == 3 and "internal error" not in err
    assert err.startswith("audit: error: a file cannot be read") and err.count("\n") == 1


def test_parts_without_a_manifest_are_never_deleted(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])
    ingest([log], secrets, store)
    (store / "manifest.json").unlink()
    parts = sorted((store / "deliveries").rglob("*.parquet"))
    with pytest.raises(InputError, match=r"holds store parts but no manifest\.json"):
        ingest([log], secrets, store)
    assert sorted((store / "deliveries").rglob("*.parquet")) == parts


def test_a_mistyped_store_folder_is_an_error_and_is_not_created(tmp_path, secrets, capsys):
    store = tmp_path / "nosuchstore"
    for argv in (
        ["verify", "--store", store, "--secrets", secrets, "--out", tmp_path / "v.csv"],
        ["analyze", "--store", store, "--secrets", secrets, "--out", tmp_path / "t"],
    ):
        assert main([str(a) for a in argv]) == 3
        assert "not an evidence store" in capsys.readouterr().err
    assert not store.exists()
