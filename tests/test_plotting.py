"""Figures: structure checked on small hand-made frames, aggregates against hand-computed values.

Known answers come from the spec's published facts (retry delays 30 s, 2 min, 10 min, 1 h; the
5 s timeout; the ±300 s window) and from counting the rows written below by hand.
"""

from __future__ import annotations

import io
import json
import math
import subprocess
import sys
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from audit import plotting as P
from audit.analysis import metrics as M
from audit.analysis.deliveries import events_table, infer_attempts
from audit.analysis.survival import SmallSampleWarning
from audit.analysis.survival_by import kaplan_meier_by
from audit.analysis.takedown import takedown_durations
from audit.errors import ParameterError, SchemaError
from tests.builders import deliveries_frame

T0 = pd.Timestamp("2026-10-01T00:00:00Z")
AS_OF = pd.Timestamp("2026-10-05T00:00:00Z")


# ------------------------------------------------------------------------------------------
# Builders
# ------------------------------------------------------------------------------------------


def deliveries(rows: list[tuple]) -> pd.DataFrame:
    """rows: (subscription, event_id, seconds after T0, status, ms[, verdict[, event]])."""
    recs = []
    for r in rows:
        sub, eid, sec, status, ms = r[:5]
        verdict = r[5] if len(r) > 5 else "valid"
        event = r[6] if len(r) > 6 else "incident.created"
        body = json.dumps({"id": eid, "event": event, "data": {"incidentId": "inc_1"}})
        recs.append(
            {
                "subscription_id": sub,
                "event_id": eid,
                "event": event,
                "event_timestamp": T0 + pd.Timedelta(seconds=sec - 20),
                "incident_id": "inc_1",
                "received_at": T0 + pd.Timedelta(seconds=sec),
                "response_status": status,
                "response_ms": ms,
                "verdict": verdict,
                "body": body.encode(),
                "skew_s": 0.5,
                "source": "log.jsonl",
            }
        )
    return deliveries_frame(recs)  # by column name, in the declared dtypes


DAY = 86400
FAILURE_ROWS = [
    # day 1, wh_a: evt1 fails (503) then succeeds 30 s later; evt2 answered 204 after 6 s.
    ("wh_a", "evt1", 0, 503, 40.0),
    ("wh_a", "evt1", 30, 204, 40.0),
    ("wh_a", "evt2", 3600, 204, 6000.0),
    # day 1, wh_b: evt3 succeeds; evt4's answer was not captured.
    ("wh_b", "evt3", 100, 200, 10.0),
    ("wh_b", "evt4", 200, None, None),
    # day 2: only a forged record, which is not a delivery attempt.
    ("wh_a", "evt9", DAY + 50, 401, 3.0, "signature_mismatch"),
    # day 3, wh_a: evt5 fails with 500.
    ("wh_a", "evt5", 2 * DAY + 100, 500, 12.0),
]

RETRY_ROWS = [
    # A: attempts 1, 2 (+30 s), 3 (+120 s) all seen.
    ("wh_a", "A", 0, 401, 5.0),
    ("wh_a", "A", 30, 401, 5.0),
    ("wh_a", "A", 150, 204, 5.0),
    # B: attempts 2 and 3 never arrived; 750 s = 30 + 120 + 600 is attempt 4.
    ("wh_a", "B", 1000, 503, 5.0),
    ("wh_a", "B", 1750, 204, 5.0),
    # C: 400 s matches no scheduled delay (30±10, 150±15, 750±75, 4350±435).
    ("wh_a", "C", 5000, 503, 5.0),
    ("wh_a", "C", 5400, 204, 5.0),
]


def attempts_of(rows: list[tuple]) -> pd.DataFrame:
    return infer_attempts(deliveries(rows), as_of=AS_OF)


def verified(rows: list[tuple[str, float | None, float]]) -> pd.DataFrame:
    """rows: (verdict, skew_s, seconds after T0) — the columns the signature plots read."""
    return pd.DataFrame(
        {
            "verdict": pd.Series([r[0] for r in rows], dtype="str"),
            "skew_s": pd.Series([r[1] for r in rows], dtype="Float64"),
            "received_at": [T0 + pd.Timedelta(seconds=r[2]) for r in rows],
        }
    )


SKEW_ROWS = [
    ("valid", -1.0, 0),
    ("valid", 2.0, 3600),
    ("valid", 250.0, 7200),
    ("stale_timestamp", 400.0, 9000),
    ("unreadable", None, 9500),
    ("signature_mismatch", 5.0, 10000),
    ("signature_mismatch", 6.0, 11000),
]


