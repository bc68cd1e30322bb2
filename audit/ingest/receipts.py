"""First receipts: the incident fold's input as the evidence store hands it over.

The fold (:mod:`audit.analysis.incidents`) reads the first valid receipt of each event id and
nothing else of the deliveries; DuckDB picks those rows in the store, so that the deliveries
frame need not carry the incident fields, and the incidents' history costs one row per event,
not one per delivery.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pandas as pd

from audit.ingest.records import combine_columns
from audit.ingest.scan import (
    frame_from_arrow,
    months_between,
    open_store,
    owned,
    parts_read,
    sql_list,
    window,
)
from audit.ingest.store import Store
from audit.tables import DATA_FIELDS, STORED_DELIVERIES
from audit.timeutil import as_utc

__all__ = [
    "FOLD_FIELDS",
    "FOLD_KEYS",
    "RECEIPT_COLUMNS",
    "RECEIPT_COUNT_KEYS",
    "FirstReceipts",
    "load_first_receipts",
]

FOLD_KEYS: tuple[str, ...] = (
    "verdict",
    "subscription_id",
    "event_id",
    "event",
    "event_timestamp",
    "incident_id",
    "received_at",
)
"""The deliveries' columns the incident fold reads (the other analyses read them too)."""
FOLD_FIELDS: tuple[str, ...] = ("body_sha256", "data_invalid", *(col for _, col in DATA_FIELDS))
"""What the fold reads from the store instead of the body (``audit.tables.STORED_DELIVERIES``);
no other analysis reads them. ``body_sha256`` tells copies of an event apart, so first receipts
(one per event) do without it."""
RECEIPT_COLUMNS: tuple[str, ...] = (*FOLD_KEYS, *(c for c in FOLD_FIELDS if c != "body_sha256"))
#: Texts that repeat from event to event (one incident's domain, URL and subject; a handful of
#: statuses, classes, event names): read as categories.
_REPEATED = (
    "verdict",
    "subscription_id",
    "event",
    *(col for key, col in DATA_FIELDS if not key.endswith(("Timestamp", "timestamp"))),
)
"""The stored columns the fold reads (:class:`FirstReceipts`)."""
RECEIPT_COUNT_KEYS: tuple[str, ...] = ("valid", "no_event_id", "duplicates", "conflicting_bodies")
"""The counts that :class:`FirstReceipts` carries for the rows it stands for."""


@dataclass
class FirstReceipts:
    """The fold's input as an evidence store hands it over: the first valid receipt of each
    event id, not every delivery (:func:`load_first_receipts`).

    ``rows`` has :data:`RECEIPT_COLUMNS`: only valid rows with an event id, one per event id,
    the earliest ``received_at`` (ties: input order), texts that repeat as categories;
    ``counts`` maps each of :data:`RECEIPT_COUNT_KEYS` to its value over all the valid rows
    they stand for (as :func:`audit.analysis.incident_events.incident_events` counts them over
    every delivery).
    The fold gives the same tables and counts from it as from every delivery; at 1.6M
    deliveries it is 1.0M rows, and the deliveries frame need not carry the incident fields.
    """

    rows: pd.DataFrame | None
    counts: dict[str, int]

    def take_rows(self) -> pd.DataFrame:
        """The rows, which this object then no longer holds (so that the fold frees them)."""
        rows = self.rows
        if rows is None:
            raise ValueError("these first receipts were already folded: load them again")
        self.rows = None
        return rows


