"""Load stored captures (JSON Lines, plain or gzip, and HAR 1.2) into one deliveries frame.

Every input record becomes exactly one row. A record that cannot be read becomes a row whose
``verdict`` is ``unreadable`` and whose ``detail`` says why; nothing is dropped silently. Blank
lines are not records and are skipped. A file that cannot be read at all (a truncated gzip, a
HAR that is not JSON) raises :class:`~audit.errors.LoadError` naming the file.

The formats are documented in ``docs/formats.md``; the columns in ``docs/tables.md``.
"""

from __future__ import annotations

import base64
import binascii
import glob
import gzip
import hashlib
import os
import warnings
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pandas as pd

from audit.errors import InputError, LoadError
from audit.spec import DEFAULT_HEADER_PREFIX, header_names
from audit.timeutil import parse_iso_ns, parse_time_ns

__all__ = ["Captures", "LoadWarning", "expand_paths", "load_captures"]

#: File names picked up when a folder is given.
LOG_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".ndjson.gz", ".har", ".har.gz")

_NAT = np.iinfo(np.int64).min


class LoadWarning(UserWarning):
    """Loaded, but be careful (e.g. ISO times without an offset were read as UTC)."""


@dataclass(frozen=True)
class Captures:
    """The result of :func:`load_captures`.

    Attributes
    ----------
    deliveries : pandas.DataFrame
        One row per input record (see ``docs/tables.md``, table ``deliveries``).
    inputs : pandas.DataFrame
        One row per file: ``source, size, sha256, records, unreadable``.
    naive_times : int
        How many ``received_at`` values had no offset and were read as UTC.
    """

    deliveries: pd.DataFrame
    inputs: pd.DataFrame
    naive_times: int


def expand_paths(paths: Iterable[str | os.PathLike], suffixes=LOG_SUFFIXES) -> list[Path]:
    """Turn files, folders (searched recursively for ``suffixes``) and globs into files.

    Raises :class:`~audit.errors.InputError` for a path that matches nothing.
    """
    out: list[Path] = []
    seen: set[Path] = set()
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f for f in p.rglob("*") if f.is_file() and f.name.lower().endswith(suffixes)
            )
            if not found:
                raise InputError(f"{p}: folder holds no {', '.join(suffixes)} file")
        elif p.is_file():
            found = [p]
        else:
            found = sorted(Path(m) for m in glob.glob(str(raw), recursive=True))
            found = [f for f in found if f.is_file()]
            if not found:
                raise InputError(f"{raw}: no such file or folder, and no file matches it as a glob")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


class _Columns:
    """Column buffers filled record by record, turned into a frame once at the end."""

    NAMES = (
        "source",
        "line",
        "received_at",
        "subscription_id",
        "url",
        "response_status",
        "response_ms",
        "signature",
        "timestamp_header",
        "event_header",
        "delivery_id",
        "body",
        "event_id",
        "event",
        "event_timestamp",
        "incident_id",
        "data",
        "verdict",
        "detail",
    )

    def __init__(self) -> None:
        for name in self.NAMES:
            setattr(self, name, [])
        self.unreadable = 0

    def add_unreadable(self, source: str, line: int, reason: str) -> None:
        self.add(source, line, _NAT, None, None, None, None, {}, None, reason)

    def add(
        self,
        source: str,
        line: int,
        received_ns: int,
        subscription_id: str | None,
        url: str | None,
        status: int | None,
        ms: float | None,
        hdr: dict[str, str],
        body: bytes | None,
        unreadable: str | None = None,
    ) -> None:
        self.source.append(source)
        self.line.append(line)
        self.received_at.append(received_ns)
        self.subscription_id.append(subscription_id)
        self.url.append(url)
        self.response_status.append(status)
        self.response_ms.append(ms)
        self.signature.append(hdr.get("signature"))
        self.timestamp_header.append(hdr.get("timestamp"))
        self.event_header.append(hdr.get("event"))
        self.delivery_id.append(hdr.get("delivery_id"))
        self.body.append(body)
        env = _envelope(body) if body is not None else _NO_ENVELOPE
        self.event_id.append(env[0])
        self.event.append(env[1])
        self.event_timestamp.append(env[2])
        self.incident_id.append(env[3])
        self.data.append(env[4])
        self.verdict.append("unreadable" if unreadable else None)
        self.detail.append(unreadable)
        self.unreadable += unreadable is not None

    def frame(self) -> pd.DataFrame:
        def times(values: list[int]) -> pd.Series:
            arr = np.asarray(values, dtype=np.int64).view("M8[ns]")
            return pd.Series(arr).dt.tz_localize("UTC")

        def text(values: list) -> pd.Series:
            return pd.Series(values, dtype="str")

        return pd.DataFrame(
            {
                "source": text(self.source),
                "line": pd.Series(self.line, dtype="int64"),
                "received_at": times(self.received_at),
                "subscription_id": text(self.subscription_id),
                "url": text(self.url),
                "response_status": pd.Series(self.response_status, dtype="Int64"),
                "response_ms": pd.Series(self.response_ms, dtype="Float64"),
                "signature": text(self.signature),
                "timestamp_header": text(self.timestamp_header),
                "event_header": text(self.event_header),
                "delivery_id": text(self.delivery_id),
                "body": pd.Series(self.body, dtype=object),
                "event_id": text(self.event_id),
                "event": text(self.event),
                "event_timestamp": times(self.event_timestamp),
                "incident_id": text(self.incident_id),
                "data": pd.Series(self.data, dtype=object),
                "verdict": text(self.verdict),
                "detail": text(self.detail),
            }
        )


