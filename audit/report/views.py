"""The report's sections as HTML, from a :class:`~audit.report.rundir.RunData` (read, format).

Each function returns an object the notebook displays. Nothing here computes a finding: the
numbers come from the run folder. Every attacker-controlled text is escaped, URLs defanged.
"""

from __future__ import annotations

import json

import pandas as pd

from audit.findings import SEVERITIES
from audit.report.format import HTML, table
from audit.report.markup import CSS, badge, badges, esc, text
from audit.report.rundir import RunData, open_run

__all__ = [
    "appendix",
    "deliveries",
    "failing",
    "family",
    "header",
    "open_run",
    "retries",
    "signatures",
    "subscriptions",
    "summary",
    "takedown",
    "trend",
    "waiting",
]

STATUS_ORDER = ("fail", "error", "pass", "skip", "info", "muted")
FINDING_SPEC = {
    "check_id": ("Control", "text"),
    "severity": ("Severity", "severity"),
    "status": ("Status", "status"),
    "resource": ("Resource", "text"),
    "reason": ("Reason", "text"),
}


def _when(iso: object) -> str:
    try:
        return f"{pd.Timestamp(str(iso)).tz_convert('UTC'):%Y-%m-%d %H:%M} UTC"
    except (ValueError, TypeError):
        return str(iso or "")


def header(run: RunData) -> HTML:
    """Title and the fields an auditor checks first (with the style sheet)."""
    m = run.manifest
    p = m.get("period", {})
    end_incl = pd.Timestamp(p.get("end")) - pd.Timedelta(days=1)
    n_inputs = len(m.get("inputs", []))
    fields = [
        ("Client", m.get("client_id") or "all clients"),
        ("Period", f"{p.get('label')}: {p.get('start', '')[:10]} to {end_incl:%Y-%m-%d} (UTC)"),
        ("Judged as of", _when(m.get("as_of"))),
        ("Run id", m.get("run_id")),
        ("Generated at", _when(m.get("started"))),
        ("Toolkit version", m.get("versions", {}).get("audit", "unknown")),
        ("Input files", f"{n_inputs} (sizes and sha256 in manifest.json and the appendix)"),
    ]
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in fields)
    return HTML(
        f"<style>{CSS}</style><div class='audit-header'>"
        f"<h1>{esc(m.get('title', 'Webhook delivery compliance report'))}</h1>"
        f"<dl>{rows}</dl></div>"
    )


def summary(run: RunData) -> HTML:
    """Counts by status and, for failures, by severity, as badges."""
    f = run.findings
    by_status = {str(k): n for k, n in f["status"].value_counts().items()} if len(f) else {}
    failing = f[f["status"].isin(["fail", "error"])] if len(f) else f
    by_sev = (
        {str(k): n for k, n in failing["severity"].value_counts().items()} if len(failing) else {}
    )
    n_fail = int(by_status.get("fail", 0))
    verdict = (
        f"{n_fail} control finding(s) failed." if n_fail else "No control finding failed."
    ) + f" {len(f)} findings in all."
    return HTML(
        f"<p>{esc(verdict)}</p>"
        f"<div class='badge-row'><b>By status:</b> {badges(by_status, STATUS_ORDER)}</div>"
        f"<div class='badge-row'><b>Failures by severity:</b> {badges(by_sev, SEVERITIES)}</div>"
        "<p class='note'>skip: the control could not be judged on this period's data (the "
        "reason says why); info: reported, not judged.</p>"
    )


def _evidence(raw: object) -> str:
    try:
        ev = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return text(raw)
    if not isinstance(ev, dict) or not ev:
        return text(raw) if raw not in (None, "", "{}") else "—"
    parts = []
    for k, v in ev.items():
        if isinstance(v, list):
            shown = ", ".join(map(str, v[:8])) + (f" … ({len(v)} in all)" if len(v) > 8 else "")
        elif isinstance(v, float):
            shown = f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
        elif isinstance(v, dict):
            shown = json.dumps(
                {k2: round(x, 2) if isinstance(x, float) else x for k2, x in v.items()},
                default=str,
            )
        else:
            shown = str(v)
        parts.append(f"<b>{esc(k)}</b>: {text(shown[:600])}")
    return "<br>".join(parts)


def failing(run: RunData) -> HTML:
    """Every failing (or errored) finding with its remediation, evidence and uid."""
    f = run.findings
    bad = f[f["status"].isin(["fail", "error"])] if len(f) else f
    if bad.empty:
        return HTML("<p>No finding failed in this period.</p>")
    cards = []
    for r in bad.to_dict("records"):
        cards.append(
            "<div class='finding'>"
            f"<h4>{badge(r['status'])}{badge(r['severity'])} {esc(r['check_id'])} · "
            f"{esc(r['title'])}</h4><dl>"
            f"<dt>Resource</dt><dd>{text(r['resource'])}</dd>"
            f"<dt>Reason</dt><dd>{text(r['reason'])}</dd>"
            f"<dt>Remediation</dt><dd>{text(r.get('remediation', ''))}</dd>"
            f"<dt>Evidence</dt><dd>{_evidence(r.get('evidence'))}</dd>"
            f"<dt>Finding uid</dt><dd class='uid'>{esc(r['finding_uid'])}</dd>"
            "</dl></div>"
        )
    return HTML("".join(cards))


