"""Command line interface: thin click commands, each calling one library function.

Exit codes shared by every command: 0 success, 1 failing findings (report), 2 a control errored
(report), 3 bad input or a runtime failure (one line on stderr, never a traceback).
"""

from __future__ import annotations

import sys
import warnings

import click

from audit.errors import AuditError

EXIT_BAD_INPUT = 3


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="audit")
def cli() -> None:
    """Audit the signed webhook deliveries of the incident service."""


def _register() -> None:
    from audit import cli_client, cli_data

    for cmd in (*cli_data.COMMANDS, *cli_client.COMMANDS):
        cli.add_command(cmd)


_register()


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    click.echo(f"audit: warning: {message}", err=True)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``audit`` script; returns the process exit code."""
    warnings.showwarning = _show_warning
    try:
        rv = cli.main(args=argv, prog_name="audit", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("audit: aborted", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as e:
        e.show()
        return EXIT_BAD_INPUT
    except AuditError as e:
        click.echo(f"audit: error: {e}", err=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        click.echo("audit: interrupted", err=True)
        return EXIT_BAD_INPUT
    if isinstance(rv, int):
        return rv
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
