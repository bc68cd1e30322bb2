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


def _parse_date(_ctx, _param, value: str | None):
    from datetime import date

    if value is None:
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a date (YYYY-MM-DD)") from None


@_command
@click.command()
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--start", default="2026-10-01", show_default=True, callback=_parse_date)
@click.option("--days", default=31, show_default=True, type=click.IntRange(7, 366))
@click.option("--incidents", default=300, show_default=True, type=click.IntRange(1, 100_000))
def simulate(out: Path, seed: int, start, days: int, incidents: int) -> None:
    """Write deterministic demo data: capture logs, a secrets file, listing snapshots.

    The data follows the service's published rules and plants the faults a real month has
    (see docs/demo.md). The same seed gives the same bytes.
    """
    from audit.simulate import simulate as run

    result = run(out, seed=seed, start=start, days=days, incidents=incidents)
    _print_simulation(result)


def _print_simulation(result) -> None:
    click.echo(f"captures:  {len(result.captures)} files in {result.captures[0].parent}")
    click.echo(f"secrets:   {result.secrets}")
    click.echo(f"snapshots: {len(result.snapshots)} files in {result.snapshots[0].parent}")
    click.echo(f"truth:     {result.truth}")


@_command
@click.command()
@click.option(
    "--out",
    default="demo-data",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the demo data and results.",
)
@click.option("--seed", default=7, show_default=True, type=int)
def demo(out: Path, seed: int) -> None:
    """Generate the demo data set and run the main job on it; print where the results are."""
    import shutil

    from audit.simulate import simulate as run

    data = out / "data"
    if (data / "truth.json").is_file():  # an earlier demo's data: regenerate, same bytes
        shutil.rmtree(data)
    result = run(data, seed=seed)
    _print_simulation(result)
    audit = audit_signatures(result.captures, result.secrets)
    verdicts = out / "verdicts.csv"
    write_csv(audit.deliveries[VERDICT_COLUMNS], verdicts)
    click.echo("")
    _print_counts(audit.deliveries)
    click.echo("")
    click.echo(f"verdicts:  {verdicts}")


@_command
@click.command()
@click.argument("logs", nargs=-1, required=True)
@click.option("--secrets", "secrets_path", required=True, help="Secrets file (JSON).")
@click.option(
    "--subscriptions",
    "snapshots",
    multiple=True,
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
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
def analyze(
    logs: tuple[str, ...],
    secrets_path: str,
    snapshots: tuple[str, ...],
    as_of: str | None,
    clock_start: str,
    header_prefix: str,
    out: Path,
) -> None:
    """Verify, then write deliveries, events, incidents, status intervals, takedown and
    subscription tables as CSV, and print a short summary."""
    from audit.analysis import analyze as run

    result = run(
        logs,
        secrets_path,
        snapshots=snapshots,
        as_of=as_of,
        header_prefix=header_prefix,
        clock_start=clock_start,
    )
    paths = result.write(out)
    click.echo(summary_text(result))
    for path in paths:
        click.echo(f"wrote {path}")


def summary_text(result) -> str:
    """A few lines an analyst reads first (pure formatting of the analysis tables)."""
    from audit.takedown import kaplan_meier, km_quantile

    d, e, inc = result.deliveries, result.events, result.incidents
    valid = d[d["verdict"] == "valid"]
    outcomes = e.loc[~e["is_test"], "outcome"].value_counts()
    slow = int((valid["response_ms"] > 5000).sum())
    refused = int(valid["response_status"].isin([401, 403]).sum())
    lines = [
        f"as of {result.as_of.isoformat()}",
        f"records {len(d)}: {len(valid)} valid, {len(d) - len(valid)} not valid",
        "events: " + ", ".join(f"{k} {v}" for k, v in outcomes.items()),
        f"valid deliveries answered 401/403: {refused}; acknowledged in more than 5 s: {slow}",
        f"incidents {len(inc)}: {int(inc['taken_down'].sum())} taken down, "
        f"{int((inc['status'].isin(['approval_required', 'action_required'])).sum())} "
        "waiting on the client",
    ]
    durations = result.takedown_durations
    if len(durations):
        km = kaplan_meier(durations["duration_s"], durations["observed"])
        med = km_quantile(km, 0.5)
        start = "creation" if result.clock_start == "created" else "burn start"
        lines.append(f"time to takedown from {start}: {med.describe(scale=1 / 3600, unit=' h')}")
    return "\n".join(lines)
