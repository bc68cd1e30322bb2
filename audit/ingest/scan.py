"""Reading the evidence store's Parquet parts with DuckDB, into Arrow and pandas.

DuckDB reads the parts out of core on every core. Its batches are copied as they arrive (it
frees a batch only whole), so that the columns can be combined one at a time, each freed as it
goes; rows come back in input order (``source``, ``line``) without an ``ORDER BY``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from audit.errors import InputError
from audit.ingest.quoted_secrets import quoted_values
from audit.ingest.records import combine_columns
from audit.ingest.store import Store
from audit.ingest.store_folder import DATASET, check_folder
from audit.paths import source_name
from audit.redaction import register_sensitive
from audit.tables import STORED_DELIVERIES

if TYPE_CHECKING:
    import duckdb

__all__ = [
    "BATCH_ROWS",
    "MAX_RUNS",
    "arrow_of",
    "check_pinned",
    "frame_from_arrow",
    "in_input_order",
    "manifest_names",
    "months_between",
    "open_store",
    "owned",
    "parts_read",
    "pinned_store",
    "scan",
    "sql_list",
    "window",
]


def open_store(store: Store | str | os.PathLike[str]) -> Store:
    s = store if isinstance(store, Store) else Store(Path(store))
    if not s.manifest_path.is_file():
        raise InputError(f"{s.root}: not an evidence store (no manifest.json); run audit ingest")
    check_folder(s.root, creating=False)  # no link anywhere inside it
    gone = [p for p in s.parts(check=False) if not p.is_file()]
    if gone:
        raise InputError(
            f"{s.root}: {len(gone)} part(s) its manifest lists are missing (first: "
            f"{gone[0].relative_to(s.root)}); run audit ingest on the same logs to restore them"
        )
    # what its records quote of a secret (found at ingest) is cut from all a reader shows
    register_sensitive(quoted_values(s.root, s.manifest(), s.checked))
    return s


def pinned_store(store: Store | str | os.PathLike[str]) -> Store:
    """The store as its manifest lists it now: a reader that reads it several times (in passes)
    sees one state, whatever an ingest commits meanwhile. :func:`check_pinned` says when an
    ingest has since removed some of its parts."""
    s = open_store(store)
    if isinstance(s, _Pinned):
        return s
    return _Pinned(s.root, checked=s.checked, data=s.manifest())  # parts found whole stay so


def check_pinned(store: Store) -> None:
    """InputError when parts :func:`pinned_store` listed are gone (replaced by an ingest)."""
    gone = [p for p in store.parts(check=False) if not p.is_file()]
    if gone:
        raise InputError(
            f"{store.root}: changed while it was read ({len(gone)} part(s) replaced by an "
            "ingest since); run again"
        )


@dataclass(frozen=True)
class _Pinned(Store):
    """A :class:`Store` whose manifest was read once (:func:`pinned_store`)."""

    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def manifest(self) -> dict[str, Any]:
        return self.data


def months_between(lo: pd.Timestamp, hi: pd.Timestamp) -> list[str]:
    months = pd.period_range(
        lo.tz_convert("UTC").tz_localize(None).to_period("M"),
        hi.tz_convert("UTC").tz_localize(None).to_period("M"),
        freq="M",
    )
    return [str(m) for m in months]


def sql_list(paths: Iterable[object]) -> str:
    return "[" + ", ".join("'" + str(p).replace("'", "''") + "'" for p in paths) + "]"


def arrow_of(result: duckdb.DuckDBPyRelation) -> pa.Table:
    """A result as an Arrow table (``to_arrow_table`` in DuckDB 2, ``fetch_arrow_table`` before)."""
    fetch = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
    return fetch()


def scan(
    files: Collection[Path],
    columns: Iterable[str],
    where: str,
    params: list[Any],
    *,
    frugal: bool = True,
    store: Store | None = None,
) -> pa.Table:
    """The rows of ``files`` (parts, best in source order) in input order (``source, line``).

    ``store`` (the store of the parts): each row's ``source`` as the store's manifest names its
    file (:func:`manifest_names`), the name the store's per-file counts use; ``where`` still
    sees the names the rows were stored with.

    No ``ORDER BY``: DuckDB's sort holds about twice the result (measured: +230 MB against
    +120 MB for 68 MB of rows). Parts are read in the order given, which keeps the rows in
    order when the parts are (``audit.ingest.query`` orders them by file); otherwise Arrow
    sorts them. ``frugal``: each column freeable on its own (:func:`owned`); without it (the
    memory to spare), DuckDB's batches are taken as they come, which reads a month of 1M
    deliveries in half the time and holds its rows twice at once (``docs/scale.md``).
    """
    columns = list(columns)
    present, absent, mixed = _present(files, columns)
    # parts written before and after a column was declared: DuckDB matches their columns by
    # name, the older parts' missing ones as nulls (else it refuses the mix)
    by_name = ", union_by_name = true" if mixed else ""
    with parts_read(files) as con:
        con.execute("SET preserve_insertion_order = true")
        renamed = {}
        if store is not None and "source" in present:
            renamed = manifest_names(con, store, files)
        if renamed:
            by_name += ", filename = true"
        cols = ", ".join(f'"{c}"' for c in [*present, *(["filename"] if renamed else [])])
        sql = (
            f"SELECT {cols} FROM read_parquet({sql_list(files)}, hive_partitioning = false"
            f"{by_name}) {where}"
        )
        result = con.sql(sql, params=params)
        got = owned(result, encode={"filename"}) if frugal else arrow_of(result)
        del result
        if renamed:
            got = _named(got, renamed)
        box = [with_nulls(got, columns, absent)]
        del got
        return in_input_order(box, frugal=frugal)


def manifest_names(
    con: duckdb.DuckDBPyConnection, store: Store, files: Collection[Path]
) -> dict[str, str]:
    """``{part: name}`` for the parts among ``files`` whose rows name their file otherwise than
    the store's manifest does now (``source_name`` of its entry's path); {} for most stores.

    The manifest names a file by its resolved path; a store ingested before the rows did so
    holds the path as typed (``logs/x.jsonl``, relative to a working folder it does not record,
    so that two such files may share one name), and a rotated or rewritten log's entry is
    renamed (``x.jsonl.1``, ``x.jsonl (earlier content; sha256 …)``) while its rows keep the
    name they were stored with. The part a row was read from says which entry holds it.
    """
    owner = {
        str(store.root / DATASET / part["name"]): source_name(entry["path"])
        for entry in store.manifest()["files"]
        for part in entry["parts"]
    }
    sql = (
        f"SELECT DISTINCT filename, source FROM read_parquet({sql_list(files)}, "
        "hive_partitioning = false, filename = true)"
    )
    return {
        name: owner[name]
        for name, source in con.sql(sql).fetchall()
        if name in owner and source != owner[name]
    }


def _named(table: pa.Table, renamed: dict[str, str]) -> pa.Table:
    """``table`` (with the ``filename`` each row was read from) with the ``source`` of the rows
    of the ``renamed`` parts replaced, without ``filename``."""
    at = table.schema.get_field_index("source")
    field = table.schema.field(at)
    keys = pa.array(list(renamed), pa.string())
    names = pa.array(list(renamed.values()), field.type)
    out = []
    for batch in table.to_batches():
        files = batch.column(batch.schema.get_field_index("filename"))
        if pa.types.is_dictionary(files.type):  # one lookup per part, not per row
            found = pc.take(pc.index_in(files.dictionary, value_set=keys), files.indices)
        else:
            found = pc.index_in(files, value_set=keys)
        out.append(pc.coalesce(pc.take(names, found), batch.column(at)))
    table = table.set_column(at, field, pa.chunked_array(out, field.type))
    return table.drop_columns(["filename"])


def _present(files: Collection[Path], columns: list[str]) -> tuple[list[str], list[str], bool]:
    """(``columns`` some part holds, those no part holds, whether some parts lack one the
    others hold): a store of an earlier format lacks the columns added since, and a column
    declared since the last format change is in the parts written after it only."""
    if not files:
        return columns, [], False
    held: list[set[str]] = []
    for f in files:
        try:
            held.append(set(pq.read_schema(f).names))
        except (OSError, pa.ArrowException):
            return columns, [], False  # DuckDB says what is wrong with it (parts_read)
    some = set().union(*held)
    every = some.intersection(*held)
    present = [c for c in columns if c in some]
    return present, [c for c in columns if c not in some], any(c not in every for c in present)


def with_nulls(table: pa.Table, columns: list[str], absent: list[str]) -> pa.Table:
    """``table`` with the ``absent`` columns (missing values, in their declared types), in the
    order of ``columns``."""
    if not absent:
        return table
    schema = STORED_DELIVERIES.arrow_schema()
    for name in absent:
        table = table.append_column(
            schema.field(name), pa.nulls(table.num_rows, schema.field(name).type)
        )
    return table.select(columns)


@contextlib.contextmanager
def parts_read(parts: Collection[Path]) -> Iterator[duckdb.DuckDBPyConnection]:
    """A DuckDB connection that reads store ``parts``: a part replaced by an ingest while it is
    read, or damaged (truncated, not Parquet), ends in one :class:`InputError`, not DuckDB's."""
    import duckdb  # start-up: only a store read needs duckdb (`audit verify` never)

    con = duckdb.connect()
    try:
        yield con
    except (duckdb.IOException, duckdb.InvalidInputException) as e:
        first = str(e).splitlines()[0]
        if isinstance(e, duckdb.InvalidInputException) and "parquet" not in first.lower():
            raise  # not about a file: a bug, shown as one
        gone = [p for p in parts if not Path(p).is_file()]
        if gone:
            raise InputError(
                f"{Path(gone[0]).parents[2]}: changed while it was read ({len(gone)} part(s) "
                "replaced by an ingest since); run again"
            ) from None
        raise InputError(f"a store part cannot be read: {first}") from None
    finally:
        con.close()


