"""The evidence store: ingest once, file identity, growth, secrets changes, lock, equal findings."""

from __future__ import annotations

import hashlib
import json
import threading
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from audit.analysis.analyze import run_analyses
from audit.cli import main
from audit.demo import simulate
from audit.errors import InputError
from audit.findings import run_controls
from audit.ingest.extract import EXTRACTED
from audit.ingest.query import load_analysis_inputs, load_deliveries
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.signatures import sign
from audit.ingest.store import Store, ingest, secrets_fingerprints
from audit.ingest.verification import VERDICT_COLUMNS, audit_signatures
from tests.builders import capture, write_jsonl, write_secrets

T0 = 1790812800  # 2026-10-01T00:00:00Z


def _rec(n: int, secret: str = "k1", sub: str | None = "wh_1") -> dict:
    body = json.dumps(
        {
            "id": f"evt_{n}",
            "event": "incident.created",
            "timestamp": "2026-10-01T00:00:00Z",
            "data": {"incidentId": f"inc_{n}"},
        }
    )
    ts = str(T0 + n)
    return capture(
        body,
        signature=sign(secret, ts, body.encode()),
        timestamp=ts,
        received_at=T0 + n + 1,
        subscription_id=sub,
    )


@pytest.fixture
def setup(tmp_path):
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i) for i in range(5)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "k1"}]})
    return tmp_path, log, secrets, tmp_path / "store"


def _verdicts(store) -> pd.DataFrame:
    return load_deliveries(store, columns=VERDICT_COLUMNS)


def test_ingest_stores_one_row_per_record_and_reingest_is_a_noop(setup):
    tmp, log, secrets, store = setup
    first = ingest([log], secrets, store)
    assert (first.files_added, first.records) == (1, 5)
    parts = sorted(p.name for p in (store / "deliveries").rglob("*.parquet"))
    again = ingest([log], secrets, store)
    assert (again.files_added, again.files_unchanged, again.records) == (0, 1, 0)
    assert sorted(p.name for p in (store / "deliveries").rglob("*.parquet")) == parts
    copy = tmp / "copy.jsonl"  # same bytes under another name: known by sha256
    copy.write_bytes(log.read_bytes())
    assert ingest([copy], secrets, store).files_unchanged == 1
    v = _verdicts(store)
    assert list(v["verdict"]) == ["valid"] * 5 and list(v["line"]) == [1, 2, 3, 4, 5]
    assert (store / "deliveries" / "month=2026-10").is_dir()


def test_store_rows_equal_the_loader_rows(setup):
    tmp, _, secrets, store = setup
    log = write_jsonl(
        tmp / "mixed.jsonl",
        [_rec(1), "not json", _rec(2, secret="bad"), _rec(3, sub=None), {"received_at": "x"}],
    )
    ingest([log], secrets, store)
    raw = audit_signatures([log], secrets).deliveries[VERDICT_COLUMNS]
    pd.testing.assert_frame_equal(_verdicts(store)[VERDICT_COLUMNS], raw)


def test_a_grown_log_ingests_only_the_new_lines(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store)
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps(_rec(7)) + "\n")
    r = ingest([log], secrets, store)
    assert (r.files_grown, r.records) == (1, 1)
    assert any("grew" in m for m in r.messages)
    v = _verdicts(store)
    assert list(v["line"]) == [1, 2, 3, 4, 5, 6]
    assert (
        Store(store).manifest()["files"][0]["sha256"]
        == hashlib.sha256(log.read_bytes()).hexdigest()
    )


def test_a_changed_file_adds_its_new_records_and_keeps_the_earlier_ones(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store)
    write_jsonl(log, [_rec(1), _rec(2, secret="forged")])
    r = ingest([log], secrets, store)
    assert (r.files_changed, r.records) == (1, 1)  # _rec(1) is stored already
    want = "changed since it was ingested: 1 new record(s) stored, 1 already stored; the 5"
    assert sum(want in m for m in r.messages) == 1
    v = _verdicts(store)
    assert sorted(v["verdict"]) == ["signature_mismatch"] + ["valid"] * 5
    assert len(list((store / "deliveries").rglob("*.parquet"))) == 2


