"""``audit verify`` from raw captures: verdicts on every core, without keeping bodies."""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit.ingest import parallel, records
from audit.ingest.extract import EXTRACTED, body_columns
from audit.ingest.formats import CaptureFormat, format_of, jsonl
from audit.ingest.identity import (
    first_sightings,
    record_ids,
    repeated_message,
    settle,
    stored_sha256,
    unsettled,
)
from audit.ingest.load import LoadWarning, distinct_logs, expand_paths
from audit.ingest.parallel import Verdicts
from audit.ingest.secrets import SecretStore, read_secrets
from audit.ingest.signatures import subscription_logged, verify_parsed
from audit.ingest.verification import VERDICT_COLUMNS
from audit.ingest.workers import workers_for
from audit.paths import resolved_name
from audit.progress import Progress, counting
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX, header_names
from audit.tables import STORED_DELIVERIES

if TYPE_CHECKING:  # pandas is imported where a frame is built: `audit verify` never needs it
    import pandas as pd

__all__ = ["LogRows", "read_logs", "verdict_table", "verdicts_by_name", "verify_logs"]


@dataclass(frozen=True)
class LogRows:
    """Rows read from raw captures: ``rows`` (the requested columns), ``inputs`` (one row per
    file: ``source, size, sha256, records, unreadable``), ``naive_times`` and, when asked for,
    ``evidence``: ``source, line`` and :data:`audit.tables.EVIDENCE_COLUMNS` of the records
    that are not valid (what ``audit.ingest.query.not_valid_evidence`` reads from a store)."""

    rows: pd.DataFrame
    inputs: pd.DataFrame
    naive_times: int
    evidence: pd.DataFrame | None = None


def read_logs(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str] | SecretStore,
    *,
    columns: Sequence[str] = VERDICT_COLUMNS,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    workers: int | None = None,
    piece_bytes: int | None = None,
    hash_files: bool = True,
    upto: pd.Timestamp | None = None,
    evidence: bool = False,
) -> LogRows:
    """Verify raw captures on every core and keep only ``columns`` (any of the store's, see
    ``audit.tables.STORED_DELIVERIES``; the body is extracted from, never kept), in input order.

    The rows equal what the loader and the store give; bodies never leave the worker that read
    them, and no stage holds a whole file. The files' sha256 (``inputs``) are computed in a
    thread of the parent while the workers verify (empty with ``hash_files=False``). With
    ``upto``, ``rows`` leaves out the records received after it (``inputs`` still counts
    them), piece by piece, so no frame of every record is built and then filtered.
    ``secrets_path`` may be secrets already read (:class:`audit.ingest.secrets.SecretStore`). With
    ``evidence``, the bodies of the records that are not valid come back too (``evidence``,
    with each record's ``record_sha256``, the key to join it by).

    A record read from an earlier file (a partial copy of a log, a log rotated by
    ``copytruncate`` beside its copy) is counted once, where first seen, as the evidence store
    keeps it (a :class:`~audit.ingest.load.LoadWarning` says how many); a line repeated within
    one file stays two receipts. ``inputs`` still counts every record of each file.
    """
    import pandas as pd  # start-up: pandas only once a frame is built (`audit verify` never)

    from audit.ingest.scan import frame_from_arrow  # start-up: scan loads pandas

    # What finds the records seen in several files (and settles the unreadable ones' hashes).
    needed = ("record_sha256", "source", "line", "verdict", "detail") if hash_files else ()
    added = [c for c in needed if c not in columns]
    got = _read(
        logs,
        secrets_path,
        columns=[*columns, *added],
        header_prefix=header_prefix,
        tolerance_s=tolerance_s,
        workers=workers,
        piece_bytes=piece_bytes,
        hash_files=hash_files,
        upto=upto,
        evidence=evidence,
    )
    # One chunk per column (pandas copies many-chunk columns again in every filter), the pieces
    # freed as their columns are joined.
    schema, arrays = got.table.schema, got.table.columns
    got = replace(got, table=None)
    rows = frame_from_arrow(records.combine_columns(schema, arrays))
    files = got.files
    inputs = pd.DataFrame(
        {
            "source": pd.Series([resolved_name(f) for f in files], dtype="str"),
            "size": pd.Series([f.stat().st_size for f in files], dtype="int64"),
            "sha256": pd.Series(got.hashes, dtype="str"),
            "records": pd.Series([got.counts[str(f)][0] for f in files], dtype="int64"),
            "unreadable": pd.Series([got.counts[str(f)][1] for f in files], dtype="int64"),
        }
    )
    if got.naive:
        warnings.warn(_naive_message(got.naive), LoadWarning, stacklevel=2)
    proof = None if got.evidence is None else frame_from_arrow(got.evidence)
    if hash_files:
        rows, proof, inputs = _counted_once(rows, proof, inputs, files)
    if added:
        rows = rows.drop(columns=added)
    return LogRows(rows, inputs, got.naive, proof)


