"""The verdict rules: how one signed request is judged (spec section 5.2), in one place.

:func:`decide` is the one function that turns a request's signature and timestamp headers, its
raw body, its reference time and its candidate secrets into a verdict, ``hmac_ok``, ``skew_s``,
the secret that matched and the reason. Every verifier calls it per record:
:func:`audit.ingest.signatures.verify` (one request, a receiver's clock),
:func:`audit.ingest.signatures.verify_columns` (the exact path: stored deliveries, each as of its
receipt time, across rotations) and :mod:`audit.ingest.fast` (the fast path, which keeps the
records it judges ``valid`` and passes pre-keyed HMAC states as ``mac``).

The checks run in this order and the first that fails gives the verdict: ``missing_signature``,
``malformed_signature``, ``malformed_timestamp``, ``stale_timestamp`` (``|reference -
timestamp| > tolerance``; exactly the tolerance passes), ``no_secret``; then ``valid`` (matches
the secret current at the reference time), ``rotated_secret`` (matches only a secret replaced
before it) or ``signature_mismatch`` (no match, or a match with a secret not yet issued).
``hmac_ok`` is computed whenever there are candidates, whatever the timestamp checks said.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Sequence
from typing import NamedTuple

from audit.ingest.secrets import SigningSecret
from audit.spec import SIGNATURE_HEX_LEN, SIGNATURE_PREFIX

__all__ = [
    "MAX_TIMESTAMP_DIGITS",
    "VERDICTS",
    "Mac",
    "Outcome",
    "check_signature_header",
    "decide",
    "parse_timestamp_header",
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

#: A timestamp header of more digits is past the year 33658: not a real timestamp.
MAX_TIMESTAMP_DIGITS = 12

_PREFIX_LEN = len(SIGNATURE_PREFIX)
_DIGEST_BYTES = SIGNATURE_HEX_LEN // 2

#: The HMAC-SHA256 digest of a message under the candidate at an index (the fast path passes
#: one that starts from pre-keyed states; the default keys ``hmac.digest`` each time).
Mac = Callable[[int, bytes], bytes]


def check_signature_header(value: str | None) -> bytes | str | None:
    """Decode a signature header to digest bytes.

    Returns the 32 digest bytes, None when the header is missing, or a one-line reason string
    when it is malformed (hex case does not matter).

    >>> check_signature_header("sha256=" + "0A" * 32)[:2]
    b'\\n\\n'
    >>> check_signature_header("sha256=0a")
    "signature is not 64 hex characters after 'sha256='"
    """
    if value is None:
        return None
    if not value.startswith(SIGNATURE_PREFIX):
        return "signature header lacks the 'sha256=' prefix"
    hexpart = value[_PREFIX_LEN:]
    if len(hexpart) == SIGNATURE_HEX_LEN and hexpart.isascii():
        try:
            digest = bytes.fromhex(hexpart)
        except ValueError:
            digest = b""
        if len(digest) == _DIGEST_BYTES:  # fromhex skips whitespace: 64 characters, 32 bytes
            return digest
    return f"signature is not {SIGNATURE_HEX_LEN} hex characters after 'sha256='"


def parse_timestamp_header(value: str | None) -> int | None:
    """The timestamp header as an int, or None unless it is a plain ASCII-digit integer of at
    most :data:`MAX_TIMESTAMP_DIGITS` digits (leading zeros allowed; no sign, space or point).

    >>> parse_timestamp_header("001790812800"), parse_timestamp_header("+1790812800")
    (1790812800, None)
    """
    if value is None or not (value.isascii() and value.isdigit()):
        return None
    if len(value) > MAX_TIMESTAMP_DIGITS:
        return None
    return int(value)


class Outcome(NamedTuple):  # a NamedTuple: built once per record, cheaper than a dataclass
    """What :func:`decide` gives for one request.

    Attributes
    ----------
    verdict : str
        One of :data:`VERDICTS` (never ``unreadable``).
    detail : str or None
        The reason, in one line; None for ``valid``.
    hmac_ok : bool or None
        Whether a candidate matched, whatever the timestamp checks said; None when not computed
        (a header check failed, or there was no candidate).
    skew_s : float or None
        Reference time minus the timestamp header, in seconds; None before the timestamp is read.
    matched : int or None
        Index, in the candidates, of the secret that matched.
    """

    verdict: str
    detail: str | None
    hmac_ok: bool | None = None
    skew_s: float | None = None
    matched: int | None = None


def decide(
    signature: str | None,
    timestamp: str | None,
    body: bytes,
    reference_ns: int,
    candidates: Sequence[SigningSecret],
    *,
    tolerance_ns: int,
    mac: Mac | None = None,
) -> Outcome:
    """Judge one request.

    Parameters
    ----------
    signature, timestamp
        The signature and timestamp header values as received, None when missing.
    body
        The raw body bytes, exactly as received.
    reference_ns
        The reference time (receipt time, or a receiver's clock), ns since the epoch.
    candidates
        The secrets to try, with their validity: the one current at ``reference_ns`` is tried
        first, then the others in order (a receiver's plain secrets are current forever).
    tolerance_ns
        The allowed ``|reference - timestamp|``, ns; exactly the tolerance passes.
    mac
        The digest of a message under ``candidates[i]`` (default: ``hmac.digest``).

    Examples
    --------
    >>> decide(None, "1", b"", 0, (), tolerance_ns=0)
    Outcome(verdict='missing_signature', detail='no signature header', hmac_ok=None, \
skew_s=None, matched=None)
    """
    sig = check_signature_header(signature)
    if sig is None:
        return Outcome("missing_signature", "no signature header")
    if isinstance(sig, str):
        return Outcome("malformed_signature", sig)
    ts = parse_timestamp_header(timestamp)
    if ts is None or timestamp is None:  # (no header gives no ts: mypy needs both)
        if timestamp is None:
            return Outcome("malformed_timestamp", "no timestamp header")
        why = f"timestamp is not a plain integer of at most {MAX_TIMESTAMP_DIGITS} digits"
        return Outcome("malformed_timestamp", why)
    diff_ns = reference_ns - ts * 1_000_000_000
    skew = diff_ns / 1e9
    matched = hmac_ok = None
    if candidates:
        # The header value itself is signed (ASCII digits, leading zeros kept), not int(value).
        message = timestamp.encode("ascii") + b"." + body
        matched = _match(candidates, reference_ns, message, sig, mac)
        hmac_ok = matched is not None
    if diff_ns > tolerance_ns or -diff_ns > tolerance_ns:
        why = f"timestamp differs from receipt by {skew:+.3f} s"
        return Outcome("stale_timestamp", why, hmac_ok, skew, matched)
    if matched is None:
        if not candidates:
            return Outcome("no_secret", "no secret known", None, skew)
        return Outcome("signature_mismatch", "no known secret matches", False, skew)
    secret = candidates[matched]
    if secret.current_at(reference_ns):
        return Outcome("valid", None, True, skew, matched)
    if secret.replaced_before(reference_ns):
        why = f"matches secret {secret.label}, replaced before receipt"
        return Outcome("rotated_secret", why, True, skew, matched)
    why = f"matches secret {secret.label}, not yet issued at receipt"
    return Outcome("signature_mismatch", why, True, skew, matched)


def _match(
    candidates: Sequence[SigningSecret], t_ns: int, message: bytes, sig: bytes, mac: Mac | None
) -> int | None:
    """The index of the candidate whose HMAC equals ``sig``; the first one current at ``t_ns``
    is tried first, then the others in order."""
    current = None
    for i, cand in enumerate(candidates):
        if cand.current_at(t_ns):
            current = i
            break
    if current is not None and _equal(candidates, current, message, sig, mac):
        return current
    for i in range(len(candidates)):
        if i != current and _equal(candidates, i, message, sig, mac):
            return i
    return None


def _equal(
    candidates: Sequence[SigningSecret], i: int, message: bytes, sig: bytes, mac: Mac | None
) -> bool:
    """Whether the HMAC of ``message`` under ``candidates[i]`` is ``sig`` (constant time)."""
    digest = (
        hmac.digest(candidates[i].key, message, hashlib.sha256) if mac is None else mac(i, message)
    )
    return hmac.compare_digest(digest, sig)
