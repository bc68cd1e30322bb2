"""Coverage is evidence (issue 42, points 1 and 2): which days held captures, the gaps (CAP-01),
and a secrets file that fails most requests' verification (SIG-01/SIG-02 skip, not fail).

Unit cases are worked out by hand in the comments; the acceptance cases simulate a month, break
it (a wrong secrets file; seven daily capture files removed) and run `audit report` from the raw
captures and from an evidence store.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from audit.analysis.coverage import (
    capture_coverage,
    coverage_alerts,
    secrets_sentence,
    verification_coverage,
)
from audit.cli import main
from audit.report.rundir import open_run
from audit.report.views import header
from tests.test_findings import DAY, H, analysis, one, row, run

UTC = "UTC"


def _times(*iso: str) -> pd.Series:
    return pd.Series(pd.to_datetime(list(iso), utc=True, format="ISO8601"))


def _cov(times: pd.Series, start: str, end: str, as_of: str | None = None) -> dict:
    s, e = pd.Timestamp(start, tz=UTC), pd.Timestamp(end, tz=UTC)
    return capture_coverage(
        times, start=s, end=e, as_of=pd.Timestamp(as_of, tz=UTC) if as_of else e
    )


# --------------------------------------------------------------------------------------------
# capture_coverage
# --------------------------------------------------------------------------------------------


def test_a_week_without_captures_is_one_gap_with_its_whole_days():
    # Captures at 06:00 and 18:00, Oct 1-31, except Oct 10-16: the gap runs from Oct 9 18:00
    # to Oct 17 06:00 = 7 days 12 h = 180 h; whole days without a capture: Oct 10 to Oct 16.
    days = [d for d in range(1, 32) if not 10 <= d <= 16]
    t = _times(*(f"2026-10-{d:02}T{h}:00Z" for d in days for h in ("06", "18")))
    c = _cov(t, "2026-10-01", "2026-11-01")
    assert (c["days"], c["days_with_captures"], c["median_per_day"]) == (31, 24, 2.0)
    assert c["days_without"] == [["2026-10-10", "2026-10-16"]]
    assert c["judged"] is True
    assert c["gaps"] == [
        {
            "start": "2026-10-09T18:00:00+00:00",
            "end": "2026-10-17T06:00:00+00:00",
            "hours": 180.0,
            "days_without": ["2026-10-10", "2026-10-16"],
        }
    ]
    # 48 captures in 744 hours: the median hour held none, so not a busy receiver
    assert (c["hours"], c["hours_with_captures"], c["busy"]) == (744, 48, False)


def test_exactly_24_hours_is_a_gap_and_a_second_less_is_not():
    # Captures at 00:00 of Oct 1, 2, 3 (and 12:00 of each day so that no edge makes a gap).
    base = ["2026-10-01T00:00Z", "2026-10-01T12:00Z", "2026-10-02T12:00Z", "2026-10-03T23:00Z"]
    # Oct 1 12:00 -> Oct 2 12:00: exactly 24 h.
    gaps = _cov(_times(*base), "2026-10-01", "2026-10-04")["gaps"]
    assert [(g["start"][:16], g["end"][:16], g["hours"]) for g in gaps] == [
        ("2026-10-01T12:00", "2026-10-02T12:00", 24.0),
        ("2026-10-02T12:00", "2026-10-03T23:00", 35.0),
    ]
    assert gaps[0]["days_without"] is None  # no whole day inside it
    near = ["2026-10-01T00:00Z", "2026-10-01T12:00:01Z", "2026-10-02T12:00Z", "2026-10-03T11:00Z"]
    near += ["2026-10-03T23:00Z"]
    assert _cov(_times(*near), "2026-10-01", "2026-10-04")["gaps"] == []


def test_the_edges_of_the_window_count_and_as_of_ends_it():
    # Captures only Oct 3-5 (several a day) in Oct 1-10: a gap from the start (Oct 1 00:00 to
    # the first capture, Oct 3 01:00: 49 h) and one to the end (Oct 5 23:00 to Oct 11 00:00).
    t = [f"2026-10-0{d}T{h:02}:00Z" for d in (3, 4, 5) for h in (1, 9, 17, 23)]
    t += ["2026-10-06T10:00Z", "2026-10-07T08:00Z"]  # 11 h and 22 h after: no gap
    c = _cov(_times(*t), "2026-10-01", "2026-10-11")
    assert c["median_per_day"] == 0.5  # days: 0,0,4,4,4,1,1,0,0,0 -> median of 0 and 1
    assert c["judged"] is True
    assert [(g["start"][:16], g["end"][:16]) for g in c["gaps"]] == [
        ("2026-10-01T00:00", "2026-10-03T01:00"),
        ("2026-10-07T08:00", "2026-10-11T00:00"),
    ]
    assert c["gaps"][0]["days_without"] == ["2026-10-01", "2026-10-02"]
    assert c["gaps"][1]["days_without"] == ["2026-10-08", "2026-10-10"]
    # Judged as of Oct 9 02:00: the window ends there (9 days), the last gap is 42 h, Oct 8 in it
    c = _cov(_times(*t), "2026-10-01", "2026-10-11", as_of="2026-10-09T02:00")
    assert c["window"]["end"] == "2026-10-09T02:00:00+00:00"
    assert c["days"] == 9
    assert (c["gaps"][-1]["hours"], c["gaps"][-1]["days_without"]) == (
        42.0,
        ["2026-10-08", "2026-10-08"],
    )


def test_a_quiet_receiver_is_not_judged_for_gaps():
    # 11 captures on 11 of 31 days (Oct 1, 4, 7, ... 31): the median day held none.
    t = _times(*(f"2026-10-{d:02}T08:00Z" for d in range(1, 32, 3)))
    c = _cov(t, "2026-10-01", "2026-11-01")
    assert (c["days_with_captures"], c["median_per_day"], c["judged"], c["gaps"]) == (
        11,
        0.0,
        False,
        [],
    )
    assert c["days_without"][0] == ["2026-10-02", "2026-10-03"]


def test_a_capture_at_midnight_keeps_its_day_and_missing_times_do_not_count():
    t = _times("2026-10-01T05:00Z", "2026-10-03T00:00Z", "2026-10-03T20:00Z")
    t = pd.concat([t, pd.Series([pd.NaT], dtype=t.dtype)], ignore_index=True)
    c = _cov(t, "2026-10-01", "2026-10-04")
    assert c["captures"] == 3
    # Oct 1 05:00 -> Oct 3 00:00 (43 h): Oct 2 is the only whole day without a capture
    assert c["gaps"][0]["days_without"] == ["2026-10-02", "2026-10-02"]
    assert c["days_without"] == [["2026-10-02", "2026-10-02"]]
    # The gap starts at a capture at midnight: its day held that capture, so Oct 2 only.
    t = _times("2026-10-01T00:00Z", "2026-10-03T05:00Z", "2026-10-03T20:00Z")
    (gap,) = _cov(t, "2026-10-01", "2026-10-04")["gaps"]
    assert (gap["hours"], gap["days_without"]) == (53.0, ["2026-10-02", "2026-10-02"])


def test_a_capture_at_as_of_counts_with_its_day():
    """as_of defaults to the latest receipt, and the analysis keeps receipts up to and
    including it: that capture is in the period for every control, so coverage counts it
    too (it was left out: Oct 3 was listed as a day without a capture)."""
    t = _times("2026-10-01T01:00Z", "2026-10-01T20:00Z", "2026-10-02T09:00Z", "2026-10-03T05:00Z")
    c = _cov(t, "2026-10-01", "2026-11-01", as_of="2026-10-03T05:00")
    assert (c["captures"], c["days"], c["days_with_captures"]) == (4, 3, 3)
    assert c["days_without"] == [] and c["gaps"] == []  # Oct 2 09:00 -> Oct 3 05:00: 20 h
    # 00:00 Oct 1 to 05:00 Oct 3 is 53 h, and the hour of the capture at as_of: 54, 4 held
    assert (c["hours"], c["hours_with_captures"]) == (54, 4)
    # as_of at midnight, a capture then: its day (Oct 3) held it
    t = _times("2026-10-01T01:00Z", "2026-10-01T20:00Z", "2026-10-02T09:00Z", "2026-10-03T00:00Z")
    c = _cov(t, "2026-10-01", "2026-11-01", as_of="2026-10-03T00:00")
    assert (c["captures"], c["days"], c["days_with_captures"], c["days_without"]) == (4, 3, 3, [])
    # a capture at the period's end is not in the period, as_of or not
    t = _times("2026-10-01T01:00Z", "2026-10-01T20:00Z", "2026-10-02T09:00Z", "2026-10-03T00:00Z")
    assert _cov(t, "2026-10-01", "2026-10-03", as_of="2026-10-03T00:00")["captures"] == 3


def test_an_outage_longer_than_half_the_period_is_a_gap_not_a_quiet_receiver():
    """Captures twice a day Oct 1-12, then none (the capture died): 12 of 31 days held
    captures, so the median day held none, yet this is one outage, not a quiet receiver (it
    was skipped as one, and the report said nothing of 19 days unseen)."""
    t = _times(*(f"2026-10-{d:02}T{h}:00Z" for d in range(1, 13) for h in ("06", "18")))
    c = _cov(t, "2026-10-01", "2026-11-01")
    assert (c["days_with_captures"], c["median_per_day"], c["judged"]) == (12, 0.0, True)
    # Oct 12 18:00 to Nov 1 00:00: 19 days and 6 h = 462 h; whole days Oct 13 to Oct 31
    assert c["gaps"] == [
        {
            "start": "2026-10-12T18:00:00+00:00",
            "end": "2026-11-01T00:00:00+00:00",
            "hours": 462.0,
            "days_without": ["2026-10-13", "2026-10-31"],
        }
    ]
    # The same at the start (nothing until Oct 20) and with a quiet day kept elsewhere
    days = [d for d in range(20, 32) if d != 25]
    t = _times(*(f"2026-10-{d:02}T{h}:00Z" for d in days for h in ("06", "18")))
    gaps = _cov(t, "2026-10-01", "2026-11-01")["gaps"]
    assert [(g["start"][:16], g["end"][:16]) for g in gaps] == [
        ("2026-10-01T00:00", "2026-10-20T06:00"),
        ("2026-10-24T18:00", "2026-10-26T06:00"),
    ]
    # Scattered quiet days are no outage: runs of 2 and 2 and 1 days (Oct 2-3, 5-6, 8)
    t = _times("2026-10-01T08:00Z", "2026-10-04T08:00Z", "2026-10-07T08:00Z")
    c = _cov(t, "2026-10-01", "2026-10-09")
    assert (c["median_per_day"], c["judged"], c["gaps"]) == (0.0, False, [])


# --------------------------------------------------------------------------------------------
# verification_coverage
# --------------------------------------------------------------------------------------------


def _deliveries(**by_sub: dict[str, int]) -> pd.DataFrame:
    rows = []
    for sub, verdicts in by_sub.items():
        for v, n in verdicts.items():
            rows += [{"subscription_id": None if sub == "none" else sub, "verdict": v}] * n
    d = pd.DataFrame(rows)
    d["received_at"] = pd.Timestamp("2026-10-05", tz=UTC)
    return d


def _suspects(d: pd.DataFrame) -> dict:
    v = verification_coverage(
        d, start=pd.Timestamp("2026-10-01", tz=UTC), end=pd.Timestamp("2026-11-01", tz=UTC)
    )
    return {e["subscription_id"]: e["suspect"] for e in v}


def test_a_subscription_is_a_suspect_from_half_of_its_readable_requests_and_20():
    # wh_a: 20 of 40 readable mismatched (50%, 20): suspect. wh_b: 19 of 38 (50%, 19): not.
    # wh_c: 20 of 41 (48.8%): not. Unreadable lines do not count as readable.
    d = _deliveries(
        wh_a={"signature_mismatch": 20, "valid": 20, "unreadable": 5},
        wh_b={"rotated_secret": 19, "valid": 19},
        wh_c={"signature_mismatch": 20, "valid": 21},
    )
    assert _suspects(d) == {"wh_a": True, "wh_b": False, "wh_c": False}


def test_the_reason_must_be_one_not_two_added():
    # 15 rotated + 15 mismatched of 30: each reason alone is 15 (< 20): not a suspect.
    d = _deliveries(wh_a={"signature_mismatch": 15, "rotated_secret": 15})
    assert _suspects(d) == {"wh_a": False}
    d = _deliveries(wh_a={"rotated_secret": 25, "signature_mismatch": 5})
    (e,) = verification_coverage(
        d, start=pd.Timestamp("2026-10-01", tz=UTC), end=pd.Timestamp("2026-11-01", tz=UTC)
    )
    assert (e["dominant"], e["share"], e["suspect"]) == ("rotated_secret", 0.8333, True)


def test_requests_without_a_subscription_are_judged_with_the_whole_period():
    # 25 mismatched without a subscription id beside 100 valid of wh_a: 25 of 125 (20%): not.
    d = _deliveries(none={"signature_mismatch": 25}, wh_a={"valid": 100})
    assert _suspects(d) == {"wh_a": False, None: False}
    # Beside 10 valid only: 25 of 35 (71%): suspect.
    d = _deliveries(none={"signature_mismatch": 25}, wh_a={"valid": 10})
    assert _suspects(d) == {"wh_a": False, None: True}


def test_the_sentence_names_the_file_as_given_and_never_a_secret(tmp_path):
    v = [
        {"subscription_id": "wh_a", "readable": 30, "signature_mismatch": 30, "suspect": True,
         "dominant": "signature_mismatch"},
        {"subscription_id": None, "readable": 9, "rotated_secret": 9, "suspect": True,
         "dominant": "rotated_secret"},
    ]  # fmt: skip
    s = secrets_sentence(v, "conf/wrong.json")
    assert "the secrets file conf/wrong.json likely holds wrong or outdated secrets" in s
    assert "wh_a (30 of 30 readable: signature mismatch)" in s
    assert "the requests without a subscription id (9 of 9 readable" in s
    assert secrets_sentence([{**v[0], "suspect": False}], "x.json") == ""
    assert coverage_alerts(None, s) == [s]


# --------------------------------------------------------------------------------------------
# The controls
# --------------------------------------------------------------------------------------------


def _daily(days: range, *, per_day: int = 2, **kw: object) -> list[dict]:
    """Valid deliveries at 06:00 and 18:00 of each day (offset from T0 = Oct 1, 00:00)."""
    hours = (6, 18)[:per_day]
    return [row(d * DAY + h * H, event_id=f"e{d}_{h}", **kw) for d in days for h in hours]


def test_cap_01_fails_with_the_spans_passes_without_and_skips_when_quiet_or_empty():
    # The test period is Oct 1-10 (T0..END). Days 0-9 except 3-5: the gap is from Oct 3 18:00
    # to Oct 7 06:00 (84 h), whole days Oct 4-6.
    f = one(run(analysis(_daily(range(0, 10))), only="CAP-01"), "CAP-01")
    assert f["status"] == "pass" and f["reason"].endswith("10 of 10 days held captures.")
    rows = _daily([d for d in range(10) if d not in (3, 4, 5)])
    f = one(run(analysis(rows), only="CAP-01"), "CAP-01")
    assert f["status"] == "fail"
    ev = f["evidence"]
    assert ev["gaps"] == [
        {"start": "2026-10-03T18:00:00+00:00", "end": "2026-10-07T06:00:00+00:00", "length_h": 84.0}
    ]
    assert ev["gaps_total"] == 1 and ev["days_without"] == ["2026-10-04 to 2026-10-06"]
    assert (ev["days"], ev["days_with_captures"]) == (10, 7)
    # Quiet: captures on 4 of 10 days (the median day none): skip, saying why.
    f = one(run(analysis(_daily([0, 3, 6, 9])), only="CAP-01"), "CAP-01")
    assert f["status"] == "skip" and "quiet receiver" in f["reason"]
    f = one(run(analysis([]), only="CAP-01"), "CAP-01")
    assert f["status"] == "skip" and "No request" in f["reason"]


def test_sig_01_and_sig_02_skip_naming_the_secrets_file_when_it_is_the_likely_cause():
    # 30 requests of wh_1, all signature_mismatch, accepted with 204: without the rule SIG-01
    # fails; with it the secrets file is the likely cause: skip, naming the file.
    rows = [row(600 * n, event_id=f"x{n}", verdict="signature_mismatch") for n in range(30)]
    f = run(analysis(rows), only=["SIG-01", "SIG-02"], secrets_file="conf/wrong.json")
    sig01, sig02 = one(f, "SIG-01"), one(f, "SIG-02")
    assert sig01["status"] == "skip" and sig02["status"] == "skip"
    for g in (sig01, sig02):
        assert "the secrets file conf/wrong.json likely holds wrong" in g["reason"]
        assert g["evidence"]["secrets_file"] == "conf/wrong.json"
        assert g["evidence"]["left_out_subscriptions"] == ["wh_1"]
    assert sig01["evidence"]["left_out_requests"] == 30
    # 19 such requests: not enough to blame the file; SIG-01 fails as before.
    assert one(run(analysis(rows[:19]), only="SIG-01"), "SIG-01")["status"] == "fail"


def test_sig_01_still_judges_the_other_subscriptions():
    # wh_1: 30 mismatched (the file is wrong for it); wh_2: 10 valid and 1 forged accepted.
    rows = [row(600 * n, event_id=f"x{n}", verdict="signature_mismatch") for n in range(30)]
    rows += [row(700 * n, event_id=f"y{n}", sub="wh_2") for n in range(10)]
    rows += [row(99, event_id="f", sub="wh_2", verdict="signature_mismatch")]
    f = one(run(analysis(rows), only="SIG-01", secrets_file="s.json"), "SIG-01")
    assert f["status"] == "fail"
    assert f["reason"].startswith("1 of 1 requests with a non-valid verdict were not answered")
    assert "Left out: 30 requests." in f["reason"] and "s.json" in f["reason"]
    assert f["evidence"]["left_out_requests"] == 30 and f["evidence"]["not_valid"] == 1


def test_sig_01_counts_unreadable_lines_as_unreadable_not_as_the_suspects_requests():
    """A receiver that logs no subscription id, a wrong secrets file (30 mismatched requests
    without one: the requests without a subscription id are the suspect) and 2 unreadable
    lines of the same log: the 30 are left out, the 2 stay counted as unreadable (they were
    left out with the 30: 32 left out, 0 unreadable, beside a verdict table of 2 unreadable)."""
    rows = [
        row(600 * n, event_id=f"x{n}", verdict="signature_mismatch") | {"subscription_id": None}
        for n in range(30)
    ]
    unreadable = row(0, verdict="unreadable", status=None, ms=None, skew=None)
    rows += [unreadable | {"received_at": None, "subscription_id": None, "body": None}] * 2
    f = one(run(analysis(rows), only="SIG-01", secrets_file="wrong.json"), "SIG-01")
    assert f["status"] == "skip" and "wrong.json" in f["reason"]
    ev = f["evidence"]
    assert (ev["left_out_requests"], ev["requests"], ev["unreadable_excluded"]) == (30, 2, 2)


# --------------------------------------------------------------------------------------------
# Acceptance: a simulated month, broken two ways, from raw captures and from a store
# --------------------------------------------------------------------------------------------


def _tiny_notebook(path: Path) -> Path:
    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]})],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def month(tmp_path_factory):
    """October simulated with 100 incidents: every day holds captures (no gap of 24 h; the
    longest quiet span is under 19 h, checked below)."""
    out = tmp_path_factory.mktemp("month") / "sim"
    assert (
        main(["simulate", "--out", str(out), "--seed", "7", "--incidents", "100", "--quiet"]) == 0
    )
    return out


def _report(logs: list[str], secrets: Path, out: Path, *extra: str) -> tuple[int, Path]:
    nb = _tiny_notebook(out.parent / "tiny.ipynb") if "--full" not in extra else None
    extra = tuple(e for e in extra if e != "--full")
    args = ["report", *logs, "--secrets", str(secrets), "--period", "2026-10", "--quiet"]
    args += ["--out", str(out), *(["--notebook", str(nb)] if nb else []), *extra]
    code = main(args)
    (run_dir,) = (out / "2026-10").glob("2*")
    return code, run_dir


def _findings(run_dir: Path) -> dict[str, dict]:
    return {f["check_id"]: f for f in json.loads((run_dir / "findings.json").read_text())}


def _wrong_secrets(right: Path, path: Path) -> Path:
    """The secrets file's format with other secret values (same subscriptions and dates)."""
    data = json.loads(right.read_text())
    for entries in data.values():
        for e in entries:
            e["secret"] = "whsec_" + "0" * 32
    path.write_text(json.dumps(data))
    path.chmod(0o600)
    return path


