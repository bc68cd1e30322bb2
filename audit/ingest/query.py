"""Reading the evidence store with DuckDB: only the partitions and columns a job needs.

The parts come from the store manifest (a consistent view, even while an ingest runs); DuckDB
reads them out of core on every core and hands Arrow to pandas. Rows come back in input order
(``source``, ``line``), the order :func:`audit.ingest.load.load_captures` gives. A row is joined
to others by its ``record_sha256``, never by ``source`` and ``line``: those say where a record
was first seen, and a rotated or truncated log repeats them (``docs/scale.md``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

import audit.memory
from audit.errors import ParameterError
from audit.ingest.receipts import FOLD_FIELDS, FirstReceipts, load_first_receipts
from audit.ingest.scan import (
    arrow_of,
    frame_from_arrow,
    months_between,
    open_store,
    parts_read,
    pinned_store,
    scan,
    sql_list,
    window,
)
from audit.ingest.store import Store
from audit.ingest.store_folder import DATASET
from audit.paths import source_name
from audit.tables import EVIDENCE_COLUMNS, STORED_DELIVERIES
from audit.timeutil import as_utc

__all__ = [
    "ANALYSIS_COLUMNS",
    "ATTEMPT_LOOKBACK",
    "DELIVERY_COLUMNS",
    "AnalysisRead",
    "StoreInputs",
    "check_memory",
    "frame_from_arrow",
    "latest_receipt",
    "load_analysis_inputs",
    "load_deliveries",
    "load_first_receipts",
    "not_valid_evidence",
    "plan_analysis_read",
    "read_analysis_inputs",
    "read_first_receipts",
    "store_inputs",
]

#: What the analyses read: every stored column except the raw body, the signature headers
#: (verified already) and the store's own bookkeeping; with ``record_sha256``, what a record is
#: known by: readers join rows to their evidence by it, never by ``source`` and ``line``
#: (a rotated or truncated log, or two receivers' same-named files, repeat those).
_NOT_ANALYSED = (
    "body",
    "signature",
    "timestamp_header",
    "event_header",
    "file_sha256",
    "subscription_logged",
)
ANALYSIS_COLUMNS: tuple[str, ...] = tuple(
    n for n in STORED_DELIVERIES.names if n not in _NOT_ANALYSED
)
#: What the analyses read with every delivery when the incident fold reads first receipts
#: (:func:`load_first_receipts`): not the body's hash nor the incident fields (half the frame).
DELIVERY_COLUMNS: tuple[str, ...] = tuple(n for n in ANALYSIS_COLUMNS if n not in FOLD_FIELDS)
#: How far before the period the incident fold looks by default: incidents live for weeks,
#: and their fold needs their earlier events (:func:`load_first_receipts`).
DEFAULT_LOOKBACK = pd.Timedelta(days=92)
#: How far before the period the deliveries (attempts) are read: a retry chain spans at most
#: 73 minutes (:data:`audit.spec.RETRY_DELAYS_S` plus the timeouts), so a day holds the start of
#: every chain that reaches into the period.
ATTEMPT_LOOKBACK = pd.Timedelta(days=1)


@dataclass(frozen=True)
class StoreInputs:
    """What an :class:`audit.analysis.Analysis` needs: deliveries, the files behind them, and
    the incident fold's first receipts (None when not asked for: :func:`read_analysis_inputs`)."""

    deliveries: pd.DataFrame
    inputs: pd.DataFrame
    first_receipts: FirstReceipts | None = None


@dataclass(frozen=True)
class AnalysisRead:
    """What an analysis of a period reads from a store (:func:`plan_analysis_read`): the store
    (one pinned view), the end of the read (``upto``), where the deliveries (``since``), the
    first receipts (``receipts_from``) and the incidents' history (``history_from``) start
    (None: from the first), and ``share``, the share of the available memory the read needs
    (None when unknown; :func:`check_memory`)."""

    store: Store
    upto: pd.Timestamp
    since: pd.Timestamp | None
    receipts_from: pd.Timestamp | None
    history_from: pd.Timestamp | None
    share: float | None


def _source_order(store: Store, parts: list[Path]) -> list[Path]:
    """``parts`` ordered by their file's path, then as the manifest lists them (ingest order)."""
    rank: dict[Path, tuple[str, int]] = {}
    for entry in store.manifest()["files"]:
        for k, part in enumerate(entry["parts"]):
            rank[store.root / DATASET / part["name"]] = (entry["path"], k)
    return sorted(parts, key=lambda p: rank.get(p, ("", 0)))


