"""Every CSV the toolkit writes, read back the way a spreadsheet splits rows: no live cell.

Payloads sit in event ids, delivery ids, incident fields and subscription fields. Each file is
read with ``csv.reader(open(f, newline=""))``, which (like a spreadsheet) ends a row at a bare
CR; a cell is "live" when, after leading whitespace, it starts with ``= + - @`` or when it
starts with TAB or CR (OWASP, "CSV Injection"), unless it is a plain number.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from audit.cli import main
from audit.ingest.signatures import sign
from audit.report.inputs import load_inputs
from audit.report.params import check_params, parse_period
from audit.report.pipeline import compute
from audit.report.rundir import write_tables
from audit.safe import (
    _LIVE_RE2,
    CSV_DATE_FORMAT,
    neutralise_cell,
    neutralise_frame,
    shown_as_code,
    write_csv,
)
from tests.builders import write_jsonl, write_secrets

SECRET = "csv-test-secret"
PAYLOADS = ["\r=cmd|' /C calc'!A0", "\n@SUM(1+1)", "\t=1+1", " =1+1", "-2+3", "+1+1", "\uff1d1+1"]
_NUMBER = re.compile(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*")


def live(cell: str) -> bool:
    """Whether a spreadsheet would evaluate this cell (the test's own definition): TAB or CR
    first always counts, even before a number."""
    if cell[:1] in ("\t", "\r"):
        return True
    if _NUMBER.fullmatch(cell):
        return False
    return cell.lstrip()[:1] in tuple("=+-@\uff1d\uff0b\uff0d\uff20")


def _body(n: int, payload: str, event: str, status: str) -> str:
    return json.dumps(
        {
            "id": f"evt_{n}{payload}",
            "event": event,
            "timestamp": f"2026-10-05T10:0{n}:00Z",
            "data": {
                "incidentId": f"inc_{n}{payload}",
                "status": status,
                "timestamp": f"2026-10-05T10:0{n}:00Z",
                "url": f"https://evil.example/{payload}",
                "domain": payload,
                "subject": payload,
                "incidentClass": payload,
            },
        }
    )


@pytest.fixture
def hostile_inputs(tmp_path: Path):
    subs = [f"wh{p}" for p in PAYLOADS]
    recs = []
    for n, payload in enumerate(PAYLOADS):
        for k, (event, status) in enumerate(
            [("incident.created", "action_required"), ("incident.status_changed", "closed")]
        ):
            body = _body(n, payload, event, status)
            stamp = 1791194400 + n * 60 + k * 600
            received = pd.Timestamp(stamp + 1, unit="s", tz="UTC").isoformat()
            recs.append(
                {
                    "received_at": received,
                    "headers": {
                        "X-PhishFort-Signature": sign(SECRET, stamp, body.encode()),
                        "X-PhishFort-Timestamp": str(stamp),
                        "X-PhishFort-Delivery-Id": f"dlv_{n}{k}{payload}",
                        "X-PhishFort-Event": event,
                    },
                    "body": body,
                    "subscription_id": subs[n],
                    "url": f"https://hooks.example/{payload}",
                    "response_status": 204,
                    "response_ms": 12,
                }
            )
        # a forged one (the example): verdict invalid, event id still shown
        recs.append(
            {
                "received_at": "2026-10-06T00:00:01Z",
                "headers": {
                    "X-PhishFort-Signature": "sha256=" + "00" * 32,
                    "X-PhishFort-Timestamp": "1791244800",
                    "X-PhishFort-Delivery-Id": payload,
                },
                "body": _body(n, payload, "incident.created", "action_required"),
                "subscription_id": subs[n],
            }
        )
    logs = write_jsonl(tmp_path / "log.jsonl", recs)
    secrets = write_secrets(tmp_path / "secrets.json", {s: [{"secret": SECRET}] for s in subs})
    snaps = tmp_path / "snapshots"
    snaps.mkdir()
    listing = [
        {
            "id": s,
            "clientId": f"cl{p}",
            "url": f"https://hooks.example/{p}",
            "events": [f"incident.created{p}"],
            "active": True,
            "description": p,
            "createdAt": "2026-09-01T00:00:00Z",
            "lastDeliveryStatus": p,
        }
        for s, p in zip(subs, PAYLOADS, strict=True)
    ]
    doc = {"fetched_at": "2026-10-10T00:00:00Z", "base_url": "https://x", "response": listing}
    (snaps / "webhooks-1.json").write_text(json.dumps(doc))
    return logs, secrets, snaps


def _check_csv(path: Path) -> int:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows, path
    width = len(rows[0])
    for i, row in enumerate(rows):
        assert len(row) == width, f"{path.name}: row {i + 1} was split ({row})"
        for cell in row:
            assert not live(cell), f"{path.name}: live cell {cell!r}"
    return len(rows) - 1


def test_every_csv_writer_output_is_inert(hostile_inputs, tmp_path, capsys):
    logs, secrets, snaps = hostile_inputs
    verdicts = tmp_path / "verdicts.csv"
    assert main(["verify", str(logs), "--secrets", str(secrets), "--out", str(verdicts)]) == 0
    tables = tmp_path / "tables"
    args = ["analyze", str(logs), "--secrets", str(secrets), "--subscriptions", str(snaps)]
    assert (
        main([*args, "--as-of", "2026-11-01T00:00:00Z", "--out", str(tables), "--format", "csv"])
        == 0
    )
    # The report's CSV writers, as the pipeline calls them before rendering (no kernel needed).
    period = parse_period("2026-10")
    params = check_params({}, period)
    inputs = load_inputs(
        [logs], secrets_path=secrets, snapshots=[snaps], header_prefix=params.header_prefix
    )
    computed = compute(inputs, params, period)
    report = tmp_path / "report"
    report.mkdir()
    write_csv(computed.findings, report / "findings.csv")
    write_tables(computed.tables, report / "tables")
    files = [verdicts, *tables.glob("*.csv"), *report.rglob("*.csv")]
    names = {f.name for f in files}
    assert {"verdicts.csv", "findings.csv", "incidents.csv", "subscriptions.csv"} <= names
    assert len(files) >= 17  # verdicts + 7 analyze tables + findings + 8 report tables
    counts = {f"{f.parent.name}/{f.name}": _check_csv(f) for f in files}
    assert counts["tmp_path/verdicts.csv".replace("tmp_path", tmp_path.name)] == 3 * len(PAYLOADS)
    # the payloads survive, neutralised, as one cell each (the forged records' delivery ids)
    with open(verdicts, newline="", encoding="utf-8") as f:
        cells = {c for row in csv.reader(f) for c in row}
    assert {"'" + p for p in PAYLOADS} <= cells


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("=1+1", "'=1+1"),
        ("  =1+1", "'  =1+1"),
        ("\n@SUM(1+1)", "'\n@SUM(1+1)"),
        ("\t=1", "'\t=1"),
        ("\rx", "'\rx"),
        ("-1.5", "-1.5"),
        ("-2+3", "'-2+3"),
        ("\uff1dHYPERLINK(1)", "'\uff1dHYPERLINK(1)"),  # full-width = + - @
        ("\u3000\uff0b1", "'\u3000\uff0b1"),
        ("\uff0d1.5", "'\uff0d1.5"),
        ("\uff20SUM(1)", "'\uff20SUM(1)"),
        ("a\uff1d1", "a\uff1d1"),
        ("inc_1", "inc_1"),
        (-3, -3),
    ],
)
def test_neutralise_cell(value, expected):
    assert neutralise_cell(value) == expected


@pytest.mark.parametrize("brk", ["\r", "\n", "\r\n", "\x0b", "\x0c", "\x85", "\u2028", "\u2029"])
def test_every_line_break_is_quoted(brk, tmp_path):
    path = tmp_path / "x.csv"
    write_csv(pd.DataFrame({"a": [f"x{brk}y"], "b": [-1.5]}), path)
    with open(path, encoding="utf-8", newline="") as f:
        raw = f.read()
    # VT, FF and NEL are control characters too: shown as their code, as the HTML shows them
    cell = f"x{brk}y" if brk in ("\r", "\n", "\r\n", "\u2028", "\u2029") else f"x\\u{ord(brk):04x}y"
    assert f'"{cell}"' in raw
    with open(path, newline="", encoding="utf-8") as f:
        assert list(csv.reader(f)) == [["a", "b"], [cell, "-1.5"]]


def test_no_module_or_notebook_writes_csv_around_the_one_writer():
    root = Path(__file__).resolve().parents[1]
    sources = [*(root / "audit").rglob("*.py"), *(root / "notebooks").glob("*.ipynb")]
    sources += [*(root / "audit").rglob("*.ipynb")]
    offenders = [
        str(p.relative_to(root))
        for p in sources
        if p.name != "safe.py"
        and re.search(r"\.to_csv\(|csv\.writer\(|csv\.DictWriter\(", p.read_text(encoding="utf-8"))
    ]
    assert offenders == []
    assert len(sources) > 20


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=5))
def test_any_text_round_trips_as_one_inert_cell(tmp_path_factory, cells):
    path = tmp_path_factory.mktemp("csv") / "x.csv"
    write_csv(pd.DataFrame({"text": pd.Series(cells, dtype="str"), "n": range(len(cells))}), path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["text", "n"] and len(rows) == len(cells) + 1
    for original, (read, n) in zip(cells, rows[1:], strict=True):
        shown = shown_as_code(original)  # control and format characters as their code
        assert read in (shown, "'" + shown) and not live(read)
        assert n.isdigit()


_TRICKY = (
    "=+-@\uff1d\uff0b\uff0d\uff20"
    "\t\r\n \x0b\x0c\x1c\x1f\x85\xa0\u1680\u2007\u2028\u3000\u200b\ufeff"
    "1.5eE'\"xé"
)


@given(st.lists(st.one_of(st.none(), st.text(alphabet=_TRICKY, max_size=6)), min_size=1))
@example(["-1.5", "+3", " -2e5 ", "=1+1", "@x", None, "\u3000=x"])
def test_a_text_column_is_neutralised_as_each_cell_alone(cells):
    """The column-at-once test (RE2 in pyarrow) changes exactly the cells that
    neutralise_cell (Python's re, Unicode whitespace) changes, nulls left alone."""
    column = pd.Series(cells, dtype="str")
    got = neutralise_frame(pd.DataFrame({"c": column}))["c"].tolist()
    want = [neutralise_cell(v) for v in column.tolist()]
    assert [None if pd.isna(v) else v for v in got] == [None if pd.isna(v) else v for v in want]


def test_the_column_test_spells_out_every_whitespace_character():
    """Python's \\s is every character whose isspace() is true; all of them are listed."""
    every = {c for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert every == {c for c in range(0x3001) if chr(c).isspace()}
    assert all(f"\\x{{{c:x}}}" in _LIVE_RE2 for c in every)


def test_times_in_csv_are_written_as_pandas_formats_them(tmp_path):
    """Times are formatted at once; the file equals pandas' own ``date_format`` output (wall
    time in the column's zone, microseconds truncated, before 1970 too, NaT empty)."""
    times = [
        "2026-10-01T00:00:00.123456789Z",
        "1969-12-31T23:59:59.999999999Z",
        "1700-01-01T00:00:00.000000500Z",
        None,
        "2262-04-10T23:47:16.854775807Z",
    ]
    utc = pd.Series(pd.to_datetime(times, utc=True))
    df = pd.DataFrame(
        {
            "utc": utc,
            "berlin": utc.dt.tz_convert("Europe/Berlin"),
            "naive": utc.dt.tz_localize(None),
            "text": ["=1", "a", None, "b", "c"],
            "n": [1.5, None, 3, 4, 5],
        }
    )
    write_csv(df, tmp_path / "got.csv")
    df.assign(text=["'=1", "a", None, "b", "c"]).to_csv(
        tmp_path / "want.csv",
        index=False,
        date_format=CSV_DATE_FORMAT,
        quoting=csv.QUOTE_NONNUMERIC,
        lineterminator="\n",
    )
    assert (tmp_path / "got.csv").read_text() == (tmp_path / "want.csv").read_text()
