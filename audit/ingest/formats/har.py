"""HAR 1.2 captures (``.har``): each entry's request is one record, ``line`` is the entry index.

A HAR file is one JSON document; it is read as a stream, entry by entry (``ijson`` over its C
parser, yajl2), so memory holds one entry's objects at a time besides the records read, never
the whole document's (:data:`SPLITS_AT_LINES` is false: the records of one file are one piece).
A 300 MB HAR once took 2.66 GB when parsed whole (``docs/scale.md``).

Keys named twice are never read last-wins: a document whose top-level object or ``log`` names
a key twice (two ``log`` or two ``entries``: JSON readers disagree on which one counts, and
the one they drop is lost) is refused with a reason; an entry that names a key twice (in the
entry, its request, postData or response, or a header object) is unreadable with a reason that
says so.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from io import BytesIO
from typing import Any, Protocol

import ijson  # type: ignore[import-untyped]  # ijson ships no type hints

from audit.errors import LoadError
from audit.ingest.formats.base import Buffer, _Envelopes, _record

__all__ = ["NAME", "SPLITS_AT_LINES", "SUFFIXES", "BlockReader", "Readable", "parse", "parse_har"]

NAME = "har"
SUFFIXES: tuple[str, ...] = ("har",)
SPLITS_AT_LINES = False

#: How deep a value inside an entry may nest (deeper: the file is refused, as JSON readers do).
MAX_DEPTH = 512
_READ_BYTES = 2**20


class Readable(Protocol):
    """What the parser reads a HAR from: a binary file object, or a :class:`BlockReader`."""

    def read(self, n: int = -1, /) -> bytes: ...


def parse(
    data: bytes | Readable,
    source: str,
    wanted: dict[str, str],
    first_line: int = 1,
    overlong: Mapping[int, int] | None = None,
) -> Buffer:
    """Parse a HAR 1.2 file (its bytes, or a binary file object read as a stream); raises
    :class:`~audit.errors.LoadError` when it is not HAR at all.

    ``first_line`` and ``overlong`` are accepted for the registry's common signature and
    ignored (a HAR file is one document).
    """
    try:
        return parse_har(data, source, wanted)
    except ValueError as e:
        raise LoadError(f"{source}: not a HAR 1.2 file ({e})") from None


def parse_har(
    data: bytes | Readable, source: str, wanted: dict[str, str], *, until_readable: bool = False
) -> Buffer:
    """Parse a HAR 1.2 document entry by entry: each entry's request is one record, ``line``
    is the entry index. With ``until_readable``, stop after the first entry that reads (the
    rest of the document is neither read nor checked: a look at what the file holds).

    Raises ValueError (with a short reason) when the file is not HAR at all, or names ``log``,
    ``entries`` or another key of its top-level object or of ``log`` twice.
    """
    stream = _SurrogateCheck(BytesIO(data) if isinstance(data, bytes) else data)
    buf = Buffer()
    envelope = _Envelopes()
    try:
        events = ijson.basic_parse(stream, buf_size=_READ_BYTES, use_float=True)
        for i, entry in enumerate(_entries(events), 1):
            rec = _repeated(entry) or _har_record(entry)
            problem = (
                rec if isinstance(rec, str) else _record(buf, source, i, rec, wanted, envelope)
            )
            if problem is not None:
                buf.add_unreadable(source, i, problem)
            elif until_readable:
                break
    except ijson.JSONError:
        raise ValueError("not valid JSON") from None
    except UnicodeDecodeError:  # not UTF-8, or an escaped lone low surrogate
        raise ValueError("not valid JSON") from None
    return buf


class BlockReader:
    """A binary file object over byte blocks (an inflated gzip stream), for :func:`parse`."""

    def __init__(self, blocks: Iterable[bytes]) -> None:
        self.blocks = iter(blocks)
        self.rest = b""

    def read(self, n: int | None = -1) -> bytes:
        """At most ``n`` bytes (``n`` < 0: all that is left)."""
        while n is None or n < 0 or len(self.rest) < n:
            block = next(self.blocks, None)
            if block is None:
                break
            self.rest += block
        if n is None or n < 0:
            n = len(self.rest)
        out, self.rest = self.rest[:n], self.rest[n:]
        return out


class _Noted(dict[str, Any]):
    """A decoded JSON object (the last value of a key named twice, as JSON readers keep) that
    remembers the keys it named more than once."""

    repeated: list[str] = []  # noqa: RUF012  # replaced, never changed in place


def _entries(events: Iterator[tuple[str, Any]]) -> Iterator[object]:
    """The items of ``log.entries``, one decoded value at a time."""
    event, _ = _next(events)
    if event != "start_map":
        raise ValueError("no log.entries")
    found = False
    top: set[str] = set()
    for event, key in events:
        if event == "end_map":
            break
        _once(key, top, "the document")
        if key != "log":
            _skip(events)
            continue
        event, _ = _next(events)
        if event != "start_map":
            _skip_rest(event, events)
            continue
        log: set[str] = set()
        for event, name in events:
            if event == "end_map":
                break
            _once(name, log, "log")
            if name != "entries":
                _skip(events)
                continue
            event, _ = _next(events)
            if event != "start_array":
                _skip_rest(event, events)
                raise ValueError("log.entries is not a list")
            found = True
            for event, value in events:
                if event == "end_array":
                    break
                yield _value(event, value, events, 0)
    for _ in events:  # what follows the document (ijson says whether it is JSON)
        pass
    if not found:
        raise ValueError("no log.entries")


def _once(key: str, seen: set[str], where: str) -> None:
    if key in seen:
        shown = repr(key) if len(key) <= 40 else repr(key[:37]) + "..."
        raise ValueError(
            f"{where} names the key {shown} twice (JSON readers keep one and drop the other)"
        )
    seen.add(key)


def _next(events: Iterator[tuple[str, Any]]) -> tuple[str, Any]:
    try:
        return next(events)
    except StopIteration:
        raise ValueError("not valid JSON") from None


def _skip(events: Iterator[tuple[str, Any]]) -> None:
    """Consume one value."""
    event, _ = _next(events)
    _skip_rest(event, events)


def _skip_rest(event: str, events: Iterator[tuple[str, Any]]) -> None:
    """Consume the rest of a value that began with ``event``."""
    if event not in ("start_map", "start_array"):
        return
    depth = 1
    for ev, _ in events:
        if ev in ("start_map", "start_array"):
            depth += 1
        elif ev in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                return


_OPENS = frozenset(("start_map", "start_array"))
_END = ("end", None)


def _value(event: str, value: Any, events: Iterator[tuple[str, Any]], depth: int) -> object:
    """One decoded value that began with ``event`` (objects as :class:`_Noted`). Scalars are
    taken in the loops, not by a call each (most of a HAR's values)."""
    if event not in _OPENS:
        return value
    if depth >= MAX_DEPTH:
        raise ValueError("nested too deeply")
    if event == "start_map":
        obj = _Noted()
        for ev, key in events:
            if ev == "end_map":
                return obj
            if key in obj:
                obj.repeated = [*obj.repeated, key]
            ev, val = next(events, _END)
            obj[key] = _value(ev, val, events, depth + 1) if ev in _OPENS else val
            if ev == "end":
                break
        raise ValueError("not valid JSON")
    items: list[object] = []
    for ev, val in events:
        if ev == "end_array":
            return items
        items.append(_value(ev, val, events, depth + 1) if ev in _OPENS else val)
    raise ValueError("not valid JSON")


#: A ``\\u`` escape of a high UTF-16 surrogate (an escape only when the run of backslashes
#: it ends is odd: ``\\\\ud800`` is a backslash, then text).
_HIGH = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW = re.compile(rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


class _SurrogateCheck:
    """A binary stream passed through to the JSON parser, checking that every escaped high
    surrogate (``\\ud800``) is followed by an escaped low one: the C parser would read a lone
    one as ``?`` (a changed body, not a refused file, which is what JSON requires)."""

    def __init__(self, raw: Readable) -> None:
        self.raw = raw
        self.tail = b""  # the end of the previous block (an escape cut in two)

    def read(self, n: int | None = -1) -> bytes:
        block = self.raw.read(_READ_BYTES if n is None or n < 0 else n)
        buf = self.tail + block
        final = not block
        if b"\\u" in buf:
            self._check(buf, final)
        keep = 0 if final else min(len(buf), 16)
        while keep < len(buf) and buf[len(buf) - keep - 1 : len(buf) - keep] == b"\\":
            keep += 1  # a whole run of backslashes, so that its parity is known
        self.tail = buf[len(buf) - keep :] if keep else b""
        return block

    def _check(self, buf: bytes, final: bool) -> None:
        for m in _HIGH.finditer(buf):  # (the parser refuses a lone low one itself)
            k = m.start()
            while k > 0 and buf[k - 1] == 0x5C:
                k -= 1
            if (m.start() - k) % 2:
                continue  # an escaped backslash, then the text "ud800"
            end = m.end()
            if end + 6 > len(buf) and not final:
                continue  # seen again with the next block (its tail is kept)
            if not _LOW.match(buf, end):
                raise ValueError("a string escapes half a UTF-16 surrogate pair")


def _repeated(entry: object) -> str | None:
    """The unreadable reason of an entry that names a key twice where a record is read."""
    if not isinstance(entry, dict):
        return None
    request = entry.get("request")
    places: list[tuple[str, object]] = [("HAR entry", entry), ("request", request)]
    if isinstance(request, dict):
        places.append(("request.postData", request.get("postData")))
        headers = request.get("headers")
        if isinstance(headers, list):
            places += [("request header", h) for h in headers]
    places.append(("response", entry.get("response")))
    for where, value in places:
        twice = value.repeated if isinstance(value, _Noted) else []
        if twice:
            key = twice[0]
            shown = repr(key) if len(key) <= 40 else repr(key[:37]) + "..."
            return f"duplicate key {shown} in the {where} (JSON would keep only the last)"
    return None


def _har_record(entry: object) -> dict[str, Any] | str:
    """Map a HAR entry to a capture record. A missing ``postData`` is an empty body.

    A ``postData`` without ``text`` (e.g. ``params`` only) is unreadable: the signed bytes are
    not in the file. A response status of 0 means "no response" in HAR and is left empty.
    """
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict):
        return "HAR entry has no request"
    req = entry["request"]
    headers = req.get("headers")
    if not isinstance(headers, list) or not all(
        isinstance(h, dict) and "name" in h for h in headers
    ):
        return "HAR request headers are not a list of {name, value}"
    post = req.get("postData") or {}
    if not isinstance(post, dict):
        return "HAR postData is not an object"
    if post and "text" not in post:
        what = "params only" if "params" in post else "no text"
        return f"body bytes not in the HAR (postData has {what})"
    text = post.get("text", "")
    if type(text) is not str:
        return "HAR postData.text is not a string"
    rec: dict[str, Any] = {
        "received_at": entry.get("startedDateTime"),
        "headers": [[h["name"], h["value"]] if "value" in h else [h["name"]] for h in headers],
        "url": req.get("url"),
    }
    rec["body_b64" if post.get("encoding") == "base64" else "body"] = text
    resp = entry.get("response")
    if isinstance(resp, dict) and resp.get("status") not in (None, 0):
        rec["response_status"] = resp["status"]
    t: Any = entry.get("time")
    if type(t) in (int, float) and t >= 0:
        rec["response_ms"] = t
    return rec
