"""``audit analyze --store``: every table of a store's analysis, written in bounded memory.

A store can hold more deliveries than memory (a year of a large client: 12M). The incident
fold reads one first receipt per event (:func:`audit.ingest.query.load_first_receipts`), so it
runs once over everything; the deliveries and events tables are then built in passes, each
over the deliveries of a share of the (subscription, event id) pairs. An attempt's columns and
an event's row depend only on the deliveries of its pair, so the passes give the rows a single
pass gives; each pass's rows are appended to the table files and freed before the next pass.

The tables are those of :meth:`audit.analysis.analyze.Analysis.write`. With more than one pass
the deliveries table holds its rows pass by pass (each pass in input order) and the events
table likewise (each pass in key order); sorted, they equal the single pass's tables.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import duckdb
import pandas as pd
import pyarrow as pa

from audit.analysis.analyze import (
    DELIVERY_TABLE_COLUMNS,
    Analysis,
    DeliveryCounts,
    add_counts,
    analyze,
    attempts_and_events,
    check_table_format,
    delivery_counts,
    incident_counts,
    parse_as_of,
    store_as_of,
    table_folder,
    takedown_analysis,
    write_table,
)
from audit.analysis.subscriptions import load_snapshots
from audit.atomic import (
    PARQUET_GROUP_ROWS,
    Stage,
    atomic_output,
    output_error,
    parquet_writer,
    staged_files,
)
from audit.errors import InputError, OutputError, ParameterError
from audit.ingest.query import DELIVERY_COLUMNS, load_deliveries, load_first_receipts, store_inputs
from audit.ingest.scan import check_pinned, pinned_store
from audit.ingest.store import Store
from audit.memory import release_free_memory
from audit.safe import write_csv_rows
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX

if TYPE_CHECKING:
    import pyarrow.parquet as pq

__all__ = ["ROWS_PER_PASS", "StoreAnalysis", "analyze_store", "passes_for"]

#: Deliveries read per pass at most (on average: the pairs are split by hash). A pass of a
#: million peaks at about 1.4 GiB ("Twelfth pass" of ``docs/scale.md``, in git history), within
#: the 2 GiB of a month's report; passes cost little time (each reads the store's key columns
#: once more).
ROWS_PER_PASS = 1_000_000


@dataclass(frozen=True)
class StoreAnalysis:
    """What :func:`analyze_store` wrote: the files, the passes, and the summary's figures."""

    as_of: pd.Timestamp
    clock_start: str
    passes: int
    paths: list[Path] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """The figures of :meth:`audit.analysis.analyze.Analysis.summary`, over every pass."""
        return {"as_of": self.as_of, **self.figures}


#: The most passes :func:`passes_for` allows (each pass reads the store's deliveries again).
MAX_PASSES = 1000


def passes_for(records: int, rows_per_pass: int = ROWS_PER_PASS) -> int:
    """How many passes read ``records`` deliveries, ``rows_per_pass`` at most each (at least 1;
    more than :data:`MAX_PASSES` is a :class:`~audit.errors.ParameterError` saying what to give).

    >>> passes_for(0), passes_for(1_000_000), passes_for(1_000_001), passes_for(12_000_000)
    (1, 1, 2, 12)
    """
    rows_per_pass = _whole_from_1(rows_per_pass)
    n = max(1, math.ceil(records / rows_per_pass))
    if n > MAX_PASSES:  # every pass reads the store again: a typo would run for hours
        least = math.ceil(records / MAX_PASSES)
        raise ParameterError(
            f"rows per pass {rows_per_pass:,}: {records:,} deliveries would take {n:,} passes "
            f"(at most {MAX_PASSES:,}, each reads the store); give at least {least:,}"
        )
    return n


def _whole_from_1(rows_per_pass: object) -> int:
    """``rows_per_pass`` (any object: a caller may have no type checker) if it is an int from 1,
    else a ParameterError."""
    if not isinstance(rows_per_pass, int) or isinstance(rows_per_pass, bool) or rows_per_pass < 1:
        raise ParameterError(f"rows per pass {rows_per_pass!r}: give a whole number from 1")
    return rows_per_pass


def analyze_store(
    store: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    logs: Iterable[str | os.PathLike[str]] = (),
    secrets_path: str | os.PathLike[str] | None = None,
    snapshots: Sequence[str | os.PathLike[str]] = (),
    as_of: pd.Timestamp | str | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    clock_start: str = "created",
    fmt: str = "parquet",
    rows_per_pass: int = ROWS_PER_PASS,
) -> StoreAnalysis:
    """Analyse everything in ``store`` up to ``as_of`` and write the tables into ``out_dir``.

    ``logs`` (with ``secrets_path``) are ingested first. One pass when the store holds at most
    ``rows_per_pass`` records: the tables of :func:`audit.analysis.analyze.analyze`. Otherwise
    the incident fold runs once and the deliveries and events in passes (see the module).

    Examples
    --------
    A week of the built-in demo data (:func:`audit.demo.simulate.simulate`: 464 records),
    ingested, then analysed 200 records a pass:

    >>> import tempfile, warnings
    >>> from audit.demo.simulate import simulate
    >>> with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
    ...     demo = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     done = analyze_store(
    ...         Path(folder, "store"), Path(folder, "tables"), logs=demo.captures,
    ...         secrets_path=demo.secrets, rows_per_pass=200)
    >>> done.passes, [p.name for p in done.paths][:2]
    (3, ['deliveries.parquet', 'events.parquet'])
    """
    check_table_format(fmt)
    when = parse_as_of(as_of)
    when = store_as_of(
        logs, secrets_path, store, when, header_prefix=header_prefix, tolerance_s=tolerance_s
    )
    pinned = pinned_store(store)  # every read below sees the store as it is now
    inputs = store_inputs(pinned)
    n = passes_for(int(inputs["records"].sum()), rows_per_pass)
    table_folder(out_dir, fmt)  # created once the inputs are known to be readable
    if n == 1:
        a = analyze(
            [], None, snapshots=snapshots, as_of=when, clock_start=clock_start, store=pinned
        )
        return StoreAnalysis(when, clock_start, 1, a.write(out_dir, fmt=fmt), _figures(a))
    return _in_passes(pinned, Path(out_dir), n, when, snapshots, clock_start, fmt)


def _figures(a: Analysis) -> dict[str, object]:
    s = a.summary()
    del s["as_of"]
    return s


def _in_passes(
    store: Store,
    out: Path,
    n: int,
    when: pd.Timestamp,
    snapshots: Sequence[str | os.PathLike[str]],
    clock_start: str,
    fmt: str,
) -> StoreAnalysis:
    """The tables of ``store`` in ``n`` passes (:func:`analyze_store`)."""
    t = takedown_analysis(
        load_first_receipts(store, start=None, end=when), as_of=when, clock_start=clock_start
    )
    subs = load_snapshots(snapshots)
    small = {
        "incidents": t.incidents,
        "status_intervals": t.status_intervals,
        "takedown_km": t.km,
        "takedown_summary": t.summary,
        "subscriptions": subs,
    }
    with staged_files(out) as stage:  # no table replaced before all are written
        counts = _passes(stage, store, n, when, fmt)
        paths = [out / f"deliveries.{fmt}", out / f"events.{fmt}"]
        for name, table in small.items():
            paths += [stage.final(p) for p in write_table(stage, name, table, fmt)]
    figures: dict[str, object] = {
        **(counts or {}),
        **incident_counts(t.incidents, t.durations, t.summary),
    }
    return StoreAnalysis(when, clock_start, n, paths, figures)


def _passes(
    out: Stage, store: Store, n: int, when: pd.Timestamp, fmt: str
) -> DeliveryCounts | None:
    """Write the deliveries and events tables of ``store`` into ``out`` in ``n`` passes; return
    their summary counts, added up."""
    counts: DeliveryCounts | None = None
    with contextlib.ExitStack() as stack:
        rows = _Sink(stack, out / f"deliveries.{fmt}", fmt)
        events_out = _Sink(stack, out / f"events.{fmt}", fmt)
        for k in range(n):
            attempts, events = _one_pass(store, when, k, n)
            got = delivery_counts(attempts, events)
            counts = got if counts is None else add_counts(counts, got)
            rows.add(attempts[list(DELIVERY_TABLE_COLUMNS)])
            del attempts
            events_out.add(events)
            del events
            release_free_memory()
        rows.close()
        events_out.close()
    return counts


def _one_pass(
    store: Store, when: pd.Timestamp, k: int, n: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Attempts and events of the ``k``-th of ``n`` parts of the pinned ``store``.

    Runs while the table files are open: a failure to read is said of the store (InputError),
    not of the file being written."""
    check_pinned(store)
    try:
        part = [load_deliveries(store, end=when, columns=DELIVERY_COLUMNS, part=(k, n))]
    except duckdb.Error:
        check_pinned(store)  # a part replaced between the check and the read
        raise
    except OSError as e:
        reason = e.strerror or type(e).__name__
        raise InputError(f"{store.root}: cannot be read ({reason})") from None
    return attempts_and_events(part, as_of=when)


class _Sink:
    """One table file written part by part (renamed into place when the stack closes whole)."""

    def __init__(self, stack: contextlib.ExitStack, path: Path, fmt: str) -> None:
        self.path, self.fmt = path, fmt
        binary = fmt == "parquet"
        self._f = stack.enter_context(
            atomic_output(path, binary=binary, newline=None if binary else "")
        )
        self._writer: pq.ParquetWriter | None = None
        self._parts = 0
        stack.callback(self.close)  # before the file closes, also when a pass fails

    def add(self, frame: pd.DataFrame) -> None:
        """Append ``frame``'s rows (the first part sets the columns and their types)."""
        try:
            self._add(frame)
        except OutputError:
            raise
        except OSError as e:  # said of this file, not of the last one opened
            raise output_error(self.path, e) from None
        self._parts += 1

    def _add(self, frame: pd.DataFrame) -> None:
        if self.fmt == "csv":
            write_csv_rows(frame, self._f, header=self._parts == 0)
        else:
            table = pa.Table.from_pandas(frame, preserve_index=False)
            if self._writer is None:
                self._writer = parquet_writer(self._f, table.schema)
            else:
                table = table.cast(self._writer.schema)
            self._writer.write_table(table, row_group_size=PARQUET_GROUP_ROWS)

    def close(self) -> None:
        """Finish the file's footer (Parquet); the stack then renames it into place."""
        if self._writer is not None:
            writer, self._writer = self._writer, None
            writer.close()
