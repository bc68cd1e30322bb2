"""The ``audit analyze`` command: the analysis tables, from raw captures or an evidence store."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import click

from audit.analysis.analyze import analyze as analyze_logs
from audit.analysis.store_analysis import analyze_store
from audit.cli.params import STORE_OPTION, TEXT_PATH, NonEmptyPath, check_out_folder, need_logs
from audit.ingest.capture_check import check_captures
from audit.ingest.query import store_inputs
from audit.ingest.store import WRITTEN, reverify
from audit.spec import DEFAULT_HEADER_PREFIX, DELIVERY_TIMEOUT_S

__all__ = ["analyze", "summary_text"]


@click.command()
@click.argument("logs", nargs=-1, type=TEXT_PATH)
@click.option("--secrets", "secrets_path", type=TEXT_PATH, help="Secrets file (JSON).")
@click.option(
    "--subscriptions",
    "snapshots",
    multiple=True,
    type=TEXT_PATH,
    help="GET /webhooks snapshot file, folder or glob (repeatable).",
)
@click.option(
    "--as-of", default=None, help="Judge the data at this ISO time (default: latest receipt)."
)
@click.option(
    "--clock-start",
    type=click.Choice(["created", "burn"]),
    default="created",
    show_default=True,
    help="Where time to takedown starts: incident creation or burn (takedown) start.",
)
@click.option("--header-prefix", default=DEFAULT_HEADER_PREFIX, show_default=True)
@click.option("--out", required=True, type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["parquet", "csv"]),
    default="parquet",
    show_default=True,
    help="Table files: Parquet (typed, compact; the small tables also as CSV) or CSV.",
)
@STORE_OPTION
@click.option(
    "--engine",
    "on",
    type=click.Choice(["duckdb", "spark"]),
    default="duckdb",
    show_default=True,
    help="With --store: what computes the deliveries and events tables: DuckDB in this process, "
    "or Spark (pip install 'audit[spark]'; local mode unless --spark-master or SPARK_REMOTE).",
)
@click.option(
    "--spark-master",
    default=None,
    metavar="URL",
    help="With --engine spark: the Spark master (default: SPARK_MASTER, else local[*]).",
)
def analyze(
    logs: tuple[str, ...],
    secrets_path: str | None,
    snapshots: tuple[str, ...],
    as_of: str | None,
    clock_start: str,
    header_prefix: str,
    out: Path,
    fmt: str,
    store_dir: Path | None,
    on: str,
    spark_master: str | None,
) -> None:
    """Verify, then write deliveries, events, incidents, status intervals, takedown and
    subscription tables (Parquet, or CSV with --format csv), and print a short summary."""
    need_logs(logs, store_dir)
    if secrets_path is None and store_dir is None:
        raise click.UsageError("Missing option '--secrets'.")
    if on != "duckdb" and store_dir is None:
        raise click.UsageError("--engine needs --store (raw captures are read in this process).")
    if spark_master is not None and on != "spark":
        raise click.UsageError("--spark-master needs --engine spark.")
    if on == "spark":
        from audit.analysis import spark  # start-up: only the spark engine needs it

        spark.session(spark_master)  # refused in one line without PySpark or Java
    check_out_folder(out)  # before the work, not after
    for note in check_captures(logs, header_prefix=header_prefix):  # refused: nothing written
        click.echo(f"audit: note: {note}", err=True)
    if store_dir is not None:
        if not logs and secrets_path is not None:  # written only when the secrets changed
            again = reverify(store_dir, secrets_path, header_prefix=header_prefix)
            for line in [] if again is None else [*again.messages, WRITTEN]:
                click.echo(f"audit: {store_dir}: {line}", err=True)
            secrets_path = None  # done
        stored = analyze_store(
            store_dir,
            out,
            logs=logs,
            secrets_path=secrets_path,
            snapshots=snapshots,
            as_of=as_of,
            header_prefix=header_prefix,
            clock_start=clock_start,
            fmt=fmt,
            on=on,
        )
        read = int(store_inputs(store_dir)["records"].sum())
        click.echo(summary_text(stored, read=read))
        paths = stored.paths
    else:
        result = analyze_logs(
            logs,
            secrets_path,
            snapshots=snapshots,
            as_of=as_of,
            header_prefix=header_prefix,
            clock_start=clock_start,
        )
        paths = result.write(out, fmt=fmt)
        click.echo(summary_text(result, read=int(result.inputs["records"].sum())))
    for path in paths:
        click.echo(f"wrote {path}")


class Summarised(Protocol):
    """What :func:`summary_text` reads: an ``Analysis`` or a ``StoreAnalysis``."""

    @property
    def clock_start(self) -> str: ...

    def summary(self) -> Mapping[str, Any]: ...


def summary_text(result: Summarised, read: int | None = None) -> str:
    """A few lines an analyst reads first: :meth:`Analysis.summary`, formatted (nothing is
    refitted). ``read``: the records of the files read (their ``inputs``); those beyond the
    summary's were received after ``as_of`` and left out, which the text says."""
    s = result.summary()
    lines = [
        f"as of {s['as_of'].isoformat()}",
        f"records {s['records']}: {s['valid']} valid, {s['records'] - s['valid']} not valid",
        "events: " + ", ".join(f"{k} {v}" for k, v in s["event_outcomes"].items()),
        f"valid deliveries answered 401/403: {s['refused']}; acknowledged in more than "
        f"{DELIVERY_TIMEOUT_S} s: {s['slow']}",
        f"incidents {s['incidents']}: {s['taken_down']} taken down, "
        f"{s['waiting_on_client']} waiting on the client",
    ]
    if read is not None and read > s["records"]:
        later = read - s["records"]
        lines.insert(2, f"left out: {later} of {read} records, received after as_of")
    if s["takedown_median"] is not None:
        start = "creation" if result.clock_start == "created" else "burn start"
        median = s["takedown_median"].describe(unit=" h")
        lines.append(f"time to takedown from {start}: {median}")
    return "\n".join(lines)