def load_first_receipts(
    store: Store | str | os.PathLike[str],
    *,
    start: pd.Timestamp | None = None,
    end: pd.Timestamp | None = None,
) -> FirstReceipts:
    """The incident fold's input among the deliveries
    :func:`audit.ingest.query.load_deliveries` reads for
    ``[start, end]``: the first valid receipt of each event id, with the incident fields, and
    the counts of the valid rows they stand for.

    DuckDB picks the rows (the earliest ``received_at`` of each event id, ties in input order,
    as :func:`audit.analysis.incident_events.incident_events` does) on the key columns, then
    reads the wide columns of those rows only; at 1.6M deliveries that is 1.0M rows, and the
    deliveries frame need not carry the incident fields
    (:data:`audit.ingest.query.DELIVERY_COLUMNS`).
    """
    start = None if start is None else as_utc(start, name="start")
    end = None if end is None else as_utc(end, name="end")
    s = open_store(store)
    months = None if start is None or end is None else [*months_between(start, end), "none"]
    parts = s.parts(months)
    counts = dict.fromkeys(RECEIPT_COUNT_KEYS, 0)
    if not parts:
        return FirstReceipts(STORED_DELIVERIES.empty()[list(RECEIPT_COLUMNS)], counts)
    import duckdb  # start-up: only a store read needs duckdb (`audit verify` never)

    cond, params = window(start, end)
    # Rows are told apart by their part file and row, not by (source, line): two files ingested
    # under the same path name (from two folders) share those.
    file, src = _part_file_column(duckdb, parts)
    valid = f"FROM {src} WHERE verdict = 'valid' AND {cond}"
    firsts = (
        f"SELECT {file}, file_row_number {valid} AND event_id IS NOT NULL QUALIFY "
        "row_number() OVER (PARTITION BY event_id "
        f"ORDER BY received_at NULLS LAST, source, line, {file}, file_row_number) = 1"
    )
    cols = ", ".join(f'"{c}"' for c in RECEIPT_COLUMNS)
    with parts_read(parts) as con:
        con.execute("SET preserve_insertion_order = false")
        # One pass, grouped by event id (the rows without one form a group of their own): an
        # event id whose valid copies differ in their bytes (a missing hash differs too)
        # counts as conflicting: its least and greatest hash differ (as a count of distinct
        # hashes above one would say, at two thirds of the cost).
        row = con.execute(
            "SELECT coalesce(sum(n), 0), coalesce(sum(n) FILTER (WHERE event_id IS NULL), 0), "
            "coalesce(sum(n - 1) FILTER (WHERE event_id IS NOT NULL), 0), "
            "count(*) FILTER (WHERE event_id IS NOT NULL AND lo <> hi) FROM (SELECT event_id, "
            "count(*) AS n, min(coalesce(body_sha256, '')) AS lo, "
            f"max(coalesce(body_sha256, '')) AS hi {valid} GROUP BY event_id)",
            params,
        ).fetchall()[0]
        sql = f"SELECT {cols} {valid} AND ({file}, file_row_number) IN ({firsts})"
        table = owned(con.sql(sql, params=params + params), encode=_REPEATED)
    counts.update(valid=row[0], no_event_id=row[1], duplicates=row[2], conflicting_bodies=row[3])
    schema, columns = table.schema, table.columns
    del table  # one chunk per column (pandas would concatenate the chunks on every take)
    table = combine_columns(schema, columns)
    texts = [n for n in table.column_names if n not in _REPEATED]
    rows = frame_from_arrow(table.select(texts))
    for name in _REPEATED:  # categories: 2.5M first receipts take 210 bytes a row, not 555
        rows[name] = table.column(name).to_pandas()
    rows = rows[list(table.column_names)]
    del table
    return FirstReceipts(rows, {k: int(v) for k, v in counts.items()})


def _part_file_column(duckdb: ModuleType, parts: list[Path]) -> tuple[str, str]:
    """(the column naming a row's part file, the ``read_parquet`` source of ``parts``).

    DuckDB 1.3 and later number the files read (``file_index``, in the order given: ``parts``
    is sorted, so the same order as their names). The pick of first receipts then keeps an
    integer per row, not the file's path: at 1M deliveries the pick alone holds about 230 MB less
    and is a fifth faster (a whole report's peak, 1-3 % lower: ``docs/scale.md``).
    Older DuckDB gives the path (``filename = true``).
    """
    base = f"read_parquet({sql_list(parts)}, hive_partitioning = false, file_row_number = true"
    version = tuple(int(v) for v in re.findall(r"\d+", duckdb.__version__)[:2])
    if version >= (1, 3):
        return "file_index", base + ")"
    return "filename", base + ", filename = true)"
