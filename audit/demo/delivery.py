"""The service's delivery loop against the receiver, with every fault of the plan (spec 6)."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from audit.demo.lifecycle import Event
from audit.demo.plan import CLIENT, DAY, FaultPlan, H, new_uuid
from audit.ingest.signatures import sign
from audit.service.wire import compact_json, envelope, iso, signed_headers
from audit.spec import DELIVERY_TIMEOUT_MS, INCIDENT_EVENTS, MAX_ATTEMPTS, RETRY_DELAYS_S

__all__ = ["DeliveryRun", "Latest", "Outcome", "Record"]

CHANGED = INCIDENT_EVENTS[1]
COPIES = ("tampered", "replayed")  # attacks that copy a real delivery


@dataclass(slots=True)
class Record:
    """One request to the receiver; ``kind`` is "service" or the attack kind."""

    recv: float  # receiver clock, Unix seconds
    sub: str
    headers: list[tuple[str, str]]
    text: str
    status: int = 0
    ms: int = 0
    kind: str = "service"
    did: str = ""
    event_id: str = ""
    attempt: int = 0
    key_index: int = 0
    extra: dict = field(default_factory=dict)
    body: int = -1  # the reference of ``text`` in the simulation's Bodies (-1: none)
    inflight: bool = False  # signed with the new secret, an earlier attempt with the old one


class Outcome(NamedTuple):
    """How one event's delivery to one subscription ended (after its last attempt)."""

    subscription_id: str
    event_id: str
    last_sent: float  # when the last attempt was sent
    finished: float  # when its answer came, or its timeout passed
    delivered: bool  # the last attempt was acknowledged (2xx) in time


class Latest:
    """Per subscription, the last outcome finished before each of ``moments`` (what a GET
    /webhooks fetched then says), kept as the outcomes come instead of keeping them all.

    >>> latest = Latest((10.0, 20.0))
    >>> for o in (Outcome("wh_a", "e1", 1, 5, True), Outcome("wh_a", "e2", 2, 15, False)):
    ...     latest.add(o)
    >>> latest.last("wh_a", 10.0), latest.last("wh_a", 20.0), latest.last("wh_b", 20.0)
    ((5, True), (15, False), None)
    """

    def __init__(self, moments: tuple[float, ...]) -> None:
        self.moments = moments
        self._last: dict[tuple[str, float], tuple[float, bool]] = {}

    def add(self, o: Outcome) -> None:
        """Count outcome ``o``."""
        mark = (o.finished, o.delivered)
        for at in self.moments:
            if o.finished < at:
                key = (o.subscription_id, at)
                known = self._last.get(key)
                if known is None or mark > known:
                    self._last[key] = mark

    def last(self, sub: str, at: float) -> tuple[float, bool] | None:
        """(finished, delivered) of ``sub``'s last outcome finished before ``at``, or None."""
        return self._last.get((sub, at))


