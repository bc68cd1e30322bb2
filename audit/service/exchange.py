"""One HTTP exchange kept within bounds: a deadline for all of it, and a bounded body.

* :func:`install_deadline` wraps the network layer of an :class:`httpx.Client` so that every
  connect, TLS handshake, read and write waits no longer than the time left before the
  deadline of :func:`deadline_scope`. A server that trickles its status line and headers
  (one line every second, for hours) is cut off at the deadline, not only one whose body is
  slow.
* :func:`read_body` reads a streamed response's raw bytes and decodes its one content-coding
  itself (``gzip``, ``x-gzip``, ``deflate``), never producing more than the size limit plus
  one byte: a small compressed body that would expand to gigabytes costs no more memory than
  the limit. Stacked codings (``gzip, gzip``) and unknown ones are refused.

Both are used by the service client (:mod:`audit.service.transport`) and the probe
(:mod:`audit.receiver.probe`).
"""

from __future__ import annotations

import contextlib
import contextvars
import time
import zlib
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx

__all__ = [
    "ACCEPT_ENCODING",
    "BodyTooLarge",
    "UnsupportedEncoding",
    "deadline_scope",
    "install_deadline",
    "read_body",
]

#: What the client accepts: exactly the codings :func:`read_body` decodes within bounds.
ACCEPT_ENCODING = "gzip, deflate"

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "audit_exchange_deadline", default=None
)


@contextlib.contextmanager
def deadline_scope(deadline: float | None) -> Iterator[None]:
    """Within this block, network waits of an :func:`install_deadline` client end by
    ``deadline`` (a :func:`time.monotonic` value; None: no deadline)."""
    token = _DEADLINE.set(deadline)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _clamp(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` shortened to the time left before the scope's deadline."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every wait is cut at the deadline of the running scope."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        t = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, t))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    """Connects like ``inner``, with the waits cut at the deadline of the running scope."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        t = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, t, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        t = _clamp(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, t, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def install_deadline(client: httpx.Client) -> int:
    """Make every network wait of ``client`` respect :func:`deadline_scope`.

    Applies to the client's own HTTP transport and to its proxy mounts; an injected transport
    without a network layer (``httpx.MockTransport``) is left as it is. Returns how many
    connection pools were wrapped.
    """
    transports = [client._transport, *client._mounts.values()]
    wrapped = 0
    for t in transports:
        pool: Any = getattr(t, "_pool", None)  # httpcore's pool: private, so not typed here
        backend = getattr(pool, "_network_backend", None)
        if isinstance(backend, httpcore.NetworkBackend) and not isinstance(
            backend, _DeadlineBackend
        ):
            pool._network_backend = _DeadlineBackend(backend)
            wrapped += 1
    return wrapped


# -- bounded bodies


class BodyTooLarge(Exception):
    """The decoded body would exceed the limit."""


class UnsupportedEncoding(Exception):
    """A ``Content-Encoding`` this client does not decode (stacked, or unknown)."""


_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def _coding(response: httpx.Response) -> str | None:
    """The response's one content-coding (None for identity); raises UnsupportedEncoding."""
    values = response.headers.get_list("content-encoding", split_commas=True)
    codings = [v.strip().lower() for v in values if v.strip().lower() not in ("", "identity")]
    if len(codings) > 1:
        raise UnsupportedEncoding(
            f"{len(codings)} stacked content-codings ({', '.join(codings)[:80]}); only one is "
            "accepted"
        )
    if codings and codings[0] not in _WBITS:
        raise UnsupportedEncoding(
            f"an unsupported content-coding ({codings[0][:40]!r}); accepted: {ACCEPT_ENCODING}"
        )
    return codings[0] if codings else None


class _Decoder:
    """One zlib layer whose output never exceeds the room it is given."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.started = False
        self._d = zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes, room: int) -> Iterator[bytes]:
        """Decode ``data``; yield pieces, at most ``room + 1`` bytes in all."""
        if self.coding == "deflate" and not self.started and data:
            self.started = True
            # RFC 9110 deflate is zlib-wrapped (a 2-byte header); some servers send it raw.
            if len(data) >= 2 and not (data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0):
                self._d = zlib.decompressobj(-zlib.MAX_WBITS)
        while True:
            if self._d.eof:  # trailing bytes after the end of the stream are ignored
                return
            out = self._d.decompress(data, room + 1)
            data = self._d.unconsumed_tail
            if out:
                yield out
                room -= len(out)
                if room < 0:
                    return
            if not data and not out:
                return


def read_body(response: httpx.Response, max_bytes: int, deadline: float | None = None) -> bytes:
    """Read a streamed ``response``'s body, decoded, into ``response.content``; at most
    ``max_bytes`` bytes after decoding (else :class:`BodyTooLarge`).

    Memory stays near ``max_bytes`` whatever the compression ratio. Raises
    :class:`UnsupportedEncoding` for stacked or unknown content-codings, ``zlib.error`` for a
    corrupt compressed body, and httpx's errors for a failed read (``httpx.ReadTimeout`` also
    when a chunk arrives after ``deadline``, a :func:`time.monotonic` value: a check for
    transports that :func:`install_deadline` cannot wrap).
    """
    coding = _coding(response)
    if hasattr(response, "_content"):  # already read by the transport (httpx.MockTransport)
        if len(response.content) > max_bytes:
            raise BodyTooLarge
        return response.content
    decoder = _Decoder(coding) if coding else None
    chunks: list[bytes] = []
    size = 0
    for raw in response.iter_raw():
        if deadline is not None and time.monotonic() > deadline:
            raise httpx.ReadTimeout("the deadline passed", request=response.request)
        pieces = decoder.feed(raw, max_bytes - size) if decoder else [raw]
        for piece in pieces:
            size += len(piece)
            if size > max_bytes:
                raise BodyTooLarge
            chunks.append(piece)
    response._content = b"".join(chunks)  # what httpx's own read() sets
    return response._content
