"""Questions pushed down to DuckDB (``audit.analysis.questions``) against known answers: plain
pandas over the stored Parquet of a simulated period, and the in-memory incident fold
(``takedown_analysis`` of the first receipts, as ``audit analyze --store`` runs it)."""

from __future__ import annotations

import json
import shutil
import warnings
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from audit.analysis.analyze import takedown_analysis
from audit.analysis.questions import (
    COUNT_COLUMNS,
    counts_by_period,
    latency_by_period,
    takedown_by_class,
    takedown_times,
)
from audit.analysis.takedown import takedown_summary
from audit.demo.simulate import simulate
from audit.errors import InputError, ParameterError
from audit.ingest.query import load_first_receipts
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from tests.builders import capture, write_jsonl, write_secrets

UTC_NS = "datetime64[ns, UTC]"


@pytest.fixture(scope="module")
def week(tmp_path_factory) -> Path:
    """A simulated week across two months (Sep 28 - Oct 4), ingested into a store."""
    tmp = tmp_path_factory.mktemp("week")
    demo = simulate(tmp / "demo", start=date(2026, 9, 28), days=7, incidents=30)
    ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    return tmp / "store"


@pytest.fixture(scope="module")
def month(tmp_path_factory) -> Path:
    """A simulated month (October 2026, 150 incidents), ingested into a store."""
    tmp = tmp_path_factory.mktemp("month")
    demo = simulate(tmp / "demo", days=31, incidents=150)
    ingest(demo.captures, demo.secrets, tmp / "store", workers=1)
    return tmp / "store"


def stored(store: Path) -> pd.DataFrame:
    """Every stored row, read with pandas alone from the parts the manifest lists."""
    manifest = json.loads((store / "manifest.json").read_text())
    names = [p["name"] for f in manifest["files"] for p in f["parts"]]
    frames = [pd.read_parquet(store / "deliveries" / n) for n in names]
    d = pd.concat(frames, ignore_index=True)
    d["received_at"] = pd.to_datetime(d["received_at"], utc=True)
    return d


def plain_counts(d: pd.DataFrame, freq: str) -> pd.DataFrame:
    """The counts of :func:`counts_by_period`, by pandas (freq "D", "W-SUN" or "M")."""
    d = d[d["received_at"].notna()].copy()
    naive = d["received_at"].dt.tz_convert("UTC").dt.tz_localize(None)
    d["period"] = naive.dt.to_period(freq).dt.start_time.dt.tz_localize("UTC")
    valid = d["verdict"] == "valid"
    attempt = valid & d["event_id"].notna()
    answered = attempt & d["response_status"].notna()
    ok = d["response_status"].between(200, 299) & ~(d["response_ms"] > 5000).fillna(False)
    d = d.assign(
        received=1,
        valid=valid.astype(int),
        not_valid=(~valid).astype(int),
        attempts=attempt.astype(int),
        answered=answered.astype(int),
        failed=(answered & ~ok.fillna(False)).astype(int),
        subscription_id=d["subscription_id"].fillna("(missing)"),
    )
    cols = ["received", "valid", "not_valid", "attempts", "answered", "failed"]
    out = d.groupby(["period", "subscription_id"])[cols].sum().reset_index()
    return out.sort_values(["period", "subscription_id"], ignore_index=True)


@pytest.mark.parametrize(("period", "freq"), [("day", "D"), ("week", "W-SUN"), ("month", "M")])
def test_counts_by_period_equal_plain_pandas_over_the_parquet(week, period, freq):
    got = counts_by_period(week, period=period)
    want = plain_counts(stored(week), freq)
    assert list(got.columns) == list(COUNT_COLUMNS)
    assert got["period"].dtype == UTC_NS
    cols = ["period", "subscription_id", "received", "valid", "not_valid", "attempts"]
    cols += ["answered", "failed"]
    pd.testing.assert_frame_equal(got[cols], want[cols], check_dtype=False)
    rate = (want["failed"] / want["answered"]).where(want["answered"] > 0)
    np.testing.assert_allclose(got["failure_rate"], rate)
    assert got["failed"].sum() > 0  # the simulated week plants failures


def test_weeks_start_on_monday_and_months_split_where_they_do(week):
    weeks = counts_by_period(week, period="week", by=None)
    assert (weeks["period"].dt.day_of_week == 0).all()
    months = counts_by_period(week, period="month", by=None)
    assert [f"{p:%Y-%m}" for p in months["period"]] == ["2026-09", "2026-10"]
    assert (months["subscription_id"] == "all").all()
    d = stored(week)
    assert months["received"].sum() == d["received_at"].notna().sum()


