"""A year from the store: peak memory and time of ``audit analyze --store`` over everything,
beside a hand-written DuckDB floor.

Usage::

    python benchmarks/bench_year.py --store STORE [--copies 12] [--year DIR] [--runs 1]
                                    [--spark] [--build-only]

The simulator cannot write a year of a large client here, so the year is built from a store of
a month or a few: ``--copies`` copies of its rows, each shifted by the store's span in whole
days, with event, delivery and incident ids, record hashes, files and sources made distinct
(each copy a new set of files in the manifest) and its rows written to the ``month=``
partitions of their shifted receipt times, each new part listed with its sha256 and rows (the
store checks them on read). The bodies are copied as they are: no analysis reads them.
``--year DIR`` keeps the year there (with ``DIR.json`` saying what it holds) and reuses it on
the next run; ``--build-only`` builds it and times nothing.

Then, alternated, each a fresh process: ``audit analyze --store`` over everything (DuckDB; with
``--spark`` also ``--engine spark``), and the **floor**: one plain DuckDB script written by hand
over the same parts doing the heavy part of the analysis with simplified rules (attempts numbered
by position in each event, the daily failure rate and p95 answer time per subscription, the
incident fold by event time over each event's first receipt), its results fetched and dropped.
The script prints medians, the peak RSS of each, and each kind's time against the floor.
``bench_takedown.py`` times a question over the same year.
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


FLOOR_SQL = """
CREATE TEMP TABLE d AS SELECT subscription_id, event_id, received_at, response_status,
    response_ms, verdict, incident_id, event_timestamp, data_status
    FROM read_parquet({parts}) WHERE received_at <= TIMESTAMPTZ '{as_of}';
SELECT count(*), max(n) FROM (SELECT row_number() OVER (PARTITION BY subscription_id, event_id
    ORDER BY received_at) AS n FROM d WHERE verdict = 'valid' AND event_id IS NOT NULL);
SELECT subscription_id, date_trunc('day', received_at) AS day,
    avg(CASE WHEN response_status BETWEEN 200 AND 299 AND coalesce(response_ms <= 5000, true)
        THEN 0 ELSE 1 END) AS failure_rate,
    quantile_cont(response_ms, 0.95) AS p95_ms
    FROM d WHERE verdict = 'valid' GROUP BY ALL;
SELECT incident_id, arg_max(data_status, event_timestamp), min(event_timestamp)
    FROM (SELECT * FROM d WHERE verdict = 'valid' AND event_id IS NOT NULL
          QUALIFY row_number() OVER (PARTITION BY event_id ORDER BY received_at) = 1)
    WHERE incident_id IS NOT NULL GROUP BY incident_id;
"""


def floor(year: Path, as_of: str) -> None:
    """The hand-written floor (see the module): every statement run, its rows fetched."""
    import duckdb

    manifest = json.loads((year / "manifest.json").read_text())
    parts = [str(year / "deliveries" / p["name"]) for f in manifest["files"] for p in f["parts"]]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    for statement in FLOOR_SQL.format(parts=parts, as_of=as_of).split(";"):
        if statement.strip():
            con.execute(statement).fetchall()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store of a few months")
    ap.add_argument("--copies", type=int, default=12)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--spark", action="store_true", help="also time --engine spark")
    ap.add_argument("--year", type=Path, help="keep the year store here (reused when built)")
    ap.add_argument("--build-only", action="store_true", help="build --year, time nothing")
    ap.add_argument("--floor", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor:
        floor(Path(args.floor[0]), args.floor[1])
        return
    with tempfile.TemporaryDirectory(dir=args.store.parent) as d:
        d = Path(d)
        year = args.year or d / "year"
        records, as_of = year_of(args.store, year, args.copies)
        print(f"{records:,} records in the store ({args.copies} copies), as of {as_of}")
        if args.build_only:
            return
        base = [AUDIT, "analyze", "--store", str(year), "--as-of", as_of]
        kinds = {
            "analyze --store": lambda: [*base, "--out", str(d / "t1")],
            "hand DuckDB floor": lambda: [
                sys.executable,
                __file__,
                "--store",
                str(args.store),
                "--floor",
                str(year),
                as_of,
            ],
        }
        if args.spark:
            kinds["analyze --engine spark"] = lambda: [
                *base,
                "--engine",
                "spark",
                "--out",
                str(d / "t2"),
            ]
        results = measure(kinds, args.runs)  # alternated
        ref = statistics.median(r["seconds"] for r in results["hand DuckDB floor"])
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            rss = max(r["rss_mb"] for r in rs)
            print(
                f"{name:<24} {secs:7.1f} s ({secs / records * 1e6:5.1f} s per million, "
                f"{secs / ref:4.1f}x the floor)  peak RSS {rss:6.0f} MB "
                f"({rss * 2**20 / records:4.0f} B per delivery)"
            )


if __name__ == "__main__":
    main()