def incidents() -> pd.DataFrame:
    """CLIENT_REPORTED: taken down after 2 h and 6 h, one still up at as_of (24 h, censored).
    PHISHFORT_DETECTED: taken down after 1 h and 3 h."""
    t = pd.Timestamp("2024-01-01T00:00:00Z")
    h = pd.Timedelta(hours=1)
    return pd.DataFrame(
        {
            "incident_id": ["i1", "i2", "i3", "i4", "i5"],
            "incident_class": ["phishing"] * 5,
            "source": ["CLIENT_REPORTED"] * 3 + ["PHISHFORT_DETECTED"] * 2,
            "created_at": [t] * 5,
            "burn_started_at": [t] * 5,
            "takedown_at": [t + 2 * h, t + 6 * h, pd.NaT, t + h, t + 3 * h],
            "closed_at": [pd.NaT] * 5,
        }
    )


def km_table(by: str = "source", frame: pd.DataFrame | None = None) -> pd.DataFrame:
    d = takedown_durations(
        incidents() if frame is None else frame, as_of=pd.Timestamp("2024-01-02T00:00:00Z")
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)
        return kaplan_meier_by(d.durations, by)


def render(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=40)
    return buf.getvalue()


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(matplotlib.text.Text)]


def legend_texts(ax) -> list[str]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()] if leg else []


def says_no_data(ax) -> bool:
    return P.NO_DATA in [t.get_text() for t in ax.texts]


def hlines_at(ax, y: float) -> list:
    return [ln for ln in ax.lines if list(ln.get_ydata()) == [y, y]]


# ------------------------------------------------------------------------------------------
# Takedown curves
# ------------------------------------------------------------------------------------------


def test_km_steps_adds_time_zero_and_converts_units():
    steps = M.km_steps(km_table(), unit="h")
    client = steps[steps["group"] == "CLIENT_REPORTED"]
    assert client["time"].tolist() == [0.0, 2.0, 6.0, 24.0]
    assert client["survival"].tolist() == pytest.approx([1.0, 2 / 3, 1 / 3, 1 / 3])
    assert client["censored"].tolist() == [0, 0, 0, 1]
    assert client["n"].unique().tolist() == [3]
    assert client[["ci_lower", "ci_upper"]].iloc[0].tolist() == [1.0, 1.0]
    pf = steps[steps["group"] == "PHISHFORT_DETECTED"]
    assert pf["time"].tolist() == [0.0, 1.0, 3.0]
    assert pf["survival"].tolist() == pytest.approx([1.0, 0.5, 0.0])
    minutes = M.km_steps(km_table(), unit="min")
    assert minutes.loc[minutes["group"] == "CLIENT_REPORTED", "time"].tolist() == [
        0.0,
        120.0,
        360.0,
        1440.0,
    ]


def test_km_steps_without_group_column_and_empty():
    km = km_table().drop(columns="group")
    km = km[km["time"] > 7200]  # one group's tail is fine: only shape matters here
    assert set(M.km_steps(km)["group"]) == {"all"}
    empty = M.km_steps(km_table().iloc[:0])
    assert empty.empty and list(empty.columns) == [
        "group",
        "n",
        "time",
        "survival",
        "ci_lower",
        "ci_upper",
        "censored",
    ]


def test_takedown_curves_one_step_line_and_band_per_group():
    fig = P.plot_takedown_curves(km_table())
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    ax = fig.axes[0]
    steps = [ln for ln in ax.lines if ln.get_drawstyle() == "steps-post"]
    assert len(steps) == 2
    assert list(steps[0].get_xdata()) == [0.0, 2.0, 6.0, 24.0]
    assert list(steps[0].get_ydata()) == pytest.approx([1.0, 2 / 3, 1 / 3, 1 / 3])
    assert list(steps[1].get_xdata()) == [0.0, 1.0, 3.0]
    assert len(ax.collections) == 2  # one CI band per group, coloured like its line
    for line, band in zip(steps, ax.collections, strict=True):
        assert matplotlib.colors.same_color(band.get_facecolor()[0][:3], line.get_color())
    censor = [ln for ln in ax.lines if ln.get_marker() == "|"]
    assert len(censor) == 1 and list(censor[0].get_xdata()) == [24.0]
    assert legend_texts(ax) == ["CLIENT_REPORTED (n=3)", "PHISHFORT_DETECTED (n=2)"]
    assert "95%" in ax.get_legend().get_title().get_text()
    assert ax.get_xlabel() == "time to takedown (h)"
    assert ax.get_title() == "Time to takedown"
    render(fig)


