"""Writing the demo's files: capture logs, listing snapshots, secrets and ``truth.json``."""

from __future__ import annotations

import base64
import json
import os
import random
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

from audit.demo.delivery import DeliveryRun, Outcome, Record
from audit.demo.lifecycle import Event
from audit.demo.plan import CLIENT, DAY, SUBS, FaultPlan
from audit.progress import Progress, counting
from audit.service.wire import compact_json, iso, snapshot_document, snapshot_stem
from audit.spec import DELIVERY_TIMEOUT_MS

__all__ = [
    "subscription_created_at",
    "truth_document",
    "write_captures",
    "write_json",
    "write_snapshot",
]


def capture_line(rng: random.Random, rec: Record, style: str) -> str:
    """One capture line; ``style`` is iso, plus2 or unix (received_at), or b64 (body)."""
    tz = timezone(timedelta(hours=2)) if style == "plus2" else UTC
    when = datetime.fromtimestamp(rec.recv, tz).isoformat(timespec="microseconds")
    out: dict = {"received_at": round(rec.recv, 6) if style == "unix" else when}
    if rec.sub != "wh_siem":  # the SIEM endpoint's receiver does not log it
        out["subscription_id"] = rec.sub
    out["url"] = SUBS[rec.sub].url
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
    return compact_json(out)


def write_captures(
    rng: random.Random, folder: Path, recs: list[Record], progress: Progress | None = None
) -> tuple[list[Path], list[dict[str, object]]]:
    """One JSON Lines file per day of receipt, sorted by receipt; plants the unreadable lines
    (the probe line is a record ``progress`` counts; each file is counted once written)."""
    tally = counting(progress)
    recs.sort(key=lambda r: r.recv)
    n = len(recs)
    plain = [i for i, r in enumerate(recs) if r.kind == "service" and r.status < 300]
    cut = next(i for i in plain if i >= int(0.37 * n))
    picks = rng.sample([i for i in plain if i != cut], 3 * max(2, n // 600))
    k = len(picks) // 3
    styles = dict.fromkeys(picks[:k], "plus2") | dict.fromkeys(picks[k : 2 * k], "unix")
    styles |= dict.fromkeys(picks[2 * k :], "b64")
    files: dict[str, list[str]] = {}
    unreadable: list[dict[str, object]] = []
    for i, rec in enumerate(recs):
        name = f"receiver-{datetime.fromtimestamp(rec.recv, UTC).date().isoformat()}.jsonl"
        lines = files.setdefault(name, [])
        if i == int(0.81 * n):  # a probe the receiver logged without its body
            junk: dict[str, object] = {
                "received_at": iso(rec.recv, "microseconds"),
                "subscription_id": "wh_main",
            }
            junk |= {"url": SUBS["wh_main"].url, "headers": {"User-Agent": "Mozilla/5.0"}}
            lines.append(compact_json(junk | {"response_status": 400, "response_ms": 1}))
            unreadable.append({"line": len(lines), "reason": "neither body nor body_b64"})
            tally.add_records(1)
            unreadable[-1]["file"] = f"captures/{name}"
        lines.append(capture_line(rng, rec, styles.get(i, "iso")))
        if i == cut:  # the receiver crashed while writing this line
            lines[-1] = lines[-1][: len(lines[-1]) // 2]
            unreadable.append(
                {"line": len(lines), "reason": "truncated JSON", "delivery_id": rec.did}
            )
            unreadable[-1]["file"] = f"captures/{name}"
    folder.mkdir(parents=True)
    tally.expect_files(len(files))
    for name, lines in files.items():
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
        tally.file_done()
    return [folder / name for name in sorted(files)], unreadable


def write_json(path: Path, obj: object, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return path


def subscription_created_at(plan: FaultPlan, sub: str) -> float:
    return plan.start - SUBS[sub].age_days * DAY + 37_000.0


def write_snapshot(folder: Path, plan: FaultPlan, outcomes: list[Outcome], at: float) -> Path:
    """GET /webhooks as fetched at ``at``: lastDeliveryStatus is the last finished event's."""
    subs = []
    for sid, spec in SUBS.items():
        done = [
            (o.finished, o.delivered)
            for o in outcomes
            if o.subscription_id == sid and o.finished < at
        ]
        last = None if sid == "wh_legacy" else "failed" if done and not max(done)[1] else "success"
        sub: dict[str, object] = {"id": sid, "clientId": CLIENT, "url": spec.url}
        sub |= {"events": list(spec.events), "active": sid != "wh_legacy"}
        sub |= {"description": spec.description}
        subs.append(
            sub | {"createdAt": iso(subscription_created_at(plan, sid)), "lastDeliveryStatus": last}
        )
    listing = {"data": subs, "message": "Success"}
    doc = snapshot_document(listing, base_url="https://api.phishfort.example", fetched_at=int(at))
    return write_json(folder / f"{snapshot_stem(at)}.json", doc)


def window(a: float, b: float, **more: object) -> dict:
    return {"start": iso(a, "seconds"), "end": iso(b, "seconds"), **more}


def truth_document(
    plan: FaultPlan, run: DeliveryRun, events: list[Event], facts: list[dict]
) -> dict:
    """Everything planted, read from what happened in the run (never a secret value)."""
    svc = [r for r in run.recs if r.kind == "service"]
    attacks = [r for r in run.recs if r.kind != "service"]

    def exhausted(a: float, b: float) -> list[dict]:
        failed = [o for o in run.outcomes if not o.delivered and a <= o.last_sent < b]
        return [{"event_id": o.event_id, "subscription_id": o.subscription_id} for o in failed]

    def rows(recs: list[Record], *keys: str) -> list[dict]:
        return [
            {"delivery_id": r.did, "subscription_id": r.sub, **{k: getattr(r, k) for k in keys}}
            for r in recs
        ]

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
        "period": window(plan.start, plan.end),
        "receiver_outage": window(*plan.outage, status=503, exhausted=exhausted(*plan.outage)),
        "network_outage": window(
            *plan.network, lost=rows(run.lost, "event_id", "attempt"), gap_event_ids=sorted(gaps)
        ),
        "secret_rotation": {"subscription_id": "wh_main", "at": iso(plan.rotation, "seconds")},
        "stale_secret": window(
            plan.rotation,
            plan.stale_until,
            answered_401_delivery_ids=[r.did for r in svc if r.status == 401],
            exhausted=exhausted(plan.rotation, plan.stale_until),
            inflight_new_secret_delivery_ids=inflight,
        ),
        "slow_acks": rows(slow, "event_id", "ms"),
        "clock_drift": window(*plan.drift, max_offset_s=plan.drift_max_s),
        "attacks": [
            row | {"received_at": iso(a.recv, "microseconds"), **a.extra}
            for row, a in zip(rows(attacks, "kind", "status"), attacks, strict=True)
        ],
        "wrongly_accepted": [a.did for a in attacks if a.status < 300],
        "webhook_tests": [e.eid for e in events if e.event == "webhook.test"],
        "non_ascii_event_ids": [e.eid for e in events if not e.text.isascii()],
        "open_incidents": [f for f in facts if f["status"] not in ("closed", "takedown_success")],
        "waiting_on_client": waiting,
        "counts": {
            "incidents": len(facts),
            "events": len(events),
            "attempts_captured": len(svc),
            "attempts_lost": len(run.lost),
            "attacks": len(attacks),
        },
    }
