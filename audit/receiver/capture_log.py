"""Append received requests to daily JSON Lines files, durably, in the capture format.

One line per request (``docs/formats.md``, section 1): ``received_at`` from the receiving clock,
the headers as received (a list of ``[name, value]`` pairs), the raw body byte-exact (``body``
when it is UTF-8, else ``body_b64``), and the answer's ``response_status`` and ``response_ms``.
The line is written when the application has decided its answer and before that answer leaves
(see ``docs/receiver.md``), so status and duration are part of the one record and the loader
needs no second record kind.

Each line goes to ``<folder>/<YYYY-MM-DD>.jsonl`` (the UTC day of receipt) with one
``os.write`` of the whole line under a thread lock and an exclusive ``flock`` (several worker
processes may share a folder), then ``fsync``. A failed write is cut back to the previous end
of the file, and a torn tail left by a writer that was killed mid-line is ended with a newline
before the next line, so a later line never joins a torn one.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from audit.ingest.formats.jsonl import MAX_RECORD_BYTES

__all__ = ["CaptureRecord", "CaptureWriter", "capture_line", "writer_for"]


@dataclass(frozen=True)
class CaptureRecord:
    """One received request and the answer given to it.

    Attributes
    ----------
    received_at : float
        Unix seconds on the receiving clock when the request arrived.
    headers : list of (str, str)
        Header names and values as received, in order (repeats kept).
    body : bytes
        The raw body.
    response_status : int
        The status the application answered.
    response_ms : float
        From arrival to the moment the answer was decided, in milliseconds.
    subscription_id, url : str or None
        Which subscription the endpoint serves, and where the request was received.
    omitted_bytes : int or None
        Set when the body was too large to keep (answered 413): the bytes received before the
        receiver stopped reading. The line then holds ``body_omitted_bytes`` instead of a body.
    """

    received_at: float
    headers: list[tuple[str, str]]
    body: bytes
    response_status: int
    response_ms: float
    subscription_id: str | None = None
    url: str | None = None
    omitted_bytes: int | None = None


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="microseconds")


def oversized(
    received_at: float,
    headers: list[tuple[str, str]],
    started: float,
    size: int,
    subscription_id: str | None,
    url: str | None,
) -> CaptureRecord:
    """The record of a request whose body was over the limit (answered 413): its headers and
    ``size`` (the bytes read, or the declared length), no body; ``started`` is its
    ``time.perf_counter()`` on arrival."""
    return CaptureRecord(
        received_at=received_at,
        headers=headers,
        body=b"",
        response_status=413,
        response_ms=(time.perf_counter() - started) * 1000,
        subscription_id=subscription_id,
        url=url,
        omitted_bytes=size,
    )


def capture_line(record: CaptureRecord) -> bytes:
    """The record as one JSON line (ending in ``\\n``) in the documented capture format.

    The body is ``body`` (text) when it is UTF-8, else ``body_b64``; also ``body_b64`` when
    JSON escaping makes the text line longer than the loader reads
    (:data:`audit.ingest.formats.jsonl.MAX_RECORD_BYTES`: 10 MiB of control characters escape
    to 60 MiB, and the headers add theirs).

    >>> r = CaptureRecord(0.5, [("X-A", "1")], b"\\xff", 204, 1.25, "wh_1")
    >>> capture_line(r)
    b'{"received_at":"1970-01-01T00:00:00.500000+00:00","subscription_id":"wh_1","headers":[["X-A","1"]],"body_b64":"/w==","response_status":204,"response_ms":1.25}\\n'
    """
    line = _line(record, as_text=True)
    if len(line) > MAX_RECORD_BYTES and record.omitted_bytes is None:
        line = _line(record, as_text=False)
    return line


def _line(record: CaptureRecord, *, as_text: bool) -> bytes:
    out: dict[str, object] = {"received_at": _iso(record.received_at)}
    if record.subscription_id:
        out["subscription_id"] = _utf8(str(record.subscription_id))
    if record.url:
        out["url"] = _utf8(str(record.url))
    out["headers"] = [[_utf8(str(n)), _utf8(str(v))] for n, v in record.headers]
    if record.omitted_bytes is not None:
        out["body_omitted_bytes"] = int(record.omitted_bytes)
    else:
        text = _utf8_text(record.body) if as_text else None
        if text is None:
            out["body_b64"] = base64.b64encode(record.body).decode("ascii")
        else:
            out["body"] = text
    out["response_status"] = int(record.response_status)
    response_ms = round(float(record.response_ms), 3)
    if response_ms != response_ms or abs(response_ms) == float("inf"):
        raise ValueError("response_ms must be a finite number")
    out["response_ms"] = response_ms
    # orjson writes the UTF-8 line itself, newline included (json.dumps' text, then its
    # encoding, then the newline added, held up to 13x a body of control characters at once:
    # 130 MB for a 10 MB body; now 7x), the same bytes as json.dumps with ensure_ascii=False.
    # Text is UTF-8 by now (_utf8); escaped ASCII is the last resort of an unforeseen case.
    try:
        return orjson.dumps(out, option=orjson.OPT_APPEND_NEWLINE)
    except orjson.JSONEncodeError:
        return json.dumps(out, separators=(",", ":")).encode("ascii") + b"\n"


def _utf8_text(body: bytes) -> str | None:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return None


def why_not_written(e: OSError) -> str:
    """What a failed capture logs: the file and the reason (``captures/2026-10-01.jsonl: No
    space left on device``), never the line's content."""
    why = e.strerror or str(e)
    return f"{e.filename}: {why}" if e.filename else why


