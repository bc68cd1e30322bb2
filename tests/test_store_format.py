"""The store's format: a format-1 store (tests/data/stores/v1) read by this release and upgraded
in place; times written as Parquet TIMESTAMP(MICROS, UTC); a newer format refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import audit.ingest.store as store_module
from audit.cli import main
from audit.errors import InputError
from audit.ingest.query import load_deliveries
from audit.ingest.store import ingest
from audit.ingest.verification import VERDICT_COLUMNS

DATA = Path(__file__).parent / "data" / "stores"


@pytest.fixture
def v1(tmp_path) -> tuple[Path, Path]:
    """A copy of the format-1 fixture store (never the fixture itself) and its secrets."""
    store = tmp_path / "store"
    shutil.copytree(DATA / "v1", store)
    secrets = tmp_path / "secrets.json"
    shutil.copy(DATA / "v1-secrets.json", secrets)
    secrets.chmod(0o600)
    return store, secrets


def _duckdb_counts(store: Path) -> dict[str, int]:
    """Counts by verdict, by DuckDB straight over the Parquet files (not the code under test)."""
    glob = str(store / "deliveries" / "*" / "*.parquet")
    rows = duckdb.sql(f"SELECT verdict, count(*) FROM read_parquet('{glob}') GROUP BY 1").fetchall()
    return dict(rows)


def test_a_format_1_store_is_read_by_every_reader(v1, tmp_path, capsys):
    store, _ = v1
    want = _duckdb_counts(DATA / "v1")
    assert sum(want.values()) == 464 and want["unreadable"] == 2  # as its README says
    got = load_deliveries(store, columns=VERDICT_COLUMNS)
    assert got["verdict"].value_counts().to_dict() == want
    with_hash = load_deliveries(store, columns=["verdict", "record_sha256"])
    assert with_hash["record_sha256"].isna().all()  # a column it lacks reads as missing
    out = tmp_path / "v.csv"
    assert main(["verify", "--store", str(store), "--out", str(out)]) == 0
    assert pd.read_csv(out)["verdict"].value_counts().to_dict() == want
    tables = tmp_path / "tables"
    args = ["analyze", "--store", str(store), "--out", str(tables)]
    assert main([*args, "--as-of", "2026-11-01T00:00:00Z"]) == 0
    counts = pd.read_parquet(tables / "deliveries.parquet")["verdict"].value_counts().to_dict()
    assert counts == want
    assert json.loads((store / "manifest.json").read_text())["version"] == 1  # read, not changed
    capsys.readouterr()


def test_ingest_upgrades_a_format_1_store_in_place_and_says_so(v1):
    store, secrets = v1
    before = _duckdb_counts(store)
    old_parts = sorted(p.name for p in store.rglob("*.parquet"))
    r = ingest([], secrets, store)
    assert [m for m in r.messages if "upgraded" in m] == [
        f"{store}: store upgraded from format 1 to 2 (8 part(s) rewritten)"
    ]
    manifest = json.loads((store / "manifest.json").read_text())
    assert manifest["version"] == 2
    assert all(set(p) == {"name", "sha256", "rows"} for e in manifest["files"] for p in e["parts"])
    assert not set(old_parts) & {p.name for p in store.rglob("*.parquet")}  # old parts gone
    assert _duckdb_counts(store) == before
    hashes = load_deliveries(store, columns=["record_sha256"])["record_sha256"]
    assert hashes.notna().all() and hashes.is_unique
    assert not any("upgraded" in m for m in ingest([], secrets, store).messages)


def test_an_upgrade_that_fails_leaves_the_format_1_store_readable(v1, monkeypatch):
    """A crash after the new parts are written but before the manifest: the old store stands."""
    store, secrets = v1

    def crash(*args, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(store_module, "write_json_atomic", crash)
    with pytest.raises(KeyboardInterrupt):
        ingest([], secrets, store)
    assert json.loads((store / "manifest.json").read_text())["version"] == 1
    assert load_deliveries(store, columns=["verdict"]).shape[0] == 464
    assert sorted(p.name for p in store.rglob("*.parquet")) == sorted(
        p.name for p in (DATA / "v1").rglob("*.parquet")
    )


def test_times_are_parquet_timestamp_micros_utc(v1, tmp_path):
    store, secrets = v1
    ingest([], secrets, store)
    part = next(store.rglob("month=2026-10/*.parquet"))
    schema = pq.ParquetFile(part).schema  # the Parquet schema, not Arrow's reading of it
    for name in ("received_at", "event_timestamp"):
        logical = schema.column(schema.names.index(name)).logical_type
        assert logical.type == "TIMESTAMP"
        assert json.loads(logical.to_json()) == {
            "Type": "Timestamp",
            "isAdjustedToUTC": True,
            "timeUnit": "microseconds",
            "is_from_converted_type": False,
            "force_set_converted_type": False,
        }
    assert str(pq.read_schema(part).field("received_at").type) == "timestamp[us, tz=UTC]"


def test_a_store_of_a_newer_format_is_refused_in_one_line(v1, tmp_path, capsys):
    store, secrets = v1
    manifest = json.loads((store / "manifest.json").read_text())
    manifest["version"] = 3
    (store / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="written by a newer release"):
        load_deliveries(store)
    with pytest.raises(InputError, match="written by a newer release"):
        ingest([], secrets, store)
    assert main(["verify", "--store", str(store), "--out", str(tmp_path / "v.csv")]) != 0
    err = capsys.readouterr().err
    assert "written by a newer release" in err and err.count("\n") == 1
    assert json.loads((store / "manifest.json").read_text())["version"] == 3


def test_a_damaged_part_of_a_format_1_store_is_repaired_from_its_capture_file(v1, tmp_path):
    store, secrets = v1
    capture = tmp_path / "receiver-2026-10-03.jsonl"
    shutil.copy(DATA / "v1-captures" / capture.name, capture)
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    want = _duckdb_counts(store)
    part.write_bytes(b"PAR1 not a part any more")
    r = ingest([capture], secrets, store)
    said = [m for m in r.messages if "repaired" in m]
    assert len(said) == 1 and said[0].startswith(f"{part}: damaged (")
    assert (
        "the 15 record(s) of /tmp/fx/sim/captures/receiver-2026-10-03.jsonl read again" in said[0]
    )
    assert json.loads((store / "manifest.json").read_text())["version"] == 2
    assert _duckdb_counts(store) == want  # every record again, counted once


def test_a_damaged_part_of_a_format_1_store_without_its_capture_stops_the_upgrade(v1):
    store, secrets = v1
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    part.write_bytes(b"PAR1 not a part any more")
    with pytest.raises(InputError, match=r"give its capture file .* to audit ingest"):
        ingest([], secrets, store)
    assert json.loads((store / "manifest.json").read_text())["version"] == 1  # nothing changed


def _flip_a_valid_body(part: Path) -> int:
    """Flip one bit of the body of a ``valid`` row of ``part``, its verdict and body_sha256
    left as they were (a disk's damage, not an edit); the row's line."""
    table = pq.read_table(part)
    rows = table.to_pylist()
    at = next(i for i, r in enumerate(rows) if r["verdict"] == "valid")
    body = bytearray(rows[at]["body"])
    body[10] ^= 0x01
    rows[at]["body"] = bytes(body)
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), part)
    return rows[at]["line"]


def test_a_flipped_bit_in_a_valid_body_is_repaired_from_the_capture_file(v1, tmp_path):
    # Before: the flipped body was carried into format 2, still `valid`, and hashed there.
    store, secrets = v1
    capture = tmp_path / "receiver-2026-10-03.jsonl"
    shutil.copy(DATA / "v1-captures" / capture.name, capture)
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    line = _flip_a_valid_body(part)
    r = ingest([capture], secrets, store)
    said = [m for m in r.messages if "repaired" in m]
    assert said == [
        f"{part}: damaged (the body of the record of line {line} does not hash to its "
        "body_sha256); repaired: the 15 record(s) of "
        "/tmp/fx/sim/captures/receiver-2026-10-03.jsonl read again from the capture file given"
    ]
    # every body stored is the capture file's, by DuckDB over the parts (not the code here)
    glob = str(store / "deliveries" / "*" / "*.parquet")
    stored = duckdb.sql(
        f"SELECT line, body FROM read_parquet('{glob}') WHERE file_sha256 LIKE 'a6a741fd%'"
    ).fetchall()
    lines = capture.read_bytes().splitlines()
    want = {i: json.loads(raw)["body"].encode() for i, raw in enumerate(lines, 1)}
    assert len(stored) == 15 and all(want[n] == bytes(b) for n, b in stored)


def test_a_flipped_bit_in_a_valid_body_without_its_capture_stops_the_upgrade(v1):
    store, secrets = v1
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    line = _flip_a_valid_body(part)
    with pytest.raises(InputError) as e:
        ingest([], secrets, store)
    assert str(e.value) == (
        f"{part}: damaged (the body of the record of line {line} does not hash to its "
        "body_sha256); the store (format 1) cannot be upgraded and nothing changed: restore "
        "the part from a backup, or give its capture file "
        "(/tmp/fx/sim/captures/receiver-2026-10-03.jsonl) to audit ingest to repair it"
    )
    assert json.loads((store / "manifest.json").read_text())["version"] == 1


def test_a_part_whose_row_differs_from_its_capture_file_is_repaired(v1, tmp_path):
    # A flipped bit the part cannot see by itself (a signature, not the body): the capture
    # file given tells it.
    store, secrets = v1
    capture = tmp_path / "receiver-2026-10-03.jsonl"
    shutil.copy(DATA / "v1-captures" / capture.name, capture)
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    table = pq.read_table(part)
    rows = table.to_pylist()
    rows[0]["signature"] = rows[0]["signature"][:-1] + "0"
    assert rows[0]["signature"] != table.column("signature")[0].as_py()
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), part)
    r = ingest([capture], secrets, store)
    said = [m for m in r.messages if "repaired" in m]
    assert len(said) == 1
    assert f"(the record of line {rows[0]['line']} is not the one {capture} holds there)" in said[0]
    glob = str(store / "deliveries" / "*" / "*.parquet")
    [(sig,)] = duckdb.sql(
        f"SELECT signature FROM read_parquet('{glob}') "
        f"WHERE file_sha256 LIKE 'a6a741fd%' AND line = {rows[0]['line']}"
    ).fetchall()
    line = capture.read_bytes().splitlines()[rows[0]["line"] - 1]
    assert sig == json.loads(line)["headers"]["X-PhishFort-Signature"]


def test_a_part_with_a_damaged_schema_is_one_line_not_an_internal_error(v1, tmp_path, capsys):
    # Before: `audit: internal error: KeyError: 'Field "subscription_logged" does not exist'`.
    store, secrets = v1
    part = next(store.rglob("part-a6a741fda6e02569-*.parquet"))
    pq.write_table(pq.read_table(part).drop(["subscription_logged"]), part)
    other = tmp_path / "other.jsonl"  # a capture log, not the part's file (its first line)
    lines = (DATA / "v1-captures" / "receiver-2026-10-03.jsonl").read_text().splitlines()
    other.write_text(lines[0] + "\n")
    args = [str(other), "--store", str(store), "--secrets", str(secrets), "--quiet"]
    assert main(["ingest", *args]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err
    assert f"{part}: damaged (it lacks the column 'subscription_logged'" in err
    assert "give its capture file (/tmp/fx/sim/captures/receiver-2026-10-03.jsonl)" in err
    assert json.loads((store / "manifest.json").read_text())["version"] == 1
    capture = tmp_path / "receiver-2026-10-03.jsonl"
    shutil.copy(DATA / "v1-captures" / capture.name, capture)
    r = ingest([capture], secrets, store)  # the capture file given: repaired
    assert [m for m in r.messages if "repaired" in m]
    assert _duckdb_counts(store) == _duckdb_counts(DATA / "v1")