def test_secrets_change_reverifies_affected_records(setup):
    tmp, _, secrets, store = setup
    log = write_jsonl(
        tmp / "b.jsonl", [_rec(1), _rec(2, secret="k2", sub="wh_2"), _rec(3, secret="k2", sub=None)]
    )
    ingest([log], secrets, store)
    assert list(_verdicts(store)["verdict"]) == ["valid", "no_secret", "signature_mismatch"]
    write_secrets(secrets, {"wh_1": [{"secret": "k1"}], "wh_2": [{"secret": "k2"}]})
    r = ingest([], secrets, store)
    assert r.reverified == 2  # wh_2's record and the one whose subscription was not logged
    v = _verdicts(store)
    assert list(v["verdict"]) == ["valid", "valid", "valid"]
    assert list(v["subscription_id"]) == ["wh_1", "wh_2", "wh_2"]
    assert ingest([], secrets, store).reverified == 0


LONG_SECRET = "whsec_never_stored_7f3a9c"
# printf 'audit evidence store: secret fingerprint v1' \
#   | openssl dgst -sha256 -hmac 'whsec_never_stored_7f3a9c'
LONG_SECRET_HMAC = "370f1273733dea8007049324911efa124e9b7c5cfbc927edc87f6eefa77cfd33"


def test_fingerprints_are_keyed_and_never_the_value_or_its_hash(tmp_path):
    log = write_jsonl(tmp_path / "a.jsonl", [_rec(i, secret=LONG_SECRET) for i in range(3)])
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": LONG_SECRET}]})
    store = tmp_path / "store"
    assert ingest([log], secrets, store).records == 3
    text = (store / "manifest.json").read_text()
    # sha256 over (the keyed HMAC of the label, then "<valid_from>;") per secret
    expected = hashlib.sha256(bytes.fromhex(LONG_SECRET_HMAC) + b"None;").hexdigest()
    assert json.loads(text)["secrets"] == {"wh_1": expected}
    assert LONG_SECRET not in text
    assert hashlib.sha256(LONG_SECRET.encode()).hexdigest() not in text
    assert LONG_SECRET_HMAC not in text
    other = secrets_fingerprints(SecretStore.from_values({"wh_1": [("k2", None)]}))
    assert other["wh_1"] != expected
    for part in (store / "deliveries").rglob("*.parquet"):
        assert LONG_SECRET.encode() not in part.read_bytes()
    assert list(_verdicts(store)["verdict"]) == ["valid"] * 3


def test_concurrent_ingest_waits_for_the_lock(setup):
    _, log, secrets, store = setup
    s = Store(store)
    done = threading.Event()
    with s.lock():
        t = threading.Thread(target=lambda: (ingest([log], secrets, store), done.set()))
        t.start()
        time.sleep(0.3)
        assert not done.is_set()  # the second writer waits
    t.join(10)
    assert done.is_set() and len(_verdicts(store)) == 5


