"""The retry schedule is stated once (``audit.spec.RETRY_DELAYS_S``); every place that quotes it
in words (docs, the catalogue, docstrings) must say the same, so a change to the spec that
misses a quote fails here."""

from __future__ import annotations

import re
from pathlib import Path

from audit.spec import RETRY_DELAYS_S, schedule_text

ROOT = Path(__file__).parents[1]
SOURCES = sorted(
    [
        *ROOT.joinpath("docs").glob("*.md"),
        ROOT / "README.md",
        *ROOT.joinpath("audit").rglob("*.py"),
        *ROOT.joinpath("audit").rglob("*.json"),
        *ROOT.joinpath("audit").rglob("*.ipynb"),
    ]
)
#: "30 s, 2 min, 10 min, 1 h" (an "and" before the last allowed) and "delays 30, 120, 600, 3600 s".
WORDS = re.compile(r"\d+ (?:s|min|h)(?:,? (?:and )?\d+ (?:s|min|h)){2,}")
NUMBERS = re.compile(r"delays? (\d+(?:, \d+)+) s\b")


def _quotes() -> list[tuple[str, str, str]]:
    out = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(ROOT))
        out += [(name, "words", m.group(0)) for m in WORDS.finditer(text)]
        out += [(name, "numbers", m.group(1)) for m in NUMBERS.finditer(text)]
    return out


def test_every_quote_of_the_schedule_matches_the_spec():
    quotes = _quotes()
    assert len(quotes) >= 3  # the check reads real text (docs/tables.md, controls.json, ...)
    numbers = ", ".join(str(s) for s in RETRY_DELAYS_S[1:])
    wrong = [
        (name, q)
        for name, kind, q in quotes
        if (re.sub(r",? and ", ", ", q) if kind == "words" else q)
        != (schedule_text() if kind == "words" else numbers)
    ]
    assert wrong == []


def test_the_check_sees_a_stale_quote():
    stale = "retries after 30 s, 2 min, 15 min and 1 h"
    (match,) = WORDS.findall(stale)
    assert re.sub(r",? and ", ", ", match) == "30 s, 2 min, 15 min, 1 h" != schedule_text()
