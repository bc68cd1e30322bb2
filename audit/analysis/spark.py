"""The Spark engine: the analysis's rules (:mod:`audit.analysis.engine`) run by PySpark.

The same Ibis expression that DuckDB runs in this process runs on Spark, in local mode by
default (``local[*]``: every core of this machine), on the master Spark's own settings name
(``SPARK_MASTER``, or ``master=`` here, ``--spark-master`` on the command line), or through Spark
Connect when ``SPARK_REMOTE`` is set. PySpark is an optional extra (``pip install
'audit[spark]'``) and needs a Java runtime (17 or later); without either, asking for the engine
is one line that says what to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from audit.errors import InputError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from audit.analysis.engine import Rule, Source

__all__ = ["INSTALL", "available", "batches", "run", "session"]

#: What to install for the Spark engine.
INSTALL = "pip install 'audit[spark]' and a Java runtime (17 or later)"


def available() -> str | None:
    """Why the Spark engine cannot run here (one line), or None when it can."""
    try:
        import pyspark  # noqa: F401  # start-up: an optional extra, looked for only here
    except ImportError:
        return f"the spark engine needs PySpark: {INSTALL}"
    if os.environ.get("SPARK_REMOTE"):
        return None  # Spark Connect: the server has the Java runtime
    java_home = os.environ.get("JAVA_HOME")
    if not (shutil.which("java") or (java_home and Path(java_home, "bin", "java").is_file())):
        return f"the spark engine needs a Java runtime on PATH or in JAVA_HOME: {INSTALL}"
    return None


def session(master: str | None = None) -> SparkSession:
    """The Spark session the engine runs on (made once per process; Spark keeps it): Spark
    Connect when ``SPARK_REMOTE`` is set, else ``master``, ``SPARK_MASTER`` or ``local[*]``.
    Times are UTC, as in every other engine."""
    why = available()
    if why:
        raise InputError(why)
    from pyspark.sql import SparkSession  # start-up: an optional extra, for this engine only

    builder = SparkSession.builder.appName("audit")
    remote = os.environ.get("SPARK_REMOTE")
    if remote:
        builder = builder.remote(remote)
    else:
        builder = builder.master(master or os.environ.get("SPARK_MASTER") or "local[*]")
        builder = builder.config("spark.ui.enabled", "false")
        builder = builder.config("spark.ui.showConsoleProgress", "false")
    builder = builder.config("spark.sql.session.timeZone", "UTC")
    builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    spark = builder.getOrCreate()
    if not remote:
        spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(
    rule: Rule,
    tables: Mapping[str, Source],
    *,
    spark: SparkSession | None = None,
    **constants: Any,
) -> pa.Table:
    """``rule`` run by Spark on ``tables`` (Arrow tables, or
    :class:`~audit.analysis.engine.Parquet` files read where they lie), with ``constants``: its
    result as an Arrow table."""
    with _inputs(tables, spark) as (con, inputs):
        return _in_utc(con.to_pyarrow(rule(**inputs, **constants)))


@contextlib.contextmanager
def batches(
    rule: Rule,
    tables: Mapping[str, Source],
    *,
    rows: int,
    spark: SparkSession | None = None,
    **constants: Any,
) -> Iterator[pa.RecordBatchReader]:
    """``rule``'s result as an Arrow record batch reader (batches of at most ``rows`` rows)."""
    with _inputs(tables, spark) as (con, inputs):
        got = con.to_pyarrow_batches(rule(**inputs, **constants), chunk_size=rows)
        schema = _in_utc(got.schema.empty_table()).schema
        yield pa.RecordBatchReader.from_batches(schema, (_in_utc(b) for b in got))


def _in_utc(data: Any) -> Any:
    """A table or batch with Spark's times (timezone-naive, in the session's zone: UTC) marked
    as UTC, as every other engine gives them."""
    fields = [
        pa.field(f.name, pa.timestamp(f.type.unit, "UTC"), f.nullable, f.metadata)
        if pa.types.is_timestamp(f.type) and f.type.tz is None
        else f
        for f in data.schema
    ]
    schema = pa.schema(fields, metadata=data.schema.metadata)
    return data if schema.equals(data.schema) else data.cast(schema)


@contextlib.contextmanager
def _inputs(
    tables: Mapping[str, Source], spark: SparkSession | None
) -> Iterator[tuple[Any, dict[str, Any]]]:
    """An Ibis connection to Spark with ``tables`` as temporary views (dropped after)."""
    import ibis  # start-up: only an analysis needs it

    spark = spark or session()
    con = ibis.pyspark.connect(spark)
    inputs = {}
    for name, table in tables.items():
        if isinstance(table, pa.Table):
            frame = spark.createDataFrame(table)
        elif table.paths:
            frame = spark.read.parquet(*(str(p) for p in table.paths))
            columns = [f.name for f in table.arrow_schema() if f.name != "filename"]
            if table.filename:
                columns.append("_metadata.file_name AS filename")
            frame = frame.selectExpr(*columns)
        else:
            frame = spark.createDataFrame(table.arrow_schema().empty_table())
        view = f"audit_{name}_{id(table):x}"
        frame.createOrReplaceTempView(view)
        inputs[name] = con.table(view)
    try:
        yield con, inputs
    finally:
        for view in inputs.values():
            spark.catalog.dropTempView(view.get_name())
