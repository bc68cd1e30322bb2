"""``audit analyze --store``: every table of a store's analysis, computed by the engine where
the store lies.

The deliveries and events tables are rules (:mod:`audit.analysis.engine`) over the store's
parts, read where they lie (:mod:`audit.analysis.sources`) by DuckDB in this process, or by
Spark (``engine="spark"``): their rows are written batch by batch as the engine makes them, so no
table of a year is held whole (the engine spills to disk what it must sort). The incident tables
(one row per incident) come from the fold of the first receipts
(:func:`audit.analysis.analyze.takedown_analysis`), small enough to hold.

The tables are those of :meth:`audit.analysis.analyze.Analysis.write`, with the same rows in the
same order: the deliveries in input order, the events by subscription then event id.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa

from audit.analysis import engine
from audit.analysis.analyze import (
    DELIVERY_TABLE_COLUMNS,
    DeliveryCounts,
    add_counts,
    check_table_format,
    delivery_counts,
    incident_counts,
    parse_as_of,
    store_as_of,
    table_folder,
    takedown_analysis,
    write_table,
)
from audit.analysis.deliveries import attempts_rule, events_rule
from audit.analysis.engine import frame_of
from audit.analysis.schedule import Tolerance
from audit.analysis.sources import deliveries_rule, store_sources
from audit.analysis.subscriptions import load_snapshots
from audit.atomic import (
    PARQUET_GROUP_ROWS,
    Stage,
    atomic_output,
    output_error,
    parquet_writer,
    staged_files,
)
from audit.errors import OutputError, ParameterError
from audit.ingest.query import load_first_receipts
from audit.ingest.scan import pinned_store
from audit.redaction import cut_secrets
from audit.safe import write_csv_rows
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX
from audit.tables import ATTEMPTS, DELIVERIES, EVENTS

if TYPE_CHECKING:
    import ibis.expr.types as ir
    import pyarrow.parquet as pq

__all__ = ["StoreAnalysis", "analyze_store", "deliveries_table_rule", "events_table_rule"]


@dataclass(frozen=True)
class StoreAnalysis:
    """What :func:`analyze_store` wrote: the files and the summary's figures."""

    as_of: pd.Timestamp
    clock_start: str
    engine: str
    paths: list[Path] = field(default_factory=list)
    figures: dict[str, object] = field(default_factory=dict)

    def summary(self) -> dict[str, object]:
        """The figures of :meth:`audit.analysis.analyze.Analysis.summary`."""
        return {"as_of": self.as_of, **self.figures}


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
    on: str = "duckdb",
) -> StoreAnalysis:
    """Analyse everything in ``store`` up to ``as_of`` and write the tables into ``out_dir``,
    the deliveries and events computed by the engine ``on`` (``duckdb`` or ``spark``).

    ``logs`` (with ``secrets_path``) are ingested first.

    Examples
    --------
    A week of the built-in demo data (:func:`audit.demo.simulate.simulate`: 464 records):

    >>> import tempfile, warnings
    >>> from audit.demo.simulate import simulate
    >>> with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
    ...     demo = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     done = analyze_store(
    ...         Path(folder, "store"), Path(folder, "tables"), logs=demo.captures,
    ...         secrets_path=demo.secrets)
    >>> done.summary()["records"], [p.name for p in done.paths][:2]
    (464, ['deliveries.parquet', 'events.parquet'])
    """
    check_table_format(fmt)
    if on not in engine.ENGINES:
        raise ParameterError(f"engine must be one of {', '.join(engine.ENGINES)}, got {on!r}")
    when = parse_as_of(as_of)
    when = store_as_of(
        logs, secrets_path, store, when, header_prefix=header_prefix, tolerance_s=tolerance_s
    )
    pinned = pinned_store(store)  # every read below sees the store as it is now
    inputs = {**store_sources(pinned), "settings": engine.settings(as_of=when)}
    out = Path(out_dir)
    table_folder(out, fmt)  # created once the inputs are known to be readable
    t = takedown_analysis(
        load_first_receipts(pinned, start=None, end=when), as_of=when, clock_start=clock_start
    )
    small = {
        "incidents": t.incidents,
        "status_intervals": t.status_intervals,
        "takedown_km": t.km,
        "takedown_summary": t.summary,
        "subscriptions": load_snapshots(snapshots),
    }
    tol = Tolerance()
    constants = {"floor_s": tol.floor_s, "share": tol.share}
    with staged_files(out) as stage:  # no table replaced before all are written
        counts = _written(stage, "deliveries", deliveries_table_rule, inputs, fmt, on, constants)
        events = _written(stage, "events", events_table_rule, inputs, fmt, on, constants)
        paths = [out / f"deliveries.{fmt}", out / f"events.{fmt}"]
        for name, table in small.items():
            paths += [stage.final(p) for p in write_table(stage, name, table, fmt)]
    figures: dict[str, object] = {
        **add_counts(counts, events),
        **incident_counts(t.incidents, t.durations, t.summary),
    }
    return StoreAnalysis(when, clock_start, on, paths, figures)