_NO_ENVELOPE = (None, None, _NAT, None, None)


def _envelope(body: bytes) -> tuple:
    """(event_id, event, event_timestamp_ns, incident_id, data) from a body; missing parts None."""
    try:
        env = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _NO_ENVELOPE
    if not isinstance(env, dict):
        return _NO_ENVELOPE
    eid, event, ts, data = env.get("id"), env.get("event"), env.get("timestamp"), env.get("data")
    try:
        ts_ns = parse_iso_ns(ts)[0] if ts is not None else _NAT
    except ValueError:
        ts_ns = _NAT
    if not isinstance(data, dict):
        data = None
    inc = data.get("incidentId") if data else None
    return (
        eid if isinstance(eid, str) else None,
        event if isinstance(event, str) else None,
        ts_ns,
        inc if isinstance(inc, str) else None,
        data,
    )


def _headers(raw: object, wanted: dict[str, str]) -> dict[str, str] | str:
    """Pick the delivery headers (case-insensitive). Returns a reason string when malformed.

    A repeated header is combined as HTTP does (RFC 9110, 5.3): values joined by ", ". A repeated
    signature or timestamp header therefore fails the format checks, which is the safe outcome.
    """
    if isinstance(raw, dict):
        items: Iterable = raw.items()
    elif isinstance(raw, list):
        items = raw
    else:
        return "headers must be an object or a list of [name, value] pairs"
    out: dict[str, str] = {}
    for item in items:
        if isinstance(raw, list) and not (isinstance(item, list) and len(item) == 2):
            return "headers must be an object or a list of [name, value] pairs"
        name, value = item
        if not isinstance(name, str):
            return "header name is not a string"
        key = wanted.get(name.lower())
        if key is None:
            continue
        if not isinstance(value, str):
            return f"header {name} has a value that is not a string"
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _optional_str(rec: dict, key: str) -> str | None:
    v = rec.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{key} is not a string")
    return v


