"""Declared table schemas: one declaration gives frames, checks and the Parquet schema."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

from audit.analysis import incidents
from audit.errors import SchemaError
from audit.ingest.load import load_captures
from audit.tables import DATA_FIELDS, DELIVERIES, STORED_DELIVERIES, Column
from tests.builders import capture, write_jsonl


def test_empty_frame_has_every_column_in_its_dtype():
    df = DELIVERIES.empty()
    assert list(df.columns) == DELIVERIES.names
    assert df["received_at"].dtype == "datetime64[ns, UTC]"
    assert df["response_status"].dtype == "Int64"
    assert DELIVERIES.problems(df) == []


def test_validate_collects_every_problem_in_one_error():
    df = DELIVERIES.empty().drop(columns=["verdict"]).assign(line=pd.Series([], dtype="str"))
    df["received_at"] = pd.Series([], dtype="datetime64[ns]")  # naive: not allowed
    with pytest.raises(SchemaError) as err:
        DELIVERIES.validate(df)
    text = str(err.value)
    assert "missing column 'verdict'" in text
    assert "column 'line' has dtype" in text
    assert "column 'received_at' has dtype" in text


def test_not_nullable_columns_are_checked():
    df = DELIVERIES.empty().reindex([0])
    df["line"] = pd.Series([1], dtype="int64")
    df["source"] = pd.Series(["a.jsonl"], dtype="str")
    df = DELIVERIES.conform(df)
    problems = DELIVERIES.problems(df)
    assert any("'verdict' has 1 missing" in p for p in problems)
    assert not any("'detail'" in p for p in problems)


def test_loaded_deliveries_match_their_declaration(tmp_path):
    log = write_jsonl(tmp_path / "a.jsonl", [capture('{"id":"e"}'), "broken"])
    df = load_captures(log).deliveries
    extra = {"hmac_ok", "skew_s", "matched_secret"}
    declared = [n for n in DELIVERIES.names if n not in extra]
    assert list(df.columns) == declared


def test_parquet_schema_comes_from_the_declaration():
    schema = STORED_DELIVERIES.arrow_schema()
    assert schema.names == STORED_DELIVERIES.names
    assert schema.field("received_at").type == pa.timestamp("ns", tz="UTC")
    assert schema.field("verdict").nullable is False
    assert schema.field("verdict").metadata[b"meaning"]


def test_extracted_fields_are_the_incident_fields():
    assert [k for k, _ in DATA_FIELDS] == [k for k, _, _ in incidents._FIELDS]


def test_unknown_dtype_is_refused():
    with pytest.raises(ValueError, match="unknown dtype"):
        Column("x", "float32", True, "no")
