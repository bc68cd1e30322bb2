"""The fast verification path: the common record shape, verified in a lean loop.

A JSONL record takes the fast path only when it has the plain shape receivers write and turns
out ``valid``:

* a JSON object whose keys are among ``received_at, headers, body, subscription_id, url,
  response_status, response_ms`` (the first three present, none ``null``);
* ``headers`` an object of string names and values, no delivery header named twice (in any
  case, or spelled with an escape: a line with a ``\\u`` escape anywhere is left to the exact
  path); ``body`` a string (not ``body_b64``); ``subscription_id`` a non-empty string or absent
  (then it is inferred, when no two subscriptions share a secret value);
  ``url`` a string; ``response_status`` an integer 100-599; ``response_ms`` a finite number;
* judged ``valid`` by :func:`audit.ingest.verdict_rules.decide` (the rules every path applies)
  against the secrets of its subscription (or, without one, every secret).

The HMAC starts from the secret's pre-keyed inner and outer hashlib states (``copy()`` per
record instead of keying again), given to :func:`~audit.ingest.verdict_rules.decide` as ``mac``.
Every other record, whatever is odd about it, goes through the exact path
(:func:`audit.ingest.formats.jsonl.parse_jsonl` and
:func:`audit.ingest.signatures.verify_columns`), so both paths give the same rows:
``tests/test_fast_path.py`` checks that, case by case.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from audit.ingest.extract import EXTRACTED, Extracted, extracted_columns
from audit.ingest.extract import extract as _extract
from audit.ingest.formats import jsonl as _jsonl
from audit.ingest.formats.base import (
    _NO_ENVELOPE,
    COLUMNS,
    NAT,
    Columns,
    Envelope,
    _in_range,
    _time_ns,
)
from audit.ingest.formats.jsonl import parse_jsonl, prefix_markers
from audit.ingest.secrets import SecretStore, SigningSecret
from audit.ingest.signatures import subscription_logged, verify_parsed
from audit.ingest.verdict_rules import decide
from audit.ingest.workers import collector_paused
from audit.tables import CAPTURE_KEYS
from audit.timeutil import parse_iso_ns

if TYPE_CHECKING:
    from _hashlib import HASH

__all__ = ["Verified", "verify_jsonl"]

#: The record shape the fast path takes: the capture fields declared in :mod:`audit.tables`.
_KEYS = CAPTURE_KEYS
_BLOCK = 64  # SHA-256 block size
_INFINITE = (float("inf"), float("-inf"))
#: A character escape (\\uXXXX) anywhere in a line (a regex finds it faster than ``in``, which
#: stops at every backslash of the body's escaped quotes).
_ESCAPE = re.compile(rb"\\u").search
#: The column keys of the delivery headers, in the order :func:`_plan` gives their names.
_HEADER_KEYS = ("signature", "timestamp", "event", "delivery_id")


class _Keyed:
    """Secrets with their validity (the candidates :func:`decide` is given) and, for each, the
    pre-keyed inner and outer HMAC states: :meth:`mac` is :func:`decide`'s ``mac``."""

    __slots__ = ("inner", "outer", "secrets")

    def __init__(self, secrets: tuple[SigningSecret, ...]) -> None:
        self.secrets = secrets
        self.inner: list[HASH] = []
        self.outer: list[HASH] = []
        for s in secrets:
            key = _block_key(s.key)
            self.inner.append(hashlib.sha256(bytes(b ^ 0x36 for b in key)))
            self.outer.append(hashlib.sha256(bytes(b ^ 0x5C for b in key)))

    def mac(self, i: int, message: bytes) -> bytes:
        """HMAC-SHA256 of ``message`` under ``secrets[i]``, from its pre-keyed states."""
        h = self.inner[i].copy()
        h.update(message)
        o = self.outer[i].copy()
        o.update(h.digest())
        return o.digest()


@dataclass(frozen=True)
class _Keys:
    """Pre-keyed secrets by subscription, all of them in the exact path's order (a record
    without subscription is tried against every one), and whether every secret value is
    distinct (only then may a record without subscription take the fast path: its match is
    unique, whatever order the candidates are tried in)."""

    by_sub: dict[str, _Keyed]
    every: _Keyed
    distinct: bool


def _block_key(key: bytes) -> bytes:
    """The HMAC key block of a secret (RFC 2104): two secrets with the same block are one key."""
    key = key if len(key) <= _BLOCK else hashlib.sha256(key).digest()
    return key.ljust(_BLOCK, b"\0")


