"""The analysis stage as one call: verified deliveries -> attempts, events, incidents, takedown.

Data moves one way: files -> deliveries -> derived tables. Every function downstream of loading
is pure and takes ``as_of``; only :func:`analyze` and :func:`store_as_of` (which ingests logs
into a store first) read files, and only :meth:`Analysis.write` writes them. The analysis of a
store by the engine, where it lies, builds on this module: :mod:`audit.analysis.store_analysis`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TypedDict

import pandas as pd

from audit.analysis.deliveries import ATTEMPT_COLUMNS, events_table, infer_attempts
from audit.analysis.incidents import incidents_and_intervals
from audit.analysis.subscriptions import load_snapshots
from audit.analysis.survival import KMQuantile
from audit.analysis.survival_by import kaplan_meier_by
from audit.analysis.takedown import check_clock_start, takedown_durations, takedown_summary
from audit.atomic import Stage, staged_files, write_parquet_atomic
from audit.errors import ParameterError
from audit.ingest.extract import EXTRACTED
from audit.ingest.load import LoadWarning
from audit.ingest.query import (
    ANALYSIS_COLUMNS,
    SIDE_SHARE,
    AnalysisRead,
    latest_receipt,
    plan_analysis_read,
    read_analysis_inputs,
    read_first_receipts,
)
from audit.ingest.receipts import FirstReceipts
from audit.ingest.secrets import read_secrets
from audit.ingest.side import Pending, aside, cancelled_on_error
from audit.ingest.store import WRITTEN, Store, ingest, reverify
from audit.ingest.verdicts import read_logs
from audit.ingest.verification import VERDICT_COLUMNS
from audit.ingest.workers import threads
from audit.redaction import cut_secrets
from audit.safe import write_csv
from audit.spec import (
    CLIENT_WAIT_STATUSES,
    CLOCK_TOLERANCE_S,
    DEFAULT_HEADER_PREFIX,
    DELIVERY_TIMEOUT_MS,
)
from audit.tables import CSV_TABLES, longest_first
from audit.timeutil import as_utc

__all__ = [
    "DELIVERY_TABLE_COLUMNS",
    "Analysis",
    "DeliveryCounts",
    "IncidentCounts",
    "StoredAnalysis",
    "Takedown",
    "add_counts",
    "analyze",
    "attempts_and_events",
    "check_table_format",
    "delivery_counts",
    "incident_counts",
    "parse_as_of",
    "read_store",
    "run_analyses",
    "store_as_of",
    "table_folder",
    "takedown_analysis",
    "write_table",
]

#: The columns of the deliveries table ``audit analyze`` writes (and the controls judge).
DELIVERY_TABLE_COLUMNS: tuple[str, ...] = (*VERDICT_COLUMNS, *ATTEMPT_COLUMNS)


@dataclass(frozen=True)
class Analysis:
    """Every table of the analysis stage (see ``docs/tables.md``).

    ``deliveries`` holds the columns given to :func:`run_analyses` and the attempt columns,
    without the body fields the store extracts at ingest (:data:`audit.ingest.extract.EXTRACTED`):
    the incident fold reads those, and they live on in ``incidents``.
    """

    as_of: pd.Timestamp
    clock_start: str
    deliveries: pd.DataFrame
    events: pd.DataFrame
    incidents: pd.DataFrame
    status_intervals: pd.DataFrame
    takedown_durations: pd.DataFrame
    takedown_excluded: pd.DataFrame
    takedown_km: pd.DataFrame
    takedown_summary: pd.DataFrame
    subscriptions: pd.DataFrame
    inputs: pd.DataFrame

    def tables(self) -> dict[str, pd.DataFrame]:
        """The tables written by ``audit analyze``, by file stem."""
        return {
            "deliveries": self.deliveries[list(DELIVERY_TABLE_COLUMNS)],
            "events": self.events,
            "incidents": self.incidents,
            "status_intervals": self.status_intervals,
            "takedown_km": self.takedown_km,
            "takedown_summary": self.takedown_summary,
            "subscriptions": self.subscriptions,
        }

    def summary(self) -> dict[str, object]:
        """The figures an analyst reads first, read off the tables (nothing is refitted).

        Keys: ``as_of``, ``records``, ``valid``, ``event_outcomes`` (outcome -> count, test
        traffic left out, most frequent first), ``refused`` (valid deliveries answered 401/403),
        ``slow`` (valid deliveries answered after the delivery timeout), ``incidents``,
        ``taken_down``, ``waiting_on_client`` and ``takedown_median`` (a
        :class:`~audit.analysis.survival.KMQuantile` in hours from :attr:`takedown_summary`,
        or None without durations).
        """
        return {
            "as_of": self.as_of,
            **delivery_counts(self.deliveries, self.events),
            **incident_counts(self.incidents, self.takedown_durations, self.takedown_summary),
        }

    def write(self, out_dir: str | os.PathLike[str], *, fmt: str = "csv") -> list[Path]:
        """Write every table as ``fmt`` (``csv``: text cells neutralised; ``parquet``: typed,
        compressed, each file written whole; with ``parquet`` the small tables of
        :data:`audit.tables.CSV_TABLES` are also written as CSV); return the paths."""
        out = table_folder(out_dir, fmt)
        # Two at a time: Parquet encoding and compression release the GIL, so the big tables
        # are written side by side on two cores. All are written before any replaces its
        # namesake (a failed write leaves every previous table).
        tables = self.tables()
        sizes = {n: (t.size, fmt == "csv" or n in CSV_TABLES) for n, t in tables.items()}
        with staged_files(out) as stage, threads(2) as pool:
            done = {  # the costliest first, so that the two threads end together
                name: pool.submit(write_table, stage, name, tables[name], fmt)
                for name in longest_first(sizes)
            }
            return [stage.final(path) for name in tables for path in done[name].result()]


def check_table_format(fmt: str) -> None:
    """ParameterError unless ``fmt`` is ``csv`` or ``parquet``."""
    if fmt not in ("csv", "parquet"):
        raise ParameterError(f"table format {fmt!r}: use csv or parquet")


def table_folder(out_dir: str | os.PathLike[str], fmt: str) -> Path:
    """The folder tables are written to, created; ``fmt`` checked (:func:`check_table_format`)."""
    check_table_format(fmt)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    return out


def write_table(out: Path | Stage, name: str, table: pd.DataFrame, fmt: str) -> list[Path]:
    """Write one table as :meth:`Analysis.write` does (into a folder or a
    :class:`~audit.atomic.Stage`); return its paths."""
    path = out / f"{name}.{fmt}"
    table = cut_secrets(table)  # known secrets out: captured incident data may quote one
    if fmt == "csv":
        write_csv(table, path)
        return [path]
    write_parquet_atomic(table, path)
    if name in CSV_TABLES:  # small: also for a spreadsheet
        csv = out / f"{name}.csv"
        write_csv(table, csv)
        return [csv, path]
    return [path]


def parse_as_of(value: str | pd.Timestamp | None) -> pd.Timestamp | None:
    """An ``as_of`` argument as a UTC timestamp; a value without offset is rejected."""
    return None if value is None else as_utc(value)


class DeliveryCounts(TypedDict):
    """The summary's figures over deliveries and their events (:func:`delivery_counts`)."""

    records: int
    valid: int
    event_outcomes: dict[str, int]
    refused: int
    slow: int


