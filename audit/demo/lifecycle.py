"""Incident life cycles: the events of each incident and of the webhook tests, in time order."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from audit.demo.plan import CLIENT, DAY, FaultPlan, H, new_uuid
from audit.demo.spill import Bodies
from audit.progress import Progress
from audit.service.wire import envelope, iso
from audit.spec import INCIDENT_EVENTS

__all__ = ["Event", "incident_events", "webhook_tests"]

CREATED, CHANGED, HISTORY, TAKEDOWN, ACTION = INCIDENT_EVENTS
LABELS = ("demobank-login", "demobank-secure", "demo-bank-verify", "my-demobank", "demobank-wallet")
IDN_LABELS = ("dеmobank", "demobаnk-login", "démobank-sécurité", "demobank-ödeme")  # Cyrillic е, а
PATHS = ("/login", "/verify/account", "/secure/update.php", "/claim?ref=sms", "/")
NAMES = ("soc@demobank.example", "José Müller", "Zoë Lefèvre", "fraud-team@demobank.example")
TYPES = ("website", "mobile_application", "browser_extension", "social_media", "email")
COMMENTS = (
    "Evidence sent to the registrar.",
    "Site now serves a fake login form 🔒",
    "Hosting provider contacted — awaiting reply.",
    "Le site a été signalé aux autorités.",
)
REASONS = ("Please approve the takedown.", "Bitte Markenrechte bestätigen (Nachweis fehlt).")
CLASSES = ("phishing", "scam", "brandabuse", "malware", "infringement", "other")
CLASS_WEIGHTS = (60, 12, 10, 7, 6, 5)
LIFE_PATHS = ("not_malicious", "pre_weaponised", "blocklisted", "takedown")
LIFE_WEIGHTS = (6, 7, 8, 79)


@dataclass(slots=True)
class Event:
    """One event to deliver; its body is kept in :class:`~audit.demo.spill.Bodies`."""

    eid: str
    event: str
    emit: float  # first attempt
    body: int  # the reference of its text in the simulation's Bodies
    plant: str | None = None
    subs: tuple[str, ...] = ()  # empty: every subscription that subscribed to the event


def incident_fields(rng: random.Random, created: float) -> dict:
    iid = "inc_" + "".join(rng.choices("0123456789abcdefghijklmnopqrstuvwxyz", k=10))
    label = rng.choice(IDN_LABELS if rng.random() < 0.12 else LABELS)
    domain = f"{label}{rng.randint(1, 99) if rng.random() < 0.3 else ''}.example"
    source = "CLIENT_REPORTED" if rng.random() < 0.35 else "PHISHFORT_DETECTED"
    d = {"incidentId": iid, "clientId": CLIENT, "status": "pending_review", "source": source}
    d["incidentClass"] = rng.choices(CLASSES, CLASS_WEIGHTS)[0]
    d |= {
        "url": f"https://{domain}{rng.choice(PATHS)}",
        "domain": domain,
        "timestamp": iso(created),
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


def incident_steps(
    rng: random.Random, created: float, kind: str | None
) -> list[tuple[float, str, dict]]:
    """One incident's changes, in time order: (time, event, field changes; None drops a field)."""
    base = incident_fields(rng, created)
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
        add(rng.uniform(60, 600), status="takedown_in_progress", burnStartedTimestamp=iso(t))
        add(rng.uniform(1, 30), TAKEDOWN)
        done = max(created + ttd, t + 600)
        if rng.random() < 0.2:
            add((done - t) * 0.4, status="takedown_attempt_failed")
            add((done - t) * 0.2, status="takedown_in_progress")
            add(rng.uniform(1, 30), TAKEDOWN)
        add(done - t, status="takedown_success", takedownTimestamp=iso(done))
        add(rng.lognormvariate(math.log(20 * H), 0.7), status="closed")

    lifecycle()
    t1 = max(t, created + 2 * DAY)
    for c in sorted(rng.uniform(created + 60, t1) for _ in range(rng.randint(2, 5))):
        entry = {"type": "comment", "message": rng.choice(COMMENTS)}
        steps.append((c, HISTORY, {"lastHistoryUpdateTimestamp": iso(c), "historyEntry": entry}))
    return sorted(steps, key=lambda s: s[0])


def incident_events(
    rng: random.Random, plan: FaultPlan, n: int, bodies: Bodies, progress: Progress | None = None
) -> tuple[list[Event], list[dict]]:
    """Generate ``n`` incidents: their events within the period (their texts kept in
    ``bodies``), and their state at its end. ``progress`` is told every 100 incidents that time
    passes (a terminal's line shows the seconds before the first delivery is counted)."""
    events, facts = [], []
    for i, (kind, first) in enumerate([*plan.planted, *[(None, 0.0)] * (n - len(plan.planted))]):
        if progress is not None and i % 100 == 0:
            progress.changed()
        delay = rng.uniform(5, 60)
        created = first - delay if kind else rng.uniform(plan.start, plan.end - 600)
        state: dict = {}
        since = created
        for t, event, changes in incident_steps(rng, created, kind):
            if t >= plan.end:
                break
            state = {k: v for k, v in (state | changes).items() if v is not None}
            since = t if "status" in changes else since
            eid = "evt_" + new_uuid(rng)
            body = envelope(eid, event, t, state)
            state.pop("historyEntry", None)  # only in its own event
            if event != CREATED or not kind:
                delay = rng.uniform(120, 600) if rng.random() < 0.02 else rng.uniform(5, 120)
            plant = kind if event == CREATED else None
            events.append(Event(eid, event, t + delay, bodies.add(body), plant))
        facts.append(
            {"incident_id": state["incidentId"], "status": state["status"], "planted": kind}
        )
        facts[-1] |= {"since": iso(since, "seconds"), "taken_down": "takedownTimestamp" in state}
    return events, facts


def webhook_tests(rng: random.Random, plan: FaultPlan, bodies: Bodies) -> list[Event]:
    out = []
    for sub, t in plan.tests:
        eid, data = "evt_" + new_uuid(rng), {"incidentId": f"test_{rng.getrandbits(48):012x}"}
        body = envelope(eid, "webhook.test", t, data | {"clientId": CLIENT})
        emit = t + rng.uniform(5, 20)
        out.append(Event(eid, "webhook.test", emit, bodies.add(body), None, (sub,)))
    return out
