"""Secret values cut out of what the toolkit shows or stores (listings, messages).

The service may expose signing secrets in a ``GET /webhooks`` listing; :func:`redact_secrets`
replaces them (and any other string given, such as the API key) with :data:`REDACTED`. Every
key whose name contains ``secret`` (any case, any depth: ``secrets``, ``signingSecret``) is
redacted, whatever its value's type.

Process-wide, the values the toolkit knows to be sensitive (the API key once read, every secret
read from a secrets file) are registered with :func:`register_sensitive`; :func:`scrub` cuts
them out of any text (the CLI applies it to every error and warning), and
:func:`for_terminal` escapes control characters (ANSI escapes from the service or from
captures) before text reaches a terminal.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from typing import Any

from audit.errors import InputError

__all__ = [
    "REDACTED",
    "ScrubFilter",
    "for_terminal",
    "install_log_filter",
    "json_for_terminal",
    "redact_secrets",
    "refuse_known_secrets",
    "register_sensitive",
    "scrub",
    "shown",
]

#: Registered values shorter than this are not scrubbed from text (they would mangle it);
#: secrets and keys are far longer.
MIN_SENSITIVE_LEN = 6
_SENSITIVE: set[str] = set()
_LOCK = threading.Lock()
_VERSION = 0  # of _SENSITIVE: the last _Cutter made is used again until it changes
_LAST: dict[tuple[int, tuple[str, ...]], _Cutter] = {}  # {(version, also): cutter}, one entry
# C0 controls except none, DEL, C1 controls, and bidi overrides/isolates that reorder text.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def register_sensitive(values: Iterable[object] | str) -> None:
    """Remember values (an API key, secrets) that :func:`scrub` must cut out of any text.

    Values that are not strings, or shorter than :data:`MIN_SENSITIVE_LEN`, are ignored.
    """
    if isinstance(values, str):
        values = [values]
    global _VERSION
    with _LOCK:
        _SENSITIVE.update(v for v in values if isinstance(v, str) and len(v) >= MIN_SENSITIVE_LEN)
        _VERSION += 1


class ScrubFilter(logging.Filter):
    """A logging filter that cuts registered sensitive values out of every record it passes.

    Installed on the loggers of httpx and httpcore, which log reason phrases and headers.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if _SENSITIVE:
            text = record.getMessage()
            clean = scrub(text)
            if clean != text:
                record.msg, record.args = clean, ()
        return True


#: Loggers that can repeat what a server said (reason phrases) or sent.
HTTP_LOGGERS = ("httpx", "httpcore.http11", "httpcore.http2", "httpcore.connection")


