"""A year from the store: peak memory and time of ``audit analyze --store`` over everything.

Usage::

    python benchmarks/bench_year.py --store STORE [--copies 3] [--runs 1] [--one-pass]

The simulator cannot write a year of a large client here (4 months of 1M deliveries a month
take it 15 GB), so the year is built from a store of a few months: ``--copies`` copies of its
rows, each shifted by the store's span in whole days, with event, delivery and incident ids,
files and sources made distinct (each copy a new set of files in the manifest). The bodies are
copied as they are: no analysis reads them. Then ``audit analyze --store`` runs over
everything, in passes (the default ``--rows-per-pass``) and, with ``--one-pass``, in one pass
(``--rows-per-pass`` above the row count), alternated, each a fresh process; the script prints
medians and the peak RSS of each.
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

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import AUDIT, measure

NS_PER_DAY = 86_400 * 10**9
#: The store's data fields that hold times, as text; each copy shifts them too.
TEXT_TIMES = ("data_timestamp", "data_last_history_update", "data_burn_started")
TEXT_TIMES += ("data_takedown_timestamp",)


def build_year(src: Path, dst: Path, copies: int) -> tuple[int, str]:
    """``dst``: the store ``src`` and ``copies - 1`` shifted copies; (records, as_of ISO)."""
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    con = duckdb.connect()
    parts = [src / "deliveries" / p for f in manifest["files"] for p in f["parts"]]
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
            for p in f["parts"]:
                q = p.replace(".parquet", f"-copy{s}.parquet")
                schema = pq.read_schema(src / "deliveries" / p)
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
                    f"incident_id || '-copy{s}' AS incident_id, '{sha}' AS file_sha256, {text}) "
                    f"FROM read_parquet('{src / 'deliveries' / p}')"
                )
                t = con.sql(sql).to_arrow_table()
                cols = [
                    pc.cast(t.column(n), pa.int64()).cast(schema.field(n).type)
                    if n in ("received_at", "event_timestamp")
                    else t.column(n).cast(schema.field(n).type)
                    for n in schema.names
                ]
                out = dst / "deliveries" / q
                out.parent.mkdir(parents=True, exist_ok=True)
                pq.write_table(pa.Table.from_arrays(cols, schema=schema), out, compression="zstd")
                g["parts"].append(q)
            added.append(g)
    manifest["files"] += added
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=1))
    records = sum(f["records"] for f in manifest["files"])
    end = con.execute(f"SELECT make_timestamp({hi // 1000} + {(copies - 1) * days} * 86400000000)")
    as_of = end.fetchall()[0][0].isoformat(timespec="seconds") + "Z"
    return records, as_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True, help="a store of a few months")
    ap.add_argument("--copies", type=int, default=3)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--one-pass", action="store_true", help="also time one pass (needs RAM)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.store.parent) as d:
        d = Path(d)
        records, as_of = build_year(args.store, d / "year", args.copies)
        base = [AUDIT, "analyze", "--store", str(d / "year"), "--as-of", as_of]
        kinds = {"analyze --store (passes)": lambda: [*base, "--out", str(d / "t1")]}
        if args.one_pass:
            one = ["--rows-per-pass", str(records + 1), "--out", str(d / "t2")]
            kinds["analyze --store (1 pass)"] = lambda: [*base, *one]
        results = measure(kinds, args.runs)  # alternated
        print(f"{records:,} records in the store ({args.copies} copies), as of {as_of}")
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            rss = max(r["rss_mb"] for r in rs)
            print(
                f"{name:<26} {secs:7.1f} s ({secs / records * 1e6:5.1f} s per million)  "
                f"peak RSS {rss:6.0f} MB ({rss * 2**20 / records:4.0f} B per delivery)"
            )


if __name__ == "__main__":
    main()
