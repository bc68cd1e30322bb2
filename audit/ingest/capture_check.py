"""Refuse an input that is no capture log before a command writes anything.

A CSV, the secrets file, a listing snapshot or any file whose records are all unreadable given
as a capture log would otherwise make a full report (every line ``unreadable``) or a store
holding nothing but unreadable rows. :func:`check_captures` reads the start of every log the
command was given (the same files the loaders read, :func:`audit.ingest.load.expand_paths`) and
parses it with the log's own format until one record reads; a file with none is refused in one
line (:class:`~audit.errors.InputError`, exit 3), naming it and the first line's reason.

An **empty** file (no byte, or blank lines only) is not refused: a receiver that captured
nothing on a quiet day writes one. It is returned as a note, which the command prints.

A real log with some unreadable lines passes (its first readable record is enough) and is read
as before, its unreadable lines counted. Reading stops at the first readable record, so a good
log costs one chunk of its start; only a file without one is read to its end.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from pathlib import Path

from audit.errors import InputError, LoadError
from audit.ingest.compressed import inflate
from audit.ingest.formats import format_of
from audit.ingest.formats.base import Buffer
from audit.ingest.lines import read_lines
from audit.ingest.load import expand_paths
from audit.paths import source_name
from audit.spec import DEFAULT_HEADER_PREFIX, header_names

__all__ = ["CHECK_CHUNK_BYTES", "check_captures", "first_record"]

#: Bytes of whole lines parsed at a time while looking for a record.
CHECK_CHUNK_BYTES = 64 * 1024


class _Seen:
    """What a file's start held: lines that are records, unreadable ones, the first reason."""

    def __init__(self) -> None:
        self.readable = 0
        self.unreadable = 0
        self.first_reason: tuple[int, str] | None = None

    def add(self, buf: Buffer) -> None:
        for row in buf.rows:
            if row.verdict == "unreadable":
                self.unreadable += 1
                if self.first_reason is None:
                    self.first_reason = (row.line, str(row.detail))
            else:
                self.readable += 1


def first_record(path: Path, *, header_prefix: str = DEFAULT_HEADER_PREFIX) -> _Seen:
    """Parse ``path`` with its format until a readable capture record is found (or the end).

    Raises :class:`~audit.errors.LoadError` for a file that cannot be read at all (as the
    loaders do).
    """
    fmt = format_of(path.name)
    wanted = {v: k for k, v in header_names(header_prefix).items()}
    seen = _Seen()
    source = str(path)
    if not fmt.SPLITS_AT_LINES:  # a HAR file: one document, read whole as the loader does
        try:
            blob = path.read_bytes()
        except OSError as e:
            raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
        data = inflate(path, blob).removeprefix(b"\xef\xbb\xbf")
        if data.strip():
            seen.add(fmt.parse(data, source, wanted))
        return seen
    for chunk in read_lines(path, chunk_bytes=CHECK_CHUNK_BYTES):
        more = {"overlong": chunk.overlong} if chunk.overlong else {}
        seen.add(fmt.parse(chunk.data, source, wanted, chunk.first_line, **more))
        if seen.readable:
            break
    return seen


def check_captures(
    logs: Iterable[str | os.PathLike[str]], *, header_prefix: str = DEFAULT_HEADER_PREFIX
) -> list[str]:
    """Refuse ``logs`` when one of their files holds no capture record; return notes.

    Parameters
    ----------
    logs
        Files, folders and globs, as the command was given them.
    header_prefix
        The brand part of the delivery header names (a record needs them to be read).

    Returns
    -------
    list of str
        One note per empty file ("PATH: empty, no capture record"), for the command to print.

    Raises
    ------
    InputError
        One line: "PATH: holds no capture record (N lines, none readable; line L: REASON); give
        capture logs (JSON Lines or HAR)". Also the loaders' error for a file that cannot be
        read (a path that matches nothing is left to the command's loader, which says so).

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     csv = Path(d, "export.csv")
    ...     _ = csv.write_text("received_at,subscription_id\\n2026-10-01T00:00:00Z,wh_1\\n")
    ...     try:
    ...         check_captures([csv])
    ...     except InputError as e:
    ...         print(str(e).split(": ", 1)[1].split(";")[0])
    holds no capture record (2 line(s), none readable
    """
    try:
        with warnings.catch_warnings():  # the loaders warn about skipped files; once is enough
            warnings.simplefilter("ignore")
            files = expand_paths(logs)
    except InputError:  # a path that matches nothing: the command's loader says so, as before
        return []
    notes = []
    for path in files:
        seen = first_record(path, header_prefix=header_prefix)
        if seen.readable:
            continue
        if not seen.unreadable:
            notes.append(f"{source_name(path)}: empty, no capture record (a quiet day?)")
            continue
        assert seen.first_reason is not None  # an unreadable row gives its line and reason
        line, reason = seen.first_reason
        raise InputError(
            f"{source_name(path)}: holds no capture record ({seen.unreadable} line(s), none "
            f"readable; line {line}: {reason}); give capture logs (JSON Lines or HAR)"
        )
    return notes