_SURROGATES = re.compile("[\ud800-\udfff]")


def _utf8(text: str) -> str:
    """``text`` as UTF-8 can hold it: a lone surrogate (from a server that decoded a header or
    path with ``surrogateescape``, not PEP 3333's Latin-1) becomes the byte it stands for read
    as Latin-1, as PEP 3333 servers give every byte (``\\udcff`` → ``ÿ``), and any other one
    U+FFFD. Written as a JSON escape, it made the whole line unreadable to the loader.

    >>> _utf8("a\\udcffb"), _utf8("\\ud800"), _utf8("plain é")
    ('aÿb', '\ufffd', 'plain é')
    """
    if text.isascii() or _SURROGATES.search(text) is None:
        return text
    return _SURROGATES.sub(_byte_of, text)


def _byte_of(match: re.Match) -> str:
    code = ord(match.group())
    return chr(code - 0xDC00) if 0xDC80 <= code <= 0xDCFF else "\ufffd"


class CaptureWriter:
    """Appends capture lines to ``<folder>/<UTC day>.jsonl``; safe across threads and processes.

    Parameters
    ----------
    folder
        Where the daily files go (created when missing).
    fsync
        Make each line durable before :meth:`append` returns (spec 5.2 rule 6). Only tests
        measuring something else turn it off.

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     w = CaptureWriter(folder)
    ...     path = w.append(CaptureRecord(1767225600.0, [], b"{}", 204, 3.0))
    ...     print(path.name)
    ...     print(path.read_text(), end="")
    2026-01-01.jsonl
    {"received_at":"2026-01-01T00:00:00.000000+00:00","headers":[],"body":"{}","response_status":204,"response_ms":3.0}
    """

    def __init__(self, folder: str | os.PathLike, *, fsync: bool = True) -> None:
        self.folder = Path(folder)
        self.fsync = fsync
        self._lock = threading.Lock()

    def path_for(self, received_at: float) -> Path:
        """The daily file a request received at ``received_at`` (Unix seconds) goes to."""
        day = datetime.fromtimestamp(received_at, UTC).strftime("%Y-%m-%d")
        return self.folder / f"{day}.jsonl"

    def append(self, record: CaptureRecord) -> Path:
        """Write the record as one whole line and (by default) fsync it; return the file.

        Raises OSError when the line could not be written whole; the file is then left as it
        was before the call.
        """
        return self.append_lines(self.path_for(record.received_at), [capture_line(record)])

    def append_lines(self, path: Path, lines: Iterable[bytes]) -> Path:
        """Append already-formatted lines to ``path`` with one write (used by :meth:`append`)."""
        data = b"".join(lines)
        with self._lock:
            self.folder.mkdir(parents=True, exist_ok=True)
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o640)  # RDWR: pread
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                start = os.fstat(fd).st_size
                # A writer killed mid-line (SIGKILL, power loss) left a torn tail that no
                # cut-back removed: end it, so that it stays one unreadable line of its own
                # and this line is not joined to it.
                torn = start > 0 and os.pread(fd, 1, start - 1) != b"\n"
                try:
                    _write_all(fd, b"\n" + data if torn else data)
                    if self.fsync:
                        os.fsync(fd)
                except BaseException:
                    os.ftruncate(fd, start)  # never leave half a line for the next to join
                    raise
            finally:
                os.close(fd)  # also releases the flock
            if created and self.fsync:
                _fsync_dir(self.folder)
        return path


def writer_for(folder: str | os.PathLike | None, writer: CaptureWriter | None) -> CaptureWriter:
    """``writer``, or a new :class:`CaptureWriter` for ``folder``: give exactly one of them.

    The middlewares' ``folder``/``writer`` parameters; ValueError when both or neither is given.
    """
    if writer is not None and folder is None:
        return writer
    if writer is None and folder is not None:
        return CaptureWriter(folder)
    raise ValueError("give exactly one of folder and writer")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _fsync_dir(folder: Path) -> None:
    """Make a new file's directory entry durable (POSIX; ignored where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
