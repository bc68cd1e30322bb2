"""Parameter types, options and checks shared by the commands."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import click

from audit.errors import InputError
from audit.paths import local_folder

__all__ = [
    "SECRETS_FILE",
    "STORE_OPTION",
    "STORE_PATH",
    "TEXT_PATH",
    "NonEmptyPath",
    "StorePath",
    "check_out_folder",
    "need_logs",
]


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


class StorePath(NonEmptyPath):
    """``--store DIR``: a local folder (:func:`audit.ingest.store_folder.local_folder`: a URL
    is refused in one line, exit 3, before anything is touched)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str):
            local_folder(value, "--store")  # a URL: refused before the path is looked at
        path = super().convert(value, param, ctx)
        return local_folder(path, "--store") if isinstance(path, Path) else path


#: The type of every ``--store DIR`` (``ingest``, ``verify``, ``analyze``, ``report``).
STORE_PATH = StorePath()

#: ``--store DIR`` of ``verify``, ``analyze`` and ``report``.
STORE_OPTION = click.option(
    "--store",
    "store_dir",
    type=STORE_PATH,
    help="Evidence store folder (local): LOGS are ingested into it first (verified once), then "
    "read from it; with --secrets, records whose secrets changed are verified again.",
)


def need_logs(logs: tuple[str, ...], store_dir: Path | None) -> None:
    """A usage error unless the command got LOGS or ``--store``."""
    if not logs and store_dir is None:
        raise click.UsageError("give LOGS, or --store DIR")


def check_out_folder(path: Path, option: str = "--out") -> None:
    """Refuse, before any work, an output folder that cannot be one: ``path`` or one of its
    parents exists and is not a folder (a file, ``/dev/null``). A folder that does not exist
    yet is fine (the writer creates it); a look that is refused is left to the writer."""
    for at in (path, *path.parents):
        try:
            mode = at.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing (a parent that is a file is found further up)
        except OSError:
            return
        if not stat.S_ISDIR(mode):
            raise InputError(f"{at}: not a folder ({option})")
        return
