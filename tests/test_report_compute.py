"""The report's computation, in this process: analyses, tables and controls one after the
other (the controls' warnings become notes), and what the period received (coverage) and the
newest listing snapshot used, for the manifest."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pandas as pd
import pytest

import audit.findings
import audit.report.compute
from audit.report.compute import coverage
from audit.report.explore import demo_inputs
from audit.report.params import parse_period
from audit.report.pipeline import compute
from audit.report.rundir import findings_records
from tests.builders import demo_report_inputs


@pytest.fixture(scope="module")
def demo():
    return demo_inputs()


def _compute(demo):
    period, params, inputs = demo_report_inputs(demo)
    return compute(inputs, params, period)


def test_the_controls_run_in_this_process_and_their_warnings_are_notes(demo, monkeypatch):
    real, ran_in = audit.findings.run_controls, []

    def run_controls(*args, **kwargs):
        ran_in.append(os.getpid())
        warnings.warn("a note from the controls", UserWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(audit.report.compute, "run_controls", run_controls)  # as it calls it
    computed = _compute(demo)
    assert ran_in == [os.getpid()]
    assert "a note from the controls" in computed.notes
    assert sum(f["status"] == "fail" for f in findings_records(computed.findings)) >= 5


def test_the_run_folder_tables_keep_their_order(demo):
    names = list(_compute(demo).tables)
    assert names.index("verdict_counts") < names.index("success_by_subscription")
    assert names.index("success_by_event") < names.index("latency")
    assert names[-1] == "inputs"


def test_coverage_and_the_newest_snapshot_are_those_of_the_demo_files(demo):
    """Known answers from the demo's own files: every capture line is a request of October
    (two unreadable, the planted attacks not valid); the snapshot of 1 November 03:00 is
    after as_of (1 November 00:00) and not used."""
    root = Path(demo["logs"][0])
    lines = [ln for f in sorted(root.glob("*.jsonl")) for ln in f.read_text().splitlines() if ln]
    truth = json.loads((root.parent / "truth.json").read_text())
    times = []
    for ln in lines:
        try:
            raw = json.loads(ln)["received_at"]
        except (ValueError, KeyError, TypeError):
            continue
        t = pd.Timestamp(raw, unit="s") if isinstance(raw, int | float) else pd.Timestamp(raw)
        times.append(t.tz_localize("UTC") if t.tz is None else t.tz_convert("UTC"))
    computed = _compute(demo)
    got = computed.coverage
    assert got["deliveries"] == len(lines)
    assert got["valid"] == len(lines) - len(truth["unreadable_lines"]) - truth["counts"]["attacks"]
    assert pd.Timestamp(got["first_received"]) == min(times)
    assert pd.Timestamp(got["last_received"]) == max(times)
    assert computed.snapshots["newest_taken_at"].startswith("2026-10-16T15:00:00")


def test_a_period_with_no_delivery_covers_nothing():
    empty = pd.DataFrame({"received_at": pd.to_datetime(["2026-09-30T23:59:59Z"])})
    got = coverage(empty, pd.DataFrame(columns=["verdict", "count"]), parse_period("2026-10"))
    assert got == {"deliveries": 0, "valid": 0, "first_received": None, "last_received": None}
