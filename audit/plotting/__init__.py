"""Figures for the report and the notebooks: frames in, :class:`matplotlib.figure.Figure` out.

Every function builds its figure with ``matplotlib.figure.Figure()``, never through pyplot: no
global state, no display, nothing saved or shown (the caller decides, e.g. ``fig.savefig(...)``
or returning the figure as a notebook cell's value). Empty input gives a figure that says
"no data". The functions here only draw: the frames a figure shows are computed in
:mod:`audit.analysis.metrics` (:func:`~audit.analysis.metrics.km_steps`,
:func:`~audit.analysis.metrics.daily_failure_rate`,
:func:`~audit.analysis.metrics.retry_delays`) or by the analysis modules, which the ``plot_*``
functions
call, so that tests check numbers rather than pixels.

Text drawn from data (groups, subscription ids) is shortened and has ``$`` escaped so that it
is never read as mathtext; incident URLs are never drawn.
"""

from audit.plotting.base import NO_DATA
from audit.plotting.deliveries import (
    log_bins,
    plot_daily_failure_rate,
    plot_latency_distributions,
    plot_retry_delays,
)
from audit.plotting.signatures import plot_clock_skew, plot_verdict_counts
from audit.plotting.takedown import plot_takedown_curves

__all__ = [
    "NO_DATA",
    "log_bins",
    "plot_clock_skew",
    "plot_daily_failure_rate",
    "plot_latency_distributions",
    "plot_retry_delays",
    "plot_takedown_curves",
    "plot_verdict_counts",
]
