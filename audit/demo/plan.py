"""Where the demo's faults sit: the fault plan, derived from ``start`` and ``days`` only.

Client ``cl_demo`` has three subscriptions (:data:`SUBS`): ``wh_main`` (all incident events),
``wh_siem`` (created and status_changed; its records lack ``subscription_id``) and ``wh_legacy``
(``http://``, inactive, never delivered to).

Planted faults, placed from ``start`` and ``days`` only (:func:`plan_faults`, any ``days >= 7``):

a) Receiver outage: day ``days // 2``, 13:00-15:00 UTC, the receiver answers 503 within
   milliseconds. Three incidents are created so that all five attempts of their first event fall
   inside it (exhausted; lastDeliveryStatus ``failed`` in the mid snapshot, taken at its end); two
   more recover on attempt 4 or 5.
b) Network outage: 10 minutes ending 1 minute before the stale-secret window (d) ends; attempts
   sent in it never reach the receiver and are not captured. Two planted events show "attempt 1
   seen (401), attempts 2-3 missing, attempt 4 seen". (10, not 15, minutes: attempt 4 is sent
   12.5 minutes after attempt 1, so a longer outage could not show that pattern.)
c) Slow acknowledgements: about 0.6 % of 2xx answers take 5.5-9 s, so the service retries although
   the receiver stored the event (it accepts the event twice or more).
d) Secret rotation of ``wh_main`` at 09:30 UTC on day ``round(0.6 * days)``: the service signs
   with the new secret from that instant; the receiver keeps the old one for 3 hours and answers
   401 to these validly signed deliveries (events first sent early in that window are exhausted).
   Two events first sent, and slowly acknowledged, seconds before the rotation are retried after
   it, signed with the new secret.
e) Attacker requests to ``wh_main``, 16:00-23:59 UTC on spread days: 3 forged (random signature),
   2 tampered (a real delivery's headers, body url changed; the second is wrongly accepted with
   204), 2 replayed (exact copies re-sent 4-5 h later), 1 without signature, 1 ``sha1=`` signed.
f) Receiver clock drift: day ``round(0.8 * days)``, 03:00-09:00 UTC, the receiver's clock runs
   ahead, ramping from 2 s to 292 s (inside the 300 s tolerance: the deliveries stay valid); one
   incident is created so that its first event arrives about 280 s ahead.
g) Non-ASCII bodies: IDN look-alike domains, accented e-mail subjects, names and comments, emoji.
h) Loader exercise: a few ``received_at`` with a ``+02:00`` offset or as Unix seconds, lower-case
   header names (``wh_siem``), ``[name, value]`` header lists, a few ``body_b64`` bodies, and two
   unreadable lines (one truncated mid-JSON, one with neither ``body`` nor ``body_b64``).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import NamedTuple

from audit.errors import ParameterError
from audit.spec import INCIDENT_EVENTS

__all__ = [
    "ATTACKS",
    "CLIENT",
    "DAY",
    "SUBS",
    "Attack",
    "FaultPlan",
    "H",
    "Subscription",
    "plan_faults",
]

H, DAY = 3600.0, 86400.0
CREATED, CHANGED, HISTORY, TAKEDOWN, ACTION = INCIDENT_EVENTS
CLIENT = "cl_demo"


class Subscription(NamedTuple):
    """One of the demo client's subscriptions."""

    url: str
    events: tuple[str, ...]
    description: str
    age_days: int  # created this many days before the period


SUBS = {
    "wh_main": Subscription(
        "https://hooks.client.example/phishfort/wh_main", INCIDENT_EVENTS, "SOC feed", 180
    ),
    "wh_siem": Subscription(
        "https://hooks.client.example/phishfort/siem", (CREATED, CHANGED), "SIEM", 60
    ),
    "wh_legacy": Subscription(
        "http://legacy.client.example/webhook", (CREATED,), "old ticketing hook", 700
    ),
}


