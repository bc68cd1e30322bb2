"""Whole-process throughput and peak memory of verify, ingest and analyze, against a hand loop.

Usage::

    python benchmarks/bench_store.py verify [--records 200000] [--runs 3]
    python benchmarks/bench_store.py month [--incidents 6000] [--runs 3] [--report]
    python benchmarks/bench_store.py small [--incidents 350] [--runs 3]

``verify`` writes captures shaped like real ones (ISO and Unix ``received_at``, header names in
any case, ~3 % header lists, ~1 % ``body_b64``, a secret rotation, ~1 % invalid) and times
``audit verify --out x.parquet`` / ``x.csv`` and ``audit ingest`` against a hand-written loop
that handles the same shapes. ``month`` simulates a month (``audit simulate --days 31``) and
times ``audit analyze`` cold from the raw captures and warm from a store, against the same loop
over the same captures; ``small`` simulates a small client's month (about 6,000 deliveries in
31 daily files) and prints ``audit ingest`` into a new store against ``audit verify`` of the same
files (target: at most 2x); with ``--report``, also the whole ``audit report --period 2026-10``
(analyses, controls, run folder and the rendered notebook) cold and warm.

Every measurement is a fresh process (``audit ...`` or the loop); kinds are alternated within
each run so that drift on a shared machine hits them alike; the script prints medians and the
peak RSS of the largest process (``RUSAGE_CHILDREN``: workers included).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import hmac
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

SECRETS = {"wh_main": ["whsec_old_main", "whsec_new_main"], "wh_siem": ["whsec_siem"]}
START = 1_790_812_800  # 2026-10-01T00:00:00Z
AUDIT = str(Path(sys.executable).with_name("audit"))


def generate(path: Path, n: int, seed: int = 1) -> Path:
    """``n`` capture records shaped like real ones, and their secrets file (with a rotation)."""
    rng = random.Random(seed)
    rotation = START + n * 6  # the middle of the file (records are ~12 s apart)
    iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rotation))
    secrets = {
        "wh_main": [
            {"secret": SECRETS["wh_main"][0]},
            {"secret": SECRETS["wh_main"][1], "valid_from": iso},
        ],
        "wh_siem": [{"secret": SECRETS["wh_siem"][0]}],
    }
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            sub = "wh_main" if i % 3 else "wh_siem"
            ts = START + i * 12
            key = SECRETS[sub][1 if sub == "wh_main" and ts >= rotation else 0]
            env = {
                "id": f"evt_{rng.getrandbits(64):016x}",
                "event": "incident.status_changed",
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts - 2)),
                "data": {
                    "incidentId": f"inc_{i // 6:07d}",
                    "clientId": "cl_bench",
                    "url": f"https://login-{i % 977}.evil.example/verify.php?id={i}",
                    "domain": f"login-{i % 977}.evil.example",
                    "status": "takedown_in_progress",
                    "incidentClass": "phishing",
                    "source": "PHISHFORT_DETECTED",
                    "subject": "Sécurité du compte",
                },
            }
            body = json.dumps(env, separators=(",", ":"), ensure_ascii=False).encode()
            if rng.random() < 0.01:  # invalid: signed with a wrong key
                key = "whsec_wrong"
            mac = hmac.new(key.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
            names = [
                "Content-Type",
                "X-PhishFort-Signature",
                "X-PhishFort-Event",
                "X-PhishFort-Delivery-Id",
                "X-PhishFort-Timestamp",
            ]
            case = rng.choice([str, str.lower, str.upper])
            values = ["application/json", "sha256=" + mac, env["event"], f"dlv_{i}", str(ts)]
            headers: object = {case(k): v for k, v in zip(names, values, strict=True)}
            if rng.random() < 0.03:
                headers = [[k, v] for k, v in headers.items()]
            received = ts + rng.random() * 2
            rec: dict = {
                "received_at": received
                if i % 2
                else datetime.fromtimestamp(received).astimezone().isoformat(),
                "headers": headers,
                "subscription_id": sub,
                "response_status": 204,
                "response_ms": round(20 + rng.random() * 50, 3),
            }
            if rng.random() < 0.01:
                rec["body_b64"] = base64.b64encode(body).decode()
            else:
                rec["body"] = body.decode()
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    secrets_path = path.with_name("secrets.json")
    secrets_path.write_text(json.dumps(secrets))
    secrets_path.chmod(0o600)  # a secrets file is the owner's alone
    return secrets_path


def hand_loop(paths: list[Path], secrets_path: Path) -> int:
    """What a careful script does for the same shapes: parse, pick the secret current at
    receipt (or try every subscription's), HMAC, compare, check the clock, parse the body."""
    raw = json.loads(secrets_path.read_text())
    secrets = {}
    for sub, items in raw.items():
        secrets[sub] = [
            (
                datetime.fromisoformat(s["valid_from"]).timestamp() if "valid_from" in s else None,
                s["secret"].encode(),
            )
            for s in items
        ]

    def current(sub, t):
        key = None
        for start, k in secrets.get(sub, []):
            if start is None or t >= start:
                key = k
        return key

    check = _hand_checker(secrets, current)
    ok = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                    ok += check(json.loads(line))  # a broken record is simply not valid
    return ok


def _hand_checker(secrets: dict, current):
    """The per-record check of :func:`hand_loop`."""

    def check(rec: dict) -> bool:
        items = rec["headers"].items() if isinstance(rec["headers"], dict) else rec["headers"]
        h = {k.lower(): v for k, v in items}
        body = rec["body"].encode("utf-8") if "body" in rec else base64.b64decode(rec["body_b64"])
        t = rec["received_at"]
        t = t if isinstance(t, int | float) else datetime.fromisoformat(t).timestamp()
        ts = h.get("x-phishfort-timestamp", "")
        subs = [rec["subscription_id"]] if rec.get("subscription_id") else list(secrets)
        good = False
        for sub in subs:
            key = current(sub, t)
            if key is None:
                continue
            mac = hmac.new(key, ts.encode() + b"." + body, hashlib.sha256).hexdigest()
            if hmac.compare_digest("sha256=" + mac, h.get("x-phishfort-signature", "")):
                good = True
                break
        fresh = ts.isdigit() and abs(t - int(ts)) <= 300
        try:
            env = json.loads(body)
        except ValueError:
            env = {}
        return good and fresh and bool(env.get("id"))

    return check


def run(cmd: list[str]) -> dict:
    """Run a command in a fresh wrapper process: wall seconds, CPU seconds (user + system,
    workers included) and the largest process's RSS."""
    code = (
        "import json,resource,subprocess,sys,time;t=time.perf_counter();"
        "c=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,"
        "stderr=subprocess.DEVNULL).returncode;s=time.perf_counter()-t;"
        "u=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "print(json.dumps({'seconds':s,'code':c,'rss_mb':u.ru_maxrss/1024,"
        "'cpu':u.ru_utime+u.ru_stime}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *cmd], check=True, capture_output=True, text=True
    ).stdout
    got = json.loads(out)
    # `audit report` exits 1 when a finding fails (the simulated month plants some).
    if got["code"] not in ((0, 1) if cmd[1:2] == ["report"] else (0,)):
        raise SystemExit(f"{' '.join(cmd[:2])} exited {got['code']}")
    return got


def loop_cmd(paths: list[Path], secrets: Path) -> list[str]:
    return [sys.executable, __file__, "loop", "--secrets", str(secrets), *map(str, paths)]


def measure(kinds: dict[str, callable], runs: int) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(runs):  # alternate kinds so that drift hits them alike
        for name, make in kinds.items():
            results[name].append(run(make()))
    return results


def report(results: dict[str, list[dict]], base: str, unit: int, what: str) -> None:
    """Medians against ``base``: wall time, and CPU time (on a shared machine the wall ratio
    swings with other jobs; the CPU ratio says what the work costs)."""
    ref = statistics.median(r["seconds"] for r in results[base])
    ref_cpu = statistics.median(r["cpu"] for r in results[base])
    for name, rs in results.items():
        secs = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu"] for r in rs)
        rss = max(r["rss_mb"] for r in rs)
        print(
            f"{name:<22} {secs:7.2f} s  {unit / secs:>9,.0f} {what}/s  "
            f"{secs / ref:5.2f}x loop time ({ref / secs:4.2f}x speed)  "
            f"CPU {cpu / ref_cpu:4.2f}x  peak RSS {rss:6.0f} MB"
        )


def bench_verify(args) -> None:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        log = d / "captures.jsonl"
        secrets = generate(log, args.records)
        store = d / "store"

        def fresh_ingest():
            shutil.rmtree(store, ignore_errors=True)
            return [AUDIT, "ingest", str(log), "--secrets", str(secrets), "--store", str(store)]

        kinds = {
            "hand loop": lambda: loop_cmd([log], secrets),
            "audit verify .parquet": lambda: [
                AUDIT,
                "verify",
                str(log),
                "--secrets",
                str(secrets),
                "--out",
                str(d / "v.parquet"),
            ],
            "audit verify .csv": lambda: [
                AUDIT,
                "verify",
                str(log),
                "--secrets",
                str(secrets),
                "--out",
                str(d / "v.csv"),
            ],
            "audit ingest (cold)": fresh_ingest,
        }
        results = measure(kinds, args.runs)
        size = log.stat().st_size / 1e6
        print(
            f"{args.records} records, {size:.0f} MB, median of {args.runs} alternated runs, "
            f"{os.cpu_count()} CPUs"
        )
        report(results, "hand loop", args.records, "rec")
        store_mb = sum(p.stat().st_size for p in store.rglob("*.parquet")) / 1e6
        print(f"store: {store_mb:.1f} MB, {store_mb * 1e6 / args.records:.0f} bytes per delivery")


def bench_month(args) -> None:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        subprocess.run(
            [
                AUDIT,
                "simulate",
                "--out",
                str(d / "sim"),
                "--days",
                str(args.days),
                "--incidents",
                str(args.incidents),
            ],
            check=True,
            capture_output=True,
        )
        caps, secrets = d / "sim" / "captures", d / "sim" / "secrets.json"
        files = sorted(caps.glob("*.jsonl"))
        n = sum(f.read_bytes().count(b"\n") for f in files)
        store = d / "store"
        subprocess.run(
            [AUDIT, "ingest", str(caps), "--secrets", str(secrets), "--store", str(store)],
            check=True,
            capture_output=True,
        )
        as_of = ["--as-of", "2026-11-01T00:00:00Z"]
        kinds = {
            "hand loop": lambda: loop_cmd(files, secrets),
            "analyze cold (raw)": lambda: [
                AUDIT,
                "analyze",
                str(caps),
                "--secrets",
                str(secrets),
                "--out",
                str(d / "t1"),
                *as_of,
            ],
            "analyze warm (store)": lambda: [
                AUDIT,
                "analyze",
                "--store",
                str(store),
                "--out",
                str(d / "t2"),
                *as_of,
            ],
        }
        if args.report:
            runs = iter(range(10**6))
            period = ["--period", "2026-10", "--quiet"]

            def report_cmd(*source: str) -> list[str]:
                out = str(d / f"report{next(runs)}")  # a fresh folder: no trend or index grows
                return [AUDIT, "report", *source, "--secrets", str(secrets), *period, "--out", out]

            kinds["report cold (raw)"] = lambda: report_cmd(str(caps))
            kinds["report warm (store)"] = lambda: report_cmd("--store", str(store))
        results = measure(kinds, args.runs)
        size = sum(f.stat().st_size for f in files) / 1e6
        print(
            f"{n} deliveries ({args.incidents} incidents, {args.days} days), {size:.0f} MB "
            f"of captures, median of {args.runs} alternated runs"
        )
        report(results, "hand loop", n, "deliveries")
        store_mb = sum(p.stat().st_size for p in store.rglob("*.parquet")) / 1e6
        print(f"store: {store_mb:.1f} MB, {store_mb * 1e6 / n:.0f} bytes per delivery")


def bench_small(args) -> None:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sim = d / "sim"
        simulate = [AUDIT, "simulate", "--out", str(sim), "--days", str(args.days)]
        subprocess.run(
            [*simulate, "--incidents", str(args.incidents)],
            check=True,
            capture_output=True,
        )
        caps, secrets = sim / "captures", sim / "secrets.json"
        files = sorted(caps.glob("*.jsonl"))
        n = sum(f.read_bytes().count(b"\n") for f in files)
        store = d / "store"

        def fresh_ingest() -> list[str]:
            shutil.rmtree(store, ignore_errors=True)
            return [AUDIT, "ingest", str(caps), "--secrets", str(secrets), "--store", str(store)]

        kinds = {
            "audit verify": lambda: [AUDIT, "verify", str(caps), "--secrets", str(secrets)],
            "audit ingest (new store)": fresh_ingest,
        }
        results = measure(kinds, args.runs)
        size = sum(f.stat().st_size for f in files) / 1e6
        print(
            f"{n} deliveries in {len(files)} files, {size:.1f} MB, median of {args.runs} "
            f"alternated runs, AUDIT_JOBS={os.environ.get('AUDIT_JOBS', '(unset)')}"
        )
        med = {k: statistics.median(r["seconds"] for r in rs) for k, rs in results.items()}
        for name, secs in med.items():
            print(f"{name:<26} {secs:6.2f} s")
        ratio = med["audit ingest (new store)"] / med["audit verify"]
        print(f"ingest / verify: {ratio:.2f}x (target: at most 2x)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--records", type=int, default=200_000)
    v.add_argument("--runs", type=int, default=3)
    m = sub.add_parser("month")
    m.add_argument("--incidents", type=int, default=6000)
    m.add_argument("--days", type=int, default=31)
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--report", action="store_true", help="also time the whole audit report")
    sm = sub.add_parser("small")
    sm.add_argument("--incidents", type=int, default=350)
    sm.add_argument("--days", type=int, default=31)
    sm.add_argument("--runs", type=int, default=3)
    lp = sub.add_parser("loop")
    lp.add_argument("--secrets", type=Path, required=True)
    lp.add_argument("paths", nargs="+", type=Path)
    args = ap.parse_args()
    if args.cmd == "loop":
        print(hand_loop(args.paths, args.secrets))
    elif args.cmd == "verify":
        bench_verify(args)
    elif args.cmd == "small":
        bench_small(args)
    else:
        bench_month(args)


if __name__ == "__main__":
    main()
