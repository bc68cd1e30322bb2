"""Delivery figures: daily failure rate, retry delays against the schedule, latencies."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import PercentFormatter

from audit.analysis.deliveries import Tolerance, latency_summary
from audit.analysis.metrics import RETRY_KINDS, daily_failure_rate, require_columns, retry_delays
from audit.errors import ParameterError
from audit.plotting.base import (
    date_axis,
    duration_text,
    naive_utc,
    new_figure,
    no_data,
    plain_log_ticks,
    safe_label,
)
from audit.spec import DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS, RETRY_DELAYS_S

__all__ = ["log_bins", "plot_daily_failure_rate", "plot_latency_distributions", "plot_retry_delays"]


def plot_daily_failure_rate(attempts: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Daily delivery failure rate, one line per subscription (gaps on days without answers).

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.analysis.deliveries.infer_attempts`; aggregated by
        :func:`daily_failure_rate`.
    title : str, optional
        Axes title; default "Daily delivery failure rate".

    Returns
    -------
    matplotlib.figure.Figure
        One axes, one line per subscription, y in percent of answered attempts.

    Examples
    --------
    >>> from audit.analysis.deliveries import infer_attempts
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, 500, then 200
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1",
    ...     "received_at": [t, t + pd.Timedelta("31s"), t + pd.Timedelta("150s")],
    ...     "response_status": [500, 500, 200], "response_ms": [120, 95, 80]})
    >>> attempts = infer_attempts(verified, as_of=t + pd.Timedelta("1D"))
    >>> ax = plot_daily_failure_rate(attempts).axes[0]
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['wh_1 (3 answered)']
    """
    rates = daily_failure_rate(attempts)
    fig, (ax,) = new_figure()
    title = title or "Daily delivery failure rate"
    if rates.empty:
        no_data(ax, title)
        return fig
    handles, labels = [], []
    for sub, g in rates.groupby("subscription_id", sort=True):
        (line,) = ax.plot(naive_utc(g["day"]), g["failure_rate"], marker="o", markersize=3)
        handles.append(line)
        labels.append(f"{safe_label(sub)} ({int(g['answered'].sum())} answered)")
    date_axis(ax)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("day (UTC)")
    ax.set_ylabel("failed attempts (% of answered)")
    ax.set_title(title)
    ax.legend(handles, labels, title="subscription", fontsize="small")
    ax.grid(alpha=0.3)
    return fig


def _jitter(n: int, width: float = 0.5) -> np.ndarray:
    """Deterministic, evenly spread offsets in ``[-width/2, width/2)`` (golden-ratio sequence)."""
    return ((np.arange(n) * 0.6180339887498949) % 1.0 - 0.5) * width


def plot_retry_delays(
    attempts: pd.DataFrame, *, tolerance: Tolerance | None = None, title: str | None = None
) -> Figure:
    """Observed delay before each retry, by attempt number, against the published schedule.

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.analysis.deliveries.infer_attempts`; selected by :func:`retry_delays`.
    tolerance : Tolerance, optional
        Drawn as a grey band around each scheduled delay; default ``Tolerance()`` (the one
        ``infer_attempts`` uses by default).
    title : str, optional
        Axes title; default "Retry delays against the schedule".

    Returns
    -------
    matplotlib.figure.Figure
        One axes with a log y axis: points per kind (on schedule, after missing attempts, off
        schedule), the schedule's delays (30 s, 2 min, 10 min, 1 h before attempts 2-5) as
        black segments, the tolerance as shaded boxes.

    Examples
    --------
    >>> from audit.analysis.deliveries import infer_attempts
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> verified = pd.DataFrame({  # one event, answered 500, 500, then 200
    ...     "verdict": "valid", "subscription_id": "wh_1", "event_id": "evt_1",
    ...     "event": "incident.created", "incident_id": "inc_1",
    ...     "received_at": [t, t + pd.Timedelta("31s"), t + pd.Timedelta("150s")],
    ...     "response_status": [500, 500, 200], "response_ms": [120, 95, 80]})
    >>> attempts = infer_attempts(verified, as_of=t + pd.Timedelta("1D"))
    >>> ax = plot_retry_delays(attempts).axes[0]
    >>> [text.get_text() for text in ax.get_legend().get_texts()]
    ['schedule (shaded: tolerance)', 'on schedule (n=2)']
    """
    points = retry_delays(attempts)
    tol = tolerance or Tolerance()
    fig, (ax,) = new_figure()
    title = title or "Retry delays against the schedule"
    if points.empty:
        no_data(ax, title)
        return fig
    nos = np.arange(2, MAX_ATTEMPTS + 1)
    expected = np.array([RETRY_DELAYS_S[n - 1] for n in nos], dtype=float)
    for n, e in zip(nos, expected, strict=True):
        ax.fill_between([n - 0.4, n + 0.4], e - tol(e), e + tol(e), color="0.85", linewidth=0)
        ax.annotate(duration_text(e), (n + 0.42, e), va="center", fontsize="small")
    sched = ax.hlines(expected, nos - 0.4, nos + 0.4, colors="black", linewidth=2)
    styles = {
        "on_schedule": ("o", "tab:blue", "on schedule"),
        "after_missing": ("s", "tab:orange", "after missed attempt(s)"),
        "off_schedule": ("x", "tab:red", "off schedule"),
    }
    handles: list[Artist] = [sched]
    labels = ["schedule (shaded: tolerance)"]
    for kind in RETRY_KINDS:
        g = points[points["kind"] == kind]
        if g.empty:
            continue
        marker, colour, text = styles[kind]
        x = g["attempt_no"].to_numpy(float) + _jitter(len(g))
        h = ax.scatter(x, g["delay_s"], marker=marker, color=colour, s=14, alpha=0.6)
        handles.append(h)
        labels.append(f"{text} (n={len(g)})")
    top = int(max(MAX_ATTEMPTS, points["attempt_no"].max()))
    ax.set_xticks(range(2, top + 1))
    ax.set_xlim(1.4, top + 0.9)
    ax.set_yscale("log")
    plain_log_ticks(ax.yaxis)
    ax.set_xlabel("attempt number (inferred)")
    ax.set_ylabel("delay since previous observed attempt (s, log scale)")
    ax.set_title(title)
    ax.legend(handles, labels, fontsize="small", loc="upper left")
    ax.grid(alpha=0.3, axis="y", which="both")
    return fig


