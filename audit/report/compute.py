"""The report's computation, in process: analyses, controls and run-folder tables of a period.

:func:`compute` is the step between loading (:func:`audit.report.inputs.load_inputs`) and
writing the run folder (:func:`audit.report.rundir.write_run`); notebooks call it through
:func:`audit.report.explore.explore`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from audit.analysis.analyze import Analysis, run_analyses
from audit.analysis.coverage import capture_coverage, secrets_sentence, verification_coverage
from audit.findings import run_controls
from audit.findings.listing import covers
from audit.memory import release_free_memory
from audit.redaction import cut_secrets, scrub
from audit.report.inputs import Inputs
from audit.report.params import Period, ReportParams
from audit.report.tables import in_period, report_tables

__all__ = ["Computed", "compute", "coverage", "evidence_coverage"]


@dataclass(frozen=True)
class Computed:
    """The analyses, the findings and the report tables of one period (in memory).

    ``coverage``: what the period received (:func:`coverage`); ``snapshots``: the newest
    listing snapshot used (``newest_taken_at``, ISO 8601, or None without one) and whether a
    listing covers the period (``covers_period``, :mod:`audit.findings.listing`).
    """

    analysis: Analysis
    findings: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)
    coverage: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, Any] = field(default_factory=dict)


def compute(inputs: Inputs, params: ReportParams, period: Period) -> Computed:
    """Analyses, report tables and controls as of ``params.as_of``, one after the other in
    this process (warnings become report notes).

    Listing snapshots fetched after ``as_of`` are left out, like records received after it.
    ``inputs`` hands its deliveries over (:meth:`Inputs.hand_over_deliveries`) to be freed.
    """
    subs = inputs.subscriptions
    if not subs.empty:
        subs = subs[subs["fetched_at"] <= params.as_of].reset_index(drop=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        analysis = run_analyses(
            inputs.hand_over_deliveries(),  # its only holder: it frees what it no longer needs
            as_of=params.as_of,
            subscriptions=subs,
            inputs=inputs.files,
            clock_start=params.clock_start,
            first_receipts=inputs.first_receipts,
            takedown=inputs.takedown,
        )
        release_free_memory()
        tables = report_tables(analysis, period, evidence=inputs.evidence)
        findings = run_controls(
            analysis,
            period_start=period.start,
            period_end=period.end,
            params=dict(params.thresholds),
            secrets_age=inputs.secrets_age,
            mutes=inputs.mutes,
            secrets_file=inputs.secrets_file,
        )
        release_free_memory()  # the controls' cuts of the deliveries
    # known secrets cut: a note may quote a value of the captured data (a group's name)
    notes = list(dict.fromkeys(scrub(str(w.message).splitlines()[0]) for w in caught))
    tables["inputs"] = _mark_late_snapshots(inputs, params.as_of)
    # Known secrets out of every table and finding: captured incident data may quote one.
    tables, findings = {n: cut_secrets(t) for n, t in tables.items()}, cut_secrets(findings)
    newest = subs["fetched_at"].max() if not subs.empty else None
    return Computed(
        analysis,
        findings,
        tables,
        notes,
        coverage=coverage(analysis.deliveries, tables.get("verdict_counts"), period)
        | evidence_coverage(analysis, period, params.as_of, inputs.secrets_file),
        snapshots={
            "newest_taken_at": _iso(newest),
            # the rule of audit.findings.listing, as the controls judged it
            "covers_period": covers(subs["fetched_at"], period.start, period.end)
            if not subs.empty
            else False,
        },
    )


def coverage(
    deliveries: pd.DataFrame, verdicts: pd.DataFrame | None, period: Period
) -> dict[str, Any]:
    """What the period received: ``deliveries`` (requests in the period, every verdict, as
    the verdict counts count them), ``valid``, and the first and last ``received_at`` in the
    period (ISO 8601, None when nothing was received).

    >>> from audit.report.params import parse_period
    >>> d = pd.DataFrame({"received_at": pd.to_datetime(
    ...     ["2026-09-30T23:00Z", "2026-10-02T08:00Z", "2026-10-03T09:30Z"])})
    >>> v = pd.DataFrame({"verdict": ["valid", "signature_mismatch"], "count": [1, 1]})
    >>> coverage(d, v, parse_period("2026-10"))["last_received"]
    '2026-10-03T09:30:00+00:00'
    """
    counts = (
        verdicts.set_index("verdict")["count"]
        if verdicts is not None and {"verdict", "count"} <= set(verdicts.columns)
        else pd.Series(dtype="int64")
    )
    times = deliveries["received_at"] if "received_at" in deliveries else pd.Series(dtype=object)
    inside = times[in_period(times, period)] if len(times) else times
    return {
        "deliveries": int(counts.sum()),
        "valid": int(counts.get("valid", 0)),
        "first_received": _iso(inside.min()) if len(inside) else None,
        "last_received": _iso(inside.max()) if len(inside) else None,
    }


def evidence_coverage(
    analysis: Analysis, period: Period, as_of: pd.Timestamp, secrets_file: str | None
) -> dict[str, Any]:
    """The manifest's coverage of the evidence itself: ``capture`` (which days and hours held
    captures, the gaps: :func:`audit.analysis.coverage.capture_coverage`) and ``verification``
    (``secrets_file`` as given, the number of ``subscriptions``, the ``suspects`` -- those
    whose requests mostly failed verification with one reason -- and the ``sentence`` that
    names them and the file: :func:`audit.analysis.coverage.verification_coverage`). The
    controls use the same functions (CAP-01, SIG-01, SIG-02)."""
    d = analysis.deliveries
    by_sub = verification_coverage(d, start=period.start, end=period.end)
    # Subscription ids are captured data: known secrets cut, as from every table
    suspects = [
        v | {"subscription_id": None if (sid := v["subscription_id"]) is None else scrub(sid)}
        for v in by_sub
        if v["suspect"]
    ]
    return {
        "capture": capture_coverage(
            d["received_at"], start=period.start, end=period.end, as_of=as_of
        ),
        "verification": {
            "secrets_file": secrets_file,
            "subscriptions": len(by_sub),
            "suspects": suspects,
            "sentence": scrub(secrets_sentence(by_sub, secrets_file)),
        },
    }


def _iso(t: object) -> str | None:
    """A time as ISO 8601 text; None for a missing one."""
    if t is None or t is pd.NaT or (isinstance(t, float) and t != t):
        return None
    return pd.Timestamp(t).isoformat()  # type: ignore[arg-type]  # a time pandas gave


def _mark_late_snapshots(inputs: Inputs, as_of: pd.Timestamp) -> pd.DataFrame:
    """The file list, with snapshots fetched after ``as_of`` marked as read but not used."""
    files = inputs.files.copy()
    subs = inputs.subscriptions
    if subs.empty:
        return files
    late = set(subs.loc[subs["fetched_at"] > as_of, "source"].astype(str))
    mask = files["source"].astype(str).isin(late) & (files["kind"] == "snapshot")
    files.loc[mask, "kind"] = "snapshot fetched after as_of (not used)"
    return files
