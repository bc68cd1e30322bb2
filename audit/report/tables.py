"""The tables a run folder holds: the analysis tables plus the period's summaries (pure).

Everything the notebook shows is computed here, in the pipeline's process; the notebook only
formats and draws. Summaries are cut to the period ``[start, end)``; a record without a receipt
time (an unreadable line) counts where its file's readable records are (see
:func:`deliveries_in_period`).
"""

from __future__ import annotations

import pandas as pd

from audit.analysis.analyze import Analysis
from audit.report.params import Period
from audit.spec import MAX_ATTEMPTS

__all__ = ["deliveries_in_period", "in_period", "report_tables"]


def in_period(times: pd.Series, period: Period, *, keep_missing: bool = False) -> pd.Series:
    """``start <= t < end`` (missing times: ``keep_missing``)."""
    inside = ((times >= period.start) & (times < period.end)).fillna(False).astype(bool)
    return inside | times.isna() if keep_missing else inside


def deliveries_in_period(d: pd.DataFrame, period: Period) -> pd.DataFrame:
    """Requests received in the period, and the untimed ones (unreadable lines) whose file has
    readable records in the period, or none at all (then nothing places them elsewhere)."""
    t = d["received_at"]
    inside = in_period(t, period)
    untimed = t.isna()
    if untimed.any():
        spans = d[~untimed].groupby("source")["received_at"].agg(["min", "max"])
        overlaps = (spans["min"] < period.end) & (spans["max"] >= period.start)
        keep = d.loc[untimed, "source"].map(overlaps).fillna(True).astype(bool)
        inside = inside | keep.reindex(d.index, fill_value=False)
    return d[inside]


def _safe(fn, *args, **kwargs) -> pd.DataFrame:
    """A summary of nothing is an empty table, never an exception (quiet months)."""
    try:
        return fn(*args, **kwargs)
    except (KeyError, ValueError, IndexError):
        return pd.DataFrame()


def _km_all(durations: pd.DataFrame) -> pd.DataFrame:
    from audit.analysis.survival import kaplan_meier

    if durations.empty:
        return pd.DataFrame()
    return kaplan_meier(durations["duration_s"], durations["observed"]).assign(group="all")


def report_tables(
    analysis: Analysis, period: Period, *, evidence: pd.DataFrame | None = None
) -> dict[str, pd.DataFrame]:
    """Every table of the run folder, by name (see ``docs/report.md``).

    ``evidence`` (from a store, whose deliveries carry no body) gives the request columns
    of the records that are not valid (``audit.report.inputs.Inputs.evidence``); valid
    off-schedule attempts then have them empty.
    """
    from audit.analysis.deliveries import latency_summary, success_rates
    from audit.ingest.extract import EXTRACTED
    from audit.ingest.verification import verdict_counts

    tables = dict(analysis.tables())
    # The store's extracted helper columns left out before the rows are cut (a cut copies
    # every column); no table below shows them.
    d = analysis.deliveries
    d = d.drop(columns=[c for c in EXTRACTED if c in d.columns])
    period_d = deliveries_in_period(d, period)
    e = analysis.events
    period_e = e[in_period(e["first_received_at"], period)] if "first_received_at" in e else e
    tables["verdict_counts"] = _safe(verdict_counts, period_d)
    tables["success_by_subscription"] = _safe(success_rates, period_d, period_e, by="subscription")
    tables["success_by_event"] = _safe(success_rates, period_d, period_e, by="event")
    tables["latency"] = _safe(latency_summary, period_d, period_e)
    tables["takedown_durations"] = analysis.takedown_durations
    tables["takedown_km_all"] = _safe(_km_all, analysis.takedown_durations)
    real = period_e[~period_e["is_test"].astype(bool)] if "is_test" in period_e else period_e
    tables["event_outcomes"] = _safe(
        lambda: real.groupby(["subscription_id", "outcome"]).size().rename("events").reset_index()
    )
    tables["undelivered_events"] = real[real["outcome"].isin(["exhausted", "lost"])]
    # The request appendices show what was received, not the store's extracted helper columns
    # (so a report from the store has the same tables as one from raw captures).
    requests = period_d
    if evidence is not None:
        requests = _with_evidence(requests, evidence)
    tables["off_schedule_attempts"] = requests[
        (requests["on_schedule"] == False).fillna(False).astype(bool)  # noqa: E712
        | (requests["attempt_no"] > MAX_ATTEMPTS).fillna(False).astype(bool)
    ]
    tables["retried_after_success"] = period_e[
        period_e["retry_after_success"].fillna(False).astype(bool)
    ]
    tables["not_valid_requests"] = requests[requests["verdict"] != "valid"]
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
    return tables


def _with_evidence(requests: pd.DataFrame, evidence: pd.DataFrame) -> pd.DataFrame:
    """The request columns a store keeps out of the analyses, in the raw captures' order."""
    from audit.ingest.formats.base import COLUMNS

    out = requests.merge(evidence, on=["source", "line"], how="left", validate="1:1")
    out.index = requests.index
    order = [c for c in COLUMNS if c in out.columns]
    return out[order + [c for c in out.columns if c not in order]]
