"""Figures of a workbench's frames (:func:`audit.open`): frames in, matplotlib Figures out.

Each function takes the tables of a :class:`~audit.workbench.Workbench` (or any frame with the
same columns, e.g. one cut to a subscription) and returns a :class:`matplotlib.figure.Figure`,
drawn without pyplot (nothing shown or saved: a notebook cell shows the value it ends with,
``fig.savefig(path)`` saves it). Empty frames give a figure that says "no data". They draw with
:mod:`audit.plotting`, the report's figures.

======================================  ======================================================
``verdicts(a.deliveries)``              requests per signature verdict
``verdicts_over_time(a.deliveries)``    requests per day (``freq``) by verdict, stacked
``clock_skew(a.deliveries)``            receipt time minus signed timestamp, by verdict
``failure_rate(a.attempts)``            daily failure rate of attempts, one line per subscription
``retry_delays(a.attempts)``            each retry's delay against the published schedule
``latency(a.deliveries, a.events)``     acknowledgement and emission latency histograms
``km_curves(a.km(by="incident_class"))``  time to takedown, Kaplan-Meier curves with bands
======================================  ======================================================
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from audit.errors import ParameterError
from audit.ingest.verification import verdict_counts
from audit.plotting import (
    plot_clock_skew,
    plot_daily_failure_rate,
    plot_latency_distributions,
    plot_retry_delays,
    plot_takedown_curves,
    plot_verdict_counts,
)
from audit.plotting.base import date_axis, naive_utc, new_figure, no_data, safe_label

__all__ = [
    "clock_skew",
    "failure_rate",
    "km_curves",
    "latency",
    "retry_delays",
    "verdicts",
    "verdicts_over_time",
]


def verdicts(deliveries: pd.DataFrame) -> Figure:
    """Requests per signature verdict, in check order (horizontal bars, count and share)."""
    return plot_verdict_counts(deliveries)


def verdicts_over_time(deliveries: pd.DataFrame, *, freq: str = "D") -> Figure:
    """Requests per ``freq`` (a pandas frequency: ``"D"`` days, ``"h"`` hours, ``"W"`` weeks)
    by verdict, stacked bars; requests without a receipt time are left out.

    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> d = pd.DataFrame({"received_at": [t, t, t + pd.Timedelta("1D")],
    ...                   "verdict": ["valid", "signature_mismatch", "valid"]})
    >>> ax = verdicts_over_time(d).axes[0]
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['valid (2)', 'signature_mismatch (1)']
    >>> len(verdicts_over_time(d, freq="W").axes[0].patches)  # one week, two verdicts
    2
    """
    fig, (ax,) = new_figure()
    title = "Requests by verdict over time"
    timed = deliveries.dropna(subset=["received_at"])
    if timed.empty:
        no_data(ax, title)
        return fig
    naive = timed["received_at"].dt.tz_convert("UTC").dt.tz_localize(None)
    try:
        slot = naive.dt.floor(freq)
    except ValueError:  # a calendar frequency (weeks, months): the start of each period
        try:
            slot = naive.dt.to_period(freq.removesuffix("S")).dt.start_time
        except ValueError:
            why = f"freq {freq!r}: give a pandas frequency such as D, h, W or MS"
            raise ParameterError(why) from None
    table = pd.crosstab(slot, timed["verdict"])
    order = verdict_counts(timed)["verdict"].tolist()  # check order, valid at the bottom
    order = sorted(order, key=lambda v: v != "valid")
    table = table[[v for v in order if v in table.columns]]
    x = naive_utc(pd.Series(table.index).dt.tz_localize("UTC"))
    width = _bar_width(x)
    bottom = np.zeros(len(table))
    for verdict in table.columns:
        counts = table[verdict].to_numpy()
        label = f"{safe_label(verdict)} ({int(counts.sum()):,})"
        ax.bar(x, counts, width=width, bottom=bottom, label=label, align="edge")
        bottom += counts
    ax.set_title(title)
    ax.set_ylabel("requests")
    date_axis(ax)
    ax.legend(loc="upper left", fontsize="small")
    return fig


def _bar_width(x: np.ndarray) -> float:
    """Bar width in days (matplotlib's date unit): the smallest step between slots."""
    if len(x) < 2:
        return 0.8
    steps = np.diff(x).astype("timedelta64[s]").astype(float) / 86400
    return float(steps[steps > 0].min()) * 0.9 if (steps > 0).any() else 0.8


def clock_skew(deliveries: pd.DataFrame) -> Figure:
    """Receipt time minus signed timestamp of every request over time, by verdict."""
    return plot_clock_skew(deliveries)


def failure_rate(attempts: pd.DataFrame) -> Figure:
    """Daily share of attempts that failed (not 2xx within 5 s), one line per subscription."""
    return plot_daily_failure_rate(attempts)


def retry_delays(attempts: pd.DataFrame) -> Figure:
    """Each retry's observed delay by attempt number, against the published schedule."""
    return plot_retry_delays(attempts)


def latency(deliveries: pd.DataFrame, events: pd.DataFrame) -> Figure:
    """Histograms of acknowledgement latency (valid requests, ms) and emission latency (events'
    first receipt minus their timestamp, s), medians and 95th percentiles marked."""
    return plot_latency_distributions(deliveries, events)


def km_curves(km: pd.DataFrame, *, unit: str = "h") -> Figure:
    """Kaplan-Meier curves of the share not yet taken down, one per group, with bands
    (``km`` from :meth:`audit.workbench.Workbench.km`, ``time_h`` in hours, or a table with
    ``time`` in seconds such as :func:`audit.kaplan_meier`'s); the x axis in ``unit``."""
    return plot_takedown_curves(km, unit=unit)
