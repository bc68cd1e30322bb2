"""Throughput of load + verify + envelope parse against a naive per-record loop.

Usage::

    python benchmarks/bench_verify.py [--records 200000] [--runs 3] [--analysis]

Each measurement runs in a fresh child process so that its peak memory (max RSS) is its own.
The script prints medians over the runs, records per second, the ratio ours/naive and peak RSS.
The baseline is measured in the same run on the same file: machines here are noisy.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

SECRETS = {"wh_main": "whsec_bench_main_secret", "wh_siem": "whsec_bench_siem_secret"}
START = 1_790_812_800  # 2026-10-01T00:00:00Z


def generate(path: Path, n: int, seed: int = 1) -> None:
    """Write ``n`` signed capture records (about 700 bytes each) to ``path``."""
    rng = random.Random(seed)
    subs = list(SECRETS)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            sub = subs[i % 2]
            ts = START + i * 13
            inc = f"inc_{i // 6:07d}"
            env = {
                "id": f"evt_{uuid.UUID(int=rng.getrandbits(128), version=4)}",
                "event": "incident.status_changed",
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts - 30)),
                "data": {
                    "incidentId": inc,
                    "clientId": "cl_bench",
                    "url": f"https://login-{i % 977}.evil.example/secure/verify.php?id={i}",
                    "domain": f"login-{i % 977}.evil.example",
                    "status": "takedown_in_progress",
                    "incidentClass": "phishing",
                    "source": "PHISHFORT_DETECTED",
                    "timestamp": "2026-10-01T00:00:00Z",
                    "subject": "Sécurité du compte",
                },
            }
            body = json.dumps(env, separators=(",", ":"), ensure_ascii=False)
            mac = hmac.new(SECRETS[sub].encode(), f"{ts}.".encode() + body.encode(), "sha256")
            rec = {
                "received_at": ts + rng.random(),
                "headers": {
                    "Content-Type": "application/json",
                    "X-PhishFort-Signature": "sha256=" + mac.hexdigest(),
                    "X-PhishFort-Event": env["event"],
                    "X-PhishFort-Delivery-Id": f"dlv_{i}",
                    "X-PhishFort-Timestamp": str(ts),
                },
                "body": body,
                "subscription_id": sub,
                "response_status": 204,
                "response_ms": 20 + rng.random() * 50,
            }
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")


def naive(log: Path, secrets_path: Path) -> int:
    """The per-record loop a careful script would write: parse, HMAC, compare, parse body."""
    secrets = {k: v[0]["secret"].encode() for k, v in json.loads(secrets_path.read_text()).items()}
    ok = 0
    with open(log, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            h = {k.lower(): v for k, v in rec["headers"].items()}
            body = rec["body"].encode("utf-8")
            ts = h["x-phishfort-timestamp"]
            mac = hmac.new(
                secrets[rec["subscription_id"]], ts.encode() + b"." + body, hashlib.sha256
            )
            good = hmac.compare_digest("sha256=" + mac.hexdigest(), h["x-phishfort-signature"])
            fresh = abs(rec["received_at"] - int(ts)) <= 300
            env = json.loads(body)
            ok += good and fresh and bool(env["id"])
    return ok


def ours(log: Path, secrets_path: Path, analysis: bool = False) -> int:
    from audit.ingest.verification import audit_signatures

    result = audit_signatures([log], secrets_path)
    df = result.deliveries
    if analysis:
        import warnings

        from audit.analysis.analyze import run_analyses

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run_analyses(df, as_of=df["received_at"].max())
    return int((df["verdict"] == "valid").sum())


def worker(kind: str, log: Path, secrets_path: Path) -> None:
    t0 = time.perf_counter()
    if kind == "naive":
        n = naive(log, secrets_path)
    else:
        n = ours(log, secrets_path, analysis=kind == "ours+analysis")
    seconds = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "valid": n, "rss_mb": rss_mb}))


def measure(kind: str, log: Path, secrets_path: Path) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--worker",
            kind,
            "--log",
            str(log),
            "--secrets",
            str(secrets_path),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--analysis", action="store_true", help="also time every analysis table")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--secrets", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.log, args.secrets)
        return
    kinds = ["naive", "ours"] + (["ours+analysis"] if args.analysis else [])
    with tempfile.TemporaryDirectory() as d:
        log, secrets_path = Path(d) / "bench.jsonl", Path(d) / "secrets.json"
        generate(log, args.records)
        secrets_path.write_text(json.dumps({k: [{"secret": v}] for k, v in SECRETS.items()}))
        secrets_path.chmod(0o600)  # a secrets file is the owner's alone
        size_mb = log.stat().st_size / 1e6
        results: dict[str, list[dict]] = {k: [] for k in kinds}
        for _ in range(args.runs):  # interleave kinds so drift hits both alike
            for k in kinds:
                results[k].append(measure(k, log, secrets_path))
    print(f"{args.records} records, {size_mb:.0f} MB, median of {args.runs} runs")
    base = statistics.median(r["seconds"] for r in results["naive"])
    for k in kinds:
        secs = statistics.median(r["seconds"] for r in results[k])
        rss = statistics.median(r["rss_mb"] for r in results[k])
        valid = {r["valid"] for r in results[k]}
        print(
            f"{k:<14} {secs:7.2f} s  {args.records / secs:>9,.0f} rec/s  "
            f"x{base / secs:4.2f} vs naive  peak RSS {rss:6.0f} MB  valid={valid}"
        )


if __name__ == "__main__":
    main()