@pytest.mark.slow
def test_a_wrong_secrets_file_skips_sig_01_with_a_banner_raw_and_store(month, tmp_path, capsys):
    logs = [str(month / "captures")]
    wrong = _wrong_secrets(month / "secrets.json", tmp_path / "wrong.json")
    # The right secrets: the old verdict (this month: one forged request accepted).
    _, right_run = _report(logs, month / "secrets.json", tmp_path / "right")
    right = _findings(right_run)
    assert right["SIG-01"]["status"] == "fail"
    assert "secrets file" not in right["SIG-01"]["reason"]
    assert "check the secrets file" not in str(header(open_run(right_run)))
    # Raw captures, then an evidence store (ingested first, then `report --store`).
    store = tmp_path / "store"
    assert main(["ingest", *logs, "--secrets", str(wrong), "--store", str(store), "--quiet"]) == 0
    runs = {
        "raw": _report(logs, wrong, tmp_path / "raw", "--full"),
        "store": _report([], wrong, tmp_path / "stored", "--store", str(store)),
    }
    capsys.readouterr()
    for how, (_, run_dir) in runs.items():
        f = _findings(run_dir)
        for cid in ("SIG-01", "SIG-02"):
            assert f[cid]["status"] == "skip", (how, cid)
            assert f"the secrets file {wrong} likely holds wrong" in f[cid]["reason"], how
        page = str(header(open_run(run_dir)))
        assert f"Most requests failed verification: check the secrets file {wrong}" in page
        assert "whsec_" not in page and "whsec_" not in (run_dir / "manifest.json").read_text()
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["coverage"]["verification"]["secrets_file"] == str(wrong)
    # The report itself (rendered from raw captures): the banner at the top, before the facts
    html = (runs["raw"][1] / "report.html").read_text()
    banner = html.index("Most requests failed verification")
    assert html.index('class="verdict') < banner < html.index('id="covers"')


