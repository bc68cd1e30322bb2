"""A year from the store: peak memory and time of ``audit analyze --store`` over everything.

Usage::

    python benchmarks/bench_year.py --store STORE [--copies 12] [--year DIR] [--runs 1]
                                    [--one-pass] [--build-only]

The simulator cannot write a year of a large client here, so the year is built from a store of
a month or a few: ``--copies`` copies of its rows, each shifted by the store's span in whole
days, with event, delivery and incident ids, record hashes, files and sources made distinct
(each copy a new set of files in the manifest) and its rows written to the ``month=``
partitions of their shifted receipt times, each new part listed with its sha256 and rows (the
store checks them on read). The bodies are copied as they are: no analysis reads them.
``--year DIR`` keeps the year there (with ``DIR.json`` saying what it holds) and reuses it on
the next run; ``--build-only`` builds it and times nothing. Then ``audit analyze --store``
runs over everything, in passes (the default ``--rows-per-pass``) and, with ``--one-pass``, in
one pass (``--rows-per-pass`` above the row count), alternated, each a fresh process; the
script prints medians and the peak RSS of each. ``bench_takedown.py`` times a question over
the same year.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import AUDIT, measure

NS_PER_DAY = 86_400 * 10**9
#: The store's data fields that hold times, as text; each copy shifts them too.
TEXT_TIMES = ("data_timestamp", "data_last_history_update", "data_burn_started")
TEXT_TIMES += ("data_takedown_timestamp",)


def build_year(src: Path, dst: Path, copies: int) -> tuple[int, str]:
    """``dst``: the store ``src`` and ``copies - 1`` shifted copies; (records, as_of ISO).

    Each copy's rows go to the ``month=`` partitions of their shifted receipt times (a part
    may split in two), each new part listed in the manifest with its sha256 and rows, as an
    ingest lists them (``Store.parts`` checks them)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    parts = [src / "deliveries" / p["name"] for f in manifest["files"] for p in f["parts"]]
    listed = ", ".join(f"'{p}'" for p in parts)
    span = "epoch_ns(min(received_at)), epoch_ns(max(received_at))"
    lo, hi = con.execute(f"SELECT {span} FROM read_parquet([{listed}])").fetchall()[0]
    days = (hi - lo) // NS_PER_DAY + 1
    added = []
    for s in range(1, copies):
        shift = s * days * NS_PER_DAY
        for f in manifest["files"]:
            sha = hashlib.sha256(f"{f['sha256']}/{s}".encode()).hexdigest()
            g = {**f, "path": f"{f['path']}.copy{s}", "sha256": sha, "parts": []}
            for k, p in enumerate(f["parts"]):
                part = src / "deliveries" / p["name"]
                schema = pq.read_schema(part)
                text = ", ".join(
                    f"CASE WHEN try_cast(replace({c}, 'Z', '') AS TIMESTAMP) IS NULL THEN {c} "
                    f"ELSE strftime(try_cast(replace({c}, 'Z', '') AS TIMESTAMP) + "
                    f"INTERVAL {s * days} DAY, '%Y-%m-%dT%H:%M:%S.%fZ') END AS {c}"
                    for c in TEXT_TIMES
                )
                sql = (
                    f"SELECT * REPLACE (source || '.copy{s}' AS source, "
                    f"epoch_ns(received_at) + {shift} AS received_at, "
                    f"epoch_ns(event_timestamp) + {shift} AS event_timestamp, "
                    f"event_id || '-copy{s}' AS event_id, "
                    f"delivery_id || '-copy{s}' AS delivery_id, "
                    f"incident_id || '-copy{s}' AS incident_id, '{sha}' AS file_sha256, "
                    f"sha256(record_sha256 || '/{s}') AS record_sha256, {text}), "
                    f"coalesce(strftime(make_timestamp((epoch_ns(received_at) + {shift}) "
                    f"// 1000), '%Y-%m'), 'none') AS _month "
                    f"FROM read_parquet('{part}')"
                )
                t = con.sql(sql).to_arrow_table()
                for month in sorted(pc.unique(t.column("_month")).to_pylist()):
                    rows = t.filter(pc.equal(t.column("_month"), month))
                    cols = [
                        pc.cast(rows.column(n), pa.int64())
                        .cast(pa.timestamp("ns", "UTC"))
                        .cast(schema.field(n).type)
                        if n in ("received_at", "event_timestamp")
                        else rows.column(n).cast(schema.field(n).type)
                        for n in schema.names
                    ]
                    name = f"month={month}/part-{sha[:16]}-{k:04d}{month[-2:]}.parquet"
                    out = dst / "deliveries" / name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    table = pa.Table.from_arrays(cols, schema=schema)
                    pq.write_table(table, out, compression="zstd")
                    digest = hashlib.sha256(out.read_bytes()).hexdigest()
                    g["parts"].append({"name": name, "sha256": digest, "rows": table.num_rows})
            added.append(g)
    manifest["files"] += added
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    records = sum(f["records"] for f in manifest["files"])
    return records, _as_of(hi, copies, days)


def _as_of(hi: int, copies: int, days: int) -> str:
    """The last receipt of the last copy, ISO (seconds)."""
    end = pd.Timestamp(hi + (copies - 1) * days * NS_PER_DAY, tz="UTC")
    return end.isoformat(timespec="seconds").replace("+00:00", "Z")


def year_of(src: Path, year: Path, copies: int) -> tuple[int, str]:
    """The year store ``year`` (built from ``src`` when absent; kept for the next run)."""
    done = year.with_name(year.name + ".json")
    if not done.is_file():
        shutil.rmtree(year, ignore_errors=True)
        records, as_of = build_year(src, year, copies)
        done.write_text(json.dumps({"records": records, "as_of": as_of, "copies": copies}))
    info = json.loads(done.read_text())
    return info["records"], info["as_of"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store of a few months")
    ap.add_argument("--copies", type=int, default=12)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--one-pass", action="store_true", help="also time one pass (needs RAM)")
    ap.add_argument("--year", type=Path, help="keep the year store here (reused when built)")
    ap.add_argument("--build-only", action="store_true", help="build --year, time nothing")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.store.parent) as d:
        d = Path(d)
        year = args.year or d / "year"
        records, as_of = year_of(args.store, year, args.copies)
        print(f"{records:,} records in the store ({args.copies} copies), as of {as_of}")
        if args.build_only:
            return
        base = [AUDIT, "analyze", "--store", str(year), "--as-of", as_of]
        kinds = {"analyze --store (passes)": lambda: [*base, "--out", str(d / "t1")]}
        if args.one_pass:
            one = ["--rows-per-pass", str(records + 1), "--out", str(d / "t2")]
            kinds["analyze --store (1 pass)"] = lambda: [*base, *one]
        results = measure(kinds, args.runs)  # alternated
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            rss = max(r["rss_mb"] for r in rs)
            print(
                f"{name:<26} {secs:7.1f} s ({secs / records * 1e6:5.1f} s per million)  "
                f"peak RSS {rss:6.0f} MB ({rss * 2**20 / records:4.0f} B per delivery)"
            )


if __name__ == "__main__":
    main()
