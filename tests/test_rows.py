"""take_rows equals pandas' own iloc for every dtype the tables use, threaded or not."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import audit.analysis.rows as rows
from audit.analysis.rows import take_rows


def _frame(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    ints = rng.integers(0, 1000, n)
    return pd.DataFrame(
        {
            "text": pd.Series([f"évt_{i}" if i % 5 else None for i in ints], dtype="str"),
            "count": pd.array(np.where(ints % 7 == 0, 0, ints), dtype="Int64").astype("Int64"),
            "ratio": pd.array(ints / 3, dtype="Float64"),
            "flag": pd.array(ints % 2 == 0, dtype="boolean"),
            "plain": ints,
            "at": pd.to_datetime(ints * 10**9, utc=True),
            "raw": pd.Series([b"x" * (i % 3) for i in ints], dtype=object),
        },
        index=pd.RangeIndex(n) * 3 + 11,  # labels that are not positions
    )


@pytest.mark.parametrize("small", [10**9, 1])  # one thread (below the size) and two threads
def test_rows_are_those_iloc_takes(small, monkeypatch):
    monkeypatch.setattr(rows, "_SMALL", small)
    frame = _frame(5_000)
    frame.loc[frame.index[::4], "count"] = pd.NA
    positions = np.random.default_rng(3).permutation(len(frame))[:4_000]
    got = take_rows(frame, positions)
    want = frame.iloc[positions].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_repeated_column_names_are_kept(monkeypatch):
    monkeypatch.setattr(rows, "_SMALL", 1)
    frame = pd.DataFrame([[1, "a"], [2, "b"]], columns=["x", "x"])
    got = take_rows(frame, np.array([1, 0]))
    assert got.columns.tolist() == ["x", "x"] and got.iloc[:, 0].tolist() == [2, 1]


@pytest.mark.parametrize("dtype", ["str", "object", "category"])
def test_value_changes_marks_each_new_run_of_values(dtype):
    from audit.analysis.rows import value_changes

    s = pd.Series(["inc_1", "inc_1", "inc_2", None, None, "inc_2", "inc_2", "inc_10"], dtype=dtype)
    # by hand: a new value starts a run; a missing value differs from everything, itself too
    want = [True, False, True, True, True, True, False, True]
    assert value_changes(s).tolist() == want


def test_value_changes_of_short_and_chunked_columns():
    import pyarrow as pa

    from audit.analysis.rows import value_changes

    assert value_changes(pd.Series([], dtype="str")).tolist() == []
    assert value_changes(pd.Series(["a"], dtype="str")).tolist() == [True]
    chunked = pd.Series(pd.arrays.ArrowExtensionArray(pa.chunked_array([["a", "a"], ["a", "b"]])))
    assert value_changes(chunked).tolist() == [True, False, False, True]


def test_value_changes_of_python_objects_of_any_type():
    from audit.analysis.rows import value_changes

    assert value_changes(pd.Series([None, None], dtype=object)).tolist() == [True, True]
    mixed = pd.Series(["1", 1, 1, "1", 2.5], dtype=object)
    assert value_changes(mixed).tolist() == [True, True, False, True, True]
