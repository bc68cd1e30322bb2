"""The report's sections as HTML, from a :class:`~audit.report.rundir.RunData` (read, format).

Each function returns an object the notebook displays, rendered from a Jinja2 template in
``templates/html/`` (autoescaped: attacker-controlled text is escaped, URLs and host names
defanged). Nothing here computes a finding: the numbers come from the run folder.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, NamedTuple
from urllib.parse import quote, urlsplit

import pandas as pd

from audit.findings import SEVERITIES
from audit.findings.listing import LISTING_MAX_AGE, covers
from audit.report.format import (
    HTML,
    MISSING,
    Cell,
    duration,
    human,
    table,
    when,
)
from audit.report.index import TREND_KINDS
from audit.report.rundir import RunData, open_run
from audit.report.templating import render
from audit.words import words

__all__ = [
    "SECTIONS",
    "Evidence",
    "appendix",
    "deliveries",
    "evidence",
    "failing",
    "failing_controls",
    "failing_rows",
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

#: The report's sections: (anchor, heading), in the notebook's order. The notebook's headings
#: carry these anchors (a test checks), the header's table of contents links them.
SECTIONS = (
    ("summary", "Executive summary"),
    ("failing", "Failing findings"),
    ("trend", "Trend against the previous period"),
    ("signatures", "Signature verification"),
    ("deliveries", "Delivery health"),
    ("retries", "Retry schedule"),
    ("takedown", "Time to takedown"),
    ("waiting", "Incidents waiting on the client"),
    ("subscriptions", "Subscriptions"),
    ("appendix", "Appendix: inputs, parameters, versions"),
)
STATUS_ORDER = ("fail", "error", "pass", "skip", "info", "muted")
FAILING = ("fail", "error")
FINDING_SPEC = {
    "check_id": ("Control", "text"),
    "severity": ("Severity", "severity"),
    "status": ("Status", "status"),
    "resource": ("Resource", "text"),
    "reason": ("Reason", "text"),
    "finding_uid": ("Finding uid", "hash"),
}
#: A listing snapshot older than this before the period's end is flagged at the top; before
#: the period, it covers it no more (the one rule of :mod:`audit.findings.listing`).
STALE_SNAPSHOT = LISTING_MAX_AGE
#: Items of an evidence list shown (the rest counted).
LIST_SHOWN = 10
#: Rows of an evidence table shown (the rest counted).
TABLE_SHOWN = 12


class Banner(NamedTuple):
    """A warning at the top of the report."""

    title: str
    body: str
    items: list[str]
    alarm: bool = False


class Verdict(NamedTuple):
    """Pass or fail at a glance: failing counts by severity."""

    passed: bool
    sentence: str
    by_severity: dict[str, int]


def _failing(f: pd.DataFrame) -> pd.DataFrame:
    return f[f["status"].isin(FAILING)] if len(f) and "status" in f.columns else f.iloc[0:0]


def _counts(series: pd.Series) -> dict[str, int]:
    return {str(k): int(n) for k, n in series.value_counts().items()}


def verdict(findings: pd.DataFrame) -> Verdict:
    """The verdict: FAIL when any finding failed or errored, with counts by severity.

    >>> v = verdict(pd.DataFrame({"status": ["fail", "fail", "pass", "error"],
    ...                           "severity": ["critical", "high", "high", "medium"]}))
    >>> v.passed, v.sentence, v.by_severity
    (False, '3 of 4 findings failing: 1 critical, 1 high, 1 medium (1 control could not run).', {'critical': 1, 'high': 1, 'medium': 1})
    """  # noqa: E501
    bad = _failing(findings)
    by_sev = _counts(bad["severity"]) if len(bad) else {}
    n = len(findings)
    if bad.empty:
        return Verdict(True, f"No finding failed: {n:,} findings, none failing.", {})
    parts = ", ".join(f"{by_sev[s]:,} {s}" for s in SEVERITIES if by_sev.get(s))
    errors = int((bad["status"] == "error").sum())
    tail = f" ({errors:,} control{'s' if errors > 1 else ''} could not run)" if errors else ""
    return Verdict(False, f"{len(bad):,} of {n:,} findings failing: {parts}{tail}.", by_sev)


def _deliveries(run: RunData) -> dict[str, Any]:
    """Coverage: the manifest's, else counted from the verdict table (older run folders)."""
    cov = run.manifest.get("coverage")
    if isinstance(cov, Mapping) and "deliveries" in cov:
        return dict(cov)
    vc = run.table("verdict_counts")
    if vc.empty or "count" not in vc.columns:
        return {}
    valid = vc.loc[vc["verdict"] == "valid", "count"].sum() if "verdict" in vc.columns else None
    return {"deliveries": int(vc["count"].sum()), "valid": None if valid is None else int(valid)}


