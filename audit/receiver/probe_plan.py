"""What the probe sends: one ``webhook.test`` request per check, built just before it is sent.

Every request carries a ``webhook.test`` envelope whose ``data.incidentId`` starts with ``test_``
(spec 4.5: consumers acknowledge it and must not act on it), a fresh ``evt_`` id (except the
redelivery, which repeats an event on purpose) and a fresh delivery id, and is signed as spec
5.2 says unless the check breaks one rule on purpose. Building is pure: the clock reading, the
ids and the secrets are arguments.
"""

from __future__ import annotations

import json
import secrets as _random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from audit.errors import InputError
from audit.ingest.signatures import digest, sign
from audit.spec import CLOCK_TOLERANCE_S, DEFAULT_HEADER_PREFIX, TEST_EVENT, header_names

__all__ = ["CHECKS", "Check", "Prepared", "ProbeContext", "prepare", "select_checks"]

ACCEPT, REJECT = "2xx", "401"


@dataclass(frozen=True)
class Check:
    """One conformance check: its id, the finding id, what it sends and what passes."""

    id: str
    finding_id: str
    expected: str
    sends: str


#: Every check, in the order they run. ``within_timeout`` sends nothing of its own.
CHECKS: tuple[Check, ...] = (
    Check("valid_accepted", "PRB-01", ACCEPT, "a correctly signed request"),
    Check("uppercase_hex_accepted", "PRB-02", ACCEPT, "the signature hex in upper case"),
    Check(
        "unicode_body_accepted",
        "PRB-03",
        ACCEPT,
        "a body with non-ASCII text and an emoji, signed over its UTF-8 bytes",
    ),
    Check(
        "boundary_accepted",
        "PRB-04",
        ACCEPT,
        f"a timestamp {CLOCK_TOLERANCE_S - 1} s in the past",
    ),
    Check(
        "redelivery_accepted",
        "PRB-05",
        ACCEPT,
        "the valid request's event again, with a new delivery id and timestamp",
    ),
    Check("missing_signature_rejected", "PRB-06", REJECT, "no signature header"),
    Check("bad_prefix_rejected", "PRB-07", REJECT, "the hex digest without 'sha256='"),
    Check("short_hex_rejected", "PRB-08", REJECT, "63 hex characters after 'sha256='"),
    Check(
        "non_integer_timestamp_rejected",
        "PRB-09",
        REJECT,
        "the current time written as 1.7e9 (not an integer), signed with it",
    ),
    Check(
        "stale_past_rejected",
        "PRB-10",
        REJECT,
        f"a timestamp {CLOCK_TOLERANCE_S + 1} s in the past, correctly signed",
    ),
    Check(
        "stale_future_rejected",
        "PRB-11",
        REJECT,
        f"a timestamp {CLOCK_TOLERANCE_S + 1} s in the future, correctly signed",
    ),
    Check("wrong_secret_rejected", "PRB-12", REJECT, "signed with a random secret"),
    Check(
        "old_secret_rejected",
        "PRB-13",
        REJECT,
        "signed with the subscription's previous secret (skipped if it has none)",
    ),
    Check("tampered_body_rejected", "PRB-14", REJECT, "one body byte changed after signing"),
    Check(
        "reserialised_body_rejected",
        "PRB-15",
        REJECT,
        "the same JSON with other whitespace, with the signature of the original bytes",
    ),
    Check(
        "within_timeout", "PRB-16", "each answer within 5 s", "nothing more: judges every answer"
    ),
)
CHECK_IDS = tuple(c.id for c in CHECKS)
_BY_ID = {c.id: c for c in CHECKS}

#: Text with accents, a non-Latin script, a right-to-left word and an emoji outside the BMP.
UNICODE_NOTE = "Prüfung für Grüße – 検証 – اختبار – 🎣🐟"


def select_checks(only: Iterable[str] | None) -> list[Check]:
    """The checks to run, in run order; InputError naming the known ids for an unknown one,
    or for ``within_timeout`` alone (it would judge nothing and pass as a skip).

    Ids may also be given comma-separated (``["valid_accepted,within_timeout"]``).

    >>> [c.id for c in select_checks(["within_timeout", "valid_accepted"])]
    ['valid_accepted', 'within_timeout']
    """
    if only is None:
        return list(CHECKS)
    wanted = {part.strip() for item in only for part in item.split(",") if part.strip()}
    if not wanted:
        return list(CHECKS)
    unknown = sorted(wanted - set(CHECK_IDS))
    if unknown:
        raise InputError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECK_IDS)}")
    if wanted == {"within_timeout"}:  # it judges the other checks' answers: alone, nothing
        raise InputError(
            "within_timeout judges the answers of the other checks and sends nothing itself: "
            "add at least one more (e.g. --only valid_accepted,within_timeout)"
        )
    return [c for c in CHECKS if c.id in wanted]


