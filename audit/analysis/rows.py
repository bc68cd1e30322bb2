"""Rows of a frame by position, the columns taken side by side.

Taking rows in a new order reads memory at random, one column at a time; pyarrow and numpy
release the GIL while they copy, so the columns of a wide frame are taken on two threads.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from audit.ingest.workers import in_process

__all__ = ["take_rows", "take_rows_emptying", "value_changes"]

#: Below this many cells, threads cost more than they save.
_SMALL = 200_000


def take_rows(frame: pd.DataFrame, positions: np.ndarray) -> pd.DataFrame:
    """``frame.iloc[positions]`` with a fresh ``RangeIndex``: the same columns, dtypes and values.

    >>> take_rows(pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}), np.array([2, 0]))
       a  b
    0  3  z
    1  1  x
    """
    most = min(2, os.cpu_count() or 1)
    if (
        most < 2
        or in_process()
        or len(positions) * frame.shape[1] < _SMALL
        or not frame.columns.is_unique
    ):
        return frame.iloc[positions].reset_index(drop=True)

    def one(name: str) -> pd.Series:
        return frame[name].take(positions).reset_index(drop=True)

    with ThreadPoolExecutor(max_workers=most) as pool:
        columns = list(pool.map(one, frame.columns))
    data = dict(zip(frame.columns, columns, strict=True))
    return pd.DataFrame(data, columns=frame.columns, copy=False)  # fresh columns: no copy


def take_rows_emptying(
    frame: pd.DataFrame, columns: list[str], positions: np.ndarray
) -> pd.DataFrame:
    """``take_rows(frame[columns], positions)``, deleting each column from ``frame`` once taken:
    for a frame the caller hands over, whose columns then never exist twice.

    >>> f = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
    >>> take_rows_emptying(f, ["b"], np.array([2, 0])), list(f.columns)
    (   b
    0  z
    1  x, ['a'])
    """
    out = {}
    for name in columns:
        out[name] = frame[name].take(positions).reset_index(drop=True)
        del frame[name]
    return pd.DataFrame(out, copy=False)


def value_changes(column: pd.Series) -> np.ndarray:
    """Where each row's value differs from the row before (the first row: True), compared in
    Arrow or as category codes, without a Python object per row. A missing value differs from
    everything, itself included (as NaN does).

    >>> value_changes(pd.Series(["a", "a", "b", None, None, "b"]))
    array([ True, False,  True,  True,  True,  True])
    """
    n = len(column)
    out = np.ones(n, dtype=bool)
    if n < 2:
        return out
    if isinstance(column.dtype, pd.CategoricalDtype) or column.dtype == object:
        # category codes; Python objects of any types numbered by hashing (-1: missing)
        codes = (
            column.cat.codes.to_numpy()
            if isinstance(column.dtype, pd.CategoricalDtype)
            else pd.factorize(column)[0]
        )
        out[1:] = (codes[1:] != codes[:-1]) | (codes[1:] < 0) | (codes[:-1] < 0)
        return out
    values = pa.array(column, from_pandas=True)
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    differ = pc.fill_null(pc.not_equal(values.slice(1), values.slice(0, n - 1)), True)
    out[1:] = differ.to_numpy(zero_copy_only=False)
    return out
