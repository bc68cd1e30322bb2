"""The service's published facts, as constants (source: the webhook spec, sections 2-8).

Nothing here is configuration: each value is quoted from the interface specification so that
every module reads the same number from one place.
"""

from __future__ import annotations

import re
from typing import Final

from audit.errors import ParameterError

#: Brand part of the delivery header names ("X-Service-..." in the spec's generic text).
DEFAULT_HEADER_PREFIX: Final = "X-PhishFort"

#: Incident event types (section 6), excluding the synthetic test event.
INCIDENT_EVENTS: Final = (
    "incident.created",
    "incident.status_changed",
    "incident.history_created",
    "incident.takedown_updated",
    "incident.action_required",
)
TEST_EVENT: Final = "webhook.test"
#: Test incidents' ids start with this (``webhook.test`` payloads use ``test_...``; section 4.5).
TEST_INCIDENT_PREFIX: Final = "test_"
EVENTS: Final = (*INCIDENT_EVENTS, TEST_EVENT)

#: Incident status values (section 3.1).
STATUSES: Final = (
    "pending_review",
    "case_building",
    "approval_required",
    "takedown_ready",
    "pre_weaponised",
    "blocklisted",
    "takedown_in_progress",
    "takedown_success",
    "takedown_attempt_failed",
    "action_required",
    "closed",
)
#: Statuses in which the incident waits on the client.
CLIENT_WAIT_STATUSES: Final = ("approval_required", "action_required")

INCIDENT_CLASSES: Final = ("phishing", "malware", "scam", "infringement", "brandabuse", "other")
SOURCES: Final = ("CLIENT_REPORTED", "PHISHFORT_DETECTED")

#: Retry schedule (section 6): delay before attempt n, counted from the previous attempt.
RETRY_DELAYS_S: Final = (0, 30, 120, 600, 3600)
MAX_ATTEMPTS: Final = len(RETRY_DELAYS_S)
DELIVERY_TIMEOUT_S: Final = 5
DELIVERY_TIMEOUT_MS: Final = DELIVERY_TIMEOUT_S * 1000

#: Signature rules (section 5.2).
SIGNATURE_PREFIX: Final = "sha256="
SIGNATURE_HEX_LEN: Final = 64
CLOCK_TOLERANCE_S: Final = 300

#: Limits (section 8).
MAX_SUBSCRIPTIONS_PER_CLIENT: Final = 5
MAX_ATTACHMENTS: Final = 12
MAX_REQUEST_BYTES: Final = 10_485_760

#: Status codes (section 7).
TERMINAL_STATUSES: Final = frozenset({400, 401, 403, 404, 413, 422})
API_VERSION_PATH: Final = "/v1"


def schedule_text(delays: tuple[int, ...] = RETRY_DELAYS_S) -> str:
    """The retry schedule as the docs and the report quote it: the delays before attempts 2-n.

    >>> schedule_text()
    '30 s, 2 min, 10 min, 1 h'
    """

    def one(s: int) -> str:
        if s % 3600 == 0:
            return f"{s // 3600} h"
        return f"{s // 60} min" if s % 60 == 0 else f"{s} s"

    return ", ".join(one(s) for s in delays[1:])


def header_names(prefix: str = DEFAULT_HEADER_PREFIX) -> dict[str, str]:
    """Return the four delivery header names for a brand prefix, lower-cased for matching.

    >>> header_names("X-Service")["signature"]
    'x-service-signature'
    """
    p = prefix.strip().rstrip("-").lower()
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", p):
        raise ParameterError(f"header prefix {prefix!r} is not a header name part like X-PhishFort")
    return {
        "signature": f"{p}-signature",
        "event": f"{p}-event",
        "delivery_id": f"{p}-delivery-id",
        "timestamp": f"{p}-timestamp",
    }
