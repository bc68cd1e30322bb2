"""JSON Lines captures (``.jsonl``, ``.ndjson``): one record per line.

The record shape is in ``docs/formats.md``. A file can be cut at line ends and its pieces parsed
apart (in worker processes), so :data:`SPLITS_AT_LINES` is true.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import orjson

from audit.ingest.formats.base import Buffer, _Envelopes, _record

__all__ = ["NAME", "SPLITS_AT_LINES", "SUFFIXES", "parse", "parse_jsonl"]

#: The format's name (the task kind and the registry's canonical key).
NAME = "jsonl"
#: File suffixes of this format (before rotation and ``.gz``).
SUFFIXES: tuple[str, ...] = ("jsonl", "ndjson")
#: Whether a file may be cut at line ends and its pieces parsed independently.
SPLITS_AT_LINES = True


# A JSON key whose last character-escape (\\uXXXX) is followed by the key's end: a header name
# spelled with escapes could repeat another one that the parser merged (last key wins).
_ESCAPED_KEY = re.compile(rb'\\u[0-9a-fA-F]{4}[^"\\]*"\s*:')


#: Per parse: each tuple of header names' :func:`prefix_markers`.
_Plans = dict[tuple[str, ...], tuple[tuple[bytes, int], ...]]


def _may_repeat(raw: bytes, headers: dict[str, Any], wanted: dict[str, str], plans: _Plans) -> bool:
    """Cheap test: could the headers object name a delivery header twice (merged by orjson)?

    orjson merges only keys that are equal after unescaping; names that differ in case stay
    apart and :func:`_headers` joins them. So the line is re-read exactly when it holds the
    exact prefix (``"X-PhishFort-``) of one of its delivery headers more often than the object
    holds delivery headers, or when a JSON key ends after a ``\\uXXXX`` escape. The test
    depends on the line alone (not on the lines before it, so not on where a file is cut into
    pieces); ``plans`` caches, per parse, each tuple of header names' prefixes and count: a usual
    line costs a dict lookup, one ``bytes.count`` per spelling and one regex scan.
    """
    names = tuple(headers)
    markers = plans.get(names)
    if markers is None:
        markers = prefix_markers(names, wanted)
        if len(plans) < 4096:  # receivers repeat the same header names
            plans[names] = markers
    found = sum(count for _, count in markers)
    if found and sum(raw.count(m) for m, _ in markers) > found:
        return True
    return _ESCAPED_KEY.search(raw) is not None


def prefix_markers(names: tuple[str, ...], wanted: dict[str, str]) -> tuple[tuple[bytes, int], ...]:
    """Each spelling of the delivery headers' common prefix among ``names``, as the start of a
    JSON string (``"X-PhishFort-``), with how many of those headers spell it so: a line holding
    a spelling more often may name one of them twice (this parser's and the fast path's test)."""
    size = _prefix_len(wanted)
    markers: dict[bytes, int] = {}
    for name in names:
        if name.lower() in wanted:
            marker = b'"' + name[:size].encode("utf-8", "surrogatepass")
            markers[marker] = markers.get(marker, 0) + 1
    return tuple(markers.items())


def _prefix_len(wanted: dict[str, str]) -> int:
    """Length of the common prefix of the delivery header names (``x-phishfort-``: 12)."""
    names = list(wanted)
    prefix = names[0] if names else ""
    for n in names[1:]:
        while not n.startswith(prefix):
            prefix = prefix[:-1]
    return len(prefix)


class _Pairs(dict[str, Any]):
    """A JSON object that also keeps every (key, value) pair, repeated keys included."""

    pairs: list[tuple[str, Any]]


def _keep_pairs(pairs: list[tuple[str, Any]]) -> _Pairs:
    obj = _Pairs(pairs)
    obj.pairs = pairs
    return obj


def _header_pairs(raw: bytes, parsed: dict[str, Any]) -> object:
    """The record's headers as ``[name, value]`` pairs, every repeated name kept."""
    try:
        rec = json.loads(raw, object_pairs_hook=_keep_pairs)
    except (ValueError, RecursionError):
        return parsed
    hdr = rec.get("headers") if type(rec) is _Pairs else None
    if type(hdr) is not _Pairs:
        return parsed
    return [[k, v] for k, v in hdr.pairs]


#: A record (line) longer than this is counted unreadable without being parsed: parsing takes
#: about 11 times a line's size in memory. The reference receiver caps bodies at 10 MiB, which
#: JSON escaping at most makes 60 MiB. The readers (:mod:`audit.ingest.lines`, the fast path's
#: piece planning) read it at call time and skip a longer line as a stream, never holding it.
MAX_RECORD_BYTES = 64 * 2**20


def too_long(size: int) -> str:
    """The unreadable reason of a record of ``size`` bytes, over :data:`MAX_RECORD_BYTES`."""
    return f"record of {size:,} bytes, over the {MAX_RECORD_BYTES:,}-byte limit: not parsed"


def quotes_beyond(raw: bytes, rec: dict[str, Any]) -> bool:
    """Cheap test: could the line name a key of ``rec`` (the object orjson read from it) twice?

    JSON parsers keep the last of two equal keys. Every ``"`` byte of a line is a string's
    delimiter or an escaped quote (``\\"``) of its text, so without duplicates the line holds
    exactly as many as the parsed object gives (two per key and string, one per quote of a
    text), and a dropped key takes at least its own two along. A quote written ``\\u0022``
    holds none, so such a line is always suspect. The fast path applies the same count.
    """
    expected = 2 * len(rec)
    for value in rec.values():
        kind = type(value)
        if kind is str:
            expected += 2 + value.count('"')
        elif kind is dict or kind is list:
            try:
                expected += orjson.dumps(value).count(b'"')
            except orjson.JSONEncodeError:  # nested deeper than orjson writes: read exactly
                return True
    return raw.count(b'"') != expected or b"\\u0022" in raw


def duplicate_key(raw: bytes) -> str | None:
    """The unreadable reason of a line whose top-level object names a key twice (read exactly,
    every pair kept), else None. Duplicates inside values (the headers object, the body text)
    are not the record's: headers are joined as HTTP does, the body is signed bytes."""
    try:
        rec = json.loads(raw, object_pairs_hook=_keep_pairs)
    except (ValueError, RecursionError):
        return None
    if type(rec) is not _Pairs:
        return None
    seen: set[str] = set()
    for key, _ in rec.pairs:
        if key in seen:
            shown = repr(key) if len(key) <= 40 else repr(key[:37]) + "..."
            return f"duplicate key {shown} (JSON would keep only the last)"
        seen.add(key)
    return None


def parse_jsonl(
    data: bytes,
    source: str,
    wanted: dict[str, str],
    first_line: int = 1,
    overlong: Mapping[int, int] | None = None,
) -> Buffer:
    """Parse JSON Lines bytes. Blank lines are not records (their numbers still count).

    ``wanted`` maps lower-cased header names to column keys (see :func:`audit.spec.header_names`).
    ``overlong`` (line number -> length) lists the lines a reader left empty because they are
    over :data:`MAX_RECORD_BYTES` (:class:`audit.ingest.lines.Chunk`): each is unreadable.
    """
    buf = Buffer()
    envelope = _Envelopes()
    plans: _Plans = {}
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    for line, raw in enumerate(data.split(b"\n"), first_line):
        if not raw or raw.isspace():
            if overlong and line in overlong:
                buf.add_unreadable(source, line, too_long(overlong[line]))
            continue
        if len(raw) > MAX_RECORD_BYTES:
            buf.add_unreadable(source, line, too_long(len(raw)))
            continue
        try:
            rec = loads(raw)
        except decode_error as e:
            buf.add_unreadable(source, line, f"not valid JSON ({e})")
            continue
        if type(rec) is not dict:
            buf.add_unreadable(source, line, "not a JSON object")
            continue
        if quotes_beyond(raw, rec):
            twice = duplicate_key(raw)
            if twice is not None:
                buf.add_unreadable(source, line, twice)
                continue
        hdr = rec.get("headers")
        if type(hdr) is dict and hdr and _may_repeat(raw, hdr, wanted, plans):
            rec["headers"] = _header_pairs(raw, hdr)
        problem = _record(buf, source, line, rec, wanted, envelope)
        if problem is not None:
            buf.add_unreadable(source, line, problem)
    return buf


#: The registry's entry point (same signature in every format module).
parse = parse_jsonl
