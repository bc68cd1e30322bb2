"""A store with history: the incident fold reads first receipts, the attempts a day back.

The fold's answers from :func:`audit.ingest.query.load_first_receipts` must equal those from
every stored delivery (the differential test below, on generated and hostile records); a
month report from a store that holds earlier months must give the findings that the raw
captures give.
"""

from __future__ import annotations

import json
import math
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from audit.analysis.analyze import analyze, read_store, run_analyses
from audit.analysis.incidents import incidents_and_intervals
from audit.errors import ParameterError, SchemaError
from audit.ingest.query import (
    ANALYSIS_COLUMNS,
    DELIVERY_COLUMNS,
    load_analysis_inputs,
    load_deliveries,
    load_first_receipts,
)
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from audit.ingest.verification import audit_signatures
from tests.builders import capture, write_jsonl, write_secrets

SECRETS = {"wh_1": "whsec_history_1", "wh_2": "whsec_history_2"}
T0 = datetime(2026, 9, 20, tzinfo=UTC)
STATUSES = (
    "pending_review",
    "case_building",
    "approval_required",
    "takedown_in_progress",
    "takedown_success",
    "closed",
)
EVENTS = (
    "incident.created",
    "incident.status_changed",
    "incident.history_created",
    "incident.takedown_updated",
)


def iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def record(text: str, received: datetime, sub: str = "wh_1", *, forged: bool = False) -> dict:
    stamp = int(received.timestamp()) - 1
    sig = "sha256=" + "cd" * 32 if forged else sign(SECRETS[sub], stamp, text.encode())
    return capture(
        text, received_at=iso(received), signature=sig, timestamp=str(stamp), subscription_id=sub
    )


def envelope(eid: str, event: str, stamped: datetime, incident: str | None, **data) -> str:
    env = {"id": eid, "event": event, "timestamp": iso(stamped)}
    env["data"] = {"incidentId": incident, **data} if incident is not None else dict(data)
    return json.dumps(env, separators=(",", ":"))


def generated(seed: int) -> list[dict]:
    """Records of a few incidents over two months, delivered as a receiver sees them: copies to
    two subscriptions, retries hours or days apart, out of order, conflicting copies, forged
    copies, test traffic, missing ids, wrong types and unparsable times."""
    rng = random.Random(seed)
    out = []
    n = 0
    for k in range(6):
        incident = f"inc_{seed}_{k}"
        t = T0 + timedelta(days=rng.uniform(0, 40))
        for _ in range(rng.randint(1, 9)):
            n += 1
            t += timedelta(hours=rng.uniform(0, 120))
            data = {"status": rng.choice(STATUSES)} if rng.random() < 0.8 else {}
            if rng.random() < 0.5:
                data["domain"] = rng.choice(["a.example", "b.example", None])
            if rng.random() < 0.2:
                data["waitForClient"] = rng.choice([True, False, "legal review", 3])
            if rng.random() < 0.2:
                data["takedownTimestamp"] = rng.choice([iso(t), "not a time", 17])
            if rng.random() < 0.2:
                data["timestamp"] = iso(T0 - timedelta(days=rng.randint(0, 30)))
            text = envelope(f"evt_{n}", rng.choice(EVENTS), t, incident, **data)
            for _ in range(rng.choice([1, 1, 2, 3])):  # copies: retries, two subscriptions
                delay = timedelta(minutes=rng.choice([0, 0.5, 2, 10, 60, 60 * 30]))
                out.append(record(text, t + delay, rng.choice(["wh_1", "wh_2"])))
            if rng.random() < 0.15:  # the same event id with other bytes
                other = envelope(f"evt_{n}", "incident.status_changed", t, incident, status="x")
                out.append(record(other, t + timedelta(minutes=rng.uniform(1, 5000))))
            if rng.random() < 0.1:
                out.append(record(text, t + timedelta(seconds=3), forged=True))
    day = T0 + timedelta(days=20)
    out.append(record(envelope("evt_t", "webhook.test", day, "inc_x"), day))
    out.append(record(envelope("evt_ti", "incident.created", day, "test_1"), day))
    out.append(record(envelope("evt_noinc", "incident.created", day, None), day))
    out.append(record('{"not":"an envelope"}', day))
    late = envelope("evt_late", "incident.created", day + timedelta(days=90), "inc_late")
    out.append(record(late, day))  # stamped after every as_of below
    rng.shuffle(out)
    return out


def _store(tmp_path, records: list[dict]):
    log = write_jsonl(tmp_path / "log.jsonl", records)
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    store = tmp_path / "store"
    ingest([log], secrets, store)
    return log, secrets, store