def test_a_window_reads_only_its_months_and_its_rows(week):
    start, end = "2026-10-01T00:00:00Z", "2026-10-02T12:00:00Z"
    got = counts_by_period(week, period="day", by=None, start=start, end=end)
    d = stored(week)
    inside = d[(d["received_at"] >= pd.Timestamp(start)) & (d["received_at"] <= pd.Timestamp(end))]
    assert got["received"].sum() == len(inside)
    assert [f"{p:%m-%d}" for p in got["period"]] == ["10-01", "10-02"]


def test_a_damaged_part_is_refused_and_other_months_still_answer(week, tmp_path):
    copy = tmp_path / "store"
    shutil.copytree(week, copy)
    part = sorted((copy / "deliveries" / "month=2026-09").glob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:-100])
    october = counts_by_period(copy, start="2026-10-01T00:00:00Z", by=None)
    assert october["received"].sum() > 0
    with pytest.raises(InputError, match="damaged"):
        counts_by_period(copy, by=None)
    with pytest.raises(InputError, match="damaged"):
        takedown_times(copy)


def test_latency_percentiles_equal_pandas_quantiles(week):
    got = latency_by_period(week, period="day", quantiles=(0.5, 0.95, 0.99))
    d = stored(week)
    d = d[(d["verdict"] == "valid") & d["response_ms"].notna()]
    d = d.assign(day=d["received_at"].dt.floor("D"))
    g = d.groupby(["day", "subscription_id"])["response_ms"]
    want = pd.DataFrame({"n": g.size(), "max_ms": g.max()})
    for q in (0.5, 0.95, 0.99):
        want[f"p{q * 100:g}_ms"] = g.quantile(q)
    want = want.reset_index()
    names = ["p50_ms", "p95_ms", "p99_ms", "max_ms"]
    assert list(got.columns) == ["period", "subscription_id", "n", *names]
    assert got["n"].tolist() == want["n"].tolist()
    for c in ("p50_ms", "p95_ms", "p99_ms", "max_ms"):
        np.testing.assert_allclose(got[c], want[c], rtol=1e-9)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"period": "year"},
        {"by": "event"},
        {"start": "2026-10-02T00:00:00Z", "end": "2026-10-01T00:00:00Z"},
        {"start": "2026-10-01"},  # no zone
    ],
)
def test_a_bad_argument_is_one_line(week, kwargs):
    with pytest.raises(ParameterError) as e:
        counts_by_period(week, **kwargs)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("quantiles", [(), (1.5,), (0.5, 0.5), ("0.5",)])
def test_bad_quantiles_are_refused(week, quantiles):
    with pytest.raises(ParameterError, match="quantiles"):
        latency_by_period(week, quantiles=quantiles)


def in_memory(store: Path, *, as_of: pd.Timestamp, start: pd.Timestamp | None = None):
    """The takedown analysis as ``audit analyze --store`` and the report run it."""
    first = load_first_receipts(store, start=start, end=as_of)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return takedown_analysis(first, as_of=as_of)


def test_takedown_times_equal_the_in_memory_fold_on_a_simulated_month(month):
    as_of = pd.Timestamp("2026-11-01", tz="UTC")
    got = takedown_times(month, as_of=as_of)
    want = in_memory(month, as_of=as_of).durations.sort_values("incident_id", ignore_index=True)
    assert len(got) > 100
    pd.testing.assert_frame_equal(got, want)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        by_class = takedown_by_class(month, as_of=as_of)
        pd.testing.assert_frame_equal(by_class, takedown_summary(want, "incident_class"))


def test_takedown_over_a_period_is_the_reports_fold(month):
    start, end = pd.Timestamp("2026-10-15", tz="UTC"), pd.Timestamp("2026-10-22", tz="UTC")
    got = takedown_times(month, start=start, end=end, lookback=pd.Timedelta(days=7))
    want = in_memory(month, as_of=end, start=start - pd.Timedelta(days=7)).durations
    pd.testing.assert_frame_equal(got, want.sort_values("incident_id", ignore_index=True))
    # the clock from the burn start
    burn = takedown_times(month, as_of=end, clock_start="burn")
    first = load_first_receipts(month, start=None, end=end)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = takedown_analysis(first, as_of=end, clock_start="burn").durations
    pd.testing.assert_frame_equal(burn, want.sort_values("incident_id", ignore_index=True))


# --------------------------------------------------------------------------------------------
# Copies that differ, and events of one time: the exact fold settles them
# --------------------------------------------------------------------------------------------

SECRETS = {"wh_1": "whsec_questions_1"}
T0 = datetime(2026, 10, 1, tzinfo=UTC)


