"""What every capture format shares: one record (a dict) checked and appended as one row.

A format module (:mod:`audit.ingest.formats.jsonl`, :mod:`audit.ingest.formats.har`) turns its
file into records and hands each to :func:`_record`, which fills a :class:`Buffer`.

This is the loader's hot loop. It imports neither pandas nor numpy, so worker processes that run
it start fast; :mod:`audit.ingest.load` turns the lists into a frame. Each record becomes one
row; one that cannot be read becomes a row with verdict ``unreadable`` and the reason in ``detail``.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from audit.timeutil import FIRST_YEAR, LAST_YEAR, ns_in_range, parse_iso_ns

__all__ = ["COLUMNS", "NAT", "Buffer", "Columns", "Envelope", "Row"]

#: The sentinel for a missing time (numpy's NaT as int64).
NAT = -(2**63)


class Row(NamedTuple):
    """One record as loaded: the columns :data:`audit.tables.LOADED` declares, in their order
    (``tests/test_tables.py`` holds them equal; mypy needs the fields written out)."""

    source: str
    line: int
    received_at: int  # ns since the epoch, NAT when missing
    subscription_id: str | None
    url: str | None
    response_status: int | None
    response_ms: float | None
    signature: str | None
    timestamp_header: str | None
    event_header: str | None
    delivery_id: str | None
    body: bytes | None
    event_id: str | None
    event: str | None
    event_timestamp: int  # ns since the epoch, NAT when missing
    incident_id: str | None
    verdict: str | None
    detail: str | None


#: Column order of the deliveries frame as loaded (:data:`audit.tables.LOADED`).
COLUMNS: tuple[str, ...] = Row._fields

#: A table's columns as lists of values (column name -> values).
Columns = dict[str, list[Any]]


class Envelope(NamedTuple):
    """What the loader reads from a body's JSON envelope."""

    event_id: str | None
    event: str | None
    event_timestamp: int  # ns since the epoch, NAT when missing
    incident_id: str | None


_NO_ENVELOPE = Envelope(None, None, NAT, None)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Buffer:
    """Rows as tuples (one append per record), turned into columns once at the end.

    Cheap to fill in the hot loop and to pickle between processes.
    """

    __slots__ = ("naive_times", "rows", "unreadable")

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.naive_times = 0
        self.unreadable = 0

    def __len__(self) -> int:
        return len(self.rows)

    def add_unreadable(self, source: str, line: int, reason: str) -> None:
        """Add a row for a record that could not be read."""
        self.rows.append(_unreadable_row(source, line, reason))
        self.unreadable += 1

    def columns(self) -> Columns:
        """The rows transposed: column name -> list of values, in :data:`COLUMNS` order."""
        if not self.rows:
            return {name: [] for name in COLUMNS}
        transposed = zip(*self.rows, strict=True)
        return {name: list(values) for name, values in zip(COLUMNS, transposed, strict=True)}


def _unreadable_row(source: str, line: int, reason: str) -> Row:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(source=source, line=line, received_at=NAT, event_timestamp=NAT)
    row.update(verdict="unreadable", detail=reason)
    return Row(**row)


#: Times must fit a nanosecond int64 (pandas' range, 1677-09-22 to 2262-04-11).
_in_range = ns_in_range


def _time_ns(value: object) -> tuple[int, bool]:
    """received_at as UTC ns: ISO 8601 or Unix seconds (int/float, not bool)."""
    if type(value) is float:
        if not math.isfinite(value):
            raise ValueError
        ns, had_offset = round(value * 1e9), True
    elif type(value) is int:
        ns, had_offset = value * 1_000_000_000, True
    else:
        ns, had_offset = parse_iso_ns(value)
    if not _in_range(ns):
        raise OverflowError
    return ns, had_offset


class _Envelopes:
    """Envelope parsing with a cache of event timestamps (retries repeat them)."""

    def __init__(self) -> None:
        self._times: dict[str, int] = {}

    def __call__(self, body: bytes) -> Envelope:
        try:
            env = orjson.loads(body)
        except orjson.JSONDecodeError:
            return _NO_ENVELOPE
        if type(env) is not dict:
            return _NO_ENVELOPE
        eid, event, ts, data = (
            env.get("id"),
            env.get("event"),
            env.get("timestamp"),
            env.get("data"),
        )
        ts_ns = NAT
        if type(ts) is str:
            cached = self._times.get(ts, None)
            if cached is None:
                try:
                    ts_ns = parse_iso_ns(ts)[0]
                except ValueError:
                    ts_ns = NAT
                if not _in_range(ts_ns):
                    ts_ns = NAT
                self._times[ts] = ts_ns
            else:
                ts_ns = cached
        inc = data.get("incidentId") if type(data) is dict else None
        return Envelope(
            eid if type(eid) is str else None,
            event if type(event) is str else None,
            ts_ns,
            inc if type(inc) is str else None,
        )