@pytest.mark.slow
def test_a_seven_day_capture_gap_fails_cap_01_with_a_banner_raw_and_store(month, tmp_path, capsys):
    logs = tmp_path / "captures"
    shutil.copytree(month / "captures", logs)
    for day in range(10, 17):
        (logs / f"receiver-2026-10-{day}.jsonl").unlink()
    secrets = month / "secrets.json"
    # The whole month first: CAP-01 passes (every day held captures).
    _, whole = _report([str(month / "captures")], secrets, tmp_path / "whole")
    assert _findings(whole)["CAP-01"]["status"] == "pass"
    store = tmp_path / "store"
    assert (
        main(["ingest", str(logs), "--secrets", str(secrets), "--store", str(store), "--quiet"])
        == 0
    )
    runs = {
        "raw": _report([str(logs)], secrets, tmp_path / "raw", "--full"),
        "store": _report([], secrets, tmp_path / "stored", "--store", str(store)),
    }
    capsys.readouterr()
    for how, (code, run_dir) in runs.items():
        cap = _findings(run_dir)["CAP-01"]
        assert cap["status"] == "fail" and code == 1, how
        ev = json.loads(cap["evidence"]) if isinstance(cap["evidence"], str) else cap["evidence"]
        (gap,) = ev["gaps"]
        # The last capture of Oct 9 and the first of Oct 17 bound it (more than 7 whole days).
        assert gap["start"].startswith("2026-10-09") and gap["end"].startswith("2026-10-17"), how
        assert 7 * 24 < gap["length_h"] < 9 * 24
        assert ev["days_without"] == ["2026-10-10 to 2026-10-16"]
        page = str(header(open_run(run_dir)))
        assert "No capture for 24 h or more: 1 span" in page
        assert "no capture on 2026-10-10 to 2026-10-16" in page
        assert "24 of 31 days held captures; none 2026-10-10 to 2026-10-16" in page
    html = (runs["raw"][1] / "report.html").read_text()
    assert html.index('class="verdict') < html.index("No capture for 24 h or more")
    assert "24 of 31 days held captures; none 2026-10-10 to 2026-10-16" in html