def _counted_once(
    rows: pd.DataFrame, proof: pd.DataFrame | None, inputs: pd.DataFrame, files: list[Path]
) -> tuple[pd.DataFrame, pd.DataFrame | None, pd.DataFrame]:
    """``rows`` (and the evidence ``proof``) with the unreadable records' ``record_sha256``
    settled (:func:`audit.ingest.identity.settle`) and without the records read from an earlier
    file (:func:`audit.ingest.identity.first_sightings`), said in one warning; ``inputs`` then
    counts each file's records without those (as a store's manifest counts the records stored
    from it)."""
    bad = (rows["verdict"] == "unreadable").to_numpy(dtype=bool, na_value=False)
    if bad.any():
        old = rows.loc[bad, "record_sha256"]
        paths = dict(zip(inputs["source"], files, strict=True))
        read = dict(zip(inputs["source"], inputs["sha256"], strict=True))
        right = settle(
            old.tolist(),
            sources=rows.loc[bad, "source"].tolist(),
            lines=[int(n) for n in rows.loc[bad, "line"]],
            details=[None if d is None or d != d else str(d) for d in rows.loc[bad, "detail"]],
            paths=paths,
            file_sha256=lambda source: stored_sha256(paths[source], read[source]),
        )
        rows.loc[bad, "record_sha256"] = old.map(right)
        if proof is not None and len(proof):
            proof["record_sha256"] = proof["record_sha256"].map(lambda v: right.get(v, v))
    if len(inputs) > 1:
        order = {s: i for i, s in enumerate(inputs["source"])}
        file_of = rows["source"].map(order).to_numpy(dtype="int64")
        keep = first_sightings(file_of, pa.array(rows["record_sha256"].to_numpy(dtype=object)))
        if not keep.all():
            warnings.warn(repeated_message(int((~keep).sum())), LoadWarning, stacklevel=3)
            rows = rows[keep].reset_index(drop=True)
            elsewhere = np.bincount(file_of[~keep], minlength=len(inputs))
            inputs = inputs.assign(records=inputs["records"] - elsewhere)
    if proof is not None:
        proof = proof.drop_duplicates("record_sha256").reset_index(drop=True)
    return rows, proof, inputs


@dataclass(frozen=True)
class _Read:
    """What :func:`_read` gives: the rows as Arrow, the files, per-file ``[records,
    unreadable]``, the files' sha256 and the naive-time count."""

    table: pa.Table
    files: list[Path]
    counts: dict[str, list[int]]
    hashes: list[str]
    naive: int
    evidence: pa.Table | None = None