def _keyed(secrets: SecretStore) -> _Keys:
    every = tuple(secrets.all_secrets())
    values = [_block_key(s.key) for s in every]
    return _Keys(
        {sub: _Keyed(tuple(items)) for sub, items in secrets.by_subscription.items()},
        _Keyed(every),
        len(set(values)) == len(values),
    )


class _Envelope:
    """The envelope columns of a body (the rules of ``audit.ingest.formats.base._Envelopes``),
    and, when ``extract`` is set, the columns of :func:`audit.ingest.records.extract` from the
    same parse.
    """

    def __init__(self, extract: bool, event_times: bool = True) -> None:
        self._times: dict[str, int] = {}
        self._extract = extract
        self._event_times = event_times  # False: event_timestamp is not wanted (left NaT)

    def __call__(self, body: bytes) -> tuple[Envelope, Extracted | None]:
        try:
            env = orjson.loads(body)
        except orjson.JSONDecodeError:
            env = None
        more = _extract(body, env) if self._extract else None
        if type(env) is not dict:
            return _NO_ENVELOPE, more
        eid, event, ts, data = (
            env.get("id"),
            env.get("event"),
            env.get("timestamp"),
            env.get("data"),
        )
        ts_ns = NAT
        if type(ts) is str and self._event_times:
            cached = self._times.get(ts)
            if cached is None:
                try:
                    ts_ns = parse_iso_ns(ts)[0]
                except ValueError:
                    ts_ns = NAT
                if not _in_range(ts_ns):
                    ts_ns = NAT
                self._times[ts] = ts_ns
            else:
                ts_ns = cached
        inc = data.get("incidentId") if type(data) is dict else None
        found = Envelope(
            eid if type(eid) is str else None,
            event if type(event) is str else None,
            ts_ns,
            inc if type(inc) is str else None,
        )
        return found, more


class Verified(NamedTuple):
    """What :func:`verify_jsonl` gives."""

    columns: Columns
    naive_times: int
    unreadable: int
    #: How many records went through the exact path.
    exact: int


class _Row(NamedTuple):
    """One verified record: the columns of :data:`audit.tables.DELIVERIES` in their order,
    ``subscription_logged``, what :func:`audit.ingest.extract.extract` read from the body (None
    without ``extract``) and whether ``received_at`` had no offset (``tests/test_tables.py``
    holds the fields equal to the declaration)."""

    source: str
    line: int
    received_at: int
    subscription_id: str | None
    url: str | None
    response_status: int | None
    response_ms: float | None
    signature: str | None
    timestamp_header: str | None
    event_header: str | None
    delivery_id: str | None
    body: bytes | None
    event_id: str | None
    event: str | None
    event_timestamp: int
    incident_id: str | None
    verdict: str | None
    detail: str | None
    hmac_ok: bool | None
    skew_s: float | None
    matched_secret: str | None
    subscription_logged: bool | None
    extracted: Extracted | None
    naive: bool


#: The columns of a :class:`_Row` that :func:`verify_jsonl` gives as they are.
_NAMES = _Row._fields[:-2]
#: The columns of the exact path's rows (:func:`_exact`), before ``subscription_logged``.
_EXACT_NAMES = (*COLUMNS, "hmac_ok", "skew_s", "matched_secret")
#: The delivery header names of a tuple of header names, and their prefix markers (:func:`_plan`).
_Plan = tuple[tuple[str | None, ...], tuple[tuple[bytes, int], ...]]


@dataclass(frozen=True)
class _Context:
    """What every record of one :func:`verify_jsonl` call is verified with."""

    source: str
    wanted: dict[str, str]
    keyed: _Keys
    tol_ns: int
    envelope: _Envelope
    #: :func:`_plan` by tuple of header names (receivers repeat them: a few are remembered).
    plans: dict[tuple[str, ...], _Plan | None]


