"""CLI commands of the compliance report: ``audit report`` and ``audit demo``."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import click
import yaml

from audit.cli.data import print_simulation
from audit.cli.params import (
    SECRETS_FILE,
    STORE_OPTION,
    TEXT_PATH,
    NonEmptyPath,
    check_out_folder,
    need_logs,
)
from audit.demo import simulate as simulate_demo
from audit.findings.catalogue import SEVERITIES
from audit.ingest.capture_check import check_captures
from audit.ingest.secrets import secret_values
from audit.paths import read_regular
from audit.progress import on_terminal
from audit.redaction import refuse_known_secrets
from audit.report import ReportResult, parse_period, read_params, run_report

__all__ = ["demo", "report"]


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
    check_out_folder(out)
    data = out / "data"
    if (data / "truth.json").is_file():  # an earlier demo's data: regenerate, same bytes
        shutil.rmtree(data)
    with on_terminal("audit: simulate", quiet=quiet) as progress:
        result = simulate_demo(data, seed=seed, progress=progress)
    print_simulation(result)
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


def _print_report(report: ReportResult) -> None:
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
    if report.pdf is not None:
        click.echo(f"pdf:       {report.pdf}")
    click.echo(f"index:     {report.index}")
    printed = report.manifest.get("pdf")
    if isinstance(printed, dict) and printed.get("status") != "ok" and not report.skipped:
        # one line on stderr; the exit code stays that of the findings
        click.echo(f"audit: --pdf: {printed.get('reason')}; report.pdf not written", err=True)


def _refuse_secrets_in(path: Path | None, secrets_path: str, what: str) -> None:
    """Refuse (before any kernel starts) a params or mutes file holding a known secret value,
    or one that is not a regular file of at most 16 MiB (:func:`audit.paths.read_regular`)."""
    if path is None:
        return
    try:
        text = read_regular(path, what=what).decode("utf-8", errors="replace")
    except OSError:
        return  # the pipeline reports a missing or unreadable file itself
    values = secret_values(secrets_path)
    refuse_known_secrets(path, text, values)
    # Also the decoded strings: JSON "\u0077hsec..." or YAML "\x77hsec..." escapes hide a value.
    try:
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
@STORE_OPTION
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
@click.option(
    "--pdf",
    "pdf",
    is_flag=True,
    help="Also print the report to report.pdf (needs a Chromium on PATH).",
)
@click.option(
    "--allow-quiet",
    "allow_quiet",
    is_flag=True,
    help="A period with no delivery at all exits 0 when nothing failed (default: exit 1).",
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
    pdf: bool,
    allow_quiet: bool,
    quiet: bool,
    store_dir: Path | None,
) -> int:
    """Run the compliance report for a period: notebook, HTML, findings, manifest, index.

    Exit codes: 0 no failing finding at or above --fail-on, 1 failing findings or a period
    with no delivery at all (unless --allow-quiet) or none that verified, 2 a control errored,
    3 bad input or a runtime failure. --pdf never changes them: without a Chromium,
    or when printing fails, it says so on stderr and in the manifest.
    """
    need_logs(logs, store_dir)
    check_out_folder(out)
    when = parse_period(period, today=datetime.now(UTC).date())  # the only wall-clock read
    _refuse_secrets_in(params_path, secrets_path, "parameters file")
    _refuse_secrets_in(mutes_path, secrets_path, "mutes file")
    for note in check_captures(logs):  # a log holding no capture record: refused, nothing written
        click.echo(f"audit: note: {note}", err=True)
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
        notice=_progress,  # what was written to the store is told even with --quiet
        pdf=pdf,
        allow_quiet=allow_quiet,
    )
    _print_report(result)
    if result.quiet:
        click.echo(f"audit: {result.quiet}", err=True)
    if result.doubt:
        click.echo(f"audit: warning: {result.doubt}", err=True)
    return result.exit_code
