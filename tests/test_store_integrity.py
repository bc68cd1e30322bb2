"""The store keeps every record and knows when it is damaged (issue 35): damaged parts, a
rewritten or copytruncated log, a doubled manifest entry, a link inside, an absurd count."""

from __future__ import annotations

import collections
import hashlib
import json
import warnings

import duckdb
import pytest

import audit.ingest.store_folder as store_folder
from audit.analysis.analyze import analyze
from audit.cli import main
from audit.errors import InputError
from audit.ingest.query import load_deliveries
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

T0 = 1790812800  # 2026-10-01T00:00:00Z


def _rec(n: int, secret: str = "k1") -> dict:
    body = json.dumps({"id": f"evt_{n}", "event": "incident.created", "data": {}})
    ts = str(T0 + n)
    return capture(
        body,
        signature=sign(secret, ts, body.encode()),
        timestamp=ts,
        received_at=T0 + n + 1,
        subscription_id="wh_1",
    )


@pytest.fixture
def secrets(tmp_path):
    return write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})


def _counts(store) -> dict[str, int]:
    """Verdict counts by DuckDB over the parts on disk (outside the code under test)."""
    glob = str(store / "deliveries" / "*" / "*.parquet")
    return dict(duckdb.sql(f"SELECT verdict, count(*) FROM '{glob}' GROUP BY 1").fetchall())


def _flip(part, at: int = 200) -> None:
    data = bytearray(part.read_bytes())
    data[at] ^= 0xFF
    part.write_bytes(bytes(data))


def test_a_damaged_part_is_one_line_naming_it_and_ingest_repairs_it(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(30)])
    ingest([log], secrets, store)
    part = next(store.rglob("*.parquet"))
    good = hashlib.sha256(part.read_bytes()).hexdigest()
    _flip(part)
    with pytest.raises(InputError, match=f"^{part}: damaged .*sha256"):
        load_deliveries(store, columns=["event_id"])
    for args in (
        ["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")],
        [
            "analyze",
            "--store",
            str(store),
            "--out",
            str(tmp_path / "t"),
            "--as-of",
            "2026-11-01T00:00:00Z",
        ],
    ):
        assert main(args) == 3
        err = capsys.readouterr().err
        assert err.startswith(f"audit: error: {part}: damaged") and err.count("\n") == 1
        assert str(log) in err  # the capture file that repairs it
    r = ingest([log], secrets, store)
    assert sum("repaired" in m for m in r.messages) == 1
    assert _counts(store) == {"valid": 30}
    assert load_deliveries(store, columns=["event_id"])["event_id"].tolist() == [
        f"evt_{i}" for i in range(30)
    ]
    assert not part.exists() and good  # replaced by a new part, listed with its own sha256


def test_a_damaged_part_and_a_secrets_change_do_not_stop_every_ingest(tmp_path, secrets):
    store = tmp_path / "store"
    a = write_jsonl(tmp_path / "a.jsonl", [_rec(i, secret="k2") for i in range(5)])
    b = write_jsonl(tmp_path / "b.jsonl", [_rec(i) for i in range(10, 15)])
    ingest([a, b], secrets, store)
    manifest = json.loads((store / "manifest.json").read_text())
    a_part = store / "deliveries" / manifest["files"][0]["parts"][0]["name"]
    _flip(a_part)
    k2 = {"secret": "k2", "valid_from": "2026-01-01T00:00:00Z"}
    write_secrets(secrets, {"wh_1": [{"secret": "k1"}, k2]})
    r = ingest([], secrets, store)  # no capture at hand: said, skipped, not fatal
    assert any(f"{a_part}: damaged" in m and "not verified again" in m for m in r.messages)
    r = ingest([a], secrets, store)  # the capture at hand: repaired, with the new secrets
    assert any("repaired" in m for m in r.messages)
    # a's records verified with the new secrets (valid); b's were verified again at the change
    assert _counts(store) == {"valid": 5, "rotated_secret": 5}