def test_takedown_curves_options():
    fig = P.plot_takedown_curves(km_table(), unit="d", title="By source", show_censored=False)
    ax = fig.axes[0]
    assert ax.get_title() == "By source" and ax.get_xlabel() == "time to takedown (d)"
    assert not [ln for ln in ax.lines if ln.get_marker() == "|"]
    assert list(ax.lines[0].get_xdata()) == pytest.approx([0.0, 2 / 24, 6 / 24, 1.0])
    with pytest.raises(ParameterError, match="unit"):
        P.plot_takedown_curves(km_table(), unit="weeks")


def test_takedown_group_names_are_drawn_literally():
    """A group named like mathtext would break rendering or vanish from the legend."""
    inc = incidents()
    inc["source"] = ["$\\frac{$"] * 3 + ["_hidden"] * 2
    fig = P.plot_takedown_curves(km_table(frame=inc))
    labels = legend_texts(fig.axes[0])
    assert labels == ["\\$\\frac{\\$ (n=3)", "_hidden (n=2)"]
    render(fig)  # unescaped, "$\frac{$" is a mathtext parse error at draw time


def test_takedown_empty():
    fig = P.plot_takedown_curves(km_table().iloc[:0])
    assert len(fig.axes) == 1 and says_no_data(fig.axes[0])
    assert says_no_data(P.plot_takedown_curves(pd.DataFrame()).axes[0])


# ------------------------------------------------------------------------------------------
# Daily failure rate
# ------------------------------------------------------------------------------------------


def test_daily_failure_rate_hand_computed():
    r = M.daily_failure_rate(attempts_of(FAILURE_ROWS))
    days = [T0, T0 + pd.Timedelta(days=1), T0 + pd.Timedelta(days=2)]
    assert r["day"].tolist() == [d for d in days for _ in (0, 1)]
    assert r["subscription_id"].tolist() == ["wh_a", "wh_b"] * 3
    assert r["attempts"].tolist() == [3, 2, 0, 0, 1, 0]
    assert r["answered"].tolist() == [3, 1, 0, 0, 1, 0]
    assert r["failed"].tolist() == [2, 0, 0, 0, 1, 0]  # 503 and a 6 s answer; then a 500
    rates = r["failure_rate"].tolist()
    assert rates[0] == pytest.approx(2 / 3) and rates[1] == 0.0 and rates[4] == 1.0
    assert all(math.isnan(x) for x in (rates[2], rates[3], rates[5]))


def test_daily_failure_rate_without_fill_and_empty():
    r = M.daily_failure_rate(attempts_of(FAILURE_ROWS), fill_days=False)
    assert list(zip(r["subscription_id"], r["failed"], r["answered"], strict=True)) == [
        ("wh_a", 2, 3),
        ("wh_b", 0, 1),
        ("wh_a", 1, 1),
    ]
    empty = M.daily_failure_rate(attempts_of(FAILURE_ROWS).iloc[:0])
    assert empty.empty and "failure_rate" in empty.columns


def test_daily_failure_rate_days_are_utc():
    """23:30 at +02:00 on Oct 1 is 21:30 UTC: day Oct 1, not Oct 2."""
    a = attempts_of([("wh_a", "e", 0, 503, 5.0)])
    a["received_at"] = pd.Series([pd.Timestamp("2026-10-01T23:30:00+02:00")]).astype(
        "datetime64[ns, Europe/Berlin]"
    )
    assert M.daily_failure_rate(a)["day"].tolist() == [T0]


def test_naive_times_are_a_schema_error():
    a = attempts_of(FAILURE_ROWS)
    a["received_at"] = a["received_at"].dt.tz_localize(None)
    with pytest.raises(SchemaError, match="received_at must be timezone-aware"):
        M.daily_failure_rate(a)
    d = verified(SKEW_ROWS)
    d["received_at"] = d["received_at"].dt.tz_localize(None)
    with pytest.raises(SchemaError, match="received_at must be timezone-aware"):
        P.plot_clock_skew(d)


def test_plot_daily_failure_rate_lines_per_subscription():
    fig = P.plot_daily_failure_rate(attempts_of(FAILURE_ROWS))
    ax = fig.axes[0]
    assert len(fig.axes) == 1 and len(ax.lines) == 2
    y = ax.lines[0].get_ydata()
    assert y[0] == pytest.approx(2 / 3) and math.isnan(y[1]) and y[2] == 1.0
    assert legend_texts(ax) == ["wh_a (4 answered)", "wh_b (1 answered)"]
    assert "%" in ax.get_ylabel() and "UTC" in ax.get_xlabel()
    render(fig)


def test_plot_daily_failure_rate_empty_and_schema():
    assert says_no_data(P.plot_daily_failure_rate(attempts_of(FAILURE_ROWS).iloc[:0]).axes[0])
    assert says_no_data(P.plot_daily_failure_rate(pd.DataFrame()).axes[0])
    with pytest.raises(SchemaError, match="attempt_no"):
        P.plot_daily_failure_rate(deliveries(FAILURE_ROWS))


