"""Capture files read in bounded chunks, verified, and turned into rows of the evidence store.

Nothing here holds a whole file: :func:`read_chunks` yields pieces of about ``chunk_bytes`` cut
at line ends, and each piece becomes one Arrow table of :data:`audit.tables.STORED_DELIVERIES`.
What analyses read from a body (the envelope, the incident ``data`` fields, a fingerprint) is
extracted here, once, so that no analysis parses a body again.
"""

from __future__ import annotations

import gzip
import operator
import sys
import zlib
from collections.abc import Iterator
from itertools import compress, repeat
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit.errors import LoadError
from audit.ingest.compressed import GZIP_MAGIC, inflate, inflate_stream
from audit.ingest.extract import body_columns
from audit.ingest.fast import verify_jsonl
from audit.ingest.formats import FORMATS
from audit.ingest.formats.base import NAT, Columns
from audit.ingest.lines import Chunk, read_lines
from audit.ingest.parts import to_micros
from audit.ingest.record_id import table_hashes
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import subscription_logged, verify_columns, verify_parsed
from audit.memory import release_free_memory
from audit.tables import EVIDENCE_COLUMNS, STORED_DELIVERIES

__all__ = ["body_columns", "evidence_table", "read_chunks", "stored_table", "verify_chunk"]

SCHEMA = STORED_DELIVERIES.arrow_schema()
_BOM = b"\xef\xbb\xbf"
_GZ_STEP = 64 * 2**10


def is_gzip(path: Path) -> bool:
    """Whether the file starts with the gzip magic bytes; a 0-byte ``.gz`` is a LoadError
    (reported, not read as an empty log)."""
    with open(path, "rb") as f:
        magic = f.read(2)
    if not magic:
        inflate(path, b"")  # raises for a .gz name
    return magic == b"\x1f\x8b"


def read_chunks(
    path: Path, *, skip_bytes: int = 0, first_line: int = 1, chunk_bytes: int = 32 * 2**20
) -> Iterator[Chunk]:
    """Pieces of about ``chunk_bytes`` of a JSONL file (plain or gzip), cut at newlines
    (:func:`audit.ingest.lines.read_lines`: a line over the record limit is emptied and listed
    in its chunk's ``overlong``, never held). ``skip_bytes`` (plain files only) starts after an
    already ingested prefix. A UTF-8 BOM at the very start is skipped."""
    return read_lines(path, chunk_bytes=chunk_bytes, skip_bytes=skip_bytes, first_line=first_line)


#: The most a file of a one-document format (HAR) may hold, inflated: its entries are parsed one
#: by one, but its bytes are held whole (the 419 MB HAR peaked at 1,010 MB). Larger ones are
#: refused in one line, never read into a multi-GB process (``docs/formats.md``).
MAX_DOCUMENT_BYTES = 512 * 2**20


def _too_large(path: Path, size: int, inflated: bool = False) -> LoadError:
    held = "more than " if inflated else ""
    return LoadError(
        f"{path}: {held}{size:,} bytes{' inflated' if inflated else ''}, over the "
        f"{MAX_DOCUMENT_BYTES // 2**20} MiB a HAR may hold (its bytes are held whole while its "
        "entries are read); split the capture or export it as JSON Lines"
    )


def read_whole(path: Path) -> bytes:
    """A whole file's content, inflated if gzip (formats that are one document: HAR), at most
    :data:`MAX_DOCUMENT_BYTES` (a larger one is a :class:`~audit.errors.LoadError`)."""
    try:
        size = path.stat().st_size
        if size > MAX_DOCUMENT_BYTES:
            raise _too_large(path, size)
        blob = path.read_bytes()
        if blob[:2] != GZIP_MAGIC:
            blob = inflate(path, blob)  # not gzip: itself (an empty .gz is refused)
        else:  # inflated within the expansion limits, and stopped past the document limit
            pieces, total = [], 0
            steps = (blob[at : at + _GZ_STEP] for at in range(0, len(blob), _GZ_STEP))
            for piece in inflate_stream(path, steps):
                total += len(piece)
                if total > MAX_DOCUMENT_BYTES:
                    raise _too_large(path, MAX_DOCUMENT_BYTES, inflated=True)
                pieces.append(piece)
            blob = b"".join(pieces)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise LoadError(f"{path}: truncated or corrupt gzip file ({e})") from None
    except OSError as e:
        raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    return blob.removeprefix(_BOM)


#: The name the store uses for :func:`read_whole`.
read_har = read_whole


