"""Parquet part files of the evidence store, and the writer lock.

A :class:`PartWriter` writes store tables into staging parts, one per month of receipt (Hive
``month=YYYY-MM``, ``none`` without a time), rolling over at :data:`PART_ROWS` rows so that a
later re-verification rewrites bounded pieces. Parts keep :data:`STORE_SCHEMA`: the stored
columns with times as microseconds, UTC (``TIMESTAMP(MICROS, UTC)``, what Spark, Trino, Athena
and BigQuery read by default). The store's writer lock is :func:`audit.locks.lock_file`.
"""

from __future__ import annotations

import secrets as _random
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import OutputError
from audit.tables import STORED_DELIVERIES

__all__ = [
    "PART_ROWS",
    "ROW_GROUP_ROWS",
    "STORE_SCHEMA",
    "PartWriter",
    "Staged",
    "micros",
    "to_micros",
]

#: The schema of every part written (format 2): times as microseconds, UTC.
STORE_SCHEMA = STORED_DELIVERIES.parquet_schema()

#: Rows per Parquet part (a re-verification rewrites one part at a time).
PART_ROWS = 250_000
#: Rows per row group inside a part.
ROW_GROUP_ROWS = 64_000


def micros(times: pa.ChunkedArray | pa.Array) -> pa.Array:
    """Times (any unit) as whole microseconds since the epoch (int64), rounded to the nearest
    (half up): a receipt time written as float seconds (``1790818917.134723``, held as
    ``…134722999`` ns) keeps the microsecond it was written with. Built from numpy buffers
    (``pa.array`` would import pandas: ``audit verify`` goes without)."""
    unit = times.type.unit
    ints = times.cast(pa.int64())
    if isinstance(ints, pa.ChunkedArray):
        ints = ints.combine_chunks()
    if unit == "us":
        return ints
    n, offset = len(ints), ints.offset
    values = np.frombuffer(ints.buffers()[1], dtype=np.int64, count=offset + n)[offset:]
    if unit == "ns":
        values = np.floor_divide(values + 500, 1000)
    else:
        values = values * {"s": 1_000_000, "ms": 1000}[unit]
    validity = None
    if ints.null_count:
        bits = np.frombuffer(ints.buffers()[0], dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[offset : offset + n].astype(bool)
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        pa.int64(), n, [validity, pa.py_buffer(values)], null_count=ints.null_count
    )


def to_micros(times: pa.Array) -> pa.Array:
    """Times rounded to the microsecond (:func:`micros`), in their own type: what the store
    keeps of them, for readers of raw captures to give the same."""
    if times.type.unit in ("s", "ms", "us"):
        return times
    return micros(times).cast(pa.timestamp("us", tz=times.type.tz)).cast(times.type)


def _in_micros(table: pa.Table) -> pa.Table:
    """A store table in :data:`STORE_SCHEMA`: its times as microseconds (rounded)."""
    arrays = []
    for f in STORE_SCHEMA:
        column = table.column(f.name)
        if pa.types.is_timestamp(f.type) and column.type.unit != "us":
            column = micros(column).cast(f.type)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=STORE_SCHEMA)


class Staged(NamedTuple):
    """A part written under ``.staging``."""

    path: Path
    #: Its name in the dataset: ``month=…/part-….parquet``.
    name: str
    rows: int


class PartWriter:
    """Writes store tables into one staging part per month, rolling over at PART_ROWS.

    :meth:`finish` closes every part and returns them (:class:`Staged`).
    """

    def __init__(self, staging: Path, stem: str) -> None:
        self.staging, self.stem = staging, stem
        self.open: dict[str, tuple[pq.ParquetWriter, Path, int]] = {}
        self.done: list[Staged] = []

    def write(self, table: pa.Table) -> None:
        """Write ``table`` (store columns, times in any unit: sub-microseconds are cut)."""
        if table.num_rows == 0:
            return
        table = _in_micros(table)
        months = pc.fill_null(pc.strftime(table.column("received_at"), "%Y-%m"), "none")
        for month in pc.unique(months).to_pylist():
            self._write_month(month, table.filter(pc.equal(months, month)))

    def _write_month(self, month: str, table: pa.Table) -> None:
        writer, path, rows = self.open.get(month) or self._new(month)
        try:
            writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        except OSError as e:  # full disk: name the path (the store is left as it was)
            raise OutputError(
                f"{path}: cannot write ({e.strerror or e}); store unchanged"
            ) from None
        rows += table.num_rows
        self.open[month] = (writer, path, rows)
        if rows >= PART_ROWS:
            self._close(month)

    def _new(self, month: str) -> tuple[pq.ParquetWriter, Path, int]:
        name = f"part-{self.stem}-{_random.token_hex(6)}.parquet"
        path = self.staging / f"month={month}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            writer = pq.ParquetWriter(path, STORE_SCHEMA, compression="zstd")
        except OSError as e:
            raise OutputError(
                f"{path}: cannot write ({e.strerror or e}); store unchanged"
            ) from None
        return writer, path, 0

    def _close(self, month: str) -> None:
        writer, path, rows = self.open.pop(month)
        try:
            writer.close()
        except OSError as e:
            raise OutputError(
                f"{path}: cannot write ({e.strerror or e}); store unchanged"
            ) from None
        self.done.append(Staged(path, f"month={month}/{path.name}", rows))

    def finish(self) -> list[Staged]:
        for month in list(self.open):
            self._close(month)
        return self.done
