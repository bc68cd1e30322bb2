"""Parquet part files of the evidence store, and the writer lock.

A :class:`PartWriter` writes store tables into staging parts, one per month of receipt (Hive
``month=YYYY-MM``, ``none`` without a time), rolling over at :data:`PART_ROWS` rows so that a
later re-verification rewrites bounded pieces. The store's writer lock is
:func:`audit.locks.lock_file`.
"""

from __future__ import annotations

import secrets as _random
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import OutputError
from audit.ingest import records

__all__ = ["PART_ROWS", "ROW_GROUP_ROWS", "PartWriter"]

#: Rows per Parquet part (a re-verification rewrites one part at a time).
PART_ROWS = 250_000
#: Rows per row group inside a part.
ROW_GROUP_ROWS = 64_000


class PartWriter:
    """Writes store tables into one staging part per month, rolling over at PART_ROWS.

    :meth:`finish` closes every part and returns ``(staging path, "month=…/part-….parquet")``.
    """

    def __init__(self, staging: Path, stem: str) -> None:
        self.staging, self.stem = staging, stem
        self.open: dict[str, tuple[pq.ParquetWriter, Path, int]] = {}
        self.done: list[tuple[Path, str]] = []  # (staging path, "month=…/part-….parquet")

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
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
            writer = pq.ParquetWriter(path, records.SCHEMA, compression="zstd")
        except OSError as e:
            raise OutputError(
                f"{path}: cannot write ({e.strerror or e}); store unchanged"
            ) from None
        return writer, path, 0

    def _close(self, month: str) -> None:
        writer, path, _ = self.open.pop(month)
        try:
            writer.close()
        except OSError as e:
            raise OutputError(
                f"{path}: cannot write ({e.strerror or e}); store unchanged"
            ) from None
        self.done.append((path, f"month={month}/{path.name}"))

    def finish(self) -> list[tuple[Path, str]]:
        for month in list(self.open):
            self._close(month)
        return self.done
