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

from audit.spec import CLOCK_TOLERANCE_S, SIGNATURE_HEX_LEN, SIGNATURE_PREFIX

__all__ = ["VERDICTS", "Verification", "check_signature_header", "sign", "verify"]

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

_HEX64 = re.compile(r"[0-9a-fA-F]{%d}" % SIGNATURE_HEX_LEN)
_DIGITS = re.compile(r"[0-9]+")


def _key(secret: bytes | str) -> bytes:
    return secret.encode("utf-8") if isinstance(secret, str) else secret


def _ts_bytes(timestamp: int | str) -> bytes:
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


def check_signature_header(value: str | None) -> bytes | None | str:
    """Decode a signature header to digest bytes.

    Returns the 32 digest bytes, None when the header is missing, or a one-line reason string
    when it is malformed.
    """
    if value is None:
        return None
    if not value.startswith(SIGNATURE_PREFIX):
        return "signature header lacks the 'sha256=' prefix"
    hexpart = value[len(SIGNATURE_PREFIX) :]
    if not _HEX64.fullmatch(hexpart):
        return f"signature is not {SIGNATURE_HEX_LEN} hex characters after 'sha256='"
    return bytes.fromhex(hexpart)


def parse_timestamp_header(value: str | None) -> int | None:
    """The timestamp header as an int, or None unless it is a plain ASCII-digit integer."""
    if value is None or not _DIGITS.fullmatch(value):
        return None
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
    if ts is None:
        why = "no timestamp header" if timestamp is None else "timestamp is not a plain integer"
        return Verification("malformed_timestamp", None, None, None, why)
    skew = _seconds(now) - ts
    candidates = [secrets] if isinstance(secrets, bytes | str) else list(secrets)
    if not candidates:
        stale = abs(skew) > tolerance_s
        verdict = "stale_timestamp" if stale else "no_secret"
        return Verification(verdict, None, skew, None, "no secret to check against")
    matched = None
    for i, secret in enumerate(candidates):
        if hmac.compare_digest(digest(secret, ts, body), sig):
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