def _newest_snapshot(run: RunData) -> pd.Timestamp | None:
    snaps = run.manifest.get("snapshots")
    taken: object = snaps.get("newest_taken_at") if isinstance(snaps, Mapping) else None
    if taken is None:
        s = run.table("subscriptions_latest", ["fetched_at"])
        taken = s["fetched_at"].max() if not s.empty else None
    return _utc(taken)


def _listing_covers(run: RunData, newest: pd.Timestamp, end: pd.Timestamp) -> bool:
    """Whether a listing covers the period (:mod:`audit.findings.listing`), as the run
    recorded it; for an older run folder, the rule applied to its newest snapshot."""
    snaps = run.manifest.get("snapshots")
    given = snaps.get("covers_period") if isinstance(snaps, Mapping) else None
    if isinstance(given, bool):
        return given
    start = _utc((run.manifest.get("period") or {}).get("start"))
    return start is not None and covers(pd.Series([newest]), start, end)


def _utc(value: object) -> pd.Timestamp | None:
    """An instant in UTC (a naive one taken as UTC), or None when absent or no time."""
    if value is None:
        return None
    try:
        ts = pd.Timestamp(value)  # type: ignore[arg-type]  # any value: errors caught below
    except (ValueError, TypeError):
        return None
    if not isinstance(ts, pd.Timestamp):  # NaT
        return None
    return ts.tz_localize("UTC") if ts.tzinfo is None else ts.tz_convert("UTC")


def _inputs_line(inputs: list[dict[str, Any]]) -> str:
    kinds = Counter(str(i.get("kind", "file")) for i in inputs)
    files = ", ".join(f"{n:,} × {k}" for k, n in kinds.items()) or "none"
    records = sum(int(i.get("records") or 0) for i in inputs)
    unreadable = sum(int(i.get("unreadable") or 0) for i in inputs)
    return f"{files}; {records:,} records read, {unreadable:,} unreadable"


def _page_label(*parts: object) -> str:
    """Text for the printed pages' margin (inside a CSS string: a safe set of characters)."""
    return re.sub(r"[^A-Za-z0-9 ._:+·-]", "", " ".join(str(p) for p in parts if p))[:120]


