"""The docs state what the package holds: the README's count of controls is the catalogue's,
``docs/controls.md`` has a row for every control, and the README and ``docs/scale.md`` stay short
enough to read (docs/contributing.md, "Adding a control").

The catalogue (``audit/findings/controls.json``, read by ``load_catalogue``) is the source of
truth: the runner runs its entries, and ``tests/test_findings.py`` checks that every entry has a
function and every function an entry.
"""

from __future__ import annotations

import re
from pathlib import Path

from audit.findings.catalogue import load_catalogue

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
CONTROLS_DOC = ROOT / "docs" / "controls.md"
SCALE_DOC = ROOT / "docs" / "scale.md"

#: How the README counts the controls: "the 21 controls".
COUNT = re.compile(r"\bthe (\d+) controls\b", re.IGNORECASE)
#: A row of a table in docs/controls.md that starts with a control id: "| SIG-03 | ...".
ROW = re.compile(r"^\| ([A-Z]+-\d+) \|", re.MULTILINE)

MAX_LINES = {README: 130, SCALE_DOC: 300}


def count_problems(readme: str, ids: list[str]) -> list[str]:
    """What is wrong with the README's control count(s), given the catalogue's ids."""
    counts = [int(n) for n in COUNT.findall(readme)]
    if not counts:
        return ["the README does not say how many controls there are ('the N controls')"]
    return [
        f"the README says 'the {n} controls'; the catalogue holds {len(ids)}"
        for n in counts
        if n != len(ids)
    ]


def undocumented(doc: str, ids: list[str]) -> list[str]:
    """Catalogue ids without a row in ``docs/controls.md``, and rows of ids not in it."""
    rows = set(ROW.findall(doc))
    missing = [cid for cid in ids if cid not in rows]
    unknown = sorted(rows - set(ids))
    return [f"{cid}: no row in docs/controls.md" for cid in missing] + [
        f"{cid}: a row in docs/controls.md, not in the catalogue" for cid in unknown
    ]


def test_the_readme_counts_the_controls_of_the_catalogue():
    ids = list(load_catalogue())
    assert len(ids) > 0
    assert count_problems(README.read_text(encoding="utf-8"), ids) == []


def test_docs_controls_has_a_row_for_every_control_of_the_catalogue():
    ids = list(load_catalogue())
    assert undocumented(CONTROLS_DOC.read_text(encoding="utf-8"), ids) == []


def test_the_checks_see_a_stale_count_and_a_missing_row():
    ids = list(load_catalogue())
    readme = README.read_text(encoding="utf-8")
    (shown,) = {int(n) for n in COUNT.findall(readme)}
    stale = readme.replace(f"the {shown} controls", f"the {shown - 1} controls")
    assert count_problems(stale, ids) == [
        f"the README says 'the {shown - 1} controls'; the catalogue holds {len(ids)}"
    ]
    assert count_problems(COUNT.sub("the controls", readme), ids) != []
    assert count_problems(readme, [*ids, "NEW-01"]) != []  # a control added, the README not
    doc = CONTROLS_DOC.read_text(encoding="utf-8")
    assert undocumented(doc, [*ids, "NEW-01"]) == ["NEW-01: no row in docs/controls.md"]
    stale_row = f"{ids[0]}: a row in docs/controls.md, not in the catalogue"
    assert undocumented(doc, ids[1:]) == [stale_row]


def test_the_readme_and_the_scale_doc_stay_short():
    long = {
        str(path.relative_to(ROOT)): n
        for path, most in MAX_LINES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > most
    }
    assert long == {}, f"lines (at most {', '.join(f'{p.name} {m}' for p, m in MAX_LINES.items())})"