@collector_paused()  # rows of plain values: nothing for the collector to free
def verify_jsonl(
    data: bytes,
    source: str,
    wanted: dict[str, str],
    first_line: int,
    secrets: SecretStore,
    *,
    tolerance_s: float,
    keyed: _Keys | None = None,
    extract: bool = False,
    event_times: bool = True,
    overlong: Mapping[int, int] | None = None,
) -> Verified:
    """Parse and verify JSONL bytes: (columns, naive times, unreadable, exact).

    ``exact`` counts the records that went through the exact path.
    The columns are those of :data:`audit.ingest.formats.base.COLUMNS` plus the verification
    columns and
    ``subscription_logged``, in input order, exactly as the exact path gives them; with
    ``extract``, also :data:`audit.ingest.records.EXTRACTED` (each body parsed once). Without
    ``event_times`` the fast rows' ``event_timestamp`` is left empty (for callers that drop it).
    ``overlong`` lists the lines a reader emptied as over the record limit
    (:class:`audit.ingest.lines.Chunk`): the exact path counts each unreadable.
    The cyclic garbage collector is paused meanwhile, unless ``AUDIT_JOBS=1``
    (:func:`audit.ingest.workers.collector_paused`, asked at each call).
    """
    ctx = _Context(
        source,
        wanted,
        _keyed(secrets) if keyed is None else keyed,
        round(tolerance_s * 1e9),
        _Envelope(extract, event_times),
        {},
    )
    loads, decode_error = orjson.loads, orjson.JSONDecodeError
    rows: list[_Row | None] = []  # None: left to the exact path (a record of ``slow``)
    slow: list[tuple[int, int, bytes]] = []  # (position in rows, line number, line)
    longest = _jsonl.MAX_RECORD_BYTES  # a longer record: the exact path counts it unreadable
    for line, raw in enumerate(data.split(b"\n"), first_line):
        if not raw or raw.isspace():
            if overlong and line in overlong:
                slow.append((len(rows), line, raw))
                rows.append(None)
            continue
        row = None
        try:
            rec = loads(raw) if len(raw) <= longest else None
        except decode_error:
            rec = None
        if type(rec) is dict and rec.keys() <= _KEYS:
            row = _fast(rec, raw, line, ctx)
        if row is None:
            slow.append((len(rows), line, raw))
        rows.append(row)
    naive = unreadable = 0
    if slow:
        naive, unreadable = _exact(
            rows, slow, source, wanted, secrets, tolerance_s, extract, overlong=overlong
        )
    if not rows:
        names = (*_NAMES, *EXTRACTED) if extract else _NAMES
        return Verified({n: [] for n in names}, 0, unreadable, len(slow))
    transposed = list(zip(*rows, strict=True))
    naive += sum(transposed.pop())  # the rows' last field
    extracted = transposed.pop()
    columns = {n: list(v) for n, v in zip(_NAMES, transposed, strict=True)}
    if extract:
        columns.update(extracted_columns(extracted))
    return Verified(columns, naive, unreadable, len(slow))


def _plan(names: tuple[str, ...], wanted: dict[str, str]) -> _Plan | None:
    """The name of each delivery header among ``names`` (in :data:`_HEADER_KEYS` order, None
    when absent), and how often a line may hold each spelling of their common prefix as the
    start of a JSON string (``"X-PhishFort-``: once per such header); None when one is named
    twice in any case (the exact path decides what a repeated header means)."""
    plan = [(name, wanted[name.lower()]) for name in names if name.lower() in wanted]
    by_key = dict((key, name) for name, key in plan)
    if len(by_key) != len(plan):
        return None
    return tuple(by_key.get(k) for k in _HEADER_KEYS), prefix_markers(names, wanted)


