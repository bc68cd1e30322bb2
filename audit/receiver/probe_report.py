"""The probe's outputs: ``probe.json``, findings (``PRB`` family), JUnit XML and an HTML page.

Findings have the columns of the report's findings (:data:`audit.findings.FINDING_COLUMNS`); the
``PRB`` entries (title, severity, rationale, remediation) live in ``audit/receiver/probes.json``
and are read and validated by the same loader as the report's catalogue
(:func:`audit.findings.catalogue.load_catalogue`), so the report's runner is not involved.
Nothing written holds a secret or a signature: only ids, statuses, times and one-line details.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from audit.atomic import write_json_atomic, write_text_atomic
from audit.findings import FINDING_COLUMNS, finding_uid
from audit.findings.catalogue import SEVERITIES, Control, load_catalogue
from audit.findings.controls.base import evidence_json
from audit.receiver.probe import USER_AGENT, CheckResult, ProbeResult
from audit.receiver.probe_plan import check_by_id
from audit.report.templating import render
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
                "spec_ref": control.spec_ref,
                "docs_ref": control.docs_ref,
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


#: Severities, most severe first (the page's order and its summary's).
_SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}
_STATUS_RANK = {"fail": 0, "skip": 1, "pass": 2}


def _when(t: datetime) -> str:
    """A time as people read it: to the second, in UTC (no microseconds)."""
    return f"{t.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def _ms(ms: float | None) -> str:
    """``12 ms``, ``1,204 ms``, ``under 1 ms``; "not recorded" when no time was taken.

    >>> _ms(1204.4), _ms(0.2), _ms(None)
    ('1,204 ms', 'under 1 ms', 'not recorded')
    """
    if ms is None:
        return "not recorded"
    return "under 1 ms" if ms < 0.5 else f"{ms:,.0f} ms"


def _duration(seconds: float) -> str:
    """``1.5 s``, ``2 min 5 s``.

    >>> _duration(1.46), _duration(0.01), _duration(125.2)
    ('1.5 s', 'under 0.1 s', '2 min 5 s')
    """
    if seconds < 0.05:
        return "under 0.1 s"
    whole = round(seconds)
    return f"{seconds:.1f} s" if whole < 60 else f"{whole // 60} min {whole % 60} s"


def _check_view(result: ProbeResult, c: CheckResult, order: int) -> dict[str, Any]:
    """What the page shows of one check: what was sent, what came back, the verdict."""
    plan = check_by_id(c.id)
    control = probe_catalogue()[plan.finding_id]
    status = _status(c.passed)
    sent = c.id != "within_timeout" and c.passed is not None
    if c.id == "within_timeout":
        answer = f"slowest answer {_ms(c.ms)}" if c.ms is not None else "no answer to judge"
    elif c.passed is None:
        answer = "nothing sent (skipped)"
    elif c.status is None:
        answer = f"no answer (gave up after {_ms(c.ms)})"
    else:
        answer = f"HTTP {c.status} in {_ms(c.ms)}"
    return {
        "order": order,
        "id": c.id,
        "finding": control.id,
        "title": control.title,
        "severity": control.severity,
        "status": status,
        "sends": plan.sends,
        "request": f"POST {result.target}" if sent else "",
        "event_id": c.event_id or "",
        "delivery_id": c.delivery_id or "",
        "expected": c.expected,
        "answer": answer,
        "detail": c.detail,
        "rationale": control.rationale,
        "remediation": control.remediation if status == "fail" else "",
    }


def probe_html(result: ProbeResult) -> str:
    """The probe's page (``templates/html/probe.html.j2``, the report's stylesheet): a verdict
    and a summary by severity, then every check, failures first and most severe first, each
    with what was sent (method, URL with its query redacted, what the request varies, the
    event and delivery ids) and what came back (status, time). Self-contained: no script, no
    remote resource; every value escaped."""
    checks = [_check_view(result, c, n) for n, c in enumerate(result.checks)]
    checks.sort(
        key=lambda v: (_STATUS_RANK[v["status"]], _SEVERITY_RANK.get(v["severity"], 99), v["order"])
    )
    failing = [v for v in checks if v["status"] == "fail"]
    by_severity = {s: sum(v["severity"] == s for v in failing) for s in SEVERITIES}
    shown = tuple(s for s in SEVERITIES if s != "info" or by_severity[s])
    by_status = {k: sum(v["status"] == k for v in checks) for k in ("fail", "pass", "skip")}
    seconds = (result.finished_at - result.started_at).total_seconds()
    return render(
        "probe.html.j2",
        target=result.target,
        subscription=result.subscription_id,
        started=_when(result.started_at),
        finished=_when(result.finished_at),
        duration=_duration(max(seconds, 0.0)),
        timeout=f"{result.timeout_s:g} s",
        user_agent=USER_AGENT,
        passed=result.passed,
        failing=len(failing),
        total=len(checks),
        severity=by_severity,
        severity_order=shown,
        status=by_status,
        failures=failing,
        checks=checks,
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