# ------------------------------------------------------------------------------------------
# Retry delays
# ------------------------------------------------------------------------------------------


def test_retry_delays_kinds():
    r = M.retry_delays(attempts_of(RETRY_ROWS)).sort_values(["event_id", "attempt_no"])
    assert r["event_id"].tolist() == ["A", "A", "B", "C"]
    assert r["attempt_no"].tolist() == [2, 3, 4, 2]
    assert r["delay_s"].tolist() == pytest.approx([30, 120, 750, 400])
    assert r["expected_delay_s"].tolist() == [30, 120, 750, 30]
    assert r["missing_before"].tolist() == [0, 0, 2, 0]
    assert r["kind"].tolist() == ["on_schedule", "on_schedule", "after_missing", "off_schedule"]
    assert M.retry_delays(attempts_of(RETRY_ROWS[:1])).empty  # a first attempt is no retry


def test_plot_retry_delays_schedule_lines_and_points():
    fig = P.plot_retry_delays(attempts_of(RETRY_ROWS))
    ax = fig.axes[0]
    assert len(fig.axes) == 1 and ax.get_yscale() == "log"
    segs = [c for c in ax.collections if isinstance(c, matplotlib.collections.LineCollection)]
    assert len(segs) == 1
    ys = [seg[0][1] for seg in segs[0].get_segments()]
    assert ys == [30, 120, 600, 3600]  # spec section 6: 30 s, 2 min, 10 min, 1 h
    points = [c for c in ax.collections if isinstance(c, matplotlib.collections.PathCollection)]
    sizes = [len(p.get_offsets()) for p in points]
    assert sizes == [2, 1, 1]
    xs = np.concatenate([p.get_offsets()[:, 0] for p in points])
    assert np.all(np.abs(xs - np.round(xs)) <= 0.25)  # jitter stays around the attempt number
    assert legend_texts(ax) == [
        "schedule (shaded: tolerance)",
        "on schedule (n=2)",
        "after missed attempt(s) (n=1)",
        "off schedule (n=1)",
    ]
    assert {"30 s", "2 min", "10 min", "1 h"} <= set(texts(fig))
    render(fig)


def test_plot_retry_delays_empty():
    assert says_no_data(P.plot_retry_delays(attempts_of(RETRY_ROWS[:1])).axes[0])
    assert says_no_data(P.plot_retry_delays(pd.DataFrame()).axes[0])


# ------------------------------------------------------------------------------------------
# Latencies
# ------------------------------------------------------------------------------------------


def test_log_bins():
    assert P.log_bins([1.0, 1000.0], per_decade=1).tolist() == [1.0, 10.0, 100.0, 1000.0]
    assert P.log_bins([2.0, 50.0], per_decade=1).tolist() == [1.0, 10.0, 100.0]
    assert P.log_bins([-3.0, 0.0, np.nan, 10.0], per_decade=2).tolist() == pytest.approx(
        [10.0, 10**1.5]
    )
    assert P.log_bins([0.0, -1.0]).size == 0
    # a float array (as the figures pass it) is read as it is, with the same bins
    drawn = np.array([-3.0, 0.0, np.nan, np.inf, 10.0, 31.0], dtype=np.float32)
    assert P.log_bins(drawn, per_decade=2).tolist() == pytest.approx([10.0, 10**1.5])  # by hand
    edges = P.log_bins([0.37, 8975.0])
    assert edges[0] <= 0.37 and edges[-1] >= 8975.0
    assert np.allclose(np.diff(np.log10(edges)), 0.1)
    with pytest.raises(ParameterError):
        P.log_bins([1.0], per_decade=0)


def latency_frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    attempts = pd.DataFrame(
        {
            "verdict": ["valid"] * 5 + ["signature_mismatch"],
            "response_ms": pd.array([10.0, 100.0, 1000.0, 6000.0, None, 50000.0], "Float64"),
            "skew_s": pd.array([0.1] * 6, dtype="Float64"),
        }
    )
    events = pd.DataFrame(
        {
            "is_test": [False, False, False, False, True],
            "emission_latency_s": pd.array([5.0, 50.0, -2.0, None, 500.0], dtype="Float64"),
        }
    )
    return attempts, events


