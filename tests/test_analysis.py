"""`audit analyze` on the demo data: every table written, the planted faults visible in them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from audit.cli import main
from audit.demo import simulate

TABLES = (
    "deliveries",
    "events",
    "incidents",
    "status_intervals",
    "takedown_km",
    "takedown_summary",
    "subscriptions",
)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo")
    sim = simulate(root / "data", seed=11, days=10, incidents=60)
    out = root / "tables"
    truth = json.loads(sim.truth.read_text())
    args = ["analyze", str(root / "data" / "captures"), "--secrets", str(sim.secrets)]
    args += ["--subscriptions", str(root / "data" / "snapshots"), "--out", str(out)]
    args += ["--format", "csv", "--as-of", truth["period"]["end"]]
    return args, out, truth


def test_analyze_writes_every_table_and_a_summary(demo, capsys):
    args, out, _ = demo
    assert main(args) == 0
    printed = capsys.readouterr().out
    for name in TABLES:
        assert (out / f"{name}.csv").is_file(), name
        assert f"wrote {out / name}.csv" in printed
    assert "time to takedown from creation: median" in printed


def test_analyze_writes_parquet_unless_csv_is_asked_for(demo, tmp_path, capsys):
    args, _, _ = demo
    assert main(args) == 0
    out = tmp_path / "pq"
    args = [a if a != "csv" else "parquet" for a in args]
    args[args.index("--out") + 1] = str(out)
    assert main(args) == 0
    csv = pd.read_csv(demo[1] / "events.csv")
    pq = pd.read_parquet(out / "events.parquet")
    assert len(pq) == len(csv) > 0
    assert pq["first_received_at"].dtype == "datetime64[ns, UTC]"
    # Parquet for every table; CSV besides only for the small tables (one row per incident,
    # takedown group or subscription), as the report's run folder does (audit.tables.CSV_TABLES).
    assert sorted(p.stem for p in out.glob("*.csv")) == [
        "incidents",
        "subscriptions",
        "takedown_summary",
    ]
    parquet = "deliveries events incidents status_intervals takedown_km takedown_summary"
    assert sorted(p.stem for p in out.glob("*.parquet")) == sorted(
        [*parquet.split(), "subscriptions"]
    )
    assert len(pd.read_csv(out / "incidents.csv")) == len(
        pd.read_parquet(out / "incidents.parquet")
    )


def _tables(out):
    read = {name: pd.read_csv(out / f"{name}.csv") for name in TABLES}
    return read


def test_planted_faults_are_visible(demo, capsys):
    args, out, truth = demo
    main(args)
    t = _tables(out)
    events = t["events"].set_index(["subscription_id", "event_id"])
    for p in truth["receiver_outage"]["exhausted"]:
        assert events.loc[(p["subscription_id"], p["event_id"]), "outcome"] == "exhausted"
    d = t["deliveries"].set_index("delivery_id")
    refused = d.loc[truth["stale_secret"]["answered_401_delivery_ids"]]
    assert (refused["verdict"] == "valid").all() and (refused["response_status"] == 401).all()
    slow = d.loc[[s["delivery_id"] for s in truth["slow_acks"]]]
    assert (slow["response_ms"] > 5000).all() and (slow["success"] == False).all()  # noqa: E712
    attacks = {a["received_at"] for a in truth["attacks"]}
    rows = t["deliveries"][t["deliveries"]["received_at"].isin(attacks)]
    assert len(rows) == len(truth["attacks"]) and (rows["verdict"] != "valid").all()
    incidents = t["incidents"].set_index("incident_id")
    for w in truth["waiting_on_client"]:
        if w["over_24h"]:
            assert incidents.loc[w["incident_id"], "awaiting_client_s"] > 86_400
    subs = t["subscriptions"]
    assert (subs["last_delivery_status"] == "failed").any()


def test_bad_as_of_is_one_line(demo, capsys):
    args, _, _ = demo
    assert main([*args[:-1], "2026-11-01T00:00:00"]) == 3
    err = capsys.readouterr().err
    assert "no UTC offset" in err and len(err.strip().splitlines()) == 1


def test_analyze_uses_only_what_was_received_by_as_of(tmp_path):
    from audit.analysis.analyze import analyze

    sim = simulate(tmp_path / "d", seed=5, days=8, incidents=30)
    as_of = pd.Timestamp("2026-10-03T00:00:00Z")
    a = analyze(sim.captures, sim.secrets, as_of=as_of)
    assert len(a.events) and (a.events["first_received_at"] <= as_of).all()
    assert (a.deliveries["received_at"].dropna() <= as_of).all()


def test_the_summary_reads_the_tables_and_refits_nothing(demo, monkeypatch):
    from audit.analysis import survival
    from audit.analysis.analyze import analyze
    from audit.cli.analysis import summary_text

    args, _, truth = demo
    a = analyze([args[1]], args[3], as_of=truth["period"]["end"])

    def refit(*_a, **_k):
        raise AssertionError("the summary refitted Kaplan-Meier")

    monkeypatch.setattr(survival, "kaplan_meier", refit)
    monkeypatch.setattr(survival, "km_quantile", refit)
    s = a.summary()
    overall = a.takedown_summary.query("by == 'all'").iloc[0]
    assert s["takedown_median"].time == pytest.approx(overall["median_h"])
    assert s["records"] == len(a.deliveries) and s["incidents"] == len(a.incidents)
    real = a.events[~a.events["is_test"]]
    assert s["event_outcomes"] == real["outcome"].value_counts().to_dict()
    text = summary_text(a)
    assert f"median {overall['median_h']:.4g} h" in text
