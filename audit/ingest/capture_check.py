"""Refuse an input that is no capture log before a command writes anything.

A CSV, the secrets file, a listing snapshot or any file whose records are all unreadable given
as a capture log would otherwise make a full report (every line ``unreadable``) or a store
holding nothing but unreadable rows. :func:`check_captures` reads the start of every log the
command was given (the same files the loaders read, :func:`audit.ingest.load.expand_paths`) and
parses it with the log's own format until one record reads; a file with none is refused in one
line (:class:`~audit.errors.InputError`, exit 3), naming it and the first line's reason.

An **empty** file (no byte, or blank lines only) is not refused: a receiver that captured
nothing on a quiet day writes one. It is returned as a note, which the command prints.

A **torn** log is not refused either: a JSON Lines file none of whose lines reads, but each of
whose lines begins as a capture record does and is cut short (a receiver stopped mid-write on a
quiet day: ``{"received_at": "2026-10-0``). Such a line begins ``{"`` with a field of a capture
record (``received_at``, ``headers``, ``body``...: :data:`RECORD_FIELDS`), or a beginning of one
when the line ends inside the name, and its JSON ends before the object does. A CSV, a secrets
file (``{"wh_1": ...``), a listing (``{"data": ...``) or a whole JSON object of other fields
never looks so. Its lines are read as unreadable lines, counted, and a note says so.

A real log with some unreadable lines passes (its first readable record is enough) and is read
as before, its unreadable lines counted. Reading stops at the first readable record, so a good
log costs one chunk of its start; only a file without one is read to its end.
"""

from __future__ import annotations

import itertools
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson

from audit.errors import InputError, LoadError
from audit.ingest.compressed import GZIP_MAGIC, inflate, inflate_stream
from audit.ingest.formats import format_of, har
from audit.ingest.formats.base import Buffer
from audit.ingest.lines import read_lines
from audit.ingest.load import expand_paths
from audit.paths import source_name
from audit.spec import DEFAULT_HEADER_PREFIX, header_names

__all__ = ["CHECK_CHUNK_BYTES", "RECORD_FIELDS", "check_captures", "first_record", "torn_record"]

#: Bytes of whole lines parsed at a time while looking for a record.
CHECK_CHUNK_BYTES = 64 * 1024
#: The fields of a capture record (JSON Lines), any of which may come first in a line.
RECORD_FIELDS = (
    "received_at",
    "subscription_id",
    "url",
    "headers",
    "body",
    "body_b64",
    "response_status",
    "response_ms",
)
_FIRST_KEY = re.compile(rb'\s*\{\s*"([A-Za-z0-9_]*)("?)')


def torn_record(line: bytes) -> bool:
    """Whether ``line`` is a capture record cut short: it begins ``{"`` with a capture
    record's field (or the start of one, when the line ends inside the name) and its JSON
    ends before the object does.

    >>> torn_record(b'{"received_at": "2026-10-0'), torn_record(b'{"rec')
    (True, True)
    >>> torn_record(b'{"wh_1": [{"secret": "x'), torn_record(b'{"received_at": 1}x')
    (False, False)
    """
    text = line.strip()
    m = _FIRST_KEY.match(text)
    if m is None:
        return False
    key, closed = m.group(1).decode("ascii"), m.group(2)
    if closed and key not in RECORD_FIELDS:
        return False
    if not closed and (m.end() != len(text) or not any(f.startswith(key) for f in RECORD_FIELDS)):
        return False
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError as e:
        return e.pos >= len(text)  # the parser wanted more: the line was cut
    return False


class _Seen:
    """What a file's start held: lines that are records, unreadable ones, the first reason."""

    def __init__(self) -> None:
        self.readable = 0
        self.unreadable = 0
        #: Of the unreadable lines, those that are capture records cut short.
        self.torn = 0
        self.first_reason: tuple[int, str] | None = None

    def add(self, buf: Buffer, lines: list[bytes] | None = None, first_line: int = 1) -> None:
        """Count ``buf``'s rows (``lines``: the raw lines they were parsed from, from
        ``first_line``, to tell torn records)."""
        for row in buf.rows:
            if row.verdict == "unreadable":
                self.unreadable += 1
                if self.first_reason is None:
                    self.first_reason = (row.line, str(row.detail))
                at = row.line - first_line
                if lines is not None and 0 <= at < len(lines) and torn_record(lines[at]):
                    self.torn += 1
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
    if not fmt.SPLITS_AT_LINES:  # a HAR file: one document, read until an entry reads
        try:
            f = path.open("rb")
        except OSError as e:
            raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
        with f:
            head = f.read(2)
            f.seek(0)
            blocks: Iterator[bytes] = iter(lambda: f.read(2**20), b"")
            if not head:
                inflate(path, b"")  # a .gz name with no byte is an error, as the loaders say
            elif head == GZIP_MAGIC:
                blocks = inflate_stream(path, blocks)
            first, at_start = b"", True
            for block in blocks:  # past blank blocks (a blank HAR is a quiet day too)
                if at_start:
                    block, at_start = block.removeprefix(b"\xef\xbb\xbf"), False
                if block.strip():
                    first = block
                    break
            if first:
                stream = har.BlockReader(itertools.chain([first], blocks))
                try:
                    seen.add(har.parse_har(stream, source, wanted, until_readable=True))
                except ValueError as e:
                    raise LoadError(f"{source}: not a HAR 1.2 file ({e})") from None
        return seen
    for chunk in read_lines(path, chunk_bytes=CHECK_CHUNK_BYTES):
        more = {"overlong": chunk.overlong} if chunk.overlong else {}
        buf = fmt.parse(chunk.data, source, wanted, chunk.first_line, **more)
        seen.add(buf, chunk.data.split(b"\n"), chunk.first_line)
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
        One note per empty file ("PATH: empty, no capture record") and per torn one ("PATH:
        no readable capture record: N torn line(s) ..."), for the command to print.

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
        if seen.torn == seen.unreadable:  # a capture log whose only lines were torn
            notes.append(
                f"{source_name(path)}: no readable capture record: {seen.torn} torn line(s), "
                "capture records cut short, read as unreadable lines"
            )
            continue
        assert seen.first_reason is not None  # an unreadable row gives its line and reason
        line, reason = seen.first_reason
        raise InputError(
            f"{source_name(path)}: holds no capture record ({seen.unreadable} line(s), none "
            f"readable; line {line}: {reason}); give capture logs (JSON Lines or HAR)"
        )
    return notes
