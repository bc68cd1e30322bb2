"""What the service client refuses before a byte is sent: bad arguments and published limits.

Each check returns the value to send (cleaned) or raises: :class:`audit.errors.InputError` for
an argument the service could not accept (spec 4.1, 9), :class:`audit.errors.LimitError` for a
request over a published limit (spec section 8): 5 subscriptions per client, 12 files and
under 10485760 bytes per attachment request.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import httpx

from audit.errors import InputError, LimitError
from audit.spec import (
    API_VERSION_PATH,
    EVENTS,
    MAX_ATTACHMENTS,
    MAX_REQUEST_BYTES,
    MAX_SUBSCRIPTIONS_PER_CLIENT,
)

__all__ = [
    "FileSpec",
    "check_api_key",
    "check_attachment_count",
    "check_attachment_sizes",
    "check_base_url",
    "check_deadline",
    "check_delivery_url",
    "check_description",
    "check_events",
    "check_max_response_bytes",
    "check_request_size",
    "check_subscription_room",
    "path_segment",
    "require_https_unless_loopback",
]

#: An attachment: a path, ``(filename, bytes)`` or ``(filename, bytes, content_type)``.
FileSpec = str | os.PathLike | tuple[str, bytes] | tuple[str, bytes, str]

_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


# -- arguments


def check_base_url(base_url: str) -> str:
    """The service address without a trailing ``/``, or raise InputError.

    HTTPS, or HTTP to a loopback host (the local fake); no credentials, query, fragment or
    version prefix.

    >>> check_base_url("https://api.example/")
    'https://api.example'
    """
    u = _parse_url(base_url, empty="no base URL given", invalid="not a valid base URL")
    if u.scheme not in ("https", "http") or not u.host:
        raise InputError(f"the base URL must be https://host[/path]: {base_url!r}")
    if u.userinfo:
        raise InputError("the base URL must not hold credentials; the API key goes by variable")
    if u.query or u.fragment:
        raise InputError(f"the base URL must not have a query or fragment: {base_url!r}")
    require_https_unless_loopback(u, "send the API key")
    text = str(u).rstrip("/")
    if text.endswith(API_VERSION_PATH):
        raise InputError(
            f"give the base URL without {API_VERSION_PATH}; the client adds it: {base_url!r}"
        )
    return text


def check_api_key(api_key: object) -> str:
    """The API key, if it can travel in a header; InputError otherwise (never quoting it).

    Takes any object: callers without type checking may pass None or a number.

    >>> check_api_key("demo-key")
    'demo-key'
    """
    if not isinstance(api_key, str) or not api_key.strip():
        raise InputError("the API key is empty")
    if not api_key.isascii():  # header values are ASCII; the key is never quoted
        raise InputError("the API key contains non-ASCII characters")
    if any(not c.isprintable() or c.isspace() for c in api_key):
        raise InputError("the API key contains whitespace or control characters")
    return api_key


def check_deadline(deadline_s: object) -> float:
    """The client's overall deadline in seconds: a positive finite number, else InputError.

    >>> check_deadline(120)
    120.0
    """
    if not (isinstance(deadline_s, int | float) and 0 < deadline_s < float("inf")):
        raise InputError("deadline_s must be a positive finite number of seconds")
    return float(deadline_s)


def check_max_response_bytes(max_response_bytes: object) -> int:
    """The largest response body to accept: a positive integer, else InputError.

    >>> check_max_response_bytes(10_000_000)
    10000000
    """
    if not (isinstance(max_response_bytes, int) and max_response_bytes > 0):
        raise InputError("max_response_bytes must be a positive integer")
    return max_response_bytes


def require_https_unless_loopback(url: httpx.URL, purpose: str) -> None:
    """Raise InputError when ``url`` is plain HTTP to a host other than a loopback one.

    The one rule shared by the API client and the receiver probe (``purpose`` says what would
    travel in clear, e.g. "send the API key").

    >>> require_https_unless_loopback(httpx.URL("http://127.0.0.1:8000/"), "probe")
    """
    if url.scheme == "http" and url.host not in _LOOPBACK_HOSTS:
        raise InputError(
            f"refusing to {purpose} over plain HTTP to {url.host}; use https:// "
            "(http:// is allowed for 127.0.0.1 and localhost only)"
        )


def check_delivery_url(url: str) -> str:
    """Return ``url`` if it can be a delivery URL (HTTPS with a host), else raise InputError.

    >>> check_delivery_url("https://hooks.example/incidents")
    'https://hooks.example/incidents'
    """
    parsed = _parse_url(url, empty="the delivery URL is empty", invalid="not a valid URL")
    if parsed.scheme != "https":
        raise InputError(f"delivery URLs must be HTTPS (spec 4.1): {url!r}")
    if not parsed.host:
        raise InputError(f"the delivery URL has no host: {url!r}")
    return url.strip()


def check_events(events: Sequence[str]) -> list[str]:
    """Return the event types without repeats, or raise InputError for an empty or unknown one.

    >>> check_events(["incident.created", "incident.created", "incident.status_changed"])
    ['incident.created', 'incident.status_changed']
    """
    if isinstance(events, str):
        events = [events]
    out: list[str] = []
    for e in events:
        if e not in EVENTS:
            raise InputError(f"unknown event type {e!r}; known: {', '.join(EVENTS)}")
        if e not in out:
            out.append(e)
    if not out:
        raise InputError("give at least one event type")
    return out


def check_description(description: str) -> str:
    """Return a subscription description, or raise InputError when it is not a string."""
    if not isinstance(description, str):
        raise InputError("the description must be a string")
    return description


def path_segment(value: object, *, what: str = "subscription id") -> str:
    """``value`` escaped as exactly one URL path segment; InputError when it cannot be one.

    Every character outside the unreserved set (``/``, ``%``, ``?``, ``#``, spaces, non-ASCII)
    is percent-encoded. ``.`` and ``..`` are refused: a client or proxy would resolve them as
    dot-segments and the request would reach another resource (``DELETE /v1/webhooks``).
    Control characters are refused too.

    >>> path_segment("wh/1?x#y%")
    'wh%2F1%3Fx%23y%25'
    """
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"the {what} is empty")
    if value in (".", ".."):
        raise InputError(f"the {what} {value!r} is not an id (a dot-segment of the URL path)")
    if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
        raise InputError(f"the {what} contains control characters")
    return quote(value, safe="")


def _parse_url(text: object, *, empty: str, invalid: str) -> httpx.URL:
    """``text`` stripped and parsed; InputError ``empty`` or ``invalid: text`` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(empty)
    try:
        url = httpx.URL(text.strip())
        url.host  # noqa: B018  (decoded on first use: a malformed xn-- label raises IDNAError)
    except (httpx.InvalidURL, ValueError):  # IDNAError is a ValueError
        raise InputError(f"{invalid}: {text!r}") from None
    if url.port is not None and not 0 < url.port < 65536:
        raise InputError(f"{invalid} (port {url.port}): {text!r}")
    return url


# -- published limits (spec section 8)


def check_subscription_room(existing: int) -> None:
    """Raise LimitError when a client with ``existing`` subscriptions may not create another."""
    if existing >= MAX_SUBSCRIPTIONS_PER_CLIENT:
        raise LimitError(
            f"refused before sending: the client already has {existing} webhook "
            f"subscriptions and the service allows {MAX_SUBSCRIPTIONS_PER_CLIENT} per client; "
            "delete one first"
        )


def check_attachment_count(files: Sequence[FileSpec]) -> None:
    """Raise InputError for no file, LimitError for more files than one request may carry."""
    if not files:
        raise InputError("no file to upload")
    if len(files) > MAX_ATTACHMENTS:
        raise LimitError(
            f"refused before sending: {len(files)} files, the service accepts at most "
            f"{MAX_ATTACHMENTS} per request"
        )


def check_attachment_sizes(files: Sequence[FileSpec]) -> None:
    """Raise LimitError when the files alone reach the request size limit, before reading any.

    Paths are measured on disk (InputError when one cannot be); in-memory files by length.
    """
    paths = [Path(f) for f in files if isinstance(f, str | os.PathLike)]
    sizes = []
    for p in paths:
        try:
            sizes.append(p.stat().st_size)
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
    raw = sum(sizes) + sum(len(f[1]) for f in files if isinstance(f, tuple))
    if raw >= MAX_REQUEST_BYTES:
        raise LimitError(
            f"refused before sending: the files hold {raw} bytes; a request must stay under "
            f"{MAX_REQUEST_BYTES} bytes"
        )


def check_request_size(length: int) -> None:
    """Raise LimitError when a multipart request of ``length`` bytes reaches the size limit."""
    if length >= MAX_REQUEST_BYTES:
        raise LimitError(
            f"refused before sending: the multipart request would be {length} bytes; it "
            f"must stay under {MAX_REQUEST_BYTES} bytes"
        )
