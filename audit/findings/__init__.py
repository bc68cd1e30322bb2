"""Findings: the catalogue of controls, the controls by family, mutes and the runner.

- ``catalogue``: ``controls.json`` (beside it) read and validated; ``SEVERITIES``.
- ``controls``: one module per family; a function ``sig_03`` implements ``SIG-03``.
- ``mutes``: accepted, temporary exceptions.
- ``runner``: :func:`run_controls` turns the controls' outcomes into finding rows.
"""

from audit.findings.catalogue import SEVERITIES, Control, load_catalogue
from audit.findings.controls import CONTROLS
from audit.findings.controls.base import Outcome, Scope
from audit.findings.mutes import MUTE_COLUMNS, apply_mutes, read_mutes
from audit.findings.runner import FINDING_COLUMNS, STATUSES, finding_uid, run_controls, summarise

__all__ = [
    "CONTROLS",
    "FINDING_COLUMNS",
    "MUTE_COLUMNS",
    "SEVERITIES",
    "STATUSES",
    "Control",
    "Outcome",
    "Scope",
    "apply_mutes",
    "finding_uid",
    "load_catalogue",
    "read_mutes",
    "run_controls",
    "summarise",
]