class IncidentCounts(TypedDict):
    """The summary's figures over incidents (:func:`incident_counts`)."""

    incidents: int
    taken_down: int
    waiting_on_client: int
    takedown_median: KMQuantile | None


def delivery_counts(deliveries: pd.DataFrame, events: pd.DataFrame) -> DeliveryCounts:
    """The summary's figures over deliveries and their events (:meth:`Analysis.summary`):
    ``records``, ``valid``, ``event_outcomes``, ``refused`` and ``slow``. Each is a count, so
    the figures of disjoint parts add up (:func:`add_counts`)."""
    ok = (deliveries["verdict"] == "valid").fillna(False).astype(bool)
    valid = deliveries.loc[ok, ["response_ms", "response_status"]]  # two columns, not all
    outcomes = events.loc[~events["is_test"].astype(bool), "outcome"].value_counts()
    return {
        "records": len(deliveries),
        "valid": len(valid),
        "event_outcomes": _by_count({str(k): int(v) for k, v in outcomes.items()}),
        "refused": int(valid["response_status"].isin([401, 403]).sum()),
        "slow": int((valid["response_ms"] > DELIVERY_TIMEOUT_MS).sum()),
    }


def add_counts(a: DeliveryCounts, b: DeliveryCounts) -> DeliveryCounts:
    """Two :func:`delivery_counts` of disjoint deliveries added up."""
    outcomes = dict(a["event_outcomes"])
    for k, v in b["event_outcomes"].items():
        outcomes[k] = outcomes.get(k, 0) + v
    return {
        "records": a["records"] + b["records"],
        "valid": a["valid"] + b["valid"],
        "event_outcomes": _by_count(outcomes),
        "refused": a["refused"] + b["refused"],
        "slow": a["slow"] + b["slow"],
    }


