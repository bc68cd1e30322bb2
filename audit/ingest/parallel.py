"""Verification on every core, with no body crossing a process boundary.

A plain JSONL file is cut into byte ranges at line ends (one sequential pass counts the lines
before each cut); each forked worker reads its own range from the file, parses and verifies it
(:func:`audit.ingest.fast.verify_jsonl`) and either returns the verdict columns only (``audit
verify``) or writes its rows as Parquet parts itself (``audit ingest``). Gzip files cannot be
cut, so the parent decompresses them piece by piece and hands each piece over. HAR files (one
JSON document) are verified in-process by the exact path.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import pyarrow as pa

from audit.ingest import records
from audit.ingest.fast import _keyed, verify_jsonl
from audit.ingest.formats import jsonl
from audit.ingest.formats.base import Columns
from audit.ingest.identity import record_ids, unsettled
from audit.ingest.secrets import SecretStore
from audit.ingest.workers import default_workers, forked_workers

__all__ = ["Piece", "Runner", "Verdicts", "map_pieces", "plan_pieces"]

T = TypeVar("T")

_SCAN_BLOCK = 8 * 2**20


@dataclass(frozen=True)
class Piece:
    """A run of whole lines: a byte range of a plain file, or bytes already read (gzip)."""

    path: str
    first_line: int
    start: int = 0
    end: int = 0
    data: bytes | None = None
    #: Line number -> length of the lines over the record limit, emptied in the piece's bytes
    #: (:class:`audit.ingest.lines.Chunk`); a plain file's such line is a piece of its own.
    overlong: dict[int, int] = field(default_factory=dict)

    def read(self) -> bytes:
        """The piece's bytes (a BOM at the very start of the file is not part of a record)."""
        if self.data is not None:
            return self.data
        with open(self.path, "rb") as f:
            f.seek(self.start)
            data = f.read(self.end - self.start)
        return data.removeprefix(b"\xef\xbb\xbf") if self.start == 0 else data


def plan_pieces(
    path: Path, *, piece_bytes: int, skip_bytes: int = 0, first_line: int = 1
) -> Iterator[Piece]:
    """Pieces of about ``piece_bytes`` covering the file from ``skip_bytes``, cut at newlines.

    A line over the record limit (:data:`audit.ingest.formats.jsonl.MAX_RECORD_BYTES`) is never
    read into a piece: in a plain file it is a piece of its own whose bytes are its newline
    alone, in a gzip file it is emptied (:func:`audit.ingest.records.read_chunks`); either way
    it is listed in the piece's ``overlong``. The scan holds one block at a time.
    """
    if records.is_gzip(path):
        for chunk in records.read_chunks(path, chunk_bytes=piece_bytes):
            yield Piece(str(path), chunk.first_line, data=chunk.data, overlong=chunk.overlong)
        return
    limit = jsonl.MAX_RECORD_BYTES
    step = min(_SCAN_BLOCK, limit + 1)  # two newlines in one block are at most ``limit`` apart
    name = str(path)
    start, line = skip_bytes, first_line  # the next piece's start and first line
    last_nl = skip_bytes - 1  # where the last newline seen is
    seen = 0  # newlines from ``skip_bytes`` to ``pos``
    pos = skip_bytes
    with open(path, "rb") as f:
        f.seek(pos)
        while block := f.read(step):
            first = block.find(b"\n")
            if first < 0:
                pos += len(block)
                continue
            if pos + first - last_nl - 1 > limit:  # the line ending here is over the limit
                if start <= last_nl:
                    yield Piece(name, line, start, last_nl + 1)
                length = pos + first - last_nl - 1
                number = first_line + seen
                yield Piece(name, number, last_nl + 1, pos + first + 1, b"\n", {number: length})
                start, line = pos + first + 1, number + 1
            counted = 0  # newlines of the block counted into ``seen`` so far
            while start + piece_bytes < pos + len(block):
                nl = block.find(b"\n", max(start + piece_bytes - pos, first))
                if nl < 0:
                    break
                seen += block.count(b"\n", counted, nl + 1)
                counted = nl + 1
                yield Piece(name, line, start, pos + nl + 1)
                start, line = pos + nl + 1, first_line + seen
            seen += block.count(b"\n", counted)
            last_nl = pos + block.rfind(b"\n")
            pos += len(block)
    if pos - last_nl - 1 > limit:  # the last line, without a newline, is over the limit
        if start <= last_nl:
            yield Piece(name, line, start, last_nl + 1)
        number = first_line + seen
        yield Piece(name, number, last_nl + 1, pos, b"", {number: pos - last_nl - 1})
    elif start < pos:
        yield Piece(name, line, start, pos)


#: What forked workers inherit (set, under _LOCK, only while a pool's workers are forked or a
#: piece is done in process): hashlib states
#: cannot be pickled, and inheriting them costs nothing.
_CONTEXT: dict[str, Any] = {}
_LOCK = threading.Lock()


def verify_piece(piece: Piece, source: str | None = None) -> tuple[Columns, int, int]:
    """Verify one piece with the inherited context: (columns, naive times, unreadable)."""
    c = _CONTEXT
    got = verify_jsonl(
        piece.read(),
        source or c["source"][piece.path],
        c["wanted"],
        piece.first_line,
        c["secrets"],
        tolerance_s=c["tolerance_s"],
        keyed=c["keyed"],
        extract=c.get("extract", False),
        event_times="event_timestamp" in c.get("names", ("event_timestamp",)),
        overlong=piece.overlong,
    )
    return got.columns, got.naive_times, got.unreadable


