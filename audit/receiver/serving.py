"""uvicorn for the reference receiver, bounded against a flood of connections.

Plain uvicorn on asyncio holds every connection it accepts until the client sends something, and
when the process runs out of file descriptors asyncio's accept loop logs one traceback per failed
``accept()``, thousands a second, while the listening socket stays readable. Here:

- the listening socket accepts at most ``cap`` connections at once (``max_connections`` plus
  :data:`OVERFLOW_CONNECTIONS`, and never more than the open-file limit leaves room for); a
  connection beyond that is accepted only to be answered 503 and closed at once;
- when ``accept()`` fails for want of descriptors (EMFILE, ENFILE, ...), a spare descriptor kept
  for the purpose is released, the waiting connection accepted, answered 503 and closed, and the
  spare taken back: the listening socket is drained instead of spinning;
- requests on connections beyond ``max_connections`` are answered 503 by uvicorn
  (``limit_concurrency``), after their request head is read;
- a connection that has not sent a complete request head within ``header_timeout`` seconds of
  opening (or of its previous answer) is closed;
- resource errors and refusals are logged at most once per :data:`LOG_INTERVAL_S` per kind, then
  with the count of those left out (:class:`FloodLog`).

The bounded accept works because asyncio's selector event loop (Linux, macOS; ``loop="asyncio"``
keeps uvloop, which accepts in C, out) calls the listening socket's ``accept()`` method; on
Windows uvicorn uses the proactor loop, which does not, and only the 503 beyond
``max_connections`` and the header timeout apply.

This module imports uvicorn (the ``audit[receiver]`` extra); :func:`audit.receiver.reference.
make_server` loads it when it builds a server.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = [
    "FLOOD_LOG",
    "LOG_INTERVAL_S",
    "OVERFLOW_CONNECTIONS",
    "BoundedConfig",
    "BoundedServer",
    "FloodLog",
    "connection_cap",
]

#: ``accept()`` errors that mean "out of descriptors or memory": asyncio logs each one.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: Connections held beyond ``max_connections`` only to answer their request 503.
OVERFLOW_CONNECTIONS = 32
#: Descriptors kept free of connections (capture files, the event loop, worker threads).
FD_RESERVE = 64
#: One line per kind of flood message per this many seconds; the rest are counted.
LOG_INTERVAL_S = 10.0
#: Connections refused in one call of ``accept()`` before the event loop gets a turn.
SHED_PER_CALL = 64
#: The answer written to a connection refused at accept, before its request is read.
REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 19\r\nretry-after: 5\r\nconnection: close\r\n\r\nService Unavailable"
)
#: The kinds of refusal, as logged (at most once per :data:`LOG_INTERVAL_S` each).
OVER_CAP = "connection refused with 503 at accept"
NO_DESCRIPTORS = "connection refused with 503 at accept, out of file descriptors"
#: uvicorn's own per-request warning beyond ``limit_concurrency``: rate-limited too.
_UVICORN_OVER_LIMIT = "Exceeded concurrency limit."
#: Loggers whose flood messages :data:`FLOOD_LOG` limits while a server runs.
FLOOD_LOGGERS = ("asyncio", "uvicorn.error", "audit.receiver")

log = logging.getLogger("audit.receiver")


@dataclass
class _Window:
    since: float
    logger: str
    level: int
    suppressed: int = 0


class FloodLog(logging.Filter):
    """A logging filter: at most one record per kind per ``interval`` seconds.

    A record's kind is its ``flood_kind`` attribute (``extra={"flood_kind": ...}``), or, for a
    resource error (an ``OSError`` EMFILE, ENFILE, ENOBUFS or ENOMEM, or a message saying "Too
    many open files"), its logger and error; other records pass untouched. The first record of a
    kind passes; the next ones within ``interval`` are counted and dropped; the first one after
    it passes with ``(N more like it in the last S s)`` appended, and :meth:`flush` reports a
    count that no later record carried.

    >>> clock = iter([0.0, 1.0, 2.0, 11.0, 30.0]).__next__
    >>> flood = FloodLog(10.0, clock=clock)
    >>> def record(msg):
    ...     return logging.LogRecord("x", logging.ERROR, "", 0, msg, None, None)
    >>> [flood.filter(record("Too many open files")) for _ in range(3)]
    [True, False, False]
    >>> r = record("Too many open files")
    >>> flood.filter(r), r.getMessage()
    (True, 'Too many open files (2 more like it in the last 11 s)')
    >>> flood.filter(record("something else"))
    True
    """

    def __init__(
        self, interval: float = LOG_INTERVAL_S, clock: Callable[[], float] = time.monotonic
    ):
        super().__init__()
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[str, _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "flood_summary", False):
            return True
        kind = _flood_kind(record)
        if kind is None:
            return True
        with self._lock:
            now = self._clock()
            window = self._windows.get(kind)
            if window is not None and now - window.since < self.interval:
                window.suppressed += 1
                return False
            self._windows[kind] = _Window(now, record.name, record.levelno)
        if window is not None and window.suppressed:
            more = _more(window.suppressed, now - window.since)
            record.msg, record.args = f"{_message(record)} {more}", None
        return True

    def flush(self, *, force: bool = False) -> None:
        """Log, for each kind whose window has ended (every kind with ``force``), how many of
        its records were left out, so a flood that stopped is still counted."""
        due: list[tuple[str, _Window, float]] = []
        with self._lock:
            now = self._clock()
            for kind, window in self._windows.items():
                if window.suppressed and (force or now - window.since >= self.interval):
                    due.append((kind, window, now - window.since))
                    self._windows[kind] = _Window(now, window.logger, window.level)
        for kind, window, elapsed in due:
            logging.getLogger(window.logger).log(
                window.level,
                "%s: %d more in the last %.0f s (logged at most once per %.0f s)",
                kind,
                window.suppressed,
                max(elapsed, 1),
                self.interval,
                extra={"flood_summary": True},
            )


def _more(count: int, elapsed: float) -> str:
    return f"({count} more like it in the last {max(elapsed, 1):.0f} s)"


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # a bad format: the handler reports it when it emits the record
        return str(record.msg)


def _flood_kind(record: logging.LogRecord) -> str | None:
    kind = getattr(record, "flood_kind", None)
    if isinstance(kind, str):
        return kind
    exc = record.exc_info[1] if record.exc_info else None
    if isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
        return f"{record.name}: {os.strerror(exc.errno)}"
    if record.name == "uvicorn.error" and record.msg == _UVICORN_OVER_LIMIT:
        return "uvicorn: requests answered 503 over the connection limit"
    if "Too many open files" in _message(record):
        return f"{record.name}: {os.strerror(errno.EMFILE)}"
    return None


#: The filter every :class:`BoundedServer` puts on :data:`FLOOD_LOGGERS` (one per process).
FLOOD_LOG = FloodLog()


def open_file_limit() -> int | None:
    """The process's soft limit on open files, None when unlimited or unknown."""
    if sys.platform == "win32":
        return None
    import resource  # platform: Unix only

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def connection_cap(max_connections: int, fd_limit: int | None) -> int:
    """Connections held at once: ``max_connections`` plus the 503 overflow, within the limit.

    >>> connection_cap(100, 1024), connection_cap(300, 256), connection_cap(100, None)
    (132, 192, 132)
    >>> connection_cap(100, 100)
    75
    """
    cap = max_connections + OVERFLOW_CONNECTIONS
    if fd_limit is not None:
        cap = min(cap, fd_limit - min(FD_RESERVE, fd_limit // 4))
    return max(cap, 1)


class _Connection(socket.socket):
    """An accepted connection that tells its listener when it is closed."""

    on_close: Callable[[], None] | None = None

    def close(self) -> None:
        callback, self.on_close = self.on_close, None
        super().close()
        if callback is not None:
            callback()


class _Listener(socket.socket):
    """A listening socket whose ``accept()`` (called by asyncio's accept loop) holds at most
    ``cap`` connections and refuses the rest with a 503, never leaving one waiting."""

    cap = 1
    open = 0
    refused = 0
    _spare: int | None = None
    _backoff_until = 0.0

    def start(self, cap: int) -> None:
        self.cap = cap
        self._spare = _spare()

    def accept(self) -> tuple[socket.socket, Any]:
        for _ in range(SHED_PER_CALL):
            if self.open >= self.cap:
                self._refuse(OVER_CAP, f"{self.open} connections open, the most it holds")
                continue
            try:
                fd, addr = self._accept()  # type: ignore[attr-defined]  # socket.socket's own
            except OSError as e:
                if e.errno not in RESOURCE_ERRNOS:
                    raise  # BlockingIOError: none waiting; asyncio's loop handles the rest
                self._refuse_without_descriptors(e)
                continue
            conn = _Connection(self.family, self.type, self.proto, fileno=fd)
            self.open += 1
            conn.on_close = self._connection_closed
            return conn, addr
        raise BlockingIOError  # enough for one turn: asyncio calls again while more wait

    def close(self) -> None:
        spare, self._spare = self._spare, None
        if spare is not None:
            os.close(spare)
        super().close()

    def _connection_closed(self) -> None:
        self.open -= 1

    def _refuse(self, kind: str, why: str) -> None:
        """Accept one waiting connection, answer 503 and close it (BlockingIOError: none)."""
        fd, _ = self._accept()  # type: ignore[attr-defined]  # socket.socket's own
        with socket.socket(self.family, self.type, self.proto, fileno=fd) as conn:
            conn.setblocking(False)
            with contextlib.suppress(OSError):
                conn.recv(65536)  # what already came: closing on unread bytes sends a reset
            with contextlib.suppress(OSError):
                conn.send(REFUSED)
        self.refused += 1
        log.warning("%s: %s", kind, why, extra={"flood_kind": kind})

    def _refuse_without_descriptors(self, error: OSError) -> None:
        """Out of descriptors: release the spare one to take the waiting connection off the
        queue (else the socket stays readable and the loop spins), then take it back.

        Without a spare, the error goes to asyncio once, which stops accepting for a second;
        further calls meanwhile say "none waiting".
        """
        if time.monotonic() < self._backoff_until:
            raise BlockingIOError
        if self._spare is not None:
            os.close(self._spare)
            self._spare = None
            try:
                self._refuse(NO_DESCRIPTORS, f"accept() failed: {error.strerror}")
            except BlockingIOError:
                pass
            except OSError:
                pass  # another thread took the descriptor: next turn
            finally:
                self._spare = _spare()
            if self._spare is not None:
                return
        self._backoff_until = time.monotonic() + 0.9  # asyncio retries after 1 s
        raise error


def _spare() -> int | None:
    try:
        return os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None


class BoundedConfig(uvicorn.Config):
    """uvicorn's configuration plus the reference receiver's limits."""

    def __init__(
        self, app: Any, *, max_connections: int, header_timeout: float, **kwargs: Any
    ) -> None:
        super().__init__(
            app,
            loop="asyncio",  # uvloop would accept() in C, past the bounded listener
            http=_Protocol,
            limit_concurrency=max_connections + 1,  # uvicorn counts the asking connection too
            **kwargs,
        )
        self.max_connections = max_connections
        self.header_timeout = header_timeout


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is late."""

    def __init__(
        self,
        config: uvicorn.Config,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.header_timeout = getattr(config, "header_timeout", 10.0)
        self._head_timer: asyncio.TimerHandle | None = None
        self._armed_for: object = None  # the request cycle current when the timer was set

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]  # uvicorn wants Transport
        self._arm()

    def data_received(self, data: bytes) -> None:
        # No request yet (cycle None) or the last one answered: these are a request head's bytes.
        head = getattr(self.cycle, "response_complete", True)
        if head and (self._head_timer is None or self._armed_for is not self.cycle):
            self._arm()  # the head of a request after an answer: its own header_timeout
        super().data_received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._armed_for = self.cycle
        self._head_timer = self.loop.call_later(self.header_timeout, self._head_late)

    def _head_late(self) -> None:
        """No request has started since the timer was set: close the connection."""
        self._head_timer = None
        if self.cycle is self._armed_for and not self.transport.is_closing():
            with contextlib.suppress(h11.LocalProtocolError):
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()


class BoundedServer(uvicorn.Server):
    """A uvicorn server whose listening sockets are bounded (run it with ``sockets=``)."""

    config: BoundedConfig

    def __init__(self, config: BoundedConfig) -> None:
        super().__init__(config)
        self.fd_limit = open_file_limit()
        self.cap = connection_cap(config.max_connections, self.fd_limit)
        self.listeners: list[_Listener] = []

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        for name in FLOOD_LOGGERS:
            logging.getLogger(name).addFilter(FLOOD_LOG)
        if self.cap < self.config.max_connections + OVERFLOW_CONNECTIONS:
            log.warning(
                "the open-file limit (%s) leaves room for %d connections at once",
                self.fd_limit,
                self.cap,
            )
        if sockets is not None:
            self.listeners = [_listener(s, self.cap) for s in sockets]
        await super().startup(sockets=list(self.listeners) if sockets is not None else None)

    async def on_tick(self, counter: int) -> bool:
        FLOOD_LOG.flush()
        return bool(await super().on_tick(counter))

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets=sockets)
        FLOOD_LOG.flush(force=True)


def _listener(sock: socket.socket, cap: int) -> _Listener:
    """A bounded listener on the same listening socket (a duplicate descriptor)."""
    listener = _Listener(sock.family, sock.type, sock.proto, fileno=sock.dup().detach())
    listener.start(cap)
    return listener
