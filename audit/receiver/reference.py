"""The reference receiver: verify as spec 5.2 says, answer 401 or 204, capture every request.

:func:`receiver_app` is a plain ASGI application (no framework) wrapped in
:class:`~audit.receiver.asgi.CaptureMiddleware`; :func:`serve` runs it with uvicorn (the
``audit[receiver]`` extra). It verifies the raw body bytes against the subscription's current
secret (the one whose ``valid_from`` has passed on the receiving clock; the previous secret is
invalid at once, spec 4.6) with :func:`audit.ingest.signatures.verify`, as of the receipt time the
capture line records, so ``audit verify`` on the folder gives the verdict it answered by.
The secrets file is re-read when it changes, so a rotation takes effect without a restart.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from audit.errors import InputError, SecretsError
from audit.ingest.secrets import SecretStore, SigningSecret, read_secrets
from audit.ingest.signatures import verify
from audit.receiver.asgi import RECEIVED_AT_KEY, CaptureMiddleware, Message, Receive, Scope, Send
from audit.receiver.capture_log import CaptureWriter
from audit.spec import DEFAULT_HEADER_PREFIX, header_names

if TYPE_CHECKING:
    import uvicorn

__all__ = ["HEADER_TIMEOUT_S", "MAX_CONNECTIONS", "CurrentSecret", "receiver_app", "serve"]


class CurrentSecret:
    """The current secret of one subscription, re-read when the secrets file changes.

    Parameters
    ----------
    path
        The secrets file.
    subscription_id
        Which subscription; None when the file holds exactly one.
    """

    def __init__(self, path: str | os.PathLike, subscription_id: str | None = None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._store = self._read()
        self.subscription_id = _pick(self._store, subscription_id, self.path)

    def _read(self) -> SecretStore:
        try:
            st = self.path.stat()
        except OSError:
            raise SecretsError(f"{self.path}: secrets file not found") from None
        store = read_secrets(self.path)
        self._stamp = (st.st_mtime_ns, st.st_size)
        return store

    def at(self, now: float) -> SigningSecret | None:
        """The secret current at ``now`` (Unix seconds), after re-reading a changed file.

        A file that has become unreadable keeps the last good secrets (and is tried again on
        the next request), so a half-edited file never turns every delivery into a 401.
        """
        with self._lock:
            try:
                st = self.path.stat()
                if (st.st_mtime_ns, st.st_size) != self._stamp:
                    self._store = self._read()
            except (OSError, SecretsError):
                pass
            candidates = self._store.by_subscription.get(self.subscription_id, ())
        t_ns = round(now * 1e9)
        return next((s for s in candidates if s.current_at(t_ns)), None)


def _pick(store: SecretStore, subscription_id: str | None, path: Path) -> str:
    subs = list(store.by_subscription)
    if subscription_id is None:
        if len(subs) != 1:
            raise InputError(
                f"{path} holds {len(subs)} subscriptions ({', '.join(subs)}); "
                "say which one this receiver serves with --subscription"
            )
        return subs[0]
    if subscription_id not in store.by_subscription:
        raise InputError(f"{path} has no secret for subscription {subscription_id!r}")
    return subscription_id


def _verifier_app(secret: CurrentSecret, header_prefix: str) -> Callable:
    names = header_names(header_prefix)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if scope["method"] != "POST":
            await _answer(send, 405, [(b"allow", b"POST")])
            return
        body = await _body(receive)
        now = scope.get(RECEIVED_AT_KEY) or time.time()
        wanted: dict[str, str | None] = {names["signature"]: None, names["timestamp"]: None}
        for n, v in scope["headers"]:
            key = n.decode("latin-1").lower()
            if key in wanted:  # a repeated header is combined as HTTP does, so it fails
                value = v.decode("latin-1")
                wanted[key] = value if wanted[key] is None else f"{wanted[key]}, {value}"
        current = secret.at(now)
        result = verify(
            body,
            wanted[names["signature"]],
            wanted[names["timestamp"]],
            [current.key] if current is not None else [],
            now=now,
        )
        # Stored durably by the capture middleware before this answer leaves (rule 6).
        await _answer(send, 204 if result.ok else 401)

    return app


async def _body(receive: Receive) -> bytes:
    chunks, more = [], True
    while more:
        message: Message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


async def _answer(send: Send, status: int, headers: list | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", b"0"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def receiver_app(
    secrets_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    subscription_id: str | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
) -> CaptureMiddleware:
    """The reference receiver as an ASGI application: every POST is captured and verified.

    Raises
    ------
    InputError
        The secrets file cannot be read, or does not name the subscription (one line).

    Examples
    --------
    In-process, through httpx's ASGI transport: a signed delivery is answered 204, an unsigned
    request 401, and both are captured.

    >>> import asyncio, tempfile
    >>> from datetime import UTC, datetime
    >>> import httpx
    >>> from audit.ingest.secrets_file import add_secret
    >>> from audit.ingest.signatures import sign
    >>> from audit.service.wire import signed_headers
    >>> async def post(app, body, headers=()):
    ...     transport = httpx.ASGITransport(app=app)
    ...     async with httpx.AsyncClient(transport=transport, base_url="http://receiver") as c:
    ...         return (await c.post("/hook", content=body, headers=list(headers))).status_code
    >>> body, ts = b'{"id":"evt_1"}', int(time.time())
    >>> headers = signed_headers("webhook.test", "dlv_1", ts, sign("whsec_demo", ts, body))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     secrets = Path(folder, "secrets.json")
    ...     _ = add_secret(secrets, "wh_main", "whsec_demo", datetime(2025, 1, 1, tzinfo=UTC))
    ...     app = receiver_app(secrets, Path(folder, "captures"), subscription_id="wh_main")
    ...     print(asyncio.run(post(app, body, headers)), asyncio.run(post(app, b"{}")))
    ...     print(sum(len(f.read_text().splitlines()) for f in app.writer.folder.iterdir()))
    204 401
    2
    """
    secret = CurrentSecret(secrets_path, subscription_id)
    return CaptureMiddleware(
        _verifier_app(secret, header_prefix),
        writer=CaptureWriter(out_dir),
        subscription_id=secret.subscription_id,
    )


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one), IPv4 or IPv6."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None
    sock.listen(128)
    return sock


#: Connections served at once by default (``audit receive --max-connections``). Beyond them,
#: up to :data:`audit.receiver.serving.OVERFLOW_CONNECTIONS` more are held only to answer 503;
#: the rest are answered 503 at accept and closed. Well below the usual 1024 open files.
MAX_CONNECTIONS = 100
#: Seconds a connection has to send a complete request head, from its opening or its previous
#: answer (``audit receive --header-timeout``); then it is closed. The service sends its request
#: at once and gives up after 5 s.
HEADER_TIMEOUT_S = 10.0


def make_server(
    app: Callable,
    sock: socket.socket,
    *,
    log_level: str = "warning",
    max_connections: int = MAX_CONNECTIONS,
    header_timeout: float = HEADER_TIMEOUT_S,
) -> uvicorn.Server:
    """A uvicorn server for ``app`` on an already bound socket (``server.run(sockets=[sock])``),
    bounded against floods of connections (:mod:`audit.receiver.serving`): at most
    ``max_connections`` served at once, 503 beyond, a request head due within
    ``header_timeout`` seconds, and resource errors logged at most once per 10 s with a count.

    Raises InputError when uvicorn (the ``audit[receiver]`` extra) is not installed, or a limit
    is not positive.
    """
    if max_connections < 1 or not header_timeout > 0:
        raise InputError(
            f"--max-connections must be at least 1 and --header-timeout above 0 "
            f"(got {max_connections} and {header_timeout})"
        )
    try:
        from audit.receiver import serving  # start-up: uvicorn, the optional audit[receiver] extra
    except ImportError:
        raise InputError(
            "the reference receiver needs uvicorn: pip install 'audit[receiver]'"
        ) from None
    config = serving.BoundedConfig(
        app,
        max_connections=max_connections,
        header_timeout=header_timeout,
        lifespan="off",
        log_level=log_level,
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=5,
    )
    return serving.BoundedServer(config)


def serve(app: Callable, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Run ``app`` with uvicorn on ``sock`` until interrupted (Ctrl-C or SIGTERM)."""
    make_server(app, sock, log_level=log_level).run(sockets=[sock])