def test_plot_latency_distributions():
    fig = P.plot_latency_distributions(*latency_frames())
    assert len(fig.axes) == 2
    ack, emit = fig.axes
    assert ack.get_xscale() == emit.get_xscale() == "log"
    assert sum(p.get_height() for p in ack.patches) == 4  # valid, answered
    assert sum(p.get_height() for p in emit.patches) == 2  # non-test, positive
    timeout = [ln for ln in ack.lines if list(ln.get_xdata()) == [5000, 5000]]
    assert len(timeout) == 1
    # median of 10, 100, 1000, 6000 is 550; p95 (linear) is 1000 + 0.85 * 5000 = 5250
    assert legend_texts(ack) == [
        "timeout 5000 ms (1 of 4 over)",
        "median 550 ms",
        "p95 5250 ms",
    ]
    # median of 5, 50 and -2 (drawn or not, as in latency_summary); the test event is left out
    assert legend_texts(emit)[0] == "median 5 s"
    assert "1 value(s) <= 0 s not shown" in [t.get_text() for t in emit.texts]
    assert "ms" in ack.get_xlabel() and "(s" in emit.get_xlabel()
    render(fig)


def test_plot_latency_distributions_draws_the_summary_it_is_given():
    """The report passes its ``latency`` table (the same rows' summary) rather than have it
    computed again; the lines drawn are then that table's (hand-made here: 500 ms, 4000 ms,
    7 s and 9 s, none of which the frames would give)."""
    summary = pd.DataFrame(
        {
            "metric": ["ack_latency_ms", "emission_latency_s", "clock_skew_s"],
            "n": [4, 3, 4],
            "p50": [500.0, 7.0, 0.1],
            "p95": [4000.0, 9.0, 0.1],
        }
    )
    fig = P.plot_latency_distributions(*latency_frames(), summary=summary)
    ack, emit = fig.axes
    assert legend_texts(ack)[1:] == ["median 500 ms", "p95 4000 ms"]
    assert legend_texts(emit) == ["median 7 s", "p95 9 s"]
    # A summary without those rows (a table from elsewhere) is not used.
    fig = P.plot_latency_distributions(*latency_frames(), summary=summary.iloc[2:])
    assert legend_texts(fig.axes[0])[1:] == ["median 550 ms", "p95 5250 ms"]
    # Nor an empty one (a quiet period's table).
    fig = P.plot_latency_distributions(*latency_frames(), summary=pd.DataFrame())
    assert legend_texts(fig.axes[0])[1:] == ["median 550 ms", "p95 5250 ms"]
    render(fig)


def test_plot_latency_distributions_empty_sides():
    attempts, events = latency_frames()
    fig = P.plot_latency_distributions(attempts.iloc[:0], events)
    assert len(fig.axes) == 2 and says_no_data(fig.axes[0]) and not says_no_data(fig.axes[1])
    fig = P.plot_latency_distributions(pd.DataFrame(), pd.DataFrame())
    assert len(fig.axes) == 2 and all(says_no_data(ax) for ax in fig.axes)
    render(fig)


# ------------------------------------------------------------------------------------------
# Clock skew and verdicts
# ------------------------------------------------------------------------------------------


def test_plot_clock_skew_legend_sits_beside_the_axes_over_no_point():
    fig = P.plot_clock_skew(verified(SKEW_ROWS))
    ax = fig.axes[0]
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)  # the constrained layout is done on drawing
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.x0 >= ax.get_window_extent(renderer).x1  # right of the plotting area
    assert legend.x1 <= fig.bbox.x1  # and still inside the figure (the layout made room)


def test_plot_clock_skew_window_and_points():
    fig = P.plot_clock_skew(verified(SKEW_ROWS))
    ax = fig.axes[0]
    assert len(fig.axes) == 1
    assert len(hlines_at(ax, 300)) == 1 and len(hlines_at(ax, -300)) == 1
    assert ax.get_yscale() == "linear"  # 400 s is within twice the window
    points = [c for c in ax.collections if isinstance(c, matplotlib.collections.PathCollection)]
    assert [len(p.get_offsets()) for p in points] == [1, 3, 2]  # the unreadable row has no skew
    assert legend_texts(ax) == [
        "accepted window ±300 s",
        "stale timestamp (n=1)",  # codes as words (issue 42)
        "valid (n=3)",
        "signature mismatch (n=2)",
    ]
    colours = {tuple(p.get_facecolor()[0][:3]) for p in points}
    assert len(colours) == 3  # one colour per verdict
    valid = points[1].get_offsets()[:, 1]
    assert sorted(valid.tolist()) == [-1.0, 2.0, 250.0]
    render(fig)


def test_plot_clock_skew_scale_and_tolerance():
    far = verified([("valid", 1.0, 0), ("stale_timestamp", 17000.0, 60)])
    assert P.plot_clock_skew(far).axes[0].get_yscale() == "symlog"
    assert P.plot_clock_skew(far, yscale="linear").axes[0].get_yscale() == "linear"
    ax = P.plot_clock_skew(verified(SKEW_ROWS), tolerance_s=60).axes[0]
    assert len(hlines_at(ax, 60)) == 1 and len(hlines_at(ax, -60)) == 1
    with pytest.raises(ParameterError):
        P.plot_clock_skew(far, yscale="log")