# --------------------------------------------------------------------------------------------
# Latencies
# --------------------------------------------------------------------------------------------


def log_bins(
    values: Sequence[float] | np.ndarray | pd.Series, *, per_decade: int = 10
) -> np.ndarray:
    """Histogram edges evenly spaced in log10, covering the positive finite values.

    Parameters
    ----------
    values : array-like of float
        Non-positive, NaN and infinite values are ignored.
    per_decade : int, default 10
        Bins per factor of ten; edges fall on ``10 ** (k / per_decade)``.

    Returns
    -------
    numpy.ndarray
        Ascending edges from the largest edge ``<= min`` to the smallest edge ``>= max`` (at
        least two); empty when no value is positive.

    Examples
    --------
    >>> log_bins([1.0, 1000.0], per_decade=1).tolist()
    [1.0, 10.0, 100.0, 1000.0]
    """
    given: object = per_decade  # checked as a caller may pass anything
    if isinstance(given, bool) or not isinstance(given, int) or given < 1:
        raise ParameterError(f"per_decade must be a positive integer, got {per_decade!r}")
    if isinstance(values, np.ndarray) and values.dtype.kind == "f":  # as drawn: no conversion
        v = values.astype(float, copy=False)
    else:
        v = pd.to_numeric(pd.Series(values, dtype="object"), errors="coerce").to_numpy(float)
    v = v[np.isfinite(v) & (v > 0)]
    if not v.size:
        return np.array([], dtype=float)
    lo = math.floor(math.log10(v.min()) * per_decade + 1e-9)
    hi = math.ceil(math.log10(v.max()) * per_decade - 1e-9)
    hi = max(hi, lo + 1)
    return 10.0 ** (np.arange(lo, hi + 1) / per_decade)


def _positive(values: pd.Series) -> tuple[np.ndarray, int]:
    v = values.dropna().to_numpy(dtype=float)
    keep = v > 0
    return v[keep], int((~keep).sum())


def _histogram(
    ax: Axes, values: np.ndarray, dropped: int, *, colour: str, unit: str, title: str
) -> None:
    if not values.size:
        no_data(ax, title)
        return
    ax.hist(values, bins=log_bins(values).tolist(), color=colour, alpha=0.8)
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_title(title)
    ax.set_ylabel("count")
    ax.grid(alpha=0.3)
    if dropped:
        ax.text(
            0.98,
            0.70,
            f"{dropped} value(s) <= 0 {unit} not shown",
            transform=ax.transAxes,
            ha="right",
            fontsize="small",
            color="0.3",
        )