def stored_columns(columns: Columns, names: list[str] | tuple[str, ...]) -> pa.Table:
    """Some columns of the store schema, from lists (times as int64 ns, NAT for missing)."""
    arrays, fields = [], []
    for name in names:
        field = SCHEMA.field(name)
        values = columns[name]
        if pa.types.is_timestamp(field.type):
            arrays.append(_times(values, field.type))
        else:
            arrays.append(_array(values, field.type))
        fields.append(field)
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


# ``pa.array`` (and a compute call given a Python scalar) imports pandas the first time it runs,
# 0.3 s in every process; ``audit verify`` has no other use for pandas. So the plain columns
# (every value None or of the column's one Python type, the usual case) are built from numpy
# buffers; anything else goes through ``pa.array`` as before, with the same result or error.
_PLAIN: dict[pa.DataType, type] = {
    pa.string(): str,
    pa.int64(): int,
    pa.float64(): float,
    pa.bool_(): bool,
}
_NONE = type(None)


def _pandas_loaded() -> bool:
    """Whether this process has imported pandas already (then ``pa.array`` costs no import,
    and it builds a string column about three times as fast as the numpy route below)."""
    return "pandas" in sys.modules


def _array(values: list[Any], typ: pa.DataType) -> pa.Array:
    """``pa.array(values, typ, from_pandas=True)``, without pandas for a plain column."""
    plain = _PLAIN.get(typ)
    if plain is None or _pandas_loaded():
        return pa.array(values, typ, from_pandas=True)
    n = len(values)
    if plain is str:  # every value a string (the usual column): no type census needed
        try:
            buffers = _utf8(values, None, n)
        except TypeError:  # a None or another type: joining failed, see below
            pass
        else:
            if buffers is None:
                return pa.array(values, typ, from_pandas=True)
            return _from_buffers(typ, n, None, buffers)
    kinds = set(map(type, values))
    if not kinds <= {plain, _NONE}:
        return pa.array(values, typ, from_pandas=True)
    if plain is float:
        floats = np.array(values, dtype=np.float64)  # None is NaN, and NaN is missing too
        missing = np.isnan(floats)
        return _from_buffers(typ, n, ~missing if missing.any() else None, [floats])
    valid = None
    if _NONE in kinds:
        valid = np.fromiter(map(operator.is_not, values, repeat(None)), dtype=bool, count=n)
    if plain is str:
        buffers = _utf8(values if valid is None else list(compress(values, valid)), valid, n)
        if buffers is None:
            return pa.array(values, typ, from_pandas=True)
    else:
        filled = values if valid is None else [0 if v is None else v for v in values]
        try:
            data = np.array(filled, dtype=np.int64 if plain is int else bool)
        except OverflowError:  # beyond int64: pa.array says so
            return pa.array(values, typ, from_pandas=True)
        buffers = [np.packbits(data, bitorder="little") if plain is bool else data]
    return _from_buffers(typ, n, valid, buffers)


def _utf8(present: list[str], valid: np.ndarray[Any, Any] | None, n: int) -> list[Any] | None:
    """Arrow string offsets and data for ``n`` values, ``present`` those not missing (where
    ``valid``); None for ``pa.array`` to deal with (a lone surrogate, over 2 GiB)."""
    # str's own methods: a subclass's overrides (len, encode) must not change the bytes
    joined = "".join(present)
    if joined.isascii():
        data, lengths = joined.encode("ascii"), map(str.__len__, present)
    else:
        try:
            encoded = [str.encode(s) for s in present]
        except UnicodeEncodeError:
            return None
        data, lengths = b"".join(encoded), map(len, encoded)
    if len(data) >= 2**31:
        return None
    sizes = np.zeros(n, dtype=np.int32)
    sizes[slice(None) if valid is None else valid] = np.fromiter(lengths, np.int32, len(present))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return [offsets, data]


def _times(values: list[Any], typ: pa.DataType) -> pa.Array:
    """Nanoseconds since the epoch as ``typ`` (a timestamp type), NAT and None missing."""
    if set(map(type, values)) <= {int}:
        try:
            ns = np.array(values, dtype=np.int64)
        except OverflowError:
            pass
        else:
            valid = ns != NAT
            got = _from_buffers(typ, len(values), None if valid.all() else valid, [ns])
            return to_micros(got)  # as the store keeps them
    ints = pa.array(values, pa.int64())
    return to_micros(pc.if_else(pc.equal(ints, NAT), None, ints).cast(typ))


def _from_buffers(
    typ: pa.DataType, n: int, valid: np.ndarray[Any, Any] | None, buffers: list[Any]
) -> pa.Array:
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    return pa.Array.from_buffers(typ, n, [bitmap, *map(pa.py_buffer, buffers)], null_count=nulls)


