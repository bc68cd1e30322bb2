"""Tests of the demo-data simulator: determinism, the spec's delivery rules, the planted faults.

The captures are parsed here with a few lines of plain JSON handling (not with
``audit.ingest.load``), so these tests check the files themselves. Positions quoted as known
answers were computed by hand
from the rules in the module docstring: for 2026-10-01 and 31 days, day 31 // 2 = 15 (16 October)
for the outage and day round(0.6 * 31) = 19 (20 October) for the rotation; 2026-10-01T00:00:00Z is
Unix 1790812800 (``date -u -d 2026-10-01 +%s``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import stat
from collections import defaultdict
from datetime import UTC, date, datetime
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit.demo import plan_faults, simulate
from audit.errors import InputError, ParameterError
from audit.ingest.secrets import read_secrets
from audit.ingest.signatures import verify
from audit.spec import (
    EVENTS,
    INCIDENT_CLASSES,
    MAX_ATTEMPTS,
    RETRY_DELAYS_S,
    SOURCES,
    STATUSES,
    TEST_EVENT,
)
from audit.timeutil import parse_iso_ns, parse_time_ns

EVT = re.compile(r"evt_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
SMALL = {"days": 10, "incidents": 40}
JITTER_S = 3  # per retry, as documented in the module


def _ns(iso: str) -> int:
    return parse_iso_ns(iso)[0]


def _files(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _parse(folder: Path) -> tuple[list[dict], list[tuple[str, int]]]:
    """Readable capture lines as dicts (with normalised extras) and the unreadable (file, line).

    A record without ``subscription_id`` is attributed by its url, as listed in a snapshot.
    """
    snapshot = json.loads(next((folder / "snapshots").iterdir()).read_text(encoding="utf-8"))
    by_url = {s["url"]: s["id"] for s in snapshot["response"]["data"]}
    records, unreadable = [], []
    for path in sorted((folder / "captures").glob("*.jsonl")):
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                unreadable.append((f"captures/{path.name}", lineno))
                continue
            if "body" in rec:
                body = rec["body"].encode("utf-8")
            elif "body_b64" in rec:
                body = base64.b64decode(rec["body_b64"])
            else:
                unreadable.append((f"captures/{path.name}", lineno))
                continue
            pairs = rec["headers"].items() if isinstance(rec["headers"], dict) else rec["headers"]
            rec["h"] = {k.lower(): v for k, v in pairs}
            rec["raw"], rec["env"] = body, json.loads(body)
            rec["recv_ns"] = parse_time_ns(rec["received_at"])[0]
            rec["sub"] = rec.get("subscription_id") or by_url[rec["url"]]
            rec["file"], rec["line"] = path.name, lineno
            records.append(rec)
    return records, unreadable


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("demo") / "out"
    result = simulate(out, seed=7, **SMALL)
    records, unreadable = _parse(out)
    truth = json.loads(result.truth.read_text(encoding="utf-8"))
    attack_keys = {(a["delivery_id"], _ns(a["received_at"])): a for a in truth["attacks"]}

    def attack_of(rec: dict) -> dict | None:
        for (did, ns), a in attack_keys.items():
            if rec["h"].get("x-phishfort-delivery-id") == did and abs(rec["recv_ns"] - ns) < 2000:
                return a
        return None

    for rec in records:
        rec["attack"] = attack_of(rec)
    service = [r for r in records if r["attack"] is None]
    return {
        "out": out,
        "result": result,
        "records": records,
        "service": service,
        "unreadable": unreadable,
        "truth": truth,
    }


def test_same_seed_same_bytes_and_another_seed_differs(tmp_path: Path) -> None:
    a = simulate(tmp_path / "a", seed=11, **SMALL)
    simulate(tmp_path / "b", seed=11, **SMALL)
    simulate(tmp_path / "c", seed=12, **SMALL)
    fa, fb, fc = (_files(tmp_path / x) for x in "abc")
    assert fa == fb
    assert len(fa) == len(a.captures) + len(a.snapshots) + 2
    assert any(fa[k] != fc.get(k) for k in fa if k.startswith("captures/"))


def test_output_bytes_are_pinned(tmp_path: Path) -> None:
    # Known answer: the sha256 over (path, bytes) of every file, computed with the single-module
    # simulator (audit/simulate.py, before it was split by job). A refactoring that changes one
    # byte of the demo data fails here; a deliberate change updates the digest.
    simulate(tmp_path / "o", seed=11, start=date(2026, 3, 1), days=8, incidents=30)
    h = hashlib.sha256()
    for p in sorted((tmp_path / "o").rglob("*")):
        if p.is_file():
            name = p.relative_to(tmp_path / "o").as_posix().encode()
            h.update(name + b"\0" + p.read_bytes() + b"\0")
    assert h.hexdigest() == "2009803de67467f7c6447ae500132c6fd891c94929173294b9804d63de5addda"


def test_result_paths_and_counts(demo: dict) -> None:
    r = demo["result"]
    assert [p.name for p in r.snapshots] == sorted(p.name for p in r.snapshots)
    assert r.captures[0].name == "receiver-2026-10-01.jsonl"
    assert r.records == len(demo["records"]) + len(demo["unreadable"])
    assert r.attempts == demo["truth"]["counts"]["attempts_captured"]
    assert r.incidents == 40


def test_secrets_file_is_private_and_truth_has_no_secret(demo: dict) -> None:
    out = demo["out"]
    assert stat.S_IMODE((out / "secrets.json").stat().st_mode) == 0o600
    values = [
        s["secret"] for v in json.loads((out / "secrets.json").read_text()).values() for s in v
    ]
    assert len(values) == 3
    for path in [out / "truth.json", *sorted((out / "snapshots").iterdir())]:
        text = path.read_text(encoding="utf-8")
        assert not any(v in text for v in values)
        assert '"secret"' not in text


def test_every_service_delivery_verifies_with_the_secret_current_at_sending(demo: dict) -> None:
    store = read_secrets(demo["out"] / "secrets.json")
    for rec in demo["service"]:
        ts = rec["h"]["x-phishfort-timestamp"]
        keys = store.by_subscription[rec["sub"]]
        current = [k.key for k in keys if k.current_at(int(ts) * 10**9)]
        others = [k.key for k in keys if not k.current_at(int(ts) * 10**9)]
        sig = rec["h"]["x-phishfort-signature"]
        v = verify(rec["raw"], sig, ts, current, now=rec["recv_ns"] / 1e9)
        assert v.verdict == "valid", (rec["file"], rec["line"], v.detail)
        assert abs(v.skew_s) <= 300
        assert not others or not verify(rec["raw"], sig, ts, others, now=int(ts)).hmac_ok


def test_attacks_fail_verification_as_planted(demo: dict) -> None:
    store = read_secrets(demo["out"] / "secrets.json")
    attacks = [r for r in demo["records"] if r["attack"]]
    assert sorted(r["attack"]["kind"] for r in attacks) == sorted(
        ["forged"] * 3
        + ["tampered"] * 2
        + ["replayed"] * 2
        + ["missing_signature", "malformed_signature"]
    )
    for rec in attacks:
        h = rec["h"]
        keys = [k.key for k in store.by_subscription["wh_main"]]
        v = verify(
            rec["raw"],
            h.get("x-phishfort-signature"),
            h["x-phishfort-timestamp"],
            keys,
            now=rec["recv_ns"] / 1e9,
        )
        assert v.verdict == rec["attack"]["expected_verdict"]
        if rec["attack"]["kind"] == "replayed":
            assert v.hmac_ok and v.skew_s > 3600
        assert rec["response_status"] == (
            204 if h["x-phishfort-delivery-id"] in demo["truth"]["wrongly_accepted"] else 401
        )
    assert len(demo["truth"]["wrongly_accepted"]) == 1


def _by_event(service: list[dict]) -> dict[tuple[str, str], list[dict]]:
    groups = defaultdict(list)
    for rec in service:
        groups[(rec["env"]["id"], rec["sub"])].append(rec)
    return {
        k: sorted(v, key=lambda r: int(r["h"]["x-phishfort-timestamp"])) for k, v in groups.items()
    }


def _schedule_indices(times: list[int]) -> list[int] | None:
    """Attempt numbers (0-based) that explain the gaps between send times, or None."""
    for first in range(MAX_ATTEMPTS):
        idx = [first]
        for a, b in pairwise(times):
            i = idx[-1]
            late = [
                (j, b - a - sum(RETRY_DELAYS_S[i + 1 : j + 1])) for j in range(i + 1, MAX_ATTEMPTS)
            ]
            fits = [j for j, d in late if 0 <= d <= JITTER_S * (j - i) + 1]
            if not fits:
                break
            idx.append(fits[0])
        if len(idx) == len(times):
            return idx
    return None


def test_retries_follow_the_published_schedule(demo: dict) -> None:
    gap_events = set(demo["truth"]["network_outage"]["gap_event_ids"])
    lost_first = {
        x["event_id"] for x in demo["truth"]["network_outage"]["lost"] if x["attempt"] == 1
    }
    ids = [r["h"]["x-phishfort-delivery-id"] for r in demo["service"]]
    assert len(ids) == len(set(ids))  # a fresh delivery id per attempt
    for (eid, _), recs in _by_event(demo["service"]).items():
        assert EVT.fullmatch(eid)
        assert len(recs) <= MAX_ATTEMPTS
        times = [int(r["h"]["x-phishfort-timestamp"]) for r in recs]
        assert len(set(times)) == len(times)  # a fresh timestamp per attempt
        idx = _schedule_indices(times)
        assert idx is not None, (eid, times)
        if idx[0] != 0:
            assert eid in lost_first
        if any(b - a > 1 for a, b in pairwise(idx)):
            assert eid in gap_events
        for r in recs[:-1]:  # only failed or timed-out attempts are retried
            assert r["response_status"] >= 300 or r["response_ms"] > 5000
        event_ns = _ns(recs[0]["env"]["timestamp"])
        delay = times[0] - event_ns / 1e9
        assert -1 <= delay <= 601 or idx[0] != 0


def test_gap_pattern_from_the_network_outage(demo: dict) -> None:
    truth = demo["truth"]["network_outage"]
    start, end = (_ns(truth[k]) // 10**9 for k in ("start", "end"))
    assert 9 * 60 <= end - start <= 15 * 60
    groups = _by_event(demo["service"])
    patterns = set()
    for eid in truth["gap_event_ids"]:
        recs = groups[(eid, "wh_main")]
        idx = _schedule_indices([int(r["h"]["x-phishfort-timestamp"]) for r in recs])
        patterns.add(tuple(i + 1 for i in idx))
    assert (1, 4) in {p[:2] for p in patterns}  # attempt 1 seen, 2-3 lost, 4 seen
    for x in truth["lost"]:  # a lost attempt is in no capture
        assert x["delivery_id"] not in {r["h"]["x-phishfort-delivery-id"] for r in demo["service"]}


def test_receiver_outage_exhausts_events_and_snapshot_says_failed(demo: dict) -> None:
    truth, groups = demo["truth"]["receiver_outage"], _by_event(demo["service"])
    assert len({e["event_id"] for e in truth["exhausted"]}) >= 3
    for e in truth["exhausted"]:
        recs = groups[(e["event_id"], e["subscription_id"])]
        assert [r["response_status"] for r in recs] == [503] * 5
    recovered = [
        v
        for v in groups.values()
        if v[0]["response_status"] == 503 and v[-1]["response_status"] < 300
    ]
    assert len(recovered) >= 2
    mid = json.loads(demo["result"].snapshots[1].read_text())
    assert mid["fetched_at"] == truth["end"]
    subs = {s["id"]: s for s in mid["response"]["data"]}
    assert subs["wh_main"]["lastDeliveryStatus"] == "failed"
    first = json.loads(demo["result"].snapshots[0].read_text())["response"]["data"]
    assert {s["id"]: s["lastDeliveryStatus"] for s in first} == {
        "wh_main": "success",
        "wh_siem": "success",
        "wh_legacy": None,
    }
    legacy = subs["wh_legacy"]
    assert legacy["url"].startswith("http://") and legacy["active"] is False


def test_rotation_stale_receiver_and_in_flight_retries(demo: dict) -> None:
    truth = demo["truth"]
    rot = _ns(truth["secret_rotation"]["at"]) // 10**9
    by_did = {r["h"]["x-phishfort-delivery-id"]: r for r in demo["service"]}
    answered = truth["stale_secret"]["answered_401_delivery_ids"]
    assert answered and all(by_did[d]["response_status"] == 401 for d in answered)
    inflight = truth["stale_secret"]["inflight_new_secret_delivery_ids"]
    assert inflight
    groups = _by_event(demo["service"])
    for did in inflight:
        rec = by_did[did]
        first = groups[(rec["env"]["id"], "wh_main")][0]
        assert (
            int(first["h"]["x-phishfort-timestamp"]) < rot <= int(rec["h"]["x-phishfort-timestamp"])
        )


def test_slow_acks_clock_drift_and_non_ascii(demo: dict) -> None:
    truth, groups = demo["truth"], _by_event(demo["service"])
    by_did = {r["h"]["x-phishfort-delivery-id"]: r for r in demo["service"]}
    assert len(truth["slow_acks"]) >= 3
    for s in truth["slow_acks"]:
        rec = by_did[s["delivery_id"]]
        assert rec["response_status"] < 300 and 5500 <= rec["response_ms"] <= 9000
        later = groups[(s["event_id"], s["subscription_id"])]
        assert later[-1] is not rec  # the service retried although the receiver stored it
    skews = [r["recv_ns"] / 1e9 - int(r["h"]["x-phishfort-timestamp"]) for r in demo["service"]]
    assert 250 < max(skews) <= 300
    assert any(not r["raw"].isascii() for r in demo["service"])
    assert set(truth["non_ascii_event_ids"]) == {
        r["env"]["id"] for r in demo["service"] if not r["raw"].isascii()
    }


def test_loader_variants_and_unreadable_lines(demo: dict) -> None:
    lines = [x for p in demo["result"].captures for x in p.read_text(encoding="utf-8").splitlines()]
    assert any('"received_at":"' in x and '+02:00"' in x for x in lines)
    assert any(re.search(r'"received_at":\d', x) for x in lines)
    assert any('"body_b64"' in x for x in lines)
    assert any('"headers":[[' in x for x in lines)
    assert any("x-phishfort-signature" in x for x in lines)
    assert sum('"subscription_id"' not in x for x in lines) > 10  # wh_siem's receiver
    expected = [(u["file"], u["line"]) for u in demo["truth"]["unreadable_lines"]]
    assert sorted(demo["unreadable"]) == sorted(expected) and len(expected) == 2
    for p in demo["result"].captures:  # sorted by receipt within each file
        ns = [r["recv_ns"] for r in demo["records"] if r["file"] == p.name]
        assert ns == sorted(ns)


def test_incident_data_uses_the_spec_vocabulary(demo: dict) -> None:
    created: dict[str, str] = {}
    ttd = []
    for rec in demo["service"]:
        env = rec["env"]
        assert env["event"] in EVENTS and rec["h"]["x-phishfort-event"] == env["event"]
        data = env["data"]
        if env["event"] == TEST_EVENT:
            assert data["incidentId"].startswith("test_") and data["clientId"] == "cl_demo"
            continue
        assert data["status"] in STATUSES and data["source"] in SOURCES
        assert data["incidentClass"] in INCIDENT_CLASSES
        assert created.setdefault(data["incidentId"], data["timestamp"]) == data["timestamp"]
        if env["event"] == "incident.status_changed" and data["status"] == "takedown_success":
            ttd.append((_ns(data["takedownTimestamp"]) - _ns(data["timestamp"])) / 3.6e12)
    assert len(created) <= 40
    ttd.sort()
    assert 0.5 < ttd[len(ttd) // 2] < 24  # median of a few hours


def test_open_and_waiting_incidents_at_the_end(demo: dict) -> None:
    truth = demo["truth"]
    end = _ns(truth["period"]["end"])
    waiting = [w for w in truth["waiting_on_client"] if w["over_24h"]]
    assert len(waiting) >= 3
    for w in waiting:
        assert w["status"] in ("approval_required", "action_required")
        assert end - _ns(w["since"]) > 24 * 3600 * 10**9
    assert len(truth["open_incidents"]) >= len(waiting)


def test_bad_arguments_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="days"):
        simulate(tmp_path / "x", days=6)
    with pytest.raises(ParameterError, match="incidents"):
        simulate(tmp_path / "x", incidents=5)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    with pytest.raises(InputError, match="empty"):
        simulate(tmp_path / "full", **SMALL)


def test_plan_known_answer() -> None:
    p = plan_faults(date(2026, 10, 1), 31)
    assert p.start == 1790812800

    def iso(t: float) -> str:
        return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M")

    assert (iso(p.outage[0]), iso(p.outage[1])) == ("2026-10-16T13:00", "2026-10-16T15:00")
    assert iso(p.rotation) == "2026-10-20T09:30" and iso(p.stale_until) == "2026-10-20T12:30"


@settings(max_examples=60, deadline=None)
@given(start=st.dates(date(2000, 1, 1), date(2090, 1, 1)), days=st.integers(7, 120))
def test_plan_fits_any_period(start: date, days: int) -> None:
    p = plan_faults(start, days)
    windows = [p.outage, (p.rotation, p.stale_until), p.drift]
    for a, b in windows:
        assert p.start <= a < b <= p.end
    ordered = sorted(windows)
    assert all(x[1] <= y[0] for x, y in pairwise(ordered))  # disjoint
    assert p.rotation <= p.network[0] < p.network[1] <= p.stale_until
    assert p.outage[1] - p.outage[0] > sum(RETRY_DELAYS_S)  # long enough to exhaust
    for _, t, _ in p.attacks:
        assert p.start <= t < p.end
        assert not any(a - 3600 <= t < b + 2 * 3600 for a, b in windows)
    for kind, t in p.planted:
        assert p.start < t < p.end, kind


def test_simulate_refuses_what_it_cannot_write_up_front(tmp_path: Path, capsys) -> None:
    """The help promised 1 incident and up while the simulator needs 20; a start near 2262
    wrote receipt times the readers refuse."""
    from audit.cli import main

    out = str(tmp_path / "o")
    assert main(["simulate", "--out", out, "--incidents", "5"]) == 3
    assert "20<=x<=100000" in capsys.readouterr().err
    assert main(["simulate", "--out", out, "--start", "2261-12-01", "--days", "366"]) == 3
    assert "start 2261-12-01 and 366 days: 1970 to 2261 only" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
