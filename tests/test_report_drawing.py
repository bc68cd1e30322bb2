"""Figures drawn once by whichever of the report process and the kernel comes first
(audit.report.drawing), and the notebook saved once, not around every cell."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import threading
import time

import matplotlib
import nbformat
import pandas as pd
import pytest

import audit.report.ahead as ahead
import audit.report.drawing as drawing
from audit.errors import ReportError
from audit.locks import lock_file, unlock_file
from audit.report import figures, parse_period
from audit.report.ahead import DrawingAhead
from audit.report.drawing import FOLDER, drawn_once
from audit.report.format import HTML
from audit.report.params import Period
from audit.report.render import render
from audit.report.rundir import open_run
from tests.test_report_figures import demo_run  # noqa: F401  (fixture)


def _counting(calls: list, text: str):
    def draw() -> HTML:
        calls.append(text)
        return HTML(text)

    return draw


def test_a_figure_is_drawn_once_and_then_read_back(tmp_path):
    calls: list = []
    first = drawn_once(tmp_path, "f", _counting(calls, "<p>one</p>"))
    again = drawn_once(tmp_path, "f", _counting(calls, "<p>two</p>"))
    assert str(first) == str(again) == "<p>one</p>" and calls == ["<p>one</p>"]
    assert (tmp_path / "f.html").read_text() == "<p>one</p>"


def test_the_report_process_stops_where_the_kernel_is_or_has_been(tmp_path):
    calls: list = []
    with open(tmp_path / "held.lock", "a+b") as other:  # another open file: another holder
        lock_file(other)
        assert drawn_once(tmp_path, "held", _counting(calls, "x"), wait=False) is None
    drawn_once(tmp_path, "done", _counting(calls, "kernel's"))
    assert drawn_once(tmp_path, "done", _counting(calls, "again"), wait=False) is None
    assert calls == ["kernel's"]


def test_the_kernel_waits_for_the_figure_being_drawn_and_takes_it(tmp_path):
    started, calls = threading.Event(), []

    def slow() -> HTML:
        started.set()
        time.sleep(0.5)
        return HTML("<p>drawn ahead</p>")

    ahead = threading.Thread(target=drawn_once, args=(tmp_path, "f", slow), kwargs={"wait": False})
    ahead.start()
    started.wait(10)
    t0 = time.monotonic()
    got = drawn_once(tmp_path, "f", _counting(calls, "<p>kernel</p>"))
    ahead.join()
    assert str(got) == "<p>drawn ahead</p>" and calls == []
    assert time.monotonic() - t0 > 0.2  # it waited for the drawing


def test_a_figure_whose_drawer_died_is_drawn_by_the_other(tmp_path):
    # A process takes the lock, then is killed before it writes the figure.
    code = (
        "import fcntl, os, sys, time\n"
        f"f = open({str(tmp_path / 'f.lock')!r}, 'a+b')\n"
        "fcntl.flock(f.fileno(), fcntl.LOCK_EX)\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        proc.kill()
        calls: list = []
        assert str(drawn_once(tmp_path, "f", _counting(calls, "<p>mine</p>"))) == "<p>mine</p>"
        assert calls == ["<p>mine</p>"]
    finally:
        proc.kill()
        proc.wait()


def test_a_failed_drawing_leaves_the_figure_to_the_other(tmp_path):
    def broken() -> HTML:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        drawn_once(tmp_path, "f", broken, wait=False)
    calls: list = []
    assert str(drawn_once(tmp_path, "f", _counting(calls, "ok"))) == "ok" and calls == ["ok"]


def test_figures_drawn_ahead_are_the_figures_drawn_in_the_notebook(demo_run, tmp_path):  # noqa: F811
    _, folder = demo_run
    plain = open_run(folder)
    expected = {name: str(getattr(figures, name)(plain)) for name in figures.FIGURES}
    run_dir = tmp_path / "run"
    shutil.copytree(folder, run_dir)
    with DrawingAhead(run_dir, figures.FIGURES) as drawer:
        drawer.join()  # no kernel came: it drew every figure, from the last
        assert drawer.drawn == list(reversed(figures.FIGURES))
        run = open_run(run_dir)  # the kernel's side: each figure taken, not drawn again
        got = {name: str(getattr(figures, name)(run)) for name in figures.FIGURES}
        assert run.tables == {} and run.derived == {}  # no table was read to draw
    assert got == expected
    assert not (run_dir / FOLDER).exists()  # removed before the run folder is renamed


def test_figures_drawn_ahead_from_the_frames_in_memory_are_those_of_the_folder(
    demo_run,  # noqa: F811
    tmp_path,
):
    memory, folder = demo_run
    expected = {name: str(getattr(figures, name)(open_run(folder))) for name in figures.FIGURES}
    run_dir = tmp_path / "run"
    shutil.copytree(folder, run_dir)
    drawn = type(memory)(memory.manifest, memory.findings, {}, run_dir,
                         figures.drawn_tables(memory.tables))  # fmt: skip
    assert len(drawn.tables["deliveries"].columns) < len(memory.tables["deliveries"].columns)
    with DrawingAhead(run_dir, figures.FIGURES, drawn) as drawer:
        drawer.join()
        run = open_run(run_dir)
        got = {name: str(getattr(figures, name)(run)) for name in figures.FIGURES}
        assert run.tables == {}  # every figure taken as drawn from memory
    assert got == expected


@pytest.mark.parametrize("folder_made", ["at once", "later"])
def test_figures_drawn_aside_from_the_run_tables_are_those_of_the_folder(
    demo_run,  # noqa: F811
    tmp_path,
    folder_made,
):
    """The figures drawn by a forked process from the run's tables in memory, before the run
    folder exists, are those the notebook draws from the run folder; the child leaves them in
    the figures' folder once it is made, and the kernel then reads no table."""
    memory, folder = demo_run
    expected = {name: str(getattr(figures, name)(open_run(folder))) for name in figures.FIGURES}
    run_dir = tmp_path / "run"
    p = memory.manifest["period"]
    period = Period(p["label"], pd.Timestamp(p["start"]), pd.Timestamp(p["end"]))
    assert period.as_dict() == p  # as the manifest the kernel reads
    pending = ahead.drawing_aside(run_dir, period, memory.tables)
    assert pending is not None
    if folder_made == "later":
        time.sleep(1.5)  # the child has drawn some or all of them in memory meanwhile
    shutil.copytree(folder, run_dir)
    drawing.figures_folder(run_dir)
    # rerun=False: a child that failed (a figure that raised) raises here, never redrawn here
    assert pending.result() == list(figures.FIGURES)  # in the kernel's order: none came
    run = open_run(run_dir)
    got = {name: str(getattr(figures, name)(run)) for name in figures.FIGURES}
    assert run.tables == {}  # every figure taken as the child drew it
    assert got == expected


