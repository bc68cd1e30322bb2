"""Command line interface: thin click commands, each calling one library function.

Exit codes shared by every command: 0 success, 1 failing findings (report), 2 a control errored
(report), 3 bad input or a runtime failure (one line on stderr, never a traceback).
"""

from __future__ import annotations

import importlib
import io
import os
import sys
import warnings
from typing import Any, NamedTuple, TextIO

import click

from audit.errors import AuditError
from audit.ingest.secrets import secret_values
from audit.redaction import for_terminal, scrub

EXIT_BAD_INPUT = 3


class Listed(NamedTuple):
    """A command of the ``audit`` group, before its module is loaded."""

    module: str  #: the module that defines it, as an attribute of the command's name
    summary: str  #: its line in ``audit --help``: the first sentence of its own help


#: Every command: its module is imported only when the command runs (or shows its help), so
#: that ``audit verify`` loads neither the report pipeline nor the service client, and
#: ``audit --help`` loads no command at all. ``tests/test_cli_surface.py`` checks each summary.
COMMANDS: dict[str, Listed] = {
    "analyze": Listed(
        "audit.cli.analysis",
        "Verify, then write deliveries, events, incidents, status intervals, takedown and "
        "subscription tables (Parquet, or CSV with --format csv), and print a short summary.",
    ),
    "demo": Listed(
        "audit.cli.report",
        "Generate the demo data set and run the compliance report on it; print where it is.",
    ),
    "ingest": Listed(
        "audit.cli.store",
        "Verify capture logs once and keep them in an evidence store (Parquet by month).",
    ),
    "probe": Listed(
        "audit.cli.receiver",
        "Send one webhook.test request per conformance check to URL and judge the answers.",
    ),
    "receive": Listed(
        "audit.cli.receiver",
        "Run the reference receiver: capture every POST, verify it, answer 204 or 401.",
    ),
    "report": Listed(
        "audit.cli.report",
        "Run the compliance report for a period: notebook, HTML, findings, manifest, index.",
    ),
    "simulate": Listed(
        "audit.cli.data",
        "Write deterministic demo data: capture logs, a secrets file, listing snapshots.",
    ),
    "snapshot": Listed(
        "audit.cli.client",
        "Save GET /webhooks as a snapshot file for the subscription analyses.",
    ),
    "verify": Listed(
        "audit.cli.data",
        "Re-verify the signature of every stored delivery as of its receipt time.",
    ),
    "webhooks": Listed(
        "audit.cli.client",
        "Manage webhook subscriptions (list, create, update, delete, test, rotate-secret).",
    ),
}


class _Interrupted(Exception):
    """A ^C in a command, taken from click: click prints an empty line before its own
    ``Abort`` for one."""


class _Commands(click.Group):
    """The ``audit`` group: click's "lazily loading subcommands" pattern over :data:`COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        listed = COMMANDS.get(cmd_name)
        if listed is not None and cmd_name not in self.commands:
            command = getattr(importlib.import_module(listed.module), cmd_name)
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The commands and their summaries, without loading one (a command not loaded yet is
        shown by a stand-in holding its summary)."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(len(name) for name in names)
        shown = [
            self.commands.get(name) or click.Command(name, help=_summary(name)) for name in names
        ]
        rows = [
            (name, cmd.get_short_help_str(limit)) for name, cmd in zip(names, shown, strict=True)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None


def _summary(name: str) -> str:
    return COMMANDS[name].summary


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="audit")
def cli() -> None:
    """Audit the signed webhook deliveries of the incident service."""


def _register_named_secrets(argv: list[str]) -> None:
    """Read (best effort) the secrets of every ``--secrets FILE`` in ``argv``, first of all.

    Every secret read is cut from messages (:func:`audit.redaction.scrub`); a command reads its
    secrets file only when it gets there, so an option value checked before (``--period``,
    ``--as-of``, click's own checks of ``--timeout`` or ``--fail-on``) would otherwise be
    echoed as typed, a pasted secret included. Read before anything else, they are also cut
    before a long value is shortened for a message (:func:`audit.redaction.shown`).
    """
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg.startswith("--secrets="):
            secret_values(arg.removeprefix("--secrets="))
        elif arg == "--secrets" and i + 1 < len(argv):
            secret_values(argv[i + 1])


def _say(text: object) -> str:
    """A message fit for the terminal: known secrets and the API key cut, controls escaped."""
    return for_terminal(scrub(str(text)))


def _show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    click.echo(f"audit: warning: {_say(message)}", err=True)


def main(argv: list[str] | None = None, *, obj: dict[str, Any] | None = None) -> int:
    """Entry point of the ``audit`` script; returns the process exit code.

    ``obj`` becomes the click context object: ``{"client_factory": f}`` makes the service
    commands build their client with ``f`` (see :mod:`audit.cli.client`).
    """
    warnings.showwarning = _show_warning
    try:
        _register_named_secrets(list(sys.argv[1:] if argv is None else argv))
        rv = cli.main(args=argv, prog_name="audit", standalone_mode=False, obj=obj)
    except (click.exceptions.Abort, _Interrupted):
        click.echo("audit: aborted", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as e:
        shown = io.StringIO()
        e.show(file=shown)  # "Invalid value for '--timeout': 'whsec_…'": cut, below
        click.echo(scrub(shown.getvalue()), err=True, nl=False)
        return EXIT_BAD_INPUT
    except AuditError as e:
        click.echo(f"audit: error: {_say(e)}", err=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        click.echo("audit: interrupted", err=True)
        return EXIT_BAD_INPUT
    except OSError as e:  # a path the user gave cannot be written or read
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"audit: error: {_say(where)}{_say(e.strerror or e)}", err=True)
        return EXIT_BAD_INPUT
    except Exception as e:  # a bug: still one line and exit 3, never "1 = failing findings"
        if os.environ.get("AUDIT_DEBUG"):
            raise
        if type(e) is RuntimeError and str(e) == "Query interrupted":  # DuckDB's word for a ^C
            click.echo("audit: interrupted", err=True)
            return EXIT_BAD_INPUT
        if type(e).__name__ == "BrokenProcessPool":  # a worker killed (out of memory, a signal)
            click.echo(
                "audit: error: a worker process ended before its work was done (killed, or out "
                "of memory?); run again",
                err=True,
            )
            return EXIT_BAD_INPUT
        if _damaged_file(e):
            first = _say(e).splitlines()[0]
            if "No files found that match" in first:  # a part replaced while it was read
                first = "the store changed while it was read (an ingest replaced parts); run again"
            click.echo(f"audit: error: a file cannot be read: {first}", err=True)
            return EXIT_BAD_INPUT
        click.echo(
            f"audit: internal error: {type(e).__name__}: {_say(e)} (set AUDIT_DEBUG=1 for a "
            "traceback)",
            err=True,
        )
        return EXIT_BAD_INPUT
    if isinstance(rv, int):
        return rv
    return 0


def _damaged_file(e: Exception) -> bool:
    """Whether ``e`` is DuckDB's or Arrow's word for a damaged or vanished file (a store part
    truncated or deleted by hand), not a bug: such a file is the user's to restore."""
    kind, module = type(e).__name__, type(e).__module__ or ""
    if module.startswith("_duckdb") or module.startswith("duckdb"):
        return kind == "IOException" or (
            kind == "InvalidInputException" and "parquet" in str(e).lower()
        )
    return module.startswith("pyarrow") and kind == "ArrowInvalid" and "Parquet" in str(e)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
