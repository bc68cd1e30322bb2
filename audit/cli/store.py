"""The ``audit ingest`` command, and the table writer of ``verify`` (by extension)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import pyarrow as pa

from audit.atomic import write_arrow_parquet_atomic, write_parquet_atomic
from audit.cli.params import (
    SECRETS_FILE,
    STORE_PATH,
    TEXT_PATH,
    check_out_folder,
)
from audit.errors import ParameterError
from audit.ingest.capture_check import check_captures
from audit.ingest.store import ingest as ingest_logs
from audit.progress import on_terminal
from audit.redaction import cut_secrets, cut_secrets_arrow
from audit.spec import DEFAULT_HEADER_PREFIX

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["QUIET", "TABLE_SUFFIXES", "check_table_path", "ingest", "write_table"]

#: Output suffixes :func:`write_table` knows.
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
#: ``--quiet`` of the commands that draw a progress line (only when stderr is a terminal).
QUIET = click.option(
    "--quiet", is_flag=True, help="No progress line on stderr (drawn only on a terminal)."
)


def check_table_path(path: Path) -> str:
    """The lower-cased suffix of an output table path; ParameterError unless it is known;
    InputError when its folder cannot be one (:func:`check_out_folder`)."""
    suffix = path.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise ParameterError(f"{path}: write .csv or .parquet (got {suffix or 'no extension'!r})")
    check_out_folder(path.parent)
    return suffix


def write_table(df: pd.DataFrame | pa.Table, path: Path) -> None:
    """Write ``df`` as CSV (through :func:`audit.safe.write_csv`) or Parquet, by extension.

    ``df`` may be an Arrow table holding ``pandas`` schema metadata (as
    :func:`audit.ingest.verdicts.verdict_table` gives): Parquet is then written without
    pandas, CSV from the frame the metadata describes.
    """
    suffix = check_table_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Known secrets out (captured incident data may quote one): ``verify --out``'s ids, detail.
    df = cut_secrets_arrow(df) if isinstance(df, pa.Table) else cut_secrets(df)
    if suffix == ".csv":
        from audit.safe import write_csv  # start-up: pandas, only for CSV (Parquet goes without)

        write_csv(df.to_pandas() if isinstance(df, pa.Table) else df, path)
    elif isinstance(df, pa.Table):
        write_arrow_parquet_atomic(df, path)
    else:
        write_parquet_atomic(df, path)


@click.command()
@click.argument("logs", nargs=-1, required=True, type=TEXT_PATH)
@SECRETS_FILE
@click.option(
    "--store",
    "store_dir",
    required=True,
    type=STORE_PATH,
    help="Evidence store folder, local (created when missing).",
)
@click.option("--header-prefix", default=DEFAULT_HEADER_PREFIX, show_default=True)
@QUIET
def ingest(
    logs: tuple[str, ...], secrets_path: str, store_dir: Path, header_prefix: str, quiet: bool
) -> None:
    """Verify capture logs once and keep them in an evidence store (Parquet by month).

    Files already in the store are skipped; a grown log adds only its new lines; a changed
    file is re-ingested; records are verified again when the secrets file changed.
    """
    for note in check_captures(logs, header_prefix=header_prefix):  # refused: nothing written
        click.echo(f"audit: note: {note}", err=True)
    with on_terminal("audit: ingest", quiet=quiet) as progress:
        r = ingest_logs(
            logs, secrets_path, store_dir, header_prefix=header_prefix, progress=progress
        )
    for line in r.messages:
        click.echo(line)
    click.echo(
        f"files: {r.files_added} added, {r.files_grown} grown, {r.files_changed} changed, "
        f"{r.files_unchanged} already stored"
    )
    click.echo(f"records: {r.records} stored ({r.unreadable} unreadable) in {store_dir}")
    if r.naive_times:
        click.echo(
            f"audit: warning: {r.naive_times} received_at value(s) had no UTC offset "
            "and were read as UTC",
            err=True,
        )
