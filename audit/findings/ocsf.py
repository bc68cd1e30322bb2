"""Findings as OCSF Compliance Findings (class 2003, category Findings), for SIEMs.

:func:`ocsf_findings` turns the findings frame (:data:`audit.findings.FINDING_COLUMNS`) into one
OCSF 1.8.0 event per finding, written by ``audit report`` as ``findings.ocsf.json`` (a JSON
list) in every run folder. The attributes follow the schema's own files
(``events/findings/compliance_finding.json``, which extends ``finding`` and ``base_event``;
the objects ``metadata``, ``product``, ``finding_info``, ``compliance``, ``remediation`` and
``resource_details``); ``tests/test_findings_ocsf.py`` checks every event against copies of them
(``tests/data/ocsf``).

=======================  =======================================================================
OCSF attribute           from the finding
=======================  =======================================================================
``activity_id``          1 (Create): the run creates the finding; ``type_uid`` 200301
``severity_id``          critical 5, high 4, medium 3, low 2, info 1
``status_id``            1 (New); 3 (Suppressed) for a ``muted`` finding
``time``                 ``as_of`` (ms since the epoch): the same run of a period gives the same
                         bytes; ``start_time``/``end_time``: the period
``finding_info``         ``uid`` the finding uid, ``title``, ``desc`` the reason, ``types`` the
                         control id, ``src_url`` its entry in the docs
``compliance``           ``control`` the control id, ``standards`` ["audit webhook controls"],
                         ``requirements`` the spec section, ``status_id`` Pass 1, Fail 3, and
                         Unknown 0 / Other 99 for skip, info and error (``status`` says which)
``resources``            the resource judged (``name``)
``remediation``          ``desc`` the remediation, ``references`` the docs entry
``unmapped``             the evidence, the period, the run id and the finding's own status
=======================  =======================================================================
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import pandas as pd

__all__ = [
    "ACTIVITY_CREATE",
    "CATEGORY_UID",
    "CLASS_UID",
    "OCSF_VERSION",
    "SEVERITY_IDS",
    "ocsf_findings",
]

#: The OCSF schema version the events follow.
OCSF_VERSION = "1.8.0"
#: Category Findings.
CATEGORY_UID = 2
#: Compliance Finding: category 2, class 3.
CLASS_UID = 2003
#: Activity Create.
ACTIVITY_CREATE = 1
#: The catalogue's severities as OCSF ``severity_id``.
SEVERITY_IDS = {"critical": 5, "high": 4, "medium": 3, "low": 2, "info": 1}
_SEVERITY_NAMES = {5: "Critical", 4: "High", 3: "Medium", 2: "Low", 1: "Informational"}
#: A finding's status as the compliance object's ``(status_id, status)``.
_COMPLIANCE = {
    "pass": (1, "Pass"),
    "fail": (3, "Fail"),
    "skip": (0, "Unknown"),
    "info": (99, "Info"),
    "error": (99, "Error"),
}
#: The standard every control belongs to (docs/controls.md).
STANDARD = "audit webhook controls"
_PRODUCT = {"name": "audit", "vendor_name": "audit"}


class PeriodLike(Protocol):
    """A report period (:class:`audit.report.params.Period`)."""

    @property
    def label(self) -> str: ...


def _ms(value: object) -> int:
    """A time as milliseconds since the epoch (OCSF ``timestamp_t``)."""
    ts = pd.Timestamp(value)  # type: ignore[arg-type]  # a time from the findings frame
    if ts.tzinfo is None:
        ts = ts.tz_localize("UTC")
    return int(ts.value // 1_000_000)


def _evidence(value: object) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            return {"text": value}
        return parsed if isinstance(parsed, dict) else {"value": parsed}
    return {}


def _event(
    row: Mapping[Any, Any], *, run_id: str, label: str, time_ms: int, version: str
) -> dict[str, Any]:
    evidence = _evidence(row.get("evidence"))
    status = str(row["status"])
    judged = status
    if status == "muted":
        muted = evidence.get("muted")
        judged = str(muted.get("original_status", "")) if isinstance(muted, Mapping) else ""
    compliance_id, compliance_status = _COMPLIANCE.get(judged, (0, "Unknown"))
    severity_id = SEVERITY_IDS.get(str(row["severity"]), 0)
    docs_ref = str(row.get("docs_ref") or "")
    spec_ref = str(row.get("spec_ref") or "")
    control = str(row["check_id"])
    finding_info: dict[str, Any] = {
        "uid": str(row["finding_uid"]),
        "title": str(row["title"]),
        "desc": str(row["reason"]),
        "types": [control],
    }
    if docs_ref:
        finding_info["src_url"] = docs_ref
    compliance: dict[str, Any] = {
        "control": control,
        "standards": [STANDARD],
        "status_id": compliance_id,
        "status": compliance_status,
        "status_detail": str(row["reason"]),
    }
    if spec_ref:
        compliance["requirements"] = [spec_ref]
    remediation: dict[str, Any] = {"desc": str(row["remediation"])}
    if docs_ref:
        remediation["references"] = [docs_ref]
    suppressed = status == "muted"
    return {
        "activity_id": ACTIVITY_CREATE,
        "activity_name": "Create",
        "category_uid": CATEGORY_UID,
        "category_name": "Findings",
        "class_uid": CLASS_UID,
        "class_name": "Compliance Finding",
        "type_uid": CLASS_UID * 100 + ACTIVITY_CREATE,
        "type_name": "Compliance Finding: Create",
        "severity_id": severity_id,
        "severity": _SEVERITY_NAMES.get(severity_id, "Unknown"),
        "status_id": 3 if suppressed else 1,
        "status": "Suppressed" if suppressed else "New",
        "time": time_ms,
        "start_time": _ms(row["period_start"]),
        "end_time": _ms(row["period_end"]),
        "message": str(row["reason"]),
        "metadata": {
            "version": OCSF_VERSION,
            "product": {**_PRODUCT, "version": version},
            "uid": f"{run_id}/{row['finding_uid']}",
            "correlation_uid": run_id,
            "log_name": "findings",
        },
        "finding_info": finding_info,
        "compliance": compliance,
        "resources": [{"name": str(row["resource"])}],
        "remediation": remediation,
        "unmapped": {
            "audit_status": status,
            "evidence": evidence,
            "period": label,
            "run_id": run_id,
        },
    }


def ocsf_findings(
    findings: pd.DataFrame,
    *,
    run_id: str,
    period: PeriodLike | str,
    as_of: object,
    product_version: str,
) -> list[dict[str, Any]]:
    """One OCSF Compliance Finding (class 2003) per finding, in the frame's order.

    Parameters
    ----------
    findings
        From :func:`audit.findings.run_controls` (``evidence`` a JSON string) or read back from
        ``findings.json`` (``evidence`` an object); ``spec_ref`` and ``docs_ref`` may be absent.
    run_id
        The run folder's id (``metadata.correlation_uid``; with the finding uid,
        ``metadata.uid``).
    period
        The period judged (its ``label``, or the label itself).
    as_of
        The time the data were judged at: the events' ``time``.
    product_version
        The toolkit's version (``metadata.product.version``).

    Examples
    --------
    >>> f = pd.DataFrame([{"finding_uid": "5793585fd741d97a", "check_id": "SIG-01",
    ...     "title": "t", "severity": "critical", "status": "fail", "reason": "r",
    ...     "resource": "all requests", "evidence": "{}", "remediation": "fix",
    ...     "period_start": pd.Timestamp("2026-10-01", tz="UTC"),
    ...     "period_end": pd.Timestamp("2026-11-01", tz="UTC")}])
    >>> e = ocsf_findings(f, run_id="r1", period="2026-10", as_of="2026-11-01T00:00:00Z",
    ...                   product_version="0.1")[0]
    >>> e["type_uid"], e["severity_id"], e["compliance"]["status"], e["time"]
    (200301, 5, 'Fail', 1793491200000)
    """
    label = period if isinstance(period, str) else str(period.label)
    time_ms = _ms(as_of)
    return [
        _event(row, run_id=run_id, label=label, time_ms=time_ms, version=product_version)
        for row in findings.to_dict(orient="records")
    ]
