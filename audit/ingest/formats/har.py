"""HAR 1.2 captures (``.har``): each entry's request is one record, ``line`` is the entry index.

A HAR file is one JSON document, so it is parsed whole (:data:`SPLITS_AT_LINES` is false).
An entry that names a key twice (in the entry, its request, postData or response, or a header
object) is unreadable with a reason that says so: JSON would keep only the last.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from audit.errors import LoadError
from audit.ingest.formats.base import Buffer, _Envelopes, _record
from audit.ingest.secrets import load_json_noting_repeats, repeated_keys

__all__ = ["NAME", "SPLITS_AT_LINES", "SUFFIXES", "parse"]

NAME = "har"
SUFFIXES: tuple[str, ...] = ("har",)
SPLITS_AT_LINES = False


def parse(
    data: bytes,
    source: str,
    wanted: dict[str, str],
    first_line: int = 1,
    overlong: Mapping[int, int] | None = None,
) -> Buffer:
    """Parse a HAR 1.2 file; raises :class:`~audit.errors.LoadError` when it is not HAR at all.

    ``first_line`` and ``overlong`` are accepted for the registry's common signature and
    ignored (a HAR file is one document, read whole).
    """
    try:
        return parse_har(data, source, wanted)
    except ValueError as e:
        raise LoadError(f"{source}: not a HAR 1.2 file ({e})") from None


def parse_har(data: bytes, source: str, wanted: dict[str, str]) -> Buffer:
    """Parse a HAR 1.2 file: each entry's request is one record, ``line`` is the entry index.

    Raises ValueError (with a short reason) when the file is not HAR at all.
    """
    try:
        har = orjson.loads(data)
        entries = har["log"]["entries"]
    except orjson.JSONDecodeError:
        raise ValueError("not valid JSON") from None
    except (KeyError, TypeError):
        raise ValueError("no log.entries") from None
    if type(entries) is not list:
        raise ValueError("log.entries is not a list")
    # Read again keeping every pair, to tell an entry that names a key twice (orjson keeps the
    # last): the same document, so the same entries in the same order.
    try:
        whole: Any = load_json_noting_repeats(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None
    noted = whole["log"]["entries"]
    buf = Buffer()
    envelope = _Envelopes()
    for i, (entry, seen) in enumerate(zip(entries, noted, strict=True), 1):
        rec = _repeated(seen) or _har_record(entry)
        problem = rec if isinstance(rec, str) else _record(buf, source, i, rec, wanted, envelope)
        if problem is not None:
            buf.add_unreadable(source, i, problem)
    return buf


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
        twice = repeated_keys(value)
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
    if type(entry) is not dict or type(entry.get("request")) is not dict:
        return "HAR entry has no request"
    req = entry["request"]
    headers = req.get("headers")
    if type(headers) is not list or not all(type(h) is dict and "name" in h for h in headers):
        return "HAR request headers are not a list of {name, value}"
    post = req.get("postData") or {}
    if type(post) is not dict:
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
    if type(resp) is dict and resp.get("status") not in (None, 0):
        rec["response_status"] = resp["status"]
    t: Any = entry.get("time")
    if type(t) in (int, float) and t >= 0:
        rec["response_ms"] = t
    return rec