def header(run: RunData) -> HTML:
    """The top of the report: style sheet, the verdict, what the report covers (period,
    deliveries received, inputs, the newest listing snapshot), banners when the period had no
    delivery, when the newest snapshot is over 7 days older than the period's end, and when
    inputs were skipped; then the table of contents."""
    m = run.manifest
    p = m.get("period") or {}
    start, end = _day(p.get("start")), _utc(p.get("end"))
    end_incl = MISSING if end is None else f"{end - pd.Timedelta(days=1):%Y-%m-%d}"
    period_line = f"Period {p.get('label', '')}: {start} to {end_incl} (UTC)"
    cov = _deliveries(run)
    n_deliv = cov.get("deliveries")
    deliv = MISSING if n_deliv is None else f"{int(n_deliv):,}"
    if n_deliv is not None and cov.get("valid") is not None:
        deliv += f" ({int(cov['valid']):,} with a valid signature)"
    if cov.get("first_received") or cov.get("last_received"):
        deliv += f"; first {when(cov.get('first_received'))}, last {when(cov.get('last_received'))}"
    snap = _newest_snapshot(run)
    skipped = [s for s in m.get("skipped_inputs") or [] if isinstance(s, Mapping)]
    capture = cov.get("capture") if isinstance(cov.get("capture"), Mapping) else None
    facts = [
        ("Period", period_line.removeprefix("Period ")),
        ("Judged as of", when(m.get("as_of"))),
        ("Client", m.get("client_id") or "all clients"),
        ("Deliveries received", deliv),
        *([("Days with captures", _days_line(capture))] if capture else []),
        ("Inputs", _inputs_line(list(m.get("inputs") or []))),
        ("Inputs skipped", f"{len(skipped):,}"),
        ("Newest listing snapshot", when(snap) if snap is not None else "none"),
        ("Run id", m.get("run_id") or MISSING),
        ("Generated at", when(m.get("started"))),
        ("Toolkit version", (m.get("versions") or {}).get("audit", MISSING)),
    ]
    banners = []
    if n_deliv == 0:
        banners.append(
            Banner(
                "No delivery received in this period",
                f"The capture logs hold no request received from {start} to {end_incl}. The "
                "controls judge an empty period: check that the receiver was running and "
                "capturing, and that the right logs were given.",
                [],
                alarm=True,
            )
        )
    banners += _coverage_banners(cov)
    if snap is not None and end is not None and not _listing_covers(run, snap, end):
        banners.append(
            Banner(
                "No listing snapshot covers the period",
                f"The newest listing snapshot was taken {when(snap)}; none was fetched in the "
                f"period, nor before it within {STALE_SNAPSHOT.days} days of its end: the "
                "subscription controls and SIG-05 are skipped (a listing of another time is "
                "no evidence). Fetch a listing at the end of each period.",
                [],
                alarm=True,
            )
        )
    elif snap is not None and end is not None and snap < end - STALE_SNAPSHOT:
        age = duration((end - snap).total_seconds())
        banners.append(
            Banner(
                "Listing snapshot taken well before the period's end",
                f"The newest listing snapshot was taken {when(snap)}, {age} before the "
                "period's end: the subscription controls describe the subscriptions as they "
                "were then. Fetch a listing at the end of each period.",
                [],
            )
        )
    if skipped:
        banners.append(
            Banner(
                f"{len(skipped):,} input{'s' if len(skipped) > 1 else ''} skipped",
                "These inputs were given but not read; the report covers the others only.",
                [f"{s.get('path', MISSING)}: {s.get('reason', MISSING)}" for s in skipped[:20]]
                + ([f"and {len(skipped) - 20:,} more"] if len(skipped) > 20 else []),
            )
        )
    return HTML(
        render(
            "report_header.j2",
            title=m.get("title") or "Webhook delivery compliance report",
            run_id=m.get("run_id") or MISSING,
            period_line=period_line,
            page_label=_page_label("Run", m.get("run_id"), "· period", p.get("label")),
            verdict=verdict(run.findings),
            failing=failing_controls(run),
            severities=SEVERITIES,
            banners=banners,
            facts=facts,
            sections=SECTIONS,
        )
    )


def _days_line(capture: Mapping[str, Any]) -> str:
    """The days that held captures: "24 of 31 days held captures; none 2026-10-10 to
    2026-10-16" (and the hours, for a busy receiver, whose median hour held captures)."""
    held, days = int(capture.get("days_with_captures", 0)), int(capture.get("days", 0))
    line = f"{held:,} of {days:,} days held captures"
    if capture.get("busy"):
        line += (
            f" ({int(capture.get('hours_with_captures', 0)):,} of "
            f"{int(capture.get('hours', 0)):,} hours: shown for a receiver whose median hour "
            "held captures)"
        )
    runs = [r for r in capture.get("days_without") or [] if isinstance(r, list) and len(r) == 2]
    if runs:
        shown = [a if a == b else f"{a} to {b}" for a, b in runs[:LIST_SHOWN]]
        more = f" and {len(runs) - LIST_SHOWN:,} more" if len(runs) > LIST_SHOWN else ""
        line += f"; none {', '.join(shown)}{more}"
    if capture.get("captures") and not capture.get("judged"):
        line += " (a quiet receiver: its median day held none, so gaps are not judged)"
    return line