class Attack(NamedTuple):
    """One planted attacker request."""

    kind: str
    day_pct: int  # the day, as a percentage of the period
    hour: float  # UTC
    verdict: str  # what a correct verifier finds


ATTACKS = (
    Attack("forged", 15, 19.2, "signature_mismatch"),
    Attack("tampered", 25, 18.0, "signature_mismatch"),
    Attack("replayed", 35, 16.0, "stale_timestamp"),
    Attack("forged", 45, 21.7, "signature_mismatch"),
    Attack("missing_signature", 55, 20.25, "missing_signature"),
    Attack("malformed_signature", 62, 22.5, "malformed_signature"),
    Attack("tampered", 70, 18.5, "signature_mismatch"),
    Attack("replayed", 80, 16.5, "stale_timestamp"),
    Attack("forged", 88, 23.1, "signature_mismatch"),
)


@dataclass(frozen=True)
class FaultPlan:
    """Where the faults sit, in Unix seconds (UTC); derived from ``start`` and ``days`` only."""

    start: float
    end: float
    outage: tuple[float, float]  # receiver answers 503
    network: tuple[float, float]  # attempts never reach the receiver
    rotation: float  # wh_main's new secret, used by the service from this instant
    stale_until: float  # the receiver verifies with the old secret until then
    drift: tuple[float, float]  # receiver clock ramps ahead to drift_max_s
    drift_max_s: float
    attacks: tuple[tuple[str, float, str], ...]  # (kind, time, expected verdict)
    tests: tuple[tuple[str, float], ...]  # (subscription, time of POST /webhooks/:id/test)
    planted: tuple[tuple[str, float], ...]  # (kind, first attempt of the incident.created event)


def plan_faults(start: date, days: int) -> FaultPlan:
    """Place every planted fault for ``days`` days from ``start`` 00:00 UTC.

    >>> p = plan_faults(date(2026, 10, 1), 31)
    >>> datetime.fromtimestamp(p.rotation, UTC).isoformat()
    '2026-10-20T09:30:00+00:00'
    """
    if days < 7:
        raise ParameterError(f"days must be at least 7 to hold every planted fault (got {days})")
    s = datetime(start.year, start.month, start.day, tzinfo=UTC).timestamp()
    end = s + days * DAY

    def at(day: int, hour: float) -> float:
        return s + day * DAY + hour * H

    o0, o1 = at(days // 2, 13), at(days // 2, 15)
    rot = at((days * 6 + 5) // 10, 9.5)
    stale = rot + 3 * H
    net0 = stale - 11 * 60
    drift0 = at((days * 8 + 5) // 10, 3)
    planted = [("exhaust", o0 + m * 60) for m in (8, 20, 33)]
    planted += [("recover", o1 - 70 * 60), ("recover", o1 - 8 * 60), ("gap", net0 - 20)]
    planted += [("gap", net0 - 100), ("inflight", rot - 25), ("inflight", rot - 12)]
    planted += [("stuck", end - h * H) for h in (30, 50, 80, 110)]
    planted += [("drift", drift0 + 5.75 * H)]  # received about 280 s ahead of its timestamp
    attacks = tuple((a.kind, at(days * a.day_pct // 100, a.hour), a.verdict) for a in ATTACKS)
    tests: tuple[tuple[str, float], ...] = (("wh_main", at(1, 10)), ("wh_siem", at(2, 11)))
    tests += (("wh_main", o1 + 1200), ("wh_main", stale + 900))
    return FaultPlan(
        s,
        end,
        (o0, o1),
        (net0, net0 + 600),
        rot,
        stale,
        (drift0, drift0 + 6 * H),
        292.0,
        attacks,
        tests,
        tuple(planted),
    )


def new_uuid(rng: random.Random) -> str:
    """A version-4 UUID drawn from ``rng`` (deterministic for a seed)."""
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))
