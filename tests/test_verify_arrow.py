"""The pandas-free ``audit verify`` route (Arrow from the workers to the file) gives what the
pandas route gives: the same table, metadata, files, counts and warnings."""

from __future__ import annotations

import warnings
from unittest import mock

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.cli.store import write_table
from audit.ingest import records
from audit.ingest.records import _array
from audit.ingest.verdicts import verdict_table, verdicts_by_name, verify_logs
from audit.ingest.verification import VERDICT_COLUMNS, verdict_count_rows, verdict_counts
from audit.schema import Column, Table
from tests.test_cli_imports import write_logs


@pytest.fixture
def logs(tmp_path):
    return write_logs(tmp_path)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_arrow_route_equals_the_pandas_route(logs, tmp_path, workers):
    folder, secrets = logs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = verify_logs([folder], secrets, workers=workers, piece_bytes=500)
        table = verdict_table([folder], secrets, workers=workers, piece_bytes=500)
    expected = pa.Table.from_pandas(frame[VERDICT_COLUMNS], preserve_index=False)
    assert table.equals(expected, check_metadata=True)
    for suffix in (".parquet", ".csv"):  # the files, byte for byte
        write_table(frame[VERDICT_COLUMNS], tmp_path / f"old{suffix}")
        write_table(table, tmp_path / f"new{suffix}")
        assert (tmp_path / f"old{suffix}").read_bytes() == (tmp_path / f"new{suffix}").read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "new.parquet"), frame)
    rows = verdict_count_rows(verdicts_by_name(table))
    assert rows == list(verdict_counts(frame).itertuples(index=False, name=None))
    assert {v for v, _, _ in rows} == {"valid", "unreadable", "malformed_signature"}


def test_the_arrow_route_warns_of_naive_times_as_the_pandas_route(logs):
    folder, secrets = logs
    with pytest.warns(Warning) as old:
        verify_logs([folder], secrets)
    with pytest.warns(Warning) as new:
        verdict_table([folder], secrets)
    assert [str(w.message) for w in new] == [str(w.message) for w in old]


def test_pandas_schema_is_what_from_pandas_gives():
    dtypes = ("str", "int", "Int", "Float", "bool", "time", "float", "flag")
    t = Table("t", tuple(Column(f"c_{d}", d, True, d) for d in dtypes))
    row = {"c_str": "a", "c_int": 1, "c_Int": 2, "c_Float": 0.5, "c_bool": True}
    row |= {"c_time": "2026-10-01T00:00:00Z", "c_float": 1.5, "c_flag": False}
    for frame in (t.empty(), t.frame([t.row(**row), t.row(c_int=3, c_flag=True)])):
        schema = pa.Table.from_pandas(frame, preserve_index=False).schema
        assert t.pandas_schema(t.names).equals(schema, check_metadata=True)
    with pytest.raises(ValueError, match="depends on values"):
        Table("u", (Column("b", "bytes", True, "b"),)).pandas_schema(["b"])


_VALUES = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(),
    st.booleans(),
    st.binary(max_size=3),
)


@settings(max_examples=400, deadline=None)
@given(
    typ=st.sampled_from([pa.string(), pa.int64(), pa.float64(), pa.bool_()]),
    plain=st.booleans(),
    values=st.lists(_VALUES, max_size=12),
    pandas_loaded=st.booleans(),
)
def test_arrays_are_built_as_pa_array_builds_them(typ, plain, values, pandas_loaded):
    """Both routes: numpy buffers (a process without pandas, ``audit verify``) and ``pa.array``
    itself (pandas already loaded)."""
    with mock.patch.object(records, "_pandas_loaded", return_value=pandas_loaded):
        _check_array(typ, plain, values)


def _check_array(typ, plain, values):
    if plain:  # mostly the column's own type, the usual case
        kind = {pa.string(): str, pa.int64(): int, pa.float64(): float, pa.bool_(): bool}[typ]
        values = [v for v in values if v is None or type(v) is kind]
    try:
        expected = pa.array(values, typ, from_pandas=True)
    except Exception as e:
        with pytest.raises(type(e)) as got:
            _array(values, typ)
        assert str(got.value) == str(e)
        return
    got = _array(values, typ)
    got.validate(full=True)
    assert got.type == expected.type and got.null_count == expected.null_count
    assert got.equals(expected)


class _Lying(str):
    """A str whose own methods lie about its bytes (``pa.array`` reads the string itself)."""

    def encode(self, *a, **k):
        return b"zz"

    def __len__(self):
        return 99


@pytest.mark.parametrize("values", [[_Lying("é")], [_Lying("ab")], ["x", _Lying("é"), "y"]])
def test_a_str_subclass_gives_the_bytes_of_its_string(values):
    with mock.patch.object(records, "_pandas_loaded", return_value=False):
        _check_array(pa.string(), False, values)