def _coverage_banners(cov: Mapping[str, Any]) -> list[Banner]:
    """Banners for the evidence's own coverage: the secrets file as the likely cause of
    failing verification, and spans of 24 h or more without a capture."""
    out = []
    ver = cov.get("verification")
    if isinstance(ver, Mapping) and ver.get("sentence"):
        name = ver.get("secrets_file") or "the secrets file"
        out.append(
            Banner(
                f"Most requests failed verification: check the secrets file {name}",
                f"{ver['sentence']} SIG-01 and SIG-02 leave these requests out instead of "
                "blaming the receiver, and the delivery and takedown controls miss the "
                "deliveries among them. Compare the file with the secrets the service issued "
                "(rotations included) and run the report again; if the file is right, these "
                "requests are forgeries and how the receiver answered them matters.",
                [],
                alarm=True,
            )
        )
    capture = cov.get("capture")
    gaps = capture.get("gaps") if isinstance(capture, Mapping) else None
    if gaps:
        items = []
        for g in gaps[:20]:
            span = f"{when(g.get('start'))} to {when(g.get('end'))}"
            span += f" ({duration(float(g.get('hours') or 0) * 3600)})"
            days = g.get("days_without")
            if days:
                last = "" if days[0] == days[1] else f" to {days[1]}"
                span += f"; no capture on {days[0]}{last}"
            items.append(span)
        if len(gaps) > 20:
            items.append(f"and {len(gaps) - 20:,} more")
        out.append(
            Banner(
                f"No capture for 24 h or more: {len(gaps):,} span{'s' if len(gaps) > 1 else ''}",
                "The capture logs hold no request in these spans, though the receiver's other "
                "days held captures: most likely a capture outage (receiver or capture down, a "
                "log lost or not given). Deliveries in them are unseen by every control (CAP-01).",
                items,
                alarm=True,
            )
        )
    return out


def _day(iso: object) -> str:
    try:
        return f"{pd.Timestamp(str(iso)):%Y-%m-%d}"
    except (ValueError, TypeError):
        return MISSING


def summary(run: RunData) -> HTML:
    """Counts by status and, for failures, by severity, as badges (zero counts grey)."""
    f = run.findings
    by_status = _counts(f["status"]) if len(f) else {}
    bad = _failing(f)
    return HTML(
        render(
            "report_summary.j2",
            sentence=verdict(f).sentence,
            by_status=by_status,
            statuses=STATUS_ORDER,
            by_severity=_counts(bad["severity"]) if len(bad) else {},
            severities=SEVERITIES,
        )
    )


class EvidenceList(NamedTuple):
    """A list in the evidence: the items shown and the true total."""

    label: str
    items: list[str]
    total: int


class EvidenceTable(NamedTuple):
    """A small table in the evidence (a mapping, or a list of records)."""

    label: str
    headers: list[str]
    rows: list[list[Cell]]
    total: int


class Fact(NamedTuple):
    """One scalar of the evidence: its label (with the unit its value is in) and its value;
    a number is kept on one line, its digits aligned."""

    label: str
    value: str
    numeric: bool = False


class Evidence(NamedTuple):
    """A finding's evidence for people: scalar facts, small tables, lists with their totals."""

    facts: list[Fact]
    tables: list[EvidenceTable]
    lists: list[EvidenceList]


_STAT_NAMES = {  # in the order shown
    "n": "values",
    "min": "minimum",
    "mean": "mean",
    "p50": "median",
    "p90": "90th pct",
    "p95": "95th pct",
    "p99": "99th pct",
    "max": "maximum",
}
_TOTAL_KEYS = ("total", "count")


def _label(key: str) -> str:
    """A key as words: ``max_wait_h`` -> ``max wait (h)``."""
    for ending, unit in (("_ms", "ms"), ("_s", "s"), ("_h", "h"), ("_days", "days")):
        if key.endswith(ending):
            return f"{key.removesuffix(ending).replace('_', ' ')} ({unit})"
    return key.replace("_", " ")


