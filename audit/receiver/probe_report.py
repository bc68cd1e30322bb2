"""The probe's outputs: ``probe.json``, findings (``PRB`` family), JUnit XML and an HTML page.

Findings have the columns of the report's findings (:data:`audit.findings.FINDING_COLUMNS`); the
``PRB`` entries (title, severity, rationale, remediation) live in ``audit/receiver/probes.json``
and are read and validated by the same loader as the report's catalogue
(:func:`audit.findings.catalogue.load_catalogue`), so the report's runner is not involved.
Nothing written holds a secret or a signature: only ids, statuses, times and one-line details.
"""

from __future__ import annotations

import html
import json
import os
import re
import xml.etree.ElementTree as ET
from functools import cache
from importlib import resources
from pathlib import Path

import pandas as pd

from audit.atomic import write_json_atomic, write_text_atomic
from audit.findings import FINDING_COLUMNS, finding_uid
from audit.findings.catalogue import Control, load_catalogue
from audit.findings.controls.base import evidence_json
from audit.receiver.probe import ProbeResult
from audit.receiver.probe_plan import check_by_id
from audit.safe import write_csv

__all__ = ["findings_frame", "junit_xml", "probe_catalogue", "probe_html", "write_outputs"]

#: File names written into ``--out``.
OUTPUT_FILES = ("probe.json", "findings.json", "findings.csv", "junit.xml", "probe.html")


@cache
def probe_catalogue() -> dict[str, Control]:
    """The ``PRB`` entries by id, validated like ``audit/findings/controls.json``.

    >>> probe_catalogue()["PRB-06"].severity
    'critical'
    """
    ref = resources.files("audit.receiver").joinpath("probes.json")
    with resources.as_file(ref) as path:
        return load_catalogue(path)


def _status(passed: bool | None) -> str:
    return "skip" if passed is None else ("pass" if passed else "fail")


def findings_frame(result: ProbeResult) -> pd.DataFrame:
    """One finding per check, in the report's findings shape; the period is the probe run.

    The ``resource`` is the receiver URL; the evidence holds the check id, expected and
    actual status, time, and the event and delivery ids sent (never a secret).
    """
    catalogue = probe_catalogue()
    start = pd.Timestamp(result.started_at).tz_convert("UTC")
    end = pd.Timestamp(result.finished_at).tz_convert("UTC")
    rows = []
    for c in result.checks:
        control = catalogue[check_by_id(c.id).finding_id]
        evidence = {
            "check": c.id,
            "expected": c.expected,
            "status": c.status,
            "ms": c.ms,
            "event_id": c.event_id,
            "delivery_id": c.delivery_id,
        }
        rows.append(
            {
                "finding_uid": finding_uid(control.id, result.target, start, end),
                "check_id": control.id,
                "title": control.title,
                "severity": control.severity,
                "status": _status(c.passed),
                "reason": c.detail,
                "resource": result.target,
                "evidence": evidence_json(evidence),
                "remediation": control.remediation,
                "period_start": start,
                "period_end": end,
            }
        )
    return pd.DataFrame(rows, columns=list(FINDING_COLUMNS))


# XML 1.0 cannot hold most control characters, even escaped.
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _xml_text(value: object) -> str:
    return _XML_BAD.sub("\ufffd", str(value))


def junit_xml(result: ProbeResult) -> str:
    """A JUnit XML report: one ``testcase`` per check, ``failure``/``skipped`` as CI tools read.

    Built with :mod:`xml.etree.ElementTree` (which escapes); control characters are replaced.
    """
    failures = sum(c.passed is False for c in result.checks)
    skipped = sum(c.passed is None for c in result.checks)
    total_s = sum((c.ms or 0) for c in result.checks if c.id != "within_timeout") / 1000
    suites = ET.Element("testsuites", name="audit probe")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=_xml_text(f"audit probe {result.target}"),
        tests=str(len(result.checks)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{total_s:.3f}",
        timestamp=result.started_at.isoformat(),
    )
    for c in result.checks:
        case = ET.SubElement(
            suite,
            "testcase",
            classname="audit.probe",
            name=c.id,
            time=f"{(c.ms or 0) / 1000:.3f}" if c.id != "within_timeout" else "0.000",
        )
        if c.passed is False:
            el = ET.SubElement(case, "failure", message=_xml_text(c.detail), type=c.expected)
            el.text = _xml_text(f"expected {c.expected}, got {c.status}: {c.detail}")
        elif c.passed is None:
            ET.SubElement(case, "skipped", message=_xml_text(c.detail))
    ET.indent(suites)
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"
    )


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}
.pass{color:#17692e}.fail{color:#b00020;font-weight:bold}.skip{color:#777}
"""


def probe_html(result: ProbeResult) -> str:
    """A small self-contained HTML page (no script, no remote resource); every value escaped."""
    e = html.escape
    catalogue = probe_catalogue()
    rows = []
    for c in result.checks:
        control = catalogue[check_by_id(c.id).finding_id]
        status = _status(c.passed)
        ms = "" if c.ms is None else f"{c.ms:.0f}"
        rows.append(
            f"<tr><td>{e(control.id)}</td><td>{e(c.id)}</td><td class='{status}'>{status}</td>"
            f"<td>{e(control.severity)}</td><td>{e(c.expected)}</td>"
            f"<td>{'' if c.status is None else c.status}</td><td>{ms}</td><td>{e(c.detail)}</td>"
            f"<td>{e(control.remediation) if status == 'fail' else ''}</td></tr>"
        )
    failed = sum(c.passed is False for c in result.checks)
    verdict = "all checks passed" if failed == 0 else f"{failed} check(s) failed"
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; "
        "style-src 'unsafe-inline'\">"
        f"<title>audit probe: {e(result.target)}</title><style>{_CSS}</style></head><body>"
        f"<h1>Receiver conformance probe</h1><p>Target <code>{e(result.target)}</code>, "
        f"subscription <code>{e(result.subscription_id)}</code>, "
        f"{e(result.started_at.isoformat())} to {e(result.finished_at.isoformat())}: "
        f"<strong>{e(verdict)}</strong>.</p>"
        "<table><tr><th>finding</th><th>check</th><th>result</th><th>severity</th>"
        "<th>expected</th><th>status</th><th>ms</th><th>detail</th><th>remediation</th></tr>"
        + "".join(rows)
        + "</table></body></html>\n"
    )


def write_outputs(result: ProbeResult, out_dir: str | os.PathLike) -> list[Path]:
    """Write every file of :data:`OUTPUT_FILES` into ``out_dir`` (created); return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    findings = findings_frame(result)
    records = json.loads(findings.to_json(orient="records", date_format="iso"))
    for rec in records:  # as the report's findings.json: evidence as an object
        rec["evidence"] = json.loads(rec["evidence"])
    paths = [
        write_json_atomic(out / "probe.json", result.to_json()),
        write_json_atomic(out / "findings.json", records),
    ]
    write_csv(findings, out / "findings.csv")
    paths.append(out / "findings.csv")
    paths.append(write_text_atomic(out / "junit.xml", junit_xml(result)))
    paths.append(write_text_atomic(out / "probe.html", probe_html(result)))
    return paths
