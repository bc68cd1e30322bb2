"""SIG controls: how the receiver treats signatures, its clock, and the signing secrets."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from audit.analysis.analyze import DELIVERY_TABLE_COLUMNS
from audit.findings.controls.base import (
    Outcome,
    Scope,
    capped,
    counts,
    delivery_examples,
    in_period,
    iso,
    listed,
    quantiles,
    readable_by_file,
    skip,
    untimed_in_period,
    verdict,
)
from audit.findings.listing import uncovered_reason
from audit.timeutil import duration


def _without_suspects(s: Scope, rows: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, Any], str]:
    """``rows`` without the requests of the subscriptions whose verification points at the
    secrets file (:meth:`Scope.secrets_suspects`), the evidence of what was left out, and a
    sentence for the reason ("" when nothing was)."""
    suspects = s.secrets_suspects()
    if not suspects:
        return rows, {}, ""
    out = s.suspected(rows)
    named = [v if v is not None else "(no subscription id)" for v in suspects]
    ev = {
        "secrets_file": s.secrets_file,
        **capped("left_out_subscriptions", named),
        "left_out_requests": int(out.sum()),
    }
    return rows[~out], ev, s.secrets_note()


def _read_in_period(s: Scope) -> pd.DataFrame:
    """The requests read in the period, as the report's verdict table counts them: those
    received in it, and the unreadable lines (no receipt time) placed in it
    (:func:`~audit.findings.controls.base.untimed_in_period`)."""
    d = s.analysis.deliveries
    d = d[[c for c in DELIVERY_TABLE_COLUMNS if c in d.columns]]
    keep = in_period(d["received_at"], s.period_start, s.period_end)
    if len(d) and "source" in d.columns:
        held = readable_by_file(s.analysis.inputs)
        keep |= untimed_in_period(d, s.period_start, s.period_end, held)
    return d[keep]


def sig_01(s: Scope) -> Outcome:
    """Every request whose verdict is not ``valid`` was answered 401.

    ``unreadable`` records are left out (their request cannot be judged) and counted, those
    without a receipt time too when placed in the period (the report's verdict table counts
    the same requests, :func:`_read_in_period`); requests
    without a captured answer are counted, and the control skips when none has one. The
    requests of a subscription whose requests mostly failed verification with one reason are
    left out too (the secrets file, not the receiver, is the likely cause: ``docs/controls.md``,
    "Verification coverage"); with nothing else read, the control skips naming the file.
    """
    res, d = "all requests", _read_in_period(s)
    timed = d["received_at"].notna()
    if not timed.any():
        unreadable = len(d)  # lines that could not be read, so carry no receipt time
        if unreadable:
            reason = (
                f"No request with a receipt time was received in the period; {unreadable} "
                "unreadable line(s) without one were captured, which cannot be judged."
            )
            return skip(reason, res, requests=unreadable, unreadable_excluded=unreadable)
        return skip("No request was received in the period.", res)
    d, left_out, note = _without_suspects(s, d)
    if note and not (d["verdict"] != "unreadable").any():
        reason = f"{note} Their requests cannot show whether the receiver rejects bad signatures."
        return skip(reason, res, requests=len(d), unreadable_excluded=len(d), **left_out)
    if d["response_status"].isna().all():
        return skip("No response_status was captured for the requests of the period.", res)
    # Masks over every request, copies of the few rows shown (not of every request, at 1M).
    readable = d["verdict"] != "unreadable"
    n_readable = int(readable.sum())
    bad = d[readable & (d["verdict"] != "valid")]
    known = bad[bad["response_status"].notna()]
    wrong = known[known["response_status"] != 401]
    accepted = wrong[wrong["response_status"].between(200, 299)]
    ev: dict[str, Any] = {
        "requests": len(d),
        "unreadable_excluded": len(d) - n_readable,
        "not_valid": len(bad),
        "no_response_status": len(bad) - len(known),
        "answered_401": len(known) - len(wrong),
        "accepted_2xx": len(accepted),
        "other_status": len(wrong) - len(accepted),
        "by_verdict": counts(bad["verdict"]),
        "wrong_answers_by_status": counts(wrong["response_status"]),
        **left_out,
    }
    tail = f" Left out: {left_out['left_out_requests']:,} requests. {note}" if note else ""
    if bad.empty:
        reason = f"None of the {n_readable} readable requests had a non-valid verdict.{tail}"
        return Outcome("pass", reason, res, ev)
    if known.empty:
        reason = (
            f"None of the {len(bad)} requests with a non-valid verdict has a response_status.{tail}"
        )
        return skip(reason, res, **ev)
    if wrong.empty:
        reason = f"All {len(known)} requests with a non-valid verdict were answered 401.{tail}"
        return Outcome("pass", reason, res, ev)
    accepted_first = pd.concat([accepted, wrong.drop(accepted.index)])
    ev |= delivery_examples(accepted_first)
    reason = (
        f"{len(wrong)} of {len(known)} requests with a non-valid verdict were not answered 401, "
        f"{len(accepted)} of them accepted with 2xx.{tail}"
    )
    return Outcome("fail", reason, res, ev)


def sig_02(s: Scope) -> Outcome:
    """No ``valid`` delivery was answered 401 or 403.

    The deliveries of a subscription whose requests mostly failed verification with one
    reason are left out, as in :func:`sig_01`; with nothing else, the control skips naming
    the secrets file.
    """
    res, v = "all deliveries", s.valid
    v, left_out, note = _without_suspects(s, v)
    if v.empty:
        if note:
            reason = f"{note} No valid delivery of another subscription was received."
            return skip(reason, res, **left_out)
        return skip("No valid delivery was received in the period.", res)
    tail = f" Left out: {left_out['left_out_requests']:,} deliveries. {note}" if note else ""
    status = v["response_status"]
    n_known = int(status.notna().sum())
    if not n_known:
        return skip(f"No response_status was captured for the {len(v)} valid deliveries.", res)
    refused = v[status.isin([401, 403]).fillna(False).astype(bool)]  # a missing one is neither
    ev: dict[str, Any] = {
        "valid": len(v),
        "with_response_status": n_known,
        "refused": len(refused),
        "refused_by_status": counts(refused["response_status"]),
        "refused_by_subscription": counts(refused["subscription_id"]),
        **left_out,
    }
    if "matched_secret" in refused:  # labels such as wh_main#2, never a secret value
        ev["refused_by_matched_secret"] = counts(refused["matched_secret"])
    if refused.empty:
        reason = f"None of the {n_known} valid deliveries was answered 401 or 403.{tail}"
        return Outcome("pass", reason, res, ev)
    ev |= delivery_examples(refused.sort_values("received_at"))
    reason = (
        f"{len(refused)} of {n_known} valid deliveries were answered 401 or 403: the "
        f"receiver checks with a wrong or stale secret or a re-serialised body.{tail}"
    )
    return Outcome("fail", reason, res, ev)


def sig_03(s: Scope) -> Outcome:
    """p99 of |clock skew| of valid deliveries is under ``max_skew_p99_s``."""
    res, limit = "all deliveries", s.params["max_skew_p99_s"]
    v = s.valid
    known = v["skew_s"].notna()
    skew = v.loc[known, "skew_s"].astype(float).abs()
    if skew.empty:
        return skip("No valid delivery with a clock skew was received in the period.", res)
    stats = quantiles(skew)
    # Positions among the valid deliveries; only the rows shown are copied.
    high = (skew >= limit).to_numpy()
    over = v.iloc[np.flatnonzero(known.to_numpy())[high]].assign(_abs=skew.to_numpy()[high])
    over = over.sort_values("_abs", ascending=False)
    ev = {"abs_skew_s": stats, "threshold_s": limit, "at_or_over_threshold": len(over)}
    ev |= delivery_examples(over)
    ok = stats["p99"] < limit
    reason = (
        f"p99 of |clock skew| over {len(skew)} valid deliveries is {duration(stats['p99'])}, "
        f"{'under' if ok else 'not under'} {limit:g} s (max {duration(stats['max'])})."
    )
    return verdict(ok, reason, res, ev)


def _days(ns: float) -> float:
    return ns / 86_400e9


def _secret_age(s: Scope, sub: str, valid_from: int | None, limit: float) -> Outcome:
    ev: dict[str, Any] = {"threshold_days": limit, "as_of": iso(s.as_of)}
    if valid_from is None:
        # Only the first secret may lack valid_from: it is then the one issued at creation.
        subs = s.analysis.subscriptions
        created = subs.loc[subs["subscription_id"] == sub, "created_at"].dropna()
        ev["valid_from"] = None
        if created.empty:
            reason = (
                "The secrets file gives no valid_from and no listing gives the creation time, "
                f"so the secret cannot be shown younger than {limit:g} days."
            )
            return Outcome("fail", reason, sub, ev)
        age = _days(s.as_of.value - created.min().value)
        ev |= {"created_at": iso(created.min()), "max_age_days": age}
        ok = age < limit
        reason = (
            f"No valid_from is recorded; the subscription was created {age:.1f} days before "
            f"as_of, so its secret is at most that old, {'under' if ok else 'not under'} "
            f"{limit:g} days."
        )
        return verdict(ok, reason, sub, ev)
    age = _days(s.as_of.value - valid_from)
    ev |= {"valid_from": iso(pd.Timestamp(valid_from, tz="UTC")), "age_days": age}
    if age < 0:
        reason = "The newest secret is valid only after as_of; the one current then is not dated."
        return skip(reason, sub, **ev)
    ok = age < limit
    reason = (
        f"The current secret is {age:.1f} days old at as_of, "
        f"{'under' if ok else 'not under'} {limit:g} days."
    )
    return verdict(ok, reason, sub, ev)


def sig_04(s: Scope) -> list[Outcome]:
    """Every subscription's current secret is younger than ``max_secret_age_days`` at as_of.

    One row per subscription of the secrets file. Without ``valid_from`` (the first and only
    secret), the subscription's ``createdAt`` from the listings bounds the age; without either,
    the age cannot be shown and the row fails.
    """
    limit = s.params["max_secret_age_days"]
    if s.secrets_age is None:
        return [skip("No secret ages were given (no secrets file).", "all subscriptions")]
    if not s.secrets_age:
        return [skip("The secrets file lists no subscription.", "all subscriptions")]
    return [_secret_age(s, sub, vf, limit) for sub, vf in sorted(s.secrets_age.items())]


def sig_05(s: Scope) -> Outcome:
    """No listing snapshot exposed a secret; without a listing that covers the period
    (:mod:`audit.findings.listing`), ``skip`` saying why, as the SUB controls do."""
    res, snaps = "all snapshots", s.snapshots
    if snaps.empty:
        fetched = s.analysis.subscriptions["fetched_at"]
        return skip(uncovered_reason(fetched, s.period_start, s.period_end), res)
    exposed = snaps[snaps["secret_exposed"].astype(bool)]
    ev = s.snapshot_note() | {
        "listed": len(snaps),
        "exposed": len(exposed),
        **listed("examples", exposed["subscription_id"]),
        **listed("exposed_at", exposed["fetched_at"].map(iso)),
    }
    if exposed.empty:
        reason = (
            f"None of the {len(snaps)} subscriptions listed in {len(ev['snapshots'])} "
            "snapshot(s) showed a secret."
        )
        return Outcome("pass", reason, res, ev)
    reason = (
        f"{len(exposed)} listed subscription(s) showed a secret, in "
        f"{exposed['fetched_at'].nunique()} snapshot(s)."
    )
    return Outcome("fail", reason, res, ev)
