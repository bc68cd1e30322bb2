"""Command line interface: thin click commands, each calling one library function.

Exit codes shared by every command: 0 success, 1 failing findings (report), 2 a control errored
(report), 3 bad input or a runtime failure (one line on stderr, never a traceback).
"""

from __future__ import annotations

import os
import sys
import warnings

import click

from audit.errors import AuditError
from audit.memory import small_pages
from audit.redaction import for_terminal, scrub

EXIT_BAD_INPUT = 3


class _Interrupted(Exception):
    """A ^C in a command, taken from click: click prints an empty line before its own
    ``Abort`` for one."""


class _Commands(click.Group):
    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise _Interrupted from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="audit")
def cli() -> None:
    """Audit the signed webhook deliveries of the incident service."""


def _register() -> None:
    from audit.cli import analysis, client, data, receiver, store

    for module in (data, analysis, store, client, receiver):
        for cmd in module.COMMANDS:
            cli.add_command(cmd)


_register()


def _register_named_secrets(argv: list[str]) -> None:
    """Read (best effort) the secrets of every ``--secrets FILE`` in ``argv``, first of all.

    Every secret read is cut from messages (:func:`audit.redaction.scrub`); a command reads its
    secrets file only when it gets there, so an option value checked before (``--period``,
    ``--as-of``, click's own checks of ``--timeout`` or ``--fail-on``) would otherwise be
    echoed as typed, a pasted secret included. Read before anything else, they are also cut
    before a long value is shortened for a message (:func:`audit.errors.shown`).
    """
    from audit.ingest.secrets import secret_values

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


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"audit: warning: {_say(message)}", err=True)


def main(argv: list[str] | None = None, *, obj: dict | None = None) -> int:
    """Entry point of the ``audit`` script; returns the process exit code.

    ``obj`` becomes the click context object: ``{"client_factory": f}`` makes the service
    commands build their client with ``f`` (see :mod:`audit.cli.client`).
    """
    warnings.showwarning = _show_warning
    small_pages()  # before any large block is touched (docs/scale.md, "Twentieth pass")
    try:
        _register_named_secrets(list(sys.argv[1:] if argv is None else argv))
        rv = cli.main(args=argv, prog_name="audit", standalone_mode=False, obj=obj)
    except (click.exceptions.Abort, _Interrupted):
        click.echo("audit: aborted", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as e:
        e.message = scrub(e.message)  # "Invalid value for '--timeout': 'whsec_…'": cut
        e.show()
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
