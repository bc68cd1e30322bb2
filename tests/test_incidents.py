"""Tests for audit.analysis.incidents: folding valid events into incidents, status intervals.

Deliveries are written as capture JSONL, signed with
:func:`audit.ingest.signatures.sign`, loaded and verified the way the CLI does
(``load_captures`` then ``verify_frame``), so only what really
verifies can reach the fold. Expected values are worked out by hand from the event times in
the comments (T0 = 2026-10-01 00:00 UTC; "+m" means m minutes after T0). The demo-data test
checks the fold against the simulator's own record of the final states (``truth.json``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.analysis.incidents import (
    COUNT_KEYS,
    EVENT_COLUMNS,
    INCIDENT_TABLE_COLUMNS,
    INTERVAL_COLUMNS,
    incident_events,
    incidents_and_intervals,
    incidents_table,
    status_intervals,
)
from audit.analysis.takedown import takedown_durations
from audit.demo import simulate
from audit.errors import ParameterError, SchemaError
from audit.ingest.load import load_captures
from audit.ingest.secrets import SecretStore
from audit.ingest.signatures import sign
from audit.ingest.verification import audit_signatures, verify_frame
from audit.spec import CLIENT_WAIT_STATUSES
from tests.builders import capture, write_jsonl

# Test-only signing secrets (never real ones).
SECRETS = {"wh_1": "whsec_incidents_test_1", "wh_2": "whsec_incidents_test_2"}
T0 = datetime(2026, 10, 1, tzinfo=UTC)
CREATED, CHANGED = "incident.created", "incident.status_changed"
HISTORY, TAKEDOWN, ACTION = (
    "incident.history_created",
    "incident.takedown_updated",
    "incident.action_required",
)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ts(minutes: float) -> pd.Timestamp:
    return pd.Timestamp(at(minutes))


def iso(when: datetime) -> str:
    return when.isoformat().replace("+00:00", "Z")


def body(eid: str, event: str, minutes: float, incident: str = "inc_1", **data: object) -> str:
    """A delivery body as the service sends it (compact JSON envelope)."""
    env = {"id": eid, "event": event, "timestamp": iso(at(minutes))}
    env["data"] = {"incidentId": incident, **data}
    return json.dumps(env, separators=(",", ":"), ensure_ascii=False)


def signed(text: str, received_min: float, sub: str = "wh_1", *, forged: bool = False) -> dict:
    """A capture record received at +received_min, signed 1 s earlier (or forged)."""
    received = at(received_min)
    stamp = int(received.timestamp()) - 1
    sig = "sha256=" + "ab" * 32 if forged else sign(SECRETS[sub], stamp, text.encode())
    return capture(
        text,
        received_at=iso(received),
        signature=sig,
        timestamp=str(stamp),
        subscription_id=sub,
    )


def verified(tmp_path: Path, records: list[dict], name: str = "log.jsonl") -> pd.DataFrame:
    path = write_jsonl(tmp_path / name, records)
    store = SecretStore.from_values({sub: [(s, None)] for sub, s in SECRETS.items()})
    return verify_frame(load_captures([path], workers=1).deliveries, store)


def one(table: pd.DataFrame, incident: str = "inc_1") -> pd.Series:
    rows = table[table["incident_id"] == incident]
    assert len(rows) == 1
    return rows.iloc[0]


# --------------------------------------------------------------------------------------------
# Scenario A: one incident's life, used by several tests
# --------------------------------------------------------------------------------------------
#   e1 +0    created          pending_review, data.timestamp = -5, source, class, url, domain
#   e2 +60   status_changed   case_building, safeDomain (only here)
#   e3 +120  status_changed   approval_required, waitForClient true
#   e4 +125  action_required  approval_required, waitForClient true
#   e5 +180  status_changed   takedown_in_progress, burnStartedTimestamp +180
#   e6 +300  status_changed   takedown_success, takedownTimestamp +299, incidentType (only here)
# as_of = +1440 (one day).
AS_OF = ts(1440)
BASE = {
    "clientId": "cl_1",
    "source": "CLIENT_REPORTED",
    "incidentClass": "phishing",
    "url": "https://démobank-login.example/verify",
    "domain": "démobank-login.example",
    "timestamp": iso(at(-5)),
}
SCENARIO_A = [
    body("e1", CREATED, 0, **BASE, status="pending_review"),
    body("e2", CHANGED, 60, **BASE, status="case_building", safeDomain="demobank.example"),
    body("e3", CHANGED, 120, **BASE, status="approval_required", waitForClient=True),
    body("e4", ACTION, 125, **BASE, status="approval_required", waitForClient=True),
    body(
        "e5",
        CHANGED,
        180,
        **BASE,
        status="takedown_in_progress",
        burnStartedTimestamp=iso(at(180)),
    ),
    body(
        "e6",
        CHANGED,
        300,
        **BASE,
        status="takedown_success",
        takedownTimestamp=iso(at(299)),
        incidentType="website",
    ),
]


def in_order(bodies: list[str], first_min: float = 310) -> list[dict]:
    return [signed(b, first_min + i / 60) for i, b in enumerate(bodies)]


@pytest.fixture
def scenario_a(tmp_path) -> pd.DataFrame:
    return verified(tmp_path, in_order(SCENARIO_A), "a.jsonl")


def test_scenario_a_fold_by_hand(scenario_a):
    inc = incidents_table(scenario_a, as_of=AS_OF)
    assert list(inc.columns) == list(INCIDENT_TABLE_COLUMNS)
    row = one(inc)
    assert row["status"] == "takedown_success"
    assert row["client_id"] == "cl_1"
    assert row["source"] == "CLIENT_REPORTED"
    assert row["incident_class"] == "phishing"
    assert row["url"] == "https://démobank-login.example/verify"
    assert row["wait_for_client"] == "true"  # JSON true, as the string "true"
    assert row["created_at"] == ts(-5)  # data.timestamp
    assert not row["created_at_inferred"]
    assert row["created_at_source"] == "data.timestamp"
    assert row["burn_started_at"] == ts(180)
    assert row["takedown_at"] == ts(299)  # data.takedownTimestamp, not the event time +300
    assert pd.isna(row["closed_at"])
    assert row["first_event_at"] == ts(0)
    assert row["last_event_at"] == ts(300)
    assert row["taken_down"]
    assert row["time_to_takedown_s"] == (299 + 5) * 60  # 18240
    # approval_required from +120 to +180 (e4 keeps the status): 60 min.
    assert row["awaiting_client_s"] == 3600.0
    assert row["events"] == 6
    assert row["suspected_missed_events"] == 0
    assert row["missed_statuses"] == ""


def test_scenario_a_intervals_by_hand(scenario_a):
    iv = status_intervals(scenario_a, as_of=AS_OF)
    assert list(iv.columns) == list(INTERVAL_COLUMNS)
    assert iv["status"].tolist() == [
        "pending_review",
        "case_building",
        "approval_required",
        "takedown_in_progress",
        "takedown_success",
    ]
    assert iv["start"].tolist() == [ts(0), ts(60), ts(120), ts(180), ts(300)]
    assert iv["end"].tolist() == [ts(60), ts(120), ts(180), ts(300), AS_OF]
    # 60, 60, 60, 120 minutes, then +300 to +1440 = 1140 minutes, open until as_of.
    assert iv["duration_s"].tolist() == [3600.0, 3600.0, 3600.0, 7200.0, 68400.0]
    assert iv["announced"].tolist() == [False, True, True, True, True]  # created is no change
    assert iv["current"].tolist() == [False, False, False, False, True]


def test_one_fold_gives_both_tables_by_hand(scenario_a):
    inc, iv = incidents_and_intervals(scenario_a, as_of=AS_OF)
    pd.testing.assert_frame_equal(iv, status_intervals(scenario_a, as_of=AS_OF))
    assert iv["duration_s"].tolist() == [3600.0, 3600.0, 3600.0, 7200.0, 68400.0]
    assert one(inc)["awaiting_client_s"] == 3600.0  # approval_required +120 to +180
    assert iv.attrs["counts"] == inc.attrs["counts"]


def test_the_fold_runs_in_a_process_forked_after_this_one_folded(scenario_a):
    """The store's side process folds in a fork of a process whose engine has run: the fork
    makes its own connection and gives the same incident (it hung for ever when it closed the
    connection it inherited, whose threads the fork did not copy). A generous bound stands
    for "for ever": a hang, not a speed, is what it catches."""
    import os
    import time

    want = incidents_table(scenario_a, as_of=AS_OF)
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when it folds the same incident
        same = incidents_table(scenario_a, as_of=AS_OF).equals(want)
        os._exit(0 if same else 1)
    for _ in range(1200):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the fold in the forked process never finished")
    assert os.waitstatus_to_exitcode(status) == 0


def test_one_fold_of_no_valid_event_gives_two_empty_tables(tmp_path):
    forged = [signed(SCENARIO_A[0], 310, forged=True)]
    inc, iv = incidents_and_intervals(verified(tmp_path, forged), as_of=AS_OF)
    assert inc.empty and list(inc.columns) == list(INCIDENT_TABLE_COLUMNS)
    assert iv.empty and list(iv.columns) == list(INTERVAL_COLUMNS)


def test_events_delivered_out_of_order_fold_by_event_time(tmp_path, scenario_a):
    # Received e6, e1, e4, e2, e5, e3: the fold must still follow the event timestamps.
    order = [5, 0, 3, 1, 4, 2]
    shuffled = [signed(SCENARIO_A[j], 310 + i / 60) for i, j in enumerate(order)]
    d = verified(tmp_path, shuffled, "shuffled.jsonl")
    assert d["event_id"].tolist() == ["e6", "e1", "e4", "e2", "e5", "e3"]
    inc = incidents_table(d, as_of=AS_OF)
    assert one(inc)["status"] == "takedown_success"  # e6 arrived first, yet is the latest
    pd.testing.assert_frame_equal(inc, incidents_table(scenario_a, as_of=AS_OF))
    pd.testing.assert_frame_equal(
        status_intervals(d, as_of=AS_OF), status_intervals(scenario_a, as_of=AS_OF)
    )
    ev = incident_events(d, as_of=AS_OF)
    assert ev["event_id"].tolist() == ["e1", "e2", "e3", "e4", "e5", "e6"]


def test_field_present_only_in_a_later_event_and_last_non_missing_value(scenario_a):
    row = one(incidents_table(scenario_a, as_of=AS_OF))
    assert row["incident_type"] == "website"  # only in e6, the last event
    assert row["safe_domain"] == "demobank.example"  # only in e2: later events omit it
    assert row["burn_started_at"] == ts(180)  # only in e5 and kept through e6
    assert pd.isna(row["subject"])  # never sent
    ev = incident_events(scenario_a, as_of=AS_OF)
    assert ev["incident_type"].isna().tolist() == [True] * 5 + [False]


def test_unknown_fields_are_ignored(tmp_path, scenario_a):
    extra = {"brandNewField": {"nested": [1, 2]}, "riskScore": 97, "tags": ["a"]}
    bodies = [
        body("e1", CREATED, 0, **BASE, **extra, status="pending_review"),
        *SCENARIO_A[1:],
    ]
    env = json.loads(bodies[3])
    env["schemaVersion"] = 2  # an unknown envelope field too
    bodies[3] = json.dumps(env, separators=(",", ":"), ensure_ascii=False)
    d = verified(tmp_path, in_order(bodies), "unknown.jsonl")
    assert (d["verdict"] == "valid").all()
    inc = incidents_table(d, as_of=AS_OF)
    assert list(inc.columns) == list(INCIDENT_TABLE_COLUMNS)
    pd.testing.assert_frame_equal(inc, incidents_table(scenario_a, as_of=AS_OF))
    assert inc.attrs["counts"]["invalid_values"] == 0


def test_duplicate_deliveries_of_one_event_count_once(tmp_path, scenario_a):
    # e3 arrives four times: three retries on wh_1 and once on a second subscription wh_2.
    records = in_order(SCENARIO_A)
    records += [signed(SCENARIO_A[2], 320), signed(SCENARIO_A[2], 322)]
    records += [signed(SCENARIO_A[2], 330, "wh_2")]
    d = verified(tmp_path, records, "dups.jsonl")
    assert (d["verdict"] == "valid").all() and len(d) == 9
    inc = incidents_table(d, as_of=AS_OF)
    counts = inc.attrs["counts"]
    assert counts["valid"] == 9
    assert counts["duplicates"] == 3
    assert counts["events"] == 6
    assert counts["conflicting_bodies"] == 0
    pd.testing.assert_frame_equal(inc, incidents_table(scenario_a, as_of=AS_OF))
    assert one(inc)["awaiting_client_s"] == 3600.0  # not 4 x 3600
    iv = status_intervals(d, as_of=AS_OF)
    assert len(iv) == 5
    ev = incident_events(d, as_of=AS_OF)
    e3 = ev[ev["event_id"] == "e3"].iloc[0]
    # First valid receipt: in_order puts e3 at +310 and 2 s.
    assert e3["received_at"] == pd.Timestamp(at(310) + timedelta(seconds=2))
    assert e3["subscription_id"] == "wh_1"


def test_forged_delivery_does_not_change_the_incident(tmp_path, scenario_a):
    records = in_order(SCENARIO_A)
    # A forged "closed" (a new event id, random signature), received after everything else.
    records.append(signed(body("evil_1", CHANGED, 400, status="closed"), 401, forged=True))
    # A tampered copy of e6: same event id and signature, url changed.
    tampered = json.loads(SCENARIO_A[5])
    tampered["data"]["url"] = "https://demobank-refund.example/claim"
    honest = signed(SCENARIO_A[5], 402)
    honest["body"] = json.dumps(tampered, separators=(",", ":"))
    records.append(honest)
    # A validly signed record for wh_1 but signed with wh_2's secret.
    wrong = signed(body("evil_2", CHANGED, 403, status="closed"), 403, "wh_2")
    wrong["subscription_id"] = "wh_1"
    records.append(wrong)
    d = verified(tmp_path, records, "forged.jsonl")
    assert d["verdict"].tolist() == ["valid"] * 6 + ["signature_mismatch"] * 3
    inc = incidents_table(d, as_of=AS_OF)
    pd.testing.assert_frame_equal(inc, incidents_table(scenario_a, as_of=AS_OF))
    row = one(inc)
    assert row["status"] == "takedown_success" and pd.isna(row["closed_at"])
    assert row["url"] == "https://démobank-login.example/verify"
    assert inc.attrs["counts"]["valid"] == 6
    iv = status_intervals(d, as_of=AS_OF)
    assert "closed" not in iv["status"].tolist()


# --------------------------------------------------------------------------------------------
# Suspected missed events
# --------------------------------------------------------------------------------------------
#   +0   created          pending_review         first run: never counted
#   +10  status_changed   case_building          announced
#   +20  history          case_building          same status: nothing
#   +30  history          approval_required      no status_changed in its run -> missed (1)
#   +35  history          (no status)            carries approval_required on
#   +40  action_required  approval_required      same run
#   +50  status_changed   takedown_ready         announced
#   +60  history          takedown_in_progress   ...
#   +61  status_changed   takedown_in_progress   ...announced within the run: not missed
#   +70  history          case_building          back to a status announced at +10, but this
#                                                change was not announced -> missed (2)
JUMPS = [
    body("j1", CREATED, 0, "inc_2", status="pending_review"),
    body("j2", CHANGED, 10, "inc_2", status="case_building"),
    body("j3", HISTORY, 20, "inc_2", status="case_building", historyEntry={"type": "comment"}),
    body("j4", HISTORY, 30, "inc_2", status="approval_required"),
    body("j5", HISTORY, 35, "inc_2", lastHistoryUpdateTimestamp=iso(at(35))),
    body("j6", ACTION, 40, "inc_2", status="approval_required", waitForClient="Approve please"),
    body("j7", CHANGED, 50, "inc_2", status="takedown_ready"),
    body("j8", HISTORY, 60, "inc_2", status="takedown_in_progress"),
    body("j9", CHANGED, 61, "inc_2", status="takedown_in_progress"),
    body("j10", HISTORY, 70, "inc_2", status="case_building"),
]


def test_status_jump_counts_as_suspected_missed_event(tmp_path):
    d = verified(tmp_path, in_order(JUMPS[::-1]), "jumps.jsonl")  # received newest first
    as_of = ts(100)
    row = one(incidents_table(d, as_of=as_of), "inc_2")
    assert row["suspected_missed_events"] == 2
    assert row["missed_statuses"] == "approval_required,case_building"
    assert row["status"] == "case_building"
    assert row["wait_for_client"] == "Approve please"  # a reason string is kept as sent
    assert row["last_history_update_at"] == ts(35)
    # approval_required from +30 to +50.
    assert row["awaiting_client_s"] == 1200.0
    assert row["created_at_source"] == "incident.created" and row["created_at_inferred"]
    assert row["created_at"] == ts(0)
    iv = status_intervals(d, as_of=as_of)
    assert iv["status"].tolist() == [
        "pending_review",
        "case_building",
        "approval_required",
        "takedown_ready",
        "takedown_in_progress",
        "case_building",
    ]
    assert iv["announced"].tolist() == [False, True, False, True, True, False]
    # 10, 20, 20, 10, 10 minutes, then +70 to +100.
    assert iv["duration_s"].tolist() == [600.0, 1200.0, 1200.0, 600.0, 600.0, 1800.0]


def test_first_status_seen_is_never_a_missed_event(tmp_path):
    # The incident predates the captures: its first event seen is a history event.
    bodies = [
        body("k1", HISTORY, 0, "inc_3", status="case_building"),
        body("k2", CHANGED, 30, "inc_3", status="closed"),
    ]
    d = verified(tmp_path, in_order(bodies), "k.jsonl")
    row = one(incidents_table(d, as_of=ts(60)), "inc_3")
    assert row["suspected_missed_events"] == 0
    assert row["created_at"] == ts(0)  # no data.timestamp, no created event: first event
    assert row["created_at_inferred"] and row["created_at_source"] == "first_event"
    assert row["closed_at"] == ts(30)
    assert not row["taken_down"] and np.isnan(row["time_to_takedown_s"])


# --------------------------------------------------------------------------------------------
# Fallbacks, as_of, types
# --------------------------------------------------------------------------------------------


def test_created_at_fallbacks_and_takedown_from_status(tmp_path):
    bodies = [
        # inc_4: no data.timestamp; a history event precedes the created event.
        body("a1", HISTORY, 1, "inc_4", status="pending_review"),
        body("a2", CREATED, 2, "inc_4", status="pending_review"),
        # inc_5: data.timestamp only in a later event; takedown_success without
        # takedownTimestamp; then closed.
        body("b1", CREATED, 0, "inc_5", status="pending_review"),
        body("b2", CHANGED, 30, "inc_5", status="case_building", timestamp=iso(at(-10))),
        body("b3", CHANGED, 90, "inc_5", status="takedown_success"),
        body("b4", CHANGED, 120, "inc_5", status="closed"),
    ]
    d = verified(tmp_path, in_order(bodies), "fallbacks.jsonl")
    inc = incidents_table(d, as_of=ts(180))
    a = one(inc, "inc_4")
    assert a["created_at"] == ts(2)  # the incident.created event, not the first event (+1)
    assert a["created_at_source"] == "incident.created" and a["created_at_inferred"]
    b = one(inc, "inc_5")
    assert b["created_at"] == ts(-10) and not b["created_at_inferred"]
    assert b["takedown_at"] == ts(90)  # time of the status change to takedown_success
    assert b["taken_down"]
    assert b["time_to_takedown_s"] == 100 * 60  # -10 to +90
    assert b["closed_at"] == ts(120)
    assert b["status"] == "closed"
    assert b["awaiting_client_s"] == 0.0  # has statuses, never waited
    # The table feeds takedown_durations as is.
    durations, exclusions, _ = takedown_durations(inc, as_of=ts(180))
    got = durations.set_index("incident_id")
    assert got.loc["inc_5", "duration_s"] == 6000.0 and got.loc["inc_5", "observed"]
    # inc_4 is censored at as_of: +2 to +180.
    assert got.loc["inc_4", "duration_s"] == 178 * 60 and not got.loc["inc_4", "observed"]
    assert sum(exclusions.values()) == 0


def test_awaiting_client_runs_until_as_of_and_later_events_are_ignored(tmp_path):
    bodies = [
        body("w1", CREATED, 0, "inc_6", status="pending_review"),
        body("w2", CHANGED, 30, "inc_6", status="approval_required", waitForClient=True),
        body("w3", CHANGED, 60, "inc_6", status="action_required", waitForClient="Evidence?"),
        body("w4", CHANGED, 200, "inc_6", status="closed"),
    ]
    d = verified(tmp_path, in_order(bodies, 300), "wait.jsonl")
    # as_of +180: w4 is in the future. Waiting from +30, still waiting: 150 minutes.
    early = incidents_table(d, as_of=ts(180))
    row = one(early, "inc_6")
    assert row["awaiting_client_s"] == 150 * 60
    assert row["status"] == "action_required" and pd.isna(row["closed_at"])
    assert row["wait_for_client"] == "Evidence?"
    assert early.attrs["counts"]["after_as_of"] == 1
    assert early.attrs["counts"]["events"] == 3
    iv = status_intervals(d, as_of=ts(180))
    assert iv["end"].iloc[-1] == ts(180) and iv["current"].iloc[-1]
    # as_of +240: closed at +200, so waiting from +30 to +200: 170 minutes.
    late = one(incidents_table(d, as_of=ts(240)), "inc_6")
    assert late["awaiting_client_s"] == 170 * 60
    assert late["closed_at"] == ts(200)
    # The last value sent is kept even after the wait ended (documented).
    assert late["wait_for_client"] == "Evidence?"


def test_incident_without_any_status(tmp_path):
    # Only history events without a status; data.timestamp without an offset reads as UTC.
    bodies = [
        body("h1", HISTORY, 10, "inc_9", timestamp="2026-10-01T00:00:00"),
        body("h2", HISTORY, 20, "inc_9", subject="+44 20 7946 0123"),
    ]
    d = verified(tmp_path, in_order(bodies), "nostatus.jsonl")
    row = one(incidents_table(d, as_of=ts(60)), "inc_9")
    assert pd.isna(row["status"])
    assert np.isnan(row["awaiting_client_s"])  # not applicable: no status was ever seen
    assert row["suspected_missed_events"] == 0 and row["missed_statuses"] == ""
    assert row["created_at"] == ts(0) and row["created_at_source"] == "data.timestamp"
    assert row["subject"] == "+44 20 7946 0123"
    assert status_intervals(d, as_of=ts(60)).empty


def test_webhook_tests_and_test_incidents_are_left_out(tmp_path):
    bodies = [
        body("t1", "webhook.test", 0, "test_0123abcd", clientId="cl_1"),
        body("t2", HISTORY, 1, "test_0123abcd", status="closed"),
        *SCENARIO_A,
    ]
    d = verified(tmp_path, in_order(bodies), "tests.jsonl")
    inc = incidents_table(d, as_of=AS_OF)
    assert inc["incident_id"].tolist() == ["inc_1"]
    assert inc.attrs["counts"]["test_events"] == 2


def test_bad_values_are_missing_and_counted(tmp_path):
    bodies = [
        body("v1", CREATED, 0, "inc_7", status="pending_review", url="https://a.example/x"),
        # url of the wrong type, an unparsable timestamp, a number for waitForClient.
        body("v2", CHANGED, 5, "inc_7", status="case_building", url=42, waitForClient=3),
        body("v3", HISTORY, 6, "inc_7", timestamp="yesterday", takedownTimestamp="2026-13-45"),
    ]
    d = verified(tmp_path, in_order(bodies), "bad.jsonl")
    inc = incidents_table(d, as_of=ts(60))
    row = one(inc, "inc_7")
    assert row["url"] == "https://a.example/x"  # 42 is ignored as missing
    assert pd.isna(row["wait_for_client"])
    assert row["created_at"] == ts(0) and row["created_at_source"] == "incident.created"
    assert pd.isna(row["takedown_at"]) and not row["taken_down"]
    counts = inc.attrs["counts"]
    assert counts["invalid_values"] == 2  # url 42, waitForClient 3
    assert counts["unparsable_times"] == 2  # "yesterday", "2026-13-45"


def test_counts_account_for_every_valid_row(tmp_path):
    records = [*in_order(SCENARIO_A), signed(SCENARIO_A[0], 320)]  # one duplicate
    records.append(signed('{"not": "an envelope"}', 321))  # valid, but no event id
    records.append(signed(body("x1", HISTORY, 2000, status="closed"), 322))  # after as_of
    no_incident = {"id": "x2", "event": HISTORY, "timestamp": iso(at(1)), "data": {}}
    records.append(signed(json.dumps(no_incident), 323))  # valid, but no data.incidentId
    no_time = {"id": "x3", "event": HISTORY, "timestamp": "soon", "data": {"incidentId": "i"}}
    records.append(signed(json.dumps(no_time), 324))  # cannot be ordered
    d = verified(tmp_path, records, "counts.jsonl")
    counts = incidents_table(d, as_of=AS_OF).attrs["counts"]
    assert set(counts) == set(COUNT_KEYS)
    assert counts == {
        "valid": 11,
        "no_event_id": 1,
        "duplicates": 1,
        "conflicting_bodies": 0,
        "test_events": 0,
        "no_incident_id": 1,
        "no_event_time": 1,
        "after_as_of": 1,
        "events": 6,
        "invalid_values": 0,
        "unparsable_times": 0,
    }
    buckets = ("no_event_id", "duplicates", "test_events", "no_incident_id", "no_event_time")
    assert sum(counts[k] for k in (*buckets, "after_as_of", "events")) == counts["valid"]


def test_conflicting_bodies_under_one_event_id_are_counted(tmp_path):
    # Two validly signed bodies with the same event id (the first receipt is used).
    first = body("c1", CREATED, 0, "inc_8", status="pending_review")
    second = body("c1", CREATED, 0, "inc_8", status="closed")
    d = verified(tmp_path, [signed(first, 10), signed(second, 11)], "conflict.jsonl")
    inc = incidents_table(d, as_of=ts(60))
    assert inc.attrs["counts"]["conflicting_bodies"] == 1
    assert one(inc, "inc_8")["status"] == "pending_review"


def test_conflicts_are_told_apart_among_many_event_ids(tmp_path):
    """Copies are compared with their own event's first receipt, whatever the event ids sort
    as and whatever forged rows carry other ids: z1 resent alike, a1 resent changed, m1 once."""
    records = [
        signed(body("z1", CREATED, 0, "inc_1", status="pending_review"), 10),
        signed(body("b0", CREATED, 0, "inc_5", status="closed"), 10.5, forged=True),
        signed(body("a1", CREATED, 0, "inc_2", status="pending_review"), 11),
        signed(body("m1", CREATED, 0, "inc_3", status="pending_review"), 12),
        signed(body("z1", CREATED, 0, "inc_1", status="pending_review"), 13),
        signed(body("a1", CREATED, 0, "inc_2", status="closed"), 14),
        signed(body("a0", CREATED, 0, "inc_4", status="closed"), 14.5, forged=True),
    ]
    counts = incidents_table(verified(tmp_path, records), as_of=ts(60)).attrs["counts"]
    assert (counts["valid"], counts["duplicates"], counts["conflicting_bodies"]) == (5, 2, 1)


def test_dtypes(scenario_a):
    inc = incidents_table(scenario_a, as_of=AS_OF)
    utc = "datetime64[ns, UTC]"
    expected = {c: "str" for c in INCIDENT_TABLE_COLUMNS}
    expected |= dict.fromkeys(
        [
            "created_at",
            "burn_started_at",
            "takedown_at",
            "closed_at",
            "first_event_at",
            "last_event_at",
            "last_history_update_at",
        ],
        utc,
    )
    expected |= {"created_at_inferred": "bool", "taken_down": "bool"}
    expected |= {"time_to_takedown_s": "float64", "awaiting_client_s": "float64"}
    expected |= {"events": "int64", "suspected_missed_events": "int64"}
    assert {c: str(t) for c, t in inc.dtypes.items()} == expected
    iv = status_intervals(scenario_a, as_of=AS_OF)
    assert {c: str(t) for c, t in iv.dtypes.items()} == {
        "incident_id": "str",
        "status": "str",
        "start": utc,
        "end": utc,
        "duration_s": "float64",
        "announced": "bool",
        "current": "bool",
    }
    ev = incident_events(scenario_a, as_of=AS_OF)
    assert list(ev.columns) == list(EVENT_COLUMNS)
    assert str(ev["takedown_timestamp"].dtype) == utc


def test_no_valid_rows_gives_empty_typed_frames(tmp_path):
    d = verified(tmp_path, [signed(SCENARIO_A[0], 10, forged=True)], "none.jsonl")
    inc = incidents_table(d, as_of=AS_OF)
    assert inc.empty and list(inc.columns) == list(INCIDENT_TABLE_COLUMNS)
    assert str(inc["created_at"].dtype) == "datetime64[ns, UTC]"
    assert inc["suspected_missed_events"].dtype == "int64"
    iv = status_intervals(d, as_of=AS_OF)
    assert iv.empty and list(iv.columns) == list(INTERVAL_COLUMNS)
    assert inc.attrs["counts"]["valid"] == 0
    ev = incident_events(d, as_of=AS_OF)
    assert ev.empty and list(ev.columns) == list(EVENT_COLUMNS)
    # The takedown analysis accepts the empty table.
    assert takedown_durations(inc, as_of=AS_OF).durations.empty


@pytest.mark.parametrize(
    ("as_of", "message"),
    [
        (pd.Timestamp("2026-10-02"), "timezone-aware"),
        ("2026-10-02T00:00:00", "timezone-aware"),
        ("not a time", "not a timestamp"),
        (pd.NaT, "NaT"),
    ],
)
def test_as_of_must_be_an_aware_timestamp(scenario_a, as_of, message):
    for fn in (incidents_table, status_intervals, incident_events):
        with pytest.raises(ParameterError, match=message):
            fn(scenario_a, as_of=as_of)


def test_missing_columns_are_a_schema_error(scenario_a):
    with pytest.raises(SchemaError, match="verdict"):
        incidents_table(scenario_a.drop(columns="verdict"), as_of=AS_OF)
    with pytest.raises(SchemaError, match="DataFrame"):
        incidents_table([1, 2], as_of=AS_OF)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Properties (frames built directly: the signature layer is tested elsewhere)
# --------------------------------------------------------------------------------------------


def frame(rows: list[tuple[str, float, str]]) -> pd.DataFrame:
    """Deliveries (all valid) from (body, received minutes, verdict) rows."""
    envs = [orjson.loads(b) for b, _, _ in rows]
    return pd.DataFrame(
        {
            "verdict": pd.Series([v for _, _, v in rows], dtype="str"),
            "subscription_id": pd.Series(["wh_1"] * len(rows), dtype="str"),
            "event_id": pd.Series([e["id"] for e in envs], dtype="str"),
            "event": pd.Series([e["event"] for e in envs], dtype="str"),
            "event_timestamp": pd.to_datetime([e["timestamp"] for e in envs], utc=True).astype(
                "datetime64[ns, UTC]"
            ),
            "incident_id": pd.Series([e["data"]["incidentId"] for e in envs], dtype="str"),
            "received_at": pd.Series([ts(m) for _, m, _ in rows]).astype("datetime64[ns, UTC]"),
            "body": pd.Series([b.encode() for b, _, _ in rows], dtype=object),
        }
    )


ALL_BODIES = SCENARIO_A + JUMPS


@pytest.fixture(scope="module")
def baseline() -> tuple[pd.DataFrame, pd.DataFrame]:
    d = frame([(b, 500 + i, "valid") for i, b in enumerate(ALL_BODIES)])
    return incidents_table(d, as_of=AS_OF), status_intervals(d, as_of=AS_OF)


@settings(max_examples=20, deadline=None)
@given(
    order=st.permutations(range(len(ALL_BODIES))),
    repeats=st.lists(st.integers(0, len(ALL_BODIES) - 1), max_size=8),
    forged=st.lists(
        st.tuples(st.sampled_from(["inc_1", "inc_2"]), st.sampled_from(["closed", "blocklisted"])),
        max_size=3,
    ),
)
def test_fold_ignores_receipt_order_repeats_and_invalid_rows(baseline, order, repeats, forged):
    rows = [(ALL_BODIES[j], 500 + i, "valid") for i, j in enumerate(order)]
    rows += [(ALL_BODIES[j], 600 + i, "valid") for i, j in enumerate(repeats)]
    rows += [
        (body(f"f{i}", CHANGED, 400, inc, status=s), 700 + i, "signature_mismatch")
        for i, (inc, s) in enumerate(forged)
    ]
    d = frame(rows)
    pd.testing.assert_frame_equal(incidents_table(d, as_of=AS_OF), baseline[0])
    pd.testing.assert_frame_equal(status_intervals(d, as_of=AS_OF), baseline[1])


STATUSES = ["pending_review", "case_building", "approval_required", "action_required", "closed"]
EVENTS = [CHANGED, HISTORY, ACTION, TAKEDOWN]


def reference_walk(steps: list[tuple[int, str, str | None]]) -> tuple[int, float, list[float]]:
    """Straight loop over (minute, event, status): missed count, wait seconds, durations."""
    runs: list[list] = []  # [status, start minute, announced]
    for minute, event, status in steps:
        if status is None:
            continue
        if not runs or runs[-1][0] != status:
            runs.append([status, minute, False])
        if event == CHANGED:
            runs[-1][2] = True
    ends = [r[1] for r in runs[1:]] + [1440]
    durations = [(end - r[1]) * 60.0 for r, end in zip(runs, ends, strict=True)]
    missed = sum(1 for r in runs[1:] if not r[2])
    wait = sum(d for r, d in zip(runs, durations, strict=True) if r[0] in CLIENT_WAIT_STATUSES)
    return missed, wait, durations


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(EVENTS), st.one_of(st.none(), st.sampled_from(STATUSES))),
        min_size=1,
        max_size=12,
    ),
    st.randoms(use_true_random=False),
)
def test_intervals_and_missed_events_match_a_plain_walk(steps, rnd):
    # Distinct event minutes 1..n after a created event at 0; receipt order shuffled.
    timeline = [(0, CREATED, "pending_review")]
    timeline += [(i + 1, ev, s) for i, (ev, s) in enumerate(steps)]
    bodies = [
        body(f"p{m}", ev, m, "inc_p", **({} if s is None else {"status": s}))
        for m, ev, s in timeline
    ]
    received = list(range(len(bodies)))
    rnd.shuffle(received)
    d = frame([(b, 100 + r, "valid") for b, r in zip(bodies, received, strict=True)])
    missed, wait, durations = reference_walk(timeline)
    row = one(incidents_table(d, as_of=AS_OF), "inc_p")
    assert row["suspected_missed_events"] == missed
    assert row["awaiting_client_s"] == wait
    iv = status_intervals(d, as_of=AS_OF)
    assert iv["duration_s"].tolist() == durations
    assert (iv["end"].iloc[:-1].to_numpy() == iv["start"].iloc[1:].to_numpy()).all()
    assert (iv["status"].iloc[:-1].to_numpy() != iv["status"].iloc[1:].to_numpy()).all()
    assert iv["duration_s"].sum() == (AS_OF - ts(0)).total_seconds()


# --------------------------------------------------------------------------------------------
# Demo data: the simulator's recorded end states
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "d"
    result = simulate(out, seed=7, days=10, incidents=40)
    truth = json.loads(result.truth.read_text(encoding="utf-8"))
    deliveries = audit_signatures(result.captures, result.secrets).deliveries
    return deliveries, truth


def test_demo_open_and_waiting_incidents(demo):
    deliveries, truth = demo
    as_of = pd.Timestamp(truth["period"]["end"])
    table = incidents_table(deliveries, as_of=as_of)
    assert len(table) == truth["counts"]["incidents"]
    assert table.attrs["counts"]["test_events"] == len(truth["webhook_tests"])
    inc = table.set_index("incident_id")
    assert truth["open_incidents"]
    for fact in truth["open_incidents"]:
        row = inc.loc[fact["incident_id"]]
        assert not row["taken_down"], fact
        assert row["status"] == fact["status"], fact
    over = [f for f in truth["waiting_on_client"] if f["over_24h"]]
    assert over
    for fact in over:
        row = inc.loc[fact["incident_id"]]
        assert row["status"] in CLIENT_WAIT_STATUSES
        assert row["awaiting_client_s"] > 86400, fact
        # At least the time since the wait began ("since" is truncated to the second).
        since = pd.Timestamp(fact["since"])
        assert row["awaiting_client_s"] >= (as_of - since).total_seconds() - 1
    for fact in truth["waiting_on_client"]:
        assert inc.loc[fact["incident_id"], "status"] == fact["status"]


def test_demo_attacks_never_reach_the_fold(demo):
    deliveries, truth = demo
    as_of = pd.Timestamp(truth["period"]["end"])
    events = incident_events(deliveries, as_of=as_of)
    # Forged requests (a random, missing or sha1 signature) carry event ids of their own;
    # tampered and replayed copies reuse a real delivery's ids, so they are left out here.
    forged = [a for a in truth["attacks"] if a["kind"] not in ("tampered", "replayed")]
    rows = deliveries[deliveries["delivery_id"].isin({a["delivery_id"] for a in forged})]
    assert len(rows) == len(forged) > 0
    assert not (rows["verdict"] == "valid").any()
    assert rows["event_id"].notna().all()
    assert not set(rows["event_id"]) & set(events["event_id"])
    # The takedown analysis consumes the table without exclusions.
    inc = incidents_table(deliveries, as_of=as_of)
    assert sum(takedown_durations(inc, as_of=as_of).exclusions.values()) == 0


_TIMES = [
    "2026-10-01T00:00:00Z",
    "2026-10-01T02:00:00+02:00",
    "2026-10-01T00:00:00.123456789Z",
    "2026-10-01T00:00:00",
    "2026-10-01",
    "9999-01-01T00:00:00Z",
    "1677-09-21T00:12:43.145224191Z",
    "not a time",
    "",
    "2026-13-01T00:00:00Z",
    None,
]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(_TIMES), min_size=1, max_size=40))
def test_each_distinct_time_parsed_once_equals_parsing_them_all(raw):
    """The times parsed per distinct string are what pandas gives parsing the whole column
    (out of range as NaT), and the unparsable count is the same."""
    from audit.analysis.event_fields import parse_times

    column = pd.Series(raw, dtype="str")
    got, bad = parse_times(column)
    want = pd.to_datetime(column, utc=True, format="ISO8601", errors="coerce")
    lo, hi = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")
    want = want.where((want >= lo) & (want <= hi)).astype("datetime64[ns, UTC]")
    pd.testing.assert_series_equal(got, want, check_names=False)
    assert bad == int((column.notna() & want.isna()).sum())


def test_events_tied_on_every_time_are_ordered_by_event_id():
    """Three status changes of one incident with one event time and one receipt time: their
    order (so the status runs and the status the incident ends in) is the event ids' string
    order, whatever order they were received in: evt_a (case_building), evt_b (closed),
    evt_c (pending_review), so the incident ends pending_review, by hand."""
    statuses = {"evt_c": "pending_review", "evt_a": "case_building", "evt_b": "closed"}
    rows = [(body(e, CHANGED, 10, status=s), 20, "valid") for e, s in statuses.items()]
    rows.append((body("evt_0", CHANGED, 5, incident="inc_2", status="closed"), 20, "valid"))
    ev = incident_events(frame(rows), as_of=AS_OF)
    assert ev["event_id"].tolist() == ["evt_a", "evt_b", "evt_c", "evt_0"]
    runs = status_intervals(frame(rows[::-1]), as_of=AS_OF)
    inc1 = runs[runs["incident_id"] == "inc_1"]
    assert inc1["status"].tolist() == ["case_building", "closed", "pending_review"]
    assert one(incidents_table(frame(rows), as_of=AS_OF))["status"] == "pending_review"