@pytest.mark.parametrize("held", [0, 2, 5])
def test_a_figure_the_kernel_holds_is_left_to_it_by_the_process_drawing_aside(
    demo_run,  # noqa: F811
    tmp_path,
    held,
):
    """Drawn in the kernel's order until the figure the kernel holds (it caught up); then the
    rest from the last, to meet it in the middle. The kernel's figure is left to it."""
    memory, _ = demo_run
    names = figures.FIGURES
    folder = drawing.figures_folder(tmp_path)
    with open(folder / f"{names[held]}.lock", "a+b") as lock:
        lock_file(lock)  # the kernel is drawing this one
        pending = ahead.drawing_aside(tmp_path, parse_period("2026-10"), memory.tables)
        assert pending is not None
        assert pending.result() == [*names[:held], *reversed(names[held + 1 :])]
    assert not (folder / f"{names[held]}.html").exists()


def test_a_link_planted_for_the_figures_folder_is_not_followed(demo_run, tmp_path):  # noqa: F811
    memory, _ = demo_run
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / FOLDER).symlink_to(elsewhere)
    pending = ahead.drawing_aside(tmp_path / "run", parse_period("2026-10"), memory.tables)
    assert pending is not None
    time.sleep(3)  # long enough to draw every figure of the demo month
    pending.cancel()
    assert list(elsewhere.iterdir()) == []


def test_a_table_only_the_figures_read_is_read_once_it_is_written(demo_run, tmp_path):  # noqa: F811
    """While the tables only the figures read are written (the figures' ``tables.lock`` held),
    reading one of them waits; the other tables are read at once."""
    from audit.report.rundir import FIGURE_ONLY_TABLES

    _, folder = demo_run
    run_dir = tmp_path / "run"
    shutil.copytree(folder, run_dir)
    held = drawing.tables_pending(drawing.figures_folder(run_dir))
    run = open_run(run_dir)
    assert len(run.table("latency"))  # not one of them: read while the lock is held
    got = {}
    reader = threading.Thread(target=lambda: got.update(events=run.table(FIGURE_ONLY_TABLES[1])))
    reader.start()
    reader.join(1.0)
    assert reader.is_alive() and not got  # waiting
    unlock_file(held)
    held.close()
    reader.join(10)
    assert not reader.is_alive() and len(got["events"])


