"""audit.safe: defanging (every dot form, schemes after invisible characters) and the CSV rule
that a cell starting with TAB or CR is always neutralised, even before a number."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from audit.safe import defang, neutralise_cell, neutralise_frame, write_csv


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("evil\u3002example", "evil[.]example"),  # ideographic full stop
        ("evil\uff0eexample", "evil[.]example"),  # full-width full stop
        ("evil\uff61example", "evil[.]example"),  # half-width ideographic full stop
        ("https://a.b\u3002c\uff0ed\uff61e/x", "hxxps://a[.]b[.]c[.]d[.]e/x"),
    ],
)
def test_defang_turns_every_dot_form_into_brackets(url, expected):
    assert defang(url) == expected


@pytest.mark.parametrize("lead", ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\u00ad"])
def test_defang_finds_the_scheme_after_invisible_format_characters(lead):
    assert defang(f"{lead}https://evil.example/") == f"{lead}hxxps://evil[.]example/"
    assert defang(f" {lead}\t{lead}javascript:alert(1)") == (
        f" {lead}\t{lead}javascript[:]alert(1)"
    )
    assert defang(f"{lead}foo:bar") == f"{lead}foo[:]bar"  # any scheme at the start


def test_defang_defangs_a_second_url_in_the_same_value():
    assert defang("hxxp://already.example  https://second.evil.example/x") == (
        "hxxp://already[.]example  hxxps://second[.]evil[.]example/x"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("\t-1.5", "'\t-1.5"),
        ("\r+3", "'\r+3"),
        ("\t7", "'\t7"),
        ("\r 1e5 ", "'\r 1e5 "),
        ("-1.5", "-1.5"),
        ("+3", "+3"),
        (" -2e5 ", " -2e5 "),
    ],
)
def test_a_cell_starting_with_tab_or_cr_is_neutralised_even_before_a_number(value, expected):
    assert neutralise_cell(value) == expected
    for dtype in ("object", "str"):  # one cell at a time, and a whole text column in pyarrow
        column = neutralise_frame(pd.DataFrame({"c": pd.Series([value, "x"], dtype=dtype)}))["c"]
        assert column.tolist() == [expected, "x"]


def test_written_csv_prefixes_tab_and_cr_numbers(tmp_path):
    path = tmp_path / "t.csv"
    write_csv(pd.DataFrame({"a": ["\t-1.5", "\r+3", "-1.5"], "n": [1, 2, 3]}), path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows == [["a", "n"], ["'\t-1.5", "1"], ["'\r+3", "2"], ["-1.5", "3"]]


@pytest.mark.parametrize("dtype", ["str", object])
def test_a_nul_in_a_csv_cell_is_shown_as_its_code(tmp_path, dtype):
    # Some readers cut a cell at a NUL (or reject the line): incident data may hold one.
    df = pd.DataFrame({"name": pd.Series(["nul\x00byte", "=\x00x"], dtype=dtype)})
    path = tmp_path / "t.csv"
    write_csv(df, path)
    raw = path.read_bytes()
    assert b"\x00" not in raw
    with path.open(newline="", encoding="utf-8") as f:
        assert [r["name"] for r in csv.DictReader(f)] == ["nul\\u0000byte", "'=\\u0000x"]


# -- control and bidi characters shown as codes in CSV cells, as in HTML (issue 36, point 11) --


@pytest.mark.parametrize("dtype", ["str", object])
def test_csv_cells_show_control_and_bidi_characters_as_codes(tmp_path, dtype):
    import csv as csv_module

    from audit.safe import write_csv

    cells = [
        "evil\u202eelpmaxe.com",  # RLO: reads reversed
        "red\x1b[31malert",  # ESC: drives a terminal
        "=cmd\u200b|x",  # a formula with a zero-width space
        "a\tb\nc\r\nd",  # tab and line breaks stay (inside the quoted cell)
        "nul\x00cut",
        "\x85c1 and \x7f",
        None,
    ]
    frame = pd.DataFrame({"text": pd.Series(cells, dtype=dtype), "n": range(len(cells))})
    path = tmp_path / "t.csv"
    write_csv(frame, path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv_module.reader(f))[1:]
    assert [r[0] for r in rows] == [
        "evil\\u202eelpmaxe.com",
        "red\\u001b[31malert",
        "'=cmd\\u200b|x",
        "a\tb\nc\r\nd",
        "nul\\u0000cut",
        "\\u0085c1 and \\u007f",
        "",
    ]
    raw = path.read_text(encoding="utf-8")
    assert not any(ch in raw for ch in "\u202e\x1b\u200b\x00\x85\x7f")


def test_codes_are_those_the_html_report_shows():
    from audit.report.markup import esc
    from audit.safe import shown_as_code

    text = "".join(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x202E, 0x2066, 0xFEFF))
    text += "\U000e0001 plain é 日本"
    assert shown_as_code(text) == esc(text).replace("&amp;", "&")