@pytest.fixture(params=["installed", "1.2.2"])
def duckdb_version(request, monkeypatch):
    """The DuckDB installed, and one taken for 1.2 (before ``file_index``: parts by path)."""
    import duckdb

    if request.param != "installed":
        monkeypatch.setattr(duckdb, "__version__", request.param)
    return request.param


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_fold_of_first_receipts_equals_the_fold_of_every_delivery(
    tmp_path, seed, duckdb_version
):
    _, _, store = _store(tmp_path, generated(seed))
    windows = [
        (None, pd.Timestamp("2026-12-01", tz="UTC")),
        (pd.Timestamp("2026-10-10", tz="UTC"), pd.Timestamp("2026-11-01", tz="UTC")),
        (pd.Timestamp("2026-09-25", tz="UTC"), pd.Timestamp("2026-10-20", tz="UTC")),
    ]
    for start, end in windows:
        every = load_deliveries(store, start=start, end=end, columns=ANALYSIS_COLUMNS)
        first = load_first_receipts(store, start=start, end=end)
        assert len(first.rows) < int((every["verdict"] == "valid").sum())
        want_inc, want_iv = incidents_and_intervals(every, as_of=end)
        got_inc, got_iv = incidents_and_intervals(first, as_of=end)
        pd.testing.assert_frame_equal(got_inc, want_inc)
        pd.testing.assert_frame_equal(got_iv, want_iv)
        assert got_inc.attrs["counts"] == want_inc.attrs["counts"]
        assert first.rows is None  # taken over: the fold freed them


def test_hostile_counts_are_those_of_every_delivery(tmp_path):
    """Counted by hand: two copies of one event (one differs), a copy to another subscription,
    a forged copy, no event id, a test event and a test incident."""
    day = T0 + timedelta(days=11)
    a = envelope("evt_a", "incident.created", day, "inc_a", status="pending_review")
    b = envelope("evt_a", "incident.created", day, "inc_a", status="closed")
    records = [
        record(a, day),
        record(a, day + timedelta(seconds=30), "wh_2"),
        record(b, day + timedelta(minutes=2)),
        record(a, day + timedelta(minutes=3), forged=True),
        record('{"no":"id"}', day),
        record(envelope("evt_t", "webhook.test", day, "inc_a"), day),
        record(envelope("evt_u", "incident.created", day, "test_9"), day),
    ]
    _, _, store = _store(tmp_path, records)
    first = load_first_receipts(store)
    assert first.counts == {"valid": 6, "no_event_id": 1, "duplicates": 2, "conflicting_bodies": 1}
    inc, _ = incidents_and_intervals(first, as_of=pd.Timestamp("2026-11-01", tz="UTC"))
    assert inc["status"].tolist() == ["pending_review"]  # the first receipt's body
    assert inc.attrs["counts"]["test_events"] == 2


def test_first_receipts_received_after_as_of_are_refused(tmp_path):
    day = T0 + timedelta(days=3)
    _, _, store = _store(tmp_path, [record(envelope("e", "incident.created", day, "i"), day)])
    first = load_first_receipts(store)
    with pytest.raises(ParameterError, match="load them up to as_of"):
        incidents_and_intervals(first, as_of=pd.Timestamp(day - timedelta(hours=1)))


def test_store_deliveries_without_first_receipts_say_what_to_pass(tmp_path):
    day = T0 + timedelta(days=3)
    _, _, store = _store(tmp_path, [record(envelope("e", "incident.created", day, "i"), day)])
    got = load_analysis_inputs(store, start=None, end=pd.Timestamp("2026-12-01", tz="UTC"))
    with pytest.raises(SchemaError, match=r"first_receipts=got\.first_receipts"):
        run_analyses(got.deliveries, as_of=pd.Timestamp("2026-12-01", tz="UTC"))


def _retry_chain() -> list[dict]:
    """One event attempted at 23:59:50 on 31 October (a 500), retried 30 s later in November."""
    t = datetime(2026, 10, 31, 23, 59, 50, tzinfo=UTC)
    text = envelope("evt_r", "incident.created", t, "inc_r", status="pending_review")
    first = {**record(text, t), "response_status": 500}
    return [first, record(text, t + timedelta(seconds=30))]


def _october_file_with_an_unreadable_line() -> list[object]:
    t = datetime(2026, 10, 5, tzinfo=UTC)
    text = envelope("evt_o", "incident.created", t, "inc_o", status="pending_review")
    return [record(text, t), "this line is not JSON"]


def _store_with_history(tmp_path) -> tuple[Path, Path, Path, Path]:
    """(November's log, October's with an unreadable line, secrets, the store of both)."""
    records = generated(7) + _retry_chain()
    log = write_jsonl(tmp_path / "log.jsonl", records)
    october = write_jsonl(tmp_path / "october.jsonl", _october_file_with_an_unreadable_line())
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    store = tmp_path / "store"
    ingest([log, october], secrets, store)
    return log, october, secrets, store


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_month_from_a_store_with_history_equals_the_raw_captures(tmp_path):
    """November from a store that also holds September and October: the same findings as from
    the raw captures; the retry chain that began in October keeps its attempt number; the
    unreadable line of an October file stays in October."""
    from audit.findings import run_controls

    log, october, secrets, store = _store_with_history(tmp_path)
    start, end = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")

    got = load_analysis_inputs(store, start=start, end=end)
    assert list(got.deliveries.columns) == list(DELIVERY_COLUMNS)
    assert len(got.deliveries) < len(load_deliveries(store, columns=["verdict"]))
    a_store = run_analyses(got.deliveries, as_of=end, first_receipts=got.first_receipts)
    raw = audit_signatures([log, october], secrets)
    a_raw = run_analyses(raw.deliveries, as_of=end)
    for name in ("incidents", "status_intervals", "takedown_km", "takedown_summary"):
        pd.testing.assert_frame_equal(a_store.tables()[name], a_raw.tables()[name], obj=name)
    attempt = a_store.deliveries.set_index("event_id").loc["evt_r", "attempt_no"]
    assert attempt.tolist() == [1, 2]
    f_store = run_controls(a_store, period_start=start, period_end=end)
    f_raw = run_controls(a_raw, period_start=start, period_end=end)
    assert (f_raw["status"] == "fail").any()
    pd.testing.assert_frame_equal(f_store, f_raw)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("share", [None, 0.9])
def test_the_takedown_folded_beside_the_deliveries_read_is_the_same_analysis(
    tmp_path, monkeypatch, share
):
    """``read_store(..., clock_start=...)`` folds the first receipts in another process (what
    ``audit report --store`` and ``analyze(store=...)`` do; the store side only reads): every
    table and finding is that of the fold in the caller. When the read needs over 2/3 of the
    memory available, the first receipts are read in the caller, to be folded there."""
    import audit.ingest.query as query
    from audit.findings import run_controls
    from audit.ingest.load import default_workers

    *_, store = _store_with_history(tmp_path)
    start, end = NOVEMBER
    if share is not None:
        monkeypatch.setattr(query, "check_memory", lambda *a, **k: share)
    aside = read_store(store, start=start, end=end, clock_start="burn")
    if share is None and default_workers() > 1:
        assert aside.first_receipts is None and aside.takedown is not None
    if share is not None:
        assert aside.first_receipts is not None and aside.takedown is None
    a_aside = run_analyses(
        aside.deliveries,
        as_of=end,
        clock_start="burn",
        first_receipts=aside.first_receipts,
        takedown=aside.takedown,
    )
    here = load_analysis_inputs(store, start=start, end=end)
    a_here = run_analyses(
        here.deliveries, as_of=end, clock_start="burn", first_receipts=here.first_receipts
    )
    tables = a_here.tables()
    assert len(tables["incidents"]) and len(tables["status_intervals"])
    for name, table in a_aside.tables().items():
        pd.testing.assert_frame_equal(table, tables[name], obj=name)
    pd.testing.assert_frame_equal(
        run_controls(a_aside, period_start=start, period_end=end),
        run_controls(a_here, period_start=start, period_end=end),
    )


@pytest.mark.parametrize("history", [False, True])
def test_the_fast_read_gives_the_frugal_read_s_rows(tmp_path, history):
    """``frugal=False`` (DuckDB's batches taken as they come) gives the same frame, in the same
    order, as the read that copies every column to free it on its own."""
    *_, store = _store_with_history(tmp_path)
    start, end = NOVEMBER
    kw = {"history_from": start - pd.Timedelta(days=92)} if history else {}
    for window in ({}, {"start": start - pd.Timedelta(days=1), "end": end, **kw}):
        frugal = load_deliveries(store, columns=ANALYSIS_COLUMNS, **window)
        fast = load_deliveries(store, columns=ANALYSIS_COLUMNS, frugal=False, **window)
        assert len(fast) > 1
        pd.testing.assert_frame_equal(fast, frugal)


