"""The scheduled compliance report: parameters, pipeline, run folder, views, index.

``run_report`` computes the findings in this process, writes the run folder, and has
papermill render the packaged notebook (``notebooks/compliance_report.ipynb``, package data)
with one parameter, ``run_dir``. See ``docs/report.md``.
"""

from __future__ import annotations

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
