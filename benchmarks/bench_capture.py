"""What durable capture costs: appends per second with and without fsync, and the reference
receiver's requests per second over a real socket (sequential, one client).

Usage::

    python benchmarks/bench_capture.py [--records 2000] [--requests 500] [--large]

Baseline: the same appends without fsync, measured in the same run (machines here are noisy).
``--large`` (Linux) also measures the memory one capture of a 10 MiB body takes at its peak
(the resident high-water mark, reset before each), for bodies of ASCII, of control characters
(JSON escapes each in six bytes) and of bytes that are not UTF-8 (base64), against a
hand-written line (``json.dumps``, ``encode``, the newline, one write): medians of 3, each in a
fresh process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from audit.ingest.signatures import sign
from audit.receiver import CaptureRecord, CaptureWriter, receiver_app
from audit.receiver.reference import bind, make_server

SECRET = "whsec_bench_capture"


def _body(i: int) -> bytes:
    return json.dumps({"id": f"evt_{i}", "event": "webhook.test", "pad": "x" * 900}).encode()


def appends(folder: Path, n: int, fsync: bool) -> float:
    writer = CaptureWriter(folder, fsync=fsync)
    records = [
        CaptureRecord(1790812800.0 + i, [("X-A", "1")], _body(i), 204, 1.0) for i in range(n)
    ]
    started = time.perf_counter()
    for r in records:
        writer.append(r)
    return n / (time.perf_counter() - started)


def receiver_rps(folder: Path, n: int) -> tuple[float, float]:
    secrets = folder / "secrets.json"
    secrets.write_text(json.dumps({"wh_b": [{"secret": SECRET}]}))
    secrets.chmod(0o600)  # a secrets file is the owner's alone
    sock = bind("127.0.0.1", 0)
    server = make_server(receiver_app(secrets, folder / "captures"), sock, log_level="error")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    times = []
    with httpx.Client() as client:
        started = time.perf_counter()
        for i in range(n):
            body, ts = _body(i), str(int(time.time()))
            headers = {"X-PhishFort-Signature": sign(SECRET, ts, body), "X-PhishFort-Timestamp": ts}
            t0 = time.perf_counter()
            assert client.post(url, content=body, headers=headers).status_code == 204
            times.append((time.perf_counter() - t0) * 1000)
        total = time.perf_counter() - started
    server.should_exit = True
    thread.join(10)
    return n / total, statistics.median(times)


_LARGE = """
import base64, json, os, sys
from audit.receiver import CaptureRecord, CaptureWriter
kind, how, folder = sys.argv[1:4]
n = 10 * 2**20
body = {"ascii": b"a" * n, "control": b"\\x01" * n, "binary": b"\\xff" * n}[kind]
record = CaptureRecord(1790812800.0, [("X-A", "1")], body, 204, 1.0)
def status(key):
    with open("/proc/self/status") as f:
        return int(next(line for line in f if line.startswith(key)).split()[1])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets the high-water mark to the current resident set
base = status("VmRSS")
if how == "audit":
    CaptureWriter(folder, fsync=False).append(record)
else:
    try:
        rec = {"received_at": record.received_at, "headers": record.headers,
               "body": record.body.decode("utf-8")}
    except UnicodeDecodeError:
        rec = {"received_at": record.received_at, "headers": record.headers,
               "body_b64": base64.b64encode(record.body).decode("ascii")}
    line = (json.dumps(rec, ensure_ascii=False) + "\\n").encode("utf-8")
    with open(os.path.join(folder, "hand.jsonl"), "ab") as f:
        f.write(line)
print((status("VmHWM") - base) / 1024)
"""


def large_capture(folder: Path, kind: str, how: str, runs: int = 3) -> float:
    """MiB the capture of one 10 MiB body of ``kind`` adds at its peak (median of ``runs``)."""
    got = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", _LARGE, kind, how, str(folder)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        got.append(float(out))
    return statistics.median(got)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--large", action="store_true", help="also the memory of a 10 MiB body")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        plain = appends(root / "plain", args.records, fsync=False)
        durable = appends(root / "durable", args.records, fsync=True)
        rps, median_ms = receiver_rps(root, args.requests)
    print(f"appends/s without fsync (baseline): {plain:,.0f}")
    print(f"appends/s with fsync:               {durable:,.0f}  ({durable / plain:.2f}x)")
    print(f"reference receiver, sequential:     {rps:,.0f} requests/s, median {median_ms:.2f} ms")
    if args.large:
        with tempfile.TemporaryDirectory() as tmp:
            for kind in ("ascii", "control", "binary"):
                hand = large_capture(Path(tmp), kind, "hand")
                ours = large_capture(Path(tmp), kind, "audit")
                print(
                    f"one 10 MiB {kind:7s} body: capture {ours:5.1f} MiB at its peak, "
                    f"hand-written line {hand:5.1f} MiB ({ours / hand:.2f}x)"
                )


if __name__ == "__main__":
    main()