def test_audit_open_says_the_secrets_file_is_the_likely_cause_in_its_repr(tmp_path):
    import warnings

    import audit
    from audit.demo.simulate import simulate

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 20 incidents: small groups, imprecise estimates
        demo = simulate(tmp_path / "demo", days=7, incidents=20)
        wrong = _wrong_secrets(Path(demo.secrets), tmp_path / "wrong.json")
        bad = audit.open(logs=demo.captures, secrets=wrong, progress=False)
        good = audit.open(logs=demo.captures, secrets=demo.secrets, progress=False)
    line = f"the secrets file {wrong} likely holds wrong or outdated secrets"
    assert line in repr(bad) and line in bad._repr_html_()
    assert "warning" not in repr(good)
    assert "whsec_" not in repr(bad)


# --------------------------------------------------------------------------------------------
# A missed rotation: the secrets file holds only the old secret (review of issue 42, point 2)
# --------------------------------------------------------------------------------------------


def _timed(sub: str, verdicts: list[str], start_day: float) -> list[dict]:
    """One request an hour from ``start_day`` (days after 2026-10-01) per verdict, in order."""
    t0 = pd.Timestamp("2026-10-01", tz=UTC) + pd.Timedelta(days=start_day)
    return [
        {"subscription_id": sub, "verdict": v, "received_at": t0 + pd.Timedelta(hours=i)}
        for i, v in enumerate(verdicts)
    ]


