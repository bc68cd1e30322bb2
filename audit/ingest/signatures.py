"""Signing and verifying one delivery (spec section 5.2).

The signature is ``sha256=`` + hex(HMAC-SHA256(secret, timestamp + "." + raw body)). These two
functions are pure: the reference time and the tolerance are arguments, so a production receiver
can call :func:`verify` with its own clock, and an audit with the stored receipt time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from audit.ingest.formats.base import Columns
from audit.ingest.secrets import SecretStore, SigningSecret
from audit.spec import CLOCK_TOLERANCE_S, SIGNATURE_HEX_LEN, SIGNATURE_PREFIX

__all__ = [
    "VERDICTS",
    "Verification",
    "check_signature_header",
    "sign",
    "subscription_logged",
    "verify",
    "verify_columns",
    "verify_parsed",
]

#: Every verdict, in the order the checks run ("unreadable" comes from loading).
VERDICTS = (
    "unreadable",
    "missing_signature",
    "malformed_signature",
    "malformed_timestamp",
    "stale_timestamp",
    "no_secret",
    "valid",
    "rotated_secret",
    "signature_mismatch",
)

_HEX64 = re.compile(f"[0-9a-fA-F]{{{SIGNATURE_HEX_LEN}}}")


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


def check_signature_header(value: str | None) -> bytes | str | None:
    """Decode a signature header to digest bytes.

    Returns the 32 digest bytes, None when the header is missing, or a one-line reason string
    when it is malformed.
    """
    if value is None:
        return None
    if not value.startswith(SIGNATURE_PREFIX):
        return "signature header lacks the 'sha256=' prefix"
    hexpart = value[len(SIGNATURE_PREFIX) :]
    if len(hexpart) == SIGNATURE_HEX_LEN and _HEX64.fullmatch(hexpart):
        return bytes.fromhex(hexpart)
    return f"signature is not {SIGNATURE_HEX_LEN} hex characters after 'sha256='"


def parse_timestamp_header(value: str | None) -> int | None:
    """The timestamp header as an int, or None unless it is a plain ASCII-digit integer."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 12:
        return None  # more than 12 digits is past the year 33658: not a real timestamp
    return int(value)