def evidence(raw: object) -> Evidence:
    """A finding's evidence (a JSON object, or its text) as facts, small tables and lists.

    A list's total is the control's ``<key>_total`` beside it (or ``{"items": [...],
    "total": N}``) when given, else its length; only the first items are shown. A key ending
    in a unit (``*_h``, ``*_s``, ``*_ms``, ``*_days``) names it in its label, and its values
    are numbers in that unit (one unit per column); ``*rate`` values are percentages. Codes
    (``missing_signature``) read as words; the JSON and CSV files keep them.

    >>> ev = evidence({"examples": ["a", "b"], "examples_total": 1373, "max_wait_h": 3610.4,
    ...                "rate": 0.005029, "threshold": 0.005, "valid_from": None})
    >>> [tuple(f) for f in ev.facts]
    [('max wait (h)', '3,610', True), ('rate', '0.50%', True), ('threshold', '0.50%', True), ('valid from', 'not recorded', False)]
    >>> ev.lists
    [EvidenceList(label='examples', items=['a', 'b'], total=1373)]
    """  # noqa: E501
    try:
        ev = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return Evidence([Fact("evidence", str(raw))], [], [])
    if ev is None or ev == {} or ev == "":
        return Evidence([], [], [])
    if not isinstance(ev, Mapping):
        return Evidence([Fact("evidence", str(ev))], [], [])
    facts: list[Fact] = []
    tables: list[EvidenceTable] = []
    lists: list[EvidenceList] = []
    has_rate = any(str(k).endswith("rate") for k in ev)
    for key, value in ev.items():
        key = str(key)
        base = key.removesuffix("_total")
        if key != base and isinstance(ev.get(base), list | dict):
            continue  # the total of a list, shown with it
        share = has_rate and key.startswith("threshold") and isinstance(value, float)
        if isinstance(value, Mapping) and _is_capped(value):
            items = list(value.get("items", value.get("shown", value.get("values", []))))
            total = _total(value.get("total", value.get("count")), len(items))
            lists.append(EvidenceList(_label(key), _items(items), total))
        elif isinstance(value, Mapping):
            tables.append(_mapping_table(key, value, _total(ev.get(f"{key}_total"), len(value))))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            tables.append(_records_table(key, value, _total(ev.get(f"{key}_total"), len(value))))
        elif isinstance(value, list):
            total = _total(ev.get(f"{key}_total"), len(value))
            if not value and not total:
                facts.append(Fact(_label(key), "none"))
            else:
                lists.append(EvidenceList(_label(key), _items(value), total))
        else:
            facts.append(Fact(_label(key), human(key, value, share=share), _is_number(value)))
    return Evidence(facts, tables, lists)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_capped(value: Mapping[str, Any]) -> bool:
    keys = set(value)
    return (
        len(keys) == 2
        and bool(keys & {"items", "shown", "values"})
        and bool(keys & set(_TOTAL_KEYS))
    )


def _total(given: object, shown: int) -> int:
    """The true total when the control gave one (never less than what is shown)."""
    if isinstance(given, int) and not isinstance(given, bool):
        return max(given, shown)
    return shown


def _items(values: list[Any]) -> list[str]:
    return [
        human("", v) if not isinstance(v, dict | list) else json.dumps(v, default=str)
        for v in values[:LIST_SHOWN]
    ]


def _mapping_table(key: str, value: Mapping[str, Any], total: int) -> EvidenceTable:
    """A mapping as a small table: statistics (``p50``, ``max``) or up to 6 values by name in
    one row under their names, more values by name in two columns; values are numbers in
    the unit the key names (its label says which), names that are codes read as words."""
    share = key.endswith(("rate", "share"))
    names = [str(k) for k in value]
    if names and all(k in _STAT_NAMES for k in names):  # in a fixed order: n, min, ..., max
        stats = sorted(value.items(), key=lambda kv: list(_STAT_NAMES).index(str(kv[0])))
        cells = [_value_cell(k, v) if k == "n" else _value_cell(key, v) for k, v in stats]
        return EvidenceTable(_label(key), [_STAT_NAMES[str(k)] for k, _ in stats], [cells], 1)
    items = list(value.items())
    if len(items) <= 6 and total <= len(items):  # a few values by name: one row under them
        cells = [_value_cell(str(k), v, share=share) for k, v in items]
        return EvidenceTable(_label(key), [words(k) for k in names], [cells], 1)
    rows = [[Cell(words(k)), _value_cell(str(k), v, share=share)] for k, v in items[:TABLE_SHOWN]]
    return EvidenceTable(_label(key), [], rows, max(total, len(items)))


def _value_cell(key: str, value: object, *, share: bool = False) -> Cell:
    if value is None:
        return Cell(MISSING, "missing")
    if isinstance(value, dict | list):
        return Cell(json.dumps(value, default=str)[:300])
    shown = human(key, value, share=share)
    if _is_number(value):
        return Cell(shown, "plain", True)
    return Cell(shown)  # text from the data: defanged


def _records_table(key: str, records: list[Mapping[str, Any]], total: int) -> EvidenceTable:
    heads: list[str] = []
    for r in records:
        heads += [str(k) for k in r if str(k) not in heads]
    rows = [[_value_cell(h, r.get(h)) for h in heads] for r in records[:TABLE_SHOWN]]
    return EvidenceTable(_label(key), [_label(h) for h in heads], rows, total)


