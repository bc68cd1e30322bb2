"""``audit analyze --store`` in passes: a store larger than memory gives the tables of one pass.

The oracle is the in-memory analysis of the whole store (:func:`audit.analysis.analyze.analyze`
with ``store=``), itself tested against raw captures elsewhere: the tables written pass by pass
must hold the same rows (sorted), the same dtypes and the same summary.
"""

from __future__ import annotations

import csv
import errno

import pandas as pd
import pytest

from audit.analysis import store_analysis
from audit.analysis.analyze import analyze
from audit.analysis.store_analysis import analyze_store, passes_for
from audit.cli import main
from audit.errors import InputError, OutputError, ParameterError
from audit.ingest.query import DELIVERY_COLUMNS, load_deliveries, store_inputs
from audit.ingest.store import ingest
from tests.builders import write_jsonl, write_secrets
from tests.test_store_history import SECRETS, generated

AS_OF = pd.Timestamp("2026-12-01", tz="UTC")
#: The tables written whole in every case, and the two written pass by pass, with their keys.
WHOLE = ("incidents", "status_intervals", "takedown_km", "takedown_summary", "subscriptions")
KEYS = {"deliveries": ["source", "line"], "events": ["subscription_id", "event_id"]}


@pytest.fixture(scope="module", params=[11, 12])
def store(request, tmp_path_factory):
    """Two generated data sets (copies, retries, conflicts, forgeries, test traffic, records
    without an event id) in two files, one with unreadable lines (no receipt time)."""
    tmp = tmp_path_factory.mktemp(f"passes{request.param}")
    records = generated(request.param)
    half = len(records) // 2
    a = write_jsonl(tmp / "a.jsonl", records[:half])
    b = write_jsonl(tmp / "b.jsonl", [*records[half:], "not JSON", '{"half": '])
    secrets = write_secrets(tmp / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([a, b], secrets, tmp / "store")
    return tmp / "store"


def _sorted(frame: pd.DataFrame, name: str) -> pd.DataFrame:
    keys = KEYS.get(name)
    if keys is None:
        return frame.reset_index(drop=True)
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def test_passes_give_the_tables_of_one_pass(store, tmp_path):
    whole = analyze([], None, store=store, as_of=AS_OF)
    records = _records(store)
    done = analyze_store(store, tmp_path / "p", as_of=AS_OF, rows_per_pass=records // 4)
    assert done.passes == 5  # records // 4 leaves a remainder for these sizes: 4 passes and one
    want = whole.tables()
    for name in (*KEYS, *WHOLE):
        got = pd.read_parquet(tmp_path / "p" / f"{name}.parquet")
        expected = pd.read_parquet(_written(whole, tmp_path / "one", name))
        pd.testing.assert_frame_equal(_sorted(got, name), _sorted(expected, name))
        assert len(got) == len(want[name])
    assert done.summary() == whole.summary()
    assert [p.name for p in done.paths] == [
        p.name for p in whole.write(tmp_path / "w", fmt="parquet")
    ]


def _records(store) -> int:
    return int(store_inputs(store)["records"].sum())


def _written(whole, folder, name):
    if not (folder / f"{name}.parquet").exists():
        whole.write(folder, fmt="parquet")
    return folder / f"{name}.parquet"


def test_passes_in_csv_write_one_header_and_every_row(store, tmp_path):
    one = analyze_store(store, tmp_path / "one", as_of=AS_OF, fmt="csv")
    many = analyze_store(store, tmp_path / "many", as_of=AS_OF, fmt="csv", rows_per_pass=7)
    assert one.passes == 1 and many.passes > 5
    for name in ("deliveries", "events", *WHOLE):
        with open(tmp_path / "one" / f"{name}.csv", newline="", encoding="utf-8") as f:
            want = list(csv.reader(f))
        with open(tmp_path / "many" / f"{name}.csv", newline="", encoding="utf-8") as f:
            got = list(csv.reader(f))
        assert got[0] == want[0]  # the header, once
        assert sorted(got[1:]) == sorted(want[1:])


def test_the_parts_split_the_store_by_subscription_and_event(store):
    every = load_deliveries(store, end=AS_OF, columns=DELIVERY_COLUMNS)
    parts = [
        load_deliveries(store, end=AS_OF, columns=DELIVERY_COLUMNS, part=(k, 3)) for k in range(3)
    ]
    assert sum(len(p) for p in parts) == len(every)
    keys = [set(zip(p["source"], p["line"], strict=True)) for p in parts]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert set().union(*keys) == set(zip(every["source"], every["line"], strict=True))
    pairs = [
        set(zip(p["subscription_id"].fillna(""), p["event_id"], strict=True))
        for p in (q[q["event_id"].notna()] for q in parts)
    ]
    assert not (pairs[0] & pairs[1]) and not (pairs[1] & pairs[2]) and not (pairs[0] & pairs[2])
    no_id = every["event_id"].isna()
    assert no_id.sum() >= 3  # the two unreadable lines and the record that is not an envelope
    assert sum(p["event_id"].isna().sum() for p in parts) == no_id.sum()
    assert all(len(p) for p in parts)  # each part holds some of the rows, not all of them


def test_rows_without_an_event_id_are_spread_over_the_passes(tmp_path, monkeypatch):
    """A store of mostly garbage (300 lines that are no envelope): no pass reads them all."""
    records = [*generated(11), *(f'{{"garbage": {k}}}' for k in range(300))]
    log = write_jsonl(tmp_path / "g.jsonl", records)
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([log], secrets, tmp_path / "store")
    read = _spy_reads(monkeypatch)
    done = analyze_store(tmp_path / "store", tmp_path / "p", as_of=AS_OF, rows_per_pass=50)
    assert done.passes == passes_for(len(records), 50)
    assert sum(read) == len(records) and max(read) < 2 * 50, read


def _spy_reads(monkeypatch) -> list[int]:
    """The number of rows each call of ``load_deliveries`` returns, in order."""
    read: list[int] = []
    real = store_analysis.load_deliveries

    def spy(*args, **kw):
        frame = real(*args, **kw)
        read.append(len(frame))
        return frame

    monkeypatch.setattr(store_analysis, "load_deliveries", spy)
    return read


def test_each_pass_reads_only_its_part(store, tmp_path, monkeypatch):
    read = []
    real = load_deliveries

    def spy(*args, **kw):
        frame = real(*args, **kw)
        read.append((kw.get("part"), len(frame)))
        return frame

    monkeypatch.setattr(store_analysis, "load_deliveries", spy)
    done = analyze_store(store, tmp_path / "p", as_of=AS_OF, rows_per_pass=10)
    assert [part for part, _ in read] == [(k, done.passes) for k in range(done.passes)]
    total = len(real(store, end=AS_OF, columns=DELIVERY_COLUMNS))
    assert sum(n for _, n in read) == total and max(n for _, n in read) < total / 2


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
        ("attempts_and_events", RuntimeError("a pass failed"), RuntimeError, "a pass failed"),
        (
            "write_csv_rows",
            OSError(errno.ENOSPC, "No space left on device"),
            OutputError,
            r"deliveries\.csv: cannot write \(No space left on device\)",
        ),
        (
            "load_deliveries",
            PermissionError(errno.EACCES, "Permission denied"),
            InputError,
            r"store: cannot be read \(Permission denied\)$",
        ),
    ],
)
def test_a_failed_pass_leaves_the_previous_files(
    store, tmp_path, monkeypatch, where, failure, error, message
):
    out = tmp_path / "p"
    analyze_store(store, out, as_of=AS_OF, rows_per_pass=10, fmt="csv")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    # The second pass; write_csv_rows writes deliveries then events in each pass.
    _failing_on_call(
        monkeypatch, store_analysis, where, failure, 3 if where == "write_csv_rows" else 2
    )
    later = pd.Timestamp("2026-10-15", tz="UTC")
    with pytest.raises(error, match=message):
        analyze_store(store, out, as_of=later, rows_per_pass=10, fmt="csv")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no temporary file either