@dataclass(frozen=True)
class Verification:
    """Outcome of :func:`verify`.

    Attributes
    ----------
    verdict : str
        One of :data:`VERDICTS` (never ``unreadable`` or ``rotated_secret`` here).
    hmac_ok : bool or None
        Whether a secret matched, whatever the timestamp check said; None if not computed.
    skew_s : float or None
        Reference time minus the timestamp header, in seconds.
    matched : int or None
        Index, in ``secrets``, of the secret that matched.
    detail : str
        One-line explanation.
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


def _seconds(t: float | int | datetime) -> float:
    if isinstance(t, datetime):
        if t.tzinfo is None:
            raise ValueError("reference time must be timezone-aware")
        return t.timestamp()
    return float(t)


def verify(
    body: bytes,
    signature: str | None,
    timestamp: str | None,
    secrets: bytes | str | Iterable[bytes | str],
    *,
    now: float | int | datetime,
    tolerance_s: float = CLOCK_TOLERANCE_S,
) -> Verification:
    """Verify one request against one or more candidate secrets.

    Parameters
    ----------
    body
        The raw request body bytes, exactly as received (never re-serialised JSON).
    signature, timestamp
        The signature and timestamp header values, or None when the header is missing.
    secrets
        One secret, or the candidates (e.g. the current and the previous one during a rotation).
    now
        Reference time: the receiver's clock (a live receiver) or the stored receipt time (audit).
    tolerance_s
        Allowed ``|now - timestamp|``; exactly the tolerance passes.

    Examples
    --------
    >>> body = b'{"id":"evt_1"}'
    >>> verify(body, sign("k", 1700000000, body), "1700000000", "k", now=1700000100).verdict
    'valid'
    >>> verify(body, sign("k", 1700000000, body), "1700000000", "k", now=1700000301).verdict
    'stale_timestamp'
    """
    sig = check_signature_header(signature)
    if sig is None:
        return Verification("missing_signature", None, None, None, "no signature header")
    if isinstance(sig, str):
        return Verification("malformed_signature", None, None, None, sig)
    ts = parse_timestamp_header(timestamp)
    if ts is None or timestamp is None:  # (no timestamp gives no ts)
        why = (
            "no timestamp header"
            if timestamp is None
            else "timestamp is not a plain integer of at most 12 digits"
        )
        return Verification("malformed_timestamp", None, None, None, why)
    skew = _seconds(now) - ts
    candidates = [secrets] if isinstance(secrets, bytes | str) else list(secrets)
    if not candidates:
        stale = abs(skew) > tolerance_s
        verdict = "stale_timestamp" if stale else "no_secret"
        return Verification(verdict, None, skew, None, "no secret to check against")
    matched = None
    for i, secret in enumerate(candidates):
        if hmac.compare_digest(digest(secret, timestamp, body), sig):
            matched = i
            break
    hmac_ok = matched is not None
    if abs(skew) > tolerance_s:
        return Verification(
            "stale_timestamp", hmac_ok, skew, matched, f"timestamp is {skew:+.0f} s from receipt"
        )
    if not hmac_ok:
        return Verification("signature_mismatch", False, skew, None, "no secret matches")
    return Verification("valid", True, skew, matched, "")


def _match(
    candidates: tuple[SigningSecret, ...], t_ns: int, message: bytes, sig: bytes
) -> SigningSecret | None:
    """The candidate whose HMAC equals ``sig``; the one current at ``t_ns`` is tried first."""
    current = None
    for cand in candidates:
        if cand.current_at(t_ns):
            current = cand
            break
    if current is not None and hmac.compare_digest(
        hmac.digest(current.key, message, hashlib.sha256), sig
    ):
        return current
    for cand in candidates:
        if cand is not current and hmac.compare_digest(
            hmac.digest(cand.key, message, hashlib.sha256), sig
        ):
            return cand
    return None


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

    The checks run in this order and the first that fails gives the verdict:
    ``missing_signature``, ``malformed_signature``, ``malformed_timestamp``, ``stale_timestamp``
    (``|received - timestamp| > tolerance_s``), ``no_secret``; then ``valid`` (matches the
    secret current at receipt), ``rotated_secret`` (matches only a secret replaced before
    receipt) or ``signature_mismatch``. Rows whose prior verdict is ``unreadable`` keep it.
    A prior ``detail`` on a readable row (an odd unrelated field the loader ignored) is kept
    after the verdict's own detail, joined by ``"; "``.
    A row without a subscription id is checked against every subscription's secrets, and the
    subscription whose secret matched fills it in. Missing values are None (or NaN, or NaT's
    int64 sentinel for ``received_ns``).

    This is the one place verdicts are computed for stored deliveries; the frame-level entry
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
        signature = signatures[i]
        sig = check_signature_header(signature if type(signature) is str else None)
        if sig is None:
            verdicts[i], details[i] = "missing_signature", "no signature header"
            continue
        if isinstance(sig, str):
            verdicts[i], details[i] = "malformed_signature", sig
            continue
        timestamp = timestamps[i]
        ts = parse_timestamp_header(timestamp if type(timestamp) is str else None)
        if ts is None:
            verdicts[i] = "malformed_timestamp"
            details[i] = (
                "timestamp is not a plain integer of at most 12 digits"
                if type(timestamp) is str
                else "no timestamp header"
            )
            continue
        t_ns = received_ns[i]
        diff_ns = t_ns - ts * 1_000_000_000
        skews[i] = diff_ns / 1e9
        sub = subs[i]
        candidates = all_secrets if sub is None else by_sub.get(sub, ())
        match = None
        if candidates:
            # The header value itself is signed (digits only, so ASCII), not int(value).
            message = timestamp.encode("ascii") + b"." + bodies[i]
            match = _match(candidates, t_ns, message, sig)
            hmac_ok[i] = match is not None
        if match is not None:
            matched_ids[i] = match.label
            if sub is None:
                subs[i] = match.subscription_id
        if diff_ns > tol_ns or -diff_ns > tol_ns:
            verdicts[i] = "stale_timestamp"
            details[i] = f"timestamp differs from receipt by {diff_ns / 1e9:+.3f} s"
        elif not candidates:
            verdicts[i] = "no_secret"
            details[i] = f"no secret known for subscription {sub}" if sub else "no secret known"
        elif match is None:
            verdicts[i], details[i] = "signature_mismatch", "no known secret matches"
        elif match.current_at(t_ns):
            verdicts[i], details[i] = "valid", None
        elif match.replaced_before(t_ns):
            verdicts[i] = "rotated_secret"
            details[i] = f"matches secret {matched_ids[i]}, replaced before receipt"
        else:
            verdicts[i] = "signature_mismatch"
            details[i] = f"matches secret {matched_ids[i]}, not yet issued at receipt"
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