def _fast(rec: dict[str, Any], raw: bytes, line: int, ctx: _Context) -> _Row | None:
    """The row of a plain, valid record; None sends it to the exact path."""
    received: Any = rec.get("received_at")
    headers: Any = rec.get("headers")
    text: Any = rec.get("body")
    sub: Any = rec.get("subscription_id")
    logged = "subscription_id" in rec
    if type(headers) is not dict or type(text) is not str:
        return None
    if logged and (type(sub) is not str or not sub):
        return None
    url, status, ms = rec.get("url"), rec.get("response_status"), rec.get("response_ms")
    if "url" in rec and type(url) is not str:
        return None
    if "response_status" in rec and not (type(status) is int and 100 <= status <= 599):
        return None
    if "response_ms" in rec:  # the exact path's rule: a finite number from 0, ints within 2**53
        if type(ms) is int and -(2**53) <= ms <= 2**53:
            ms = float(ms)
        if type(ms) is not float or ms != ms or ms in _INFINITE or ms < 0:
            return None
    if received is None or type(received) is bool:
        return None
    try:
        received_ns, had_offset = _time_ns(received)
    except (ValueError, TypeError, OverflowError):
        return None
    names = tuple(headers)
    plans = ctx.plans
    try:
        plan = plans[names]
    except KeyError:
        plan = _plan(names, ctx.wanted)
        if len(plans) < 4096:  # receivers repeat the same header names: remember a few
            plans[names] = plan
    if plan is None:
        return None
    spelled, markers = plan
    for value in headers.values():  # any odd value (even an unrelated header's): exact path
        if type(value) is not str:
            return None
    # JSON keeps the last of two same-named keys; the exact path sees both and calls the header
    # repeated. Without escapes every delivery header's key is spelled out in the line, so a
    # prefix met more often than those keys hold it may be a repeat spelled alike (or text of
    # the body: the exact path sorts that out); a name spelled with an escape
    # ("...Signatur\u0065") is the same key to JSON but not to a count, so any \u escape in
    # the line leaves the record to the exact path (receivers write UTF-8: escapes are rare).
    if _ESCAPE(raw) is not None:
        return None
    # A top-level key named twice (JSON keeps the last): the line holds more quotes than the
    # parsed record gives (``audit.ingest.formats.jsonl.quotes_beyond``, for this shape: two per
    # key and string, four per header, one per quote of the body; a quote in another string is
    # left to the exact path too).
    strings = 1 + (type(received) is str) + logged + ("url" in rec)
    if raw.count(b'"') != 2 * (len(rec) + strings) + 4 * len(headers) + text.count('"'):
        return None
    for marker, count in markers:
        if raw.count(marker) != count:
            return None
    signature_name, timestamp_name, event_name, delivery_name = spelled
    signature = None if signature_name is None else headers[signature_name]
    timestamp = None if timestamp_name is None else headers[timestamp_name]
    body = text.encode("utf-8")
    if logged:
        keyed = ctx.keyed.by_sub.get(sub)
        if keyed is None:
            return None
    elif ctx.keyed.distinct:  # inferred: the one secret (of any subscription) that matches
        keyed = ctx.keyed.every
    else:
        return None
    # The verdict rules, as every path applies them; any verdict but valid: the exact path.
    got = decide(
        signature,
        timestamp,
        body,
        received_ns,
        keyed.secrets,
        tolerance_ns=ctx.tol_ns,
        mac=keyed.mac,
    )
    if got.verdict != "valid" or got.matched is None:
        return None
    secret = keyed.secrets[got.matched]
    if not logged:
        sub = secret.subscription_id
    (eid, event, event_ns, incident), more = ctx.envelope(body)
    return _Row(
        source=ctx.source,
        line=line,
        received_at=received_ns,
        subscription_id=sub,
        url=url,
        response_status=status,
        response_ms=ms,
        signature=signature,
        timestamp_header=timestamp,
        event_header=None if event_name is None else headers[event_name],
        delivery_id=None if delivery_name is None else headers[delivery_name],
        body=body,
        event_id=eid,
        event=event,
        event_timestamp=event_ns,
        incident_id=incident,
        verdict=got.verdict,
        detail=got.detail,
        hmac_ok=got.hmac_ok,
        skew_s=got.skew_s,
        matched_secret=secret.label,
        subscription_logged=logged,
        extracted=more,
        naive=not had_offset,
    )


def _exact(
    rows: list[_Row | None],
    slow: list[tuple[int, int, bytes]],
    source: str,
    wanted: dict[str, str],
    secrets: SecretStore,
    tolerance_s: float,
    extract: bool,
    *,
    overlong: Mapping[int, int] | None = None,
) -> tuple[int, int]:
    """Run the exact path on the records of ``slow`` (position in ``rows``, line number, line);
    fill their rows in place. Returns (naive times, unreadable)."""
    naive = unreadable = 0
    buffers = []
    for _, line, raw in slow:
        buf = parse_jsonl(raw, source, wanted, line, overlong)
        naive += buf.naive_times
        unreadable += buf.unreadable
        buffers.append(buf.rows[0])
    cols = {n: list(v) for n, v in zip(COLUMNS, zip(*buffers, strict=True), strict=True)}
    logged = subscription_logged(cols)
    cols.update(verify_parsed(cols, secrets, tolerance_s=tolerance_s))
    for k, (i, _, _) in enumerate(slow):
        more = _extract(cols["body"][k]) if extract else None
        row = {n: cols[n][k] for n in _EXACT_NAMES}
        rows[i] = _Row(**row, subscription_logged=logged[k], extracted=more, naive=False)
    return naive, unreadable