def map_pieces(
    fn: Callable[[Piece], T],
    pieces: Iterator[Piece],
    *,
    sources: dict[str, str],
    wanted: dict[str, str],
    secrets: SecretStore,
    tolerance_s: float,
    workers: int | None = None,
    extra: dict[str, Any] | None = None,
) -> Generator[T, None, None]:
    """``fn(piece)`` for every piece, in order: :meth:`Runner.map` on a runner of its own
    (``workers`` forked processes, :func:`audit.ingest.workers.default_workers` when None).

    Close the generator when the loop over it stops early (``contextlib.closing``): the workers
    are stopped then, not when it is collected."""
    workers = default_workers() if workers is None else max(1, workers)
    with Runner(
        wanted=wanted, secrets=secrets, tolerance_s=tolerance_s, workers=workers, extra=extra
    ) as runner:
        yield from runner.map(fn, pieces, sources=sources)


class Runner:
    """The pieces of one command, run with one context (secrets, headers, tolerance and
    ``extra``): in this process when ``workers`` is 1, else on ``workers`` processes forked
    once, at the first piece of the first :meth:`map`, and used for every later one (never a
    pool per file). A context manager: left by an error (a ^C), the tasks not started are
    cancelled and only those the workers hold are waited for.

    The module's lock is never held at a yield (only while the workers are forked with the
    context, or while one piece is done in process), so a generator left waiting (a ^C in the
    caller's loop, its traceback kept by IPython) never blocks the next call."""

    def __init__(
        self,
        *,
        wanted: dict[str, str],
        secrets: SecretStore,
        tolerance_s: float,
        workers: int,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.workers = max(1, workers)
        self._context: dict[str, Any] = dict(
            wanted=wanted,
            secrets=secrets,
            tolerance_s=tolerance_s,
            keyed=_keyed(secrets),
            **(extra or {}),
        )
        self._stack = contextlib.ExitStack()
        self._pool: ProcessPoolExecutor | None = None

    @property
    def forked(self) -> bool:
        """Whether worker processes were forked."""
        return self._pool is not None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.__exit__(*exc)  # type: ignore[arg-type]  # the exception, passed through

    def map(
        self,
        fn: Callable[[Piece], T],
        pieces: Iterator[Piece],
        *,
        sources: dict[str, str],
        call: dict[str, Any] | None = None,
    ) -> Generator[T, None, None]:
        """``fn(piece)`` for every piece, in order, with the context and ``call`` (what
        changes from one call to the next, e.g. the file's hash: sent with each piece, with
        the piece's source name from ``sources``); at most two pieces in flight per worker,
        so memory stays bounded."""
        if self.workers == 1:
            for piece in pieces:
                with _inherited({**self._context, **(call or {}), "source": sources}):
                    got = fn(piece)
                yield got
            return
        pending: list[Future[T]] = []
        for piece in pieces:
            own = {**(call or {}), "source": {piece.path: sources[piece.path]}}
            pending.append(self._started().submit(_called, fn, own, piece))
            if len(pending) >= 2 * self.workers:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            with _inherited(self._context):  # the workers are all forked with it, then cleared
                self._pool = self._stack.enter_context(forked_workers(self.workers))
        return self._pool


def _called(fn: Callable[[Piece], T], call: dict[str, Any], piece: Piece) -> T:
    """Worker: ``fn(piece)`` with the inherited context and this call's part of it."""
    _CONTEXT.update(call)
    return fn(piece)


@contextlib.contextmanager
def _inherited(context: dict[str, Any]) -> Iterator[None]:
    """:data:`_CONTEXT` set to ``context`` for a block, under the module's lock."""
    with _LOCK:
        _CONTEXT.clear()
        _CONTEXT.update(context)
        try:
            yield
        finally:
            _CONTEXT.clear()


class Verdicts(NamedTuple):
    """The verdicts of some records, without their bodies."""

    #: The requested columns (the context's ``names``).
    table: pa.Table
    naive_times: int
    unreadable: int
    #: :func:`audit.ingest.records.evidence_table` (the bodies of the records that are not
    #: valid) when asked for, else None.
    evidence: pa.Table | None


def verdict_batch(piece: Piece) -> tuple[Piece, Verdicts]:
    """Worker: verify a piece, return it (without its bytes) and its :class:`Verdicts`: only
    the columns ``names`` (no bodies), and the evidence when the context asks for
    ``evidence``."""
    cols, naive, unreadable = verify_piece(piece)
    if "record_sha256" in _CONTEXT["names"]:  # unreadable ones: the file's sha256 comes later
        source = _CONTEXT["source"][piece.path]
        cols["record_sha256"] = record_ids(cols, unsettled(source)).to_pylist()
    table = records.stored_columns(cols, _CONTEXT["names"])
    evidence = records.evidence_table(cols) if _CONTEXT.get("evidence") else None
    got = Verdicts(table, naive, unreadable, evidence)
    return Piece(piece.path, piece.first_line, piece.start, piece.end), got


def default_piece_bytes(total: int, workers: int) -> int:
    """Pieces small enough to spread over the workers, large enough to amortise a task."""
    return int(min(32 * 2**20, max(2**20, total // max(1, workers * 4))))