def load_deliveries(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
    columns: tuple[str, ...] | list[str] = ANALYSIS_COLUMNS,
    files: list[str] | None = None,
    paths: list[str] | None = None,
    history_from: pd.Timestamp | None = None,
    part: tuple[int, int] | None = None,
    frugal: bool = True,
) -> pd.DataFrame:
    """Stored deliveries received in ``[start, end]`` (either end open when None), plus every
    unreadable record that has no receipt time, in input order.

    ``files`` keeps only the records of these file sha256s, ``paths`` only those of these
    ingested files (resolved paths). Only the months touched and the named columns are read.

    ``history_from`` (before ``start``): also the rows received from it that the analyses of
    ``[start, end]`` read as if everything were loaded: the earlier valid receipts of each
    (subscription, event id) received in the window (an event's attempts and first receipt),
    and every row of a file that has unreadable lines (a period places those lines by their
    file's receipt times, :func:`audit.findings.controls.base.untimed_in_period`).

    ``part=(k, n)`` keeps the k-th of n parts split by (subscription, event id): every row of
    one such pair is in the same part; the rows without an event id (each on its own for every
    analysis) are split by (source, line).
    ``frugal=False`` reads faster and holds the rows twice at once
    (:func:`audit.ingest.scan.scan`).
    """
    start = None if start is None else as_utc(start, name="start")
    end = None if end is None else as_utc(end, name="end")
    s = open_store(store)
    first = start if history_from is None or start is None else min(start, history_from)
    months = None
    if first is not None and end is not None:
        months = [*months_between(first, end), "none"]
    parts = _source_order(s, s.parts(months, paths))
    columns = list(columns)
    for c in ("source", "line"):
        if c not in columns:
            columns.append(c)
    if not parts:
        return STORED_DELIVERIES.empty()[list(columns)]
    cond, params = window(start, end)
    if history_from is not None and start is not None and history_from < start:
        cond, params = _with_history(parts, cond, params, as_utc(history_from), end)
    sql_where = f"WHERE {cond}" if params else ""
    if files is not None:
        keep = f"list_contains({sql_list(files)}, file_sha256)" if files else "FALSE"
        sql_where += (" AND " if sql_where else "WHERE ") + keep
    if part is not None:
        sql_where += (" AND " if sql_where else "WHERE ") + _part_of(*part)
    return frame_from_arrow(scan(parts, columns, sql_where, params, frugal=frugal, store=s))


def _part_of(k: object, n: object) -> str:
    """The SQL condition of :func:`load_deliveries`' ``part=(k, n)`` (checked: any values may
    come)."""
    if not (isinstance(k, int) and isinstance(n, int) and 0 <= k < n):
        raise ValueError(f"part {k} of {n}: need 0 <= k < n")
    pair = "hash(coalesce(subscription_id, chr(0)), event_id)"
    return f"(CASE WHEN event_id IS NULL THEN hash(source, line) ELSE {pair} END) % {n} = {k}"


def _with_history(
    parts: list[Path],
    cond: str,
    params: list[int],
    history_from: pd.Timestamp,
    end: pd.Timestamp | None,
) -> tuple[str, list[int]]:
    """``cond`` (the window) widened to the earlier rows :func:`load_deliveries` describes."""
    src = f"read_parquet({sql_list(parts)}, hive_partitioning = false)"
    since, since_params = window(history_from, end)
    pair = "coalesce(subscription_id, chr(0)), event_id"
    widened = (
        f"({cond} OR (received_at IS NOT NULL AND {since} AND ("
        f"(verdict = 'valid' AND ({pair}) IN (SELECT {pair} FROM {src} "
        f"WHERE verdict = 'valid' AND event_id IS NOT NULL AND {cond})) "
        f"OR source IN (SELECT source FROM {src} WHERE received_at IS NULL))))"
    )
    return widened, [*params, *since_params, *params]


def not_valid_evidence(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
) -> pd.DataFrame:
    """``source, line``, :data:`EVIDENCE_COLUMNS` and ``record_sha256`` (the key to join them
    by) of every record that is not ``valid``, received in ``[start, end]`` (as
    :func:`load_deliveries`): few rows, bodies included."""
    s = open_store(store)
    months = None if start is None or end is None else [*months_between(start, end), "none"]
    parts = _source_order(s, s.parts(months))
    columns = ["source", "line", *EVIDENCE_COLUMNS, "record_sha256"]
    if not parts:
        return STORED_DELIVERIES.empty()[columns]
    where, params = ["verdict <> 'valid'"], []
    for op, bound in ((">=", start), ("<=", end)):
        if bound is not None:
            where.append(f"(received_at IS NULL OR epoch_ns(received_at) {op} ?)")
            params.append(bound.value)
    where_sql = "WHERE " + " AND ".join(where)
    return frame_from_arrow(scan(parts, columns, where_sql, params, store=s))