def _headers(raw: object, wanted: dict[str, str], notes: list[str]) -> dict[str, str] | str:
    """Pick the delivery headers by lower-cased name; a reason string when malformed.

    A repeated header is combined as HTTP does (RFC 9110, 5.3): values joined by ", ". A repeated
    signature or timestamp header therefore fails the format checks, which is the safe outcome.
    A header that is not a delivery header and has no usable value is ignored (noted in
    ``notes``); a delivery header without a string value makes the record unreadable.
    """
    items: Iterable[tuple[object, object]]
    if type(raw) is dict:
        items = raw.items()
    elif type(raw) is list:
        pairs: list[tuple[object, object]] = []
        for p in raw:
            if type(p) is not list or not 1 <= len(p) <= 2:
                return "headers must be an object or a list of [name, value] pairs"
            pairs.append((p[0], p[1] if len(p) == 2 else None))
        items = pairs
    else:
        return "headers must be an object or a list of [name, value] pairs"
    out: dict[str, str] = {}
    for name, value in items:
        if type(name) is not str:
            return "header name is not a string"
        key = wanted.get(name.lower())
        if key is None:
            if type(value) is not str:
                notes.append(f"ignored header {_short(name)} without a string value")
            continue
        if type(value) is not str:
            return f"header {name} has a value that is not a string"
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _record(
    buf: Buffer,
    source: str,
    line: int,
    rec: dict[str, Any],
    wanted: dict[str, str],
    envelope: Callable[[bytes], Envelope],
) -> str | None:
    """Validate one capture record and add it; return the reason when it is unreadable."""
    received = rec.get("received_at")
    if received is None:
        return "no received_at"
    try:
        received_ns, had_offset = _time_ns(received)
    except OverflowError:
        return (
            f"received_at is out of range (years {FIRST_YEAR}-{LAST_YEAR}; Unix seconds, not "
            "milliseconds)"
        )
    except (ValueError, TypeError):
        return "received_at is not an ISO 8601 time or Unix seconds"
    raw_headers = rec.get("headers")
    if raw_headers is None:
        return "no headers"
    notes: list[str] = []
    hdr = _headers(raw_headers, wanted, notes)
    if isinstance(hdr, str):
        return hdr
    text, b64 = rec.get("body"), rec.get("body_b64")
    omitted = rec.get("body_omitted_bytes")
    if text is None and b64 is None and type(omitted) is int:  # a receiver's 413, kept
        return f"body of {omitted:,} bytes not captured (over the receiver's limit)"
    if (text is None) == (b64 is None):
        return "both body and body_b64" if text is not None else "neither body nor body_b64"
    if text is not None:
        if type(text) is not str:
            return "body is not a string"
        body = text.encode("utf-8")
    else:
        assert b64 is not None  # exactly one of body and body_b64 (checked above)
        try:
            body = base64.b64decode(b64, validate=True)
        except (binascii.Error, TypeError, ValueError):
            return "body_b64 is not valid base64"
    sub, url = rec.get("subscription_id"), rec.get("url")
    if sub == "":  # an empty id means the receiver did not log it: infer it
        sub = None
    if sub is not None and type(sub) is not str:
        return "subscription_id is not a string"
    if url is not None and type(url) is not str:
        notes.append(f"ignored url {_short(url)} (not a string)")
        url = None
    status = rec.get("response_status")
    if status is not None:
        if type(status) is not int:
            notes.append(f"ignored response_status {_short(status)} (not an integer)")
            status = None
        elif not 100 <= status <= 599:
            notes.append(f"ignored response_status {_short(status)} (not an HTTP status 100-599)")
            status = None
    ms = rec.get("response_ms")
    if ms is not None:
        if type(ms) is int and -(2**53) <= ms <= 2**53:
            ms = float(ms)
        if type(ms) is not float or not math.isfinite(ms) or ms < 0:
            notes.append(f"ignored response_ms {_short(ms)} (not a number of milliseconds)")
            ms = None
    get = hdr.get
    eid, event, event_ns, incident = envelope(body)
    buf.rows.append(
        Row(
            source=source,
            line=line,
            received_at=received_ns,
            subscription_id=sub,
            url=url,
            response_status=status,
            response_ms=ms,
            signature=get("signature"),
            timestamp_header=get("timestamp"),
            event_header=get("event"),
            delivery_id=get("delivery_id"),
            body=body,
            event_id=eid,
            event=event,
            event_timestamp=event_ns,
            incident_id=incident,
            verdict=None,
            detail="; ".join(notes) if notes else None,
        )
    )
    buf.naive_times += not had_offset
    return None