def _href(url: object) -> str | None:
    """A link of the catalogue's (http, https or relative), or None for anything else."""
    if not isinstance(url, str) or not url.strip():
        return None
    parts = urlsplit(url.strip())
    if parts.scheme not in ("", "http", "https") or any(c in url for c in '"<>\x00'):
        return None
    return url.strip()


class FailingRow(NamedTuple):
    """One line of the failing controls at the top of the report, linking its card."""

    check_id: str
    title: str
    severity: str
    status: str
    resource: str
    reason: str
    anchor: str


#: A reason in the table at the top is cut to one line of about this many characters.
REASON_SHOWN = 160


def _anchored(findings: pd.DataFrame) -> list[tuple[str, dict[str, Any]]]:
    """The failing findings, most severe first, each with its card's anchor: ``finding-`` and
    its uid, or its rank when the uid is missing or repeated (anchors are unique)."""
    bad = _failing(findings)
    if len(bad) and "severity" in bad.columns:
        rank = {s: i for i, s in enumerate(SEVERITIES)}
        order = bad["severity"].map(lambda s: rank.get(s, len(rank)))
        bad = bad.iloc[order.reset_index(drop=True).argsort(kind="stable").to_numpy()]
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    records: list[dict[str, Any]] = bad.to_dict("records")  # type: ignore[assignment]  # str columns
    for n, r in enumerate(records, start=1):
        uid = r.get("finding_uid")
        anchor = f"finding-{quote(str(uid), safe='')}" if isinstance(uid, str) and uid else ""
        if not anchor or anchor in seen:
            anchor = f"finding-{n}"
        seen.add(anchor)
        out.append((anchor, r))
    return out


