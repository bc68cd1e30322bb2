"""TKD controls: time to takedown (Kaplan–Meier) and incidents left waiting.

TKD-01/02 judge the incidents *created in the period* (their durations run, censored, to
``as_of``); TKD-03/04 judge the incidents created in the period **or** still open at ``as_of``
(created before the period's end), because a wait or a silence that began earlier still
matters now.
"""

from __future__ import annotations

import pandas as pd

from audit.analysis.survival import SMALL_SAMPLE_N, kaplan_meier, km_quantile
from audit.findings.controls.base import (
    DONE_STATUSES,
    MAX_EXAMPLES,
    Outcome,
    Scope,
    listed,
    member_of,
    skip,
    verdict,
)
from audit.spec import CLIENT_WAIT_STATUSES
from audit.timeutil import duration

_NO_INCIDENT = "No incident was created in the period or is open at as_of."


def _hours(seconds: float | None) -> float | None:
    return None if seconds is None else seconds / 3600.0


def time_to_takedown(s: Scope, q: float, label: str, limit_h: float) -> Outcome:
    """The Kaplan–Meier quantile ``q`` of time to takedown, against ``limit_h`` hours.

    Reached: ``pass`` when it is at most the limit, else ``fail``. Not reached (censoring
    keeps the curve above ``1 - q``): ``fail`` when the follow-up (the longest duration,
    observed or censored) reaches the limit, since the curve is then known to be above
    ``1 - q`` at the limit; otherwise ``skip``, as it cannot be judged yet.
    """
    res, created = "all incidents", s.incidents_created
    if created.empty:
        return skip("No incident was created in the period.", res)
    durations = s.analysis.takedown_durations
    d = durations[member_of(durations["incident_id"], created["incident_id"])]
    if d.empty:
        reason = f"None of the {len(created)} incidents created in the period has a duration."
        return skip(reason, res, excluded=len(created))
    est = km_quantile(
        kaplan_meier(d["duration_s"].to_numpy(float), d["observed"].to_numpy(bool)), q
    )
    limit_s, follow_s = limit_h * 3600.0, float(d["duration_s"].max())
    slow = d[d["duration_s"] > limit_s].sort_values("duration_s", ascending=False)
    ev = {
        "incidents": len(d),
        "excluded": len(created) - len(d),
        "taken_down": int(d["observed"].sum()),
        "censored": int((~d["observed"].astype(bool)).sum()),
        "clock_start": s.analysis.clock_start,
        f"{label}_h": _hours(est.time),
        "ci_lower_h": _hours(est.ci_lower),
        "ci_upper_h": _hours(est.ci_upper),
        "reached": est.reached,
        "max_follow_up_h": follow_s / 3600.0,
        "threshold_h": limit_h,
        "small_sample": len(d) < SMALL_SAMPLE_N,
        "over_threshold": len(slow),
        **listed("examples", slow["incident_id"]),
    }
    name = f"Kaplan-Meier {label} time to takedown"
    if est.reached and est.time is not None:  # reached: a time (KMQuantile)
        ok = est.time <= limit_s
        reason = (
            f"The {name} over the {len(d)} incidents created in the period is "
            f"{duration(est.time)}, "
            f"{'within' if ok else 'above'} {limit_h:g} h."
        )
        return verdict(ok, reason, res, ev)
    if follow_s >= limit_s:
        reason = (
            f"The {name} is not reached: fewer than {q:.0%} of the {len(d)} incidents created "
            f"in the period were taken down within {limit_h:g} h, so it is above {limit_h:g} h."
        )
        return Outcome("fail", reason, res, ev)
    reason = (
        f"The {name} is not reached within the {duration(follow_s)} of follow-up, "
        f"shorter than {limit_h:g} h: it cannot be judged yet."
    )
    return skip(reason, res, **ev)


def tkd_01(s: Scope) -> Outcome:
    """Kaplan–Meier median time to takedown is at most ``ttt_median_h``."""
    return time_to_takedown(s, 0.5, "median", s.params["ttt_median_h"])


