"""CLI commands over stored data: verify, simulate, demo, report."""

from __future__ import annotations

from pathlib import Path

import click

from audit.cli.params import SECRETS_FILE, TEXT_PATH, NonEmptyPath
from audit.cli.store import check_out_folder
from audit.findings.catalogue import SEVERITIES
from audit.ingest.verification import VERDICT_COLUMNS, verdict_count_rows
from audit.spec import DEFAULT_HEADER_PREFIX

COMMANDS: list[click.Command] = []


def _command(fn: click.Command) -> click.Command:
    COMMANDS.append(fn)
    return fn


def _print_counts(counts: dict[str, int]) -> None:
    """The verdict table: ``counts`` by verdict, in check order (see ``verdict_counts``)."""
    rows = verdict_count_rows(counts)
    width = max([len("verdict"), *(len(verdict) for verdict, _, _ in rows)])
    click.echo(f"{'verdict':<{width}}  {'count':>8}  {'share':>7}")
    for verdict, count, share in rows:
        click.echo(f"{verdict:<{width}}  {count:>8}  {share:>7.2%}")
    click.echo(f"{'total':<{width}}  {sum(count for _, count, _ in rows):>8}")


_STORE = click.option(
    "--store",
    "store_dir",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Evidence store: LOGS are ingested into it first (verified once), then read from it.",
)


def _need_logs(logs: tuple[str, ...], store_dir: Path | None) -> None:
    if not logs and store_dir is None:
        raise click.UsageError("give LOGS, or --store DIR")


@_command
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
@_STORE
def verify(
    logs: tuple[str, ...],
    secrets_path: str | None,
    out: Path,
    header_prefix: str,
    store_dir: Path | None,
) -> None:
    """Re-verify the signature of every stored delivery as of its receipt time.

    LOGS are capture files (JSONL, .gz, HAR), folders or globs. With --store and no LOGS,
    every record of the store is written.
    """
    from audit.cli.store import check_table_path, write_table

    _need_logs(logs, store_dir)
    if secrets_path is None and (logs or store_dir is None):
        raise click.UsageError("Missing option '--secrets'.")
    check_table_path(out)  # before the work, not after
    if store_dir is not None:
        from audit.ingest.query import load_deliveries
        from audit.ingest.store import ingest

        paths = None
        if secrets_path is not None:
            paths = ingest(logs, secrets_path, store_dir, header_prefix=header_prefix).paths
        deliveries = load_deliveries(store_dir, columns=VERDICT_COLUMNS, paths=paths or None)
        write_table(deliveries[VERDICT_COLUMNS], out)
        counts = {str(v): int(n) for v, n in deliveries["verdict"].value_counts().items()}
    else:  # Arrow from the workers to the file: no pandas for Parquet (CSV is written by it)
        from audit.ingest.verdicts import verdict_table, verdicts_by_name

        table = verdict_table(logs, secrets_path, header_prefix=header_prefix)
        write_table(table, out)
        counts = verdicts_by_name(table)
    _print_counts(counts)
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
@click.option("--out", required=True, type=NonEmptyPath(file_okay=False, path_type=Path))
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--start", default="2026-10-01", show_default=True, callback=_parse_date)
@click.option("--days", default=31, show_default=True, type=click.IntRange(7, 366))
@click.option("--incidents", default=300, show_default=True, type=click.IntRange(20, 100_000))
def simulate(out: Path, seed: int, start, days: int, incidents: int) -> None:
    """Write deterministic demo data: capture logs, a secrets file, listing snapshots.

    The data follows the service's published rules and plants the faults a real month has
    (see docs/demo.md). The same seed gives the same bytes.
    """
    from audit.demo import simulate as run

    check_out_folder(out)
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
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Folder for the demo data and the reports.",
)
@click.option("--seed", default=7, show_default=True, type=int)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
@click.pass_context
def demo(ctx: click.Context, out: Path, seed: int, quiet: bool) -> int:
    """Generate the demo data set and run the compliance report on it; print where it is."""
    import shutil

    from audit.demo import simulate as run
    from audit.report import parse_period, run_report

    check_out_folder(out)
    data = out / "data"
    if (data / "truth.json").is_file():  # an earlier demo's data: regenerate, same bytes
        shutil.rmtree(data)
    result = run(data, seed=seed)
    _print_simulation(result)
    import json

    period = parse_period(json.loads(result.truth.read_text())["period"]["start"][:7])
    report = run_report(
        [data / "captures"],
        secrets_path=result.secrets,
        snapshots=[data / "snapshots"],
        period=period,
        out_dir=out / "reports",
        progress=None if quiet else _progress,
    )
    _print_report(report)
    # The demo plants failing findings on purpose: exit 0 unless the run itself failed.
    return 3 if report.exit_code == 3 else 0


