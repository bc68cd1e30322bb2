"""The report's computation, in process: analyses, controls and run-folder tables of a period.

:func:`compute` is the step between loading (:func:`audit.report.inputs.load_inputs`) and
publishing (:func:`audit.report.pipeline.run_report`); notebooks call it through
:func:`audit.report.explore.explore`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import pandas as pd

from audit.analysis.analyze import Analysis, run_analyses
from audit.findings import run_controls
from audit.ingest.query import SIDE_SHARE
from audit.ingest.side import aside_if_room, cancelled_on_error
from audit.memory import release_free_memory
from audit.report.inputs import Inputs
from audit.report.params import Period, ReportParams
from audit.report.tables import report_tables

__all__ = ["Computed", "compute"]


@dataclass(frozen=True)
class Computed:
    """The analyses, the findings and the report tables of one period (in memory)."""

    analysis: Analysis
    findings: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    notes: list[str] = field(default_factory=list)


def compute(
    inputs: Inputs,
    params: ReportParams,
    period: Period,
    *,
    on_tables: Callable[[dict[str, pd.DataFrame]], None] | None = None,
) -> Computed:
    """Analyses and controls as of ``params.as_of`` (warnings become report notes).

    Listing snapshots fetched after ``as_of`` are left out, like records received after it.
    ``inputs`` hands its deliveries over (:meth:`Inputs.hand_over_deliveries`) to be freed.
    ``on_tables`` is called with the report tables the figures read as soon as they exist
    (:data:`audit.report.tables.FIGURE_TABLES`; the pipeline starts drawing the figures then).

    The controls run meanwhile in a forked process when this one may fork
    (:func:`audit.ingest.side.aside_if_room`), else here after the tables: the same findings,
    and the same warnings (issued here when the findings are taken).
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
        controls = partial(
            run_controls,
            analysis,
            period_start=period.start,
            period_end=period.end,
            params=dict(params.thresholds),
            secrets_age=inputs.secrets_age,
            mutes=inputs.mutes,
        )
        # The controls run in a forked process while this one builds the report tables: the
        # other core is idle here ("Nineteenth pass" of docs/scale.md, in git history).
        checking = aside_if_room(controls, share=SIDE_SHARE)
        with cancelled_on_error(checking):
            tables = report_tables(analysis, period, evidence=inputs.evidence, on_drawn=on_tables)
            findings = controls() if checking is None else checking.result()
        release_free_memory()  # the controls' cuts of the deliveries
    notes = list(dict.fromkeys(str(w.message).splitlines()[0] for w in caught))
    tables["inputs"] = _mark_late_snapshots(inputs, params.as_of)
    return Computed(analysis, findings, tables, notes)


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
