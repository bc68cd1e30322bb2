"""One population per number (issue 42, point 4): the rendered report's headline numbers equal
the tables they summarise, from raw captures and from the evidence store.

The data: two simulated months, the report of the second. Its captures hold incidents created
in September as well (their later events arrive in October): the controls and the tables must
count the same incidents, those created in the period.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from audit.cli import main

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_months(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("two-months")
    args = ["simulate", "--out", str(root), "--seed", "7", "--start", "2026-09-01"]
    assert main([*args, "--days", "61", "--quiet"]) == 0  # 300 incidents, 170 in October
    return root


def _page(data: Path, out: Path, *store: str) -> BeautifulSoup:
    args = ["report", str(data / "captures"), "--secrets", str(data / "secrets.json")]
    args += ["--subscriptions", str(data / "snapshots"), "--period", "2026-10"]
    assert main([*args, "--out", str(out), "--quiet", *store]) == 1  # planted failures
    (run,) = (out / "2026-10").glob("2*")
    return BeautifulSoup((run / "report.html").read_text(encoding="utf-8"), "html.parser")


def _table(page: BeautifulSoup, caption: str) -> list[dict[str, str]]:
    """The rows of the table captioned ``caption`` (its start), as {header: cell text}."""
    for t in page.find_all("table"):
        cap = t.find("caption")
        if cap is not None and cap.get_text(" ", strip=True).startswith(caption):
            heads = [th.get_text(" ", strip=True) for th in t.find("thead").find_all("th")]
            return [
                dict(
                    zip(
                        heads,
                        (td.get_text(" ", strip=True) for td in tr.find_all("td")),
                        strict=True,
                    )
                )
                for tr in t.find("tbody").find_all("tr")
            ]
    raise AssertionError(f"no table captioned {caption!r}")


def _reason(page: BeautifulSoup, check_id: str) -> str:
    family = check_id[:3]
    (row,) = [r for r in _table(page, f"{family} findings") if r["Control"] == check_id]
    return row["Reason"]


def _evidence(page: BeautifulSoup, check_id: str) -> dict[str, str]:
    """The scalar evidence of the one card of ``check_id``, as {label: cell text}."""
    (card,) = [
        c for c in page.select("div.finding") if c.select_one("h3 .id").get_text() == check_id
    ]
    rows = card.select("dd.evidence table.ev > tbody > tr")
    return {r.th.get_text(" ", strip=True): r.td.get_text(" ", strip=True) for r in rows if r.th}


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _fact(page: BeautifulSoup, label: str) -> str:
    for term in page.find_all(["dt", "th"]):  # the header's facts: a list of terms, or a table
        if term.get_text(" ", strip=True) == label:
            return term.find_next(["dd", "td"]).get_text(" ", strip=True)
    raise AssertionError(f"no fact {label!r}")


@pytest.mark.parametrize("store", [False, True], ids=["raw", "store"])
def test_each_headline_number_equals_the_table_it_summarises(two_months, tmp_path, store):
    extra = ("--store", str(tmp_path / "store")) if store else ()
    page = _page(two_months, tmp_path / "reports", *extra)

    # Time to takedown: TKD-01 and TKD-02 against the table's "all" row.
    (every,) = [r for r in _table(page, "Time to takedown") if r["Grouped by"] == "all"]
    median = re.fullmatch(
        r"The Kaplan-Meier median time to takedown over the (\d+) incidents created in the "
        r"period is (.+), (within|above) 24 h\.",
        _reason(page, "TKD-01"),
    )
    assert median, _reason(page, "TKD-01")
    assert (median[1], median[2]) == (str(_int(every["Incidents"])), every["Median"])
    p90 = re.search(r"p90 time to takedown over the (\d+) incidents created in the period is "
                    r"(.+), (within|above) 72 h\.", _reason(page, "TKD-02"))  # fmt: skip
    assert p90, _reason(page, "TKD-02")
    assert (p90[1], p90[2]) == (str(_int(every["Incidents"])), every["90th percentile"])
    # The incidents created earlier are left out, and the page says so in one line.
    note = page.find(string=re.compile("Every number here counts the"))
    assert note is not None
    counted = re.search(r"counts the ([\d,]+) incidents created in the period.*holds ([\d,]+) "
                        r"incidents in all", note)  # fmt: skip
    assert counted and _int(counted[1]) == _int(every["Incidents"]) < _int(counted[2])

    # Requests: the header, the verdict table and the line under it count the same requests.
    verdicts = _table(page, "Signature verdicts of every request read in the period")
    read = sum(_int(r["Requests"]) for r in verdicts)
    assert _int(_fact(page, "Deliveries received").split()[0]) == read
    line = page.find(string=re.compile("requests read in the period"))
    assert line is not None and _int(line.split()[0]) == read
    valid = sum(_int(r["Requests"]) for r in verdicts if r["Verdict"] == "valid")
    unreadable = sum(_int(r["Requests"]) for r in verdicts if r["Verdict"] == "unreadable")
    assert f"{read - unreadable:,} readable, {unreadable:,} unreadable" in line
    assert f"the {valid:,} valid deliveries" in line
    # SIG-01 judges the same requests: every one read, the unreadable ones left out and counted
    # (an unreadable line has no receipt time; it counted 0 of them beside "unreadable 1").
    sig01 = _evidence(page, "SIG-01")
    assert unreadable > 0  # the data hold an unreadable line in October, or this checks nothing
    assert (_int(sig01["requests"]), _int(sig01["unreadable excluded"])) == (read, unreadable)

    # Deliveries: each DLV headline against the table it summarises.
    latency = {r["Measure"]: r for r in _table(page, "Latency and clock skew")}
    dlv01 = re.search(r"of (\d+) valid deliveries", _reason(page, "DLV-01"))
    assert dlv01 and _int(dlv01[1]) == _int(latency["Acknowledgement latency"]["Values"]) == valid
    dlv02 = re.search(r"of (\d+) first attempts", _reason(page, "DLV-02"))
    first = sum(_int(r["First attempts"]) for r in _table(page, "Success by subscription"))
    assert dlv02 and _int(dlv02[1]) == first
    dlv05 = re.search(r"over (\d+) incident events", _reason(page, "DLV-05"))
    assert dlv05 and _int(dlv05[1]) == _int(latency["Emission latency"]["Values"])
    dlv03 = re.search(r"the (\d+) events first received in the period(?: \((\d+) incident events)?",
                      _reason(page, "DLV-03"))  # fmt: skip
    outcomes = sum(_int(r["Events"]) for r in _table(page, "Event outcomes"))
    assert dlv03 and _int(dlv03[2] or dlv03[1]) == outcomes

    # Figures say what they count, as the tables beside them.
    captions = [c.get_text(" ", strip=True) for c in page.find_all("figcaption")]
    captions += [img["alt"] for img in page.find_all("img") if img.get("alt")]
    (lat,) = [c for c in captions if c.startswith("Histograms")]
    ack = _int(latency["Acknowledgement latency"]["Values"])
    emitted = _int(latency["Emission latency"]["Values"])
    assert f"milliseconds ({ack:,} valid deliveries)" in lat
    assert f"seconds ({emitted:,} incident events)" in lat
    (bars,) = [c for c in captions if c.startswith("Bar chart")]
    assert bars.startswith("Bar chart of every request read in the period by signature verdict")
    assert any(c.startswith("Share of the incidents created in the period") for c in captions)
