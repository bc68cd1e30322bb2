"""The report's figures read only the columns they draw, and draw the same from either source."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.analysis.metrics import plain_label, plain_labels
from audit.report import figures
from audit.report.explore import explore
from audit.report.rundir import open_run, write_tables

FIGURES = ("verdicts", "clock_skew", "daily_failures", "latency", "retry_delays", "takedown")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo month explored in memory, and the same tables written as a run folder."""
    memory = explore(period_start="2026-10-01", period_end="2026-11-01")
    folder = tmp_path_factory.mktemp("run")
    write_tables(memory.tables, folder / "tables")
    (folder / "manifest.json").write_text(json.dumps(memory.manifest))
    (folder / "findings.json").write_text("[]")
    return memory, folder


def test_figures_read_only_the_columns_they_draw_from_a_run_folder(demo_run):
    _, folder = demo_run
    run = open_run(folder)
    for name in FIGURES:
        getattr(figures, name)(run)
    # Neither wide table was read whole: only cuts of the columns drawn.
    assert "deliveries" not in run.tables and "events" not in run.tables
    drawn = figures._period_deliveries(run)
    assert set(drawn.columns) <= set(figures._DRAWN) and len(drawn.columns) < 15
    whole = pd.read_parquet(folder / "tables" / "deliveries.parquet")
    assert len(whole.columns) > len(drawn.columns)
    cut = run.table("deliveries", ["verdict", "no_such_column", "skew_s"])
    assert list(cut.columns) == ["verdict", "skew_s"]  # absent columns are left out
    pd.testing.assert_frame_equal(cut, whole[["verdict", "skew_s"]])
    assert run.table("deliveries", ["verdict", "no_such_column", "skew_s"]) is cut  # kept
    assert list(run.table("deliveries", "verdict").columns) == ["verdict"]  # one name, a column


def test_figures_from_a_folder_equal_figures_from_memory(demo_run):
    """Whole tables in memory (an analyst's run) and column cuts read from files give the
    same pictures, byte for byte."""
    memory, folder = demo_run
    run = open_run(folder)
    for name in FIGURES:
        assert str(getattr(figures, name)(run)) == str(getattr(figures, name)(memory)), name


def test_a_column_cut_of_a_table_in_memory_follows_a_replaced_table(demo_run):
    memory, _ = demo_run
    run = type(memory)(memory.manifest, memory.findings, {}, None, dict(memory.tables))
    first = run.table("deliveries", ["verdict"])
    assert first is run.table("deliveries", ["verdict"])
    run.tables["deliveries"] = memory.tables["deliveries"].iloc[:3]
    assert len(run.table("deliveries", ["verdict"])) == 3


labels = st.lists(st.one_of(st.none(), st.sampled_from(["a", "b", "", " x", "(missing)"])))


@given(values=labels, dtype=st.sampled_from(["str", "string", "object"]))
def test_labels_by_distinct_value_equal_labels_one_by_one(values, dtype):
    s = pd.Series(values, dtype=dtype, index=np.arange(len(values)) * 2 + 5, name="sub")
    pd.testing.assert_series_equal(plain_labels(s), s.map(plain_label))


def test_labels_of_an_object_column_keep_equal_values_of_other_types_apart():
    s = pd.Series([1, 1.0, True, "1", float("nan"), None], dtype=object)
    assert plain_labels(s).tolist() == ["1", "1.0", "True", "1", "(missing)", "(missing)"]


def _png_size(html) -> tuple[int, int]:
    import base64
    import re
    import struct

    png = base64.b64decode(re.search(r"base64,([^\"]+)", str(html)).group(1))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])  # IHDR width, height


def test_an_embedded_figure_keeps_its_size_and_grows_only_to_show_all():
    from audit.plotting import plot_daily_failure_rate
    from audit.report.plotting import embed

    n = 2000
    rng = np.random.default_rng(0)
    times = pd.Timestamp("2026-10-01", tz="UTC") + pd.to_timedelta(
        rng.integers(0, 30 * 86400, n), unit="s"
    )

    def attempts(subs: int) -> pd.DataFrame:
        names = [f"wh_subscription_{i:02d}" for i in range(subs)]
        return pd.DataFrame(
            {
                "received_at": times,
                "attempt_no": 1,
                "success": rng.random(n) > 0.1,
                "subscription_id": rng.choice(names, n),
            }
        )

    few = plot_daily_failure_rate(attempts(3))
    w, h = few.get_size_inches()
    assert _png_size(embed(few, "x")) == (round(w * 96), round(h * 96))  # drawn as laid out
    # A legend of 22 subscriptions is taller than the axes: the picture grows to show it all
    # instead of cutting off its top rows and the title.
    many = plot_daily_failure_rate(attempts(22))
    w, h = many.get_size_inches()
    assert _png_size(embed(many, "x"))[1] > h * 96 + 10


def test_a_table_that_cannot_be_written_names_its_file(tmp_path, monkeypatch):
    """Arrow's write error names no file ("Error writing bytes to file. Detail: [errno 28]"):
    a full disk during a report must say which file of the run folder failed."""
    import pandas as pd

    from audit.errors import OutputError
    from audit.report.rundir import write_tables

    def full(self, path, **kw):
        raise OSError("Error writing bytes to file. Detail: [errno 28] No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_parquet", full)
    with pytest.raises(OutputError, match=r"events\.parquet: cannot write \(Error writing"):
        write_tables({"events": pd.DataFrame({"a": [1]})}, tmp_path / "tables")
