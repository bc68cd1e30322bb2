"""audit.report.markup: URLs and host names in incident text are defanged one by one, numbers
are left alone, and invisible format characters are shown as their code."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from audit.report.markup import esc, text
from audit.report.templating import render
from audit.report.views import evidence


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("www.evil-wait.example", "www[.]evil-wait[.]example"),
        ("evt_05955fb9-x.evil.example", "evt_05955fb9-x[.]evil[.]example"),
        ("+evil.example", "+evil[.]example"),  # a forged delivery id
        ("evil-class.example", "evil-class[.]example"),
        ("evil4\uff0eexample", "evil4[.]example"),
        ("a\u3002bc and d\uff61ef", "a[.]bc and d[.]ef"),
        ("pay\u200bpal.example", "pay\\u200bpal[.]example"),
        ("zw\u200b@evil.example", "zw\\u200b@evil[.]example"),
        ("evil.example.123", "evil[.]example.123"),
    ],
)
def test_text_defangs_host_names_in_ordinary_cells(value, expected):
    assert text(value) == expected


@pytest.mark.parametrize(
    "value",
    ["532.08", "1.5e3", "2.0.1", "waited 532.08 h (p95 1.5e3 s), v2.0.1", "e.g. 3.5 h",
     "incident.created", "inc_pg8fmoqun4"],
)  # fmt: skip
def test_text_leaves_numbers_versions_and_event_names_alone(value):
    assert text(value) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("inc_1, javascript:alert(1)", "inc_1, javascript[:]alert(1)"),
        ("see data:text/html,<b>", "see data[:]text/html,&lt;b&gt;"),
        ("x VBScript:msgbox(1)", "x VBScript[:]msgbox(1)"),
        ("\u200bhttps://evil.example/a", "\\u200bhxxps://evil[.]example/a"),
        ("532.08, https://inc.evil.example/x.php 612.56",
         "532.08, hxxps://inc[.]evil[.]example/x[.]php 612.56"),
        ("ftp://files.example/a file:///etc/x.conf",
         "ftp[:]//files[.]example/a file[:]///etc/x[.]conf"),
    ],
)  # fmt: skip
def test_text_defangs_each_url_wherever_it_stands(value, expected):
    assert text(value) == expected


def test_evidence_defangs_each_value_and_keeps_the_numbers():
    ev = evidence(
        {
            "examples": ["www.evil-wait.example", "inc_j7go9sz10i", "https://inc.evil.example/<b>"],
            "awaiting_h": {"https://inc.evil.example/x": 581.51, "inc_pg8fmoqun4": 532.08},
        }
    )
    card = dict(status="fail", severity="high", check_id="TKD-03", title="t", resource="r")
    card |= dict(reason="r", remediation="r", evidence=ev, links=[], refs=[], uid="u1")
    card |= dict(anchor="finding-u1")
    html = render("report_findings.j2", cards=[card])
    items = [
        "www[.]evil-wait[.]example",
        "inc_j7go9sz10i",
        "hxxps://inc[.]evil[.]example/&lt;b&gt;",
    ]
    assert all(f"<li>{i}</li>" in html for i in items)
    # a mapping of hours: the keys as headers (defanged), the values in hours, as its label says
    assert "<th>hxxps://inc[.]evil[.]example/x</th><th>inc_pg8fmoqun4</th>" in html
    assert ">awaiting (h)</caption>" in html and ">582</td>" in html and ">532</td>" in html
    assert "evil.example" not in html and "<b>" not in html.replace("<b class", "")


@pytest.mark.parametrize(
    ("char", "shown"),
    [("\u200b", "\\u200b"), ("\u200c", "\\u200c"), ("\u200d", "\\u200d"), ("\u2060", "\\u2060"),
     ("\ufeff", "\\ufeff"), ("\u00ad", "\\u00ad"), ("\u202e", "\\u202e"), ("\u2066", "\\u2066"),
     ("\U000e0041", "\\U000e0041")],
)  # fmt: skip
def test_esc_shows_invisible_format_characters_as_their_code(char, shown):
    assert esc(f"a{char}b<") == f"a{shown}b&lt;"


def test_esc_shows_every_format_character_and_nothing_else():
    every = [chr(c) for c in range(sys.maxunicode + 1) if unicodedata.category(chr(c)) == "Cf"]
    assert all(esc(c) == f"\\u{ord(c):04x}" or esc(c) == f"\\U{ord(c):08x}" for c in every)
    assert esc("é\u3000x") == "é\u3000x"


def test_text_leaves_capture_file_names_readable():
    """File endings that are no top-level domain: the name of a capture log stays as it is,
    while a host before a real domain ending is still defanged."""
    assert text("receiver-2026-10-02.jsonl:63") == "receiver-2026-10-02.jsonl:63"
    assert text("recv.jsonl.1.gz, tables.csv") == "recv.jsonl.1.gz, tables.csv"
    assert text("evil.jsonl.example") == "evil[.]jsonl[.]example"


def test_host_and_url_patterns_start_only_where_a_word_starts():
    """A match tried from every character of a long word made defanging quadratic (a
    40,000-character cell took 30 s): the patterns may start only at a word's start."""
    from audit.report.markup import _HOST, _URL

    assert [m.group() for m in _HOST.finditer("xx.example", 1)] == []
    assert _URL.match("ahttp://x", 1) is None and _URL.match("xxhttp://x", 2) is None
    assert _HOST.search("xx.example").group() == "xx.example"
    assert _URL.search("ahttp://x").group() == "ahttp://x"


def test_control_characters_are_shown_not_passed_to_the_page():
    # A NUL in an event name reached report.html as is: a parse error (browsers show U+FFFD).
    assert esc("nul\x00byte\x1b[31m\x7f\x85") == "nul\\u0000byte\\u001b[31m\\u007f\\u0085"
    assert esc("tab\tand\nlines\r") == "tab\tand\nlines\r"  # kept: they are text
