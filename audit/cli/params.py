"""Parameter types, options and checks shared by the commands."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

import click

from audit.errors import InputError
from audit.redaction import for_terminal

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

#: ``scheme://`` at the start of a value: a URL (``s3://``, ``gs://``, ``https://``, ``file://``).
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
#: ``user:password@`` after a URL's scheme: never shown.
_USERINFO = re.compile(r"(?<=://).*@")


class StorePath(NonEmptyPath):
    """``--store DIR``: a local folder. A URL (``s3://bucket/x``, any ``scheme://``) is refused
    in one line (InputError, exit 3) before anything is touched: as a path it was the local
    folder ``./s3:/bucket/x`` (``//`` folds into ``/``), created, then a failed read. The store
    is local; ``docs/scale.md`` ("Object storage") says how to publish it to a bucket. A
    relative folder whose first part holds a colon (``s3:x``) is made absolute."""

    def __init__(self) -> None:
        super().__init__(file_okay=False, path_type=Path)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = value if isinstance(value, str) else ""
        if (url := _URL.match(text)) is not None:
            scheme = url.group()
            shown = _USERINFO.sub("…@", text)  # s3://KEY:SECRET@bucket: credentials stay out
            raise InputError(
                f"--store {for_terminal(shown)}: a URL ({scheme}); the evidence store is a local "
                "folder (for object storage, ingest into a local folder, then sync it: "
                "docs/scale.md, Object storage)"
            )
        path = super().convert(value, param, ctx)
        if isinstance(path, Path) and not path.is_absolute() and ":" in path.parts[0]:
            return path.absolute()  # Arrow reads a relative s3:x as a URI ("missing bucket")
        return path


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
