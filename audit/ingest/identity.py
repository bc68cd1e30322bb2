"""How the evidence store knows a capture file (the sha256 of its content) and how raw captures
count what it keeps once (a copy of a file, a record seen in several files).

A plain file is known by the sha256 of its bytes; a gzip file by the sha256 of its inflated
content, so that a log compressed after it was ingested (``logrotate``'s ``compress``, with or
without ``delaycompress``) is the same file under its new name, not new records.

A record is known by its ``record_sha256`` (:mod:`audit.ingest.record_id`): read from raw
captures, a record already read from an earlier file (a partial copy of a log, a log rotated
by ``copytruncate`` and read beside its copy) is counted once, where it was first seen, as the
store keeps it (:func:`first_sightings`); a line repeated within one file stays two receipts.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from audit.errors import InputError, LoadError
from audit.ingest.compressed import ExpansionLimits
from audit.ingest.compressed import _check as check_expansion
from audit.ingest.formats import CaptureFormat, format_of
from audit.ingest.formats.base import Columns
from audit.ingest.record_id import FIELDS, record_hashes, table_hashes
from audit.ingest.records import is_gzip, read_chunks, stored_columns
from audit.ingest.signatures import subscription_logged

__all__ = [
    "Identity",
    "Seen",
    "content_sha256",
    "distinct_contents",
    "file_identity",
    "first_sightings",
    "follow",
    "identify",
    "moved_away",
    "record_ids",
    "repeated_message",
    "settle",
    "stored_sha256",
    "unsettled",
]

_BLOCK = 4 * 2**20


class Identity(NamedTuple):
    """What :func:`file_identity` reads of a file."""

    #: sha256 of the content (a gzip file's inflated content).
    sha: str
    #: Size on disk.
    size: int
    #: sha256 of the first ``prefix_len`` bytes (None for a gzip file, or no such prefix).
    prefix_sha: str | None
    #: Whether the byte before ``prefix_len`` is a newline (False for a gzip file).
    at_newline: bool


def file_identity(path: Path, prefix_len: int | None, *, gz: bool) -> Identity:
    """A file's content sha256 and size, and the sha256 of its first ``prefix_len`` bytes
    (with whether they end at a newline); a gzip file has no prefix (None, False)."""
    if gz:
        return Identity(content_sha256(path, gz=True), _size(path), None, False)
    h = hashlib.sha256()
    prefix_hex, at_newline, done = None, False, 0
    try:
        with open(path, "rb") as f:
            while block := f.read(_BLOCK):
                if prefix_len is not None and done < prefix_len <= done + len(block):
                    cut = prefix_len - done
                    h.update(block[:cut])
                    prefix_hex = h.hexdigest()
                    at_newline = block[cut - 1 : cut] == b"\n"
                    h.update(block[cut:])
                else:
                    h.update(block)
                done += len(block)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    return Identity(h.hexdigest(), done, prefix_hex, at_newline)


def distinct_contents(files: list[Path]) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """``files`` without those whose content (:func:`content_sha256`: a gzip file's inflated
    content) equals an earlier one's, and the (left out, earlier) pairs: read from raw
    captures, a backup copy beside its log was counted twice, where the evidence store, which
    knows a file by its content, keeps it once.

    Empty files are all kept. Only files of the same content size are hashed: a plain file's
    size, a gzip file's inflated size from its trailer (modulo 2**32; a multi-member gzip file
    gives its last member's, so its copy as a plain file is not found).
    """
    keyed: dict[int, list[int]] = {}
    gz: list[bool] = []
    for i, path in enumerate(files):
        gz.append(is_gzip(path))
        keyed.setdefault(_content_size(path, gz[i]), []).append(i)
    first: dict[str, Path] = {}
    left_out: dict[int, Path] = {}
    for size, group in keyed.items():
        if len(group) < 2 or size == 0:  # empty logs hold nothing to count twice
            continue
        for i in group:
            sha = content_sha256(files[i], gz=gz[i])
            if sha in first:
                left_out[i] = first[sha]
            else:
                first[sha] = files[i]
    kept = [f for i, f in enumerate(files) if i not in left_out]
    return kept, [(files[i], left_out[i]) for i in sorted(left_out)]


def _content_size(path: Path, gz: bool) -> int:
    """A plain file's size, or a gzip file's inflated size modulo 2**32 (its trailer)."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if not gz or size < 4:  # a gzip file too short for a trailer: the reader says why
                return size % 2**32
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None