def test_a_pipe_planted_at_the_tables_lock_neither_blocks_nor_is_waited_on(tmp_path):
    """Found in review: a FIFO at ``tables.lock`` blocked the report in ``open`` for ever."""
    import os

    folder = drawing.figures_folder(tmp_path)
    os.mkfifo(folder / drawing.TABLES_LOCK)
    outcome = []

    def both():
        try:
            drawing.tables_pending(folder)
        except OSError as e:
            outcome.append(type(e).__name__)
        drawing.tables_written(folder)
        outcome.append("not waited")

    worker = threading.Thread(target=both, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive() and outcome[-1] == "not waited" and len(outcome) == 2


def test_no_figure_is_drawn_aside_when_this_process_holds_much_of_the_free_memory(
    demo_run,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """The child keeps alive what this process frees while it draws: over two thirds of the
    available memory held, none is forked (the figures are drawn by the thread instead)."""
    import audit.memory

    memory, _ = demo_run
    period = parse_period("2026-10")
    monkeypatch.setattr(audit.memory, "available_memory", lambda: 3_000_000_000)
    monkeypatch.setattr(audit.memory, "resident_memory", lambda: 2_100_000_000)
    assert ahead.drawing_aside(tmp_path, period, memory.tables) is None
    monkeypatch.setattr(audit.memory, "resident_memory", lambda: 1_900_000_000)
    pending = ahead.drawing_aside(tmp_path, period, memory.tables)
    assert pending is not None
    pending.cancel()


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


def test_without_flock_the_kernel_draws_every_figure_and_the_report_process_none(
    tmp_path, monkeypatch
):
    def no_flock(_f):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(drawing, "lock_file", no_flock)
    monkeypatch.setattr(drawing, "try_lock_file", no_flock)
    calls: list = []
    assert drawn_once(tmp_path, "f", _counting(calls, "x"), wait=False) is None
    assert str(drawn_once(tmp_path, "f", _counting(calls, "drawn"))) == "drawn"
    assert calls == ["drawn"]


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


def test_a_kept_figure_that_is_a_link_is_not_followed_but_drawn(tmp_path):
    secret = tmp_path / "secrets.txt"
    secret.write_text("HMAC_KEY=s3cr3t")
    (tmp_path / "f.html").symlink_to(secret)
    calls: list = []
    assert str(drawn_once(tmp_path, "f", _counting(calls, "<p>drawn</p>"))) == "<p>drawn</p>"
    assert calls == ["<p>drawn</p>"] and secret.read_text() == "HMAC_KEY=s3cr3t"
    assert not (tmp_path / "f.html").is_symlink()  # the link itself was replaced


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


def _fake_figures(monkeypatch, names, seconds=0.0, calls=None):
    """Figure functions ``names`` on the figures module that each take ``seconds`` to draw."""

    def make(name):
        def draw(run) -> HTML:
            if calls is not None:
                calls.append(name)
            time.sleep(seconds)
            return HTML(f"<p>{name} by the child</p>")

        return type("Figure", (), {"__wrapped__": staticmethod(draw)})

    for name in names:
        monkeypatch.setattr(figures, name, make(name), raising=False)
    monkeypatch.setattr(ahead, "in_report_style", lambda draw, run: draw(run))


def _held_by_someone(folder, name) -> bool:
    with open(folder / f"{name}.lock", "a+b") as probe:  # another open file: another holder
        if drawing.try_lock_file(probe):
            unlock_file(probe)
            return False
        return True


def test_the_child_takes_the_next_figure_before_it_lets_the_last_one_go(tmp_path, monkeypatch):
    """Hand over hand: when the child releases a figure's lock, it holds the next one's
    already. The kernel, which waited for the first, then waits for the next one too; it used
    to take its free lock in the moment between and draw it itself (4 runs in 6 at 1M
    deliveries, 1.7 s each: matplotlib imported, the run folder's tables read)."""
    names = ("fa", "fb", "fc")
    _fake_figures(monkeypatch, names)
    folder = drawing.figures_folder(tmp_path)
    seen: list[tuple[str, bool]] = []
    real_unlock = drawing.unlock_file

    def unlock(lock):
        ino = os.fstat(lock.fileno()).st_ino
        name = next(n for n in names if os.stat(folder / f"{n}.lock").st_ino == ino)
        k = names.index(name)
        if k + 1 < len(names):
            seen.append((name, _held_by_someone(folder, names[k + 1])))
        real_unlock(lock)

    monkeypatch.setattr(drawing, "unlock_file", unlock)
    assert ahead._drawn_then_left(folder, names, run=None) == list(names)
    assert seen == [("fa", True), ("fb", True)]
    assert [(folder / f"{n}.html").read_text() for n in names] == [
        f"<p>{n} by the child</p>" for n in names
    ]


def test_a_kernel_close_behind_the_child_draws_no_figure_itself(tmp_path, monkeypatch):
    """The kernel starts once the child draws the first figure (it holds its lock then; the
    lock file alone exists a moment before it is locked), and takes them in order."""
    names = ("fa", "fb", "fc", "fd")
    child_drew: list[str] = []
    _fake_figures(monkeypatch, names, seconds=0.15, calls=child_drew)
    folder = drawing.figures_folder(tmp_path)
    kernel_drew: list[str] = []
    child = threading.Thread(target=ahead._drawn_then_left, args=(folder, names, None))
    child.start()
    deadline = time.monotonic() + 30
    while not child_drew and time.monotonic() < deadline:
        time.sleep(0.001)
    got = [
        str(drawn_once(folder, n, _counting(kernel_drew, f"<p>{n} by the kernel</p>")))
        for n in names
    ]
    child.join()
    assert kernel_drew == []
    assert got == [f"<p>{n} by the child</p>" for n in names]