@pytest.mark.parametrize("rows_per_pass, fmt", [(10, "csv"), (10**6, "parquet")])
def test_a_failed_small_table_leaves_the_big_ones_of_before(
    store, tmp_path, monkeypatch, rows_per_pass, fmt
):
    """The small tables are written after the passes' deliveries and events (and, in one
    pass, beside them): a failure there must not leave new big tables beside old small ones."""
    import audit.safe

    out = tmp_path / "p"
    analyze_store(store, out, as_of=AS_OF, rows_per_pass=rows_per_pass, fmt=fmt)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    _failing_on_call(monkeypatch, audit.safe, "write_csv_rows", OSError(errno.ENOSPC, "full"), 1)
    later = pd.Timestamp("2026-10-15", tz="UTC")
    with pytest.raises(OutputError) as got:
        analyze_store(store, out, as_of=later, rows_per_pass=rows_per_pass, fmt=fmt)
    assert f"{out}/" in str(got.value) and ".staged." not in str(got.value)
    assert "cannot write (full)" in str(got.value)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no staging folder either
    monkeypatch.undo()
    analyze_store(store, out, as_of=later, rows_per_pass=rows_per_pass, fmt=fmt)
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after.keys() == before.keys() and after != before  # every table replaced


def _ingest_during_the_first_pass(monkeypatch, log, secrets, store) -> None:
    real = store_analysis.attempts_and_events
    calls = []

    def with_an_ingest(*args, **kw):
        if not calls:
            ingest([log], secrets, store)
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(store_analysis, "attempts_and_events", with_an_ingest)


def test_an_ingest_during_the_passes_is_not_half_read(tmp_path, monkeypatch):
    """A new file ingested while the passes run: the tables are those of the store before it."""
    records = generated(13)
    a = write_jsonl(tmp_path / "a.jsonl", records[: len(records) // 2])
    later = write_jsonl(tmp_path / "b.jsonl", records[len(records) // 2 :])
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([a], secrets, tmp_path / "store")
    want = analyze_store(tmp_path / "store", tmp_path / "want", as_of=AS_OF, rows_per_pass=10)
    _ingest_during_the_first_pass(monkeypatch, later, secrets, tmp_path / "store")
    got = analyze_store(tmp_path / "store", tmp_path / "got", as_of=AS_OF, rows_per_pass=10)
    assert got.summary() == want.summary()
    for name in KEYS:
        pd.testing.assert_frame_equal(
            _sorted(pd.read_parquet(tmp_path / "got" / f"{name}.parquet"), name),
            _sorted(pd.read_parquet(tmp_path / "want" / f"{name}.parquet"), name),
        )


def test_parts_replaced_during_the_passes_stop_the_run_in_one_line(tmp_path, monkeypatch):
    records = generated(14)
    log = write_jsonl(tmp_path / "a.jsonl", records)
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([log], secrets, tmp_path / "store")
    nxt = {"secret": "whsec_next", "valid_from": "2026-12-01T00:00:00Z"}
    rotated = {s: [{"secret": v}, nxt] for s, v in SECRETS.items()}
    new_secrets = write_secrets(tmp_path / "s2.json", rotated)  # every part verified again
    _ingest_during_the_first_pass(monkeypatch, log, new_secrets, tmp_path / "store")
    with pytest.raises(InputError, match=r"changed while it was read .* run again$"):
        analyze_store(tmp_path / "store", tmp_path / "p", as_of=AS_OF, rows_per_pass=10)
    assert not (tmp_path / "p" / "deliveries.parquet").exists()


def test_a_failed_start_creates_no_output_folder(tmp_path):
    with pytest.raises(InputError, match="not an evidence store"):
        analyze_store(tmp_path / "nostore", tmp_path / "out", as_of=AS_OF)
    assert not (tmp_path / "out").exists()


def test_the_command_says_how_many_passes(store, tmp_path, capsys):
    out = tmp_path / "p"
    argv = ["analyze", "--store", str(store), "--out", str(out), "--rows-per-pass", "10"]
    assert main([*argv, "--as-of", "2026-12-01T00:00:00Z"]) == 0
    text = capsys.readouterr().out
    passes = passes_for(_records(store), 10)
    assert f"read in {passes} passes" in text and f"wrote {out / 'events.parquet'}" in text


@pytest.mark.parametrize("bad", [0, -1, 2.5, "3"])
def test_rows_per_pass_must_be_a_whole_number(bad):
    with pytest.raises(ParameterError, match="rows per pass"):
        passes_for(10, bad)


def test_more_passes_than_the_most_allowed_say_what_to_give():
    """1,000,000 deliveries at 999 per pass: 1,002 passes, over the 1,000 allowed; the least
    that fits is ceil(1,000,000 / 1,000) = 1,000 per pass."""
    assert passes_for(1_000_000, 1_000) == 1_000
    with pytest.raises(ParameterError, match="would take 1,002 passes") as e:
        passes_for(1_000_000, 999)
    assert "give at least 1,000" in str(e.value)


def test_too_many_passes_end_the_command_in_one_line_before_any_table(store, tmp_path, capsys):
    out = tmp_path / "p"
    records = _records(store)
    argv = ["analyze", "--store", str(store), "--out", str(out), "--as-of", "2026-12-01T00:00:00Z"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("audit.analysis.store_analysis.MAX_PASSES", 2)
        assert main([*argv, "--rows-per-pass", str(records // 3)]) == 3  # bad input
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "passes (at most 2, each reads the store)" in err[0]
    assert not out.exists() or not any(out.iterdir())
