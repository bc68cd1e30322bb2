"""Signature figures: clock skew over time, and records per verdict."""

from __future__ import annotations

from typing import Literal

import numpy as np
import pandas as pd
from matplotlib.artist import Artist
from matplotlib.figure import Figure

from audit.analysis.metrics import plain_labels, require_columns
from audit.errors import ParameterError
from audit.ingest.signatures import VERDICTS
from audit.ingest.verification import verdict_counts
from audit.plotting.base import (
    date_axis,
    naive_utc,
    new_figure,
    no_data,
    percent_text,
    plain_log_ticks,
    safe_label,
    thinned,
)
from audit.spec import CLOCK_TOLERANCE_S
from audit.words import words

__all__ = ["plot_clock_skew", "plot_verdict_counts"]

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
        One axes: one scatter per verdict (labelled with its count), in check order. A verdict
        of more than 20,000 points is drawn from those that change the picture
        (:func:`audit.plotting.base.thinned`: at most two per 1/200 inch), a million in half
        the time.

    Examples
    --------
    >>> t = pd.Timestamp("2026-10-01 12:00", tz="UTC")
    >>> deliveries = pd.DataFrame({"received_at": [t, t + pd.Timedelta("1h")],
    ...                            "skew_s": [1.5, 900.0], "verdict": ["valid", "stale_timestamp"]})
    >>> ax = plot_clock_skew(deliveries).axes[0]
    >>> ax.get_yscale(), [text.get_text() for text in ax.get_legend().get_texts()]
    ('symlog', ['accepted window ±300 s', 'stale timestamp (n=1)', 'valid (n=1)'])
    """
    if yscale not in ("auto", "linear", "symlog"):
        raise ParameterError(f"yscale must be 'auto', 'linear' or 'symlog', got {yscale!r}")
    if not tolerance_s > 0:
        raise ParameterError(f"tolerance_s must be positive, got {tolerance_s!r}")
    require_columns(
        deliveries, ("received_at", "skew_s", "verdict"), "deliveries", "audit_signatures()"
    )
    fig, (ax,) = new_figure()
    title = title or "Clock skew: receipt time − signed timestamp"
    d = deliveries
    if len(d):  # the rows are cut in the three columns drawn, not in all
        d = d[["received_at", "skew_s", "verdict"]]
        d = d[d["skew_s"].notna() & d["received_at"].notna()]
    if d.empty:
        no_data(ax, title)
        return fig
    skew = d["skew_s"].to_numpy(dtype=float)
    times = naive_utc(d["received_at"])
    codes, found = pd.factorize(plain_labels(d["verdict"]))
    ax.axhspan(-tolerance_s, tolerance_s, color="tab:green", alpha=0.08, linewidth=0)
    window = ax.axhline(tolerance_s, color="tab:green", linestyle="--", linewidth=1)
    ax.axhline(-tolerance_s, color="tab:green", linestyle="--", linewidth=1)
    handles: list[Artist] = [window]
    labels = [f"accepted window ±{tolerance_s:g} s"]
    code_of = {str(v): k for k, v in enumerate(found)}
    order = [v for v in VERDICTS if v in code_of]
    order += sorted(set(code_of) - set(order))
    if yscale == "auto":
        yscale = "symlog" if np.abs(skew).max() > 2 * tolerance_s else "linear"
    if yscale == "symlog":
        ax.set_yscale("symlog", linthresh=10.0)
        plain_log_ticks(ax.yaxis)
    # Positions in the axes' scale, for thinning a million points to those that show.
    scaled = ax.yaxis.get_transform().transform(skew)
    width, height = fig.get_size_inches()
    size_in = (float(width), float(height))
    for verdict in order:
        sel = np.flatnonzero(codes == code_of[verdict])
        n = len(sel)
        sel = sel[thinned(times[sel].view("int64"), scaled[sel], size_in=size_in)]
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
        labels.append(f"{safe_label(words(verdict))} (n={n})")  # codes as words
    date_axis(ax)
    ax.set_xlabel("received at (UTC)")
    ax.set_ylabel("skew (s" + (", symlog scale)" if yscale == "symlog" else ")"))
    ax.set_title(title)
    # Beside the axes, never over a point; "best" would test each of its places against every
    # point drawn (3.5 s for a million requests).
    ax.legend(handles, labels, fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(alpha=0.3)
    return fig


def plot_verdict_counts(
    deliveries: pd.DataFrame, *, log: bool | None = None, title: str | None = None
) -> Figure:
    """Horizontal bars: records per signature verdict, in check order, labelled count (share).

    Parameters
    ----------
    deliveries : pandas.DataFrame
        The verified deliveries (``verdict``); counted by
        :func:`audit.ingest.verification.verdict_counts`.
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
    >>> deliveries = pd.DataFrame({"verdict": ["valid", "valid", "stale_timestamp"]})
    >>> plot_verdict_counts(deliveries).axes[0].get_title()
    'Signature verdicts (3 records)'
    """
    require_columns(deliveries, ("verdict",), "deliveries", "audit_signatures()")
    fig, (ax,) = new_figure((8.0, 3.5))
    counts = verdict_counts(deliveries) if len(deliveries) else pd.DataFrame()
    if not counts.empty:  # a categorical verdict (audit.open) counts its absent categories
        counts = counts[counts["count"] > 0].reset_index(drop=True)
    if counts.empty:
        no_data(ax, title or "Signature verdicts")
        return fig
    n = counts["count"].to_numpy()
    if log is None:
        log = bool(n.max() >= 100 * n.min())
    y = np.arange(len(counts))
    colours = [_VERDICT_COLOURS.get(v, "tab:red") for v in counts["verdict"]]
    ax.barh(y, n, color=colours, log=log)
    plain_log_ticks(ax.xaxis)
    for yi, c, share in zip(y, n, counts["share"], strict=True):
        ax.annotate(
            f"{c} ({percent_text(share)})",
            (c, yi),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize="small",
        )
    ax.set_yticks(y, [safe_label(words(v)) for v in counts["verdict"]])  # codes as words
    ax.invert_yaxis()
    ax.set_xlim(right=n.max() * (4 if log else 1.2))
    ax.set_xlabel("records" + (" (log scale)" if log else ""))
    ax.set_title(title or f"Signature verdicts ({int(n.sum())} records)")
    ax.grid(alpha=0.3, axis="x")
    return fig
