"""Signing and verifying one delivery (spec section 5.2).

The signature is ``sha256=`` + hex(HMAC-SHA256(secret, timestamp + "." + raw body)). :func:`sign`
and :func:`verify` are pure: the reference time and the tolerance are arguments, so a production
receiver can call :func:`verify` with its own clock, and an audit with the stored receipt time.
The verdict rules themselves live in :mod:`audit.ingest.verdict_rules`; :func:`verify` and
:func:`verify_columns` (every stored delivery) both call them.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from audit.ingest.formats.base import Columns
from audit.ingest.secrets import SecretStore, SigningSecret
from audit.ingest.verdict_rules import (
    VERDICTS,
    check_signature_header,
    decide,
    parse_timestamp_header,
)
from audit.spec import CLOCK_TOLERANCE_S, SIGNATURE_PREFIX

__all__ = [
    "VERDICTS",
    "Verification",
    "check_signature_header",
    "parse_timestamp_header",
    "reference_ns",
    "sign",
    "subscription_logged",
    "verify",
    "verify_columns",
    "verify_parsed",
]


def _key(secret: bytes | str) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _ts_bytes(timestamp: int | str) -> bytes:
    # A header string is signed as received; an int is written in decimal.
    return str(timestamp).encode("ascii")


def digest(secret: bytes | str, timestamp: int | str, body: bytes) -> bytes:
    """The raw 32-byte HMAC-SHA256 digest of ``timestamp + b"." + body``."""
    return hmac.digest(_key(secret), _ts_bytes(timestamp) + b"." + body, hashlib.sha256)


def sign(secret: bytes | str, timestamp: int | str, body: bytes) -> str:
    """Return the signature header value for a delivery.

    >>> sign("s3cret", 1700000000, b'{"id":"evt_1"}')[:15]
    'sha256=8e6f5c9e'
    """
    return SIGNATURE_PREFIX + digest(secret, timestamp, body).hex()


@dataclass(frozen=True)
class Verification:
    """Outcome of :func:`verify` (the rules of :func:`audit.ingest.verdict_rules.decide`).

    Attributes
    ----------
    verdict : str
        One of :data:`VERDICTS` (never ``unreadable``; ``rotated_secret`` only when the
        candidates are :class:`~audit.ingest.secrets.SigningSecret` with their validity).
    hmac_ok : bool or None
        Whether a secret matched, whatever the timestamp check said; None if not computed.
    skew_s : float or None
        Reference time minus the timestamp header, in seconds.
    matched : int or None
        Index, in ``secrets``, of the secret that matched.
    detail : str
        One-line reason ("" when valid): the ``detail`` a stored delivery gets.
    """

    verdict: str
    hmac_ok: bool | None
    skew_s: float | None
    matched: int | None
    detail: str

    @property
    def ok(self) -> bool:
        """True when the request should be accepted."""
        return self.verdict == "valid"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def reference_ns(t: float | int | datetime) -> int:
    """A reference time as ns since the epoch: an aware datetime (exact), or Unix seconds (an
    int exactly, a float rounded to the ns as the capture loader reads ``received_at``).

    >>> reference_ns(1790812800), reference_ns(1790812800.5)
    (1790812800000000000, 1790812800500000000)
    """
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise ValueError("reference time must be timezone-aware")
        return (t - _EPOCH) // timedelta(microseconds=1) * 1000
    if isinstance(t, float):
        if not math.isfinite(t):
            raise ValueError("reference time must be finite")
        return round(t * 1e9)
    return int(t) * 1_000_000_000


def verify(
    body: bytes,
    signature: str | None,
    timestamp: str | None,
    secrets: bytes | str | SigningSecret | Iterable[bytes | str | SigningSecret],
    *,
    now: float | int | datetime,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> Verification:
    """Verify one request against one or more candidate secrets.

    The rules are :func:`audit.ingest.verdict_rules.decide`, the ones every stored delivery is
    judged by: a receiver that calls this with the receipt time gets the verdict, ``hmac_ok``,
    ``skew_s`` and reason that ``audit verify`` gives for the captured request.

    Parameters
    ----------
    body
        The raw request body bytes, exactly as received (never re-serialised JSON).
    signature, timestamp
        The signature and timestamp header values, or None when the header is missing.
    secrets
        One secret, or the candidates (e.g. the current and the previous one during a rotation).
        A plain secret (bytes or str) is current forever; a
        :class:`~audit.ingest.secrets.SigningSecret` (from a secrets file) is current over its
        validity, so a match with a replaced one is ``rotated_secret``.
    now
        Reference time: the receiver's clock (a live receiver) or the stored receipt time (audit).
        An aware datetime, or Unix seconds.
    tolerance_s
        Allowed ``|now - timestamp|``; exactly the tolerance passes.

    Examples
    --------
    >>> body = b'{"id":"evt_1"}'
    >>> verify(body, sign("k", 1700000000, body), "1700000000", "k", now=1700000100).verdict
    'valid'
    >>> verify(body, sign("k", 1700000000, body), "1700000000", "k", now=1700000301).detail
    'timestamp differs from receipt by +301.000 s'
    """
    items = [secrets] if isinstance(secrets, bytes | str | SigningSecret) else list(secrets)
    candidates = [
        s if isinstance(s, SigningSecret) else SigningSecret("", i, None, None, _key(s))
        for i, s in enumerate(items)
    ]
    got = decide(
        signature,
        timestamp,
        body,
        reference_ns(now),
        candidates,
        tolerance_ns=round(tolerance_s * 1e9),
    )
    return Verification(got.verdict, got.hmac_ok, got.skew_s, got.matched, got.detail or "")


@dataclass
class VerifiedColumns:
    """Per-row results of :func:`verify_columns` (plain lists, one entry per row)."""

    verdict: list[str | None]
    detail: list[str | None]
    hmac_ok: list[bool | None]
    skew_s: list[float | None]
    matched_secret: list[str | None]
    subscription_id: list[str | None]


def verify_columns(
    signatures: list[Any],
    timestamps: list[Any],
    bodies: list[Any],
    received_ns: list[Any],
    subscription_ids: list[Any],
    prior_verdicts: list[Any],
    prior_details: list[Any],
    secrets: SecretStore,
    *,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> VerifiedColumns:
    """Verify many requests, each as of its own receipt time, across secret rotations.

    Each row is judged by :func:`audit.ingest.verdict_rules.decide` (the order of the checks,
    the verdicts and the reasons are there), against its subscription's secrets as of its
    receipt time. Rows whose prior verdict is ``unreadable`` keep it.
    A prior ``detail`` on a readable row (an odd unrelated field the loader ignored) is kept
    after the verdict's own detail, joined by ``"; "``.
    A row without a subscription id is checked against every subscription's secrets, and the
    subscription whose secret matched fills it in. Missing values are None (or NaN, or NaT's
    int64 sentinel for ``received_ns``).

    This is the exact path for stored deliveries; the frame-level entry
    points (:func:`audit.ingest.verification.verify_frame`,
    :func:`audit.ingest.load.load_captures` with
    ``secrets=``) call it.
    """
    tol_ns = round(tolerance_s * 1e9)
    all_secrets = tuple(secrets.all_secrets())
    by_sub = secrets.by_subscription
    n = len(bodies)
    verdicts: list[str | None] = list(prior_verdicts)
    details: list[str | None] = list(prior_details)
    hmac_ok: list[bool | None] = [None] * n
    skews: list[float | None] = [None] * n
    matched_ids: list[str | None] = [None] * n
    subs = [s if type(s) is str else None for s in subscription_ids]
    notes = {i: d for i, d in enumerate(prior_details) if type(d) is str and d}
    for i in range(n):
        if verdicts[i] == "unreadable":
            notes.pop(i, None)
            continue
        signature, timestamp, sub = signatures[i], timestamps[i], subs[i]
        candidates = all_secrets if sub is None else by_sub.get(sub, ())
        got = decide(
            signature if type(signature) is str else None,
            timestamp if type(timestamp) is str else None,
            bodies[i],
            received_ns[i],
            candidates,
            tolerance_ns=tol_ns,
        )
        verdicts[i], details[i], hmac_ok[i], skews[i] = (
            got.verdict,
            got.detail,
            got.hmac_ok,
            got.skew_s,
        )
        if got.matched is not None:
            match = candidates[got.matched]
            matched_ids[i] = match.label
            if sub is None:
                subs[i] = match.subscription_id
    for i, note in notes.items():
        new = details[i]
        details[i] = note if new is None or note.startswith(new) else f"{new}; {note}"
    return VerifiedColumns(verdicts, details, hmac_ok, skews, matched_ids, subs)


def verify_parsed(
    columns: Columns, secrets: SecretStore, *, tolerance_s: float = CLOCK_TOLERANCE_S
) -> Columns:
    """The verification columns (``hmac_ok``, ``skew_s``, ``matched_secret``, and the final
    ``verdict`` and ``detail``) of a parser's columns (:meth:`Buffer.columns`), in one call.

    The one place the loaders, the store and the fast path's exact fallback turn parsed
    records into verdicts.
    """
    return dict(
        vars(
            verify_columns(
                columns["signature"],
                columns["timestamp_header"],
                columns["body"],
                columns["received_at"],
                columns["subscription_id"],
                columns["verdict"],
                columns["detail"],
                secrets,
                tolerance_s=tolerance_s,
            )
        )
    )


def subscription_logged(columns: Columns) -> list[bool | None]:
    """Whether each record named its subscription (None for unreadable records)."""
    return [
        None if v == "unreadable" else s is not None
        for s, v in zip(columns["subscription_id"], columns["verdict"], strict=True)
    ]