def _status(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    if isinstance(v, str) and v.isascii() and v.isdigit():
        return int(v)
    raise ValueError("response_status is not an integer")


def _ms(v: object) -> float | None:
    if v is None:
        return None
    if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
        return float(v)
    raise ValueError("response_ms is not a number")


def _read_bytes(path: Path) -> tuple[bytes, bytes]:
    """Return (file bytes, decompressed content)."""
    try:
        blob = path.read_bytes()
    except OSError as e:
        raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    raw = blob
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (EOFError, gzip.BadGzipFile, zlib.error, OSError) as e:
            raise LoadError(f"{path}: truncated or corrupt gzip file ({e})") from None
    return blob, raw


def _jsonl_records(data: bytes) -> Iterator[tuple[int, dict | str]]:
    """Yield (line number, record or reason) for every non-blank line."""
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            yield lineno, f"not valid JSON ({e})"
            continue
        yield lineno, rec if isinstance(rec, dict) else "not a JSON object"


def _add_jsonl(cols: _Columns, source: str, data: bytes, wanted: dict[str, str]) -> int:
    naive = 0
    for lineno, rec in _jsonl_records(data):
        if isinstance(rec, str):
            cols.add_unreadable(source, lineno, rec)
            continue
        problem, naive_one = _add_record(cols, source, lineno, rec, wanted)
        naive += naive_one
        if problem:
            cols.add_unreadable(source, lineno, problem)
    return naive


def _add_record(
    cols: _Columns, source: str, lineno: int, rec: dict, wanted: dict[str, str]
) -> tuple[str | None, int]:
    """Validate one capture record and add it. Returns (reason it is unreadable, naive count)."""
    if "received_at" not in rec or rec["received_at"] is None:
        return "no received_at", 0
    try:
        received_ns, had_offset = parse_time_ns(rec["received_at"])
    except (ValueError, TypeError, OverflowError):
        return "received_at is not an ISO 8601 time or Unix seconds", 0
    if rec.get("headers") is None:
        return "no headers", 0
    hdr = _headers(rec["headers"], wanted)
    if isinstance(hdr, str):
        return hdr, 0
    has_body, has_b64 = rec.get("body") is not None, rec.get("body_b64") is not None
    if has_body == has_b64:
        return ("both body and body_b64" if has_body else "neither body nor body_b64"), 0
    if has_body:
        if not isinstance(rec["body"], str):
            return "body is not a string", 0
        body = rec["body"].encode("utf-8")
    else:
        try:
            body = base64.b64decode(rec["body_b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            return "body_b64 is not valid base64", 0
    try:
        sub = _optional_str(rec, "subscription_id")
        url = _optional_str(rec, "url")
        status = _status(rec.get("response_status"))
        ms = _ms(rec.get("response_ms"))
    except ValueError as e:
        return str(e), 0
    cols.add(source, lineno, received_ns, sub, url, status, ms, hdr, body)
    return None, int(not had_offset)


def _add_har(cols: _Columns, source: str, data: bytes, wanted: dict[str, str]) -> int:
    try:
        har = orjson.loads(data)
        entries = har["log"]["entries"]
        if not isinstance(entries, list):
            raise TypeError
    except (orjson.JSONDecodeError, KeyError, TypeError) as e:
        reason = "not valid JSON" if isinstance(e, orjson.JSONDecodeError) else "no log.entries"
        raise LoadError(f"{source}: not a HAR 1.2 file ({reason})") from None
    naive = 0
    for i, entry in enumerate(entries, 1):
        rec, problem = _har_entry(entry)
        if problem:
            cols.add_unreadable(source, i, problem)
            continue
        problem, naive_one = _add_record(cols, source, i, rec, wanted)
        naive += naive_one
        if problem:
            cols.add_unreadable(source, i, problem)
    return naive


def _har_entry(entry: object) -> tuple[dict, str | None]:
    """Map a HAR entry to a capture record. A missing ``postData`` is an empty body."""
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
        return {}, "HAR entry has no request"
    req = entry["request"]
    headers = req.get("headers")
    if not isinstance(headers, list) or not all(
        isinstance(h, dict) and "name" in h and "value" in h for h in headers
    ):
        return {}, "HAR request headers are not a list of {name, value}"
    post = req.get("postData") or {}
    text = post.get("text", "") if isinstance(post, dict) else None
    if not isinstance(text, str):
        return {}, "HAR postData.text is not a string"
    rec: dict = {
        "received_at": entry.get("startedDateTime"),
        "headers": [[h["name"], h["value"]] for h in headers],
        "url": req.get("url"),
    }
    if post.get("encoding") == "base64":
        rec["body_b64"] = text
    else:
        rec["body"] = text
    resp = entry.get("response")
    if isinstance(resp, dict) and isinstance(resp.get("status"), int) and resp["status"] > 0:
        rec["response_status"] = resp["status"]
    t = entry.get("time")
    if isinstance(t, int | float) and not isinstance(t, bool) and t >= 0:
        rec["response_ms"] = t
    return rec, None


def load_captures(
    paths: Iterable[str | os.PathLike] | str | os.PathLike,
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
) -> Captures:
    """Load capture logs (JSONL, ``.gz``, HAR) from files, folders and globs into one frame.

    Parameters
    ----------
    paths
        Files, folders (searched recursively for ``*.jsonl[.gz]``, ``*.ndjson[.gz]``,
        ``*.har[.gz]``) or glob patterns.
    header_prefix
        Brand part of the delivery header names (``X-PhishFort`` by default).

    Returns
    -------
    Captures
        ``deliveries`` (one row per record, unreadable ones included), ``inputs`` (one row per
        file with size, sha256, records, unreadable) and ``naive_times``.

    Examples
    --------
    >>> caps = load_captures(["demo-data/captures"])  # doctest: +SKIP
    >>> caps.deliveries[["source", "line", "delivery_id"]].head(1)  # doctest: +SKIP
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files = expand_paths(paths)
    wanted = {v: k for k, v in header_names(header_prefix).items()}
    cols = _Columns()
    inputs = []
    naive = 0
    for path in files:
        blob, data = _read_bytes(path)
        before, before_bad = len(cols.line), cols.unreadable
        source = str(path)
        is_har = path.name.lower().endswith((".har", ".har.gz"))
        naive += (_add_har if is_har else _add_jsonl)(cols, source, data, wanted)
        inputs.append(
            {
                "source": source,
                "size": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest(),
                "records": len(cols.line) - before,
                "unreadable": cols.unreadable - before_bad,
            }
        )
    if naive:
        warnings.warn(
            f"{naive} received_at value(s) had no UTC offset and were read as UTC",
            LoadWarning,
            stacklevel=2,
        )
    inputs_frame = pd.DataFrame(
        inputs, columns=["source", "size", "sha256", "records", "unreadable"]
    ).astype({"size": "int64", "records": "int64", "unreadable": "int64"})
    return Captures(cols.frame(), inputs_frame, naive)
