"""Every rule of the analysis gives the same rows on DuckDB and on PySpark in local mode
(issue 43): over the demo month and over generated small inputs, row for row (times to the
microsecond, floats to 1e-9).

Spark takes seconds to start and a Java runtime: these tests run under ``make test-spark``
(which installs ``audit[spark]`` and sets ``AUDIT_TEST_SPARK=1``); ``make test`` skips them in
one line.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from audit.analysis import engine
from audit.analysis.deliveries import _ATTEMPT_INPUTS, _typed, attempts_rule

if os.environ.get("AUDIT_TEST_SPARK") != "1":
    pytest.skip("the Spark engine's tests run under `make test-spark`", allow_module_level=True)

from audit.analysis import spark as spark_engine

if spark_engine.available():
    pytest.skip(str(spark_engine.available()), allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    return spark_engine.session("local[2]")


@pytest.fixture(scope="module")
def demo_deliveries(tmp_path_factory) -> pd.DataFrame:
    from audit.analysis.analyze import analyze
    from audit.demo.simulate import simulate

    demo = simulate(tmp_path_factory.mktemp("engines") / "demo", days=31, incidents=60, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return analyze(demo.captures, demo.secrets).deliveries


def _attempts_input(frame: pd.DataFrame) -> dict[str, pa.Table]:
    return {"deliveries": _typed(engine.arrow_input(frame, list(_ATTEMPT_INPUTS)))}


#: Each rule with the inputs it reads from a deliveries frame and its constants.
RULES: dict[str, tuple[Callable, Callable[[pd.DataFrame], dict[str, pa.Table]], dict]] = {
    "attempts": (attempts_rule, _attempts_input, {"floor_s": 10.0, "share": 0.1}),
}


def _same(duck: pa.Table, spark: pa.Table, key: list[str]) -> None:
    """Row for row, in the order of ``key``: times to the microsecond, floats to 1e-9."""
    assert duck.column_names == spark.column_names
    a = duck.sort_by([(k, "ascending") for k in key]).to_pandas()
    b = spark.sort_by([(k, "ascending") for k in key]).to_pandas()
    assert len(a) == len(b)
    for name in a.columns:
        x, y = a[name], b[name]
        assert (x.isna() == y.isna()).all(), name
        x, y = x[x.notna()], y[y.notna()]
        if pd.api.types.is_datetime64_any_dtype(x):
            assert (x.dt.floor("us") == y.dt.floor("us")).all(), name
        elif pd.api.types.is_float_dtype(x):
            assert ((x.astype(float) - y.astype(float)).abs() <= 1e-9).all(), name
        else:
            assert x.tolist() == y.tolist(), name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rule_gives_the_same_rows_on_both_engines_over_a_month(name, demo_deliveries, spark):
    rule, inputs, constants = RULES[name]
    tables = inputs(demo_deliveries)
    duck = engine.run(rule, tables, **constants)
    assert duck.num_rows > 0
    _same(duck, spark_engine.run(rule, tables, spark=spark, **constants), ["_row"])


_TIMES = st.integers(0, 8000).map(
    lambda s: pd.Timestamp("2026-10-01", tz="UTC") + pd.Timedelta(s, "s")
)


@pytest.mark.slow
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["valid", "valid", "signature_mismatch"]),
            st.sampled_from(["wh_a", "wh_b", None]),
            st.sampled_from(["evt_1", "evt_2", "evt_3", None]),
            _TIMES,
            st.sampled_from([200, 500, None]),
            st.sampled_from([10.0, 6000.0, None]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_the_attempt_rule_agrees_on_generated_deliveries(rows, spark):
    frame = pd.DataFrame(
        rows,
        columns=[
            "verdict",
            "subscription_id",
            "event_id",
            "received_at",
            "response_status",
            "response_ms",
        ],
    )
    frame["event"], frame["incident_id"] = "incident.created", "inc_1"
    rule, inputs, constants = RULES["attempts"]
    tables = inputs(frame)
    _same(
        engine.run(rule, tables, **constants),
        spark_engine.run(rule, tables, spark=spark, **constants),
        ["_row"],
    )


def test_the_spark_engine_is_refused_in_one_line_without_pyspark(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pyspark(name, *args, **kwargs):
        if name.startswith("pyspark"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyspark)
    why = spark_engine.available()
    assert why is not None and "pip install 'audit[spark]'" in why and "\n" not in why


def test_parquet_files_are_read_where_they_lie(demo_deliveries, spark, tmp_path):
    import pyarrow.parquet as pq

    rule, inputs, constants = RULES["attempts"]
    table = inputs(demo_deliveries)["deliveries"]
    path = Path(tmp_path, "d.parquet")
    pq.write_table(table, path, coerce_timestamps="us")  # as the store writes them
    files = {"deliveries": engine.Parquet((path,))}
    got = spark_engine.run(rule, files, spark=spark, **constants)
    _same(engine.run(rule, {"deliveries": table}, **constants), got, ["_row"])
    _same(engine.run(rule, files, **constants), got, ["_row"])  # DuckDB reads them where they lie
    for on in ("duckdb", "spark"):
        with engine.batches(rule, files, on=on, rows=1000, **constants) as got_batches:
            parts = list(got_batches)
        assert max(b.num_rows for b in parts) <= 1000
        _same(pa.Table.from_batches(parts), got, ["_row"])


@pytest.mark.slow
def test_analyze_store_gives_the_same_tables_on_spark(spark, tmp_path):
    """``audit analyze --store --engine spark``: the deliveries and events tables computed by
    Spark where the store lies equal DuckDB's, file for file."""
    from audit.analysis.store_analysis import analyze_store
    from audit.demo.simulate import simulate
    from audit.ingest.store import ingest

    demo = simulate(tmp_path / "demo", days=7, incidents=20, seed=3)
    ingest(demo.captures, demo.secrets, tmp_path / "store")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        duck = analyze_store(tmp_path / "store", tmp_path / "duck")
        on_spark = analyze_store(tmp_path / "store", tmp_path / "spark", on="spark")
    assert on_spark.summary() == duck.summary()
    for name in ("deliveries", "events", "incidents"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "spark" / f"{name}.parquet"),
            pd.read_parquet(tmp_path / "duck" / f"{name}.parquet"),
        )
