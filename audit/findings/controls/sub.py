"""SUB controls: subscription hygiene, judged on ``GET /webhooks`` listing snapshots.

The snapshots judged are those that cover the period (:mod:`audit.findings.listing`): fetched in
the period, or the newest one fetched before it when none falls in it and it is at most 7 days
older than the period's end (:attr:`audit.findings.controls.base.Scope.snapshots`). Without
one, every SUB control is ``skip`` and says why: a listing of another month is no evidence.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import numpy as np

from audit.findings.controls.base import (
    Outcome,
    Scope,
    capped,
    groups,
    iso,
    listed,
    skip,
    verdict,
)
from audit.findings.listing import uncovered_reason
from audit.spec import INCIDENT_EVENTS, MAX_SUBSCRIPTIONS_PER_CLIENT

_NO_CLIENT, _NO_ID = "(no client id)", "(no id)"


def _no_listing(s: Scope) -> str:
    """Why no snapshot is judged: none given, or none that covers the period."""
    return uncovered_reason(s.analysis.subscriptions["fetched_at"], s.period_start, s.period_end)


def is_https(url: object) -> bool:
    """Whether ``url`` is an absolute ``https://`` URL with a host (scheme case-insensitive).

    >>> is_https("HTTPS://hooks.example/x"), is_https("http://hooks.example/x")
    (True, False)
    """
    if not isinstance(url, str):
        return False
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme.lower() == "https" and bool(host)


def sub_01(s: Scope) -> list[Outcome]:
    """No client has more than 5 subscriptions in any snapshot; one row per client."""
    snaps, cap = s.snapshots, MAX_SUBSCRIPTIONS_PER_CLIENT
    if snaps.empty:
        return [skip(_no_listing(s), "all clients")]
    out = []
    for client, g in groups(snaps, "client_id", _NO_CLIENT):
        per = g.groupby(["fetched_at", "source"], dropna=False)["subscription_id"].nunique()
        top = int(np.argmax(per.to_numpy()))  # the first largest, as idxmax
        worst = int(per.iloc[top])
        at = per.index.get_level_values("fetched_at")[top]
        source = per.index.get_level_values("source")[top]
        shown = g[(g["fetched_at"] == at) & (g["source"] == source)]
        ev = s.snapshot_note() | {
            "max_subscriptions": worst,
            "limit": cap,
            "at": iso(at),
            **listed("examples", shown["subscription_id"]),
        }
        ok = worst <= cap
        reason = (
            f"The client had at most {worst} subscriptions in a snapshot, "
            f"{'within' if ok else 'over'} the limit of {cap}."
        )
        out.append(verdict(ok, reason, client, ev))
    return out


def sub_02(s: Scope) -> list[Outcome]:
    """Every subscription URL is HTTPS; one row per subscription (any judged snapshot)."""
    if s.snapshots.empty:
        return [skip(_no_listing(s), "all subscriptions")]
    out = []
    for sub, g in groups(s.snapshots, "subscription_id", _NO_ID):
        urls = list(dict.fromkeys(g["url"].dropna()))
        if not urls:
            out.append(skip("The listing gives no URL for this subscription.", sub))
            continue
        bad = [u for u in urls if not is_https(u)]
        ev = capped("urls", urls) | capped("not_https", bad)
        if bad:
            reason = (
                f"{len(bad)} of the {len(urls)} URL(s) listed for the subscription are not HTTPS."
            )
            out.append(Outcome("fail", reason, sub, ev))
        else:
            out.append(Outcome("pass", "Every URL listed for the subscription is HTTPS.", sub, ev))
    return out


def sub_03(s: Scope) -> list[Outcome]:
    """In every judged snapshot, the client's active subscriptions together receive every
    incident event type; one row per client, listing the missing types."""
    snaps = s.snapshots
    if snaps.empty:
        return [skip(_no_listing(s), "all clients")]
    out = []
    for client, g in groups(snaps, "client_id", _NO_CLIENT):
        active = g[g["active"].fillna(False).astype(bool)]
        if len(active) and active["events"].isna().all():
            out.append(
                skip("The listing gives no event types of the active subscriptions.", client)
            )
            continue
        gaps, missing_any = [], set()
        for (when, _source), snap in g.groupby(["fetched_at", "source"], sort=True, dropna=False):
            act = snap[snap["active"].fillna(False).astype(bool)]
            covered = {e for events in act["events"].dropna() for e in events}
            missing = [e for e in INCIDENT_EVENTS if e not in covered]
            if missing:
                gaps.append({"fetched_at": iso(when), "missing": missing})
                missing_any.update(missing)
        missing_list = [e for e in INCIDENT_EVENTS if e in missing_any]
        ev = s.snapshot_note() | {
            **listed("active_subscriptions", active["subscription_id"]),
            "missing": missing_list,
            **capped("gaps", gaps),
        }
        if gaps:
            reason = (
                f"No active subscription received {', '.join(missing_list)} "
                f"in {len(gaps)} snapshot(s)."
            )
            out.append(Outcome("fail", reason, client, ev))
        else:
            reason = (
                f"The active subscriptions received all {len(INCIDENT_EVENTS)} incident events."
            )
            out.append(Outcome("pass", reason, client, ev))
    return out


def sub_04(s: Scope) -> list[Outcome]:
    """Every subscription is active in every judged snapshot; one row per subscription."""
    if s.snapshots.empty:
        return [skip(_no_listing(s), "all subscriptions")]
    out = []
    for sub, g in groups(s.snapshots, "subscription_id", _NO_ID):
        known = g[g["active"].notna()]
        if known.empty:
            out.append(skip("The listing does not say whether the subscription is active.", sub))
            continue
        inactive = known[~known["active"].astype(bool)]
        ev = {"snapshots": len(known), **listed("inactive_in", inactive["fetched_at"].map(iso))}
        if inactive.empty:
            reason = f"The subscription was active in all {len(known)} snapshot(s)."
            out.append(Outcome("pass", reason, sub, ev))
        else:
            reason = (
                f"The subscription was inactive in {len(inactive)} of {len(known)} snapshot(s)."
            )
            out.append(Outcome("fail", reason, sub, ev))
    return out


def sub_05(s: Scope) -> list[Outcome]:
    """No subscription's lastDeliveryStatus is ``failed`` in the latest judged snapshot; one row
    per subscription listed in it."""
    if s.snapshots.empty:
        return [skip(_no_listing(s), "all subscriptions")]
    latest_at = s.snapshots["fetched_at"].max()
    latest = s.snapshots[s.snapshots["fetched_at"] == latest_at]
    out = []
    for sub, g in groups(latest, "subscription_id", _NO_ID):
        status = g["last_delivery_status"].dropna()
        failed = bool(status.str.lower().eq("failed").any())
        ev = {"fetched_at": iso(latest_at), **listed("last_delivery_status", status)}
        given = ", ".join(ev["last_delivery_status"])
        reason = (
            f"The listing fetched at {iso(latest_at)} gives lastDeliveryStatus {given}."
            if given
            else f"The listing fetched at {iso(latest_at)} gives no lastDeliveryStatus."
        )
        # no status given: the listing cannot answer (skip, never pass)
        out.append(verdict(not failed, reason, sub, ev) if given else skip(reason, sub, **ev))
    return out
