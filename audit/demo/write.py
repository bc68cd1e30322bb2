"""Writing the demo's files: capture logs, listing snapshots, secrets and ``truth.json``."""

from __future__ import annotations

import base64
import json
import marshal
import os
import random
from array import array
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import NamedTuple

from audit.demo.delivery import DeliveryRun, Latest, Record
from audit.demo.plan import CLIENT, DAY, SUBS, FaultPlan
from audit.demo.spill import Bodies
from audit.progress import Progress, counting
from audit.service.wire import compact_json, iso, snapshot_document, snapshot_stem
from audit.spec import DELIVERY_TIMEOUT_MS

__all__ = [
    "CaptureSpill",
    "Events",
    "Witness",
    "subscription_created_at",
    "truth_document",
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


class CaptureSpill:
    """The captured requests, spilled to one scratch file per day of receipt as they are made,
    a chunk of :attr:`CHUNK` per day at a time, then written out day by day as the capture logs
    (:meth:`write`): memory holds one day.

    A request's body is kept as its reference in ``bodies`` when it has one. Per day, the
    receipt times and which requests are plain (a service request answered below 300) stay in
    memory: they place the planted lines before any line is written.
    """

    CHUNK = 512  # requests of one day spilled at once

    def __init__(self, folder: Path, bodies: Bodies) -> None:
        self.folder = folder
        self.bodies = bodies
        self.recv: dict[str, array[float]] = {}  # per day: receipt times, in the order made
        self.plain: dict[str, bytearray] = {}  # per day: 1 for a plain request
        self._rows: dict[str, list] = {}  # per day: requests not spilled yet
        self._day = (0.0, 0.0, "")  # receipt times well inside the last day seen, and its name

    def add(self, rec: Record) -> None:
        """Spill ``rec`` to its day's file (a chunk at a time)."""
        lo, hi, day = self._day
        if not lo < rec.recv < hi:  # near a day's ends, the clock's rounding decides
            when = datetime.fromtimestamp(rec.recv, UTC)
            day = when.date().isoformat()
            start = datetime(when.year, when.month, when.day, tzinfo=UTC).timestamp()
            self._day = (start + 0.001, start + DAY - 0.001, day)
        rows = self._rows.get(day)
        if rows is None:
            rows = self._rows[day] = []
            self.recv.setdefault(day, array("d"))
            self.plain.setdefault(day, bytearray())
        self.recv[day].append(rec.recv)
        self.plain[day].append(rec.kind == "service" and rec.status < 300)
        text = rec.text if rec.body < 0 else ""
        head = (rec.recv, rec.sub, rec.headers, text, rec.body, rec.status, rec.ms, rec.kind)
        rows.append((*head, rec.did, rec.event_id, rec.attempt, rec.key_index, rec.inflight))
        if len(rows) >= self.CHUNK:
            self._spill(day)

    def _spill(self, day: str) -> None:
        rows = self._rows.pop(day, None)
        if rows:
            data = marshal.dumps(rows)
            with open(self.folder / day, "ab") as f:
                f.write(len(data).to_bytes(8, "little") + data)

    def records(self, day: str) -> list[Record]:
        """``day``'s requests, sorted by receipt (ties in the order made)."""
        self._spill(day)
        out = []
        texts: dict[int, str] = {}  # bodies read, by reference (retries share their event's)
        data, at = memoryview((self.folder / day).read_bytes()), 0
        while at < len(data):
            size = int.from_bytes(data[at : at + 8], "little")
            rows = marshal.loads(data[at + 8 : at + 8 + size])
            at += 8 + size
            for recv, sub, headers, text, body, status, ms, kind, *more in rows:
                did, event_id, attempt, key_index, inflight = more
                if body >= 0:
                    text = texts.get(body)
                    if text is None:
                        text = texts[body] = self.bodies.get(body)
                rec = Record(recv, sub, headers, text)
                rec.status, rec.ms, rec.kind, rec.did, rec.body = status, ms, kind, did, body
                rec.event_id, rec.attempt, rec.key_index = event_id, attempt, key_index
                rec.inflight = inflight
                out.append(rec)
        del data
        (self.folder / day).unlink()
        out.sort(key=lambda r: r.recv)
        return out

    def write(
        self, rng: random.Random, folder: Path, seen: Witness, progress: Progress | None = None
    ) -> tuple[list[Path], list[dict[str, object]]]:
        """One JSON Lines file per day of receipt, sorted by receipt; plants the unreadable lines
        (the probe line is a record ``progress`` counts; each file is counted once written).
        ``seen`` sees every request in the order written."""
        tally = counting(progress)
        days = sorted(self.recv)
        n = sum(len(self.recv[d]) for d in days)
        plain: list[int] = []  # positions in the order of receipt
        offset = 0
        for day in days:
            recv, flags = self.recv[day], self.plain[day]
            order = sorted(range(len(recv)), key=recv.__getitem__)
            plain += [offset + rank for rank, j in enumerate(order) if flags[j]]
            offset += len(recv)
        cut = next(i for i in plain if i >= int(0.37 * n))
        picks = rng.sample([i for i in plain if i != cut], 3 * max(2, n // 600))
        del plain
        k = len(picks) // 3
        styles = dict.fromkeys(picks[:k], "plus2") | dict.fromkeys(picks[k : 2 * k], "unix")
        styles |= dict.fromkeys(picks[2 * k :], "b64")
        unreadable: list[dict[str, object]] = []
        folder.mkdir(parents=True)
        tally.expect_files(len(days))
        i = 0
        for day in days:
            name = f"receiver-{day}.jsonl"
            lines: list[str] = []
            for rec in self.records(day):
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
                seen.see(rec)
                i += 1
            (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
            tally.file_done()
        return [folder / f"receiver-{day}.jsonl" for day in days], unreadable


class Witness:
    """What ``truth.json`` lists of the captured requests, seen in the order of receipt, and
    the ``attacks`` (the attacker's requests, in the order made)."""

    def __init__(self, attacks: list[Record]) -> None:
        self.attacks = attacks
        self.service = 0  # service requests captured
        self.answered_401: list[str] = []
        self.slow: list[Record] = []  # acknowledged after the delivery timeout
        self.inflight: list[str] = []

    def see(self, rec: Record) -> None:
        """Note ``rec`` (requests come in the order of receipt)."""
        if rec.kind != "service":
            return
        self.service += 1
        if rec.status == 401:
            self.answered_401.append(rec.did)
        if rec.status < 300 and rec.ms > DELIVERY_TIMEOUT_MS:
            rec.text, rec.headers = "", []  # only its ids and ms are listed
            self.slow.append(rec)
        if rec.inflight:
            self.inflight.append(rec.did)


def write_json(path: Path, obj: object, mode: int = 0o644) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    os.fchmod(fd, mode)  # whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return path


def subscription_created_at(plan: FaultPlan, sub: str) -> float:
    return plan.start - SUBS[sub].age_days * DAY + 37_000.0


def write_snapshot(folder: Path, plan: FaultPlan, latest: Latest, at: float) -> Path:
    """GET /webhooks as fetched at ``at`` (one of ``latest``'s moments): lastDeliveryStatus
    is the last finished event's."""
    subs = []
    for sid, spec in SUBS.items():
        done = latest.last(sid, at)
        last = None if sid == "wh_legacy" else "failed" if done and not done[1] else "success"
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


class Events(NamedTuple):
    """What ``truth.json`` lists of the events delivered (in the order first sent)."""

    total: int
    webhook_tests: list[str]
    non_ascii: list[str]


def truth_document(
    plan: FaultPlan, run: DeliveryRun, seen: Witness, events: Events, facts: list[dict]
) -> dict:
    """Everything planted, read from what happened in the run (never a secret value)."""
    attacks = sorted(seen.attacks, key=lambda r: r.recv)

    def exhausted(a: float, b: float) -> list[dict]:
        failed = [o for o in run.failed if a <= o.last_sent < b]
        return [{"event_id": o.event_id, "subscription_id": o.subscription_id} for o in failed]

    def rows(recs: list[Record], *keys: str) -> list[dict]:
        return [
            {"delivery_id": r.did, "subscription_id": r.sub, **{k: getattr(r, k) for k in keys}}
            for r in recs
        ]

    waiting = [f for f in facts if f["status"] in ("approval_required", "action_required")]
    for f in waiting:
        f["over_24h"] = plan.end - datetime.fromisoformat(f["since"]).timestamp() > DAY
    return {
        "period": window(plan.start, plan.end),
        "receiver_outage": window(*plan.outage, status=503, exhausted=exhausted(*plan.outage)),
        "network_outage": window(
            *plan.network,
            lost=rows(run.lost, "event_id", "attempt"),
            gap_event_ids=sorted(run.gaps),
        ),
        "secret_rotation": {"subscription_id": "wh_main", "at": iso(plan.rotation, "seconds")},
        "stale_secret": window(
            plan.rotation,
            plan.stale_until,
            answered_401_delivery_ids=seen.answered_401,
            exhausted=exhausted(plan.rotation, plan.stale_until),
            inflight_new_secret_delivery_ids=seen.inflight,
        ),
        "slow_acks": rows(seen.slow, "event_id", "ms"),
        "clock_drift": window(*plan.drift, max_offset_s=plan.drift_max_s),
        "attacks": [
            row | {"received_at": iso(a.recv, "microseconds"), **a.extra}
            for row, a in zip(rows(attacks, "kind", "status"), attacks, strict=True)
        ],
        "wrongly_accepted": [a.did for a in attacks if a.status < 300],
        "webhook_tests": events.webhook_tests,
        "non_ascii_event_ids": events.non_ascii,
        "open_incidents": [f for f in facts if f["status"] not in ("closed", "takedown_success")],
        "waiting_on_client": waiting,
        "counts": {
            "incidents": len(facts),
            "events": events.total,
            "attempts_captured": seen.service,
            "attempts_lost": len(run.lost),
            "attacks": len(attacks),
        },
    }