def test_a_missed_rotation_is_a_suspect_after_the_last_valid_request():
    # wh_a: 60 valid, then (its secret rotated, the file kept the old one) 40 mismatched: 40 of
    # 100 over the period (< half), but 40 of 40 after its last valid request. wh_b: 10 after
    # (< 20): not. wh_c: 40 forged among valid deliveries that go on to the end: not.
    rows = _timed("wh_a", ["valid"] * 60 + ["signature_mismatch"] * 40, 1)
    rows += _timed("wh_b", ["valid"] * 60 + ["signature_mismatch"] * 10, 1)
    rows += _timed("wh_c", ["valid", "signature_mismatch"] * 40 + ["valid"] * 20, 1)
    v = verification_coverage(
        pd.DataFrame(rows),
        start=pd.Timestamp("2026-10-01", tz=UTC),
        end=pd.Timestamp("2026-11-01", tz=UTC),
    )
    assert {e["subscription_id"]: e["suspect"] for e in v} == {
        "wh_a": True,
        "wh_b": False,
        "wh_c": False,
    }
    # The last valid request of wh_a: day 1 + 59 h = 2026-10-04 11:00 UTC
    assert v[0]["span"] == {
        "after": "2026-10-04T11:00:00+00:00",
        "readable": 40,
        "signature_mismatch": 40,
    }
    sentence = secrets_sentence(v, "old.json")
    assert "wh_a (40 of 40 readable after its last valid request, 2026-10-04 11:00 UTC" in sentence


