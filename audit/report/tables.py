"""The tables a run folder holds: the analysis tables plus the period's summaries (pure).

Everything the notebook shows is computed here, in the pipeline's process; the notebook only
formats and draws. Summaries are cut to the period ``[start, end)``; a record without a receipt
time (an unreadable line) counts where its file's readable records are (see
:func:`deliveries_in_period`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from audit.analysis.analyze import Analysis
from audit.analysis.deliveries import latency_summary, success_rates
from audit.analysis.survival import kaplan_meier
from audit.analysis.survival_by import kaplan_meier_by
from audit.analysis.takedown import takedown_summary
from audit.findings.controls.base import member_of, readable_by_file, untimed_in_period
from audit.ingest.extract import EXTRACTED
from audit.ingest.formats.base import COLUMNS
from audit.ingest.verification import verdict_counts
from audit.report.params import Period
from audit.spec import MAX_ATTEMPTS

__all__ = ["deliveries_in_period", "in_period", "report_tables"]


def in_period(times: pd.Series, period: Period, *, keep_missing: bool = False) -> pd.Series:
    """``start <= t < end`` (missing times: ``keep_missing``)."""
    inside = ((times >= period.start) & (times < period.end)).fillna(False).astype(bool)
    return inside | times.isna() if keep_missing else inside


def deliveries_in_period(
    d: pd.DataFrame, period: Period, inputs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Requests received in the period, and the untimed ones (unreadable lines) whose file has
    readable records in the period, or none at all (then nothing places them elsewhere);
    ``inputs`` (the inputs table) tells a file whose records were all left out, as later."""
    return d[_delivered_in(d, period, inputs)]


def _delivered_in(d: pd.DataFrame, period: Period, inputs: pd.DataFrame | None) -> pd.Series:
    """The mask of :func:`deliveries_in_period`."""
    held = readable_by_file(inputs)
    return in_period(d["received_at"], period) | untimed_in_period(
        d, period.start, period.end, held
    )


#: What the period's summaries read (verdict_counts, success_rates, latency_summary and the
#: event outcomes).
_SUMMARISED_DELIVERIES = (
    "verdict",
    "received_at",
    "subscription_id",
    "event",
    "attempt_no",
    "success",
    "is_test",
    "response_ms",
    "skew_s",
)
_SUMMARISED_EVENTS = (
    "is_test",
    "outcome",
    "first_received_at",
    "subscription_id",
    "event",
    "emission_latency_s",
)


def _safe(fn: Callable[..., pd.DataFrame], *args: object, **kwargs: object) -> pd.DataFrame:
    """A summary of nothing is an empty table, never an exception (quiet months)."""
    try:
        return fn(*args, **kwargs)
    except (KeyError, ValueError, IndexError):
        return pd.DataFrame()


def _km_all(durations: pd.DataFrame) -> pd.DataFrame:
    if durations.empty:
        return pd.DataFrame()
    return kaplan_meier(durations["duration_s"], durations["observed"]).assign(group="all")


def _created_in(analysis: Analysis, period: Period) -> pd.DataFrame:
    """The takedown durations of the incidents created in the period."""
    inc, d = analysis.incidents, analysis.takedown_durations
    if d.empty or "created_at" not in inc or "incident_id" not in d:
        return d.iloc[:0]  # nothing to cut (a table without columns stays so)
    created = inc.loc[in_period(inc["created_at"], period), "incident_id"]
    return d[member_of(d["incident_id"], created)]


def _takedown_summary(durations: pd.DataFrame) -> pd.DataFrame:
    """Median and p90 time to takedown of all, by class and by source (the analysis's
    ``takedown_summary``, of these durations)."""
    return pd.concat(
        [
            takedown_summary(durations, None).assign(by="all"),
            takedown_summary(durations, "incident_class").assign(by="incident_class"),
            takedown_summary(durations, "source").assign(by="source"),
        ],
        ignore_index=True,
    )


