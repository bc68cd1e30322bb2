"""The report's computation: the controls run in a forked process beside the report tables,
and the figures' tables are handed over before the other summaries are built."""

from __future__ import annotations

import os
import warnings

import pandas as pd
import pytest

import audit.findings
import audit.memory
import audit.report.compute
from audit.ingest.load import default_workers
from audit.report import figures
from audit.report.explore import demo_inputs
from audit.report.pipeline import compute
from audit.report.rundir import findings_records
from audit.report.tables import FIGURE_TABLES
from tests.builders import demo_report_inputs

#: Where no fork may be made (one usable CPU), the controls always run in the caller.
needs_fork = pytest.mark.skipif(default_workers() < 2, reason="no fork with one usable CPU")


@pytest.fixture(scope="module")
def demo():
    return demo_inputs()


def _compute(demo, on_tables=None):
    period, params, inputs = demo_report_inputs(demo)
    return compute(inputs, params, period, on_tables=on_tables)


def _controls_noting_their_process(monkeypatch, where, *, die_aside=False):
    """run_controls, wrapped: it writes its process id into ``where`` and warns (as a control
    may); with ``die_aside``, a forked process running it dies instead."""
    real, parent = audit.findings.run_controls, os.getpid()

    def run_controls(*args, **kwargs):
        if die_aside and os.getpid() != parent:
            os._exit(9)
        with open(where, "a") as f:
            f.write(f"{os.getpid()}\n")
        warnings.warn("a note from the controls", UserWarning, stacklevel=1)
        return real(*args, **kwargs)

    monkeypatch.setattr(audit.report.compute, "run_controls", run_controls)  # as it calls it


@needs_fork
def test_the_controls_run_aside_give_the_findings_and_notes_of_the_controls_run_here(
    demo, tmp_path, monkeypatch
):
    monkeypatch.setattr(audit.memory, "resident_memory", lambda: 0)  # the gate lets it fork
    _controls_noting_their_process(monkeypatch, tmp_path / "aside")
    aside = _compute(demo)
    (pid,) = map(int, (tmp_path / "aside").read_text().split())
    assert pid != os.getpid()  # they ran in a forked process

    monkeypatch.setattr(audit.report.compute, "aside_if_room", lambda fn, **kw: None)
    _controls_noting_their_process(monkeypatch, tmp_path / "here")
    here = _compute(demo)
    assert list(map(int, (tmp_path / "here").read_text().split())) == [os.getpid()]

    want = findings_records(here.findings)
    assert sum(f["status"] == "fail" for f in want) >= 5  # the demo's planted failures
    assert findings_records(aside.findings) == want
    pd.testing.assert_frame_equal(aside.findings, here.findings)
    assert "a note from the controls" in here.notes  # the child's warning is a note too
    assert aside.notes == here.notes


def test_a_controls_process_that_dies_leaves_the_controls_to_this_one(demo, tmp_path, monkeypatch):
    want = findings_records(_compute(demo).findings)
    _controls_noting_their_process(monkeypatch, tmp_path / "ran", die_aside=True)
    got = _compute(demo)
    assert list(map(int, (tmp_path / "ran").read_text().split())) == [os.getpid()]
    assert findings_records(got.findings) == want


def test_the_figures_tables_are_handed_over_before_the_other_summaries(demo):
    """``on_tables`` gets every table the figures read (the child drawing them is forked
    then), equal to the run folder's; the run folder's tables keep their order."""
    got = []
    computed = _compute(demo, on_tables=got.append)
    (early,) = got
    assert set(figures._READ) == set(FIGURE_TABLES) <= set(early)
    assert "success_by_event" not in early  # built after the hand-over
    for name in FIGURE_TABLES:
        pd.testing.assert_frame_equal(early[name], computed.tables[name])
    names = list(computed.tables)
    assert names.index("verdict_counts") < names.index("success_by_subscription")
    assert names.index("success_by_event") < names.index("latency")
    assert names[-1] == "inputs"