def plot_latency_distributions(
    attempts: pd.DataFrame,
    events: pd.DataFrame,
    *,
    title: str | None = None,
    summary: pd.DataFrame | None = None,
) -> Figure:
    """Histograms of acknowledgement latency (ms) and emission latency (s), log x axes.

    Left: ``response_ms`` of the valid deliveries, with the 5 s delivery timeout as a red line.
    Right: ``emission_latency_s`` of the non-test events (first receipt minus the envelope's
    timestamp). Dashed lines mark the medians and dotted lines the 95th percentiles, taken from
    :func:`audit.analysis.deliveries.latency_summary` so that the figure agrees with the report's
    table.

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.analysis.deliveries.infer_attempts` (``verdict``, ``response_ms``).
    events : pandas.DataFrame
        From :func:`audit.analysis.deliveries.events_table` (``is_test``, ``emission_latency_s``).
    title : str, optional
        Figure title; default "Delivery latencies".
    summary : pandas.DataFrame, optional
        :func:`~audit.analysis.deliveries.latency_summary` of these same rows, computed already
        (the report's ``latency`` table): its medians and 95th percentiles are drawn instead of
        being computed again (at 1M deliveries, 0.14 s of the figure's 0.6 s).

    Returns
    -------
    matplotlib.figure.Figure
        Two axes (ack latency, emission latency); an empty side says "no data".

    Examples
    --------
    >>> attempts = pd.DataFrame({"verdict": "valid", "response_ms": [80.0, 120.0, 6000.0],
    ...                          "skew_s": [0.5, 1.0, 2.0]})
    >>> events = pd.DataFrame({"is_test": [False, False], "emission_latency_s": [1.5, 30.0]})
    >>> ack, emission = plot_latency_distributions(attempts, events).axes
    >>> [text.get_text() for text in ack.get_legend().get_texts()]
    ['timeout 5000 ms (1 of 3 over)', 'median 120 ms', 'p95 5412 ms']
    >>> [text.get_text() for text in emission.get_legend().get_texts()]
    ['median 15.8 s', 'p95 28.6 s']
    """
    require_columns(attempts, ("verdict", "response_ms", "skew_s"), "attempts", "infer_attempts()")
    require_columns(events, ("is_test", "emission_latency_s"), "events", "events_table()")
    fig, (ack_ax, emit_ax) = new_figure((11.0, 4.2), ncols=2)
    fig.suptitle(title or "Delivery latencies")
    has_a = len(attempts) > 0
    has_e = len(events) > 0
    # The rows are cut in the few columns drawn, not in every column (1M rows: 1.3 s).
    valid = attempts.loc[attempts["verdict"] == "valid", ["response_ms"]] if has_a else attempts
    ack, ack_dropped = _positive(valid["response_ms"]) if has_a else (np.array([]), 0)
    drawn = ["is_test", "emission_latency_s"]
    real = events.loc[~events["is_test"].astype(bool), drawn] if has_e else events
    emit, emit_dropped = _positive(real["emission_latency_s"]) if has_e else (np.array([]), 0)
    wanted = {"ack_latency_ms", "emission_latency_s"}
    if summary is None or "metric" not in summary or not wanted <= set(summary["metric"]):
        summary = latency_summary(attempts if has_a else _EMPTY_ATT, real if has_e else _EMPTY_EV)
    summary = summary.set_index("metric").astype({"p50": float, "p95": float})
    _histogram(
        ack_ax,
        ack,
        ack_dropped,
        colour="tab:blue",
        unit="ms",
        title="Acknowledgement latency (valid deliveries)",
    )
    if ack.size:
        timeout = ack_ax.axvline(DELIVERY_TIMEOUT_MS, color="tab:red", linewidth=1.5)
        over = int((ack > DELIVERY_TIMEOUT_MS).sum())
        handles = [timeout, *_quantile_lines(ack_ax, summary, "ack_latency_ms", "ms")]
        labels = [f"timeout {DELIVERY_TIMEOUT_MS} ms ({over} of {ack.size} over)"]
        labels += [str(h.get_label()) for h in handles[1:]]
        ack_ax.legend(handles, labels, fontsize="small")
        ack_ax.set_xlabel("response time (ms, log scale)")
    _histogram(
        emit_ax,
        emit,
        emit_dropped,
        colour="tab:purple",
        unit="s",
        title="Emission latency (non-test events)",
    )
    if emit.size:
        handles = _quantile_lines(emit_ax, summary, "emission_latency_s", "s")
        emit_ax.legend(handles, [str(h.get_label()) for h in handles], fontsize="small")
        emit_ax.set_xlabel("first receipt − event timestamp (s, log scale)")
    return fig


_EMPTY_ATT = pd.DataFrame({"verdict": [], "response_ms": [], "skew_s": []})
_EMPTY_EV = pd.DataFrame({"is_test": pd.Series([], dtype=bool), "emission_latency_s": []})


def _quantile_lines(ax: Axes, summary: pd.DataFrame, metric: str, unit: str) -> list[Line2D]:
    """The median and 95th percentile of ``metric`` (a row of ``summary``) as vertical lines."""
    lines = []
    for name, style in (("p50", "--"), ("p95", ":")):
        value = float(summary[name].loc[metric])
        if value > 0:
            shown = f"{value:.3g}" if value < 1000 else f"{value:.0f}"
            label = f"{'median' if name == 'p50' else name} {shown} {unit}"
            lines.append(ax.axvline(value, color="black", linestyle=style, label=label))
    return lines