def tkd_02(s: Scope) -> Outcome:
    """Kaplan–Meier p90 time to takedown is at most ``ttt_p90_h``."""
    return time_to_takedown(s, 0.9, "p90", s.params["ttt_p90_h"])


def tkd_03(s: Scope) -> Outcome:
    """No incident has waited on the client longer than ``max_client_wait_h`` at as_of.

    The wait is the incident's current status interval in ``approval_required`` or
    ``action_required``, measured up to ``as_of``.
    """
    res, limit_h, inc = "all incidents", s.params["max_client_wait_h"], s.incidents_current
    if inc.empty:
        return skip(_NO_INCIDENT, res)
    iv = s.analysis.status_intervals
    waiting = iv[
        iv["current"].astype(bool)
        & iv["status"].isin(CLIENT_WAIT_STATUSES)
        & member_of(iv["incident_id"], inc["incident_id"])
    ].sort_values("duration_s", ascending=False)
    over = waiting[waiting["duration_s"] > limit_h * 3600.0]
    longest = float(waiting["duration_s"].max()) / 3600.0 if len(waiting) else None
    ev = {
        "incidents": len(inc),
        "waiting_on_client": len(waiting),
        "over_threshold": len(over),
        "threshold_h": limit_h,
        "max_wait_h": longest,
        **listed("examples", over["incident_id"]),
        "wait_h": {
            str(i): d / 3600.0
            for i, d in zip(
                over["incident_id"][:MAX_EXAMPLES], over["duration_s"][:MAX_EXAMPLES], strict=True
            )
        },
        "wait_h_total": len(over),
    }
    if over.empty:
        reason = (
            f"{len(waiting)} of the {len(inc)} incidents created in the period or still open "
            f"wait on the client at as_of, none for more than {limit_h:g} h."
        )
        return Outcome("pass", reason, res, ev)
    reason = (
        f"{len(over)} incident(s) have waited on the client for more than {limit_h:g} h at "
        f"as_of (longest {duration(None if longest is None else longest * 3600)})."
    )
    return Outcome("fail", reason, res, ev)


def tkd_04(s: Scope) -> Outcome:
    """No open incident has been silent longer than ``max_silence_days`` at as_of.

    Open: status not ``closed`` nor ``takedown_success``. Silence: ``as_of`` minus the latest
    of the last event and the last history update.
    """
    res, limit_d, inc = "all incidents", s.params["max_silence_days"], s.incidents_current
    if inc.empty:
        return skip(_NO_INCIDENT, res)
    open_ = inc[~inc["status"].isin(DONE_STATUSES)]
    if open_.empty:  # nothing can have been silent: no evidence, no pass
        reason = f"None of the {len(inc)} incidents judged is open at as_of: none can be silent."
        return skip(reason, res, incidents=len(inc), open=0)
    last = pd.concat([open_["last_event_at"], open_["last_history_update_at"]], axis=1).max(axis=1)
    silent_d = (s.as_of - last).dt.total_seconds() / 86400.0
    over = open_.assign(_silent=silent_d)[silent_d > limit_d].sort_values(
        "_silent", ascending=False
    )
    longest = float(silent_d.max()) if len(open_) else None
    ev = {
        "incidents": len(inc),
        "open": len(open_),
        "over_threshold": len(over),
        "threshold_days": limit_d,
        "max_silence_days": longest,
        **listed("examples", over["incident_id"]),
    }
    if over.empty:
        reason = (
            f"None of the {len(open_)} open incidents has been silent for more than "
            f"{limit_d:g} days."
        )
        return Outcome("pass", reason, res, ev)
    reason = (
        f"{len(over)} of {len(open_)} open incidents have had no event for more than "
        f"{limit_d:g} days (longest {duration(None if longest is None else longest * 86400)})."
    )
    return Outcome("fail", reason, res, ev)