def _read(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str] | SecretStore,
    *,
    columns: Sequence[str],
    header_prefix: str,
    tolerance_s: float,
    workers: int | None,
    piece_bytes: int | None,
    hash_files: bool,
    upto: pd.Timestamp | None,
    evidence: bool = False,
    progress: Progress | None = None,
) -> _Read:
    """:func:`read_logs` without pandas: the rows in the store's Arrow types."""
    files = distinct_logs(expand_paths(logs))
    tally = counting(progress)
    tally.expect_files(len(files))
    secrets = secrets_path if isinstance(secrets_path, SecretStore) else read_secrets(secrets_path)
    wanted = {v: k for k, v in header_names(header_prefix).items()}
    total = sum(f.stat().st_size for f in files)
    workers = workers_for(total, workers)
    size = piece_bytes or parallel.default_piece_bytes(total, workers)
    # JSONL is read in pieces through the fast path; every other format whole (exact path).
    whole = [format_of(f.name) is not _JSONL for f in files]
    lines = [f for f, w in zip(files, whole, strict=True) if not w]
    pieces = (p for f in lines for p in parallel.plan_pieces(f, piece_bytes=size))
    names = list(columns)
    results = parallel.map_pieces(  # closed below, however the loop ends
        parallel.verdict_batch,
        pieces,
        sources={str(f): resolved_name(f) for f in lines},
        wanted=wanted,
        secrets=secrets,
        tolerance_s=tolerance_s,
        workers=workers,
        extra={
            "names": names,
            "extract": bool(set(names) & set(EXTRACTED)),
            "evidence": evidence,
        },
    )
    by_file: dict[str, list[pa.Table]] = {str(f): [] for f in files}
    proof: dict[str, list[pa.Table]] = {str(f): [] for f in files}
    counts = {str(f): [0, 0] for f in files}
    naive = 0
    hashes = _Hashes(files, enabled=hash_files, thread=workers > 1)
    order = {str(f): i for i, f in enumerate(lines)}
    with contextlib.closing(results):
        for piece, got in results:
            hashes.start()  # after the first result: the workers are forked by then
            by_file[piece.path].append(got.table)
            proof[piece.path].append(got.evidence)
            counts[piece.path][0] += got.table.num_rows
            counts[piece.path][1] += got.unreadable
            tally.files_finished(order[piece.path])  # pieces come back in order
            tally.add_records(got.table.num_rows)
            naive += got.naive_times
            if upto is not None:
                by_file[piece.path][-1] = _received_upto(got.table, upto)
    tally.files_finished(len(lines))
    for f, w in zip(files, whole, strict=True):
        if w:
            got = _whole(f, wanted, secrets, tolerance_s, names, evidence)
            by_file[str(f)].append(got.table)
            proof[str(f)].append(got.evidence)
            counts[str(f)] = [got.table.num_rows, got.unreadable]
            tally.add_records(got.table.num_rows)
            tally.file_done()
            naive += got.naive_times
            if upto is not None:
                by_file[str(f)][-1] = _received_upto(got.table, upto)
    tables = [t for f in files for t in by_file[str(f)]]
    empty = records.stored_columns({n: [] for n in names}, names)
    table = pa.concat_tables([empty, *tables])
    kept = None
    if evidence:
        none = records.stored_columns(
            {n: [] for n in records.EVIDENCE_NAMES}, records.EVIDENCE_NAMES
        )
        kept = pa.concat_tables([none, *(t for f in files for t in proof[str(f)])])
        if upto is not None:
            kept = _received_upto(kept, upto)
        kept = kept.drop_columns(["received_at"])
    return _Read(table, files, counts, hashes.result(), naive, kept)


#: The JSONL format (read in pieces through the fast path).
_JSONL: CaptureFormat = jsonl


def _naive_message(naive: int) -> str:
    return f"{naive} received_at value(s) had no UTC offset and were read as UTC"


def verify_logs(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str],
    *,
    columns: Sequence[str] = VERDICT_COLUMNS,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    workers: int | None = None,
    piece_bytes: int | None = None,
    upto: pd.Timestamp | None = None,
    evidence: bool = False,
) -> pd.DataFrame:
    """One row per input record with the verdict columns (``VERDICT_COLUMNS``), in input order:
    the rows of ``audit_signatures(...).deliveries[VERDICT_COLUMNS]`` (see :func:`read_logs`,
    whose keywords these are).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (tmp / "log.jsonl").write_text('{"received_at": 0, "headers": {}, "body": ""}\\nx\\n')
    >>> _ = (tmp / "secrets.json").write_text('{"wh_1": [{"secret": "whsec_demo"}]}')
    >>> (tmp / "secrets.json").chmod(0o600)
    >>> verify_logs([tmp / "log.jsonl"], tmp / "secrets.json")["verdict"].tolist()
    ['missing_signature', 'unreadable']
    """
    return read_logs(
        logs,
        secrets_path,
        columns=columns,
        header_prefix=header_prefix,
        tolerance_s=tolerance_s,
        workers=workers,
        piece_bytes=piece_bytes,
        hash_files=False,
        upto=upto,
        evidence=evidence,
    ).rows


