"""How the evidence store knows a capture file: the sha256 of its content.

A plain file is known by the sha256 of its bytes; a gzip file by the sha256 of its inflated
content, so that a log compressed after it was ingested (``logrotate``'s ``compress``, with or
without ``delaycompress``) is the same file under its new name, not new records.
"""

from __future__ import annotations

import gzip
import hashlib
import zlib
from dataclasses import dataclass
from pathlib import Path

from audit.errors import InputError, LoadError
from audit.ingest.compressed import ExpansionLimits
from audit.ingest.compressed import _check as check_expansion
from audit.ingest.formats import format_of
from audit.ingest.records import is_gzip

__all__ = ["Seen", "content_sha256", "file_identity", "follow", "identify", "moved_away"]

_BLOCK = 4 * 2**20


def file_identity(
    path: Path, prefix_len: int | None, *, gz: bool
) -> tuple[str, int, str | None, bool]:
    """(content sha256, size on disk, sha256 of the first ``prefix_len`` bytes, whether the
    byte before ``prefix_len`` is a newline); a gzip file has no prefix (None, False)."""
    if gz:
        return content_sha256(path, gz=True), _size(path), None, False
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
    return h.hexdigest(), done, prefix_hex, at_newline


def content_sha256(path: Path, *, gz: bool) -> str:
    """sha256 of a file's content (inflated within the expansion limits when ``gz``)."""
    if not gz:
        return file_identity(path, None, gz=False)[0]
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
    fmt: object
    gz: bool
    sha: str
    size: int
    prefix_sha: str | None
    at_newline: bool


def identify(path: Path, manifest: dict) -> Seen:
    """A given file as the store sees it (``manifest``: the prefix of a grown log)."""
    resolved = str(path.resolve())
    old = next((e for e in manifest["files"] if e["path"] == resolved), None)
    fmt = format_of(path.name)  # the registry decides, rotated names included
    gz = is_gzip(path)
    prefix_len = old["size"] if old and not gz and fmt.SPLITS_AT_LINES else None
    return Seen(resolved, fmt, gz, *file_identity(path, prefix_len, gz=gz))


def follow(manifest: dict, entry: dict, path: str) -> None:
    """``entry`` (its content) is now known by ``path``; an entry that held that name before
    has moved on too (it is found again by its sha256 when its file is given)."""
    for e in manifest["files"]:
        if e is not entry and e["path"] == path:
            e["path"] = f"{path} (moved away; sha256 {e['sha256'][:16]})"
    entry["path"] = path
