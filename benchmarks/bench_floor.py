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
- ``duckdb per line``: the same design with the per-record rules a fast path needs to agree with
  the exact one, as far as SQL states them: each line one Arrow string (so that every record
  keeps its line number, which a fallback and the verdicts need), read in 20 MB pieces; the
  record's keys known and not repeated; header names in any case, not repeated; the body and
  the subscription strings; the lines that DuckDB's lenient JSON reader would accept and the
  exact path would not (trailing commas, ``\\u`` escapes) left out. Still a lower bound: no
  header lists, ``body_b64``, inferred subscriptions, ISO rules, fallback or counts.

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


def _keys_table(secrets_path: Path):
    """A DuckDB connection with table ``k``: each secret's pads, validity and label."""
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
    return con


def floor(log: Path, secrets_path: Path, out: Path) -> int:
    """The simplified vectorised pipeline (see the module docstring); returns the valid count."""
    con = _keys_table(secrets_path)

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


_PER_LINE = r"""
with parsed as materialized (
  select line, json_keys(raw) as keys, json_transform(raw, '{"received_at": "JSON",
    "headers": "MAP(VARCHAR, JSON)", "body": "JSON", "subscription_id": "JSON", "url": "JSON",
    "response_status": "JSON", "response_ms": "JSON"}') as j
  from lines
  where not contains(raw, '\u') and not regexp_matches(raw, ',\s*[\]}]')
), fields as materialized (
  select line, keys, j.subscription_id ->> '$' as sub, j.body ->> '$' as body,
    json_type(j.body) as body_type, json_type(j.subscription_id) as sub_type,
    case when json_type(j.received_at) = 'VARCHAR'
         then epoch_ns(try_cast(j.received_at ->> '$' as timestamptz))
         else round((j.received_at::double) * 1e9)::bigint end as received_ns,
    list_transform(map_keys(j.headers), lambda x: lower(x)) as names,
    map_values(j.headers) as vals
  from parsed
), headers as (
  select *,
    vals[list_position(names, 'x-phishfort-signature')] ->> '$' as sig,
    vals[list_position(names, 'x-phishfort-timestamp')] ->> '$' as ts,
    vals[list_position(names, 'x-phishfort-delivery-id')] ->> '$' as delivery_id,
    list_bool_and(list_transform(vals, lambda v: json_type(v) = 'VARCHAR')) as all_strings
  from fields
), matched as (
  select h.*, k.label,
    'sha256=' || sha256(k.opad || unhex(sha256(k.ipad || encode(h.ts || '.' || h.body)))) = h.sig
      as ok,
    json_extract_string(h.body, ['$.id', '$.event', '$.data.incidentId']) as env
  from headers h left join k on k.sub = h.sub
    and (k.vfrom is null or h.received_ns >= epoch_ns(k.vfrom))
    and (k.until is null or h.received_ns < epoch_ns(k.until))
)
select line, received_ns, delivery_id, env[1] as event_id, env[2] as event,
  env[3] as incident_id, sub as subscription_id, ok as hmac_ok, label as matched_secret,
  (received_ns - ts::bigint * 1000000000) / 1e9 as skew_s
from matched
where ok and all_strings and body_type = 'VARCHAR' and sub_type = 'VARCHAR'
  and len(list_distinct(names)) = len(names) and len(list_distinct(keys)) = len(keys)
  and abs(received_ns - ts::bigint * 1000000000) <= 300000000000
order by line
"""


def per_line(log: Path, secrets_path: Path, out: Path) -> int:
    """The per-line vectorised pipeline (see the module docstring); returns the valid count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    con = _keys_table(secrets_path)
    tables, first = [], 1
    with open(log, "rb") as f:
        while data := f.read(20 * 2**20):
            data += f.readline()
            ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10) + 1
            offsets = np.concatenate([[0], ends, [] if data.endswith(b"\n") else [len(data)]])
            n = len(offsets) - 1
            raw = pa.Array.from_buffers(
                pa.string(), n, [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
            )
            raw.validate(full=True)  # UTF-8 (a piece that is not would go to the exact path)
            lines = pa.table({"raw": raw, "line": pa.array(np.arange(first, first + n))})
            lines = pa.Table.from_batches(lines.to_batches(max_chunksize=4096))
            first += n
            tables.append(con.sql(_PER_LINE).to_arrow_table())
    table = pa.concat_tables(tables)
    pq.write_table(table, out, compression="zstd")
    return table.num_rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--floor", nargs=3, type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--per-line", nargs=3, type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor:
        print(floor(*args.floor))
        return
    if args.per_line:
        print(per_line(*args.per_line))
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
            "duckdb per line": [
                sys.executable,
                __file__,
                "--per-line",
                str(log),
                str(secrets),
                str(d / "p.pq"),
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