def latest_receipt(store: Store | str | os.PathLike[str]) -> pd.Timestamp | None:
    """The newest ``received_at`` in the store (None when it holds no readable record)."""
    s = open_store(store)
    parts = [p for p in s.parts() if p.parent.name != "month=none"]
    if not parts:
        return None
    with parts_read(parts) as con:
        sql = f"SELECT max(received_at) FROM read_parquet({sql_list(parts)})"
        value = arrow_of(con.sql(sql)).column(0)[0].as_py()
    return None if value is None else pd.Timestamp(value).tz_convert("UTC")


def store_inputs(store: Store | str | os.PathLike[str]) -> pd.DataFrame:
    """One row per stored file: ``source, size, sha256, records, unreadable``."""
    entries = open_store(store).manifest()["files"]
    return pd.DataFrame(
        {
            "source": pd.Series([source_name(e["path"]) for e in entries], dtype="str"),
            "size": pd.Series([e["size"] for e in entries], dtype="int64"),
            "sha256": pd.Series([e["sha256"] for e in entries], dtype="str"),
            "records": pd.Series([e["records"] for e in entries], dtype="int64"),
            "unreadable": pd.Series([e["unreadable"] for e in entries], dtype="int64"),
        }
    )


def load_analysis_inputs(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None,
    end: pd.Timestamp,
    as_of: pd.Timestamp | None = None,
    lookback: pd.Timedelta | None = DEFAULT_LOOKBACK,
    attempt_lookback: pd.Timedelta | None = ATTEMPT_LOOKBACK,
) -> StoreInputs:
    """The frames :func:`audit.analysis.run_analyses` needs for a period, from the store:
    :func:`read_analysis_inputs` of :func:`plan_analysis_read`.

    Reads up to ``as_of`` (default ``end``), without bodies: the deliveries received from
    ``start - attempt_lookback``, without the incident fields (:data:`DELIVERY_COLUMNS`), and
    for the incident fold the first receipt of each event received from ``start - lookback``
    (:func:`load_first_receipts`). Either reads everything before when ``start`` or its
    lookback is None.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from audit.ingest.store import ingest
    >>> tmp = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (tmp / "log.jsonl").write_text(
    ...     '{"received_at": "2026-10-02T00:00:00Z", "headers": {}, "body": "{}"}\\n')
    >>> _ = (tmp / "secrets.json").write_text('{"wh_1": [{"secret": "whsec_demo"}]}')
    >>> (tmp / "secrets.json").chmod(0o600)
    >>> _ = ingest([tmp / "log.jsonl"], tmp / "secrets.json", tmp / "store", workers=1)
    >>> got = load_analysis_inputs(tmp / "store", start=pd.Timestamp("2026-10-01", tz="UTC"),
    ...                            end=pd.Timestamp("2026-11-01", tz="UTC"))
    >>> got.deliveries["verdict"].tolist(), got.inputs["records"].tolist()
    (['missing_signature'], [1])

    The frames then go to :func:`audit.analysis.run_analyses` (``deliveries``, ``inputs=``,
    ``first_receipts=``).
    """
    read = plan_analysis_read(
        store,
        start=start,
        end=end,
        as_of=as_of,
        lookback=lookback,
        attempt_lookback=attempt_lookback,
    )
    return read_analysis_inputs(read)


def plan_analysis_read(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None,
    end: pd.Timestamp,
    as_of: pd.Timestamp | None = None,
    lookback: pd.Timedelta | None = DEFAULT_LOOKBACK,
    attempt_lookback: pd.Timedelta | None = ATTEMPT_LOOKBACK,
) -> AnalysisRead:
    """What :func:`load_analysis_inputs` reads (its parameters), with the memory it needs
    checked before anything is read (:func:`check_memory`); nothing is read yet."""
    upto = as_utc(end, name="end") if as_of is None else as_utc(as_of)
    start = None if start is None else as_utc(start, name="start")
    pinned = pinned_store(store)  # one view, each part's sha256 checked once
    back = None if start is None or lookback is None else start - lookback
    since = None if start is None or attempt_lookback is None else start - attempt_lookback
    share = check_memory(pinned, deliveries_from=since, receipts_from=back, end=upto)
    return AnalysisRead(pinned, upto, since, back, back, share)


def read_first_receipts(read: AnalysisRead) -> FirstReceipts:
    """The incident fold's input for ``read``: the first receipt of each event
    (:func:`load_first_receipts`)."""
    return load_first_receipts(read.store, start=read.receipts_from, end=read.upto)