def _written(
    out: Stage,
    name: str,
    rule: engine.Rule,
    inputs: dict[str, engine.Source],
    fmt: str,
    on: str,
    constants: dict[str, Any],
) -> DeliveryCounts:
    """The rows of ``rule`` written to ``out`` as table ``name``, batch by batch (known secrets
    cut from each); their summary counts."""
    declared = (DELIVERIES, ATTEMPTS) if name == "deliveries" else (EVENTS,)
    counts = delivery_counts(pd.DataFrame({"verdict": [], **_NO_ANSWER}), EVENTS.empty())
    with contextlib.ExitStack() as stack:
        sink = _Sink(stack, out / f"{name}.{fmt}", fmt)
        got = stack.enter_context(engine.batches(rule, inputs, on=on, **constants))
        for batch in got:
            frame = cut_secrets(frame_of(pa.Table.from_batches([batch]), *declared))
            if name == "deliveries":
                part = delivery_counts(frame, EVENTS.empty())
            else:
                part = delivery_counts(pd.DataFrame({"verdict": [], **_NO_ANSWER}), frame)
            counts = add_counts(counts, part)
            sink.add(frame)
        if not sink.written:  # no row: the columns and their types still
            sink.add(frame_of(got.schema.empty_table(), *declared))
        sink.close()
    return counts


_NO_ANSWER: dict[str, list[object]] = {"response_ms": [], "response_status": []}


def _known(stored: ir.Table, parts: ir.Table, settings: ir.Table) -> ir.Table:
    """The stored deliveries known at ``as_of``: received by then, or without a receipt time."""
    d = deliveries_rule(stored, parts)
    as_of = settings.as_of.max().as_scalar()
    return d.filter(d.received_at.isnull() | (d.received_at <= as_of))


def _attempted(
    stored: ir.Table, parts: ir.Table, settings: ir.Table, floor_s: float, share: float
) -> ir.Table:
    """The known deliveries with the attempt columns."""
    return attempts_rule(_known(stored, parts, settings), floor_s=floor_s, share=share)


def deliveries_table_rule(
    stored: ir.Table, parts: ir.Table, settings: ir.Table, *, floor_s: float, share: float
) -> ir.Table:
    """The deliveries table of ``audit analyze`` (:data:`DELIVERY_TABLE_COLUMNS`) of a store's
    deliveries known at ``as_of``, in input order."""
    a = _attempted(stored, parts, settings, floor_s, share)
    return a.order_by("_row").select(*DELIVERY_TABLE_COLUMNS)


def events_table_rule(
    stored: ir.Table, parts: ir.Table, settings: ir.Table, *, floor_s: float, share: float
) -> ir.Table:
    """The events table of ``audit analyze`` of a store's deliveries known at ``as_of``."""
    a = _attempted(stored, parts, settings, floor_s, share)
    return events_rule(a, settings, floor_s=floor_s, share=share)


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
        self.written = False
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
        self.written = True

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
