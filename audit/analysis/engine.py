"""The engine that runs the analysis's rules.

A rule is written once, as a relational expression (`Ibis <https://ibis-project.org>`_): a
function from named input tables (and constants: a tolerance, never a clock) to a table
(:func:`audit.analysis.deliveries.attempts_rule`...). This module compiles a rule to the
engine's SQL and runs it where the data lies:

- ``duckdb`` (the default): in this process, on Arrow tables or the store's Parquet parts;
  DuckDB spills to disk when a table outgrows memory;
- ``spark``: the same expression on PySpark (``audit[spark]``), in local mode or on a cluster.

A rule's SQL is compiled once per input schemas and constants (compiling takes a few hundred
milliseconds; running it on a small table, a few), so that a rule called for each of many small
frames (a notebook's, a test's) costs its run.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import tempfile
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa

from audit.analysis import compiled, spark
from audit.errors import InputError, ParameterError
from audit.ingest.workers import default_workers, jobs

if TYPE_CHECKING:
    import duckdb
    import ibis.expr.types as ir

    from audit.schema import Table

__all__ = [
    "ENGINES",
    "Parquet",
    "Rule",
    "Source",
    "arrow_input",
    "batches",
    "frame_of",
    "run",
    "settings",
    "sql_of",
]

#: Rows per batch of :func:`batches` (DuckDB's default for Arrow readers).
BATCH_ROWS = 1_000_000
#: What DuckDB may hold in memory for one rule; past it, it spills to a private temporary
#: folder (removed when the rule is done). Without it DuckDB
#: takes up to 80% of the machine's memory (a year's analysis peaked at 7.6 GB).
MEMORY_LIMIT = "1GB"
#: The engines a rule runs on.
ENGINES: tuple[str, ...] = ("duckdb", "spark")
#: A rule: input tables by name (keywords) and constants (keywords) to a table.
Rule = Callable[..., "ir.Table"]


def arrow_input(frame: pd.DataFrame, columns: list[str]) -> pa.Table:
    """``columns`` of ``frame`` as an Arrow table (an input of :func:`run`), with ``_row``, each
    row's position in ``frame`` (rules break ties by it: the frame's order)."""
    table = pa.Table.from_pandas(frame[columns], preserve_index=False)
    return table.append_column("_row", pa.array(np.arange(len(frame), dtype=np.int64)))


def settings(**values: object) -> pa.Table:
    """A one-row table of settings a rule reads as data (``as_of``: a rule compiled once serves
    every ``as_of``), e.g. ``settings(as_of=pd.Timestamp(...))``: pass it among the tables of
    :func:`run` and cross-join it in the rule."""
    return pa.table({name: pa.array([value]) for name, value in values.items()})


def frame_of(result: pa.Table, *tables: Table) -> pd.DataFrame:
    """``result`` as a DataFrame whose columns have the dtypes ``tables`` declare for them
    (:mod:`audit.tables`; a column none declares keeps Arrow's default)."""
    frame = result.to_pandas(types_mapper=_NULLABLE.get)
    declared = {n: d for table in tables for n, d in table.dtypes().items()}
    wanted = {n: declared[n] for n in frame.columns if n in declared}
    out: pd.DataFrame = frame.astype(wanted) if wanted else frame
    return out


#: Arrow types read as pandas' nullable dtypes (then cast to the declared ones).
_NULLABLE = {
    pa.int64(): pd.Int64Dtype(),
    pa.float64(): pd.Float64Dtype(),
    pa.bool_(): pd.BooleanDtype(),
}


@functools.lru_cache(maxsize=256)
def _compiled(
    rule: Rule,
    schemas: tuple[tuple[str, pa.Schema], ...],
    constants: tuple[tuple[str, Hashable], ...],
    dialect: str,
) -> str:
    def compile_sql() -> str:
        import ibis  # start-up: only an analysis needs it

        tables = {n: ibis.table(ibis.Schema.from_pyarrow(s), name=n) for n, s in schemas}
        return str(ibis.to_sql(rule(**tables, **dict(constants)), dialect=dialect))

    shown = [
        (n, s.to_string(show_field_metadata=False, show_schema_metadata=False)) for n, s in schemas
    ]
    key = f"{rule.__module__}.{rule.__qualname__}|{dialect}|{shown!r}|{constants!r}"
    return compiled.kept(key, compile_sql)


def sql_of(
    rule: Rule, schemas: Mapping[str, pa.Schema], dialect: str = "duckdb", **constants: Any
) -> str:
    """The SQL of ``rule`` over tables of ``schemas`` (compiled once per process, and kept on
    disk for the next: :mod:`audit.analysis.compiled`)."""
    return _compiled(rule, tuple(schemas.items()), tuple(sorted(constants.items())), dialect)


@dataclass(frozen=True)
class Parquet:
    """An input read where it lies: Parquet files of one schema (a store's parts). ``schema``
    is read from the first file unless given (it must be, for no file). With ``filename``, each
    row also has ``filename``, the base name of the file it was read from (on every engine)."""

    paths: tuple[Path, ...]
    schema: pa.Schema | None = None
    filename: bool = False

    def arrow_schema(self) -> pa.Schema:
        """The input's schema (``filename`` last, when asked for)."""
        schema = self.schema
        if schema is None:
            if not self.paths:
                raise ParameterError("a Parquet input of no file needs its schema")
            import pyarrow.parquet as pq  # start-up: only an analysis needs it

            schema = pq.read_schema(self.paths[0])
        return schema.append(pa.field("filename", pa.string())) if self.filename else schema


#: What a rule reads: an Arrow table, or Parquet files read where they lie.
Source: TypeAlias = "pa.Table | Parquet"


def run(
    rule: Rule, tables: Mapping[str, Source], *, on: str = "duckdb", **constants: Any
) -> pa.Table:
    """``rule`` run on ``tables`` (by the names the rule takes them by), with ``constants``,
    by the engine ``on`` (:data:`ENGINES`): its result as an Arrow table."""
    if on == "spark":
        return spark.run(rule, tables, **constants)
    if on != "duckdb":
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {on!r}")
    with _inputs(rule, tables, constants) as (con, sql):
        result = con.sql(sql)
        fetch = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
        out: pa.Table = fetch()
        return out


@contextlib.contextmanager
def batches(
    rule: Rule,
    tables: Mapping[str, Source],
    *,
    on: str = "duckdb",
    rows: int = BATCH_ROWS,
    **constants: Any,
) -> Iterator[pa.RecordBatchReader]:
    """``rule``'s result as an Arrow record batch reader (batches of at most ``rows`` rows; its
    ``schema`` even when no row comes), as the engine ``on`` makes them: a table larger than
    memory is written batch by batch (the engine spills to disk what it must hold). The batches
    are read inside the ``with`` block."""
    if on == "spark":
        with spark.batches(rule, tables, rows=rows, **constants) as got:
            yield got
        return
    if on != "duckdb":
        raise ParameterError(f"engine must be one of {', '.join(ENGINES)}, got {on!r}")
    with _inputs(rule, tables, constants) as (con, sql):
        result = con.sql(sql)
        reader_of = getattr(result, "to_arrow_reader", None) or result.fetch_record_batch
        reader = reader_of(rows)
        try:
            yield reader
        finally:
            reader.close()


@contextlib.contextmanager
def _inputs(
    rule: Rule, tables: Mapping[str, Source], constants: Mapping[str, Any]
) -> Iterator[tuple[duckdb.DuckDBPyConnection, str]]:
    """A DuckDB connection with ``tables`` registered under their names, and the rule's SQL;
    the connection is closed after (its threads end with it: a process that forks later, for
    its workers, holds no DuckDB thread; a connection kept open made forked workers hang or
    crash)."""
    schemas = {
        n: t.schema if isinstance(t, pa.Table) else t.arrow_schema() for n, t in tables.items()
    }
    sql = sql_of(rule, schemas, **constants)
    import duckdb  # start-up: only an analysis needs it

    _remove_dead_spills()
    spill = tempfile.mkdtemp(prefix=f"{_SPILL}{os.getpid()}-")  # private (0700), removed after
    config: dict[str, str | bool | int | float | list[str]] = {
        "threads": jobs() or default_workers(),
        "memory_limit": MEMORY_LIMIT,
        "temp_directory": spill,
    }
    con = duckdb.connect(config=config)
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET preserve_insertion_order = false")  # every rule orders its rows
    try:
        for name, table in tables.items():
            if isinstance(table, pa.Table):
                con.register(name, table)
            elif not table.paths:
                con.register(name, schemas[name].empty_table())
            else:
                files = ", ".join("'" + str(p).replace("'", "''") + "'" for p in table.paths)
                columns = ", ".join(f'"{f.name}"' for f in schemas[name] if f.name != "filename")
                named = ", parse_filename(filename) AS filename" if table.filename else ""
                con.execute(
                    f'CREATE OR REPLACE TEMP VIEW "{name}" AS SELECT {columns}{named} FROM '
                    f"read_parquet([{files}], hive_partitioning = false, filename = true)"
                )
        yield con, sql
    except (duckdb.IOException, duckdb.InvalidInputException) as e:
        paths = [p for t in tables.values() if isinstance(t, Parquet) for p in t.paths]
        first = str(e).splitlines()[0]
        if not paths or (
            isinstance(e, duckdb.InvalidInputException) and "parquet" not in first.lower()
        ):
            raise  # not about a file: a bug, shown as one
        gone = [p for p in paths if not p.is_file()]
        if gone:
            raise InputError(
                f"{gone[0].parent}: changed while it was read ({len(gone)} file(s) replaced "
                "since, by an ingest); run again"
            ) from None
        raise InputError(f"a Parquet input cannot be read: {first}") from None
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


#: The prefix of a rule's spill folder in the temporary folder (then the pid of its process).
_SPILL = "audit-engine-"


def _remove_dead_spills() -> None:
    """Remove the spill folders of this user's processes that are gone (a killed run's: its
    ``finally`` never ran)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{_SPILL}*-*"):
        pid = folder.name.removeprefix(_SPILL).split("-")[0]
        try:
            if not pid.isdigit() or folder.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)  # alive (or another user's): kept
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue
