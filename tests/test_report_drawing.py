"""The report's figures drawn in one style (audit.report.drawing), and the notebook saved
before each code cell, not around every cell (audit.report.render)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import matplotlib
import nbformat
import pytest

from audit.errors import ReportError
from audit.report import figures
from audit.report.render import render
from audit.report.rundir import open_run
from tests.test_report_figures import demo_run  # noqa: F401  (fixture)


def test_report_figures_keep_their_style_whatever_the_user_set(demo_run):  # noqa: F811
    """A user's matplotlibrc or IPython start-up file applies in one process and not the
    other: the report's figures are drawn in matplotlib's defaults, so whoever draws them
    draws the same picture."""
    _, folder = demo_run
    plain = {name: str(getattr(figures, name)(open_run(folder))) for name in figures.FIGURES}
    mine = {"axes.facecolor": "red", "font.size": 17, "lines.linewidth": 5}
    with matplotlib.rc_context({**mine, "timezone": "Europe/Paris"}):  # a style never resets it
        styled = {name: str(getattr(figures, name)(open_run(folder))) for name in figures.FIGURES}
        assert matplotlib.rcParams["axes.facecolor"] == "red"  # the user's setting is back
    assert styled == plain


def _notebook(path, *sources: str, markdown: tuple[str, ...] = ()):
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
            *(nbformat.v4.new_code_cell(s) for s in sources),
            *(nbformat.v4.new_markdown_cell(m) for m in markdown),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    nbformat.write(nb, path)
    return path


def _outputs(path) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return ["".join(o.get("text", "") for o in c.get("outputs", [])) for c in nb.cells]


@pytest.mark.slow
def test_the_notebook_is_saved_before_code_cells_not_around_every_cell(tmp_path, monkeypatch):
    import papermill.engines

    saves: list = []
    real = papermill.engines.write_ipynb
    monkeypatch.setattr(
        papermill.engines, "write_ipynb", lambda nb, path: (saves.append(path), real(nb, path))
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cells = [f"print({i})" for i in range(6)]
    nb = _notebook(tmp_path / "n.ipynb", *cells, markdown=["# a heading", "some *text*"])
    render(nb, run_dir, title="t", timeout_s=60)
    # before each of the 8 code cells and at the start; not after each cell, nor around the
    # 2 markdown cells (papermill: 2 per cell, 20 in all)
    assert len(saves) == 9, saves
    assert [o.strip() for o in _outputs(run_dir / "report.ipynb")][-8:-2] == list("012345")


@pytest.mark.slow
def test_a_cell_that_times_out_leaves_the_notebook_as_far_as_it_ran(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    nb = _notebook(tmp_path / "n.ipynb", "print('before')", "import time; time.sleep(60)")
    with pytest.raises(ReportError, match="execution failed"):
        render(nb, run_dir, title="t", timeout_s=3)
    assert "before" in _outputs(run_dir / "report.ipynb")[-2]


#: Renders a notebook whose last cell never ends.
KILLED = """
import sys
from pathlib import Path
import audit.report.render as render
render.render(Path(sys.argv[1]), Path(sys.argv[2]), title="t", timeout_s=600)
"""


@pytest.mark.slow
def test_a_run_killed_mid_notebook_leaves_the_cells_done_before(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    nb = _notebook(
        tmp_path / "n.ipynb",
        "print('cell one done')",
        "print('cell two done')",
        "import time; time.sleep(600)",  # silent: papermill's own autosave never runs
    )
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(nb), str(run_dir)])
    saved = run_dir / "report.ipynb"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:  # papermill writes in place: a read may meet half a file
                if "cell two done\n" in _outputs(saved):
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        assert proc.poll() is None, "the rendering ended before it was killed"
        proc.kill()  # as the OOM killer would: no clean-up at all
    finally:
        proc.kill()
        proc.wait()
    nb = nbformat.read(saved, as_version=4)
    assert "cell one done\n" in _outputs(saved) and "cell two done\n" in _outputs(saved)
    status = [c.metadata["papermill"]["status"] for c in nb.cells]
    assert status[-1] == "running" and set(status[:-1]) == {"completed"}


def test_a_figure_never_warns_into_the_report(demo_run, tmp_path):  # noqa: F811
    """A subscription named in a script the font lacks: matplotlib warns of missing glyphs.
    Shown in the report when the kernel drew the figure, nowhere when the report process did:
    so neither shows it."""
    import warnings

    import pandas as pd

    _, folder = demo_run
    run_dir = tmp_path / "run"
    shutil.copytree(folder, run_dir)
    table = run_dir / "tables" / "deliveries.parquet"
    d = pd.read_parquet(table)
    d["subscription_id"] = d["subscription_id"].where(
        d["subscription_id"].isna(), "wh_\u65e5\u672c"
    )
    d.to_parquet(table, index=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        html = str(figures.daily_failures(open_run(run_dir)))
    assert "data:image/png" in html and caught == []
