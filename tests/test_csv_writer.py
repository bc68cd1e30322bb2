"""The one CSV writer's Arrow path (``audit.safe._arrow_csv``) against pandas' writer.

The oracle is pandas' own ``to_csv`` with the options :func:`audit.safe.write_csv` documents
(``QUOTE_NONNUMERIC``, ``\\n``, ISO times), after the same neutralisation: the Arrow path must
give the same bytes for every frame it takes, and leave every other frame to pandas.
"""

from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import safe
from audit.safe import write_csv, write_csv_rows

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(
    [0.1, -0.0, 1e16, 1e-5, 123456789.123, 2.5e-300, 1.0]
)
TIMES = st.integers(-2_000_000_000_000_000_000, 4_000_000_000_000_000_000)


def pandas_csv(df: pd.DataFrame) -> str:
    """What pandas writes for ``df`` with write_csv's options (the oracle)."""
    out = io.StringIO()
    frame = safe._times_as_text(safe.neutralise_frame(df))
    frame.to_csv(
        out, index=False, date_format=safe.CSV_DATE_FORMAT, quoting=csv.QUOTE_NONNUMERIC,
        lineterminator="\n",
    )  # fmt: skip
    return out.getvalue()


def ours(df: pd.DataFrame, *, header: bool = True) -> str:
    out = io.StringIO()
    write_csv_rows(df, out, header=header)
    return out.getvalue()


@st.composite
def frames(draw) -> pd.DataFrame:
    n = draw(st.integers(0, 30))
    missing = st.lists(st.booleans(), min_size=n, max_size=n)
    makers = {
        "str": lambda: pd.array(draw(st.lists(TEXT | st.none(), min_size=n, max_size=n)), "str"),
        "string": lambda: pd.array(
            draw(st.lists(TEXT | st.none(), min_size=n, max_size=n)), "string[pyarrow]"
        ),
        "str_parts": lambda: _in_parts(draw(st.lists(TEXT | st.none(), min_size=n, max_size=n))),
        "int64": lambda: np.array(
            draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)), dtype=np.int64
        ),
        "uint8": lambda: np.array(
            draw(st.lists(st.integers(0, 255), min_size=n, max_size=n)), dtype=np.uint8
        ),
        "float64": lambda: np.array(draw(st.lists(FLOATS, min_size=n, max_size=n)), dtype=float),
        "bool": lambda: np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n))),
        "Int64": lambda: pd.array(
            [
                None if m else v
                for m, v in zip(
                    draw(missing),
                    draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n)),
                    strict=True,
                )
            ],
            "Int64",
        ),
        "Float64": lambda: pd.array(
            [
                None if m else v
                for m, v in zip(
                    draw(missing),
                    draw(st.lists(st.floats(allow_nan=False), min_size=n, max_size=n)),
                    strict=True,
                )
            ],
            "Float64",
        ),
        "boolean": lambda: pd.array(
            [
                None if m else v
                for m, v in zip(
                    draw(missing),
                    draw(st.lists(st.booleans(), min_size=n, max_size=n)),
                    strict=True,
                )
            ],
            "boolean",
        ),
        "utc": lambda: _times(draw, n, "UTC"),
        "paris": lambda: _times(draw, n, "Europe/Paris"),
        "naive": lambda: _times(draw, n, None),
        "naive_us": lambda: _times(draw, n, None).astype("datetime64[us]"),
    }
    kinds = draw(st.lists(st.sampled_from(sorted(makers)), min_size=1, max_size=6))
    return pd.DataFrame({f'{k} {i} "q"': makers[k]() for i, k in enumerate(kinds)})


def _in_parts(values: list) -> pd.Series:
    """A text column held as an Arrow array in two chunks (as a column read in parts is)."""
    half = len(values) // 2
    parts = pa.chunked_array([values[:half], values[half:]], type=pa.large_string())
    return pd.Series(pd.arrays.ArrowStringArray(parts))


def _times(draw, n: int, tz: str | None) -> pd.Series:
    ns = draw(st.lists(TIMES | st.none(), min_size=n, max_size=n))
    times = pd.Series(pd.to_datetime([pd.NaT if v is None else v for v in ns], unit="ns"))
    return times.dt.tz_localize("UTC").dt.tz_convert(tz) if tz else times


@settings(max_examples=300, deadline=None)
@given(frames(), st.sampled_from([1, 2, 7, 65_536]))
def test_the_arrow_path_writes_what_pandas_writes(df, block):
    expected = pandas_csv(df)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(safe, "_CSV_BLOCK_ROWS", block)
        assert safe._arrow_csv(safe.neutralise_frame(df), header=True) is not None
        assert ours(df) == expected
        assert ours(df, header=False) == expected.split("\n", 1)[1]


def test_hand_written_rows():
    """Worked by hand from Python's csv rules (QUOTE_NONNUMERIC)."""
    df = pd.DataFrame(
        {
            "t": pd.array(['a "b", c', None, "=1+1", "-1.5", "x\r\ny"], "str"),
            "i": pd.array([1, None, -3, 0, 2**62], "Int64"),
            "f": [0.1, float("nan"), -0.0, 1e16, float("-inf")],
            "b": [True, False, True, False, True],
            "at": pd.to_datetime(
                [
                    "1969-12-31T23:59:59.9999999Z",
                    None,
                    "2026-02-28T23:59:59Z",
                    "2024-02-29T12:00:00.5Z",
                    "2000-01-01T00:00:00Z",
                ],
                utc=True,
                format="ISO8601",
            ),
        }
    )
    assert ours(df) == (
        '"t","i","f","b","at"\n'
        '"a ""b"", c",1,0.1,True,"1969-12-31T23:59:59.999999Z"\n'
        '"","","",False,""\n'
        '"\'=1+1",-3,-0.0,True,"2026-02-28T23:59:59.000000Z"\n'
        '"-1.5",0,1e+16,False,"2024-02-29T12:00:00.500000Z"\n'
        '"x\r\ny",4611686018427387904,-inf,True,"2000-01-01T00:00:00.000000Z"\n'
    )


@pytest.mark.parametrize(
    "column",
    [
        pd.Series([1, "=a"], dtype=object),
        pd.Series(["a", "b"], dtype="category"),
        pd.Series(pd.to_timedelta([1, 2], unit="s")),
        pd.Series(pd.array([1, None], "Int32")),
        pd.Series([1e6, 0.1], dtype=np.float32),
        pd.Series(["a", "=b"], dtype="string[python]"),
    ],
    ids=["object", "category", "timedelta", "Int32", "float32", "python-text"],
)
def test_other_columns_are_left_to_pandas(column, tmp_path):
    df = pd.DataFrame({"x": column, "n": [1, 2]})
    assert safe._arrow_csv(safe.neutralise_frame(df), header=True) is None
    assert ours(df) == pandas_csv(df)


def test_a_file_written_in_blocks_reads_back(tmp_path, monkeypatch):
    monkeypatch.setattr(safe, "_CSV_BLOCK_ROWS", 4)
    df = pd.DataFrame({"s": pd.array([f"v{i},\n" for i in range(10)], "str"), "n": range(10)})
    write_csv(df, tmp_path / "t.csv")
    with open(tmp_path / "t.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows == [["s", "n"], *([f"v{i},\n", str(i)] for i in range(10))]