@dataclass
class ProbeContext:
    """What the requests are built from. ``secret``/``previous`` are key bytes (never shown)."""

    secret: bytes = field(repr=False)
    previous: bytes | None = field(repr=False)
    header_prefix: str = DEFAULT_HEADER_PREFIX
    #: The event that ``valid_accepted`` sends and ``redelivery_accepted`` sends again.
    base_event: dict | None = None


@dataclass(frozen=True)
class Prepared:
    """One request ready to send (``body`` exact bytes), or ``skip`` with a reason."""

    check: Check
    headers: list[tuple[str, str]]
    body: bytes
    event_id: str | None
    delivery_id: str | None
    skip: str | None = None


def _compact(obj: dict) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _event(now: int, **data: str) -> dict:
    return {
        "id": f"evt_{uuid.uuid4()}",
        "event": TEST_EVENT,
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat().replace("+00:00", "Z"),
        "data": {"incidentId": f"test_{uuid.uuid4().hex[:16]}", **data},
    }


def _headers(
    prefix: str, timestamp: str, signature: str | None, delivery_id: str
) -> list[tuple[str, str]]:
    header_names(prefix)  # validates the prefix
    brand = prefix.strip().rstrip("-")
    out = [("Content-Type", "application/json")]
    if signature is not None:
        out.append((f"{brand}-Signature", signature))
    out += [
        (f"{brand}-Timestamp", timestamp),
        (f"{brand}-Event", TEST_EVENT),
        (f"{brand}-Delivery-Id", delivery_id),
    ]
    return out


def _tamper(body: bytes, incident_id: str) -> bytes:
    """Change one byte inside the incident id (the JSON stays valid)."""
    at = body.index(incident_id.encode("ascii")) + len("test_")
    old = body[at : at + 1]
    new = b"0" if old != b"0" else b"1"
    return body[:at] + new + body[at + 1 :]


def prepare(check: Check, ctx: ProbeContext, now: int) -> Prepared:
    """Build the request of ``check`` at clock reading ``now`` (Unix seconds).

    >>> ctx = ProbeContext(secret=b"k", previous=None)
    >>> p = prepare(CHECKS[0], ctx, 1700000000)
    >>> dict(p.headers)["X-PhishFort-Timestamp"], p.body.startswith(b'{"id":"evt_')
    ('1700000000', True)
    """
    key, prefix = ctx.secret, ctx.header_prefix
    delivery_id = str(uuid.uuid4())
    ts = now
    event = _event(now)
    cid = check.id
    if cid == "within_timeout":
        return Prepared(check, [], b"", None, None, skip="sends nothing")
    if cid in ("valid_accepted", "redelivery_accepted"):
        if ctx.base_event is None:
            ctx.base_event = event
        event = ctx.base_event
    elif cid == "unicode_body_accepted":
        event["data"]["note"] = UNICODE_NOTE
    elif cid == "boundary_accepted":
        ts = now - (CLOCK_TOLERANCE_S - 1)
    elif cid == "stale_past_rejected":
        ts = now - (CLOCK_TOLERANCE_S + 1)
    elif cid == "stale_future_rejected":
        ts = now + (CLOCK_TOLERANCE_S + 1)
    body = _compact(event)
    timestamp = str(ts)
    signature: str | None = sign(key, timestamp, body)
    if cid == "uppercase_hex_accepted":
        signature = "sha256=" + digest(key, timestamp, body).hex().upper()
    elif cid == "missing_signature_rejected":
        signature = None
    elif cid == "bad_prefix_rejected":
        signature = digest(key, timestamp, body).hex()
    elif cid == "short_hex_rejected":
        signature = sign(key, timestamp, body)[:-1]
    elif cid == "non_integer_timestamp_rejected":
        # Numerically the current time (so only the integer rule can reject it), signed with
        # exactly this header value.
        timestamp = f"{now / 1e9:.9f}e9"
        signature = sign(key, timestamp, body)
    elif cid == "wrong_secret_rejected":
        signature = sign(_random.token_bytes(32), timestamp, body)
    elif cid == "old_secret_rejected":
        if ctx.previous is None:
            return Prepared(
                check, [], b"", None, None, skip="the subscription has no previous secret"
            )
        signature = sign(ctx.previous, timestamp, body)
    elif cid == "tampered_body_rejected":
        body = _tamper(body, event["data"]["incidentId"])
    elif cid == "reserialised_body_rejected":
        body = json.dumps(event, indent=2, ensure_ascii=False).encode("utf-8")
    return Prepared(
        check, _headers(prefix, timestamp, signature, delivery_id), body, event["id"], delivery_id
    )


def check_by_id(check_id: str) -> Check:
    """The :class:`Check` with this id (KeyError otherwise)."""
    return _BY_ID[check_id]