def _one_line(value: object, limit: int = REASON_SHOWN) -> str:
    text = " ".join(str(value or "").split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def failing_rows(run: RunData) -> list[FailingRow]:
    """The failing (or errored) findings for the table under the verdict: control, title,
    severity, resource, a one-line reason and the anchor of its card (:func:`failing`)."""
    return [
        FailingRow(
            check_id=str(r.get("check_id") or MISSING),
            title=str(r.get("title") or ""),
            severity=str(r.get("severity")),
            status=str(r.get("status")),
            resource=str(r.get("resource") or ""),
            reason=_one_line(r.get("reason")),
            anchor=anchor,
        )
        for anchor, r in _anchored(run.findings)
    ]


def failing_controls(run: RunData) -> HTML:
    """The short table of failing controls (under the verdict, in :func:`header`)."""
    return HTML(render("report_failing_top.j2", rows=failing_rows(run)))


def failing(run: RunData) -> HTML:
    """Every failing (or errored) finding as a card, most severe first: remediation,
    evidence as small tables, its rule in the spec and its entry in docs/controls.md (the
    catalogue's ``spec_ref`` and ``docs_ref``, shown; ``spec_url`` and ``docs_url``, linked,
    when http(s)), and its uid. Each card's anchor is the one the table at the top links."""
    cards = []
    for anchor, r in _anchored(run.findings):
        links = [
            (label, href)
            for label, href in (
                ("Rule in the specification", _href(r.get("spec_url"))),
                ("Control in docs/controls.md", _href(r.get("docs_url"))),
            )
            if href
        ]
        cards.append(
            {
                "status": str(r.get("status")),
                "severity": str(r.get("severity")),
                "check_id": r.get("check_id"),
                "title": r.get("title") or "",
                "resource": r.get("resource") or "",
                "reason": r.get("reason") or "",
                "remediation": r.get("remediation") or MISSING,
                "evidence": evidence(r.get("evidence")),
                "links": links,
                "refs": [
                    (label, str(ref))
                    for label, ref in (
                        ("specification", r.get("spec_ref")),
                        ("entry", r.get("docs_ref")),
                    )
                    if isinstance(ref, str) and ref.strip()
                ],
                "uid": r.get("finding_uid") or MISSING,
                "anchor": anchor,
            }
        )
    return HTML(render("report_findings.j2", cards=cards))


def trend(run: RunData) -> HTML:
    """New, resolved (passing now), not judged (now skip, error, muted or absent) and
    persisting failures against the previous period's completed run."""
    t = run.trend or {}
    prev = t.get("previous")
    skipped = [str(n) for n in t.get("skipped") or [] if isinstance(n, str)]
    if not prev:
        return HTML(render("report_trend.j2", previous=None, skipped=skipped))
    spec = {
        "check_id": ("Control", "text"),
        "severity": ("Severity", "severity"),
        "resource": ("Resource", "text"),
        "finding_uid": ("Finding uid", "hash"),
    }
    resolved_spec = {**spec, "status_now": ("Status now", "status")}
    tables = [
        table(
            pd.DataFrame(t.get(key, [])),
            resolved_spec if key in ("resolved", "not_judged") else spec,
            caption=caption,
        )
        for key, caption in (
            ("new", "New failures"),
            ("persisting", "Persisting failures"),
            ("resolved", "Resolved: passing now (uid of the previous period)"),
            (
                "not_judged",
                "Not judged now: skipped, in error, muted or no longer seen; nothing shows "
                "them fixed (uid of the previous period)",
            ),
        )
    ]
    counts = {k: len(t.get(k, [])) for k in TREND_KINDS}
    return HTML(
        render("report_trend.j2", previous=prev, counts=counts, tables=tables, skipped=skipped)
    )


def family(run: RunData, prefix: str) -> HTML:
    """The findings of one family of controls (``SIG``, ``DLV``, ``SUB``, ``TKD``)."""
    f = run.findings
    fam = f[f["check_id"].str.startswith(prefix)] if len(f) else f
    return table(fam, FINDING_SPEC, caption=f"{prefix} findings", max_rows=100)


def signatures(run: RunData) -> HTML:
    """Verdict counts (with the populations the SIG controls judge) and the requests that
    are not valid."""
    vc = run.table("verdict_counts")
    counts = table(
        vc,
        {"verdict": ("Verdict", "label"), "count": ("Requests", "int"), "share": ("Share", "pct")},
        caption="Signature verdicts of every request read in the period",
        empty="no request in the period",
    )
    if {"verdict", "count"} <= set(vc.columns) and len(vc):
        total = int(vc["count"].sum())
        unreadable = int(vc.loc[vc["verdict"] == "unreadable", "count"].sum())
        valid = int(vc.loc[vc["verdict"] == "valid", "count"].sum())
        counts += _note(
            f"{total:,} requests read in the period: {total - unreadable:,} readable, "
            f"{unreadable:,} unreadable (a line that cannot be read has no receipt time and "
            "counts in the period of its file's records). SIG-01 judges the readable requests "
            f"that are not valid; SIG-02 and SIG-03 the {valid:,} valid deliveries."
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
        full="not_valid_requests",
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
    labels = {  # each measure in its own unit, named in the Unit column (one unit per row)
        "ack_latency_ms": ("Acknowledgement latency", "ms"),
        "emission_latency_s": ("Emission latency", "s"),
        "clock_skew_s": ("Clock skew", "s"),
        "abs_clock_skew_s": ("Clock skew, absolute", "s"),
    }
    if not lat.empty:
        lat.insert(1, "unit", lat["metric"].map(lambda m: labels.get(m, (m, "s"))[1]))
        lat["metric"] = lat["metric"].map(lambda m: labels.get(m, (m, "s"))[0])
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
            full="undelivered_events",
        )
        + table(run.table("success_by_subscription"), rate, caption="Success by subscription")
        + table(run.table("success_by_event"), rate, caption="Success by event type")
        + table(
            lat,
            {
                "metric": ("Measure", "text"),
                "unit": ("Unit", "own"),
                "n": ("Values", "int"),
                "p50": ("Median", "float"),
                "p95": ("95th percentile", "float"),
                "p99": ("99th percentile", "float"),
                "max": ("Maximum", "float"),
            },
            caption="Latency and clock skew (each row in the unit its Unit column names)",
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
        full="off_schedule_attempts",
    ) + table(
        run.table("retried_after_success"),
        {
            "subscription_id": ("Subscription", "text"),
            "event_id": ("Event id", "text"),
            "attempts": ("Attempts", "int"),
        },
        caption="Events retried after a timely 2xx (a vendor fault)",
        full="retried_after_success",
    )


def takedown(run: RunData) -> HTML:
    """The clock's start and end, the population counted (the incidents created in the
    period, as TKD-01 and TKD-02), then median and p90 time to takedown with their bounds."""
    start = (
        "incident creation"
        if run.manifest.get("parameters", {}).get("clock_start", "created") == "created"
        else "takedown (burn) start"
    )
    spec = {
        "by": ("Grouped by", "label"),
        "group": ("Group", "code"),
        "n": ("Incidents", "int"),
        "events": ("Taken down", "int"),
        "censored": ("Censored", "int"),
        "median_h": ("Median", "h"),
        "median_ci_lower_h": ("Median, lower 95%", "h"),
        "median_ci_upper_h": ("Median, upper 95%", "h"),
        "p90_h": ("90th percentile", "h"),
    }
    summary = run.table("takedown_summary")
    every = summary[summary["by"] == "all"] if {"by", "n"} <= set(summary.columns) else summary
    n = int(every["n"].sum()) if "n" in every.columns else 0
    seen = len(run.table("incidents", ["incident_id"]))
    intro = [
        ("Time to takedown runs from ", False),
        (start, True),
        (" to ", False),
        ("takedown success", True),
        (
            ". Incidents not taken down are censored at their close or at as_of (Kaplan-Meier, "
            '95% log-log bands). "not reached": the curve did not get that low.',
            False,
        ),
    ]
    left_out = (
        f"; the data holds {seen:,} incidents in all, the {seen - n:,} others (created before "
        "the period, or without a duration) are left out"
        if seen > n
        else ""
    )
    why = (
        f"Every number here counts the {n:,} incidents created in the period (with a "
        f"duration), as TKD-01 and TKD-02 do{left_out}. TKD-03 and TKD-04 judge the incidents "
        "created in the period or still open at as_of."
    )
    return (
        HTML(render("report_note.j2", parts=intro, note=False))
        + HTML(render("report_note.j2", parts=[(why, False)], note=True))
        + table(
            summary,
            spec,
            caption="Time to takedown of the incidents created in the period",
            empty="no incident created in the period",
            missing="not reached",
        )
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
        full="waiting_on_client",
    )


def subscriptions(run: RunData) -> HTML:
    """The latest listing snapshot fetched at or before as_of."""
    s = run.table("subscriptions_latest")
    if s.empty:
        return _note(
            "No listing snapshot fetched before as_of was given: subscription controls are skipped."
        )
    taken = when(s["fetched_at"].max())
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
        caption=f"Subscriptions listed at {taken} (latest snapshot before as_of)",
    )


