"""How fast could ``audit verify`` be here? A vectorised floor, alternated with the hand loop.

Usage::

    python benchmarks/bench_floor.py [--records 200000] [--runs 3]

Times, each as a fresh process and alternated within each run (medians, as ``bench_store.py``):

- ``hand loop``: the loop of ``bench_store.py`` (json + HMAC + json of the body);
- ``audit verify .parquet``: the real command;
- ``start-up only``: a process that imports what ``audit verify`` imports, and stops;
- ``duckdb floor``: one DuckDB statement (``read_json``, HMAC as two ``sha256`` over the
  pre-keyed pads, ``COPY`` to Parquet) with **simplified rules**: header objects whose names are
  in one of three cases, ``body`` only (no ``body_b64``), a logged subscription, no exact
  fallback, no unreadable-line accounting, no per-record details. It is not a verifier; it shows
  what the vectorised design reaches on this machine before any of the rules that make it one.

Besides wall time, the script prints each kind's CPU seconds (user + system, children
included): on a shared 2-core machine the wall ratio follows the CPU ratio once both cores
are busy with other jobs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_store import AUDIT, generate, loop_cmd

_RUN = (
    "import json,resource,subprocess,sys,time;t=time.perf_counter();"
    "subprocess.run(sys.argv[1:],check=True,stdout=subprocess.DEVNULL,"
    "stderr=subprocess.DEVNULL);s=time.perf_counter()-t;"
    "r=resource.getrusage(resource.RUSAGE_CHILDREN);"
    "print(json.dumps({'seconds':s,'cpu':r.ru_utime+r.ru_stime,'rss_mb':r.ru_maxrss/1024}))"
)


def run(cmd: list[str]) -> dict:
    """Wall seconds, CPU seconds (children included) and peak RSS of one fresh process."""
    out = subprocess.run(
        [sys.executable, "-c", _RUN, *cmd], check=True, capture_output=True, text=True
    ).stdout
    return json.loads(out)


def _pads(key: bytes) -> tuple[str, str]:
    key = key.ljust(64, b"\0")  # the bench secrets are shorter than a SHA-256 block
    return bytes(b ^ 0x36 for b in key).hex(), bytes(b ^ 0x5C for b in key).hex()


def floor(log: Path, secrets_path: Path, out: Path) -> int:
    """The simplified vectorised pipeline (see the module docstring); returns the valid count."""
    import duckdb

    con = duckdb.connect()
    con.execute(
        "create table k(sub varchar, ipad blob, opad blob, vfrom timestamptz, "
        "until timestamptz, label varchar)"
    )
    for sub, items in json.loads(secrets_path.read_text()).items():
        starts = [s.get("valid_from") for s in items]
        for i, s in enumerate(items):
            until = starts[i + 1] if i + 1 < len(items) else None
            ipad, opad = _pads(s["secret"].encode())
            con.execute(
                "insert into k values (?, unhex(?), unhex(?), ?::timestamptz, ?::timestamptz, ?)",
                [sub, ipad, opad, starts[i], until, f"{sub}#{i}"],
            )

    def header(name: str) -> str:
        return (
            f"coalesce(headers->>'{name}', headers->>'{name.lower()}', headers->>'{name.upper()}')"
        )

    columns = (
        "{received_at:'JSON', headers:'JSON', subscription_id:'VARCHAR', body:'VARCHAR', "
        "response_status:'INTEGER', response_ms:'DOUBLE'}"
    )
    con.execute(
        f"""
        copy (
        with r as (
          select row_number() over () as line, subscription_id, body,
            case when json_type(received_at) = 'VARCHAR'
                 then try_cast(received_at->>'$' as timestamptz)
                 else to_timestamp(received_at::double) end as received,
            {header("X-PhishFort-Signature")} as sig,
            {header("X-PhishFort-Timestamp")} as ts,
            {header("X-PhishFort-Delivery-Id")} as delivery_id
          from read_json('{log}', format='newline_delimited', ignore_errors=true,
                         columns={columns})
        ), m as (
          select r.*, k.label,
            sha256(k.opad || unhex(sha256(k.ipad || encode(r.ts || '.' || r.body)))) as mac
          from r left join k on k.sub = r.subscription_id
            and (k.vfrom is null or r.received >= k.vfrom)
            and (k.until is null or r.received < k.until)
        )
        select line, received, delivery_id, body->>'id' as event_id, body->>'event' as event,
          body->>'$.data.incidentId' as incident_id, subscription_id,
          'sha256=' || mac = sig and abs(epoch(received) - ts::bigint) <= 300 as ok, label
        from m) to '{out}' (format parquet, compression zstd)
        """
    )
    return con.execute(f"select count(*) filter (ok) from read_parquet('{out}')").fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--floor", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor:
        print(floor(*args.floor))
        return
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        log = d / "captures.jsonl"
        secrets = generate(log, args.records)
        secrets.chmod(0o600)
        kinds = {
            "hand loop": loop_cmd([log], secrets),
            "audit verify .parquet": [
                AUDIT,
                "verify",
                str(log),
                "--secrets",
                str(secrets),
                "--out",
                str(d / "v.parquet"),
            ],
            "start-up only": [
                sys.executable,
                "-c",
                "import audit.cli.main, audit.ingest.verdicts, pyarrow.parquet",
            ],
            "duckdb floor": [
                sys.executable,
                __file__,
                "--floor",
                str(log),
                str(secrets),
                str(d / "f.pq"),
            ],
        }
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(args.runs):  # alternate kinds so that drift hits them alike
            for name, cmd in kinds.items():
                results[name].append(run(cmd))
        ref = statistics.median(r["seconds"] for r in results["hand loop"])
        ref_cpu = statistics.median(r["cpu"] for r in results["hand loop"])
        print(f"{args.records} records, median of {args.runs} alternated runs, {time.ctime()}")
        for name, rs in results.items():
            secs = statistics.median(r["seconds"] for r in rs)
            cpu = statistics.median(r["cpu"] for r in rs)
            print(
                f"{name:<22} {secs:6.2f} s ({ref / secs:4.2f}x speed)  "
                f"CPU {cpu:5.2f} s ({cpu / ref_cpu:4.2f}x the loop's)  "
                f"peak RSS {max(r['rss_mb'] for r in rs):5.0f} MB"
            )


if __name__ == "__main__":
    main()