def test_sig_01_leaves_out_only_the_requests_after_a_missed_rotation():
    # wh_1: 30 valid, 1 forged request accepted among them (the receiver's fault), then 25
    # signed with a secret the file lacks, accepted (the receiver has it: not its fault).
    rows = [row(600 * n, event_id=f"x{n}") for n in range(30)]
    rows += [row(600 * 10 + 1, event_id="f", verdict="signature_mismatch")]
    rows += [row(DAY + 600 * n, event_id=f"y{n}", verdict="signature_mismatch") for n in range(25)]
    f = one(run(analysis(rows), only="SIG-01", secrets_file="old.json"), "SIG-01")
    assert f["status"] == "fail"
    assert f["reason"].startswith("1 of 1 requests with a non-valid verdict were not answered")
    assert f["evidence"]["left_out_requests"] == 25 and "old.json" in f["reason"]


def test_sig_01_judges_the_requests_after_a_missing_old_secret():
    # The file holds only wh_1's new secret: its 40 requests before the rotation mismatch (40 of
    # 71 over the period: a suspect), then 30 valid and 1 forged accepted among them, which
    # is the receiver's fault: only the 40 before its first valid request are left out.
    rows = [row(600 * n, event_id=f"x{n}", verdict="signature_mismatch") for n in range(40)]
    rows += [row(DAY + 600 * n, event_id=f"y{n}") for n in range(30)]
    rows += [row(DAY + 600 * 10 + 1, event_id="f", verdict="signature_mismatch")]
    f = one(run(analysis(rows), only="SIG-01", secrets_file="new.json"), "SIG-01")
    assert f["status"] == "fail"
    assert f["reason"].startswith("1 of 1 requests with a non-valid verdict were not answered")
    assert f["evidence"]["left_out_requests"] == 40 and "before its first valid" in f["reason"]


