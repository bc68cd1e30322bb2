"""What a stored record is known by: ``record_sha256``, a hash of the request as captured.

The same request held by several files (a log and its rotated copy, a backup, a log rewritten
without some of its lines) is one record: the evidence store keeps it once and its readers count
it once (``docs/scale.md``). The hash covers what the receiver captured of the request, in this
order (:data:`FIELDS`): the receipt time in whole microseconds since the epoch (UTC, rounded
to the nearest as the store keeps it), ``url``,
``response_status``, ``response_ms``, the subscription as logged (none when it was inferred),
the signature, timestamp, event and delivery-id headers as received, and the body bytes. Each
field is written as ``-`` when missing, else as ``+<length>:<bytes>`` (text as UTF-8, numbers as
Python writes them: ``200``, ``12.5``), after the label ``audit record v1\\n``.

A record that could not be read holds none of these: it is known by its file's content sha256,
its line and the reason (``unreadable`` in place of the label), so that it counts once per
version of its file.

>>> rows = {n: [None] for n in FIELDS}
>>> rows["body"] = [b"{}"]
>>> hashes = record_hashes(rows, verdicts=["valid"], files=["f"], lines=[1], details=[None])
>>> import hashlib
>>> want = b"audit record v1\\n" + b"-" * 9 + b"+2:{}"
>>> hashes == [hashlib.sha256(want).hexdigest()]
True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from audit.ingest.parts import micros

__all__ = ["FIELDS", "record_hashes", "table_hashes"]

#: The request's fields the hash covers, in order (``received_us``: the receipt time in whole
#: microseconds since the epoch).
FIELDS: tuple[str, ...] = (
    "received_us",
    "url",
    "response_status",
    "response_ms",
    "subscription_logged_as",
    "signature",
    "timestamp_header",
    "event_header",
    "delivery_id",
    "body",
)
_LABEL = b"audit record v1\n"


def _field(value: object) -> bytes:
    if value is None:
        return b"-"
    if isinstance(value, bytes):
        raw = value
    elif isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
    elif isinstance(value, float):
        raw = repr(value).encode("ascii")
    else:
        raw = str(value).encode("ascii")
    return b"+%d:%s" % (len(raw), raw)


def record_hashes(
    rows: Mapping[str, Sequence[Any]],
    *,
    verdicts: Sequence[Any],
    files: Sequence[Any],
    lines: Sequence[Any],
    details: Sequence[Any],
) -> list[str]:
    """``record_sha256`` (hex) of each row of ``rows`` (lists by :data:`FIELDS`); the rows
    whose verdict is ``unreadable`` by their file, line and reason instead."""
    out = []
    sha = hashlib.sha256
    columns = [rows[name] for name in FIELDS]
    for i, values in enumerate(zip(*columns, strict=True)):
        if verdicts[i] == "unreadable":
            key = b"unreadable" + b"".join(map(_field, (files[i], lines[i], details[i])))
        else:
            key = _LABEL + b"".join(map(_field, values))
        out.append(sha(key).hexdigest())
    return out


def _pieces(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Each value of a column as :func:`_field` writes it (``-`` or ``+<length>:<bytes>``),
    as a binary array: Arrow casts integers and text as Python writes them; floats (whose
    Arrow text differs: ``100`` for ``100.0``) are written by Python."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_floating(values.type):
        values = pa.array([None if v is None else repr(v) for v in values.to_pylist()], pa.string())
    if not (pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type)):
        values = values.cast(pa.string())  # integers as Python writes them
    raw = values.cast(pa.binary())
    size = pc.binary_length(raw).cast(pa.string()).cast(pa.binary())
    joined = pc.binary_join_element_wise(b"+", size, b":", raw, b"")
    return pc.fill_null(joined, pa.scalar(b"-", pa.binary()))


def table_hashes(table: pa.Table) -> pa.Array:
    """``record_sha256`` of every row of a store table (times in any unit: the hash takes
    them in whole microseconds, rounded as the store keeps them), as a string array.

    The same values as :func:`record_hashes` (``tests/test_record_id.py`` holds them equal):
    the bytes hashed are built by Arrow column by column, and only the hashing is a Python
    loop (about five times faster than writing each field in Python).
    """
    logged = pc.fill_null(table.column("subscription_logged"), False)
    columns = {
        "received_us": micros(table.column("received_at")),
        "url": table.column("url"),
        "response_status": table.column("response_status"),
        "response_ms": table.column("response_ms"),
        "subscription_logged_as": pc.if_else(logged, table.column("subscription_id"), None),
        "signature": table.column("signature"),
        "timestamp_header": table.column("timestamp_header"),
        "event_header": table.column("event_header"),
        "delivery_id": table.column("delivery_id"),
        "body": table.column("body"),
    }
    keys = pc.binary_join_element_wise(
        _LABEL, *(_pieces(columns[name]) for name in FIELDS), b""
    ).to_pylist()
    sha = hashlib.sha256
    out = [sha(key).hexdigest() for key in keys]
    verdicts = table.column("verdict").to_pylist()
    unreadable = [i for i, verdict in enumerate(verdicts) if verdict == "unreadable"]
    if unreadable:  # known by their file, line and reason instead
        rows = table.take(unreadable)
        by_file = record_hashes(
            {name: [None] * len(unreadable) for name in FIELDS},
            verdicts=["unreadable"] * len(unreadable),
            files=rows.column("file_sha256").to_pylist(),
            lines=rows.column("line").to_pylist(),
            details=rows.column("detail").to_pylist(),
        )
        for i, value in zip(unreadable, by_file, strict=True):
            out[i] = value
    return pa.array(out, pa.string())
