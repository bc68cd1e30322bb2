"""CLI commands over capture data: ``audit verify`` and ``audit simulate``."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import click

from audit.cli.params import (
    STORE_OPTION,
    TEXT_PATH,
    NonEmptyPath,
    check_out_folder,
    need_logs,
)
from audit.cli.store import QUIET, check_table_path, write_table
from audit.demo import SimulationResult
from audit.demo import simulate as simulate_demo
from audit.ingest.capture_check import check_captures
from audit.ingest.store import WRITTEN, ingest, reverify
from audit.ingest.verdicts import verdict_table, verdicts_by_name
from audit.ingest.verification import VERDICT_COLUMNS, verdict_count_rows
from audit.progress import on_terminal
from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = ["print_simulation", "simulate", "verify"]


def _print_counts(counts: dict[str, int]) -> None:
    """The verdict table: ``counts`` by verdict, in check order (see ``verdict_counts``)."""
    rows = verdict_count_rows(counts)
    width = max([len("verdict"), *(len(verdict) for verdict, _, _ in rows)])
    click.echo(f"{'verdict':<{width}}  {'count':>8}  {'share':>7}")
    for verdict, count, share in rows:
        click.echo(f"{verdict:<{width}}  {count:>8}  {share:>7.2%}")
    click.echo(f"{'total':<{width}}  {sum(count for _, count, _ in rows):>8}")


@click.command()
@click.argument("logs", nargs=-1, type=TEXT_PATH)
@click.option(
    "--secrets",
    "secrets_path",
    type=TEXT_PATH,
    help="Secrets file (JSON): subscription id -> secrets in issue order.",
)
@click.option(
    "--out",
    default="verdicts.csv",
    show_default=True,
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Where to write one row per input record: .csv or .parquet.",
)
@click.option(
    "--header-prefix",
    default=DEFAULT_HEADER_PREFIX,
    show_default=True,
    help="Brand part of the delivery header names.",
)
@STORE_OPTION
@QUIET
def verify(
    logs: tuple[str, ...],
    secrets_path: str | None,
    out: Path,
    header_prefix: str,
    store_dir: Path | None,
    quiet: bool,
) -> None:
    """Re-verify the signature of every stored delivery as of its receipt time.

    LOGS are capture files (JSONL, .gz, HAR), folders or globs. With --store and no LOGS,
    every record of the store is written.
    """
    need_logs(logs, store_dir)
    if secrets_path is None and (logs or store_dir is None):
        raise click.UsageError("Missing option '--secrets'.")
    check_table_path(out)  # before the work, not after
    for note in check_captures(logs, header_prefix=header_prefix):  # refused: nothing written
        click.echo(f"audit: note: {note}", err=True)
    if store_dir is not None:
        from audit.ingest.file_records import file_rows  # start-up: pandas, only for --store
        from audit.ingest.query import load_deliveries  # start-up: pandas, only for --store

        paths = None
        if logs:
            assert secrets_path is not None  # checked above: LOGS need --secrets
            with on_terminal("audit: verify", quiet=quiet) as progress:
                done = ingest(
                    logs, secrets_path, store_dir, header_prefix=header_prefix, progress=progress
                )
            for line in done.messages:  # what the ingest wrote: records verified again...
                click.echo(f"audit: {store_dir}: {line}", err=True)
            paths = done.paths
        elif secrets_path is not None:  # written only when the secrets changed
            again = reverify(store_dir, secrets_path, header_prefix=header_prefix)
            for line in [] if again is None else [*again.messages, WRITTEN]:
                click.echo(f"audit: {store_dir}: {line}", err=True)
        if paths and secrets_path is not None:  # every record the files hold now, wherever kept
            deliveries = file_rows(
                store_dir, paths, secrets_path, columns=VERDICT_COLUMNS, header_prefix=header_prefix
            )
        else:
            deliveries = load_deliveries(store_dir, columns=VERDICT_COLUMNS)
        write_table(deliveries[VERDICT_COLUMNS], out)
        counts = {str(v): int(n) for v, n in deliveries["verdict"].value_counts().items()}
    else:  # Arrow from the workers to the file: no pandas for Parquet (CSV is written by it)
        assert secrets_path is not None  # checked above: LOGS without a store need --secrets
        with on_terminal("audit: verify", quiet=quiet) as progress:
            table = verdict_table(
                logs, secrets_path, header_prefix=header_prefix, progress=progress
            )
        write_table(table, out)
        counts = verdicts_by_name(table)
    _print_counts(counts)
    click.echo(f"wrote {out}")


def _parse_date(_ctx: click.Context, _param: click.Parameter, value: str | None) -> date | None:
    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)") from None


@click.command()
@click.option("--out", required=True, type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--start", default="2026-10-01", show_default=True, callback=_parse_date)
@click.option("--days", default=31, show_default=True, type=click.IntRange(7, 366))
@click.option("--incidents", default=300, show_default=True, type=click.IntRange(20, 100_000))
@QUIET
def simulate(out: Path, seed: int, start: date, days: int, incidents: int, quiet: bool) -> None:
    """Write deterministic demo data: capture logs, a secrets file, listing snapshots.

    The data follows the service's published rules and plants the faults a real month has
    (each planted fault is listed in truth.json). The same seed gives the same bytes.
    """
    check_out_folder(out)
    with on_terminal("audit: simulate", quiet=quiet) as progress:
        result = simulate_demo(
            out, seed=seed, start=start, days=days, incidents=incidents, progress=progress
        )
    print_simulation(result)


def print_simulation(result: SimulationResult) -> None:
    """Where :func:`audit.demo.simulate` wrote what (``simulate``, ``demo``)."""
    click.echo(f"captures:  {len(result.captures)} files in {result.captures[0].parent}")
    click.echo(f"secrets:   {result.secrets}")
    click.echo(f"snapshots: {len(result.snapshots)} files in {result.snapshots[0].parent}")
    click.echo(f"truth:     {result.truth}")