def _progress(line: str) -> None:
    click.echo(f"audit: {line}", err=True)


def _print_report(report) -> None:
    if report.message:
        prefix = "audit: warning: " if report.rendering_failed else ""
        click.echo(prefix + report.message, err=report.rendering_failed or report.exit_code == 3)
    counts = report.manifest.get("findings", {}).get("status", {})
    if counts:
        click.echo("findings:  " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if report.run_dir is not None:
        click.echo(f"run:       {report.run_dir}")
    if report.html is not None:
        click.echo(f"report:    {report.html}")
    click.echo(f"index:     {report.index}")


def _refuse_secrets_in(path: Path | None, secrets_path: str, what: str) -> None:
    """Refuse (before any kernel starts) a params or mutes file holding a known secret value,
    or one that is not a regular file of at most 16 MiB (:func:`audit.paths.read_regular`)."""
    if path is None:
        return
    from audit.ingest.secrets import secret_values
    from audit.paths import read_regular
    from audit.redaction import refuse_known_secrets

    try:
        text = read_regular(path, what=what).decode("utf-8", errors="replace")
    except OSError:
        return  # the pipeline reports a missing or unreadable file itself
    values = secret_values(secrets_path)
    refuse_known_secrets(path, text, values)
    # Also the decoded strings: JSON "\u0077hsec..." or YAML "\x77hsec..." escapes hide a value.
    try:
        import yaml

        parsed = yaml.safe_load(text)  # YAML reads JSON too
    except Exception:  # the pipeline reports a bad file itself
        return
    refuse_known_secrets(f"{path} (decoded)", "\n".join(_strings(parsed, set())), values)


def _strings(obj: object, seen: set[int]) -> list[str]:
    """Every string in a parsed document, each shared node once (a YAML alias bomb stays small)."""
    if id(obj) in seen:
        return []
    seen.add(id(obj))
    if isinstance(obj, str):
        return [obj]
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    if not isinstance(items, list | tuple):
        return []
    return [s for item in items for s in _strings(item, seen)]


@_command
@click.command()
@click.argument("logs", nargs=-1, type=TEXT_PATH)
@SECRETS_FILE
@click.option(
    "--subscriptions",
    "snapshots",
    multiple=True,
    type=TEXT_PATH,
    help="Snapshot file/folder/glob.",
)
@_STORE
@click.option(
    "--period",
    required=True,
    help="2026-10, 2026-W44, 2026-10-01..2026-10-15, previous-month or previous-week (UTC).",
)
@click.option(
    "--params",
    "params_path",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="YAML/JSON: as_of, client_id, clock_start, header_prefix, thresholds.",
)
@click.option("--mutes", "mutes_path", type=NonEmptyPath(dir_okay=False, path_type=Path))
@click.option(
    "--out",
    default="reports",
    show_default=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
)
@click.option(
    "--fail-on",
    type=click.Choice(list(reversed(SEVERITIES))),
    default="low",
    show_default=True,
    help="Exit 1 when a finding at or above this severity fails.",
)
@click.option("--skip-if-exists", is_flag=True, help="Do nothing if the period has a report.")
@click.option("--timeout", "timeout_s", default=900, show_default=True, type=int)
@click.option(
    "--notebook",
    "notebook",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Render this notebook instead of the packaged one (it gets one parameter, run_dir).",
)
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
def report(
    logs: tuple[str, ...],
    secrets_path: str,
    snapshots: tuple[str, ...],
    period: str,
    params_path: Path | None,
    mutes_path: Path | None,
    out: Path,
    fail_on: str,
    skip_if_exists: bool,
    timeout_s: int,
    notebook: Path | None,
    quiet: bool,
    store_dir: Path | None,
) -> int:
    """Run the compliance report for a period: notebook, HTML, findings, manifest, index.

    Exit codes: 0 no failing finding at or above --fail-on, 1 failing findings, 2 a control
    errored, 3 bad input or a runtime failure.
    """
    from datetime import UTC, datetime

    from audit.report import parse_period, read_params, run_report

    _need_logs(logs, store_dir)
    check_out_folder(out)
    when = parse_period(period, today=datetime.now(UTC).date())  # the only wall-clock read
    _refuse_secrets_in(params_path, secrets_path, "parameters file")
    _refuse_secrets_in(mutes_path, secrets_path, "mutes file")
    result = run_report(
        list(logs),
        secrets_path=secrets_path,
        snapshots=list(snapshots),
        period=when,
        out_dir=out,
        params=read_params(params_path),
        mutes_path=mutes_path,
        fail_on=fail_on,
        skip_if_exists=skip_if_exists,
        timeout_s=timeout_s,
        notebook=notebook,
        progress=None if quiet else _progress,
        store=store_dir,
    )
    _print_report(result)
    return result.exit_code