def test_parts_left_by_a_crashed_ingest_are_never_read_and_are_removed(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    stray = part.with_name("part-crashed.parquet")
    stray.write_bytes(part.read_bytes())
    assert len(_verdicts(store)) == 5  # readers go by the manifest
    ingest([log], secrets, store)
    assert not stray.exists()


def test_other_settings_need_another_store(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store)
    with pytest.raises(InputError, match="header_prefix"):
        ingest([log], secrets, store, header_prefix="X-Other")


def test_gzip_and_har_files_are_stored(setup):
    import gzip

    tmp, log, secrets, store = setup
    gz = tmp / "c.jsonl.gz"
    gz.write_bytes(gzip.compress(log.read_bytes().replace(b"evt_", b"evz_")))
    rec = _rec(9)
    har = {
        "log": {
            "entries": [
                {
                    "startedDateTime": "2026-10-01T00:00:10Z",
                    "request": {
                        "headers": [{"name": k, "value": v} for k, v in rec["headers"].items()],
                        "postData": {"text": rec["body"]},
                    },
                }
            ]
        }
    }
    (tmp / "d.har").write_text(json.dumps(har))
    r = ingest([gz, tmp / "d.har"], secrets, store)
    assert r.records == 6
    raw = audit_signatures([gz, tmp / "d.har"], secrets).deliveries[VERDICT_COLUMNS]
    pd.testing.assert_frame_equal(_verdicts(store)[VERDICT_COLUMNS], raw)


def test_small_chunks_give_the_same_rows(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store, chunk_bytes=100)
    pd.testing.assert_frame_equal(
        _verdicts(store)[VERDICT_COLUMNS],
        audit_signatures([log], secrets).deliveries[VERDICT_COLUMNS],
    )


def test_bodies_are_kept_compressed_for_evidence(setup):
    _, log, secrets, store = setup
    ingest([log], secrets, store)
    part = next((store / "deliveries").rglob("*.parquet"))
    meta = pq.ParquetFile(part).metadata.row_group(0)
    body = next(
        meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == "body"
    )
    assert body.compression == "ZSTD"
    stored = pq.read_table(part, columns=["body"]).column("body").to_pylist()
    assert stored == [json.loads(line)["body"].encode() for line in log.read_text().splitlines()]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    root = tmp_path_factory.mktemp("sim")
    result = simulate(root / "data", seed=5, days=8, incidents=40)
    store = root / "store"
    ingest([root / "data" / "captures"], result.secrets, store)
    return root, result, store


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_findings_from_the_store_equal_those_from_raw_captures(sim):
    root, result, store = sim
    raw = audit_signatures([root / "data" / "captures"], result.secrets)
    start = pd.Timestamp("2026-10-01", tz="UTC")
    end = pd.Timestamp("2026-10-09", tz="UTC")
    got = load_analysis_inputs(store, start=start, end=end)
    assert "body" not in got.deliveries.columns
    a_raw = run_analyses(raw.deliveries, as_of=end)
    a_store = run_analyses(got.deliveries, as_of=end, first_receipts=got.first_receipts)
    for name, table in a_raw.tables().items():
        pd.testing.assert_frame_equal(a_store.tables()[name], table, obj=name)
    age = read_secrets(result.secrets).latest_valid_from()
    f_raw = run_controls(a_raw, period_start=start, period_end=end, secrets_age=age)
    f_store = run_controls(a_store, period_start=start, period_end=end, secrets_age=age)
    assert (f_raw["status"] == "fail").any()
    pd.testing.assert_frame_equal(f_store, f_raw)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_cli_verify_and_analyze_from_the_store(sim, tmp_path, capsys):
    root, result, store = sim
    out = tmp_path / "v.parquet"
    assert main(["verify", "--store", str(store), "--out", str(out)]) == 0
    from_store = pd.read_parquet(out)
    csv = tmp_path / "v.csv"
    assert (
        main(
            [
                "verify",
                str(root / "data" / "captures"),
                "--secrets",
                str(result.secrets),
                "--out",
                str(csv),
            ]
        )
        == 0
    )
    assert from_store["verdict"].tolist() == pd.read_csv(csv)["verdict"].tolist()
    assert main(["analyze", "--store", str(store), "--out", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "incidents.parquet").is_file()
    assert main(["verify", "--store", str(store), "--out", str(tmp_path / "v.txt")]) == 3
    assert "write .csv or .parquet" in capsys.readouterr().err


def test_cli_ingest_prints_what_it_did(setup, capsys):
    _, log, secrets, store = setup
    assert main(["ingest", str(log), "--secrets", str(secrets), "--store", str(store)]) == 0
    assert "1 added" in capsys.readouterr().out
    assert main(["ingest", str(log), "--secrets", str(secrets), "--store", str(store)]) == 0
    assert "1 already stored" in capsys.readouterr().out


def test_the_layout_is_plain_hive_parquet_that_other_engines_read(setup):
    """The step past one machine: any Hive-aware reader (DuckDB by glob, Arrow datasets; Spark
    and Trino likewise) reads the store without audit's code or manifest."""
    import duckdb
    import pyarrow.dataset as ds

    _, log, secrets, store = setup
    ingest([log], secrets, store)
    glob = str(store / "deliveries" / "*" / "*.parquet")
    rows = duckdb.sql(
        f"SELECT month, verdict, count(*) FROM read_parquet('{glob}', hive_partitioning = true) "
        "GROUP BY ALL"
    ).fetchall()
    assert rows == [("2026-10", "valid", 5)]
    dataset = ds.dataset(store / "deliveries", format="parquet", partitioning="hive")
    assert dataset.to_table(columns=["month", "line"]).num_rows == 5


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_raw_captures_read_without_bodies_give_the_same_analysis(sim):
    from audit.ingest.query import ANALYSIS_COLUMNS
    from audit.ingest.verdicts import read_logs

    root, result, _ = sim
    caps = root / "data" / "captures"
    old = audit_signatures([caps], result.secrets)
    new = read_logs([caps], result.secrets, columns=ANALYSIS_COLUMNS, workers=2, piece_bytes=10**5)
    assert "body" not in new.rows.columns
    pd.testing.assert_frame_equal(new.inputs, old.inputs)
    end = pd.Timestamp("2026-10-09", tz="UTC")
    a_old, a_new = run_analyses(old.deliveries, as_of=end), run_analyses(new.rows, as_of=end)
    for name, table in a_old.tables().items():
        pd.testing.assert_frame_equal(a_new.tables()[name], table, obj=name)


def test_cli_verify_with_logs_and_store_writes_only_those_logs(setup, tmp_path):
    tmp, log, secrets, store = setup
    other = write_jsonl(tmp / "other.jsonl", [_rec(8), _rec(9)])
    ingest([other], secrets, store)
    out = tmp_path / "v.csv"
    assert (
        main(
            [
                "verify",
                str(log),
                "--secrets",
                str(secrets),
                "--store",
                str(store),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    got = pd.read_csv(out)
    assert got["source"].tolist() == [str(log)] * 5 and got["line"].tolist() == [1, 2, 3, 4, 5]
    assert main(["verify", "--store", str(store), "--out", str(out)]) == 0
    assert len(pd.read_csv(out)) == 7


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_controls_judge_the_columns_of_the_written_deliveries_table(sim):
    """Controls read the deliveries as deliveries.parquet has them (an auditor re-checks them
    there), not the store's extracted incident fields, which each cut by period would copy."""
    from audit.findings.controls.base import Scope

    store = sim[2]
    start = pd.Timestamp("2026-10-01", tz="UTC")
    end = pd.Timestamp("2026-10-09", tz="UTC")
    got = load_analysis_inputs(store, start=start, end=end)
    assert "fingerprint" in got.deliveries.columns  # the incident fields are in first receipts
    assert not {"data_status", "body_sha256"} & set(got.deliveries.columns)
    assert "data_status" in got.first_receipts.rows.columns
    a = run_analyses(got.deliveries, as_of=end, first_receipts=got.first_receipts)
    # The fold read the extracted fields; the analysis keeps none of them (a third of the frame
    # at 1M), and the incidents carry what they told.
    assert not set(EXTRACTED) & set(a.deliveries.columns)
    assert a.incidents["status"].notna().any()
    scope = Scope(a, start, end, {})
    assert list(scope.deliveries.columns) == list(a.tables()["deliveries"].columns)
    assert len(scope.valid) == int((a.deliveries["verdict"] == "valid").sum())