def report_tables(
    analysis: Analysis,
    period: Period,
    *,
    evidence: pd.DataFrame | None = None,
) -> dict[str, pd.DataFrame]:
    """Every table of the run folder, by name (see ``docs/report.md``).

    ``evidence`` (from a store, whose deliveries carry no body) gives the request columns
    of the records that are not valid (``audit.report.inputs.Inputs.evidence``); valid
    off-schedule attempts then have them empty.
    """
    tables = dict(analysis.tables())
    order = [*tables, *_ADDED]  # the run folder's order, whatever is built first
    # The store's extracted helper columns are left out; no table below shows them. The
    # summaries read a few columns of the period's rows, and the tables that list rows copy
    # those rows only: a cut of every column would copy nearly every row at 1M (0.4 GB).
    d = analysis.deliveries
    d = d.drop(columns=[c for c in EXTRACTED if c in d.columns])
    in_d = _delivered_in(d, period, analysis.inputs)
    period_d = d.loc[in_d, [c for c in _SUMMARISED_DELIVERIES if c in d.columns]]
    e = analysis.events
    in_e = in_period(e["first_received_at"], period) if "first_received_at" in e else None
    in_e = pd.Series(True, index=e.index) if in_e is None else in_e
    period_e = e.loc[in_e, [c for c in _SUMMARISED_EVENTS if c in e.columns]]
    tables["verdict_counts"] = _safe(verdict_counts, period_d)
    tables["latency"] = _safe(latency_summary, period_d, period_e)
    # Time to takedown counts the incidents created in the period, as TKD-01 and TKD-02 do:
    # the analysis's own tables count every incident the data holds, which depends on how
    # much history was given (one population per number).
    durations = _created_in(analysis, period)
    tables["takedown_durations"] = durations
    if {"duration_s", "observed"} <= set(durations.columns):
        tables["takedown_km"] = _safe(kaplan_meier_by, durations, "incident_class")
        tables["takedown_summary"] = _safe(_takedown_summary, durations)
    tables["takedown_km_all"] = _safe(_km_all, durations)
    # The request appendices show what was received, not the store's extracted helper columns
    # (so a report from the store has the same tables as one from raw captures). The evidence
    # joins the few rows shown, not every row of the period (a copy of them all at 1M).
    off_schedule = d[
        in_d
        & (
            (d["on_schedule"] == False).fillna(False).astype(bool)  # noqa: E712
            | (d["attempt_no"] > MAX_ATTEMPTS).fillna(False).astype(bool)
        )
    ]
    if evidence is not None:
        off_schedule = _with_evidence(off_schedule, evidence)
    tables["off_schedule_attempts"] = off_schedule
    tables["success_by_subscription"] = _safe(success_rates, period_d, period_e, by="subscription")
    tables["success_by_event"] = _safe(success_rates, period_d, period_e, by="event")
    # Judged within the period only (an event outside it may lack a value), by position.
    real_in = ~period_e["is_test"].astype(bool) if "is_test" in period_e else True
    real = period_e[real_in] if "is_test" in period_e else period_e
    tables["event_outcomes"] = _safe(
        lambda: real.groupby(["subscription_id", "outcome"]).size().rename("events").reset_index()
    )
    undelivered = np.zeros(len(e), dtype=bool)
    undelivered[in_e.to_numpy(dtype=bool)] = (
        real_in & period_e["outcome"].isin(["exhausted", "lost"])
    ).to_numpy(dtype=bool)
    tables["undelivered_events"] = e[undelivered]
    not_valid = d[in_d & (d["verdict"] != "valid")]
    if evidence is not None:
        not_valid = _with_evidence(not_valid, evidence)
    tables["retried_after_success"] = e[in_e & e["retry_after_success"].fillna(False).astype(bool)]
    tables["not_valid_requests"] = not_valid
    inc = analysis.incidents
    waiting = inc[inc["status"].isin(["approval_required", "action_required"])]
    tables["waiting_on_client"] = waiting.sort_values("awaiting_client_s", ascending=False)
    subs = analysis.subscriptions
    tables["subscriptions_latest"] = (
        subs[subs["fetched_at"] == subs["fetched_at"].max()] if not subs.empty else subs
    )
    inputs = analysis.inputs.copy()
    for col in inputs.columns:
        if inputs[col].dtype == object:
            inputs[col] = inputs[col].astype("str")
    tables["inputs"] = inputs
    return {name: tables[name] for name in dict.fromkeys(order) if name in tables}


#: The tables :func:`report_tables` adds to the analysis tables, in the run folder's order.
_ADDED = (
    "verdict_counts",
    "success_by_subscription",
    "success_by_event",
    "latency",
    "takedown_durations",
    "takedown_km_all",
    "event_outcomes",
    "undelivered_events",
    "off_schedule_attempts",
    "retried_after_success",
    "not_valid_requests",
    "waiting_on_client",
    "subscriptions_latest",
    "inputs",
)


def _with_evidence(requests: pd.DataFrame, evidence: pd.DataFrame) -> pd.DataFrame:
    """The request columns a store keeps out of the analyses, in the raw captures' order,
    joined by ``record_sha256`` (what a record is known by: a log rotated by ``copytruncate``,
    or two receivers' same-named files, repeat a source and line; a record held twice has the
    same request)."""
    kept = [c for c in evidence.columns if c not in requests.columns or c == "record_sha256"]
    ev = evidence[kept].drop_duplicates("record_sha256")
    out = requests.merge(ev, on="record_sha256", how="left", validate="many_to_one")
    out.index = requests.index
    order = [c for c in COLUMNS if c in out.columns]
    return out[order + [c for c in out.columns if c not in order]]
