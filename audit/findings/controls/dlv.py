"""DLV controls: how the service's deliveries went (valid deliveries and events only)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from audit.findings.controls.base import (
    Outcome,
    Scope,
    counts,
    delivery_examples,
    listed,
    pct,
    quantiles,
    skip,
    verdict,
)
from audit.spec import DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS
from audit.timeutil import duration

_TIMEOUT_S = DELIVERY_TIMEOUT_MS / 1000
_NO_EVENT = "No event was first received in the period."


def _events(e: pd.DataFrame) -> str:
    """The events judged, counted as the report's tables count them: incident events, and
    the test events beside them (the tables leave those out).

    >>> _events(pd.DataFrame({"is_test": [False, False, True]}))
    '3 events first received in the period (2 incident events, 1 test event)'
    """
    n_test = int(e["is_test"].fillna(False).astype(bool).sum()) if "is_test" in e else 0
    what = f"{len(e)} events first received in the period"
    if not n_test:
        return what
    return (
        f"{what} ({len(e) - n_test} incident events, {n_test} test event"
        f"{'s' if n_test > 1 else ''})"
    )


def dlv_01(s: Scope) -> Outcome:
    """The share of valid deliveries answered after more than 5 s is at most
    ``max_slow_ack_rate`` (whatever the status: past 5 s the service counts a timeout)."""
    res, limit, v = "all deliveries", s.params["max_slow_ack_rate"], s.valid
    if v.empty:
        return skip("No valid delivery was received in the period.", res)
    ms = v["response_ms"]
    ack_ms = ms[ms.notna()]
    if ack_ms.empty:
        return skip(f"No response_ms was captured for the {len(v)} valid deliveries.", res)
    late = (ms > DELIVERY_TIMEOUT_MS).fillna(False).astype(bool)  # the rows shown are copied
    slow = v[late].sort_values("received_at")
    rate = len(slow) / len(ack_ms)
    ev: dict[str, Any] = {
        "deliveries": len(ack_ms),
        "slow": len(slow),
        "rate": rate,
        "threshold": limit,
        "ack_ms": quantiles(ack_ms),
    }
    ev |= delivery_examples(slow)
    ok = rate <= limit
    reason = (
        f"{len(slow)} of {len(ack_ms)} valid deliveries ({pct(rate)}) were answered after more "
        f"than {_TIMEOUT_S:g} s, {'within' if ok else 'above'} the limit of {pct(limit)}."
    )
    return verdict(ok, reason, res, ev)


def dlv_02(s: Scope) -> Outcome:
    """First-attempt success rate (2xx within 5 s) is at least ``min_first_attempt_success``.

    First attempts are the first observed attempt of each incident event (``attempt_no`` 1) with
    a captured answer; test deliveries are left out.
    """
    res, limit, v = "all deliveries", s.params["min_first_attempt_success"], s.valid
    # Masks over every delivery; only the failed first attempts (shown) are copied.
    first = (v["attempt_no"] == 1).fillna(False).astype(bool) & ~v["is_test"].astype(bool)
    success = v["success"]
    known = first & success.notna()
    n_known = int(known.sum())
    if not n_known:
        what = "with a response_status " if first.any() else ""
        return skip(f"No first attempt {what}of an incident event was received in the period.", res)
    succeeded = success[known].astype(bool).to_numpy()  # judged where known only, as answers are
    failed = v.iloc[np.flatnonzero(known.to_numpy())[~succeeded]].sort_values("received_at")
    rate = 1 - len(failed) / n_known
    slow = (failed["response_ms"] > DELIVERY_TIMEOUT_MS).fillna(False).astype(bool)
    answer = failed["response_status"].astype("string").where(~slow, "slow")
    ev: dict[str, Any] = {
        "first_attempts": n_known,
        "failed": len(failed),
        "rate": rate,
        "threshold": limit,
        "failed_by_answer": counts(answer),
    }
    ev |= delivery_examples(failed)
    ok = rate >= limit
    reason = (
        f"{n_known - len(failed)} of {n_known} first attempts succeeded ({pct(rate)}), "
        f"{'at least' if ok else 'below'} the {pct(limit)} required."
    )
    return verdict(ok, reason, res, ev)


def dlv_03(s: Scope) -> Outcome:
    """No event ended ``exhausted`` or ``lost`` (test events included: they failed too)."""
    res, e = "all events", s.events
    if e.empty:
        return skip(_NO_EVENT, res)
    if (e["outcome"] == "unknown").all():
        return skip("No response_status was captured, so no event outcome is known.", res)
    bad = e[e["outcome"].isin(["exhausted", "lost"])].sort_values("first_received_at")
    ev = {
        "events": len(e),
        "by_outcome": counts(e["outcome"]),
        "failed_by_subscription": counts(bad["subscription_id"]),
        **listed("examples", bad["event_id"]),
        **listed("incidents", bad["incident_id"]),
    }
    if bad.empty:
        reason = f"None of the {_events(e)} was exhausted or lost."
        return Outcome("pass", reason, res, ev)
    exhausted = int((bad["outcome"] == "exhausted").sum())
    reason = (
        f"{len(bad)} of the {_events(e)} never got through: {exhausted} exhausted, "
        f"{len(bad) - exhausted} lost."
    )
    return Outcome("fail", reason, res, ev)


def dlv_04(s: Scope) -> Outcome:
    """The retries keep the schedule: no attempt off schedule, none above 5, no retry after a
    timely 2xx."""
    res, e = "all events", s.events
    if e.empty:
        return skip(_NO_EVENT, res)
    off = e["off_schedule"] > 0
    many = e["too_many_attempts"].astype(bool)
    after = e["retry_after_success"].astype(bool)
    bad = e[off | many | after].sort_values("first_received_at")
    ev = {
        "events": len(e),
        "off_schedule_events": int(off.sum()),
        "off_schedule_attempts": int(e["off_schedule"].sum()),
        "above_max_attempts": int(many.sum()),
        "retry_after_timely_2xx": int(after.sum()),
        **listed("examples", bad["event_id"]),
    }
    if bad.empty:
        reason = f"The retries of all the {_events(e)} kept the published schedule."
        return Outcome("pass", reason, res, ev)
    reason = (
        f"{len(bad)} of the {_events(e)} broke the retry rules: {int(off.sum())} off schedule, "
        f"{int(many.sum())} above {MAX_ATTEMPTS} attempts, {int(after.sum())} retried after a "
        "timely 2xx."
    )
    return Outcome("fail", reason, res, ev)


def dlv_05(s: Scope) -> Outcome:
    """p95 emission latency (first receipt minus the envelope's timestamp) of incident events
    is at most ``max_emission_latency_s``."""
    res, limit, e = "all events", s.params["max_emission_latency_s"], s.events
    e = e[["event_id", "is_test", "emission_latency_s"]]  # rows cut in the columns read
    e = e[~e["is_test"].astype(bool) & e["emission_latency_s"].notna()]
    if e.empty:
        return skip("No incident event with an emission latency was received in the period.", res)
    latency = e["emission_latency_s"].astype(float)
    stats = quantiles(latency)
    over = e.assign(_lat=latency)[latency > limit].sort_values("_lat", ascending=False)
    ev = {
        "emission_latency_s": stats,
        "threshold_s": limit,
        "over_threshold": len(over),
        **listed("examples", over["event_id"]),
    }
    ok = stats["p95"] <= limit
    reason = (
        f"p95 emission latency over {len(e)} incident events is {duration(stats['p95'])}, "
        f"{'within' if ok else 'above'} {limit:g} s."
    )
    return verdict(ok, reason, res, ev)


def dlv_06(s: Scope) -> Outcome:
    """How many events were accepted (2xx) more than once; always ``info``."""
    res, e = "all events", s.events
    if e.empty:
        return Outcome("info", _NO_EVENT, res, {"events": 0})
    many = e[e["accepted_count"] > 1].sort_values("first_received_at")
    ev = {
        "events": len(e),
        "accepted_more_than_once": len(many),
        "max_accepted": int(e["accepted_count"].max()),
        **listed("examples", many["event_id"]),
    }
    reason = (
        f"{len(many)} of the {_events(e)} were accepted more than once; the receiver must "
        "process events idempotently, keyed on the event id."
    )
    return Outcome("info", reason, res, ev)


def dlv_07(s: Scope) -> Outcome:
    """No validly signed delivery lacks the event envelope: a body without a string ``id`` and
    ``event`` (not JSON, not an object, or those fields missing) is in no events table, so no
    other control would show it."""
    res, v = "all deliveries", s.valid
    if v.empty:
        return skip("No valid delivery was received in the period.", res)
    bare = v[v["event_id"].isna() | v["event"].isna()].sort_values("received_at")
    ev: dict[str, Any] = {"deliveries": len(v), "without_envelope": len(bare)}
    ev |= delivery_examples(bare)
    if bare.empty:
        return verdict(True, f"All {len(v)} valid deliveries carry an event envelope.", res, ev)
    reason = (
        f"{len(bare)} of {len(v)} validly signed deliveries carry no event envelope (a string "
        "id and event); they are in no events table."
    )
    return verdict(False, reason, res, ev)