def _by_count(counts: dict[str, int]) -> dict[str, int]:
    """Most frequent first, ties by name: one order however the counts were added up."""
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def incident_counts(
    incidents: pd.DataFrame, durations: pd.DataFrame, summary: pd.DataFrame
) -> IncidentCounts:
    """The summary's figures over incidents: ``incidents``, ``taken_down``,
    ``waiting_on_client`` and ``takedown_median`` (read off ``summary``, not refitted)."""
    overall = (
        summary[(summary["by"] == "all") & (summary["group"] == "all")] if len(summary) else summary
    )
    median = None
    if len(durations) and len(overall):
        r = overall.iloc[0]

        def hours(col: str) -> float | None:
            return None if pd.isna(r[col]) else float(r[col])

        median = KMQuantile(
            q=0.5,
            time=hours("median_h"),
            ci_lower=hours("median_ci_lower_h"),
            ci_upper=hours("median_ci_upper_h"),
            reached=bool(r["median_reached"]),
            level=0.95,
        )
    return {
        "incidents": len(incidents),
        "taken_down": int(incidents["taken_down"].sum()),
        "waiting_on_client": int(incidents["status"].isin(CLIENT_WAIT_STATUSES).sum()),
        "takedown_median": median,
    }


@dataclass(frozen=True)
class Takedown:
    """The incident side of an analysis: the fold and time to takedown (see :class:`Analysis`)."""

    incidents: pd.DataFrame
    status_intervals: pd.DataFrame
    durations: pd.DataFrame
    excluded: pd.DataFrame
    km: pd.DataFrame
    summary: pd.DataFrame


def takedown_analysis(
    folded: pd.DataFrame | FirstReceipts, *, as_of: pd.Timestamp, clock_start: str = "created"
) -> Takedown:
    """Fold incidents from deliveries or first receipts (taken over), then time to takedown."""
    incidents, intervals = incidents_and_intervals(folded, as_of=as_of)
    del folded
    durations, _, excluded = takedown_durations(
        incidents, as_of=as_of, start=check_clock_start(clock_start)
    )
    km = kaplan_meier_by(durations, "incident_class")
    summary = pd.concat(
        [
            takedown_summary(durations, None).assign(by="all"),
            takedown_summary(durations, "incident_class").assign(by="incident_class"),
            takedown_summary(durations, "source").assign(by="source"),
        ],
        ignore_index=True,
    )
    return Takedown(incidents, intervals, durations, excluded, km, summary)


@dataclass(frozen=True)
class StoredAnalysis:
    """An analysis's inputs read from a store (:func:`read_store`): the deliveries and their
    files, and either the first receipts for the incident fold or, when it runs beside the
    read, the pending takedown analysis made of them (the other is None)."""

    deliveries: pd.DataFrame
    inputs: pd.DataFrame
    first_receipts: FirstReceipts | None
    takedown: Pending[Takedown] | None


def read_store(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None,
    end: pd.Timestamp,
    clock_start: str | None = None,
) -> StoredAnalysis:
    """Read a period from the store (:func:`audit.ingest.query.plan_analysis_read`); with
    ``clock_start``, the takedown analysis of the first receipts (:func:`takedown_analysis`
    as of ``end``) runs in a forked process (:func:`audit.ingest.side.aside`) while this one
    reads the deliveries, on the other core. The two then hold memory at once: that is done
    only when the read needs at most :data:`audit.ingest.query.SIDE_SHARE` of the memory
    available and the process may fork (not with ``AUDIT_JOBS=1``); otherwise the first
    receipts are read here and the caller folds them. The store side only returns data."""
    read = plan_analysis_read(store, start=start, end=end)
    pending = None
    if clock_start is not None and read.share is not None and read.share <= SIDE_SHARE:
        pending = aside(partial(_takedown_of, read, clock_start))
    with cancelled_on_error(pending):
        got = read_analysis_inputs(read, first_receipts=pending is None)
    return StoredAnalysis(got.deliveries, got.inputs, got.first_receipts, pending)


