"""``audit analyze --store``: the engine's tables, computed where the store lies, are those of
the in-memory analysis.

The oracle is the in-memory analysis of the whole store (:func:`audit.analysis.analyze.analyze`
with ``store=``), itself tested against raw captures elsewhere: the tables written batch by
batch must hold the same rows in the same order, the same dtypes and the same summary.
"""

from __future__ import annotations

import csv
import errno

import pandas as pd
import pytest

from audit.analysis import store_analysis
from audit.analysis.analyze import analyze
from audit.analysis.store_analysis import analyze_store
from audit.cli import main
from audit.errors import InputError, OutputError
from audit.ingest.store import ingest
from tests.builders import write_jsonl, write_secrets
from tests.test_analysis import TABLES
from tests.test_store_history import SECRETS, generated

AS_OF = pd.Timestamp("2026-12-01", tz="UTC")


@pytest.fixture(scope="module", params=[11, 12])
def store(request, tmp_path_factory):
    """Two generated data sets (copies, retries, conflicts, forgeries, test traffic, records
    without an event id) in two files, one with unreadable lines (no receipt time)."""
    tmp = tmp_path_factory.mktemp(f"engine{request.param}")
    records = generated(request.param)
    half = len(records) // 2
    a = write_jsonl(tmp / "a.jsonl", records[:half])
    b = write_jsonl(tmp / "b.jsonl", [*records[half:], "not JSON", '{"half": '])
    secrets = write_secrets(tmp / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([a, b], secrets, tmp / "store")
    return tmp / "store"


def test_the_engine_gives_the_tables_of_the_in_memory_analysis(store, tmp_path):
    whole = analyze([], None, store=store, as_of=AS_OF)
    whole.write(tmp_path / "one", fmt="parquet")
    done = analyze_store(store, tmp_path / "engine", as_of=AS_OF)
    for name in TABLES:
        got = pd.read_parquet(tmp_path / "engine" / f"{name}.parquet")
        expected = pd.read_parquet(tmp_path / "one" / f"{name}.parquet")
        pd.testing.assert_frame_equal(got, expected)  # rows in the same order
        assert len(got) == len(whole.tables()[name])
    assert done.summary() == whole.summary()
    assert [p.name for p in done.paths] == [
        p.name for p in whole.write(tmp_path / "w", fmt="parquet")
    ]


def test_in_csv_one_header_and_the_rows_of_the_in_memory_analysis(store, tmp_path):
    whole = analyze([], None, store=store, as_of=AS_OF)
    whole.write(tmp_path / "one", fmt="csv")
    analyze_store(store, tmp_path / "engine", as_of=AS_OF, fmt="csv")
    for name in TABLES:
        with open(tmp_path / "one" / f"{name}.csv", newline="", encoding="utf-8") as f:
            want = list(csv.reader(f))
        with open(tmp_path / "engine" / f"{name}.csv", newline="", encoding="utf-8") as f:
            got = list(csv.reader(f))
        assert got == want, name


def test_batches_of_a_few_rows_give_the_same_files(store, tmp_path, monkeypatch):
    """A table larger than memory comes in many batches: the files are those of one."""
    analyze_store(store, tmp_path / "one", as_of=AS_OF)
    monkeypatch.setattr("audit.analysis.engine.BATCH_ROWS", 7)
    real = store_analysis.engine.batches
    sizes = []

    def small(*args, **kw):
        kw["rows"] = 7
        return real(*args, **kw)

    monkeypatch.setattr(store_analysis.engine, "batches", small)
    monkeypatch.setattr(store_analysis._Sink, "add", _counting(store_analysis._Sink.add, sizes))
    analyze_store(store, tmp_path / "many", as_of=AS_OF)
    assert len(sizes) > 10 and max(sizes) <= 7
    for name in TABLES:
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "many" / f"{name}.parquet"),
            pd.read_parquet(tmp_path / "one" / f"{name}.parquet"),
        )


def _counting(add, sizes):
    def counted(self, frame):
        sizes.append(len(frame))
        return add(self, frame)

    return counted


def _failing_on_call(monkeypatch, module, name: str, failure: BaseException, call: int) -> None:
    real = getattr(module, name)
    calls = []

    def fails(*args, **kw):
        calls.append(1)
        if len(calls) == call:
            raise failure
        return real(*args, **kw)

    monkeypatch.setattr(module, name, fails)


