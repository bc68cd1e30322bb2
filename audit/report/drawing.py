"""The report's figures drawn in one style, whatever the user's matplotlib settings.

:func:`styled` decorates a figure function of :mod:`audit.report.figures`: the figure is drawn
in matplotlib's default style with times in UTC and no warning shown, so the same run folder
gives the same pictures in ``audit report`` and in a notebook run by hand.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import wraps
from typing import TypeVar

from audit.report.format import HTML

__all__ = ["in_report_style", "styled"]

T = TypeVar("T")


def styled(draw: Callable[[T], HTML]) -> Callable[[T], HTML]:
    """Decorate a figure function: drawn through :func:`in_report_style`."""

    @wraps(draw)
    def figure(run: T) -> HTML:
        return in_report_style(draw, run)

    return figure


def in_report_style(draw: Callable[[T], HTML], run: T) -> HTML:
    """``draw(run)`` in the report's one style: matplotlib's defaults, times in UTC (a style
    never sets ``timezone``, so it is set here), and no warning shown (a label in a script the
    font lacks would otherwise warn into the report)."""
    import matplotlib.style  # start-up: matplotlib (0.3 s) only where a figure is drawn

    with (
        warnings.catch_warnings(),
        matplotlib.style.context("default"),
        matplotlib.rc_context({"timezone": "UTC"}),
    ):
        warnings.simplefilter("ignore")
        return draw(run)
