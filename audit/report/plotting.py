"""Figures of the report: drawing only, from the run folder's tables.

:func:`embed` turns a matplotlib Figure into an inline ``<img>`` with alt text and a caption
(one self-contained file, no script). :func:`takedown_panels` draws the Kaplan-Meier curves as
small multiples, one panel per class, each with its band, on a time axis cut near the 99th
percentile of the durations (the long tail is stated in the caption, not drawn). Class names
(incident data) are drawn through :func:`audit.plotting.base.safe_label`: never as mathtext.
"""

from __future__ import annotations

import base64
import io
import math

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave
from matplotlib.ticker import PercentFormatter

from audit.plotting.base import safe_label
from audit.report.format import HTML
from audit.report.markup import defang_text, esc

__all__ = ["axis_limit_h", "embed", "takedown_panels"]


#: Figures are drawn at this resolution (pixels per inch).
_DPI = 96
#: At most this many takedown panels (one per incident class): 1,000 classes took the
#: notebook past its 15-minute cell limit, and past 892 the figure passes matplotlib's size.
MAX_PANELS = 12


def embed(fig: Figure, alt: str, caption: str | None = None) -> HTML:
    """The figure as an inline PNG with ``alt`` text (what it shows) and a caption.

    The figure is drawn once, at its own size (its layout engine has made room for labels and
    legends). Only when something still reaches past the edges (a legend of a few dozen
    subscriptions) is it saved again with a tight box, which grows the picture to show it all.
    """
    buf = io.BytesIO()
    fig.set_dpi(_DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    if _fits(fig, canvas):
        imsave(buf, canvas.buffer_rgba(), format="png", origin="upper", dpi=_DPI)
    else:
        fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return HTML(
        f'<figure class="audit"><img src="data:image/png;base64,{data}" alt="{esc(alt)}">'
        f"{cap}</figure>"
    )


def _fits(fig: Figure, canvas: FigureCanvasAgg) -> bool:
    """Whether everything drawn lies within the figure (to a pixel)."""
    inside = fig.get_tightbbox(canvas.get_renderer())  # inches
    width, height = fig.get_size_inches()
    px = 1 / _DPI
    return bool(
        inside.x0 >= -px
        and inside.y0 >= -px
        and inside.x1 <= width + px
        and inside.y1 <= height + px
    )


def axis_limit_h(durations: pd.DataFrame | None, q: float = 0.99) -> float:
    """Upper end of the time axis in hours: the ``q`` quantile of all durations, rounded up to
    a readable step (at least 1 h).

    >>> axis_limit_h(pd.DataFrame({"duration_s": [3600.0 * h for h in range(1, 51)]}))
    54.0
    """
    if durations is None or durations.empty:
        return 1.0
    h = durations["duration_s"].astype(float).dropna() / 3600
    if h.empty:
        return 1.0
    top = float(h.quantile(q))
    step = 1 if top <= 12 else 6 if top <= 72 else 24
    return float(max(1, math.ceil(top / step) * step))


def _steps(g: pd.DataFrame) -> tuple[np.ndarray, ...]:
    g = g.sort_values("time", kind="stable")
    t = np.concatenate(([0.0], g["time"].to_numpy(float) / 3600))
    s = np.concatenate(([1.0], g["survival"].to_numpy(float)))
    lo = np.concatenate(([1.0], g["ci_lower"].to_numpy(float)))
    hi = np.concatenate(([1.0], g["ci_upper"].to_numpy(float)))
    return t, s, np.nan_to_num(lo, nan=0.0), np.nan_to_num(hi, nan=1.0)


def takedown_panels(
    km: pd.DataFrame, durations: pd.DataFrame, *, overall: pd.DataFrame | None = None
) -> tuple[Figure, str]:
    """Small multiples of "not yet taken down" by class, and the alt text describing them.

    ``km`` is the per-class table (``group, time, survival, ci_lower, ci_upper, at_risk``);
    ``overall`` (optional) the same for all incidents, drawn first and faintly behind every
    panel for comparison.
    """
    fig = Figure(figsize=(9.0, 5.2))
    groups = list(dict.fromkeys(km["group"].astype(str))) if not km.empty else []
    every = len(groups)
    if every > MAX_PANELS:  # the classes with the most incidents; all are in the table
        by = km.groupby(km["group"].astype(str))
        n_of = by["at_risk"].max() if "at_risk" in km else by.size()
        top = set(n_of.sort_values(ascending=False, kind="stable").index[:MAX_PANELS])
        groups = [g for g in groups if g in top]
    if not groups:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, "no incident to draw", ha="center", va="center")
        ax.set_axis_off()
        return fig, "Time to takedown: no incident in the data, nothing to draw."
    limit = axis_limit_h(durations)
    ncols = min(3, len(groups))
    nrows = math.ceil(len(groups) / ncols)
    fig.set_size_inches(9.0, 2.3 * nrows + 0.6)
    axes = fig.subplots(nrows, ncols, sharex=True, sharey=True, squeeze=False).ravel()
    ref = _steps(overall) if overall is not None and not overall.empty else None
    descr = []
    for ax, name in zip(axes, groups, strict=False):
        g = km[km["group"].astype(str) == name]
        t, s, lo, hi = _steps(g)
        if ref is not None:
            ax.plot(ref[0], ref[1], drawstyle="steps-post", color="0.6", linewidth=1)
        ax.fill_between(t, lo, hi, step="post", color="tab:blue", alpha=0.2, linewidth=0)
        ax.plot(t, s, drawstyle="steps-post", color="tab:blue", linewidth=1.8)
        n = int(g["at_risk"].max()) if "at_risk" in g else len(g)
        ax.set_title(f"{safe_label(name, limit=30)} (n={n})", fontsize="medium")
        ax.grid(alpha=0.3)
        below = t[s <= 0.5]
        shown = defang_text(name if len(name) <= 60 else name[:59] + "…")  # incident data
        descr.append(
            f"{shown} median {below[0]:.1f} h" if len(below) else f"{shown} median not reached"
        )
    for ax in axes[len(groups) :]:
        ax.set_axis_off()
    axes[0].set_xlim(0, limit)
    axes[0].set_ylim(0, 1.02)
    axes[0].yaxis.set_major_formatter(PercentFormatter(1.0))
    for ax in axes[(nrows - 1) * ncols :]:
        ax.set_xlabel("hours since the clock start")
    for ax in axes[::ncols]:
        ax.set_ylabel("not yet taken down")
    fig.tight_layout()
    drawn = (
        ""
        if every == len(groups)
        else (
            f" The {len(groups)} classes with the most incidents are drawn, of {every}; the "
            "takedown table has them all."
        )
    )
    alt = (
        "Kaplan-Meier curves of the share of incidents not yet taken down, one panel per "
        f"incident class, with 95% bands; the grey line is all incidents. Time axis 0 to "
        f"{limit:g} h (99th percentile of durations).{drawn} " + "; ".join(descr) + "."
    )
    return fig, alt