@pytest.mark.parametrize(
    "where, failure, error, message",
    [
        ("frame_of", RuntimeError("a batch failed"), RuntimeError, "a batch failed"),
        (
            "write_csv_rows",
            OSError(errno.ENOSPC, "No space left on device"),
            OutputError,
            r"events\.csv: cannot write \(No space left on device\)",
        ),
    ],
)
def test_a_failed_table_leaves_the_previous_files(
    store, tmp_path, monkeypatch, where, failure, error, message
):
    out = tmp_path / "p"
    analyze_store(store, out, as_of=AS_OF, fmt="csv")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _failing_on_call(monkeypatch, store_analysis, where, failure, 2)  # the events' first batch
    later = pd.Timestamp("2026-10-15", tz="UTC")
    with pytest.raises(error, match=message):
        analyze_store(store, out, as_of=later, fmt="csv")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no temporary file either


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_failed_small_table_leaves_the_big_ones_of_before(store, tmp_path, monkeypatch, fmt):
    """The small tables are written after the deliveries and events: a failure there must not
    leave new big tables beside old small ones."""
    import audit.safe

    out = tmp_path / "p"
    analyze_store(store, out, as_of=AS_OF, fmt=fmt)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    call = 3 if fmt == "csv" else 1  # csv: the deliveries and events went through it first
    _failing_on_call(monkeypatch, audit.safe, "write_csv_rows", OSError(errno.ENOSPC, "full"), call)
    later = pd.Timestamp("2026-10-15", tz="UTC")
    with pytest.raises(OutputError) as got:
        analyze_store(store, out, as_of=later, fmt=fmt)
    assert f"{out}/" in str(got.value) and ".staged." not in str(got.value)
    assert "cannot write (full)" in str(got.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder either
    monkeypatch.undo()
    analyze_store(store, out, as_of=later, fmt=fmt)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after.keys() == before.keys() and after != before  # every table replaced


def _ingest_before_the_events(monkeypatch, log, secrets, store) -> None:
    """An ingest into ``store`` once the deliveries table is written, before the events'."""
    real = store_analysis._written
    calls = []

    def with_an_ingest(out, name, *args, **kw):
        if name == "events" and not calls:
            ingest([log], secrets, store)
            calls.append(1)
        return real(out, name, *args, **kw)

    monkeypatch.setattr(store_analysis, "_written", with_an_ingest)


def test_an_ingest_during_the_run_is_not_half_read(tmp_path, monkeypatch):
    """A new file ingested while the tables are written: they are those of the store before."""
    records = generated(13)
    a = write_jsonl(tmp_path / "a.jsonl", records[: len(records) // 2])
    later = write_jsonl(tmp_path / "b.jsonl", records[len(records) // 2 :])
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([a], secrets, tmp_path / "store")
    want = analyze_store(tmp_path / "store", tmp_path / "want", as_of=AS_OF)
    _ingest_before_the_events(monkeypatch, later, secrets, tmp_path / "store")
    got = analyze_store(tmp_path / "store", tmp_path / "got", as_of=AS_OF)
    assert got.summary() == want.summary()
    for name in ("deliveries", "events"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "got" / f"{name}.parquet"),
            pd.read_parquet(tmp_path / "want" / f"{name}.parquet"),
        )


def test_parts_replaced_during_the_run_stop_it_in_one_line(tmp_path, monkeypatch):
    records = generated(14)
    log = write_jsonl(tmp_path / "a.jsonl", records)
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([log], secrets, tmp_path / "store")
    nxt = {"secret": "whsec_next", "valid_from": "2026-12-01T00:00:00Z"}
    rotated = {s: [{"secret": v}, nxt] for s, v in SECRETS.items()}
    new_secrets = write_secrets(tmp_path / "s2.json", rotated)  # every part verified again
    _ingest_before_the_events(monkeypatch, log, new_secrets, tmp_path / "store")
    with pytest.raises(InputError, match=r"changed while it was read .* run again$"):
        analyze_store(tmp_path / "store", tmp_path / "p", as_of=AS_OF)
    assert not (tmp_path / "p" / "deliveries.parquet").exists()


def test_a_failed_start_creates_no_output_folder(tmp_path):
    with pytest.raises(InputError, match="not an evidence store"):
        analyze_store(tmp_path / "nostore", tmp_path / "out", as_of=AS_OF)
    assert not (tmp_path / "out").exists()


def test_the_spark_engine_without_pyspark_is_one_line_before_anything(
    store, tmp_path, capsys, monkeypatch
):
    from audit.analysis import spark

    monkeypatch.setattr(
        spark, "available", lambda: f"the spark engine needs PySpark: {spark.INSTALL}"
    )
    out = tmp_path / "p"
    argv = ["analyze", "--store", str(store), "--out", str(out), "--engine", "spark"]
    assert main(argv) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'audit[spark]'" in err[0], err
    assert not out.exists()


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--engine", "spark"], "--engine needs --store"),
        (["--spark-master", "local[1]"], "--spark-master needs --engine spark"),
    ],
)
def test_engine_options_without_what_they_need_are_usage_errors(tmp_path, capsys, extra, says):
    log = write_jsonl(tmp_path / "a.jsonl", generated(11)[:5])
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    argv = ["analyze", str(log), "--secrets", str(secrets), "--out", str(tmp_path / "o"), *extra]
    assert main(argv) == 3  # bad input, as every usage error
    assert says in capsys.readouterr().err
