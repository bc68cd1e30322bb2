"""Capture lines read as a stream, each over-long line skipped without ever being held.

A JSON Lines file (plain or gzip) is read block by block and handed on as :class:`Chunk`\\ s of
whole lines. A line longer than the record limit (:data:`audit.ingest.formats.jsonl.
MAX_RECORD_BYTES`, read at call time) is never kept: once it passes the limit its bytes are only
counted until its newline, so memory stays bounded by the limit and time is linear in the file,
whatever the line's length (a NUL region without newline included). In the chunk the line is
left empty (its newline kept, so line numbers and newline counts stay right) and its number and
length are in :attr:`Chunk.overlong`: the parsers count it ``unreadable`` with
:func:`audit.ingest.formats.jsonl.too_long`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from audit.errors import LoadError
from audit.ingest.compressed import GZIP_MAGIC, ExpansionLimits, inflate, inflate_stream
from audit.ingest.formats import jsonl

if TYPE_CHECKING:
    from _hashlib import HASH

__all__ = ["Chunk", "read_lines"]

_BOM = b"\xef\xbb\xbf"
_PLAIN_STEP = 4 * 2**20  # plain-file bytes per read
_GZ_STEP = 64 * 2**10  # compressed bytes per read (the inflater gives at most 1 MiB per step)


class Chunk(NamedTuple):
    """Whole lines of a capture file."""

    #: The lines, each over-long one emptied (its newline kept).
    data: bytes
    #: The number of the first line of ``data``.
    first_line: int
    #: Line number -> length in bytes of each line emptied in ``data``.
    overlong: dict[int, int]


class _Lines:
    """Blocks in, whole lines out; a line over ``limit`` bytes is counted, not kept."""

    def __init__(self, first_line: int, limit: int) -> None:
        self.limit = limit
        self.line = first_line  # the number of the line being read (``partial``)
        self.partial: list[bytes] = []
        self.partial_len = 0
        self.skipping = False  # the line being read is over the limit: bytes counted only
        self.ready: list[bytes] = []
        self.ready_len = 0
        self.ready_line = first_line
        self.overlong: dict[int, int] = {}

    def feed(self, block: bytes) -> None:
        step = self.limit + 1  # two newlines within one such block are at most ``limit`` apart
        if len(block) <= step:
            self._feed(block)
            return
        for at in range(0, len(block), step):
            self._feed(block[at : at + step])

    def _feed(self, block: bytes) -> None:
        nl = block.find(b"\n")
        if nl < 0:
            self.partial_len += len(block)
            if not self.skipping:
                if self.partial_len > self.limit:
                    self.skipping, self.partial = True, []
                else:
                    self.partial.append(block)
            return
        length = self.partial_len + nl
        if self.skipping or length > self.limit:
            self.overlong[self.line] = length
            self._emit(b"\n")
        else:
            self.partial.append(block[: nl + 1])
            self._emit(b"".join(self.partial))
        self.line += 1
        last = block.rfind(b"\n")
        if last > nl:
            middle = block[nl + 1 : last + 1]
            self.line += middle.count(b"\n")
            self._emit(middle)
        tail = block[last + 1 :]
        self.partial, self.partial_len, self.skipping = ([tail] if tail else []), len(tail), False

    def _emit(self, data: bytes) -> None:
        self.ready.append(data)
        self.ready_len += len(data)

    def finish(self) -> None:
        """The last line, without a newline."""
        if self.skipping or self.partial_len > self.limit:
            self.overlong[self.line] = self.partial_len  # its (empty) place ends the data
        elif self.partial:
            self._emit(b"".join(self.partial))
        self.partial, self.partial_len, self.skipping = [], 0, False

    def take(self) -> Chunk | None:
        """The whole lines read so far (None when there are none)."""
        if not self.ready and not self.overlong:
            return None
        got = Chunk(b"".join(self.ready), self.ready_line, self.overlong)
        self.ready, self.ready_len, self.ready_line, self.overlong = [], 0, self.line, {}
        return got


def read_lines(
    path: Path,
    *,
    chunk_bytes: int,
    skip_bytes: int = 0,
    first_line: int = 1,
    limits: ExpansionLimits | None = None,
    digest: HASH | None = None,
) -> Iterator[Chunk]:
    """Chunks of about ``chunk_bytes`` of whole lines of a JSONL file, plain or gzip (by its
    magic bytes; inflated as a stream within ``limits``). ``skip_bytes`` (plain files only)
    starts after an already read prefix. A UTF-8 BOM at the very start is skipped. ``digest``,
    when given, is updated with every byte of the file as read (its sha256, in the same pass).

    A line over :data:`audit.ingest.formats.jsonl.MAX_RECORD_BYTES` is emptied and listed in
    its chunk's ``overlong``. Raises :class:`~audit.errors.LoadError` for a file that cannot be
    read, a corrupt gzip, or one over the expansion limits.
    """
    limit = jsonl.MAX_RECORD_BYTES
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == GZIP_MAGIC
            if not gz and f.tell() == 0:
                inflate(path, b"")  # an empty file named .gz is an error, not an empty log
            f.seek(0 if gz else skip_bytes)
            step = _GZ_STEP if gz else _PLAIN_STEP
            raw = iter(lambda: f.read(step), b"")
            if digest is not None:
                raw = _tapped(raw, digest)
            blocks = inflate_stream(path, raw, limits) if gz else raw
            lines = _Lines(first_line, limit)
            start = skip_bytes == 0 or gz
            for block in blocks:
                if start:
                    block, start = block.removeprefix(_BOM), False
                lines.feed(block)
                if lines.ready_len >= chunk_bytes:
                    got = lines.take()
                    if got is not None:
                        yield got
            lines.finish()
            last = lines.take()
            if last is not None:
                yield last
    except OSError as e:
        raise LoadError(f"{path}: cannot read ({e.strerror or type(e).__name__})") from None


def _tapped(blocks: Iterator[bytes], digest: HASH) -> Iterator[bytes]:
    for block in blocks:
        digest.update(block)
        yield block
