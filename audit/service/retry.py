"""When the service client repeats a request, and how long it waits first (spec section 7).

* 429 and 5xx answers are retried; :data:`audit.spec.TERMINAL_STATUSES` are not, and any other
  status is unexpected (:func:`is_retryable_status`).
* Connection failures are retried, except that a request which may have reached the service
  (:data:`MAYBE_SENT_ERRORS`) is not repeated when repeating it could create something twice;
  one that cannot have reached it (:data:`NOT_SENT_ERRORS`) is always safe to repeat.
* Waits are bounded exponential backoff with full jitter (:meth:`RetryPolicy.backoff_s`),
  unless the service sent a ``Retry-After`` (:func:`parse_retry_after`), which is honoured up
  to :attr:`RetryPolicy.max_retry_after_s`.
"""

from __future__ import annotations

import email.utils
import math
import random
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import httpx

from audit.errors import InputError

__all__ = [
    "MAYBE_SENT_ERRORS",
    "NOT_SENT_ERRORS",
    "RetryPolicy",
    "is_retryable_status",
    "parse_retry_after",
]

#: Failures where the request cannot have reached the service: always safe to repeat.
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
#: Failures after the request may have reached the service.
MAYBE_SENT_ERRORS = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)

_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before repeating a request that failed in a retryable way.

    Parameters
    ----------
    max_attempts
        Attempts in all, the first one included (1 disables retries).
    base_delay_s, max_delay_s
        Retry ``n`` (1 for the second attempt) waits a uniformly random time in
        ``[0, min(max_delay_s, base_delay_s * 2 ** (n - 1))]`` ("full jitter").
    max_retry_after_s
        A ``Retry-After`` is honoured as given, up to this many seconds; a longer one ends the
        retries at once (the error says how long the service asked to wait).

    Examples
    --------
    >>> RetryPolicy(max_attempts=3).backoff_cap_s(2)
    1.0
    """

    max_attempts: int = 4
    base_delay_s: float = 0.5
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0

    def __post_init__(self) -> None:
        # A dataclass checks no types, and callers without type checking may pass anything.
        if not _is_count(self.max_attempts):
            raise InputError("max_attempts must be an integer of at least 1")
        for name in ("base_delay_s", "max_delay_s", "max_retry_after_s"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
                raise InputError(f"{name} must be a finite number of seconds, at least 0")

    def backoff_cap_s(self, retry: int) -> float:
        """Upper bound of the jittered wait before retry number ``retry`` (1-based)."""
        return min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))

    def backoff_s(self, retry: int, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (1-based), drawn from ``rng`` (full jitter).

        >>> RetryPolicy().backoff_s(1, random.Random(0)) <= 0.5
        True
        """
        return rng.uniform(0.0, self.backoff_cap_s(retry))


def _is_count(value: object) -> bool:
    """An integer of at least 1."""
    return isinstance(value, int) and value >= 1


def is_retryable_status(status: int) -> bool:
    """Whether an answer with this status is worth repeating: 429 and 5xx.

    A status that is neither this nor one of :data:`audit.spec.TERMINAL_STATUSES` is unexpected.

    >>> is_retryable_status(503), is_retryable_status(429), is_retryable_status(409)
    (True, True, False)
    """
    return status == 429 or 500 <= status < 600


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header, or None when absent or unusable.

    Accepts delay-seconds (``"120"``) or an HTTP date (RFC 9110, e.g.
    ``"Wed, 21 Oct 2015 07:28:00 GMT"``); a date in the past means 0. Never raises: a number
    too large for a float (hundreds of digits) or a date beyond the calendar means "forever"
    (``math.inf``), which is longer than any policy waits.

    Examples
    --------
    >>> t = datetime(2015, 10, 21, 7, 27, 30, tzinfo=UTC)
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", t), parse_retry_after("2", t)
    (30.0, 2.0)
    """
    if value is None:
        return None
    text = value.strip()
    if _DIGITS.fullmatch(text):
        return float(text) if len(text) <= 15 else math.inf
    try:
        when = email.utils.parsedate_to_datetime(text)
        if when.tzinfo is None:  # "-0000" zones: RFC 9110 dates are UTC
            when = when.replace(tzinfo=UTC)
        return max(0.0, (when - now).total_seconds())
    except OverflowError:
        return math.inf
    except (TypeError, ValueError, IndexError, AttributeError):
        return None
