"""How the report, the index and the probe page read (issue 42 points 5-7): the failing controls
at the top, ids that never break, a viewport on every page, one unit per column named in its
header, words for codes (the files keep the codes), and the defanger on incident data only."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

from audit.cli import main
from audit.receiver import CheckResult, ProbeResult
from audit.receiver.probe_report import probe_html
from audit.report import views
from audit.report.index import build_index
from audit.report.markup import CSS
from audit.report.render import to_html
from audit.report.rundir import RunData


class _Page(HTMLParser):
    """The parts of a page these tests read: meta tags, ids, links, and the classes around
    each piece of text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.metas: list[dict[str, str]] = []
        self.ids: set[str] = set()
        self.hrefs: list[str] = []
        self.stack: list[tuple[str, set[str]]] = []
        self.texts: list[tuple[str, list[set[str]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "meta":
            self.metas.append(a)
        if "id" in a:
            self.ids.add(a["id"])
        if "href" in a:
            self.hrefs.append(a["href"])
        if tag not in ("meta", "br", "col", "img", "link", "hr", "input"):
            self.stack.append((tag, set(a.get("class", "").split())))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.texts.append((data, [c for _, c in self.stack]))


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    return page


def _viewport(html: str) -> str | None:
    for m in _parse(html).metas:
        if m.get("name") == "viewport":
            return m.get("content")
    return None


def _wide(content: str | None) -> bool:
    parts = {p.strip() for p in (content or "").split(",")}
    return "width=device-width" in parts and bool(parts & {"initial-scale=1", "initial-scale=1.0"})


# --- every page has a viewport tag ---------------------------------------------------------


def test_the_index_the_probe_page_and_the_report_each_have_a_viewport_tag(tmp_path):
    index = build_index(tmp_path).read_text(encoding="utf-8")
    probe = probe_html(
        ProbeResult(
            target="http://127.0.0.1:1/hook",
            subscription_id="wh_1",
            started_at=datetime(2026, 11, 1, 12, 0, tzinfo=UTC),
            finished_at=datetime(2026, 11, 1, 12, 0, 1, tzinfo=UTC),
            timeout_s=5.0,
            checks=[CheckResult("valid_accepted", True, "2xx", 204, 12.5, "answered 204")],
        )
    )
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# x")])
    (tmp_path / "nb.ipynb").write_text(nbformat.writes(nb), encoding="utf-8")
    to_html(tmp_path / "nb.ipynb", tmp_path / "report.html", "t")
    report = (tmp_path / "report.html").read_text(encoding="utf-8")
    for name, page in (("index", index), ("probe", probe), ("report", report)):
        assert _wide(_viewport(page)), f"{name}: viewport {_viewport(page)!r}"


# --- the failing controls at the top -------------------------------------------------------


def _findings() -> pd.DataFrame:
    rows = [
        # check_id, status, severity, uid, reason
        ("SUB-04", "fail", "medium", "u-medium", "inactive in 2 of 2 snapshots"),
        ("SIG-01", "fail", "critical", "u-critical", "1 of 9 not answered 401\nsecond line"),
        ("DLV-01", "pass", "high", "u-pass", "fine"),
        ("TKD-03", "error", "high", None, "the control could not run"),
        ("SUB-05", "fail", "high", "u-dup", "wh_main failed"),
        ("SUB-05", "fail", "high", "u-dup", "wh_siem failed"),
        ("SUB-01", "skip", "low", "u-skip", "no listing"),
    ]
    return pd.DataFrame(
        [
            {"check_id": c, "status": s, "severity": v, "finding_uid": u, "reason": r,
             "title": f"title of {c}", "resource": "r", "remediation": "do", "evidence": "{}"}
            for c, s, v, u, r in rows
        ]
    )  # fmt: skip


def _run(findings: pd.DataFrame) -> RunData:
    manifest = {"run_id": "r1", "period": {"label": "2026-10", "start": "2026-10-01",
                "end": "2026-11-01T00:00:00+00:00"}}  # fmt: skip
    return RunData(manifest, findings)


def _failing_top(header: str) -> str:
    return header.split('<table class="audit failing-top">', 1)[1].split("</table>", 1)[0]


def test_the_top_lists_exactly_the_failing_findings_most_severe_first_linking_their_cards():
    run = _run(_findings())
    header, cards = str(views.header(run)), str(views.failing(run))
    # right under the verdict, before anything else of the header
    at = header.index
    assert at('<div class="verdict') < at('<table class="audit failing-top">') < at('id="covers"')
    top = _failing_top(header)
    ids = re.findall(r'<a class="id" href="#([^"]+)">([^<]+)</a>', top)
    # 5 failing or errored (fail 4, error 1), most severe first; the pass and skip are not here
    assert [c for _, c in ids] == ["SIG-01", "TKD-03", "SUB-05", "SUB-05", "SUB-04"]
    anchors = [a for a, _ in ids]
    assert len(set(anchors)) == 5  # a repeated or missing uid still gets its own anchor
    assert set(anchors) <= _parse(cards).ids  # each link lands on a card
    for anchor, check_id in ids:  # ... on the card of that control
        card = cards.split(f'id="{anchor}"', 1)[1].split('<div class="finding', 1)[0]
        assert f'<span class="id">{check_id}</span>' in card
    assert "title of SIG-01" in top and "1 of 9 not answered 401 second line" in top
    assert "u-pass" not in top and "SUB-01" not in top and "DLV-01" not in top
    assert "ERROR" in top  # the errored control says so beside its id


def test_a_month_without_failures_has_no_failing_table():
    f = _findings()
    run = _run(f[f["status"] == "pass"])
    assert '<table class="audit failing-top">' not in str(views.header(run))


# --- ids never break -----------------------------------------------------------------------


def _nowrap_classes() -> set[str]:
    found = set()
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", CSS):
        if "white-space: nowrap" in body:
            found |= {s.strip() for s in selectors.split(",")}
    return found


def test_finding_uids_and_ids_are_in_elements_that_never_wrap():
    assert {".uid", ".id"} <= _nowrap_classes()
    assert {".evidence table.ev td.num", "table.audit td.num"} <= _nowrap_classes()
    run = _run(_findings())
    html = "".join(
        str(p) for p in (views.failing(run), *(views.family(run, x) for x in ("SIG", "SUB", "DLV")))
    )
    page = _parse(html)
    uids = {"u-medium", "u-critical", "u-dup", "u-pass", "u-skip"}
    seen = set()
    for data, classes in page.texts:
        if data.strip() in uids:
            assert any(c & {"uid", "id"} for c in classes), data
            seen.add(data.strip())
    assert seen == uids
    # an id column of a table (``*_id``) keeps each id on one line; a hostile long one wraps
    frame = pd.DataFrame({"event_id": ["evt_6415479c-65dc-4f50-bf63-af83bd0561e6", "x" * 200]})
    t = str(views.table(frame, {"event_id": ("Event id", "text")}, caption="c"))
    assert '<span class="id">evt_6415479c-65dc-4f50-bf63-af83bd0561e6</span>' in t
    assert f"<td>{'x' * 200}</td>" in t


# --- one unit per column, named in its header ----------------------------------------------

_UNIT_WORDS = re.compile(r"\d\s*(ms|s|min|h|d|days)\b")


def test_a_value_under_a_header_naming_a_unit_is_a_number_in_that_unit():
    # the control's evidence: latency in ms, a threshold in days, waits in hours
    ev = views.evidence(
        {"ack_ms": {"n": 5170, "p50": 42.0, "max": 8975.0}, "threshold_days": 90,
         "max_age_days": 90.57, "wait_h": {"inc_a": 27.23, "inc_b": 108.49}}
    )  # fmt: skip
    assert ("threshold (days)", "90") in [(f.label, f.value) for f in ev.facts]
    assert ("max age (days)", "90.6") in [(f.label, f.value) for f in ev.facts]
    ack = next(t for t in ev.tables if t.label == "ack (ms)")
    assert [c.value for c in ack.rows[0]] == ["5,170", "42", "8,975"]  # not "9 s"
    wait = next(t for t in ev.tables if t.label == "wait (h)")
    assert [c.value for c in wait.rows[0]] == ["27.2", "108"]
    for label, value in [(f.label, f.value) for f in ev.facts] + [
        (t.label, c.value) for t in ev.tables for row in t.rows for c in row
    ]:
        assert not _UNIT_WORDS.search(value), (label, value)


# --- the demo report, end to end -----------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "--out", str(out), "--quiet"]) in (0, 1)
    return next(out.glob("reports/2026-10/*/"))


def _visible(html: str) -> str:
    html = re.sub(r"<(style|script)\b.*?</\1>", " ", html, flags=re.S)
    html = re.sub(r'src="data:[^"]*"', "", html)
    return re.sub(r"<[^>]+>", " ", html)


@pytest.mark.slow
def test_the_demo_report_lists_its_failing_findings_at_the_top(demo):
    html = (demo / "report.html").read_text(encoding="utf-8")
    findings = json.loads((demo / "findings.json").read_text(encoding="utf-8"))
    failing = [f for f in findings if f["status"] in ("fail", "error")]
    top = _failing_top(html)
    linked = re.findall(r'<a class="id" href="#([^"]+)">([^<]+)</a>', top)
    assert sorted(c for _, c in linked) == sorted(f["check_id"] for f in failing)
    assert {a for a, _ in linked} == {f"finding-{f['finding_uid']}" for f in failing}
    assert {a for a, _ in linked} <= _parse(html).ids
    assert _wide(_viewport(html))
    assert _wide(_viewport((demo.parent.parent / "index.html").read_text(encoding="utf-8")))


@pytest.mark.slow
def test_the_demo_report_shows_codes_as_words_and_its_files_keep_the_codes(demo):
    html = (demo / "report.html").read_text(encoding="utf-8")
    text = _visible(html)
    # SIG-01's evidence counts requests by verdict; the takedown table groups by source
    for code, word in (("missing_signature", "missing signature"),
                       ("signature_mismatch", "signature mismatch"),
                       ("CLIENT_REPORTED", "client reported")):  # fmt: skip
        assert code not in text and word in text, code
    with (demo / "findings.csv").open(encoding="utf-8", newline="") as f:
        evidence = " ".join(r["evidence"] for r in csv.DictReader(f))
    assert '"missing_signature": 1' in evidence and '"signature_mismatch": 5' in evidence
    assert "CLIENT_REPORTED" in (demo / "tables" / "takedown_summary.csv").read_text("utf-8")


@pytest.mark.slow
def test_the_defanger_touches_incident_data_only(demo):
    text = _visible((demo / "report.html").read_text(encoding="utf-8"))
    # the report's own text, as written
    assert "compliance_report.ipynb" in text and "report[.]ipynb" not in text
    assert "(the secrets file: size only, never hashed)" in text and "file[:]" not in text
    # incident data: the demo's phishing URLs and domains, defanged
    assert "hxxps://" in text and re.search(r"\bhttps?://", text) is None
    assert re.search(r"demo-?bank[\w-]*\[\.\]example", text)


def test_words_know_every_event_outcome():
    from audit.analysis.deliveries import OUTCOMES
    from audit.words import codes

    assert set(OUTCOMES) <= codes()


def test_statistics_read_in_a_fixed_order_whatever_the_control_wrote():
    ev = views.evidence({"ack_ms": {"max": 8975.0, "n": 5170, "p99": 209.0, "p50": 42.0}})
    assert ev.tables[0].headers == ["values", "median", "99th pct", "maximum"]
    assert [c.value for c in ev.tables[0].rows[0]] == ["5,170", "42", "209", "8,975"]


def test_codes_shown_as_words_are_never_broken_inside_a_word():
    # on paper a narrow "Verdict" column printed "unreadabl" / "e"
    frame = pd.DataFrame({"verdict": ["unreadable", "signature_mismatch"]})
    t = str(views.table(frame, {"verdict": ("Verdict", "label")}, caption="c"))
    assert '<span class="word">unreadable</span>' in t
    assert '<span class="word">signature mismatch</span>' in t
    assert ".word { overflow-wrap: normal; word-break: normal; }" in CSS


@pytest.mark.slow
def test_every_finding_of_the_demo_is_on_its_page(demo):
    # CAP-01 (capture coverage) passing was on no page: its family had no table
    html = (demo / "report.html").read_text(encoding="utf-8")
    findings = json.loads((demo / "findings.json").read_text(encoding="utf-8"))
    assert [f["check_id"] for f in findings if f["finding_uid"] not in html] == []


def test_the_notebook_has_a_table_for_every_family_of_controls():
    from audit.findings.catalogue import load_catalogue
    from audit.report.render import default_notebook

    source = default_notebook().read_text(encoding="utf-8")
    families = {c.split("-")[0] for c in load_catalogue()}
    assert families >= {"CAP", "SIG", "DLV", "SUB", "TKD"}
    missing = sorted(f for f in families if f'views.family(run, \\"{f}\\")' not in source)
    assert missing == []


def test_the_latency_table_names_each_row_s_unit_and_keeps_its_values_in_it():
    # the maximum acknowledgement latency read "9 s" beside medians in ms
    lat = pd.DataFrame(
        {"metric": ["ack_latency_ms", "emission_latency_s"], "n": [5170, 4847],
         "p50": [42.0, 61.2], "p95": [125.0, 130.0], "p99": [209.0, 140.0],
         "max": [8975.0, 600.0]}
    )  # fmt: skip
    html = str(views.deliveries(RunData({}, pd.DataFrame(), tables={"latency": lat})))
    cells = [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>.*?</td>", html)]
    assert cells == ["Acknowledgement latency", "ms", "5,170", "42", "125", "209", "8,975",
                     "Emission latency", "s", "4,847", "61.2", "130", "140", "600"]  # fmt: skip
    assert "<th>Unit</th>" in html
