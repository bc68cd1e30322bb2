"""The takedown figure: Kaplan–Meier curves of the share not yet taken down."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from audit.analysis.metrics import km_steps
from audit.plotting.base import new_figure, no_data, safe_label

__all__ = ["plot_takedown_curves"]


def plot_takedown_curves(
    km: pd.DataFrame, *, unit: str = "h", title: str | None = None, show_censored: bool = True
) -> Figure:
    """Kaplan–Meier curves of the share not yet taken down, one per group, with CI bands.

    Parameters
    ----------
    km : pandas.DataFrame
        From :func:`audit.analysis.survival_by.kaplan_meier_by` (``time`` in seconds), or from
        :meth:`audit.workbench.Workbench.km` (``time_h`` in hours).
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
    >>> km = pd.DataFrame({"group": ["a", "a"], "time": [3600.0, 7200.0], "at_risk": [2, 1],
    ...                    "events": [1, 0], "censored": [0, 1], "survival": [0.5, 0.5],
    ...                    "ci_lower": [0.1, 0.1], "ci_upper": [0.9, 0.9]})
    >>> legend = plot_takedown_curves(km).axes[0].get_legend()
    >>> legend.get_title().get_text(), [text.get_text() for text in legend.get_texts()]
    ('shaded: 95% pointwise CI; | censored', ['a (n=2)'])
    """
    steps = km_steps(_in_seconds(km), unit=unit)
    fig, (ax,) = new_figure()
    title = title or "Time to takedown"
    if steps.empty:
        no_data(ax, title)
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
        labels.append(f"{safe_label(name)} (n={int(g['n'].iloc[0])})")
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


def _in_seconds(km: pd.DataFrame) -> pd.DataFrame:
    """``km`` with ``time`` in seconds: as given, or from ``time_h`` (hours, ``audit.open``'s
    ``km()``)."""
    if "time" in km.columns or "time_h" not in km.columns:
        return km
    return km.assign(time=km["time_h"] * 3600.0)
