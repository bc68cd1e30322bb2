"""``record_sha256``: the bytes hashed are written by hand here from the definition in
``audit/ingest/record_id.py``'s docstring, and the Arrow-built hashes must equal them."""

from __future__ import annotations

import hashlib
import random

import pyarrow as pa

from audit.ingest.record_id import FIELDS, record_hashes, table_hashes


def _by_hand(row: dict) -> str:
    if row["verdict"] == "unreadable":
        parts = [row["file_sha256"], row["line"], row["detail"]]
        key = b"unreadable"
    else:
        us = row["received_us"]
        parts = [
            us,
            row["url"],
            row["response_status"],
            row["response_ms"],
            row["subscription_id"] if row["subscription_logged"] else None,
            row["signature"],
            row["timestamp_header"],
            row["event_header"],
            row["delivery_id"],
            row["body"],
        ]
        key = b"audit record v1\n"
    for value in parts:
        if value is None:
            key += b"-"
            continue
        if isinstance(value, bytes):
            raw = value
        elif isinstance(value, float):
            raw = repr(value).encode()
        else:
            raw = str(value).encode("utf-8")
        key += b"+" + str(len(raw)).encode() + b":" + raw
    return hashlib.sha256(key).hexdigest()


def _rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    texts = [None, "", "a", "é漢字", "x" * 300, "t=1,v1=ab", "🙂 bidi \u202e"]
    rows = []
    for i in range(n):
        rows.append(
            {
                "received_us": rng.choice([None, 1_790_812_800_123_456 + i, 0, -5]),
                "url": rng.choice(texts),
                "response_status": rng.choice([None, 200, 500, 0]),
                "response_ms": rng.choice([None, 100.0, 12.5, 1e20, 0.1, 1e-7, 3.0]),
                "subscription_id": rng.choice([None, "wh_main", "wh_é"]),
                "subscription_logged": rng.choice([None, True, False]),
                "signature": rng.choice(texts),
                "timestamp_header": rng.choice([None, "1790812800", "x"]),
                "event_header": rng.choice(texts),
                "delivery_id": rng.choice(texts),
                "body": rng.choice([None, b"", b"{}", bytes(range(256)), "é".encode()]),
                "verdict": rng.choice(["valid", "bad_signature", "unreadable", None]),
                "file_sha256": rng.choice(["ab" * 32, "cd" * 32]),
                "line": rng.randrange(1, 10**6),
                "detail": rng.choice([None, "not JSON", "line over 64 MiB"]),
            }
        )
    return rows


def _table(rows: list[dict]) -> pa.Table:
    def col(name: str, typ: pa.DataType) -> pa.Array:
        return pa.array([r[name] for r in rows], typ)

    return pa.table(
        {
            "received_at": col("received_us", pa.int64()).cast(pa.timestamp("us", "UTC")),
            "url": col("url", pa.string()),
            "response_status": col("response_status", pa.int32()),
            "response_ms": col("response_ms", pa.float64()),
            "subscription_id": col("subscription_id", pa.string()),
            "subscription_logged": col("subscription_logged", pa.bool_()),
            "signature": col("signature", pa.string()),
            "timestamp_header": col("timestamp_header", pa.string()),
            "event_header": col("event_header", pa.string()),
            "delivery_id": col("delivery_id", pa.string()),
            "body": col("body", pa.binary()),
            "verdict": col("verdict", pa.string()),
            "file_sha256": col("file_sha256", pa.string()),
            "line": col("line", pa.int64()),
            "detail": col("detail", pa.string()),
        }
    )


def test_table_hashes_equal_the_bytes_written_by_hand() -> None:
    rows = _rows(400, seed=3)
    assert table_hashes(_table(rows)).to_pylist() == [_by_hand(r) for r in rows]


def test_table_hashes_equal_the_plain_per_field_version() -> None:
    rows = _rows(300, seed=11)
    logged = [r["subscription_id"] if r["subscription_logged"] else None for r in rows]
    columns = {name: [r.get(name) for r in rows] for name in FIELDS}
    columns["subscription_logged_as"] = logged
    plain = record_hashes(
        columns,
        verdicts=[r["verdict"] for r in rows],
        files=[r["file_sha256"] for r in rows],
        lines=[r["line"] for r in rows],
        details=[r["detail"] for r in rows],
    )
    assert table_hashes(_table(rows)).to_pylist() == plain


def test_nanosecond_times_round_to_the_microsecond_the_store_keeps() -> None:
    rows = _rows(50, seed=5)
    table = _table(rows)
    ns = table.set_column(
        0, "received_at", table.column("received_at").cast(pa.timestamp("ns", "UTC"))
    )
    assert table_hashes(ns).to_pylist() == table_hashes(table).to_pylist()


def test_an_empty_table_has_no_hash() -> None:
    assert table_hashes(_table([])).to_pylist() == []