@dataclass
class DeliveryRun:
    """The service's delivery loop against the receiver, with every fault of the plan.

    Each captured request goes to ``sink`` as it is made (nothing keeps them all); the run
    keeps what the truth and the listings need: the lost attempts, the events they left with
    a gap, the failed outcomes and the :class:`Latest` outcome at each of ``moments``.
    """

    rng: random.Random
    plan: FaultPlan
    keys: dict[str, list[str]]
    daily_offset: list[float]  # receiver clock minus true time, per day (outside the drift)
    sink: Callable[[Record], None]
    moments: tuple[float, ...]  # when the listings are fetched
    captured: int = 0  # requests handed to ``sink``
    lost: list[Record] = field(default_factory=list)
    gaps: set[str] = field(default_factory=set)  # events with a lost attempt, a later one seen
    failed: list[Outcome] = field(default_factory=list)
    latest: Latest = field(init=False)
    _copy_times: list[float] = field(init=False)  # when each copy attack is made
    _copied: list[Record | None] = field(init=False)  # what each copy attack copies
    _last_real: Record | None = None

    def __post_init__(self) -> None:
        self.latest = Latest(self.moments)
        self._copy_times = [t for kind, t, _ in self.plan.attacks if kind in COPIES]
        self._copied = [None for _ in self._copy_times]

    def capture(self, rec: Record) -> None:
        """Hand ``rec`` to the sink; remember it if an attacker may copy it."""
        self.sink(rec)
        self.captured += 1
        if rec.kind == "service" and rec.sub == "wh_main" and rec.status == 204 and rec.ms < 5000:
            for j, t in enumerate(self._copy_times):
                best = self._copied[j]
                if rec.recv >= t and (best is None or rec.recv < best.recv):
                    self._copied[j] = rec
            if self._last_real is None or rec.recv >= self._last_real.recv:
                self._last_real = rec

    def finish(self, o: Outcome) -> None:
        """Count how one event's delivery to one subscription ended."""
        self.latest.add(o)
        if not o.delivered:
            self.failed.append(o)

    def receipt(self, t: float) -> float:
        """The receiver's clock when a request sent at ``t`` arrives."""
        d0, d1 = self.plan.drift
        day = min(max(int((t - self.plan.start) // DAY), 0), len(self.daily_offset) - 1)
        offset = self.daily_offset[day]
        if d0 <= t < d1:
            offset = 2 + (t - d0) / (d1 - d0) * (self.plan.drift_max_s - 2)
        return t + self.rng.uniform(0.05, 1) + offset

    def answer(self, sub: str, t: float, slow: bool) -> tuple[int, int]:
        """The receiver's (status, response_ms) to a service delivery sent at ``t``."""
        p, rng = self.plan, self.rng
        if p.outage[0] <= t < p.outage[1]:
            return 503, rng.randint(1, 15)
        if sub == "wh_main" and p.rotation <= t < p.stale_until:  # it verifies with the old key
            return 401, rng.randint(2, 20)
        ok = 204 if sub == "wh_main" else 200
        if slow or rng.random() < 0.006:
            return ok, rng.randint(5500, 9000)
        return ok, min(round(rng.lognormvariate(math.log(45), 0.6)), 2500)

    def deliver(self, ev: Event, text: str, sub: str) -> None:
        """Up to five attempts of event ``ev`` (body ``text``) to one subscription (spec 6),
        each freshly signed."""
        t, wait_s = ev.emit, 0.0
        seen: set[int] = set()  # attempts captured
        lost: list[Record] = []
        old_key_seen = False  # an attempt signed with the old secret was captured
        for n in range(MAX_ATTEMPTS):
            t += RETRY_DELAYS_S[n] + (self.rng.uniform(0.2, 3) if n else 0)
            ts, did = int(t), new_uuid(self.rng)
            key_index = int(sub == "wh_main" and t >= self.plan.rotation)
            sig = sign(self.keys[sub][key_index], ts, text.encode())
            rec = Record(0.0, sub, signed_headers(ev.event, did, ts, sig), text, did=did)
            rec.event_id, rec.attempt, rec.key_index, rec.body = ev.eid, n + 1, key_index, ev.body
            if self.plan.network[0] <= t < self.plan.network[1]:
                lost.append(rec)
                wait_s = DELIVERY_TIMEOUT_MS / 1000
                continue
            slow = ev.plant == "inflight" and sub == "wh_main" and n == 0
            rec.status, rec.ms = self.answer(sub, t, slow)
            rec.recv = self.receipt(t)
            rec.inflight = key_index == 1 and old_key_seen
            old_key_seen = old_key_seen or key_index == 0
            seen.add(n + 1)
            self.capture(rec)
            wait_s = min(rec.ms, DELIVERY_TIMEOUT_MS) / 1000
            if 200 <= rec.status < 300 and rec.ms <= DELIVERY_TIMEOUT_MS:
                self.finish(Outcome(sub, ev.eid, t, t + wait_s, True))
                break
        else:
            self.finish(Outcome(sub, ev.eid, t, t + wait_s, False))
        self.lost += lost
        self.gaps |= {x.event_id for x in lost if {x.attempt + 1, x.attempt + 2} & seen}

    def attacks(self, incident_ids: list[str]) -> list[Record]:
        """Requests from an attacker to wh_main, answered 401 but for one tampered request
        (each copy attack copies the first real delivery received after its time)."""
        out: list[Record] = []
        copied = iter(self._copied)
        for kind, t, verdict in self.plan.attacks:
            if kind in COPIES:
                orig = next(copied) or self._last_real
                assert orig is not None, "no delivery to copy"
                rec = self.copy(kind, orig)
            else:
                rec = self.forge(kind, t, self.rng.choice(incident_ids))
            accepted = kind == "tampered" and any(a.kind == "tampered" for a in out)
            rec.kind, rec.status, rec.ms = kind, 204 if accepted else 401, self.rng.randint(1, 9)
            rec.extra["expected_verdict"] = verdict
            out.append(rec)
        return out

    def copy(self, kind: str, orig: Record) -> Record:
        """A replay hours later, or a tampered copy (url changed) seconds later."""
        rec = Record(orig.recv + self.rng.uniform(4 * H, 5 * H), "wh_main", orig.headers, orig.text)
        if kind == "tampered":
            env = json.loads(orig.text)
            env["data"]["url"] = "https://demobank-refund.example/claim"
            rec.recv, rec.text = orig.recv + self.rng.uniform(3, 40), compact_json(env)
        rec.did, rec.extra = orig.did, {"original_received_at": iso(orig.recv, "microseconds")}
        return rec

    def forge(self, kind: str, t: float, incident_id: str) -> Record:
        """A request that claims an incident was closed, with a bad or missing signature."""
        rng, did = self.rng, new_uuid(self.rng)
        data = {"incidentId": incident_id, "clientId": CLIENT, "status": "closed"}
        body = envelope("evt_" + new_uuid(rng), CHANGED, t - 60, data)
        sig = f"sha256={rng.getrandbits(256):064x}" if kind == "forged" else None
        sig = f"sha1={rng.getrandbits(160):040x}" if kind == "malformed_signature" else sig
        hdrs = signed_headers(CHANGED, did, int(t), sig, "python-requests/2.32.3")
        return Record(self.receipt(t), "wh_main", hdrs, body, did=did)