def test_plot_clock_skew_empty():
    only_unreadable = verified([("unreadable", None, 0)])
    assert says_no_data(P.plot_clock_skew(only_unreadable).axes[0])
    assert says_no_data(P.plot_clock_skew(pd.DataFrame()).axes[0])
    with pytest.raises(SchemaError, match="skew_s"):
        P.plot_clock_skew(verified(SKEW_ROWS).drop(columns="skew_s"))


def test_plot_verdict_counts_bars_equal_hand_counts():
    fig = P.plot_verdict_counts(verified(SKEW_ROWS))
    ax = fig.axes[0]
    assert len(fig.axes) == 1 and len(ax.patches) == 4
    # check order (docs/tables.md): unreadable, ..., stale_timestamp, ..., valid, ..., mismatch
    assert [p.get_width() for p in ax.patches] == [1, 1, 3, 2]
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "unreadable",
        "stale timestamp",  # codes as words (issue 42)
        "valid",
        "signature mismatch",
    ]
    assert ax.get_xscale() == "linear"
    assert "3 (42.9%)" in texts(fig)  # 3 of 7
    assert ax.get_title() == "Signature verdicts (7 records)"
    render(fig)


def test_plot_verdict_counts_log_scale_for_wide_ranges():
    many = verified([("valid", 0.0, i) for i in range(300)] + [("no_secret", 0.0, 0)])
    fig = P.plot_verdict_counts(many)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert [p.get_width() for p in ax.patches] == [1, 300]
    assert "1 (0.33%)" in texts(fig)
    assert P.plot_verdict_counts(many, log=False).axes[0].get_xscale() == "linear"
    render(fig)


def test_plot_verdict_counts_empty():
    assert says_no_data(P.plot_verdict_counts(verified(SKEW_ROWS).iloc[:0]).axes[0])
    assert says_no_data(P.plot_verdict_counts(pd.DataFrame()).axes[0])


# ------------------------------------------------------------------------------------------
# All functions
# ------------------------------------------------------------------------------------------


def every_figure() -> list[Figure]:
    a = attempts_of(FAILURE_ROWS + RETRY_ROWS)
    ev = events_table(a, as_of=AS_OF)
    return [
        P.plot_takedown_curves(km_table()),
        P.plot_takedown_curves(pd.DataFrame()),
        P.plot_daily_failure_rate(a),
        P.plot_daily_failure_rate(pd.DataFrame()),
        P.plot_retry_delays(a),
        P.plot_retry_delays(pd.DataFrame()),
        P.plot_latency_distributions(a, ev),
        P.plot_latency_distributions(pd.DataFrame(), pd.DataFrame()),
        P.plot_clock_skew(verified(SKEW_ROWS)),
        P.plot_clock_skew(pd.DataFrame()),
        P.plot_verdict_counts(verified(SKEW_ROWS)),
        P.plot_verdict_counts(pd.DataFrame()),
    ]


def test_no_pyplot_global_state():
    plt.close("all")
    figs = every_figure()
    assert plt.get_fignums() == []
    render(figs[0])
    assert all(type(f) is Figure for f in figs)


@pytest.mark.slow  # a fresh interpreter (subprocess)
def test_module_does_not_import_pyplot():
    code = "import sys, audit.plotting; print('matplotlib.pyplot' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pipeline_frames_render_without_urls():
    """Frames from the pipeline carry the delivery URL: no figure may show it."""
    a = attempts_of(FAILURE_ROWS + RETRY_ROWS)
    a["url"] = "https://evil.example/login"
    ev = events_table(a, as_of=AS_OF)
    figs = [
        P.plot_daily_failure_rate(a),
        P.plot_retry_delays(a),
        P.plot_latency_distributions(a, ev),
        P.plot_clock_skew(a),
        P.plot_verdict_counts(a),
    ]
    for fig in figs:
        render(fig)
        drawn = " ".join(texts(fig))
        assert "evil" not in drawn and "http" not in drawn
        assert not any(says_no_data(ax) for ax in fig.axes)


