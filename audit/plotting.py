"""Figures for the report and the notebooks: frames in, :class:`matplotlib.figure.Figure` out.

Every function builds its figure with ``matplotlib.figure.Figure()``, never through pyplot: no
global state, no display, nothing saved or shown (the caller decides, e.g. ``fig.savefig(...)``
or returning the figure as a notebook cell's value). Empty input gives a figure that says
"no data". The functions here only draw: the frames a figure shows are computed in
:mod:`audit.metrics` (:func:`~audit.metrics.km_steps`, :func:`~audit.metrics.daily_failure_rate`,
:func:`~audit.metrics.retry_delays`) or by the analysis modules, which the ``plot_*`` functions
call, so that tests check numbers rather than pixels.

Text drawn from data (groups, subscription ids) is shortened and has ``$`` escaped so that it
is never read as mathtext; incident URLs are never drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import matplotlib.dates as mdates
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from audit.deliveries import Tolerance, latency_summary
from audit.errors import ParameterError
from audit.metrics import (
    RETRY_KINDS,
    daily_failure_rate,
    km_steps,
    plain_label,
    require_columns,
    retry_delays,
    utc_times,
)
from audit.signatures import VERDICTS
from audit.spec import CLOCK_TOLERANCE_S, DELIVERY_TIMEOUT_MS, MAX_ATTEMPTS, RETRY_DELAYS_S
from audit.survival import MISSING_GROUP
from audit.verification import verdict_counts

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

NO_DATA = "no data"
"""Text shown on an axes that has nothing to draw."""

_SIZE = (8.0, 4.5)
_LABEL_MAX = 40
_VERDICT_COLOURS = {"valid": "tab:green", "unreadable": "0.55", "rotated_secret": "tab:orange"}
_SKEW_COLOURS = {  # skew exists once a timestamp was parsed; "valid" stands apart from the rest
    "valid": "tab:blue",
    "stale_timestamp": "tab:red",
    "no_secret": "tab:brown",
    "rotated_secret": "tab:orange",
    "signature_mismatch": "tab:purple",
    "missing_signature": "tab:olive",
    "malformed_signature": "tab:pink",
}


# --------------------------------------------------------------------------------------------
# Shared pieces
# --------------------------------------------------------------------------------------------


def _figure(size: tuple[float, float] = _SIZE, ncols: int = 1) -> tuple[Figure, list[Axes]]:
    fig = Figure(figsize=size, layout="constrained")
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _no_data(ax: Axes, title: str) -> None:
    ax.set_title(title)
    ax.text(0.5, 0.5, NO_DATA, ha="center", va="center", transform=ax.transAxes, color="0.4")
    ax.set_xticks([])
    ax.set_yticks([])


def _label(value: object) -> str:
    """Data-derived text made safe to draw: one line, at most 40 characters, ``$`` escaped."""
    text = MISSING_GROUP if value is None or value is pd.NA or value != value else str(value)
    text = " ".join(text.split())
    if len(text) > _LABEL_MAX:
        text = text[: _LABEL_MAX - 1] + "…"
    return text.replace("$", r"\$")


def _naive_utc(times: pd.Series) -> np.ndarray:
    """Timezone-aware times as naive UTC ``datetime64`` (what matplotlib's date axis takes)."""
    return utc_times(times).dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def _date_axis(ax: Axes) -> None:
    locator = mdates.AutoDateLocator()
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _percent(share: float) -> str:
    """``0.998 -> "99.8%"``, ``0.000386 -> "0.039%"``: small shares keep two significant digits."""
    return f"{share:.1%}" if share >= 0.01 or share == 0 else f"{share * 100:.2g}%"


def _duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


# --------------------------------------------------------------------------------------------
# Takedown curves
# --------------------------------------------------------------------------------------------


def plot_takedown_curves(
    km: pd.DataFrame, *, unit: str = "h", title: str | None = None, show_censored: bool = True
) -> Figure:
    """Kaplan–Meier curves of the share not yet taken down, one per group, with CI bands.

    Parameters
    ----------
    km : pandas.DataFrame
        From :func:`audit.survival.kaplan_meier_by` (times in seconds).
    unit : {"s", "min", "h", "d"}, default "h"
        Unit of the x axis.
    title : str, optional
        Axes title; default "Time to takedown".
    show_censored : bool, default True
        Mark censoring times with ``|`` on the curve (as lifelines does).

    Returns
    -------
    matplotlib.figure.Figure
        One axes: per group a post-step line labelled ``group (n=…)`` and a shaded pointwise
        confidence band (its level from ``km.attrs["alpha"]``, 95% if absent).

    Examples
    --------
    >>> km = kaplan_meier_by(takedown_durations(incidents, as_of=end).durations, "source")
    ... # doctest: +SKIP
    >>> plot_takedown_curves(km).savefig("takedown.png")  # doctest: +SKIP
    """
    steps = km_steps(km, unit=unit)
    fig, (ax,) = _figure()
    title = title or "Time to takedown"
    if steps.empty:
        _no_data(ax, title)
        return fig
    level = 1.0 - float(km.attrs.get("alpha", 0.05))
    handles, labels = [], []
    for name, g in steps.groupby("group", sort=False):
        t, s = g["time"].to_numpy(), g["survival"].to_numpy()
        (line,) = ax.plot(t, s, drawstyle="steps-post", linewidth=1.8)
        colour = line.get_color()
        ax.fill_between(
            t, g["ci_lower"], g["ci_upper"], step="post", color=colour, alpha=0.2, linewidth=0
        )
        cens = g["censored"].to_numpy() > 0
        if show_censored and cens.any():
            ax.plot(t[cens], s[cens], linestyle="none", marker="|", markersize=8, color=colour)
        handles.append(line)
        labels.append(f"{_label(name)} (n={int(g['n'].iloc[0])})")
    ax.set_xlim(left=0)
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel(f"time to takedown ({unit})")
    ax.set_ylabel("not yet taken down")
    ax.set_title(title)
    note = f"shaded: {level:.0%} pointwise CI" + ("; | censored" if show_censored else "")
    ax.legend(handles, labels, title=note, loc="upper right", fontsize="small")
    ax.grid(alpha=0.3)
    return fig


# --------------------------------------------------------------------------------------------
# Delivery failures and retries
# --------------------------------------------------------------------------------------------


def plot_daily_failure_rate(attempts: pd.DataFrame, *, title: str | None = None) -> Figure:
    """Daily delivery failure rate, one line per subscription (gaps on days without answers).

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.deliveries.infer_attempts`; aggregated by :func:`daily_failure_rate`.
    title : str, optional
        Axes title; default "Daily delivery failure rate".

    Returns
    -------
    matplotlib.figure.Figure
        One axes, one line per subscription, y in percent of answered attempts.

    Examples
    --------
    >>> plot_daily_failure_rate(infer_attempts(verified, as_of=end))  # doctest: +SKIP
    """
    rates = daily_failure_rate(attempts)
    fig, (ax,) = _figure()
    title = title or "Daily delivery failure rate"
    if rates.empty:
        _no_data(ax, title)
        return fig
    handles, labels = [], []
    for sub, g in rates.groupby("subscription_id", sort=True):
        (line,) = ax.plot(_naive_utc(g["day"]), g["failure_rate"], marker="o", markersize=3)
        handles.append(line)
        labels.append(f"{_label(sub)} ({int(g['answered'].sum())} answered)")
    _date_axis(ax)
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
        From :func:`audit.deliveries.infer_attempts`; selected by :func:`retry_delays`.
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
    >>> plot_retry_delays(infer_attempts(verified, as_of=end))  # doctest: +SKIP
    """
    points = retry_delays(attempts)
    tol = tolerance or Tolerance()
    fig, (ax,) = _figure()
    title = title or "Retry delays against the schedule"
    if points.empty:
        _no_data(ax, title)
        return fig
    nos = np.arange(2, MAX_ATTEMPTS + 1)
    expected = np.array([RETRY_DELAYS_S[n - 1] for n in nos], dtype=float)
    for n, e in zip(nos, expected, strict=True):
        ax.fill_between([n - 0.4, n + 0.4], e - tol(e), e + tol(e), color="0.85", linewidth=0)
        ax.annotate(_duration_text(e), (n + 0.42, e), va="center", fontsize="small")
    sched = ax.hlines(expected, nos - 0.4, nos + 0.4, colors="black", linewidth=2)
    styles = {
        "on_schedule": ("o", "tab:blue", "on schedule"),
        "after_missing": ("s", "tab:orange", "after missed attempt(s)"),
        "off_schedule": ("x", "tab:red", "off schedule"),
    }
    handles, labels = [sched], ["schedule (shaded: tolerance)"]
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
    if isinstance(per_decade, bool) or not isinstance(per_decade, int) or per_decade < 1:
        raise ParameterError(f"per_decade must be a positive integer, got {per_decade!r}")
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
        _no_data(ax, title)
        return
    ax.hist(values, bins=log_bins(values), color=colour, alpha=0.8)
    ax.set_xscale("log")
    ax.set_title(title)
    ax.set_ylabel("count")
    ax.grid(alpha=0.3)
    if dropped:
        ax.text(
            0.98, 0.70, f"{dropped} value(s) <= 0 {unit} not shown", transform=ax.transAxes,
            ha="right", fontsize="small", color="0.3",
        )  # fmt: skip


def plot_latency_distributions(
    attempts: pd.DataFrame, events: pd.DataFrame, *, title: str | None = None
) -> Figure:
    """Histograms of acknowledgement latency (ms) and emission latency (s), log x axes.

    Left: ``response_ms`` of the valid deliveries, with the 5 s delivery timeout as a red line.
    Right: ``emission_latency_s`` of the non-test events (first receipt minus the envelope's
    timestamp). Dashed lines mark the medians and dotted lines the 95th percentiles, taken from
    :func:`audit.deliveries.latency_summary` so that the figure agrees with the report's table.

    Parameters
    ----------
    attempts : pandas.DataFrame
        From :func:`audit.deliveries.infer_attempts` (``verdict``, ``response_ms``).
    events : pandas.DataFrame
        From :func:`audit.deliveries.events_table` (``is_test``, ``emission_latency_s``).
    title : str, optional
        Figure title; default "Delivery latencies".

    Returns
    -------
    matplotlib.figure.Figure
        Two axes (ack latency, emission latency); an empty side says "no data".

    Examples
    --------
    >>> plot_latency_distributions(attempts, events_table(attempts, as_of=end))
    ... # doctest: +SKIP
    """
    require_columns(attempts, ("verdict", "response_ms", "skew_s"), "attempts", "infer_attempts()")
    require_columns(events, ("is_test", "emission_latency_s"), "events", "events_table()")
    fig, (ack_ax, emit_ax) = _figure((11.0, 4.2), ncols=2)
    fig.suptitle(title or "Delivery latencies")
    has_a = len(attempts) > 0
    has_e = len(events) > 0
    valid = attempts[attempts["verdict"] == "valid"] if has_a else attempts
    ack, ack_dropped = _positive(valid["response_ms"]) if has_a else (np.array([]), 0)
    real = events[~events["is_test"].astype(bool)] if has_e else events
    emit, emit_dropped = _positive(real["emission_latency_s"]) if has_e else (np.array([]), 0)
    summary = (
        latency_summary(attempts if has_a else _EMPTY_ATT, real if has_e else _EMPTY_EV)
        .set_index("metric")
        .astype({"p50": float, "p95": float})
    )
    _histogram(
        ack_ax, ack, ack_dropped, colour="tab:blue", unit="ms",
        title="Acknowledgement latency (valid deliveries)",
    )  # fmt: skip
    if ack.size:
        timeout = ack_ax.axvline(DELIVERY_TIMEOUT_MS, color="tab:red", linewidth=1.5)
        over = int((ack > DELIVERY_TIMEOUT_MS).sum())
        handles = [timeout, *_quantile_lines(ack_ax, summary.loc["ack_latency_ms"], "ms")]
        labels = [f"timeout {DELIVERY_TIMEOUT_MS} ms ({over} of {ack.size} over)"]
        labels += [h.get_label() for h in handles[1:]]
        ack_ax.legend(handles, labels, fontsize="small")
        ack_ax.set_xlabel("response time (ms, log scale)")
    _histogram(
        emit_ax, emit, emit_dropped, colour="tab:purple", unit="s",
        title="Emission latency (non-test events)",
    )  # fmt: skip
    if emit.size:
        handles = _quantile_lines(emit_ax, summary.loc["emission_latency_s"], "s")
        emit_ax.legend(handles, [h.get_label() for h in handles], fontsize="small")
        emit_ax.set_xlabel("first receipt − event timestamp (s, log scale)")
    return fig


_EMPTY_ATT = pd.DataFrame({"verdict": [], "response_ms": [], "skew_s": []})
_EMPTY_EV = pd.DataFrame({"is_test": pd.Series([], dtype=bool), "emission_latency_s": []})


def _quantile_lines(ax: Axes, row: pd.Series, unit: str) -> list:
    lines = []
    for name, style in (("p50", "--"), ("p95", ":")):
        value = float(row[name])
        if value > 0:
            shown = f"{value:.3g}" if value < 1000 else f"{value:.0f}"
            label = f"{'median' if name == 'p50' else name} {shown} {unit}"
            lines.append(ax.axvline(value, color="black", linestyle=style, label=label))
    return lines


# --------------------------------------------------------------------------------------------
# Signatures: clock skew and verdicts
# --------------------------------------------------------------------------------------------


def plot_clock_skew(
    deliveries: pd.DataFrame,
    *,
    tolerance_s: float = CLOCK_TOLERANCE_S,
    yscale: Literal["auto", "linear", "symlog"] = "auto",
    title: str | None = None,
) -> Figure:
    """Clock skew of every record (receipt time minus signed timestamp) over time, by verdict.

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries (``received_at``, ``skew_s``, ``verdict``); rows without a
        skew (unreadable, malformed timestamp) are not drawn.
    tolerance_s : float, default 300
        The accepted window ``±tolerance_s``, drawn as a shaded band between dashed lines.
    yscale : {"auto", "linear", "symlog"}, default "auto"
        "auto" is linear unless some skew exceeds twice the tolerance (replays hours old),
        then symlog (linear within ±10 s) so that both the window and the outliers show.
    title : str, optional
        Axes title.

    Returns
    -------
    matplotlib.figure.Figure
        One axes: one scatter per verdict (labelled with its count), in check order.

    Examples
    --------
    >>> plot_clock_skew(audit_signatures(["captures/"], "secrets.json").deliveries)
    ... # doctest: +SKIP
    """
    if yscale not in ("auto", "linear", "symlog"):
        raise ParameterError(f"yscale must be 'auto', 'linear' or 'symlog', got {yscale!r}")
    if not tolerance_s > 0:
        raise ParameterError(f"tolerance_s must be positive, got {tolerance_s!r}")
    require_columns(
        deliveries, ("received_at", "skew_s", "verdict"), "deliveries", "audit_signatures()"
    )
    fig, (ax,) = _figure()
    title = title or "Clock skew: receipt time − signed timestamp"
    d = (
        deliveries[deliveries["skew_s"].notna() & deliveries["received_at"].notna()]
        if len(deliveries)
        else deliveries
    )
    if d.empty:
        _no_data(ax, title)
        return fig
    skew = d["skew_s"].to_numpy(dtype=float)
    times = _naive_utc(d["received_at"])
    verdicts = d["verdict"].map(plain_label).to_numpy(dtype=object)
    ax.axhspan(-tolerance_s, tolerance_s, color="tab:green", alpha=0.08, linewidth=0)
    window = ax.axhline(tolerance_s, color="tab:green", linestyle="--", linewidth=1)
    ax.axhline(-tolerance_s, color="tab:green", linestyle="--", linewidth=1)
    handles, labels = [window], [f"accepted window ±{tolerance_s:g} s"]
    order = [v for v in VERDICTS if v in set(verdicts)]
    order += sorted(set(verdicts) - set(order))
    for verdict in order:
        sel = verdicts == verdict
        is_valid = verdict == "valid"
        h = ax.scatter(
            times[sel],
            skew[sel],
            s=6 if is_valid else 24,
            marker="o" if is_valid else "D",
            alpha=0.5 if is_valid else 0.9,
            color=_SKEW_COLOURS.get(verdict, "black"),
        )
        handles.append(h)
        labels.append(f"{_label(verdict)} (n={int(sel.sum())})")
    if yscale == "auto":
        yscale = "symlog" if np.abs(skew).max() > 2 * tolerance_s else "linear"
    if yscale == "symlog":
        ax.set_yscale("symlog", linthresh=10.0)
    _date_axis(ax)
    ax.set_xlabel("received at (UTC)")
    ax.set_ylabel("skew (s" + (", symlog scale)" if yscale == "symlog" else ")"))
    ax.set_title(title)
    ax.legend(handles, labels, fontsize="small", loc="best")
    ax.grid(alpha=0.3)
    return fig


def plot_verdict_counts(
    deliveries: pd.DataFrame, *, log: bool | None = None, title: str | None = None
) -> Figure:
    """Horizontal bars: records per signature verdict, in check order, labelled count (share).

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries (``verdict``); counted by :func:`audit.verification.verdict_counts`.
    log : bool, optional
        Log x axis; by default when the largest count is at least 100 times the smallest.
    title : str, optional
        Axes title; default "Signature verdicts (N records)".

    Returns
    -------
    matplotlib.figure.Figure
        One axes with one bar per verdict that occurred; bar widths are the counts.

    Examples
    --------
    >>> plot_verdict_counts(audit_signatures(["captures/"], "secrets.json").deliveries)
    ... # doctest: +SKIP
    """
    require_columns(deliveries, ("verdict",), "deliveries", "audit_signatures()")
    fig, (ax,) = _figure((8.0, 3.5))
    counts = verdict_counts(deliveries) if len(deliveries) else pd.DataFrame()
    if counts.empty:
        _no_data(ax, title or "Signature verdicts")
        return fig
    n = counts["count"].to_numpy()
    if log is None:
        log = bool(n.max() >= 100 * n.min())
    y = np.arange(len(counts))
    colours = [_VERDICT_COLOURS.get(v, "tab:red") for v in counts["verdict"]]
    ax.barh(y, n, color=colours, log=log)
    for yi, c, share in zip(y, n, counts["share"], strict=True):
        ax.annotate(
            f"{c} ({_percent(share)})", (c, yi), xytext=(4, 0), textcoords="offset points",
            va="center", fontsize="small",
        )  # fmt: skip
    ax.set_yticks(y, [_label(v) for v in counts["verdict"]])
    ax.invert_yaxis()
    ax.set_xlim(right=n.max() * (4 if log else 1.2))
    ax.set_xlabel("records" + (" (log scale)" if log else ""))
    ax.set_title(title or f"Signature verdicts ({int(n.sum())} records)")
    ax.grid(alpha=0.3, axis="x")
    return fig