def content_sha256(path: Path, *, gz: bool) -> str:
    """sha256 of a file's content (inflated within the expansion limits when ``gz``)."""
    if not gz:
        return file_identity(path, None, gz=False).sha
    h, limits, inflated = hashlib.sha256(), ExpansionLimits(), 0
    try:
        with open(path, "rb") as raw, gzip.open(raw) as f:
            while block := f.read(_BLOCK):
                inflated += len(block)
                check_expansion(path, inflated, raw.tell(), limits)  # a bomb stops here
                h.update(block)
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        raise LoadError(f"{path}: truncated or corrupt gzip file ({e})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None
    return h.hexdigest()


def moved_away(path: str, sha: str) -> bool:
    """Whether the file a store entry names no longer holds the content ``sha`` (it was renamed,
    compressed, or replaced by a new log), so that the entry may follow its content."""
    p = Path(path)
    try:
        if not p.is_file():
            return True
        return content_sha256(p, gz=is_gzip(p)) != sha
    except (OSError, InputError, LoadError):
        return True  # unreadable now: it no longer holds the stored content for us


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None


@dataclass(frozen=True)
class Seen:
    """A given file: its resolved path, format, whether gzip, and identity (``file_identity``,
    the prefix being that of the entry stored under its path, if any)."""

    resolved: str
    fmt: CaptureFormat
    gz: bool
    sha: str
    size: int
    prefix_sha: str | None
    at_newline: bool


def identify(path: Path, manifest: dict[str, Any]) -> Seen:
    """A given file as the store sees it (``manifest``: the prefix of a grown log)."""
    resolved = str(path.resolve())
    old = next((e for e in manifest["files"] if e["path"] == resolved), None)
    fmt = format_of(path.name)  # the registry decides, rotated names included
    gz = is_gzip(path)
    prefix_len = old["size"] if old and not gz and fmt.SPLITS_AT_LINES else None
    got = file_identity(path, prefix_len, gz=gz)
    return Seen(resolved, fmt, gz, got.sha, got.size, got.prefix_sha, got.at_newline)


def follow(manifest: dict[str, Any], entry: dict[str, Any], path: str) -> None:
    """``entry`` (its content) is now known by ``path``; an entry that held that name before
    has moved on too (it is found again by its sha256 when its file is given)."""
    for e in manifest["files"]:
        if e is not entry and e["path"] == path:
            e["path"] = f"{path} (moved away; sha256 {e['sha256'][:16]})"
    entry["path"] = path


#: The columns :func:`record_ids` reads (as :func:`audit.ingest.record_id.table_hashes` does).
_HASHED = (
    "received_at",
    "url",
    "response_status",
    "response_ms",
    "subscription_logged",
    "subscription_id",
    "signature",
    "timestamp_header",
    "event_header",
    "delivery_id",
    "body",
    "line",
    "detail",
    "file_sha256",
)


def record_ids(columns: Columns, file_sha256: str) -> pa.Array:
    """``record_sha256`` of parsed records (lists by column, times as int64 ns, as the
    capture formats give them; verified or not), the unreadable ones known by ``file_sha256``
    (their file's), line and reason: the values the evidence store keeps. Verified columns
    must hold ``subscription_logged`` as parsed: the verification fills in an inferred
    subscription."""
    n = len(columns["line"])
    cols = dict(columns)
    cols["file_sha256"] = [file_sha256] * n
    if "subscription_logged" not in cols:
        cols["subscription_logged"] = subscription_logged(cols)
    table = stored_columns(cols, _HASHED)
    verdicts = pa.array([v if isinstance(v, str) else "" for v in cols["verdict"]], pa.string())
    return table_hashes(table.append_column("verdict", verdicts))


def first_sightings(files: np.ndarray[Any, Any], ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Which rows to count: ``files`` (each row's file, numbered in input order) and ``ids``
    (its ``record_sha256``) in input order; a row is left out when its record was read from an
    earlier file (as an ingest leaves out a record stored already), kept when it is the first
    file's, however often it holds it (a line repeated within one file is two receipts)."""
    if len(files) == 0:
        return np.ones(0, dtype=bool)
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    codes = pc.dictionary_encode(ids).indices.to_numpy(zero_copy_only=False)
    first = np.full(int(codes.max()) + 1, np.iinfo(np.int64).max, dtype=np.int64)
    files = np.asarray(files, dtype=np.int64)
    np.minimum.at(first, codes, files)
    return np.asarray(files == first[codes], dtype=bool)


def repeated_message(left_out: int) -> str:
    """The one line that says how many records read from raw captures were counted once."""
    return (
        f"{left_out:,} record(s) seen in more than one file counted once, where first seen "
        "(as an evidence store keeps them)"
    )


def unsettled(source: str) -> str:
    """What :func:`record_ids` takes for the sha256 of the file ``source`` (a path) while it is
    not known yet (hashed while its records are read): :func:`settle` puts it right."""
    return f"unsettled {source}"


def settle(
    ids: list[str],
    *,
    sources: list[str],
    lines: list[int],
    details: list[str | None],
    paths: dict[str, Path],
    file_sha256: Callable[[str], str],
) -> dict[str, str]:
    """The ``record_sha256`` of unreadable records whose file was not known when they were read
    (:func:`unsettled`): old value -> the one the store keeps, given each record's file
    (``sources``, a path by source in ``paths``), line and reason. A line of a JSON Lines log
    is known by its bytes (:func:`unreadable_line_hashes`); an over-long
    line, or a record of another format, by its file's sha256 (``file_sha256(source)``), line
    and reason."""
    by_line: dict[str, dict[int, str]] = {}
    for source in dict.fromkeys(sources):
        path = paths[source]
        if format_of(path.name).SPLITS_AT_LINES:
            wanted = {n for s, n in zip(sources, lines, strict=True) if s == source}
            by_line[source] = unreadable_line_hashes(path, wanted)
    right = []
    for source, n, detail in zip(sources, lines, details, strict=True):
        got = by_line.get(source, {}).get(n)
        if got is None:
            (got,) = record_hashes(
                {name: [None] for name in FIELDS},
                verdicts=["unreadable"],
                files=[file_sha256(source)],
                lines=[n],
                details=[detail],
            )
        right.append(got)
    return dict(zip(ids, right, strict=True))


def stored_sha256(path: Path, sha_of_bytes: str) -> str:
    """The sha256 the evidence store knows the file ``path`` by, given that of its bytes: a
    gzip file's is that of its inflated content (:func:`content_sha256`)."""
    return content_sha256(path, gz=True) if is_gzip(path) else sha_of_bytes


def unreadable_line_hashes(
    path: Path, lines: set[int], *, skip_bytes: int = 0, first_line: int = 1
) -> dict[int, str]:
    """``record_sha256`` of the unreadable records at ``lines`` of the JSON Lines file
    ``path`` (read from byte ``skip_bytes``, numbered from ``first_line``), as the store keeps
    them: the sha256 of ``audit unreadable line v1\n`` and the line's bytes, so that the same
    torn line in a rewritten version of its log is one record, stored once. An over-long line
    (its bytes not read) is left out: it keeps the hash of its file, line and reason
    (:mod:`audit.ingest.record_id`)."""
    out: dict[int, str] = {}
    if not lines:
        return out
    last = max(lines)
    chunks = read_chunks(path, skip_bytes=skip_bytes, first_line=first_line)
    for chunk in chunks:
        if chunk.first_line > last:
            break
        for i, raw in enumerate(chunk.data.split(b"\n")):
            n = chunk.first_line + i
            if n in lines and n not in chunk.overlong:
                out[n] = hashlib.sha256(_UNREADABLE_LINE + raw).hexdigest()
    return out


_UNREADABLE_LINE = b"audit unreadable line v1\n"