#: The drawing API the notebooks and the report's figures call, as it was before plotting was
#: split (name -> parameters as (name, kind, default)); a refactoring must keep it.
PLOT_SIGNATURES = {
    "plot_clock_skew": [
        ("deliveries", "POSITIONAL_OR_KEYWORD", None),
        ("tolerance_s", "KEYWORD_ONLY", 300),
        ("yscale", "KEYWORD_ONLY", "auto"),
        ("title", "KEYWORD_ONLY", None),
    ],
    "plot_daily_failure_rate": [
        ("attempts", "POSITIONAL_OR_KEYWORD", None),
        ("title", "KEYWORD_ONLY", None),
    ],
    "plot_latency_distributions": [
        ("attempts", "POSITIONAL_OR_KEYWORD", None),
        ("events", "POSITIONAL_OR_KEYWORD", None),
        ("title", "KEYWORD_ONLY", None),
        ("summary", "KEYWORD_ONLY", None),  # added since: a keyword with a default
    ],
    "plot_retry_delays": [
        ("attempts", "POSITIONAL_OR_KEYWORD", None),
        ("tolerance", "KEYWORD_ONLY", None),
        ("title", "KEYWORD_ONLY", None),
    ],
    "plot_takedown_curves": [
        ("km", "POSITIONAL_OR_KEYWORD", None),
        ("unit", "KEYWORD_ONLY", "h"),
        ("title", "KEYWORD_ONLY", None),
        ("show_censored", "KEYWORD_ONLY", True),
    ],
    "plot_verdict_counts": [
        ("deliveries", "POSITIONAL_OR_KEYWORD", None),
        ("log", "KEYWORD_ONLY", None),
        ("title", "KEYWORD_ONLY", None),
    ],
}


def test_plotting_keeps_its_drawing_api_and_only_draws():
    import inspect

    assert sorted(n for n in P.__all__ if n.startswith("plot_")) == sorted(PLOT_SIGNATURES)
    for name, expected in PLOT_SIGNATURES.items():
        params = inspect.signature(getattr(P, name)).parameters.values()
        got = [
            (p.name, p.kind.name, None if p.default is inspect.Parameter.empty else p.default)
            for p in params
        ]
        assert got == expected, name
    # the frames live in audit.analysis.metrics; plotting exports only drawing
    assert set(P.__all__) == {*PLOT_SIGNATURES, "NO_DATA", "log_bins"}


def test_a_report_cuts_its_deliveries_by_period_once_per_table():
    """Figures share one period cut of the run's deliveries; a replaced table is cut anew."""
    from audit.report import figures
    from audit.report.rundir import RunData

    times = pd.to_datetime(["2026-09-30T23:00Z", "2026-10-02T00:00Z", "2026-11-01T00:00Z"])
    d = pd.DataFrame({"received_at": times, "source": "a.jsonl", "verdict": "valid"})
    period = {"label": "2026-10", "start": "2026-10-01T00:00Z", "end": "2026-11-01T00:00Z"}
    run = RunData({"period": period}, pd.DataFrame(), tables={"deliveries": d})
    first = figures._period_deliveries(run)
    assert first["received_at"].tolist() == [times[1]]  # the period is [start, end)
    assert figures._period_deliveries(run) is first
    run.tables["deliveries"] = d.iloc[:1]  # an analyst replaces the table: cut anew
    assert figures._period_deliveries(run).empty


def test_thinned_keeps_two_points_a_cell_and_every_point_not_finite(monkeypatch):
    import audit.plotting.base as base

    monkeypatch.setattr(base, "THIN_ABOVE", 3)
    # A 1 x 1 inch figure: 200 x 200 cells over the points' range, here [0, 1] on both axes.
    x = np.array([0.0, 0.0, 0.001, 0.0, 1.0, np.nan, 0.5, 0.5, 0.5])
    y = np.array([0.0, 0.0, 0.002, 0.0, 1.0, 0.5, 0.5, 0.5, np.inf])
    # Cells by hand: rows 0-3 share cell (0, 0) (0.001 * 200 = 0.2), row 4 is alone in the
    # top corner, 6 and 7 share the middle cell; 5 and 8 are not finite.
    assert base.thinned(x, y, size_in=(1.0, 1.0)).tolist() == [0, 1, 4, 5, 6, 7, 8]
    monkeypatch.setattr(base, "THIN_ABOVE", 9)  # few points: all drawn
    assert base.thinned(x, y, size_in=(1.0, 1.0)).tolist() == list(range(9))


