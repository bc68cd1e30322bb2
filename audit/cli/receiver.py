"""CLI commands of the receiver side: ``audit probe`` and ``audit receive``.

Secrets travel by file only (``--secrets``); no option takes a secret and nothing printed holds
one. ``probe`` exits 0 when every check passed, 1 when one failed, 3 when the receiver could not
be reached or the input is bad.
"""

from __future__ import annotations

import ipaddress
import signal
import warnings
from pathlib import Path

import click

from audit.cli.params import NonEmptyPath, check_out_folder
from audit.receiver.probe import (
    ProbeResult,
    check_target,
    plan,
    run_probe,
    shown_url,
    tls_verify,
)
from audit.receiver.reference import (
    HEADER_TIMEOUT_S,
    MAX_CONNECTIONS,
    bind,
    make_server,
    receiver_app,
)
from audit.spec import DEFAULT_HEADER_PREFIX

__all__ = ["probe", "receive", "warn_if_exposed"]

_prefix_option = click.option(
    "--header-prefix",
    default=DEFAULT_HEADER_PREFIX,
    show_default=True,
    help="Brand part of the delivery header names.",
)


@click.command()
@click.argument("url")
@click.option(
    "--secrets",
    "secrets_path",
    required=True,
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Secrets file (JSON): the subscription's current and previous secrets sign.",
)
@click.option("--subscription", "subscription_id", required=True, help="Subscription id.")
@click.option(
    "--out",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Write probe.json, findings.json/.csv, junit.xml and probe.html here.",
)
@click.option(
    "--only",
    multiple=True,
    metavar="CHECK",
    help="Run only this check (repeat, or separate with commas).",
)
@click.option("--dry-run", is_flag=True, help="Print the plan without sending anything.")
@click.option(
    "--ca",
    "ca_file",
    type=NonEmptyPath(path_type=Path),  # a missing or odd file: one line, exit 3 (tls_verify)
    help="PEM bundle of the CAs to trust (a private CA); default: SSL_CERT_FILE / SSL_CERT_DIR "
    "when set, else the certifi bundle.",
)
@_prefix_option
def probe(
    url: str,
    secrets_path: Path,
    subscription_id: str,
    out: Path | None,
    only: tuple[str, ...],
    dry_run: bool,
    ca_file: Path | None,
    header_prefix: str,
) -> int:
    """Send one webhook.test request per conformance check to URL and judge the answers.

    URL must be https://, or http:// to 127.0.0.1 / localhost. One request per check, no
    retries. The certificate is verified against --ca, else SSL_CERT_FILE / SSL_CERT_DIR, else
    the certifi bundle. Exit 0 all passed, 1 a check failed, 3 unreachable or bad input.
    """
    if out is not None:
        check_out_folder(out)  # before the requests, not after
    if dry_run:
        target = check_target(url)
        tls_verify(ca_file)  # a bad CA file fails the dry run as it would fail the run
        steps = plan(secrets_path, subscription_id, only=only or None, header_prefix=header_prefix)
        click.echo(
            f"plan for {shown_url(target)} (subscription {subscription_id}); nothing is sent:"
        )
        width = max(len(c.id) for c, _ in steps)
        for c, skip in steps:
            what = f"skipped: {skip}" if skip else c.sends
            click.echo(f"  {c.id:<{width}}  expect {c.expected:<22}  {what}")
        return 0
    result = run_probe(
        url,
        secrets_path,
        subscription_id,
        only=only or None,
        header_prefix=header_prefix,
        ca_file=ca_file,
    )
    _print_result(result)
    if out is not None:
        from audit.receiver.probe_report import write_outputs  # start-up: pandas, for --out

        write_outputs(result, out)
        click.echo(
            f"written: {out}/ (probe.json, findings.json, findings.csv, junit.xml, probe.html)"
        )
    return result.exit_code


def _print_result(result: ProbeResult) -> None:
    width = max(len(c.id) for c in result.checks)
    click.echo(f"{'check':<{width}}  result  status      ms  detail")
    for c in result.checks:
        verdict = "skip" if c.passed is None else ("PASS" if c.passed else "FAIL")
        status = "-" if c.status is None else str(c.status)
        ms = "-" if c.ms is None else f"{c.ms:.0f}"
        click.echo(f"{c.id:<{width}}  {verdict:<6}  {status:>6}  {ms:>6}  {c.detail}")
    failed = sum(c.passed is False for c in result.checks)
    skipped = sum(c.passed is None for c in result.checks)
    passed = len(result.checks) - failed - skipped
    click.echo(f"passed {passed}, failed {failed}, skipped {skipped}: {result.target}")


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), required=True, help="0: any free port.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--secrets",
    "secrets_path",
    required=True,
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Secrets file (JSON); re-read when it changes (rotation).",
)
@click.option(
    "--subscription",
    "subscription_id",
    help="Subscription this endpoint serves (needed when the file holds several).",
)
@click.option(
    "--out",
    required=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Folder of the daily capture files (YYYY-MM-DD.jsonl).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=MAX_CONNECTIONS,
    show_default=True,
    help="Connections served at once; beyond them requests are answered 503.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=HEADER_TIMEOUT_S,
    show_default=True,
    metavar="SECONDS",
    help="Close a connection that has not sent its request head within this time.",
)
@_prefix_option
def receive(
    port: int,
    host: str,
    secrets_path: Path,
    subscription_id: str | None,
    out: Path,
    max_connections: int,
    header_timeout: float,
    header_prefix: str,
) -> None:
    """Run the reference receiver: capture every POST, verify it, answer 204 or 401.

    Needs the receiver extra (pip install 'audit[receiver]'). Stop it with Ctrl-C.
    """
    check_out_folder(out)
    app = receiver_app(
        secrets_path, out, subscription_id=subscription_id, header_prefix=header_prefix
    )
    sock = bind(host, port)
    server = make_server(
        app,
        sock,
        log_level="warning",
        max_connections=max_connections,
        header_timeout=header_timeout,
    )
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    warn_if_exposed(bound_host)
    click.echo(
        f"receiving on http://{shown}:{bound_port}/ for subscription "
        f"{app.subscription_id}; captures in {out}/ (Ctrl-C stops)",
    )
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal.
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo("receiver stopped", err=True)


def warn_if_exposed(host: str) -> None:
    """Warn when the reference receiver listens beyond loopback: it speaks plain HTTP, and the
    service delivers to HTTPS URLs only (spec 4.1), so a TLS-terminating proxy belongs in front."""
    if not ipaddress.ip_address(host).is_loopback:
        warnings.warn(
            f"listening on {host}, not loopback, over plain HTTP: put a TLS-terminating proxy "
            "in front and keep this port off the internet",
            stacklevel=2,
        )


class _Stopped(Exception):
    """SIGTERM after uvicorn's graceful shutdown: a normal stop (systemd, docker)."""


def _stop(signum: int, frame: object) -> None:
    raise _Stopped