def read_analysis_inputs(read: AnalysisRead, *, first_receipts: bool = True) -> StoreInputs:
    """The deliveries, files and (unless ``first_receipts=False``: the caller reads them with
    :func:`read_first_receipts`, elsewhere) the first receipts of ``read``."""
    # The first receipts first: DuckDB's pick of them needs memory while it runs.
    first = read_first_receipts(read) if first_receipts else None
    deliveries = load_deliveries(
        read.store,
        start=read.since,
        end=read.upto,
        columns=DELIVERY_COLUMNS,
        history_from=read.history_from,
        frugal=read.share is None or read.share > PLAIN_SHARE,
    )
    return StoreInputs(deliveries, store_inputs(read.store), first)


#: The largest share of the available memory a read may need for the incident fold to run in
#: a process of its own beside it (:func:`audit.analysis.analyze.read_store`): at 1.64M
#: deliveries the two processes together peak about 11 % above the read done in one.
SIDE_SHARE = 2 / 3


#: The largest share of the available memory a read may need to be read the fast way, holding
#: its rows twice at once (``frugal=False`` of :func:`load_deliveries`): +230 MB, against
#: 0.8 s less, for a month of 1M deliveries.
PLAIN_SHARE = 1 / 3


#: Bytes an analysis holds at its peak per delivery it reads, and per row of the months its
#: incidents' history reads: fitted on two measured reports of the same month of 1M deliveries,
#: alone in its store (1,468 MiB) and in a four-month store (1,911 MiB), less the 250 MiB of the
#: process itself ("Fifteenth pass" of ``docs/scale.md``, in git history); plus 72 per delivery
#: for ``record_sha256``, read with every delivery since (issue 44: its string column holds 72
#: bytes a row; added to the fit, not measured in a whole report again).
BYTES_PER_DELIVERY, BYTES_PER_HISTORY_ROW = 1150 + 72, 150


def _covered(month: str, since: pd.Timestamp, end: pd.Timestamp) -> float:
    """The share of ``month`` (``YYYY-MM``) that lies within ``[since, end]``."""
    try:
        first = pd.Timestamp(f"{month}-01", tz="UTC")
    except ValueError:
        return 1.0  # not a month's name: counted whole
    last = first + pd.offsets.MonthBegin(1)
    inside = min(last, end) - max(first, since)
    return max(0.0, min(1.0, inside / (last - first)))


def check_memory(
    store: Store | str | os.PathLike[str],
    *,
    deliveries_from: pd.Timestamp | None,
    receipts_from: pd.Timestamp | None,
    end: pd.Timestamp,
) -> float | None:
    """ParameterError, before anything is read, when reading ``[deliveries_from, end]`` (and
    the incidents' history from ``receipts_from``) at once would need more memory than this
    machine has available (:func:`audit.memory.available_memory`); ``AUDIT_MEMORY_CHECK=off``
    skips the check (never the estimate). Returns the share of the available memory the read
    needs (None when the available memory is unknown).

    The rows are counted from the store's manifest: the records of each month's parts, times
    the share of the month read (a month's records taken as spread evenly over it), weighed
    with :data:`BYTES_PER_DELIVERY` and :data:`BYTES_PER_HISTORY_ROW`. A period that is refused
    may still be analysed by the engine where it lies: ``audit analyze --store DIR``.
    """
    free = audit.memory.available_memory()  # looked up now: tests replace it
    if free is None:
        return None
    s = open_store(store)

    by_month: dict[str, float] = {}
    for entry in s.manifest()["files"]:  # a format-1 file's records split over its parts
        for part in entry["parts"]:
            month = part["name"].split("/")[0].removeprefix("month=")
            n = part["rows"] if part["rows"] is not None else entry["records"] / len(entry["parts"])
            by_month[month] = by_month.get(month, 0.0) + n

    def rows(since: pd.Timestamp | None, extra: tuple[str, ...]) -> int:
        total = 0.0
        for month, n in by_month.items():
            if month in extra or since is None:
                total += n
            elif month != "none":
                total += n * _covered(month, since, end)
        return round(total)

    deliveries = rows(deliveries_from, ("none",))
    history = rows(receipts_from, ())
    need = deliveries * BYTES_PER_DELIVERY + history * BYTES_PER_HISTORY_ROW
    off = os.environ.get("AUDIT_MEMORY_CHECK", "").strip().lower() in ("off", "0", "no")
    if need > free and not off:
        gb = 1024**3
        raise ParameterError(
            f"{s.root}: reading {deliveries:,} deliveries at once (and {history:,} rows of "
            f"the incidents' history) needs about {need / gb:.1f} GiB, and {free / gb:.1f} GiB "
            "of memory is available: give a shorter period, or use `audit analyze --store "
            "DIR`, which holds no table whole (set AUDIT_MEMORY_CHECK=off to try anyway)"
        )
    return need / max(free, 1)