def combine_columns(schema: pa.Schema, columns: list[Any], *, frugal: bool = True) -> pa.Table:
    """A table of ``schema`` with one chunk per column from ``columns`` (chunked arrays), which
    it empties as it goes: when nothing else holds them, at most one column exists twice.
    Without ``frugal`` (memory to spare), Arrow's pool is used and nothing is given back.

    pandas gets one array per column (its operations on many chunks copy them again). The new
    columns are allocated with ``malloc`` (Arrow's system pool), and the C heap's free pages go
    back to the operating system after each column (:func:`audit.memory.release_free_memory`):
    Arrow's own pool kept the freed chunks, so the copy peaked at the data twice over (measured
    at 1.6M deliveries: 2.66 GB, against 1.53 GB now for 1.45 GB of rows).
    """
    pool = pa.system_memory_pool() if frugal else None
    out = []
    for k in range(len(columns)):
        column = columns[k]
        columns[k] = None
        out.append(
            column.combine_chunks(memory_pool=pool) if column.num_chunks != 1 else column.chunk(0)
        )
        del column
        if frugal:
            release_free_memory()
    return pa.Table.from_arrays(out, schema=schema)


#: The columns of :func:`evidence_table`.
EVIDENCE_NAMES: tuple[str, ...] = (
    "source",
    "line",
    "received_at",
    *EVIDENCE_COLUMNS,
    "record_sha256",
)


def evidence_table(columns: Columns) -> pa.Table:
    """``source, line, received_at``, the request as received
    (:data:`audit.tables.EVIDENCE_COLUMNS`) and ``record_sha256`` (what a report joins them
    by) of the rows whose ``verdict`` is not ``valid``: the few rows a report shows whole."""
    keep = [i for i, v in enumerate(columns["verdict"]) if v != "valid"]
    picked = {n: [columns[n][i] for i in keep] for n in EVIDENCE_NAMES}
    return stored_columns(picked, EVIDENCE_NAMES)


def stored_table(columns: Columns, file_sha256: str) -> pa.Table:
    """Parsed and verified columns (plus ``subscription_logged``) as a store table."""
    cols = dict(columns)
    if "body_sha256" not in cols:
        cols.update(body_columns(columns["body"]))
    cols["file_sha256"] = [file_sha256] * len(columns["line"])
    # every column but record_sha256, which is computed from them
    table = stored_columns(cols, [n for n in SCHEMA.names if n != "record_sha256"])
    at = SCHEMA.get_field_index("record_sha256")
    return table.add_column(at, SCHEMA.field(at), table_hashes(table))


def verify_chunk(
    data: bytes,
    *,
    kind: str,
    source: str,
    first_line: int,
    wanted: dict[str, str],
    secrets: SecretStore,
    tolerance_s: float,
    file_sha256: str,
    exact: bool = False,
) -> tuple[pa.Table, int]:
    """Parse and verify one piece: (store table, naive times).

    ``kind`` names a format of :data:`audit.ingest.formats.FORMATS`. JSONL goes through the
    fast path (:mod:`audit.ingest.fast`, which hands every record outside its shape to the exact
    validator) unless ``exact``; every other format through the exact path.
    """
    if kind == "jsonl" and not exact:
        got = verify_jsonl(
            data, source, wanted, first_line, secrets, tolerance_s=tolerance_s, extract=True
        )
        return stored_table(got.columns, file_sha256), got.naive_times
    buf = FORMATS[kind].parse(data, source, wanted, first_line)
    columns = buf.columns()
    columns["subscription_logged"] = subscription_logged(columns)
    columns.update(verify_parsed(columns, secrets, tolerance_s=tolerance_s))
    return stored_table(columns, file_sha256), buf.naive_times


def reverify(table: pa.Table, secrets: SecretStore, tolerance_s: float) -> pa.Table:
    """Verify a stored table's readable rows again (after the secrets changed)."""
    cols = {name: table.column(name).to_pylist() for name in table.column_names}
    logged = cols["subscription_logged"]
    received = table.column("received_at").cast(pa.int64()).fill_null(NAT).to_numpy().tolist()
    unreadable = [v == "unreadable" for v in cols["verdict"]]
    v = verify_columns(
        cols["signature"],
        cols["timestamp_header"],
        cols["body"],
        received,
        [s if ok else None for s, ok in zip(cols["subscription_id"], logged, strict=True)],
        ["unreadable" if u else None for u in unreadable],
        [d if u else None for d, u in zip(cols["detail"], unreadable, strict=True)],
        secrets,
        tolerance_s=tolerance_s,
    )
    out = table
    for name, values in vars(v).items():
        i = out.schema.get_field_index(name)
        out = out.set_column(i, out.schema.field(i), pa.array(values, out.schema.field(i).type))
    return out