@pytest.mark.parametrize(("share", "frugal"), [(None, True), (0.5, True), (0.3, False)])
def test_the_deliveries_are_read_the_fast_way_when_memory_is_plentiful(
    tmp_path, monkeypatch, share, frugal
):
    """Read the fast way (rows held twice at once) only when the analysis needs at most a third
    of the memory available; frugally when it needs more, or the memory is unknown."""
    import audit.ingest.query as query

    *_, store = _store_with_history(tmp_path)
    start, end = NOVEMBER
    seen = []
    real = query.load_deliveries
    monkeypatch.setattr(query, "check_memory", lambda *a, **k: share)
    monkeypatch.setattr(
        query, "load_deliveries", lambda *a, **k: seen.append(k["frugal"]) or real(*a, **k)
    )
    got = load_analysis_inputs(store, start=start, end=end)
    assert seen == [frugal] and len(got.deliveries)


def _findings(tmp_path, records: list[object], start, end, as_of=None):
    """Findings of ``[start, end)`` from the store and from the raw captures, as of ``as_of``."""
    from audit.findings import run_controls

    log = write_jsonl(tmp_path / "log.jsonl", records)
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    store = tmp_path / "store"
    ingest([log], secrets, store)
    as_of = end if as_of is None else as_of
    got = load_analysis_inputs(store, start=start, end=end, as_of=as_of)
    a_store = run_analyses(got.deliveries, as_of=as_of, first_receipts=got.first_receipts)
    a_raw = run_analyses(audit_signatures([log], secrets).deliveries, as_of=as_of)
    return (
        run_controls(a_store, period_start=start, period_end=end),
        run_controls(a_raw, period_start=start, period_end=end),
    )


NOVEMBER = pd.Timestamp("2026-11-01", tz="UTC"), pd.Timestamp("2026-12-01", tz="UTC")


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_event_received_again_days_later_keeps_its_first_receipt(tmp_path):
    """Found in review: received on 30 October and again 37 h later, in November. Its attempts
    and its first receipt are those of the raw captures (DLV-02 to DLV-06 judge it there)."""
    t = datetime(2026, 10, 30, 12, tzinfo=UTC)
    text = envelope("evt_a", "incident.created", t, "inc_a", status="pending_review")
    n = datetime(2026, 11, 5, tzinfo=UTC)
    other = envelope("evt_b", "incident.created", n, "inc_b", status="pending_review")
    ok = {"response_status": 200, "response_ms": 40}
    records = [
        {**record(text, t), **ok},
        {**record(text, t + timedelta(hours=37)), **ok},
        {**record(other, n), **ok},
    ]
    f_store, f_raw = _findings(tmp_path, records, *NOVEMBER)
    pd.testing.assert_frame_equal(f_store, f_raw)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_an_unreadable_line_of_a_file_around_a_silent_month_counts_in_it(tmp_path):
    """Found in review: a file with records on 1 October and 15 December (none in November) and
    an unreadable line; November as of 20 December places the line as the raw captures do."""
    oct1, dec15 = datetime(2026, 10, 1, tzinfo=UTC), datetime(2026, 12, 15, tzinfo=UTC)
    records = [
        record(envelope("e1", "incident.created", oct1, "i1", status="closed"), oct1),
        "this line is not JSON",
        record(envelope("e2", "incident.created", dec15, "i2", status="closed"), dec15),
    ]
    as_of = pd.Timestamp("2026-12-20", tz="UTC")
    f_store, f_raw = _findings(tmp_path, records, *NOVEMBER, as_of=as_of)
    assert "1 unreadable line" in f_raw.set_index("check_id").loc["SIG-01", "reason"]
    pd.testing.assert_frame_equal(f_store, f_raw)


def test_two_files_of_one_name_from_two_folders_fold_as_every_delivery(
    tmp_path, monkeypatch, duckdb_version
):
    """Found in review: ``capture.jsonl`` ingested from two folders shares (source, line)."""
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    store = tmp_path / "store"
    t = datetime(2026, 10, 3, tzinfo=UTC)
    for k, folder in enumerate(("oct", "nov")):
        (tmp_path / folder).mkdir()
        text = envelope(f"evt_{k}", "incident.created", t + timedelta(days=k), f"inc_{k}")
        recs = [record(text, t + timedelta(days=k, minutes=1)), record(text, t + timedelta(days=k))]
        write_jsonl(tmp_path / folder / "capture.jsonl", recs if k == 0 else recs[::-1])
        monkeypatch.chdir(tmp_path / folder)
        ingest(["capture.jsonl"], secrets, store)
    as_of = pd.Timestamp("2026-12-01", tz="UTC")
    want, _ = incidents_and_intervals(load_deliveries(store, columns=ANALYSIS_COLUMNS), as_of=as_of)
    got, _ = incidents_and_intervals(load_first_receipts(store), as_of=as_of)
    assert len(got) == 2
    pd.testing.assert_frame_equal(got, want)