def trend(run: RunData) -> HTML:
    """New, resolved and persisting failures against the previous period's completed run."""
    t = run.trend or {}
    prev = t.get("previous")
    if not prev:
        return HTML(
            "<p class='note'>No completed run of the previous period in this reports folder: "
            "no trend to show.</p>"
        )
    counts = {k: len(t.get(k, [])) for k in ("new", "resolved", "persisting")}
    head = (
        f"<p>Compared with run <span class='uid'>{esc(prev.get('run_id'))}</span> of "
        f"{esc(prev.get('period'))}, failures matched by control and resource: "
        f"{badges(counts, ('new', 'resolved', 'persisting'))}</p>"
    )
    spec = {
        "check_id": ("Control", "text"),
        "severity": ("Severity", "severity"),
        "resource": ("Resource", "text"),
        "finding_uid": ("Finding uid", "text"),
    }
    parts = [head]
    resolved_spec = {**spec, "status_now": ("Status now", "status")}
    for key, caption in (
        ("new", "New failures"),
        ("persisting", "Persisting failures"),
        ("resolved", "No longer failing (uid of the previous period; skip: not judged now)"),
    ):
        cols = resolved_spec if key == "resolved" else spec
        parts.append(str(table(pd.DataFrame(t.get(key, [])), cols, caption=caption)))
    return HTML("".join(parts))


def family(run: RunData, prefix: str) -> HTML:
    """The findings of one family of controls (``SIG``, ``DLV``, ``SUB``, ``TKD``)."""
    f = run.findings
    fam = f[f["check_id"].str.startswith(prefix)] if len(f) else f
    return table(fam, FINDING_SPEC, caption=f"{prefix} findings", max_rows=100)


def signatures(run: RunData) -> HTML:
    """Verdict counts and the requests that are not valid."""
    counts = table(
        run.table("verdict_counts"),
        {"verdict": ("Verdict", "label"), "count": ("Requests", "int"), "share": ("Share", "pct")},
        caption="Signature verdicts of the period's requests",
        empty="no request in the period",
    )
    bad = table(
        run.table("not_valid_requests"),
        {
            "received_at": ("Received (UTC)", "time"),
            "subscription_id": ("Subscription", "text"),
            "delivery_id": ("Delivery id", "text"),
            "verdict": ("Verdict", "label"),
            "response_status": ("Receiver answered", "int"),
            "source": ("File", "file"),
            "line": ("Line", "int"),
            "detail": ("Detail", "text"),
        },
        caption="Requests that are not valid",
        full="tables/deliveries.parquet",
    )
    return counts + bad


def deliveries(run: RunData) -> HTML:
    """Event outcomes, undelivered events, success rates and latency percentiles."""
    rate = {
        "group": ("Group", "text"),
        "first_attempts": ("First attempts", "int"),
        "first_attempt_success": ("First-attempt success", "pct"),
        "events": ("Events", "int"),
        "event_success": ("Event success", "pct"),
    }
    lat = run.table("latency").copy()
    labels = {
        "ack_latency_ms": ("Acknowledgement latency", 1e-3),
        "emission_latency_s": ("Emission latency", 1.0),
        "clock_skew_s": ("Clock skew", 1.0),
        "abs_clock_skew_s": ("Clock skew, absolute", 1.0),
    }
    if not lat.empty:
        scale = lat["metric"].map(lambda m: labels.get(m, (m, 1.0))[1])
        for col in ("p50", "p95", "p99", "max"):
            lat[col] = lat[col] * scale
        lat["metric"] = lat["metric"].map(lambda m: labels.get(m, (m, 1.0))[0])
    return (
        table(
            run.table("event_outcomes"),
            {
                "subscription_id": ("Subscription", "text"),
                "outcome": ("Outcome", "label"),
                "events": ("Events", "int"),
            },
            caption="Event outcomes",
        )
        + table(
            run.table("undelivered_events"),
            {
                "subscription_id": ("Subscription", "text"),
                "event_id": ("Event id", "text"),
                "event": ("Event type", "text"),
                "incident_id": ("Incident", "text"),
                "attempts": ("Attempts", "int"),
                "outcome": ("Outcome", "label"),
            },
            caption="Events never delivered",
            full="tables/events.parquet",
        )
        + table(run.table("success_by_subscription"), rate, caption="Success by subscription")
        + table(run.table("success_by_event"), rate, caption="Success by event type")
        + table(
            lat,
            {
                "metric": ("Measure", "text"),
                "n": ("Values", "int"),
                "p50": ("Median", "s"),
                "p95": ("95th percentile", "s"),
                "p99": ("99th percentile", "s"),
                "max": ("Maximum", "s"),
            },
            caption="Latency and clock skew",
        )
    )


