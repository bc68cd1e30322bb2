"""audit.figures: each function draws a workbench's frames; the stacked verdict bars hold the
counts read with plain json from the raw capture files."""

from __future__ import annotations

import json
import warnings
from collections import Counter

import pandas as pd
import pytest
from matplotlib.figure import Figure

import audit
from audit import figures
from audit.demo.simulate import simulate
from audit.plotting import NO_DATA

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def week(tmp_path_factory):
    root = tmp_path_factory.mktemp("figures")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sim = simulate(root / "demo", days=7, incidents=20)
    return sim, audit.open(logs=sim.captures, secrets=sim.secrets, progress=False)


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def test_every_figure_draws_the_workbench_frames(week):
    _, a = week
    drawn = [
        figures.verdicts(a.deliveries),
        figures.verdicts_over_time(a.deliveries),
        figures.clock_skew(a.deliveries),
        figures.failure_rate(a.attempts),
        figures.retry_delays(a.attempts),
        figures.latency(a.deliveries, a.events),
        figures.km_curves(a.km(by="incident_class")),
    ]
    for fig in drawn:
        assert isinstance(fig, Figure)
        assert NO_DATA not in _texts(fig)
    legend = drawn[-1].axes[0].get_legend()
    groups = sorted(a.takedown_durations["incident_class"].dropna().unique())
    assert [t.get_text().split(" (n=")[0] for t in legend.get_texts()] == groups


def test_verdicts_over_time_stacks_the_days_counts(week):
    sim, a = week
    per_day: Counter[str] = Counter()
    for path in sim.captures:
        for text in path.read_text().splitlines():
            try:
                rec = json.loads(text)
            except ValueError:
                continue  # unreadable: no receipt time
            if "body" not in rec and "body_b64" not in rec:
                continue  # unreadable too
            v = rec["received_at"]
            t = pd.Timestamp(v, unit="s") if isinstance(v, int | float) else pd.Timestamp(v)
            t = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
            per_day[t.strftime("%Y-%m-%d")] += 1
    ax = figures.verdicts_over_time(a.deliveries).axes[0]
    heights: Counter[str] = Counter()
    for bar in ax.patches:
        day = pd.Timestamp("1970-01-01") + pd.Timedelta(days=bar.get_x())
        heights[day.strftime("%Y-%m-%d")] += round(bar.get_height())
    assert heights == per_day


def test_an_empty_frame_says_no_data(week):
    _, a = week
    assert NO_DATA in _texts(figures.verdicts_over_time(a.deliveries.iloc[:0]))