def test_a_dense_clock_skew_is_drawn_from_fewer_points_to_the_same_picture(monkeypatch):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    import audit.plotting.base as base

    rng = np.random.default_rng(3)
    n = 120_000
    secs = np.sort(rng.uniform(0, 31 * 86400, n))
    skew = np.round(rng.gamma(2.0, 0.2, n), 3)  # a dense band of small skews
    skew[::5000] = rng.uniform(-9000, 9000, len(skew[::5000]))  # replays far outside it
    rows = [("valid", float(s), float(t)) for s, t in zip(skew, secs, strict=True)]
    rows += [("stale_timestamp", 900.0, 100.0)]
    frame = verified(rows)

    def drawn(limit: int):
        monkeypatch.setattr(base, "THIN_ABOVE", limit)
        fig = P.plot_clock_skew(frame)
        fig.set_dpi(96)
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        points = sum(len(c.get_offsets()) for c in fig.axes[0].collections)
        pixels = np.asarray(canvas.buffer_rgba())[..., :3].astype(int)
        return points, pixels, legend_texts(fig.axes[0])

    every, whole, labels = drawn(10**9)
    some, thin, thin_labels = drawn(20_000)
    assert every == n + 1 and some < n // 2
    assert (
        thin_labels
        == labels
        == [
            "accepted window ±300 s",
            "stale timestamp (n=1)",
            f"valid (n={n})",
        ]
    )
    off = np.abs(whole - thin).max(axis=2)
    assert (off > 64).sum() <= off.size // 2000  # at most 0.05 % of the pixels visibly differ


def _tick_texts(axis) -> list[str]:
    """The visible labels of an axis after drawing (major and minor)."""
    labels = axis.get_majorticklabels() + axis.get_minorticklabels()
    return [t.get_text() for t in labels if t.get_visible() and t.get_text()]


def test_log_axes_are_labelled_in_plain_numbers_not_mathtext():
    many = verified([("valid", 0.0, i) for i in range(300)] + [("no_secret", 0.0, 0)])
    fig = P.plot_verdict_counts(many)
    render(fig)
    labels = _tick_texts(fig.axes[0].xaxis)
    # by hand: the decades 1, 10, 100 and 1,000 of a 1-1,200 log axis
    assert {"1", "10", "100", "1,000"} <= set(labels)
    assert not any("$" in t or "^" in t for t in labels), labels

    far = verified([("valid", 1.0, 0), ("stale_timestamp", 17000.0, 60), ("valid", -900.0, 61)])
    fig = P.plot_clock_skew(far)
    render(fig)
    labels = _tick_texts(fig.axes[0].yaxis)
    # symlog: the negative decades keep their sign (U+2212, matplotlib's minus)
    assert "\u2212100" in labels and "100" in labels and "10,000" in labels, labels
    assert not any("$" in t for t in labels), labels


def test_plain_log_labels_of_small_and_minor_values():
    fig, (ax,) = P.base.new_figure()
    ax.plot([0.001, 0.5], [1, 2])
    ax.set_xscale("log")
    P.base.plain_log_ticks(ax.xaxis)
    render(fig)
    assert {"0.001", "0.01", "0.1"} <= set(_tick_texts(ax.xaxis))
    fig, (ax,) = P.base.new_figure()
    ax.plot([200, 700], [1, 2])  # less than a decade: matplotlib labels minor ticks
    ax.set_xscale("log")
    P.base.plain_log_ticks(ax.xaxis)
    render(fig)
    labels = _tick_texts(ax.xaxis)
    assert {"200", "300", "400", "600"} <= set(labels), labels
    fig, (ax,) = P.base.new_figure()
    ax.plot([1e-10, 1e-6], [1, 2])  # tiny values keep their value, with an exponent
    ax.set_xscale("log")
    P.base.plain_log_ticks(ax.xaxis)
    render(fig)
    labels = _tick_texts(ax.xaxis)
    assert {"1e\u221210", "1e\u221208", "1e\u221206"} <= set(labels) and "0" not in labels, labels


def test_the_latency_figure_draws_the_events_of_its_period_as_the_latency_table_counts_them(
    monkeypatch,
):
    """A store's events table also holds the events of the day before the period (read for
    retry inference): the figure drew them too, so its emission-latency quantile lines were
    not the table's. It draws the events first received in the period, as the table counts."""
    import audit.plotting
    from audit.report import figures
    from audit.report.rundir import RunData

    times = pd.to_datetime(["2026-09-30T23:00Z", "2026-10-02T00:00Z", "2026-11-01T00:00Z"])
    d = pd.DataFrame(
        {"received_at": times, "source": "a.jsonl", "verdict": "valid", "response_ms": 40.0}
    )
    e = pd.DataFrame(
        {"first_received_at": times, "is_test": False, "emission_latency_s": [900.0, 5.0, 7.0]}
    )
    period = {"label": "2026-10", "start": "2026-10-01T00:00Z", "end": "2026-11-01T00:00Z"}
    run = RunData({"period": period}, pd.DataFrame(), tables={"deliveries": d, "events": e})
    drawn = []
    monkeypatch.setattr(
        audit.plotting, "plot_latency_distributions", lambda a, ev, **k: drawn.append(ev)
    )
    monkeypatch.setattr(figures, "_embed", lambda *a, **k: None)
    figures.latency.__wrapped__(run)
    assert drawn[0]["emission_latency_s"].tolist() == [5.0]  # [start, end), as the table
