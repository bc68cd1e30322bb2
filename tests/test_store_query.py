"""Reading the store without DuckDB's ORDER BY: rows still come back in input order."""

from __future__ import annotations

import pyarrow as pa

from audit.ingest.scan import in_input_order


def test_rows_out_of_order_are_sorted_by_source_then_line():
    t = pa.table(
        {
            "source": ["b.jsonl", "a.jsonl", "a.jsonl", "b.jsonl", "a.jsonl"],
            "line": [1, 7, 2, 10, 3],
            "verdict": ["v1", "v2", "v3", "v4", "v5"],
        }
    )
    got = in_input_order([t])
    assert got.column("source").to_pylist() == ["a.jsonl"] * 3 + ["b.jsonl"] * 2
    assert got.column("line").to_pylist() == [2, 3, 7, 1, 10]
    assert got.column("verdict").to_pylist() == ["v3", "v5", "v2", "v1", "v4"]


def test_rows_in_order_keep_their_order_in_one_chunk_per_column():
    first = pa.table({"source": ["a", "a"], "line": [1, 2], "x": [3, 2]})
    t = pa.concat_tables([first, pa.table({"source": ["b"], "line": [1], "x": [1]})])
    got = in_input_order([t])
    assert got.equals(t)
    assert [got.column(n).num_chunks for n in got.column_names] == [1, 1, 1]
    one = pa.table({"source": ["a"], "line": [5]})
    assert in_input_order([one]) is one


def test_an_unreadable_record_between_two_months_keeps_its_line(tmp_path):
    """A file's unreadable line lives in the month=none part: the read must interleave it."""
    import json

    from audit.ingest.query import load_deliveries
    from audit.ingest.store import ingest

    log = tmp_path / "c.jsonl"
    rec = {"received_at": "2026-10-31T23:59:00Z", "headers": {}, "body": "{}"}
    later = {**rec, "received_at": "2026-11-01T00:01:00Z"}
    log.write_text("\n".join([json.dumps(rec), "not json", json.dumps(later), "{"]) + "\n")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"wh": [{"secret": "whsec_x"}]}))
    secrets.chmod(0o600)
    ingest([log], secrets, tmp_path / "store")
    d = load_deliveries(tmp_path / "store", columns=["verdict", "received_at"])
    assert d["line"].tolist() == [1, 2, 3, 4]  # parts hold lines 1 | 2, 4 | 3
    assert d["received_at"].isna().tolist() == [False, True, False, True]
    assert d["verdict"].tolist()[1] == d["verdict"].tolist()[3] == "unreadable"


def test_read_logs_upto_leaves_later_records_out_but_counts_them(tmp_path):
    import json

    import pandas as pd

    from audit.ingest.verdicts import read_logs

    log = tmp_path / "c.jsonl"
    times = ["2026-10-31T23:59:59Z", "2026-11-01T00:00:00Z", "2026-11-01T00:00:01Z"]
    lines = [json.dumps({"received_at": t, "headers": {}, "body": "{}"}) for t in times]
    log.write_text("\n".join([*lines, "not json"]) + "\n")
    secrets = tmp_path / "secrets.json"
    secrets.write_text(json.dumps({"wh": [{"secret": "whsec_x"}]}))
    secrets.chmod(0o600)
    every = read_logs([log], secrets, columns=["line", "verdict", "received_at"], workers=1)
    upto = pd.Timestamp("2026-11-01T00:00:00Z")
    got = read_logs(
        [log], secrets, columns=["line", "verdict", "received_at"], workers=1, upto=upto
    )
    assert every.rows["line"].tolist() == [1, 2, 3, 4]
    assert got.rows["line"].tolist() == [1, 2, 4]  # the boundary is kept; no time: kept
    pd.testing.assert_frame_equal(got.inputs, every.inputs)  # the file still has 4 records
    assert got.inputs["records"].tolist() == [4]


def test_rows_moved_in_runs_come_back_in_the_order_python_sorts_them(monkeypatch):
    """Both ways of rebuilding (zero-copy runs, and take when there are too many runs) give the
    order Python's sort of (source, line) gives; sources include non-ASCII names."""
    import random

    import audit.ingest.scan as scan

    rng = random.Random(3)
    rows = [(s, n) for s in ("b.jsonl", "a.jsonl", "é.jsonl", "z/a.jsonl") for n in range(1, 400)]
    runs = [rows[i : i + rng.randint(1, 50)] for i in range(0, len(rows), 50)]
    rng.shuffle(runs)
    shuffled = [r for run in runs for r in run]
    t = pa.table(
        {
            "source": [s for s, _ in shuffled],
            "line": [n for _, n in shuffled],
            "tag": [f"{s}:{n}" for s, n in shuffled],
        }
    )
    want = sorted(shuffled)
    for max_runs in (10_000, 0):
        monkeypatch.setattr(scan, "MAX_RUNS", max_runs)
        got = scan.in_input_order([t])
        pairs = zip(got["source"].to_pylist(), got["line"].to_pylist(), strict=True)
        assert list(pairs) == want
        assert got["tag"].to_pylist() == [f"{s}:{n}" for s, n in want]