def _takedown_of(read: AnalysisRead, clock_start: str) -> Takedown:
    """The takedown analysis of ``read``'s first receipts (in the forked process)."""
    return takedown_analysis(read_first_receipts(read), as_of=read.upto, clock_start=clock_start)


def attempts_and_events(
    deliveries: pd.DataFrame | list[pd.DataFrame], *, as_of: pd.Timestamp
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Attempt columns and the events table of deliveries (handed over as ``[frame]``, this
    call is the frame's only holder and frees the incident fields as soon as it can).

    Each delivery's attempt columns and each event depend only on the deliveries of its
    (subscription, event id): deliveries split by that key give the same rows part by part.
    """
    frame = deliveries.pop() if isinstance(deliveries, list) else deliveries
    frame = _without(frame, (c for c in EXTRACTED if c != "fingerprint"))
    attempts = infer_attempts(frame, as_of=as_of)
    del frame
    events = events_table(attempts, as_of=as_of)
    return _without(attempts, ("fingerprint",)), events


def run_analyses(
    deliveries: pd.DataFrame,
    *,
    as_of: pd.Timestamp,
    subscriptions: pd.DataFrame | None = None,
    inputs: pd.DataFrame | None = None,
    clock_start: str = "created",
    first_receipts: FirstReceipts | None = None,
    takedown: Pending[Takedown] | None = None,
) -> Analysis:
    """Run every analysis on verified deliveries, as of ``as_of`` (pure).

    ``first_receipts`` (from an evidence store): the incident fold reads them instead of
    ``deliveries``, which then need not carry the incident fields; they are taken over
    (emptied), and must hold no row received after ``as_of``. ``takedown``: the takedown analysis
    as of ``as_of``, under way elsewhere (:func:`read_store`'s ``takedown``).

    Records received after ``as_of`` are not yet known at ``as_of`` and are left out (unreadable
    records, which have no time, are kept). The fields extracted from the bodies at ingest
    (:data:`audit.ingest.extract.EXTRACTED`) are read by the incident fold and by the event
    grouping (``fingerprint``), and left out of ``Analysis.deliveries``: no later step reads
    them, and at 1M deliveries they are a third of the frame (freed as soon as the fold is done
    when the caller hands the frame over: ``run_analyses(load())``, not ``run_analyses(d)``).
    """
    received = deliveries["received_at"]
    known = received.isna() | (received <= as_of)
    if not known.all():  # a copy of every column only when some record is left out
        deliveries = deliveries[known]
    if takedown is None:
        # The incident fold first: its temporaries (every valid event with its incident fields)
        # then never coexist with the attempts and events frames (about 0.4 GB less at 1M).
        folded = deliveries if first_receipts is None else first_receipts
        t = takedown_analysis(folded, as_of=as_of, clock_start=clock_start)
        del folded
    held = [deliveries]
    del deliveries, received, known, first_receipts
    with cancelled_on_error(takedown):
        attempts, events = attempts_and_events(held, as_of=as_of)
    if takedown is not None:  # done beside the attempts, in another process
        t = takedown.result()
    return Analysis(
        as_of=as_of,
        clock_start=clock_start,
        deliveries=attempts,
        events=events,
        incidents=t.incidents,
        status_intervals=t.status_intervals,
        takedown_durations=t.durations,
        takedown_excluded=t.excluded,
        takedown_km=t.km,
        takedown_summary=t.summary,
        subscriptions=subscriptions if subscriptions is not None else load_snapshots([]),
        inputs=inputs if inputs is not None else pd.DataFrame(),
    )


def _without(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """``frame`` without those of ``columns`` it has (the same frame when it has none)."""
    drop = [c for c in columns if c in frame.columns]
    return frame.drop(columns=drop) if drop else frame


def analyze(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str] | None,
    *,
    snapshots: Sequence[str | os.PathLike[str]] = (),
    as_of: pd.Timestamp | str | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    clock_start: str = "created",
    store: Store | str | os.PathLike[str] | None = None,
) -> Analysis:
    """Load, verify and analyse. ``as_of`` defaults to the latest ``received_at``.

    With ``store``, the logs (if any) are first ingested into that evidence store (verified
    once; files already there are skipped) and the deliveries are read back from it, without
    bodies. ``secrets_path`` may then be None when no log is given.

    Examples
    --------
    A week of the built-in demo data (:func:`audit.demo.simulate.simulate`), 20 incidents:

    >>> import tempfile, warnings
    >>> from audit.demo.simulate import simulate
    >>> with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
    ...     demo = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     result = analyze(demo.captures, demo.secrets)
    >>> result.events["outcome"].value_counts().to_dict()
    {'delivered': 268, 'exhausted': 26}
    >>> {k: v for k, v in result.summary().items() if k in ("records", "valid", "incidents")}
    {'records': 464, 'valid': 453, 'incidents': 20}
    """
    when = parse_as_of(as_of)
    # The secrets first: once read they are known, and cut out of a listing that quotes one.
    secrets = None if secrets_path is None else read_secrets(secrets_path)
    subs = load_snapshots(snapshots) if snapshots else None  # a bad one is told before the read
    first: FirstReceipts | None = None
    ahead: Pending[Takedown] | None = None
    if store is not None:
        # One Store object for every read below: each part is checked against its sha256 once.
        store = store if isinstance(store, Store) else Store(Path(store))
        when = store_as_of(
            logs, secrets_path, store, when, header_prefix=header_prefix, tolerance_s=tolerance_s
        )
        stored = read_store(store, start=None, end=when, clock_start=clock_start)
        deliveries, inputs = stored.deliveries, stored.inputs
        first, ahead = stored.first_receipts, stored.takedown
        del stored  # no second reference: the frame below replaces it, not doubles it
    elif secrets is None:
        raise ParameterError("give --secrets to verify the logs")
    else:  # verified on every core; bodies are read for what analyses need, never kept
        read = read_logs(
            logs,
            secrets,  # read once, above
            columns=ANALYSIS_COLUMNS,
            header_prefix=header_prefix,
            tolerance_s=tolerance_s,
            upto=when,
        )
        deliveries, inputs = read.rows, read.inputs
        del read  # no second reference: the frame below replaces it, not doubles it
    if when is None:
        latest = deliveries["received_at"].max()
        if pd.isna(latest):
            raise ParameterError("no readable record: give --as-of")
        when = latest
    received = deliveries["received_at"]
    later = (received > when).fillna(False).to_numpy(dtype=bool)
    if later.any():  # left out here (as run_analyses would), so the full frame can be freed
        deliveries = deliveries[~later]
    held = [deliveries]  # handed over: run_analyses, its only holder, frees what it is done with
    del deliveries, received
    return run_analyses(
        held.pop(),
        as_of=when,
        subscriptions=subs,
        inputs=inputs,
        clock_start=clock_start,
        first_receipts=first,
        takedown=ahead,
    )


def store_as_of(
    logs: Iterable[str | os.PathLike[str]],
    secrets_path: str | os.PathLike[str] | None,
    store: Store | str | os.PathLike[str],
    as_of: pd.Timestamp | None,
    *,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> pd.Timestamp:
    """Ingest ``logs`` (if any) into ``store``; return ``as_of``, by default its latest receipt.

    Without logs, ``secrets_path`` verifies again the stored records whose secrets changed
    (:func:`audit.ingest.store.reverify`: nothing is written when none did, so a store this
    user cannot write is read); a :class:`~audit.ingest.load.LoadWarning` says what was
    written. The first step of an analysis of a store, in one pass (:func:`analyze`) or in
    many (:func:`audit.analysis.store_analysis.analyze_store`).
    """
    logs = list(logs)
    folder = store.root if isinstance(store, Store) else store
    if logs:
        if secrets_path is None:
            raise ParameterError("give --secrets to ingest logs into the store")
        ingest(logs, secrets_path, folder, header_prefix=header_prefix, tolerance_s=tolerance_s)
    elif secrets_path is not None:
        again = reverify(folder, secrets_path, header_prefix=header_prefix, tolerance_s=tolerance_s)
        for line in [] if again is None else [*again.messages, WRITTEN]:
            warnings.warn(f"{folder}: {line}", LoadWarning, stacklevel=2)
    if as_of is None:
        as_of = latest_receipt(store)
        if as_of is None:
            raise ParameterError("no readable record: give --as-of")
    return as_of