#: Rows per batch read from DuckDB (its default for Arrow readers).
BATCH_ROWS = 1_000_000


def owned(result: duckdb.DuckDBPyRelation, encode: Collection[str] = ()) -> pa.Table:
    """A result as an Arrow table whose columns are each freeable on their own.

    DuckDB exports each batch as one block: no column of it is freed before all are. So every
    batch is copied as it arrives (with ``malloc``, which returns large frees to the system),
    and :func:`in_input_order` can then combine the columns one at a time, freeing each
    column's chunks as it goes. Reading it whole (``fetch_arrow_table``) and then combining held
    the rows twice: 2.7 GB for 1.45 GB of rows at 1.6M deliveries. The columns named in
    ``encode`` are dictionary-encoded instead of copied (texts that repeat: combining their
    chunks unifies the dictionaries).
    """
    reader_of = getattr(result, "to_arrow_reader", None) or result.fetch_record_batch
    reader = reader_of(BATCH_ROWS)
    pool = pa.system_memory_pool()
    names = reader.schema.names
    batches = []
    for batch in reader:
        # Concatenating with an empty slice always copies (one array alone may be passed on).
        copied = [
            pc.dictionary_encode(c, memory_pool=pool)
            if name in encode
            else pa.concat_arrays([c, c.slice(0, 0)], memory_pool=pool)
            for name, c in zip(names, batch.columns, strict=True)
        ]
        batches.append(pa.RecordBatch.from_arrays(copied, names=names))
        del batch, copied
    if not batches:
        return reader.schema.empty_table()
    return pa.Table.from_batches(batches)


