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
