"""Deterministic demo data that follows the service's published webhook rules (spec 3, 5, 6).

:func:`simulate` writes receiver captures, a secrets file, three GET /webhooks snapshots and a
``truth.json`` listing everything planted. Everything derives from ``seed`` and ``start``; the wall
clock is never read, and the same arguments give the same bytes. Client ``cl_demo`` has three
subscriptions: ``wh_main`` (all incident events), ``wh_siem`` (created and status_changed; its
records lack ``subscription_id``) and ``wh_legacy`` (``http://``, inactive, never delivered to).

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

Also: incidents still open at the end, four waiting on the client for more than 24 h at the end,
and ``webhook.test`` deliveries (one early, one after each repair).
"""

from __future__ import annotations

import base64
import json
import math
import os
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

from audit.errors import InputError, ParameterError
from audit.signatures import sign
from audit.spec import DELIVERY_TIMEOUT_MS, INCIDENT_EVENTS, MAX_ATTEMPTS, RETRY_DELAYS_S

__all__ = ["FaultPlan", "SimulationResult", "plan_faults", "simulate"]

H, DAY = 3600.0, 86400.0
CREATED, CHANGED, HISTORY, TAKEDOWN, ACTION = INCIDENT_EVENTS
PREFIX, UA, CLIENT = "X-PhishFort", "PhishFort-Webhooks/1.0", "cl_demo"
# fmt: off
SUBS = {  # id: (url, events, description, created this many days before the period)
    "wh_main": ("https://hooks.client.example/phishfort/wh_main", INCIDENT_EVENTS, "SOC feed", 180),
    "wh_siem": ("https://hooks.client.example/phishfort/siem", (CREATED, CHANGED), "SIEM", 60),
    "wh_legacy": ("http://legacy.client.example/webhook", (CREATED,), "old ticketing hook", 700),
}
LABELS = ("demobank-login", "demobank-secure", "demo-bank-verify", "my-demobank", "demobank-wallet")
IDN_LABELS = ("dеmobank", "demobаnk-login", "démobank-sécurité", "demobank-ödeme")  # Cyrillic е, а
PATHS = ("/login", "/verify/account", "/secure/update.php", "/claim?ref=sms", "/")
NAMES = ("soc@demobank.example", "José Müller", "Zoë Lefèvre", "fraud-team@demobank.example")
TYPES = ("website", "mobile_application", "browser_extension", "social_media", "email")
COMMENTS = ("Evidence sent to the registrar.", "Site now serves a fake login form 🔒",
            "Hosting provider contacted — awaiting reply.", "Le site a été signalé aux autorités.")
REASONS = ("Please approve the takedown.", "Bitte Markenrechte bestätigen (Nachweis fehlt).")
CLASSES = ("phishing", "scam", "brandabuse", "malware", "infringement", "other")
CLASS_WEIGHTS = (60, 12, 10, 7, 6, 5)
LIFE_PATHS = ("not_malicious", "pre_weaponised", "blocklisted", "takedown")
LIFE_WEIGHTS = (6, 7, 8, 79)
ATTACKS = (  # kind, day as % of the period, hour UTC, verdict a correct verifier gives
    ("forged", 15, 19.2, "signature_mismatch"), ("tampered", 25, 18.0, "signature_mismatch"),
    ("replayed", 35, 16.0, "stale_timestamp"), ("forged", 45, 21.7, "signature_mismatch"),
    ("missing_signature", 55, 20.25, "missing_signature"),
    ("malformed_signature", 62, 22.5, "malformed_signature"),
    ("tampered", 70, 18.5, "signature_mismatch"), ("replayed", 80, 16.5, "stale_timestamp"),
    ("forged", 88, 23.1, "signature_mismatch"),
)
# fmt: on


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


