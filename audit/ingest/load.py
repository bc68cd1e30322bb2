"""Load stored captures (JSON Lines, plain or gzip, and HAR 1.2) into one deliveries frame.

Every input record becomes exactly one row. A record that cannot be read becomes a row whose
``verdict`` is ``unreadable`` and whose ``detail`` says why; nothing is dropped silently. Blank
lines are not records and are skipped. A file that cannot be read at all (a truncated gzip, a
HAR that is not JSON) raises :class:`~audit.errors.LoadError` naming the file.

Which files a folder or glob yields is decided by :mod:`audit.paths` (rotated names, one warning
for skipped entries, loop-safe ``**``, unreadable folders are errors); gzip is inflated as a
stream within the limits of :mod:`audit.ingest.compressed` (a gzip bomb is an error naming the
file).

Large inputs are parsed (and, given ``secrets``, verified) in worker processes, one chunk of
lines each; the rows come back in input order, so the result does not depend on ``workers``.
The formats are documented in ``docs/formats.md``; the columns in ``docs/tables.md``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit.errors import LoadError
from audit.ingest.compressed import ExpansionLimits, inflate
from audit.ingest.formats import FORMATS, format_of
from audit.ingest.formats.base import NAT, Columns
from audit.ingest.identity import (
    distinct_contents,
    first_sightings,
    record_ids,
    repeated_message,
    settle,
    stored_sha256,
    unsettled,
)
from audit.ingest.lines import Chunk, read_lines
from audit.ingest.parts import to_micros
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import subscription_logged, verify_parsed
from audit.ingest.workers import default_workers, forked_workers
from audit.paths import expand, resolved_name, source_name
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX, header_names

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Captures", "LoadWarning", "expand_paths", "frame_from_columns", "load_captures"]

#: Inputs smaller than this (uncompressed bytes) are parsed in-process.
PARALLEL_MIN_BYTES = 16 * 2**20
_CHUNK_MIN_BYTES = 4 * 2**20


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


def expand_paths(
    paths: Iterable[str | os.PathLike[str]], suffixes: tuple[str, ...] | None = None
) -> list[Path]:
    """Turn files, folders (searched recursively for capture logs) and globs into files.

    The rules are those of :func:`audit.paths.expand` (rotated names, one warning for skipped
    files, loop-safe ``**``); a folder yields the names of the registered capture formats
    (:data:`audit.ingest.formats.FORMATS`) unless ``suffixes`` is given.
    Raises :class:`~audit.errors.InputError` for a path that matches nothing or cannot be read.

    The files come in the order of their real paths, whatever order they were named in: "input
    order" (which of two records received at the same instant comes first) is then the same
    for ``audit analyze b.jsonl a.jsonl`` and ``a.jsonl b.jsonl``, and the evidence store's
    (which keeps rows by real path and line).
    """
    found = expand(paths, tuple(FORMATS) if suffixes is None else suffixes, what="capture log")
    return sorted(found, key=lambda p: str(p.resolve()))


def distinct_logs(files: list[Path]) -> list[Path]:
    """``files`` without a copy of an earlier one's content (:func:`audit.ingest.identity.
    distinct_contents`), each left out named in a :class:`LoadWarning`: the evidence store keeps
    such a copy once, and a report from raw captures must count what one from the store does."""
    kept, left_out = distinct_contents(files)
    for copy, first in left_out:
        warnings.warn(
            f"{source_name(copy)}: the same content as {source_name(first)}; read once",
            LoadWarning,
            stacklevel=3,
        )
    return kept


class _Content(NamedTuple):
    """A file as read: its size and sha256 (of its bytes as stored) and its content in chunks
    of whole lines (:class:`audit.ingest.lines.Chunk`; a HAR file in one chunk)."""

    size: int
    sha256: str
    chunks: list[Chunk]


def _read(path: Path, limits: ExpansionLimits | None = None) -> _Content:
    """Read a file: gzip is recognised by its magic bytes and inflated as a stream within
    ``limits``; a line over the record limit is skipped as a stream (never held) and listed in
    its chunk's ``overlong``. A HAR file (one document) is read whole."""
    if not format_of(path.name).SPLITS_AT_LINES:
        try:
            blob = path.read_bytes()
        except OSError as e:
            raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
        data = inflate(path, blob, limits).removeprefix(b"\xef\xbb\xbf")  # a BOM is no record
        return _Content(len(blob), hashlib.sha256(blob).hexdigest(), [Chunk(data, 1, {})])
    digest = hashlib.sha256()
    chunks = list(read_lines(path, chunk_bytes=_CHUNK_MIN_BYTES, limits=limits, digest=digest))
    try:
        size = path.stat().st_size
    except OSError as e:
        raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    return _Content(size, digest.hexdigest(), chunks or [Chunk(b"", 1, {})])


#: Chunks handed to forked workers by inheritance instead of pickling (set only while a pool
#: runs, under _FORK_LOCK), by task.
_FORK_INPUTS: list[bytes] = []
_FORK_LOCK = threading.Lock()


class _Task(NamedTuple):
    """One chunk of one file to parse (and verify)."""

    #: The format's name (a key of :data:`audit.ingest.formats.FORMATS`).
    kind: str
    #: The file's index among the inputs.
    file: int
    #: The task's index (its bytes in :data:`_FORK_INPUTS`).
    slot: int
    source: str
    first_line: int
    wanted: dict[str, str]
    secrets: SecretStore | None
    tolerance_s: float
    #: The chunk's lines over the record limit (emptied in its bytes).
    overlong: dict[int, int]
    #: What stands for the file's sha256 in the records' ``record_sha256`` when they are
    #: wanted (:func:`audit.ingest.identity.unsettled`), else None.
    file_sha256: str | None = None


def _work(task: _Task, data: bytes | None = None) -> tuple[pa.RecordBatch, int, int]:
    """Parse (and verify) one chunk into an Arrow batch: (batch, naive times, unreadable).

    Runs in a worker process or in-process. A worker finds its bytes in the inherited
    ``_FORK_INPUTS``; Arrow buffers cross back far cheaper than Python objects, and the string
    conversion happens here, in parallel.
    """
    if data is None:
        data = _FORK_INPUTS[task.slot]
    parse, more = FORMATS[task.kind].parse, ({"overlong": task.overlong} if task.overlong else {})
    buf = parse(data, task.source, task.wanted, task.first_line, **more)
    columns = buf.columns()
    # as logged, before the verification infers a subscription from the matching secret
    logged = subscription_logged(columns) if task.file_sha256 is not None else []
    if task.secrets is not None:
        columns.update(verify_parsed(columns, task.secrets, tolerance_s=task.tolerance_s))
    if task.file_sha256 is not None:
        ids = record_ids({**columns, "subscription_logged": logged}, task.file_sha256)
        columns["record_sha256"] = ids.to_pylist()
    return _batch(columns), buf.naive_times, buf.unreadable


_ARROW_TYPES = {
    "line": pa.int64(),
    "received_at": pa.timestamp("ns", tz="UTC"),
    "event_timestamp": pa.timestamp("ns", tz="UTC"),
    "response_status": pa.int64(),
    "response_ms": pa.float64(),
    "skew_s": pa.float64(),
    "hmac_ok": pa.bool_(),
    "body": pa.large_binary(),
}


def _batch(columns: Columns) -> pa.RecordBatch:
    arrays = {}
    for name, values in columns.items():
        typ = _ARROW_TYPES.get(name, pa.large_string())
        if typ == _ARROW_TYPES["received_at"]:
            ints = pa.array(values, pa.int64())
            # to the microsecond, as the evidence store keeps times (audit.ingest.parts)
            arrays[name] = to_micros(pc.if_else(pc.equal(ints, NAT), None, ints).cast(typ))
        else:
            arrays[name] = pa.array(values, typ, from_pandas=True)
    return pa.RecordBatch.from_pydict(arrays)


def load_captures(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    secrets: SecretStore | None = None,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    workers: int | None = None,
    max_expanded_bytes: int | None = None,
    max_expansion_ratio: float | None = None,
    record_sha256: bool = False,
) -> Captures:
    """Load capture logs (JSONL, ``.gz``, HAR) from files, folders and globs into one frame.

    A file whose content equals an earlier one's (a backup, a gzip of it) is read once, and a
    record read from an earlier file (a partial copy of a log, a log rotated by
    ``copytruncate`` beside its copy) is counted once, where first seen, as the evidence store
    keeps them (``docs/scale.md``); a :class:`LoadWarning` says so in one line each. A line
    repeated within one file stays two receipts.

    Parameters
    ----------
    paths
        Files, folders (searched recursively for ``*.jsonl[.gz]``, ``*.ndjson[.gz]``,
        ``*.har[.gz]``) or glob patterns.
    header_prefix
        Brand part of the delivery header names (``X-PhishFort`` by default).
    secrets
        When given, every record is also verified (as :func:`audit.ingest.verification.verify_frame`
        does) while it is parsed, which saves a second pass over the bodies.
    tolerance_s
        Clock tolerance for that verification.
    workers
        Worker processes for large inputs; 1 parses in-process. Default: the usable CPUs.
    max_expanded_bytes, max_expansion_ratio
        Limits on gzip expansion per file (see :mod:`audit.ingest.compressed`); default from
        ``AUDIT_MAX_EXPANDED_BYTES`` / ``AUDIT_MAX_EXPANSION_RATIO``, else 2 GiB and 200.
    record_sha256
        Also give each row's ``record_sha256`` (what the evidence store knows it by,
        :mod:`audit.ingest.record_id`), as a last column.

    Returns
    -------
    Captures
        ``deliveries`` (one row per record, unreadable ones included), ``inputs`` (one row per
        file with size, sha256, records, unreadable) and ``naive_times``.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> log = pathlib.Path(tempfile.mkdtemp()) / "log.jsonl"
    >>> _ = log.write_text('{"received_at": 0, "body": "{}",'
    ...                    ' "headers": {"X-PhishFort-Delivery-Id": "dlv_1"}}\\nnot json\\n')
    >>> caps = load_captures([log])
    >>> caps.deliveries[["line", "delivery_id", "verdict"]]
       line delivery_id     verdict
    0     1       dlv_1         NaN
    1     2         NaN  unreadable
    >>> caps.inputs["records"].tolist(), caps.naive_times
    ([2], 0)
    """
    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    files = distinct_logs(expand_paths(paths))
    wanted = {v: k for k, v in header_names(header_prefix).items()}
    workers = default_workers() if workers is None else max(1, workers)
    limits = ExpansionLimits(max_expanded_bytes, max_expansion_ratio)
    contents = [_read(path, limits) for path in files]
    hashed = record_sha256 or len(files) > 1  # the records' hashes find those seen twice
    total = sum(len(c.data) for content in contents for c in content.chunks)
    pieces = workers * 2 if workers > 1 and total >= PARALLEL_MIN_BYTES else 1
    tasks: list[_Task] = []
    inputs: list[bytes] = []
    for k, (path, content) in enumerate(zip(files, contents, strict=True)):
        kind, source = format_of(path.name).NAME, resolved_name(path)
        for chunk in content.chunks:
            task = _Task(
                kind,
                k,
                len(tasks),
                source,
                chunk.first_line,
                wanted,
                secrets,
                tolerance_s,
                chunk.overlong,
                unsettled(source) if hashed else None,
            )
            tasks.append(task)
            inputs.append(chunk.data)
    contents = [c._replace(chunks=[]) for c in contents]  # the chunks live on in ``inputs``
    results: list[tuple[pa.RecordBatch, int, int]]
    if pieces > 1 and len(tasks) > 1:
        with _FORK_LOCK:
            _FORK_INPUTS[:] = inputs
            try:
                with forked_workers(min(workers, len(tasks))) as pool:
                    futures = [pool.submit(_work, task) for task in tasks]
                    results = [f.result() for f in futures]
            finally:
                _FORK_INPUTS.clear()
    else:
        results = [_work(t, inputs[t.slot]) for t in tasks]
    return _assemble(files, contents, tasks, results, keep_ids=record_sha256)


def _assemble(
    files: list[Path],
    contents: list[_Content],
    tasks: list[_Task],
    results: list[tuple[pa.RecordBatch, int, int]],
    *,
    keep_ids: bool = False,
) -> Captures:
    """The :class:`Captures` of the parsed chunks (``results``, one per task), without the
    records read from an earlier file (:func:`audit.ingest.identity.first_sightings`);
    ``record_sha256`` kept when ``keep_ids``."""
    per_file = [[0, 0] for _ in files]
    naive = 0
    for task, (batch, naive_one, unreadable) in zip(tasks, results, strict=True):
        per_file[task.file][0] += batch.num_rows
        per_file[task.file][1] += unreadable
        naive += naive_one
    if naive:
        warnings.warn(
            f"{naive} received_at value(s) had no UTC offset and were read as UTC",
            LoadWarning,
            stacklevel=3,
        )
    import pandas as pd  # start-up: pandas only once a frame is built (`audit verify` never)

    inputs = pd.DataFrame(
        {
            "source": pd.Series([resolved_name(p) for p in files], dtype="str"),
            "size": pd.Series([c.size for c in contents], dtype="int64"),
            "sha256": pd.Series([c.sha256 for c in contents], dtype="str"),
            "records": pd.Series([r for r, _ in per_file], dtype="int64"),
            "unreadable": pd.Series([u for _, u in per_file], dtype="int64"),
        }
    )
    table = pa.Table.from_batches([b for b, _, _ in results])
    if "record_sha256" in table.column_names:
        table = _settled(table, files, contents)
        rows = [b.num_rows for b, _, _ in results]
        file_of = np.repeat(np.array([t.file for t in tasks], dtype=np.int64), rows)
        keep = first_sightings(file_of, table.column("record_sha256"))
        if not keep.all():
            table = table.filter(pa.array(keep))
            warnings.warn(repeated_message(int((~keep).sum())), LoadWarning, stacklevel=3)
            # counted where first seen, as a store's manifest counts a file's records
            elsewhere = np.bincount(file_of[~keep], minlength=len(files))
            inputs = inputs.assign(records=inputs["records"] - elsewhere)
        if not keep_ids:
            table = table.drop_columns(["record_sha256"])
    return Captures(_frame(table), inputs, naive)


def _settled(table: pa.Table, files: list[Path], contents: list[_Content]) -> pa.Table:
    """``table`` with its unreadable records' ``record_sha256`` as the store keeps them
    (:func:`audit.ingest.identity.settle`)."""
    bad = pc.fill_null(pc.equal(table.column("verdict"), "unreadable"), False)
    if not pc.any(bad).as_py():
        return table
    picked = table.filter(bad)
    ids = table.column("record_sha256").to_pylist()
    paths = {resolved_name(p): p for p in files}
    read = {resolved_name(p): c.sha256 for p, c in zip(files, contents, strict=True)}
    right = settle(
        picked.column("record_sha256").to_pylist(),
        sources=picked.column("source").to_pylist(),
        lines=picked.column("line").to_pylist(),
        details=picked.column("detail").to_pylist(),
        paths=paths,
        file_sha256=lambda source: stored_sha256(paths[source], read[source]),
    )
    at = table.schema.get_field_index("record_sha256")
    fixed = pa.array([right.get(v, v) for v in ids], table.schema.field(at).type)
    return table.set_column(at, table.schema.field(at), fixed)


@functools.cache
def _pandas_types() -> dict[pa.DataType, object]:
    """Arrow type -> the pandas dtype of the deliveries columns (pandas imported on first use:
    the verify path never needs it)."""
    import numpy as np  # start-up: with pandas, below
    import pandas as pd  # start-up: pandas only once a frame is built (`audit verify` never)

    return {
        pa.int64(): pd.Int64Dtype(),
        pa.float64(): pd.Float64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
        pa.large_string(): pd.StringDtype(na_value=np.nan),
    }


def frame_from_columns(columns: Columns) -> pd.DataFrame:
    """Build deliveries columns (any subset) with their declared dtypes."""
    return _frame(pa.Table.from_batches([_batch(columns)]))


def _frame(table: pa.Table) -> pd.DataFrame:
    df: pd.DataFrame = table.to_pandas(types_mapper=_pandas_types().get)
    if "line" in df:
        df["line"] = df["line"].astype("int64")
    return df