def verdict_table(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str],
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    workers: int | None = None,
    piece_bytes: int | None = None,
    progress: Progress | None = None,
) -> pa.Table:
    """:func:`verify_logs` as an Arrow table, without importing pandas (``audit verify``).

    ``progress`` counts the files as each is done and the records as each piece is verified.

    The table is ``pa.Table.from_pandas(verify_logs(...), preserve_index=False)``: the same
    columns, types, values and ``pandas`` schema metadata, so a Parquet file written from it
    equals the one written from the frame and reads back into pandas in the same dtypes.
    """
    got = _read(
        logs,
        secrets_path,
        columns=VERDICT_COLUMNS,
        header_prefix=header_prefix,
        tolerance_s=tolerance_s,
        workers=workers,
        piece_bytes=piece_bytes,
        hash_files=False,
        upto=None,
        progress=progress,
    )
    if got.naive:
        warnings.warn(_naive_message(got.naive), LoadWarning, stacklevel=2)
    return got.table.cast(STORED_DELIVERIES.pandas_schema(VERDICT_COLUMNS))


def verdicts_by_name(table: pa.Table) -> dict[str, int]:
    """How many rows of ``table`` have each ``verdict`` (missing ones not counted), for
    :func:`audit.ingest.verification.verdict_count_rows`."""
    counts = pc.value_counts(table.column("verdict")).to_pylist()
    return {c["values"]: c["counts"] for c in counts if c["values"] is not None}


def _received_upto(table: pa.Table, upto: pd.Timestamp) -> pa.Table:
    """The rows received at or before ``upto``, and those without a receipt time."""

    if "received_at" not in table.column_names or table.num_rows == 0:
        return table
    t = table.column("received_at")
    bound = pa.scalar(upto.value, pa.int64()).cast(t.type)
    keep = pc.or_kleene(pc.is_null(t), pc.less_equal(t, bound))
    return table if pc.all(keep).as_py() else table.filter(keep)


class _Hashes:
    """The files' sha256 in a background thread (``hashlib`` releases the GIL while it hashes),
    so the parent hashes while the workers verify instead of after them; with
    ``thread=False`` (no workers), in the caller's thread when the result is asked for."""

    def __init__(self, files: Iterable[Path], *, enabled: bool = True, thread: bool = True) -> None:
        self._files = list(files)
        self._enabled = enabled
        self._threaded = thread
        self._thread: threading.Thread | None = None
        self._out: list[str] = []
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._thread is None and self._enabled and self._files and self._threaded:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._out = [_sha256(f) for f in self._files]
        except BaseException as e:  # re-raised in the caller's thread
            self._error = e

    def result(self) -> list[str]:
        """One hex digest per file ('' for every file when hashing was not asked for)."""
        if not self._enabled:
            return [""] * len(self._files)
        if not self._threaded:
            return [_sha256(f) for f in self._files]
        self.start()
        if self._thread is None:
            return []
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(4 * 2**20):
            h.update(block)
    return h.hexdigest()


def _whole(
    path: Path,
    wanted: dict[str, str],
    secrets: SecretStore,
    tolerance_s: float,
    names: list[str],
    evidence: bool = False,
) -> Verdicts:
    """A file read whole (not JSONL), verified by the exact path."""
    buf = format_of(path.name).parse(records.read_whole(path), resolved_name(path), wanted)
    cols = buf.columns()
    cols["subscription_logged"] = subscription_logged(cols)
    cols.update(verify_parsed(cols, secrets, tolerance_s=tolerance_s))
    if "record_sha256" in names:  # unreadable ones settled by read_logs
        cols["record_sha256"] = record_ids(cols, unsettled(resolved_name(path))).to_pylist()
    if set(names) & set(EXTRACTED):
        cols.update(body_columns(cols["body"]))
    not_valid = records.evidence_table(cols) if evidence else None
    return Verdicts(records.stored_columns(cols, names), buf.naive_times, buf.unreadable, not_valid)
