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


def _km(names: list[str], at_risk: list[int]) -> pd.DataFrame:
    n = len(names)
    return pd.DataFrame(
        {"group": names, "time": [3600.0] * n, "at_risk": at_risk, "survival": [0.0] * n,
         "ci_lower": [0.0] * n, "ci_upper": [0.0] * n}
    )  # fmt: skip


def test_many_classes_draw_the_largest_few_and_say_so():
    # 1,000 classes (incident data) took the notebook past its 15-minute cell limit: no report.
    names = [f"class{i}" for i in range(40)]
    at_risk = [1] * 40
    for i in (3, 7, 39):
        at_risk[i] = 50  # the three largest must be among those drawn
    fig, alt = takedown_panels(_km(names, at_risk), pd.DataFrame({"duration_s": [3600.0]}))
    drawn = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert len(drawn) == 12
    assert {"class3 (n=50)", "class7 (n=50)", "class39 (n=50)"} <= set(drawn)
    assert "The 12 classes with the most incidents are drawn, of 40" in alt


def test_a_class_that_is_a_url_is_defanged_in_the_alt_text():
    url = "https://login.evil.example/x"
    _, alt = takedown_panels(_km([url], [2]), pd.DataFrame({"duration_s": [3600.0]}))
    assert "hxxps://login[.]evil[.]example/x median" in alt and url not in alt