def in_input_order(box: list[pa.Table], *, frugal: bool = True) -> pa.Table:
    """The table in ``box`` sorted by ``source, line``, one chunk per column.

    The table is taken out of ``box``: with no other reference left (an argument stays held by
    the caller until the call returns), each column's old chunks are freed as it is combined.

    Rows come back almost in order: only a file's unreadable records (the ``month=none`` part)
    and a piece that spans two months sit apart. So the order is computed on one integer key
    (the source's rank, then the line) and the table is rebuilt from its contiguous runs
    (zero-copy slices); only a badly shuffled table is copied column by column with ``take``.
    """
    table = box.pop()
    if table.num_rows < 2:
        return table
    src, line = table.column("source"), table.column("line")
    a, b = src.slice(0, len(src) - 1), src.slice(1)
    step = pc.or_(pc.less(a, b), pc.and_(pc.equal(a, b), pc.less(line[:-1], line[1:])))
    if pc.all(step).as_py():
        schema, columns = table.schema, table.columns
        del table, src, line, a, b, step
        return combine_columns(schema, columns, frugal=frugal)
    names = sorted(n for n in pc.unique(src).to_pylist() if n is not None)
    # Python orders str by code point, as Arrow orders UTF-8 bytes; a null source goes last.
    rank = pc.fill_null(pc.index_in(src, value_set=pa.array(names, pa.string())), len(names))
    lines = pc.fill_null(line, -1).to_numpy().astype(np.int64)
    shift = int(lines.max()) + 2
    key = rank.to_numpy().astype(np.int64) * shift + (lines + 1)
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(order) != 1) + 1
    starts, ends = np.r_[0, cuts], np.r_[cuts, len(order)]
    del src, line, a, b, step, rank, lines, key
    if len(starts) <= MAX_RUNS:
        runs = [table.slice(int(order[s]), int(e - s)) for s, e in zip(starts, ends, strict=True)]
        del table
        joined = pa.concat_tables(runs)
        del runs
        schema, columns = joined.schema, joined.columns
        del joined
        return combine_columns(schema, columns, frugal=frugal)
    names, columns = table.column_names, table.columns
    del table
    out = []
    for k in range(len(columns)):  # one column at a time: the old one is freed as we go
        out.append(columns[k].take(order))
        columns[k] = None
    return pa.table(out, names=names)


#: Beyond this many runs of consecutive rows, :func:`in_input_order` copies with ``take``.
MAX_RUNS = 10_000


def frame_from_arrow(table: pa.Table) -> pd.DataFrame:
    """Store columns as pandas, each in its declared dtype (``audit.tables``)."""
    declared = STORED_DELIVERIES.dtypes()
    mapper = {
        pa.string(): declared["source"],
        pa.large_string(): declared["source"],
        pa.int64(): pd.Int64Dtype(),
        pa.float64(): pd.Float64Dtype(),
        pa.bool_(): pd.BooleanDtype(),
    }.get
    df: pd.DataFrame = table.to_pandas(types_mapper=mapper)
    for name in df.columns:
        dtype = declared[name]
        if df[name].dtype != dtype and str(dtype) != "object":
            df[name] = df[name].astype(dtype)
    return df


def window(start: pd.Timestamp | None, end: pd.Timestamp | None) -> tuple[str, list[int]]:
    """The SQL condition "received in ``[start, end]``, or without a receipt time"."""
    where, params = [], []
    if start is not None:
        where.append("epoch_ns(received_at) >= ?")
        params.append(start.value)
    if end is not None:
        where.append("epoch_ns(received_at) <= ?")
        params.append(end.value)
    if not where:
        return "TRUE", params
    return f"(received_at IS NULL OR ({' AND '.join(where)}))", params