def appendix(run: RunData) -> HTML:
    """Inputs (file, size, sha256, records, unreadable), parameters, notes and versions."""
    m = run.manifest
    inputs = table(
        pd.DataFrame(m.get("inputs", [])),
        {
            "kind": ("Kind", "own"),
            "source": ("File", "own"),
            "size": ("Bytes", "int"),
            "records": ("Records", "int"),
            "unreadable": ("Unreadable", "int"),
            "sha256": ("sha256", "hash"),
        },
        caption="Input files (the secrets file: size only, never hashed)",
        max_rows=500,
    )
    given = m.get("parameters", {})
    params = pd.DataFrame({"name": list(given), "value": [_param(k, v) for k, v in given.items()]})
    vers = pd.DataFrame(
        {"name": list(m.get("versions", {})), "value": list(m.get("versions", {}).values())}
    )
    notes = pd.DataFrame({"note": m.get("notes", [])})
    kv = {"name": ("Name", "own"), "value": ("Value", "own")}  # the operator's: not defanged
    nb = m.get("notebook", {})
    return (
        inputs
        + table(params, kv, caption="Parameters")
        + table(notes, {"note": ("Note", "text")}, caption="Notes from the analyses")
        + table(vers, kv, caption="Versions")
        + _note(f"Notebook: {nb.get('path') or MISSING} (sha256 {nb.get('sha256') or MISSING}).")
    )


def _note(words: str) -> HTML:
    return HTML(render("report_note.j2", parts=[(words, False)], note=True))


def _param(key: str, value: object) -> str:
    """A parameter's value for people (a mapping as ``name: value`` pairs)."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {_param(str(k), v)}" for k, v in value.items()) or "none"
    if value is None:
        return "not given"
    return human(key, value)