@dataclass(frozen=True)
class SimulationResult:
    """Paths written by :func:`simulate` and a few counts (``records``: lines in the captures)."""

    captures: list[Path]
    secrets: Path
    snapshots: list[Path]
    truth: Path
    records: int
    attempts: int
    events: int
    incidents: int


@dataclass
class _Event:
    eid: str
    event: str
    emit: float  # first attempt
    text: str  # the body
    plant: str | None = None
    subs: tuple[str, ...] = ()  # empty: every subscription that subscribed to the event


@dataclass
class _Rec:
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
    attacks = tuple((k, at(days * pct // 100, hour), v) for k, pct, hour, v in ATTACKS)
    tests = (("wh_main", at(1, 10)), ("wh_siem", at(2, 11)))
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


def _iso(t: float, spec: str = "milliseconds") -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec=spec).replace("+00:00", "Z")


def _uuid(rng: random.Random) -> str:
    return str(uuid.UUID(int=rng.getrandbits(128), version=4))


def _dump(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _envelope(eid: str, event: str, t: float, data: dict) -> str:
    """The delivery body (spec 2.2) as the service sends it: compact UTF-8 JSON."""
    return _dump({"id": eid, "event": event, "timestamp": _iso(t), "data": data})


def _headers(event: str, did: str, ts: int, sig: str | None, ua: str = UA) -> list:
    out = [("Content-Type", "application/json"), ("User-Agent", ua)]
    out += [(f"{PREFIX}-Signature", sig)] if sig else []
    out += [(f"{PREFIX}-Event", event), (f"{PREFIX}-Delivery-Id", did)]
    return [*out, (f"{PREFIX}-Timestamp", str(ts))]


def _incident_fields(rng: random.Random, created: float) -> dict:
    iid = "inc_" + "".join(rng.choices("0123456789abcdefghijklmnopqrstuvwxyz", k=10))
    label = rng.choice(IDN_LABELS if rng.random() < 0.12 else LABELS)
    domain = f"{label}{rng.randint(1, 99) if rng.random() < 0.3 else ''}.example"
    source = "CLIENT_REPORTED" if rng.random() < 0.35 else "PHISHFORT_DETECTED"
    d = {"incidentId": iid, "clientId": CLIENT, "status": "pending_review", "source": source}
    d["incidentClass"] = rng.choices(CLASSES, CLASS_WEIGHTS)[0]
    d |= {
        "url": f"https://{domain}{rng.choice(PATHS)}",
        "domain": domain,
        "timestamp": _iso(created),
    }
    if rng.random() < 0.7:
        d["safeDomain"] = "demobank.example"
    if rng.random() < 0.6:
        d["incidentType"] = rng.choice(TYPES)
    if rng.random() < 0.5:
        phone, ip = f"+44 20 7946 0{rng.randint(100, 999)}", f"203.0.113.{rng.randint(1, 254)}"
        d["subject"] = rng.choice((f"sécurité@{domain}", f"support@{domain}", phone, ip))
    if source == "CLIENT_REPORTED":
        d["reportedBy"] = rng.choice(NAMES)
    return d


def _steps(rng: random.Random, created: float, kind: str | None) -> list[tuple[float, str, dict]]:
    """One incident's changes, in time order: (time, event, field changes; None drops a field)."""
    base = _incident_fields(rng, created)
    late = {k: base.pop(k) for k in ("safeDomain", "subject") if k in base and rng.random() < 0.25}
    steps, t = [(created, CREATED, base)], created

    def add(dt: float, event: str = CHANGED, **changes: object) -> None:
        nonlocal t
        t += dt
        steps.append((t, event, changes))

    def wait_for_client(dt: float, status: str) -> None:
        yes = status == "approval_required" and rng.random() < 0.5
        add(dt, status=status, waitForClient=True if yes else rng.choice(REASONS))
        if status == "action_required" or rng.random() < 0.5:
            add(rng.uniform(1, 20), ACTION)

    def lifecycle() -> None:
        ttd = rng.lognormvariate(math.log(4.5 * H), 1.2)  # creation to takedown_success
        path = "stuck" if kind == "stuck" else rng.choices(LIFE_PATHS, LIFE_WEIGHTS)[0]
        if path == "stuck":  # planted: waits on the client until the end of the period
            add(rng.uniform(0.2, 1) * H, status="case_building", **late)
            wait_for_client(
                rng.uniform(0.3, 2) * H, rng.choice(("approval_required", "action_required"))
            )
            return
        if path == "not_malicious":
            add(ttd * rng.uniform(0.05, 0.2), status="closed")
            return
        if path == "pre_weaponised":
            add(ttd * 0.05, status="pre_weaponised")
            if rng.random() < 0.4:
                add(rng.lognormvariate(math.log(2 * DAY), 0.8), status="closed")
                return
            add(rng.lognormvariate(math.log(DAY), 0.8), status="case_building", **late)
            ttd += t - created
        else:
            add(ttd * rng.uniform(0.03, 0.08), status="case_building", **late)
        if path == "blocklisted":
            add(ttd * rng.uniform(0.1, 0.25), status="blocklisted")
            if rng.random() < 0.5:
                add(rng.lognormvariate(math.log(3 * DAY), 0.6), status="closed")
                return
        if rng.random() < 0.1:
            wait_for_client(ttd * 0.05, "action_required")
            add(ttd * 0.05, status="case_building", waitForClient=None)
        if rng.random() < 0.25:
            wait_for_client(ttd * rng.uniform(0.1, 0.2), "approval_required")
            add(ttd * rng.uniform(0.05, 0.15), status="takedown_ready", waitForClient=None)
        add(rng.uniform(60, 600), status="takedown_in_progress", burnStartedTimestamp=_iso(t))
        add(rng.uniform(1, 30), TAKEDOWN)
        done = max(created + ttd, t + 600)
        if rng.random() < 0.2:
            add((done - t) * 0.4, status="takedown_attempt_failed")
            add((done - t) * 0.2, status="takedown_in_progress")
            add(rng.uniform(1, 30), TAKEDOWN)
        add(done - t, status="takedown_success", takedownTimestamp=_iso(done))
        add(rng.lognormvariate(math.log(20 * H), 0.7), status="closed")

    lifecycle()
    t1 = max(t, created + 2 * DAY)
    for c in sorted(rng.uniform(created + 60, t1) for _ in range(rng.randint(2, 5))):
        entry = {"type": "comment", "message": rng.choice(COMMENTS)}
        steps.append((c, HISTORY, {"lastHistoryUpdateTimestamp": _iso(c), "historyEntry": entry}))
    return sorted(steps, key=lambda s: s[0])


def _incidents(rng: random.Random, plan: FaultPlan, n: int) -> tuple[list[_Event], list[dict]]:
    """Generate ``n`` incidents: their events within the period, and their state at its end."""
    events, facts = [], []
    for kind, first in [*plan.planted, *[(None, 0.0)] * (n - len(plan.planted))]:
        delay = rng.uniform(5, 60)
        created = first - delay if kind else rng.uniform(plan.start, plan.end - 600)
        state: dict = {}
        since = created
        for t, event, changes in _steps(rng, created, kind):
            if t >= plan.end:
                break
            state = {k: v for k, v in (state | changes).items() if v is not None}
            since = t if "status" in changes else since
            eid = "evt_" + _uuid(rng)
            body = _envelope(eid, event, t, state)
            state.pop("historyEntry", None)  # only in its own event
            if event != CREATED or not kind:
                delay = rng.uniform(120, 600) if rng.random() < 0.02 else rng.uniform(5, 120)
            events.append(_Event(eid, event, t + delay, body, kind if event == CREATED else None))
        facts.append(
            {"incident_id": state["incidentId"], "status": state["status"], "planted": kind}
        )
        facts[-1] |= {"since": _iso(since, "seconds"), "taken_down": "takedownTimestamp" in state}
    return events, facts


def _tests(rng: random.Random, plan: FaultPlan) -> list[_Event]:
    out = []
    for sub, t in plan.tests:
        eid, data = "evt_" + _uuid(rng), {"incidentId": f"test_{rng.getrandbits(48):012x}"}
        body = _envelope(eid, "webhook.test", t, data | {"clientId": CLIENT})
        out.append(_Event(eid, "webhook.test", t + rng.uniform(5, 20), body, None, (sub,)))
    return out


@dataclass
class _Run:
    """The service's delivery loop against the receiver, with every fault of the plan."""

    rng: random.Random
    plan: FaultPlan
    keys: dict[str, list[str]]
    daily_offset: list[float]  # receiver clock minus true time, per day (outside the drift)
    recs: list[_Rec] = field(default_factory=list)
    lost: list[_Rec] = field(default_factory=list)
    outcomes: list[tuple[str, str, float, float, bool]] = field(default_factory=list)

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

    def deliver(self, ev: _Event, sub: str) -> None:
        """Up to five attempts of one event to one subscription (spec 6), each freshly signed."""
        t, wait_s = ev.emit, 0.0
        for n in range(MAX_ATTEMPTS):
            t += RETRY_DELAYS_S[n] + (self.rng.uniform(0.2, 3) if n else 0)
            ts, did = int(t), _uuid(self.rng)
            key_index = int(sub == "wh_main" and t >= self.plan.rotation)
            sig = sign(self.keys[sub][key_index], ts, ev.text.encode())
            rec = _Rec(0.0, sub, _headers(ev.event, did, ts, sig), ev.text, did=did)
            rec.event_id, rec.attempt, rec.key_index = ev.eid, n + 1, key_index
            if self.plan.network[0] <= t < self.plan.network[1]:
                self.lost.append(rec)
                wait_s = DELIVERY_TIMEOUT_MS / 1000
                continue
            slow = ev.plant == "inflight" and sub == "wh_main" and n == 0
            rec.status, rec.ms = self.answer(sub, t, slow)
            rec.recv = self.receipt(t)
            self.recs.append(rec)
            wait_s = min(rec.ms, DELIVERY_TIMEOUT_MS) / 1000
            if 200 <= rec.status < 300 and rec.ms <= DELIVERY_TIMEOUT_MS:
                self.outcomes.append((sub, ev.eid, t, t + wait_s, True))
                return
        self.outcomes.append((sub, ev.eid, t, t + wait_s, False))

    def attacks(self, incident_ids: list[str]) -> list[_Rec]:
        """Requests from an attacker to wh_main, answered 401 but for one tampered request."""
        real = [r for r in self.recs if r.sub == "wh_main" and r.status == 204 and r.ms < 5000]
        real.sort(key=lambda r: r.recv)
        out: list[_Rec] = []
        for kind, t, verdict in self.plan.attacks:
            if kind in ("tampered", "replayed"):
                rec = self.copy(kind, next((r for r in real if r.recv >= t), real[-1]))
            else:
                rec = self.forge(kind, t, self.rng.choice(incident_ids))
            accepted = kind == "tampered" and any(a.kind == "tampered" for a in out)
            rec.kind, rec.status, rec.ms = kind, 204 if accepted else 401, self.rng.randint(1, 9)
            rec.extra["expected_verdict"] = verdict
            out.append(rec)
        return out

    def copy(self, kind: str, orig: _Rec) -> _Rec:
        """A replay hours later, or a tampered copy (url changed) seconds later."""
        rec = _Rec(orig.recv + self.rng.uniform(4 * H, 5 * H), "wh_main", orig.headers, orig.text)
        if kind == "tampered":
            env = json.loads(orig.text)
            env["data"]["url"] = "https://demobank-refund.example/claim"
            rec.recv, rec.text = orig.recv + self.rng.uniform(3, 40), _dump(env)
        rec.did, rec.extra = orig.did, {"original_received_at": _iso(orig.recv, "microseconds")}
        return rec

    def forge(self, kind: str, t: float, incident_id: str) -> _Rec:
        """A request that claims an incident was closed, with a bad or missing signature."""
        rng, did = self.rng, _uuid(self.rng)
        data = {"incidentId": incident_id, "clientId": CLIENT, "status": "closed"}
        body = _envelope("evt_" + _uuid(rng), CHANGED, t - 60, data)
        sig = f"sha256={rng.getrandbits(256):064x}" if kind == "forged" else None
        sig = f"sha1={rng.getrandbits(160):040x}" if kind == "malformed_signature" else sig
        hdrs = _headers(CHANGED, did, int(t), sig, "python-requests/2.32.3")
        return _Rec(self.receipt(t), "wh_main", hdrs, body, did=did)


def _line(rng: random.Random, rec: _Rec, style: str) -> str:
    """One capture line; ``style`` is iso, plus2 or unix (received_at), or b64 (body)."""
    tz = timezone(timedelta(hours=2)) if style == "plus2" else UTC
    when = datetime.fromtimestamp(rec.recv, tz).isoformat(timespec="microseconds")
    out: dict = {"received_at": round(rec.recv, 6) if style == "unix" else when}
    if rec.sub != "wh_siem":  # the SIEM endpoint's receiver does not log it
        out["subscription_id"] = rec.sub
    out["url"] = SUBS[rec.sub][0]
    out["headers"] = dict(rec.headers)
    if rec.sub == "wh_siem":
        out["headers"] = {k.lower(): v for k, v in rec.headers}
    elif rng.random() < 0.04:
        out["headers"] = [[k, v] for k, v in rec.headers]
    if style == "b64":
        out["body_b64"] = base64.b64encode(rec.text.encode()).decode("ascii")
    else:
        out["body"] = rec.text
    out |= {"response_status": rec.status, "response_ms": rec.ms}
    return _dump(out)


def _write_captures(rng, folder: Path, recs: list[_Rec]) -> tuple[list[Path], list[dict]]:
    """One JSON Lines file per day of receipt, sorted by receipt; plants the unreadable lines."""
    recs.sort(key=lambda r: r.recv)
    n = len(recs)
    plain = [i for i, r in enumerate(recs) if r.kind == "service" and r.status < 300]
    cut = next(i for i in plain if i >= int(0.37 * n))
    picks = rng.sample([i for i in plain if i != cut], 3 * max(2, n // 600))
    k = len(picks) // 3
    styles = dict.fromkeys(picks[:k], "plus2") | dict.fromkeys(picks[k : 2 * k], "unix")
    styles |= dict.fromkeys(picks[2 * k :], "b64")
    files: dict[str, list[str]] = {}
    unreadable = []
    for i, rec in enumerate(recs):
        name = f"receiver-{datetime.fromtimestamp(rec.recv, UTC).date().isoformat()}.jsonl"
        lines = files.setdefault(name, [])
        if i == int(0.81 * n):  # a probe the receiver logged without its body
            junk = {"received_at": _iso(rec.recv, "microseconds"), "subscription_id": "wh_main"}
            junk |= {"url": SUBS["wh_main"][0], "headers": {"User-Agent": "Mozilla/5.0"}}
            lines.append(_dump(junk | {"response_status": 400, "response_ms": 1}))
            unreadable.append({"line": len(lines), "reason": "neither body nor body_b64"})
            unreadable[-1]["file"] = f"captures/{name}"
        lines.append(_line(rng, rec, styles.get(i, "iso")))
        if i == cut:  # the receiver crashed while writing this line
            lines[-1] = lines[-1][: len(lines[-1]) // 2]
            unreadable.append(
                {"line": len(lines), "reason": "truncated JSON", "delivery_id": rec.did}
            )
            unreadable[-1]["file"] = f"captures/{name}"
    folder.mkdir(parents=True)
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [folder / name for name in sorted(files)], unreadable


def _write_json(path: Path, obj: object, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return path


def _created_at(plan: FaultPlan, sub: str) -> float:
    return plan.start - SUBS[sub][3] * DAY + 37_000.0


def _snapshot(folder: Path, plan: FaultPlan, outcomes: list, at: float) -> Path:
    """GET /webhooks as fetched at ``at``: lastDeliveryStatus is the last finished event's."""
    subs = []
    for sid, (url, events, desc, _) in SUBS.items():
        done = [(o[3], o[4]) for o in outcomes if o[0] == sid and o[3] < at]
        last = None if sid == "wh_legacy" else "failed" if done and not max(done)[1] else "success"
        sub = {"id": sid, "clientId": CLIENT, "url": url, "events": list(events)}
        sub |= {"active": sid != "wh_legacy", "description": desc}
        subs.append(sub | {"createdAt": _iso(_created_at(plan, sid)), "lastDeliveryStatus": last})
    body = {"fetched_at": _iso(at, "seconds"), "base_url": "https://api.phishfort.example"}
    body["response"] = {"data": subs, "message": "Success"}
    stamp = datetime.fromtimestamp(at, UTC).strftime("%Y%m%dT%H%M%SZ")
    return _write_json(folder / f"webhooks-{stamp}.json", body)


def _window(a: float, b: float, **more: object) -> dict:
    return {"start": _iso(a, "seconds"), "end": _iso(b, "seconds"), **more}


def _truth(plan: FaultPlan, run: _Run, events: list[_Event], facts: list[dict]) -> dict:
    """Everything planted, read from what happened in the run (never a secret value)."""
    svc = [r for r in run.recs if r.kind == "service"]
    attacks = [r for r in run.recs if r.kind != "service"]

    def exhausted(a: float, b: float) -> list[dict]:
        failed = [o for o in run.outcomes if not o[4] and a <= o[2] < b]
        return [{"event_id": o[1], "subscription_id": o[0]} for o in failed]

    def rows(recs: list[_Rec], *keys: str) -> list[dict]:
        return [{"delivery_id": r.did, "subscription_id": r.sub, **{k: getattr(r, k) for k in keys}}
                for r in recs]  # fmt: skip

    seen = {(r.event_id, r.sub, r.attempt) for r in svc}
    gaps = {x.event_id for x in run.lost if (x.event_id, x.sub, x.attempt + 1) in seen}
    gaps |= {x.event_id for x in run.lost if (x.event_id, x.sub, x.attempt + 2) in seen}
    waiting = [f for f in facts if f["status"] in ("approval_required", "action_required")]
    for f in waiting:
        f["over_24h"] = plan.end - datetime.fromisoformat(f["since"]).timestamp() > DAY
    slow = [r for r in svc if r.status < 300 and r.ms > DELIVERY_TIMEOUT_MS]
    old_key_first = {r.event_id for r in svc if r.sub == "wh_main" and r.key_index == 0}
    inflight = [r.did for r in svc if r.key_index and r.event_id in old_key_first]
    return {
        "period": _window(plan.start, plan.end),
        "receiver_outage": _window(*plan.outage, status=503, exhausted=exhausted(*plan.outage)),
        "network_outage": _window(*plan.network, lost=rows(run.lost, "event_id", "attempt"),
                                  gap_event_ids=sorted(gaps)),
        "secret_rotation": {"subscription_id": "wh_main", "at": _iso(plan.rotation, "seconds")},
        "stale_secret": _window(plan.rotation, plan.stale_until,
                                answered_401_delivery_ids=[r.did for r in svc if r.status == 401],
                                exhausted=exhausted(plan.rotation, plan.stale_until),
                                inflight_new_secret_delivery_ids=inflight),
        "slow_acks": rows(slow, "event_id", "ms"),
        "clock_drift": _window(*plan.drift, max_offset_s=plan.drift_max_s),
        "attacks": [row | {"received_at": _iso(a.recv, "microseconds"), **a.extra}
                    for row, a in zip(rows(attacks, "kind", "status"), attacks, strict=True)],
        "wrongly_accepted": [a.did for a in attacks if a.status < 300],
        "webhook_tests": [e.eid for e in events if e.event == "webhook.test"],
        "non_ascii_event_ids": [e.eid for e in events if not e.text.isascii()],
        "open_incidents": [f for f in facts if f["status"] not in ("closed", "takedown_success")],
        "waiting_on_client": waiting,
        "counts": {"incidents": len(facts), "events": len(events), "attempts_captured": len(svc),
                   "attempts_lost": len(run.lost), "attacks": len(attacks)},
    }  # fmt: skip


def simulate(
    out_dir: str | os.PathLike,
    *,
    seed: int = 7,
    start: date = date(2026, 10, 1),
    days: int = 31,
    incidents: int = 300,
) -> SimulationResult:
    """Write a deterministic period of demo data that follows the service's published rules.

    Parameters
    ----------
    out_dir
        An empty or missing folder; receives ``captures/``, ``snapshots/``, ``secrets.json``
        (mode 0600) and ``truth.json`` (everything planted, never a secret value).
    seed
        Seed of the one ``random.Random`` everything derives from.
    start, days
        The period: ``days`` days (at least 7) from ``start`` 00:00 UTC.
    incidents
        Number of incidents (at least 20; 14 of them are planted around the faults).

    Returns
    -------
    SimulationResult

    Examples
    --------
    >>> r = simulate("demo", days=10, incidents=40)  # doctest: +SKIP
    >>> r.captures[0].name, r.secrets.name  # doctest: +SKIP
    ('receiver-2026-10-01.jsonl', 'secrets.json')
    """
    out = Path(out_dir)
    if incidents < 20:
        raise ParameterError(f"incidents must be at least 20 (got {incidents})")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: the output folder must be empty or missing")
    plan = plan_faults(start, days)
    rng = random.Random(seed)
    keys = {
        s: [f"whsec_{rng.getrandbits(128):032x}" for _ in range(n)]
        for s, n in (("wh_main", 2), ("wh_siem", 1))
    }
    run = _Run(rng, plan, keys, [rng.uniform(-1.0, 2.5) for _ in range(days + 2)])
    events, facts = _incidents(rng, plan, incidents)
    events = sorted(events + _tests(rng, plan), key=lambda e: (e.emit, e.eid))
    for ev in events:
        for sub in ev.subs or [s for s in ("wh_main", "wh_siem") if ev.event in SUBS[s][1]]:
            run.deliver(ev, sub)
    run.recs += run.attacks([f["incident_id"] for f in facts])
    captures, unreadable = _write_captures(rng, out / "captures", run.recs)
    main = [
        {"secret": keys["wh_main"][0], "valid_from": _iso(_created_at(plan, "wh_main"), "seconds")},
        {"secret": keys["wh_main"][1], "valid_from": _iso(plan.rotation, "seconds")},
    ]
    secrets = {"wh_main": main, "wh_siem": [{"secret": keys["wh_siem"][0]}]}
    secrets_path = _write_json(out / "secrets.json", secrets, mode=0o600)
    moments = (plan.start, plan.outage[1], plan.end + 3 * H)
    snapshots = [_snapshot(out / "snapshots", plan, run.outcomes, at) for at in moments]
    truth = _truth(plan, run, events, facts) | {"unreadable_lines": unreadable}
    truth_path = _write_json(out / "truth.json", truth)
    attempts = sum(r.kind == "service" for r in run.recs)
    return SimulationResult(
        captures,
        secrets_path,
        snapshots,
        truth_path,
        len(run.recs) + 1,
        attempts,
        len(events),
        len(facts),
    )
