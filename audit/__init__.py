"""audit: prove, with evidence, how the incident service's signed webhook deliveries behave.

The public API, by stage (files -> frames -> verdicts -> analyses)::

    load_captures, read_secrets          read capture logs and the secrets file
    load_snapshots                       GET /webhooks listing snapshots
    sign, verify                         one request (pure; reference time is an argument)
    verify_frame, audit_signatures       every stored request, as of its receipt time
    infer_attempts, events_table         attempts against the retry schedule, event outcomes
    incidents_table, status_intervals    incident state folded from valid events
    kaplan_meier, km_quantile            time to takedown with censoring
    open, Workbench                      the analyst's entry point: tables, drill-down, repr
    figures                              figures of a workbench's frames (audit.figures)
    analyze, run_analyses                all of the above in one call
    analyze_store                        every table of an evidence store, in bounded memory
    run_controls                         compliance findings
    parse_period, run_report             the scheduled report (papermill + nbconvert)
    ServiceClient                        the service's API
"""

from __future__ import annotations

import sys as _sys

if _sys.argv and _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1] in ("audit", "audit.exe"):
    # The ``audit`` script: ^C is handled first thing, before anything loads (audit.console).
    import _signal  # type: ignore[import-not-found]  # the C module: nothing to load
    import os as _os

    def _aborted_while_loading(signum: int, frame: object) -> None:
        _os.write(2, b"audit: aborted\n")
        _os._exit(3)

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _aborted_while_loading)

__version__ = "0.1.0"

import typing

from audit.lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from audit.analysis.analyze import Analysis, analyze, run_analyses
    from audit.analysis.deliveries import events_table, infer_attempts
    from audit.analysis.incidents import incidents_table, status_intervals
    from audit.analysis.store_analysis import analyze_store
    from audit.analysis.subscriptions import load_snapshots
    from audit.analysis.survival import kaplan_meier, km_quantile
    from audit.analysis.takedown import takedown_durations
    from audit.errors import AuditError
    from audit.findings import run_controls
    from audit.ingest.load import Captures, load_captures
    from audit.ingest.secrets import SecretStore, read_secrets
    from audit.ingest.signatures import VERDICTS, sign, verify
    from audit.ingest.verification import audit_signatures, verdict_counts, verify_frame
    from audit.report import parse_period, run_report
    from audit.service.client import ServiceClient
    from audit.workbench import Workbench, open

#: Where each public name lives. They are imported on first use (PEP 562), so that ``import
#: audit.cli`` (``audit verify``) does not pay for pandas, matplotlib, httpx or papermill.
_WHERE = {
    "Analysis": "audit.analysis.analyze",
    "analyze": "audit.analysis.analyze",
    "run_analyses": "audit.analysis.analyze",
    "analyze_store": "audit.analysis.store_analysis",
    "events_table": "audit.analysis.deliveries",
    "infer_attempts": "audit.analysis.deliveries",
    "incidents_table": "audit.analysis.incidents",
    "status_intervals": "audit.analysis.incidents",
    "load_snapshots": "audit.analysis.subscriptions",
    "kaplan_meier": "audit.analysis.survival",
    "km_quantile": "audit.analysis.survival",
    "takedown_durations": "audit.analysis.takedown",
    "AuditError": "audit.errors",
    "run_controls": "audit.findings",
    "Captures": "audit.ingest.load",
    "load_captures": "audit.ingest.load",
    "SecretStore": "audit.ingest.secrets",
    "read_secrets": "audit.ingest.secrets",
    "VERDICTS": "audit.ingest.signatures",
    "sign": "audit.ingest.signatures",
    "verify": "audit.ingest.signatures",
    "audit_signatures": "audit.ingest.verification",
    "verdict_counts": "audit.ingest.verification",
    "verify_frame": "audit.ingest.verification",
    "parse_period": "audit.report",
    "run_report": "audit.report",
    "ServiceClient": "audit.service.client",
    "Workbench": "audit.workbench",
    "open": "audit.workbench",
}


__getattr__, __dir__ = _lazy_names(globals(), _WHERE)

if "IPython" in _sys.modules:  # maybe in a notebook: an AuditError a cell raises is one line
    from audit.notebook import one_line_errors as _one_line_errors

    _one_line_errors()


__all__ = [
    "VERDICTS",
    "Analysis",
    "AuditError",
    "Captures",
    "SecretStore",
    "ServiceClient",
    "Workbench",
    "analyze",
    "analyze_store",
    "audit_signatures",
    "events_table",
    "incidents_table",
    "infer_attempts",
    "kaplan_meier",
    "km_quantile",
    "load_captures",
    "load_snapshots",
    "open",
    "parse_period",
    "read_secrets",
    "run_analyses",
    "run_controls",
    "run_report",
    "sign",
    "status_intervals",
    "takedown_durations",
    "verdict_counts",
    "verify",
    "verify_frame",
]