def iso(minutes: float) -> str:
    return (T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def body(eid: str, event: str, minutes: float, incident: str, **data: object) -> str:
    env = {"id": eid, "event": event, "timestamp": iso(minutes)}
    env["data"] = {"incidentId": incident, "incidentClass": "phishing", **data}
    return json.dumps(env, separators=(",", ":"))


def signed(text: str, received_min: float) -> dict:
    stamp = int((T0 + timedelta(minutes=received_min)).timestamp()) - 1
    sig = sign(SECRETS["wh_1"], stamp, text.encode())
    return capture(text, received_at=iso(received_min), signature=sig, timestamp=str(stamp))


def store_of(tmp_path: Path, records: list[dict]) -> Path:
    log = write_jsonl(tmp_path / "log.jsonl", records)
    secrets = write_secrets(
        tmp_path / "secrets.json", {k: [{"secret": v}] for k, v in SECRETS.items()}
    )
    ingest([log], secrets, tmp_path / "store", workers=1)
    return tmp_path / "store"


def test_copies_that_differ_and_events_of_one_time_follow_the_first_receipt(tmp_path):
    created = "incident.created"
    changed = "incident.status_changed"
    records = [
        # inc_a: the event c1 sent twice, differently: the first receipt (taken down at +60)
        # counts, the later copy (stamped +90, closed, taken down at +90) does not
        signed(body("c0", created, 0, "inc_a", status="new"), 1),
        signed(
            body("c1", changed, 60, "inc_a", status="takedown_success", takedownTimestamp=iso(60)),
            61,
        ),
        signed(
            body("c1", changed, 90, "inc_a", status="closed", takedownTimestamp=iso(90)),
            62,
        ),
        # inc_b: two events of one time with different classes: the later receipt wins
        signed(body("b0", created, 0, "inc_b", status="new", incidentClass="scam"), 2),
        signed(body("b1", changed, 5, "inc_b", status="closed", incidentClass="malware"), 7),
        signed(body("b2", changed, 5, "inc_b", status="closed", incidentClass="phishing"), 6),
        # inc_c: a takedown time that does not parse: the earlier one counts
        signed(body("d0", created, 0, "inc_c", takedownTimestamp=iso(40)), 3),
        signed(body("d1", changed, 50, "inc_c", takedownTimestamp="soon"), 51),
    ]
    store = store_of(tmp_path, records)
    as_of = pd.Timestamp(T0 + timedelta(days=1))
    got = takedown_times(store, as_of=as_of).set_index("incident_id")
    want = in_memory(store, as_of=as_of).durations.sort_values("incident_id", ignore_index=True)
    pd.testing.assert_frame_equal(got.reset_index(), want)
    assert got.loc["inc_a", "duration_s"] == 3600.0
    assert got.loc["inc_b", "incident_class"] == "malware"
    assert got.loc["inc_c", "duration_s"] == 2400.0


def test_stored_times_in_other_iso_forms_are_parsed_as_in_memory(tmp_path):
    """Times the rule does not parse itself (an offset, a date alone, 7 decimals) are parsed as
    the in-memory fold parses them: by hand, 01:40+01:00 is 00:40 UTC (40 minutes after the
    creation at 00:00), the date alone is midnight (taken down at once), and 100 ns past 00:30
    is kept: 1800.0000001 s."""
    created = "incident.created"
    changed = "incident.status_changed"
    records = [
        signed(body("e0", created, 0, "inc_e", status="new"), 1),
        signed(body("e1", changed, 50, "inc_e", takedownTimestamp="2026-10-01T01:40:00+01:00"), 51),
        signed(body("f0", created, 0, "inc_f", takedownTimestamp="2026-10-01"), 2),
        signed(body("g0", created, 0, "inc_g", takedownTimestamp=iso(30)[:-1] + ".0000001Z"), 3),
    ]
    store = store_of(tmp_path, records)
    as_of = pd.Timestamp(T0 + timedelta(days=1))
    got = takedown_times(store, as_of=as_of)
    want = in_memory(store, as_of=as_of).durations.sort_values("incident_id", ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
    assert got.set_index("incident_id")["duration_s"].to_dict() == {
        "inc_e": 2400.0,
        "inc_f": 0.0,
        "inc_g": 1800.0000001,
    }


def test_an_empty_window_gives_empty_tables(week):
    far = {"start": "2030-01-01T00:00:00Z", "end": "2030-02-01T00:00:00Z"}
    assert counts_by_period(week, **far).empty
    assert latency_by_period(week, **far).empty
    assert list(counts_by_period(week, **far).columns) == list(COUNT_COLUMNS)
