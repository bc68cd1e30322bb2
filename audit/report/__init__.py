"""The scheduled compliance report: parameters, pipeline, run folder, views, index.

``run_report`` computes the findings in this process, writes the run folder, and has
papermill render the packaged notebook (``notebooks/compliance_report.ipynb``, package data)
with one parameter, ``run_dir="."``, in the run folder. See ``docs/report.md``.

The names below load on first use (PEP 562): the notebook's kernel imports
``audit.report.views`` and ``audit.report.figures`` without paying for the pipeline (DuckDB's
queries, the analyses, the controls), which only the ``audit report`` process runs.
"""

from __future__ import annotations

import typing

from audit.lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from audit.report.index import build_index
    from audit.report.params import Period, ReportParams, check_params, parse_period, read_params
    from audit.report.pipeline import (
        EXIT_CONTROL_ERROR,
        EXIT_FAILING,
        EXIT_OK,
        EXIT_RUNTIME,
        ReportResult,
        run_report,
        versions,
    )
    from audit.report.rundir import RunData, open_run

#: Where each public name lives (imported on first use).
_WHERE = {
    "build_index": "audit.report.index",
    "Period": "audit.report.params",
    "ReportParams": "audit.report.params",
    "check_params": "audit.report.params",
    "parse_period": "audit.report.params",
    "read_params": "audit.report.params",
    "EXIT_CONTROL_ERROR": "audit.report.pipeline",
    "EXIT_FAILING": "audit.report.pipeline",
    "EXIT_OK": "audit.report.pipeline",
    "EXIT_RUNTIME": "audit.report.pipeline",
    "ReportResult": "audit.report.pipeline",
    "run_report": "audit.report.pipeline",
    "versions": "audit.report.pipeline",
    "RunData": "audit.report.rundir",
    "open_run": "audit.report.rundir",
}

__getattr__, __dir__ = _lazy_names(globals(), _WHERE)

__all__ = [
    "EXIT_CONTROL_ERROR",
    "EXIT_FAILING",
    "EXIT_OK",
    "EXIT_RUNTIME",
    "Period",
    "ReportParams",
    "ReportResult",
    "RunData",
    "build_index",
    "check_params",
    "open_run",
    "parse_period",
    "read_params",
    "run_report",
    "versions",
]
