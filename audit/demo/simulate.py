"""Deterministic demo data that follows the service's published webhook rules (spec 3, 5, 6).

:func:`simulate` writes receiver captures, a secrets file, three GET /webhooks snapshots and a
``truth.json`` listing everything planted. Everything derives from ``seed`` and ``start``; the wall
clock is never read, and the same arguments give the same bytes. The work is split by job:
:mod:`~audit.demo.plan` places the faults (and lists them), :mod:`~audit.demo.lifecycle` makes
the incidents' events, :mod:`~audit.demo.delivery` runs the service's delivery loop and the
attacker, :mod:`~audit.demo.write` writes the files.

Also: incidents still open at the end, four waiting on the client for more than 24 h at the end,
and ``webhook.test`` deliveries (one early, one after each repair).

It streams: the events' bodies (:class:`~audit.demo.spill.Bodies`) and the captured requests
(:class:`~audit.demo.write.CaptureSpill`) go to scratch files in a hidden folder as they are
made, and the captures are written one day at a time; memory holds about a day (a month of 1M
deliveries peaks under 1 GiB).

The folder appears whole or not at all, and private: everything is written into a new folder
of mode 0700 beside ``out_dir`` (``.<name>.simulate-*``, which no one else can enter), renamed
to ``out_dir`` at the end. Nothing can be planted in the demo data while it is made (a shared
``/tmp`` let anyone add a capture file or a secret to the folder an analyst then opened).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import NamedTuple

from audit.demo.delivery import DeliveryRun
from audit.demo.lifecycle import incident_events, webhook_tests
from audit.demo.plan import SUBS, FaultPlan, H, plan_faults
from audit.demo.spill import Bodies
from audit.demo.write import (
    CaptureSpill,
    Events,
    Witness,
    subscription_created_at,
    truth_document,
    write_json,
    write_snapshot,
)
from audit.errors import InputError, ParameterError
from audit.progress import Progress, counting
from audit.service.wire import iso
from audit.timeutil import LAST_YEAR

__all__ = ["FaultPlan", "SimulationResult", "plan_faults", "simulate"]


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


def simulate(
    out_dir: str | os.PathLike,
    *,
    seed: int = 7,
    start: date = date(2026, 10, 1),
    days: int = 31,
    incidents: int = 300,
    progress: Progress | None = None,
) -> SimulationResult:
    """Write a deterministic period of demo data that follows the service's published rules.

    Parameters
    ----------
    out_dir
        An empty or missing folder; receives ``captures/``, ``snapshots/``, ``secrets.json``
        (mode 0600) and ``truth.json`` (everything planted, never a secret value), all at
        once (made in a private folder beside it, renamed into place); it is then of mode
        0700. A folder that is no longer empty at the end is refused (InputError) and left
        as it is; the private folder is removed after an error too.
    seed
        Seed of the one ``random.Random`` everything derives from.
    start, days
        The period: ``days`` days (at least 7) from ``start`` 00:00 UTC.
    incidents
        Number of incidents (at least 20; 14 of them are planted around the faults).
    progress
        Counts the capture records as they are made and the capture files as each is
        written (default: nothing is counted or shown).

    Returns
    -------
    SimulationResult

    Examples
    --------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     r = simulate(Path(folder, "demo"), days=7, incidents=20)
    ...     print(sorted(p.name for p in r.truth.parent.iterdir()))
    ...     print(r.captures[0].name, len(r.captures), len(r.snapshots))
    ['captures', 'secrets.json', 'snapshots', 'truth.json']
    receiver-2026-10-02.jsonl 6 3
    >>> r.incidents, r.events, r.attempts, r.records
    (20, 193, 454, 464)
    """
    out = Path(out_dir)
    if incidents < 20:
        raise ParameterError(f"incidents must be at least 20 (got {incidents})")
    # Signed timestamps are Unix seconds in digits: none before 1970 (the data failed its own
    # verification). Retries run two days past the end, which must stay within LAST_YEAR.
    if (
        not date(1970, 1, 1) <= start <= date(LAST_YEAR, 1, 1)
        or (start + timedelta(days=days + 2)).year > LAST_YEAR
    ):
        raise ParameterError(f"start {start} and {days} days: 1970 to {LAST_YEAR} only")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InputError(f"{out}: the output folder must be empty or missing")
    plan = plan_faults(start, days)
    rng = random.Random(seed)
    keys = {
        s: [f"whsec_{rng.getrandbits(128):032x}" for _ in range(n)]
        for s, n in (("wh_main", 2), ("wh_siem", 1))
    }
    daily_offset = [rng.uniform(-1.0, 2.5) for _ in range(days + 2)]
    where = Path(os.path.abspath(out))  # "." too has a name and a parent
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{where.name}.simulate-", dir=where.parent))  # 0700
    try:
        made = _write(work, rng, plan, keys, daily_offset, incidents, progress)
        _publish(work, where)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    moved = [Path(out, p.relative_to(work)) for p in (*made.captures, *made.snapshots)]
    return SimulationResult(
        moved[: len(made.captures)],
        out / made.secrets.relative_to(work),
        moved[len(made.captures) :],
        out / made.truth.relative_to(work),
        made.records,
        made.attempts,
        made.events,
        made.incidents,
    )


def _publish(work: Path, out: Path) -> None:
    """Rename the finished folder ``work`` to ``out`` (missing, or an empty folder, which it
    replaces; a link there, or a folder no longer empty, refuses it: never followed, never
    merged)."""
    try:
        os.rename(work, out)
    except OSError as e:
        raise InputError(
            f"{out}: the output folder must be empty or missing (it could not be replaced: "
            f"{e.strerror or type(e).__name__}); the demo data was not written"
        ) from None


def _write(
    out: Path,
    rng: random.Random,
    plan: FaultPlan,
    keys: dict[str, list[str]],
    daily_offset: list[float],
    incidents: int,
    progress: Progress | None,
) -> SimulationResult:
    """Write the demo data into the (private, new) folder ``out``."""
    with tempfile.TemporaryDirectory(prefix=".simulate-", dir=out) as scratch:
        bodies = Bodies(Path(scratch, "bodies"))
        try:
            spill = CaptureSpill(Path(scratch), bodies)
            made = _run(rng, plan, keys, daily_offset, incidents, bodies, spill, progress)
            captures, unreadable = spill.write(rng, out / "captures", made.seen, progress)
        finally:
            bodies.close()
    run = made.run
    main = [
        {
            "secret": keys["wh_main"][0],
            "valid_from": iso(subscription_created_at(plan, "wh_main"), "seconds"),
        },
        {"secret": keys["wh_main"][1], "valid_from": iso(plan.rotation, "seconds")},
    ]
    secrets = {"wh_main": main, "wh_siem": [{"secret": keys["wh_siem"][0]}]}
    secrets_path = write_json(out / "secrets.json", secrets, mode=0o600)
    snapshots = [write_snapshot(out / "snapshots", plan, run.latest, at) for at in run.moments]
    truth = truth_document(plan, run, made.seen, made.events, made.facts)
    truth_path = write_json(out / "truth.json", truth | {"unreadable_lines": unreadable})
    return SimulationResult(
        captures,
        secrets_path,
        snapshots,
        truth_path,
        run.captured + 1,
        made.seen.service,
        made.events.total,
        len(made.facts),
    )


class _Made(NamedTuple):
    run: DeliveryRun
    seen: Witness  # fed as the captures are written
    events: Events
    facts: list[dict]


def _run(
    rng: random.Random,
    plan: FaultPlan,
    keys: dict[str, list[str]],
    daily_offset: list[float],
    incidents: int,
    bodies: Bodies,
    spill: CaptureSpill,
    progress: Progress | None,
) -> _Made:
    """Make the incidents' events and deliver them, each request spilled as it is made."""
    moments = (plan.start, plan.outage[1], plan.end + 3 * H)
    run = DeliveryRun(rng, plan, keys, daily_offset, spill.add, moments)
    tally = counting(progress)
    events, facts = incident_events(rng, plan, incidents, bodies, tally)
    events = sorted(events + webhook_tests(rng, plan, bodies), key=lambda e: (e.emit, e.eid))
    tests, non_ascii = [], []
    for ev in events:
        made = run.captured
        text = bodies.get(ev.body)
        for sub in ev.subs or [s for s in ("wh_main", "wh_siem") if ev.event in SUBS[s].events]:
            run.deliver(ev, text, sub)
        tally.add_records(run.captured - made)
        if ev.event == "webhook.test":
            tests.append(ev.eid)
        if not text.isascii():
            non_ascii.append(ev.eid)
    attacks = run.attacks([f["incident_id"] for f in facts])
    for rec in attacks:
        run.capture(rec)
    tally.add_records(len(attacks))
    return _Made(run, Witness(attacks), Events(len(events), tests, non_ascii), facts)
