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

import pandas as pd

from audit.secrets import SecretStore, SigningSecret
from audit.spec import CLOCK_TOLERANCE_S, SIGNATURE_HEX_LEN, SIGNATURE_PREFIX

__all__ = [
    "VERDICTS",
    "Verification",
    "check_signature_header",
    "sign",
    "verify",
    "verify_frame",
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


def _ordered_candidates(
    store: SecretStore, subscription_id: str | None, t_ns: int
) -> list[SigningSecret]:
    """Candidate secrets, those current at ``t_ns`` first (the common case matches at once)."""
    if subscription_id is None:
        pool = store.all_secrets()
    else:
        pool = list(store.by_subscription.get(subscription_id, ()))
    return sorted(pool, key=lambda s: not s.current_at(t_ns))


def verify_frame(
    deliveries: pd.DataFrame, secrets: SecretStore, *, tolerance_s: float = CLOCK_TOLERANCE_S
) -> pd.DataFrame:
    """Verify every loaded delivery as of its own ``received_at``, across secret rotations.

    The checks run in this order and the first that fails gives the verdict:
    ``missing_signature``, ``malformed_signature``, ``malformed_timestamp``, ``stale_timestamp``
    (``|received_at - timestamp| > tolerance_s``), ``no_secret``; then ``valid`` (matches the
    secret current at receipt), ``rotated_secret`` (matches only a secret replaced before
    receipt) or ``signature_mismatch``. Rows already ``unreadable`` keep that verdict.

    A row without ``subscription_id`` is checked against every subscription's secrets; the
    subscription whose secret matches fills it in.

    Parameters
    ----------
    deliveries
        The frame from :func:`audit.load.load_captures`.
    secrets
        The store from :func:`audit.secrets.read_secrets`.
    tolerance_s
        Allowed clock difference between receipt and the timestamp header (300 s published).

    Returns
    -------
    pandas.DataFrame
        A copy with ``verdict``, ``detail``, ``hmac_ok`` (nullable boolean: any known secret of
        the subscription matches, whatever the timestamp checks said), ``skew_s`` (received_at
        minus the timestamp header, seconds), ``matched_secret`` (``<subscription>#<n>``, the
        n-th issued secret; never the value) and ``subscription_id`` filled where inferred.

    Examples
    --------
    >>> verified = verify_frame(load_captures("log.jsonl").deliveries, store)  # doctest: +SKIP
    >>> verified["verdict"].value_counts()  # doctest: +SKIP
    """
    tol_ns = round(tolerance_s * 1e9)
    n = len(deliveries)
    verdicts: list = [None] * n
    details: list = [None] * n
    hmac_ok: list = [None] * n
    skews: list = [None] * n
    matched_ids: list = [None] * n
    subs = deliveries["subscription_id"].tolist()
    received = deliveries["received_at"].to_numpy(dtype="datetime64[ns]").view("int64").tolist()
    rows = zip(
        deliveries["verdict"].tolist(),
        deliveries["detail"].tolist(),
        deliveries["signature"].tolist(),
        deliveries["timestamp_header"].tolist(),
        deliveries["body"].tolist(),
        strict=True,
    )
    for i, (prior, prior_detail, signature, timestamp, body) in enumerate(rows):
        if prior == "unreadable":
            verdicts[i], details[i] = prior, prior_detail
            continue
        sig = check_signature_header(None if pd.isna(signature) else signature)
        if sig is None:
            verdicts[i], details[i] = "missing_signature", "no signature header"
            continue
        if isinstance(sig, str):
            verdicts[i], details[i] = "malformed_signature", sig
            continue
        ts = parse_timestamp_header(None if pd.isna(timestamp) else timestamp)
        if ts is None:
            verdicts[i] = "malformed_timestamp"
            details[i] = (
                "no timestamp header" if pd.isna(timestamp) else "timestamp is not a plain integer"
            )
            continue
        t_ns = received[i]
        diff_ns = t_ns - ts * 1_000_000_000
        skews[i] = diff_ns / 1e9
        sub = None if pd.isna(subs[i]) else subs[i]
        message = str(ts).encode("ascii") + b"." + body
        match = None
        for cand in _ordered_candidates(secrets, sub, t_ns):
            if hmac.compare_digest(hmac.digest(cand.key, message, hashlib.sha256), sig):
                match = cand
                break
        has_candidates = bool(secrets.by_subscription.get(sub)) if sub else len(secrets) > 0
        if has_candidates:
            hmac_ok[i] = match is not None
        if match is not None:
            matched_ids[i] = f"{match.subscription_id}#{match.index + 1}"
            if sub is None:
                subs[i] = match.subscription_id
        if abs(diff_ns) > tol_ns:
            verdicts[i] = "stale_timestamp"
            details[i] = f"timestamp differs from receipt by {diff_ns / 1e9:+.3f} s"
        elif not has_candidates:
            verdicts[i] = "no_secret"
            details[i] = f"no secret known for subscription {sub}"
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
    out = deliveries.copy()
    out["subscription_id"] = pd.Series(subs, index=out.index, dtype="str")
    out["verdict"] = pd.Series(verdicts, index=out.index, dtype="str")
    out["detail"] = pd.Series(details, index=out.index, dtype="str")
    out["hmac_ok"] = pd.Series(hmac_ok, index=out.index, dtype="boolean")
    out["skew_s"] = pd.Series(skews, index=out.index, dtype="Float64")
    out["matched_secret"] = pd.Series(matched_ids, index=out.index, dtype="str")
    return out
