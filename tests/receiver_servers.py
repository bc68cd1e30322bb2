"""Serve ASGI and WSGI test applications on real sockets (127.0.0.1, a free port) in a thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from werkzeug.serving import make_server

from audit.receiver.reference import bind
from audit.receiver.reference import make_server as make_uvicorn


@contextmanager
def serve_asgi(app) -> Iterator[str]:
    """Run ``app`` with uvicorn on 127.0.0.1:<free port>; yield its base URL."""
    sock = bind("127.0.0.1", 0)
    server = make_uvicorn(app, sock, log_level="error")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a guard against hangs, not a bound on speed
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(120)
        sock.close()


@contextmanager
def serve_wsgi(app) -> Iterator[str]:
    """Run a WSGI ``app`` with werkzeug's threaded server on 127.0.0.1:<free port>."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(120)
