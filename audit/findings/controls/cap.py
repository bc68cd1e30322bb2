"""CAP controls: whether the captures cover the period (the evidence every other control reads)."""

from __future__ import annotations

from typing import Any

from audit.findings.controls.base import Outcome, Scope, capped, skip, verdict


def cap_01(s: Scope) -> Outcome:
    """No span of 24 h or more of the period (up to ``as_of``) went without a capture, when
    the period's median day held captures, or its median day outside the longest run of days
    without a capture did (one outage longer than half the period is still an outage;
    :func:`audit.analysis.coverage.capture_coverage`).

    A period without any capture skips (the empty period is told apart); so does a quiet
    receiver, whose median day held no capture: a day without one is its normal state.
    """
    res, c = "all captures", s.capture
    days, held = int(c["days"]), int(c["days_with_captures"])
    ev: dict[str, Any] = {
        "window": c["window"],
        "captures": c["captures"],
        "days": days,
        "days_with_captures": held,
        "median_captures_per_day": c["median_per_day"],
        "hours": c["hours"],
        "hours_with_captures": c["hours_with_captures"],
        **capped("days_without", [f"{a} to {b}" if a != b else a for a, b in c["days_without"]]),
    }
    if not c["captures"]:
        return skip("No request with a receipt time was captured in the period.", res, **ev)
    if not c["judged"]:
        reason = (
            f"A quiet receiver: {held} of {days} days held captures and the median day none, "
            "so a day without a capture is normal here; gaps are not judged."
        )
        return skip(reason, res, **ev)
    gaps = c["gaps"]
    ev |= capped(
        "gaps", [{k: g[k] for k in ("start", "end")} | {"length_h": g["hours"]} for g in gaps]
    )
    if not gaps:
        reason = (
            f"No span of 24 h or more went without a capture; {held} of {days} days held captures."
        )
        return verdict(True, reason, res, ev)
    longest = max(float(g["hours"]) for g in gaps)
    reason = (
        f"{len(gaps)} span(s) of 24 h or more went without any capture (longest "
        f"{longest / 24:.1f} days); {held} of {days} days held captures: deliveries in those "
        "spans are unseen by every control."
    )
    return verdict(False, reason, res, ev)