def install_log_filter(names: Iterable[str] = HTTP_LOGGERS) -> None:
    """Put one :class:`ScrubFilter` on each named logger (idempotent)."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, ScrubFilter) for f in logger.filters):
            logger.addFilter(ScrubFilter())


def known_sensitive() -> list[str]:
    """The registered values, longest first (so a value inside another is cut after it)."""
    with _LOCK:
        return sorted(_SENSITIVE, key=len, reverse=True)


def scrub(text: str, also: Iterable[str] = ()) -> str:
    """``text`` with every registered sensitive value (and those in ``also``) replaced.

    >>> register_sensitive("k3y-abcdef")
    >>> scrub("401 bad key k3y-abcdef")
    '401 bad key [redacted]'
    """
    key = (_VERSION, tuple(also))
    cutter = _LAST.get(key)
    if cutter is None:  # one made per listing, not per cell (300k rows)
        cutter = _Cutter(key[1])
        _LAST.clear()
        _LAST[key] = cutter
    return cutter.cut(text)


class _Cutter:
    """The values :func:`scrub` cuts (the registered ones and ``also``), with the escaped
    forms a message shows (``repr`` in ``{x!r}``, JSON) of a value with quotes, backslashes or
    non-ASCII characters; made once for many texts (:func:`redact_secrets`: every string of a
    listing). With many values, each is found through its first :data:`MIN_SENSITIVE_LEN`
    characters, so that a text costs its length, not the number of values (a listing of 1,000
    subscriptions with 2,000 secrets known took 31 s when every string compared every value)."""

    #: Up to this many values, each is looked for in the text (C speed); beyond, by its start.
    DIRECT = 64

    def __init__(self, also: Iterable[str] = ()) -> None:
        values = {*known_sensitive(), *(a for a in also if a)}
        values |= {f(v) for v in values for f in (_repr_inner, _json_inner)}
        self._values = sorted(values, key=len, reverse=True)
        self._short = [v for v in self._values if len(v) < MIN_SENSITIVE_LEN]
        self._by_start: dict[str, list[str]] = {}
        for v in self._values:
            if len(v) >= MIN_SENSITIVE_LEN:
                self._by_start.setdefault(v[:MIN_SENSITIVE_LEN], []).append(v)
        self._shortest = len(self._values[-1]) if self._values else 0

    def cut(self, text: str) -> str:
        """``text`` with each value replaced by :data:`REDACTED`, longest first."""
        if not self._values or len(text) < self._shortest:
            return text
        if len(self._values) <= self.DIRECT:
            found = self._values
        else:
            n, starts = MIN_SENSITIVE_LEN, self._by_start
            seen = [*self._short]
            for i in range(len(text) - n + 1):
                seen.extend(starts.get(text[i : i + n], ()))
            found = sorted(set(seen), key=len, reverse=True)
        for value in found:
            if value in text:
                text = text.replace(value, REDACTED)
        return text


def _repr_inner(value: str) -> str:
    return repr(value)[1:-1]


def _json_inner(value: str) -> str:
    return json.dumps(value)[1:-1]


def refuse_known_secrets(path: object, text: str, also: Iterable[str] = ()) -> None:
    """Raise InputError when ``text`` (a params or mutes file) holds a known secret value.

    Secrets travel by file path or variable name only; a value pasted into a parameters file
    would end up in the executed notebook and the manifest. The error names the file and the
    line, never the value.
    """
    for value in {*known_sensitive(), *(a for a in also if len(a) >= MIN_SENSITIVE_LEN)}:
        at = text.find(value)
        if at >= 0:
            line = text.count("\n", 0, at) + 1
            raise InputError(
                f"{path}: line {line} holds the value of a known secret or API key; remove it "
                "(secrets go by file path or environment-variable name only)"
            )


def shown(value: object, limit: int = 40) -> str:
    """``repr`` of a user's value for a message: registered secrets cut first, then at most
    ``limit`` characters (shortening first would leave a secret's start that no longer matches
    the whole secret, and so would not be cut from the message).

    >>> shown("x" * 50, 5)
    "'xxxxx'"
    """
    return repr(scrub(str(value))[:limit])


def for_terminal(text: str) -> str:
    r"""Escape control characters so that text from outside cannot drive the terminal.

    >>> for_terminal("ok" + chr(27) + "[31m red" + chr(13))
    'ok\\x1b[31m red\\x0d'
    """
    return _CONTROL.sub(lambda m: _escape(m.group()), text)


def json_for_terminal(text: str) -> str:
    """JSON text with the characters JSON leaves raw but terminals obey (C1, bidi) escaped."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


#: What a secret value is replaced by wherever the toolkit writes or shows a listing.
REDACTED = "[redacted]"


def redact_secrets(value: Any, *, also: Iterable[str] = ()) -> tuple[Any, int]:
    """Copy a decoded JSON value with every non-empty secret-named field replaced by ``[redacted]``.

    A field is secret-named when its key contains ``secret`` (any case, any depth: ``secret``,
    ``secrets``, ``signingSecret``); its whole value is replaced, whatever its type. Strings
    listed in ``also`` (e.g. the API key) and every value registered with
    :func:`register_sensitive` are cut out of every string, keys included.

    Returns
    -------
    (copy, count)
        ``count`` is the number of secret-named values replaced.

    Examples
    --------
    >>> redact_secrets({"data": [{"id": "wh_1", "secret": "s3cret"}]})
    ({'data': [{'id': 'wh_1', 'secret': '[redacted]'}]}, 1)
    """
    cutter = _Cutter(also)
    count = 0
    # An explicit stack, not recursion: a listing nested 100,000 deep must not crash.
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        v, parent, slot = stack.pop()
        if isinstance(v, dict):
            out: dict = {}
            for k, item in v.items():
                key = cutter.cut(k) if isinstance(k, str) else k
                if isinstance(k, str) and "secret" in k.lower():
                    if item in (None, "", [], {}):
                        out[key] = item
                    else:
                        out[key] = REDACTED
                        count += 1
                else:
                    out[key] = None
                    stack.append((item, out, key))
            parent[slot] = out
        elif isinstance(v, list):
            items: list = [None] * len(v)
            stack.extend((x, items, i) for i, x in enumerate(v))
            parent[slot] = items
        elif isinstance(v, str):
            parent[slot] = cutter.cut(v)
        else:
            parent[slot] = v
    return root[0], count
