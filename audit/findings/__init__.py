"""Findings: the catalogue of controls, the controls by family, mutes and the runner.

- ``catalogue``: ``controls.json`` (beside it) read and validated; ``SEVERITIES``.
- ``controls``: one module per family; a function ``sig_03`` implements ``SIG-03``.
- ``mutes``: accepted, temporary exceptions.
- ``runner``: :func:`run_controls` turns the controls' outcomes into finding rows.
"""

import typing

from audit.lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:
    from audit.findings.catalogue import SEVERITIES, Control, load_catalogue
    from audit.findings.controls import CONTROLS
    from audit.findings.controls.base import Outcome, Scope
    from audit.findings.mutes import MUTE_COLUMNS, apply_mutes, read_mutes
    from audit.findings.runner import (
        FINDING_COLUMNS,
        STATUSES,
        finding_uid,
        run_controls,
        summarise,
    )

#: Where each public name lives, imported on first use (PEP 562): ``audit --help`` reads
#: ``catalogue.SEVERITIES`` and must not import the controls (pandas) with it.
_WHERE = {
    "SEVERITIES": "audit.findings.catalogue",
    "Control": "audit.findings.catalogue",
    "load_catalogue": "audit.findings.catalogue",
    "CONTROLS": "audit.findings.controls",
    "Outcome": "audit.findings.controls.base",
    "Scope": "audit.findings.controls.base",
    "MUTE_COLUMNS": "audit.findings.mutes",
    "apply_mutes": "audit.findings.mutes",
    "read_mutes": "audit.findings.mutes",
    "FINDING_COLUMNS": "audit.findings.runner",
    "STATUSES": "audit.findings.runner",
    "finding_uid": "audit.findings.runner",
    "run_controls": "audit.findings.runner",
    "summarise": "audit.findings.runner",
}


__getattr__, __dir__ = _lazy_names(globals(), _WHERE)


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
