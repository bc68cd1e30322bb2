"""Parameter types shared by the commands."""

from __future__ import annotations

from typing import Any

import click

__all__ = ["SECRETS_FILE", "TEXT_PATH", "NonEmptyPath"]


class NonEmptyPath(click.Path):
    """``click.Path`` that refuses an empty value: ``""`` (an unset variable in a cron line,
    ``audit report "$CAPTURES"``) was read as the current folder, which was then searched for
    logs, or written to."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str | bytes) and not value:
            self.fail("empty path (an unset variable?)", param, ctx)
        return super().convert(value, param, ctx)


#: A path kept as given (a file, folder or glob; ``-`` is not special): LOGS, ``--secrets``,
#: ``--subscriptions``.
TEXT_PATH = NonEmptyPath(path_type=str, allow_dash=False, readable=False)  # the reader says why

#: ``--secrets FILE``, required (``ingest`` and ``report``; ``verify`` and ``analyze`` need it
#: only without a store, and say so themselves).
SECRETS_FILE = click.option(
    "--secrets", "secrets_path", required=True, type=TEXT_PATH, help="Secrets file (JSON)."
)