def test_a_log_rewritten_without_its_forged_lines_keeps_them(tmp_path, secrets):
    store = tmp_path / "store"
    real = [_rec(i) for i in range(60)]
    forged = [_rec(100 + i, secret="forged") for i in range(40)]
    log = write_jsonl(tmp_path / "a.jsonl", real[:30] + forged + real[30:])
    ingest([log], secrets, store)
    write_jsonl(log, real)  # the 40 forged lines cut out
    r = ingest([log], secrets, store)
    assert r.records == 0 and r.files_changed == 1
    lines = [m for m in r.messages if str(log) in m]
    assert lines == [
        f"{log}: changed since it was ingested: 0 new record(s) stored, 60 already stored; "
        "the 100 record(s) of its earlier content kept"
    ]
    assert _counts(store) == {"valid": 60, "signature_mismatch": 40}
    hashes = load_deliveries(store, columns=["record_sha256"])["record_sha256"]
    assert len(hashes) == 100 and hashes.is_unique  # each record once


def test_a_copytruncated_log_keeps_what_was_stored_and_adds_what_is_new(tmp_path, secrets):
    store = tmp_path / "store"
    log = write_jsonl(tmp_path / "recv.jsonl", [_rec(i) for i in range(50)])
    ingest([log], secrets, store)
    write_jsonl(log, [_rec(i) for i in range(50, 70)])  # emptied and refilled; copy not given
    r = ingest([log], secrets, store)
    assert r.records == 20
    assert any("20 new record(s) stored, 0 already stored; the 50" in m for m in r.messages)
    assert _counts(store) == {"valid": 70}
    write_jsonl(log, [_rec(i) for i in range(50, 65)])  # truncated: nothing new, nothing lost
    assert ingest([log], secrets, store).records == 0
    assert _counts(store) == {"valid": 70}


def test_the_same_record_in_two_files_is_stored_once(tmp_path, secrets):
    store = tmp_path / "store"
    a = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(10)])
    b = write_jsonl(tmp_path / "b.jsonl", [_rec(i) for i in range(5, 12)])  # 5 in common
    r = ingest([a, b], secrets, store)
    assert r.records == 12
    assert f"{b}: 5 record(s) already stored, not stored again" in r.messages
    assert _counts(store) == {"valid": 12}


def _one_line(tmp_path, secrets, store, capsys, match: str) -> None:
    """Every reader and ingest stop in one line matching ``match``; nothing changed."""
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and p.name != ".lock"}
    with pytest.raises(InputError, match=match):
        load_deliveries(store)
    with pytest.raises(InputError, match=match):
        ingest([write_jsonl(tmp_path / "new.jsonl", [_rec(99)])], secrets, store)
    assert main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err
    after = {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == before


def test_a_manifest_that_lists_a_file_twice_is_refused(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])], secrets, store)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["files"].append(dict(manifest["files"][0]))
    (store / "manifest.json").write_text(json.dumps(manifest))
    _one_line(tmp_path, secrets, store, capsys, "listed twice")


def test_a_manifest_that_lists_a_part_twice_is_refused(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])], secrets, store)
    manifest = json.loads((store / "manifest.json").read_text())
    entry = manifest["files"][0]
    entry["parts"] = entry["parts"] * 2
    entry["records"] *= 2
    (store / "manifest.json").write_text(json.dumps(manifest))
    _one_line(tmp_path, secrets, store, capsys, "listed twice")


@pytest.mark.parametrize("key", ["records", "size", "lines"])
def test_an_absurd_count_is_refused(tmp_path, secrets, capsys, key):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])], secrets, store)
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["files"][0][key] = 10**30
    (store / "manifest.json").write_text(json.dumps(manifest))
    _one_line(tmp_path, secrets, store, capsys, rf"'{key}' is missing or not a count")


def test_a_link_inside_the_store_is_refused_and_not_written_through(tmp_path, secrets, capsys):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(3)])], secrets, store)
    month = store / "deliveries" / "month=2026-10"
    elsewhere = tmp_path / "elsewhere"
    month.rename(elsewhere)
    month.symlink_to(elsewhere)
    _one_line(tmp_path, secrets, store, capsys, "a symbolic link inside the store")
    assert len(list(elsewhere.iterdir())) == 1  # nothing written through it


def test_an_analysis_of_the_store_reads_each_part_for_its_sha256_once(
    tmp_path, secrets, monkeypatch
):
    store = tmp_path / "store"
    ingest([write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(30)])], secrets, store)
    reads: collections.Counter[str] = collections.Counter()
    hashed = store_folder._part_problem

    def counted(path, sha256):
        reads[str(path)] += 1
        return hashed(path, sha256)

    monkeypatch.setattr(store_folder, "_part_problem", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        analyze([], secrets, store=store)
    parts = sorted(str(p) for p in store.rglob("*.parquet"))
    assert sorted(reads) == parts
    assert set(reads.values()) == {1}