def retries(run: RunData) -> HTML:
    """Attempts off the published schedule, and events retried after a timely 2xx."""
    return table(
        run.table("off_schedule_attempts"),
        {
            "subscription_id": ("Subscription", "text"),
            "event_id": ("Event id", "text"),
            "attempt_no": ("Attempt", "int"),
            "delay_s": ("Delay", "s"),
            "expected_delay_s": ("Expected delay", "s"),
            "received_at": ("Received (UTC)", "time"),
        },
        caption="Attempts off the published schedule",
        full="tables/deliveries.parquet",
    ) + table(
        run.table("retried_after_success"),
        {
            "subscription_id": ("Subscription", "text"),
            "event_id": ("Event id", "text"),
            "attempts": ("Attempts", "int"),
        },
        caption="Events retried after a timely 2xx (a vendor fault)",
        full="tables/events.parquet",
    )


def takedown(run: RunData) -> HTML:
    """The clock's start and end, then median and p90 time to takedown with their bounds."""
    start = (
        "incident creation"
        if run.manifest.get("parameters", {}).get("clock_start", "created") == "created"
        else "takedown (burn) start"
    )
    spec = {
        "by": ("Grouped by", "label"),
        "group": ("Group", "text"),
        "n": ("Incidents", "int"),
        "events": ("Taken down", "int"),
        "censored": ("Censored", "int"),
        "median_h": ("Median", "h"),
        "median_ci_lower_h": ("Median, lower 95%", "h"),
        "median_ci_upper_h": ("Median, upper 95%", "h"),
        "p90_h": ("90th percentile", "h"),
    }
    return HTML(
        f"<p>Time to takedown runs from <b>{esc(start)}</b> to <b>takedown success</b>. "
        "Incidents not taken down are censored at their close or at as_of (Kaplan-Meier, 95% "
        "log-log bands). An empty cell means the curve did not get that low.</p>"
    ) + table(
        run.table("takedown_summary"),
        spec,
        caption="Time to takedown",
        empty="no incident in the data",
    )


def waiting(run: RunData) -> HTML:
    """Incidents waiting on the client at as_of, longest first."""
    return table(
        run.table("waiting_on_client"),
        {
            "incident_id": ("Incident", "text"),
            "status": ("Status", "label"),
            "incident_class": ("Class", "text"),
            "domain": ("Domain", "url"),
            "url": ("URL (defanged)", "url"),
            "awaiting_client_s": ("Waiting for", "s"),
        },
        caption="Incidents waiting on the client at as_of",
        full="tables/incidents.csv",
    )


def subscriptions(run: RunData) -> HTML:
    """The latest listing snapshot fetched at or before as_of."""
    s = run.table("subscriptions_latest")
    if s.empty:
        return HTML(
            "<p class='note'>No listing snapshot fetched before as_of was given: subscription "
            "controls are skipped.</p>"
        )
    when = pd.Timestamp(s["fetched_at"].max())
    return table(
        s,
        {
            "subscription_id": ("Subscription", "text"),
            "url": ("URL (defanged)", "url"),
            "active": ("Active", "text"),
            "events": ("Events", "text"),
            "last_delivery_status": ("Last delivery", "label"),
            "secret_exposed": ("Secret in listing", "text"),
        },
        caption=f"Subscriptions listed at {when:%Y-%m-%d %H:%M} UTC (latest snapshot before as_of)",
    )


def appendix(run: RunData) -> HTML:
    """Inputs (file, size, sha256, records, unreadable), parameters, notes and versions."""
    m = run.manifest
    inputs = table(
        pd.DataFrame(m.get("inputs", [])),
        {
            "kind": ("Kind", "text"),
            "source": ("File", "text"),
            "size": ("Bytes", "int"),
            "records": ("Records", "int"),
            "unreadable": ("Unreadable", "int"),
            "sha256": ("sha256", "hash"),
        },
        caption="Input files (the secrets file: size only, never hashed)",
        max_rows=500,
    )
    given = m.get("parameters", {})
    params = pd.DataFrame(
        {"name": list(given), "value": [json.dumps(v, default=str) for v in given.values()]}
    )
    vers = pd.DataFrame(
        {"name": list(m.get("versions", {})), "value": list(m.get("versions", {}).values())}
    )
    notes = pd.DataFrame({"note": m.get("notes", [])})
    kv = {"name": ("Name", "text"), "value": ("Value", "text")}
    nb = m.get("notebook", {})
    return (
        inputs
        + table(params, kv, caption="Parameters")
        + table(notes, {"note": ("Note", "text")}, caption="Notes from the analyses")
        + table(vers, kv, caption="Versions")
        + HTML(
            f"<p class='note'>Notebook: {esc(nb.get('path'))} (sha256 "
            f"<span class='uid'>{esc(nb.get('sha256'))}</span>).</p>"
        )
    )