def test_first_receipts_take_times_as_text_or_timestamps(tmp_path):
    day = T0 + timedelta(days=3)
    _, _, store = _store(tmp_path, [record(envelope("e", "incident.created", day, "i"), day)])
    assert len(load_first_receipts(store, start="2026-09-01T00:00:00Z").rows) == 1
    with pytest.raises(ParameterError):
        load_first_receipts(store, start=pd.Timestamp("2026-09-01"), end=pd.Timestamp("2026-12-01"))


def test_records_received_at_one_instant_keep_one_order_however_the_files_are_named(tmp_path):
    """Found in review: with files named out of name order, a copy of an event received at the
    same instant as another (a receiver that records whole seconds) came first from the raw
    captures and second from the store, so the two folded different bodies."""
    t = datetime(2026, 10, 5, tzinfo=UTC)
    created = envelope("evt_1", "incident.created", t, "inc_1", status="pending_review")
    closed = envelope("evt_1", "incident.status_changed", t, "inc_1", status="closed")
    early = t - timedelta(minutes=1)
    later = envelope("evt_2", "incident.status_changed", early, "inc_1", status="takedown_success")
    at = t + timedelta(seconds=5)
    write_jsonl(tmp_path / "b.jsonl", [record(closed, at), record(later, at)])
    write_jsonl(tmp_path / "a.jsonl", [record(created, at), record(later, at, "wh_2")])
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    as_of = pd.Timestamp("2026-11-01", tz="UTC")
    named = [tmp_path / "b.jsonl", tmp_path / "a.jsonl"]
    ingest(named, secrets, tmp_path / "store")
    runs = [
        analyze(named, secrets, as_of=as_of),
        analyze(named[::-1], secrets, as_of=as_of),
        analyze([], None, store=tmp_path / "store", as_of=as_of),
    ]
    # The first receipt of evt_1, by real path then line, is a.jsonl's: pending review, where
    # b.jsonl's would close the incident.
    assert runs[0].tables()["incidents"]["status"].tolist() == ["pending_review"]
    assert runs[0].tables()["events"]["event"].tolist()[:1] == ["incident.created"]
    for other in runs[1:]:
        for name, table in runs[0].tables().items():
            pd.testing.assert_frame_equal(
                other.tables()[name].reset_index(drop=True), table.reset_index(drop=True)
            )


def test_receipts_under_a_microsecond_apart_tie_in_the_store_and_the_raw_captures(tmp_path):
    """Two copies of an event (other bodies) received under a microsecond apart (Unix times
    one float step apart, about 240 ns), the later one listed first. Times are kept to the
    microsecond (the store's Parquet and the frames read from raw captures alike), so both see
    a tie, which the line decides: the first receipt is the line listed first, from either."""
    t = datetime(2026, 10, 5, tzinfo=UTC)
    created = envelope("evt_1", "incident.created", t, "inc_1", status="pending_review")
    closed = envelope("evt_1", "incident.created", t, "inc_1", status="closed")
    at = t.timestamp() + 5.000001
    late, early = record(closed, t), record(created, t)
    late["received_at"], early["received_at"] = math.nextafter(at, math.inf), at
    write_jsonl(tmp_path / "a.jsonl", [late, early])
    secrets = write_secrets(tmp_path / "s.json", {s: [{"secret": v}] for s, v in SECRETS.items()})
    ingest([tmp_path / "a.jsonl"], secrets, tmp_path / "store")
    first = load_first_receipts(tmp_path / "store")
    assert first.counts["conflicting_bodies"] == 1
    every = load_deliveries(tmp_path / "store", columns=ANALYSIS_COLUMNS)
    ns = every["received_at"].astype("int64").tolist()
    assert ns[0] == ns[1] == 1791158405000001000  # 2026-10-05T00:00:05.000001Z, by hand
    raw = audit_signatures([tmp_path / "a.jsonl"], secrets).deliveries
    assert raw["received_at"].astype("int64").tolist() == ns
    as_of = pd.Timestamp("2026-11-01", tz="UTC")
    got, _ = incidents_and_intervals(first, as_of=as_of)
    want, _ = incidents_and_intervals(raw, as_of=as_of)
    assert got["status"].tolist() == want["status"].tolist() == ["closed"]  # the line first
