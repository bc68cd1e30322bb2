"""CLI commands over stored data: verify, simulate, demo (analyze and report join later)."""

from __future__ import annotations

from pathlib import Path

import click

from audit.safe import write_csv
from audit.spec import DEFAULT_HEADER_PREFIX
from audit.verification import VERDICT_COLUMNS, audit_signatures, verdict_counts

COMMANDS: list[click.Command] = []


def _command(fn: click.Command) -> click.Command:
    COMMANDS.append(fn)
    return fn


def _print_counts(deliveries) -> None:
    table = verdict_counts(deliveries)
    width = max([len("verdict"), *(len(v) for v in table["verdict"])])
    click.echo(f"{'verdict':<{width}}  {'count':>8}  {'share':>7}")
    for row in table.itertuples():
        click.echo(f"{row.verdict:<{width}}  {row.count:>8}  {row.share:>7.2%}")
    click.echo(f"{'total':<{width}}  {int(table['count'].sum()):>8}")


@_command
@click.command()
@click.argument("logs", nargs=-1, required=True)
@click.option(
    "--secrets",
    "secrets_path",
    required=True,
    help="Secrets file (JSON): subscription id -> secrets in issue order.",
)
@click.option(
    "--out",
    default="verdicts.csv",
    show_default=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Where to write one row per input record.",
)
@click.option(
    "--header-prefix",
    default=DEFAULT_HEADER_PREFIX,
    show_default=True,
    help="Brand part of the delivery header names.",
)
def verify(logs: tuple[str, ...], secrets_path: str, out: Path, header_prefix: str) -> None:
    """Re-verify the signature of every stored delivery as of its receipt time.

    LOGS are capture files (JSONL, .gz, HAR), folders or globs.
    """
    result = audit_signatures(logs, secrets_path, header_prefix=header_prefix)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(result.deliveries[VERDICT_COLUMNS], out)
    _print_counts(result.deliveries)
    click.echo(f"wrote {out}")