def test_requests_without_a_subscription_carrying_delivered_events_are_a_suspect():
    # A receiver that logs no subscription id, whose subscription the secrets file lacks: its
    # 30 requests mismatch (30 of 130 over the period: not a suspect that way), but they carry
    # the events wh_a received validly: genuine deliveries signed with a secret the file lacks.
    # 30 mismatched requests with events no valid delivery carried stay judged (forgeries).
    t = pd.Timestamp("2026-10-05", tz=UTC)
    valid = [
        {"subscription_id": "wh_a", "verdict": "valid", "event_id": f"e{n}"} for n in range(100)
    ]
    for events, suspect in ((range(30), True), (range(200, 230), False)):
        rows = valid + [
            {"subscription_id": None, "verdict": "signature_mismatch", "event_id": f"e{n}"}
            for n in events
        ]
        v = verification_coverage(
            pd.DataFrame(rows).assign(received_at=t),
            start=pd.Timestamp("2026-10-01", tz=UTC),
            end=pd.Timestamp("2026-11-01", tz=UTC),
        )
        assert {e["subscription_id"]: e["suspect"] for e in v} == {"wh_a": False, None: suspect}
    assert v[-1]["delivered_events"] == 0


def test_a_wrong_secrets_file_is_said_on_stderr_and_no_valid_delivery_is_no_pass(
    month, tmp_path, capsys
):
    # A scheduler reads the exit code and stderr, not the page: with --fail-on critical every
    # failure of this month is below it, and with the wrong file nothing verified (SIG-01,
    # DLV-03 skip): exit 0 said nothing. Now: exit 1, and one line naming the file.
    wrong = _wrong_secrets(month / "secrets.json", tmp_path / "wrong.json")
    capsys.readouterr()
    code, _ = _report([str(month / "captures")], wrong, tmp_path / "r", "--fail-on", "critical")
    err = capsys.readouterr().err
    assert code == 1
    assert "audit: warning: Most requests of wh_main" in err
    assert f"the secrets file {wrong} likely holds wrong" in err
    assert "No request of the period verified: exit 1." in err
    assert "whsec_" not in err
