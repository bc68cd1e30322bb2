"""audit.report.plotting: class names are drawn as text, never as mathtext."""

from __future__ import annotations

import pandas as pd
from matplotlib.cbook import is_math_text

from audit.report.plotting import embed, takedown_panels


def test_takedown_panels_draw_a_dollar_class_as_literal_text():
    hostile = "$\\nosuchcommand{$"
    km = pd.DataFrame(
        {"group": [hostile, "c" * 50], "time": [3600.0, 7200.0], "at_risk": [3, 1],
         "survival": [0.0, 0.0], "ci_lower": [0.0, 0.0], "ci_upper": [0.0, 0.0]}
    )  # fmt: skip
    fig, alt = takedown_panels(km, pd.DataFrame({"duration_s": [3600.0, 7200.0]}))
    html = str(embed(fig, alt))  # draws the figure: mathtext would raise here
    assert html.startswith('<figure class="audit"><img src="data:image/png;base64,')
    first, second = (ax.get_title() for ax in fig.axes[:2])
    assert first == "\\$\\nosuchcommand{\\$ (n=3)" and not is_math_text(first)
    assert first.replace("\\$", "$") == "$\\nosuchcommand{$ (n=3)"  # what is shown
    assert second == "c" * 29 + "… (n=1)"
