"""The one-way report pipeline: rendering failures, clean stderr, determinism, HTML contents,
trend, custom notebooks, and the run folder's safety (lock, stale folders, index)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from audit.cli import main
from audit.errors import ParameterError, ReportError
from audit.report import build_index, figures, parse_period, run_report
from audit.report.pipeline import lock, mark_stale
from tests.test_reports import hostile  # noqa: F401  (fixture)

DATA = Path(__file__).parent / "data"


def _args(logs, secrets, out, *extra, period="2026-10"):
    return ["report", str(logs), "--secrets", str(secrets), "--period", period,
            "--out", str(out), "--quiet", *extra]  # fmt: skip


def _run(tmp_path, logs, secrets, **kw):
    return run_report([logs], secrets_path=secrets, period=parse_period("2026-10"), **kw)


# --- rendering is downstream of the findings -------------------------------------------------


@pytest.mark.slow
def test_a_broken_notebook_keeps_findings_and_exit_code(hostile, tmp_path):  # noqa: F811
    logs, secrets = hostile
    out = tmp_path / "r"
    result = _run(tmp_path, logs, secrets, out_dir=out, notebook=DATA / "broken_report.ipynb")
    assert result.exit_code == 1  # TKD-03 fails (two incidents wait on the client), as usual
    assert result.rendering_failed and "ZeroDivisionError" in result.message
    assert not result.run_dir.name.endswith(".failed") and result.html is None
    findings = json.loads((result.run_dir / "findings.json").read_text())
    assert any(f["check_id"] == "TKD-03" and f["status"] == "fail" for f in findings)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["rendering"]["status"] == "failed" and manifest["exit_status"] == 1
    index = (out / "index.html").read_text()
    assert "rendering failed" in index and "report.html" not in index
    assert f"{result.run_dir.name}/findings.csv" in index


@pytest.mark.slow
def test_cli_reports_a_rendering_failure_on_stderr_and_keeps_the_exit_code(
    hostile,  # noqa: F811
    tmp_path,
    capsys,
):
    logs, secrets = hostile
    args = _args(logs, secrets, tmp_path / "r", "--notebook", str(DATA / "broken_report.ipynb"))
    assert main(args) == 1
    err = capsys.readouterr().err
    assert err.startswith("audit: warning: rendering failed: notebook cell")


@pytest.mark.slow
def test_a_custom_notebook_gets_run_dir_only(hostile, tmp_path):  # noqa: F811
    logs, secrets = hostile
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell(
                "import json, pathlib\n"
                "m = json.loads((pathlib.Path(run_dir) / 'manifest.json').read_text())\n"
                "print('custom template for', m['run_id'], sorted(globals().keys() & {'logs'}))"
            ),
        ],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )
    path = tmp_path / "mine.ipynb"
    nbformat.write(nb, path)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r", notebook=path)
    page = result.html.read_text()
    assert f"custom template for {result.run_dir.name} []" in page
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["notebook"]["path"] == str(path.resolve())


# --- a clean console ---------------------------------------------------------------------------

PROGRESS = re.compile(
    r"audit: (loaded \d+ records from \d+ files \(\d+ valid, \d+ unreadable"
    r"(; \d+ received before the period, for the (incidents' history|retries))?"
    r"(; \d+ earlier events, for the incidents' history)?\)"
    r"|analyses and controls done: \d+ findings, \d+ failing|rendering the report)"
)


@pytest.mark.slow
def test_stderr_of_the_demo_holds_only_progress_lines(tmp_path):
    """Run as a cron job would (a subprocess): the kernel's own stderr is captured too."""
    proc = subprocess.run(
        [sys.executable, "-m", "audit.cli", "demo", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONWARNINGS": ""},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert [line for line in lines if not PROGRESS.fullmatch(line)] == []
    assert len(lines) == 3
    # The README shows what `make demo` prints: its progress and findings lines are this run's.
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    shown = readme.split("`make demo` prints", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    counted = [ln for ln in shown.splitlines() if ln.startswith(("audit:", "findings:"))]
    real = [ln for ln in proc.stdout.splitlines() if ln.startswith("findings:")]
    assert counted == [*lines, *real]
    for line in proc.stdout.splitlines():  # every path printed exists
        label, _, value = line.partition(":")
        if label in ("run", "report", "index", "secrets", "truth"):
            assert Path(value.strip()).exists(), line
    quiet = subprocess.run(
        [sys.executable, "-m", "audit.cli", "demo", "--out", str(tmp_path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert quiet.returncode == 0 and quiet.stderr == ""


# --- determinism and contents --------------------------------------------------------------------


@pytest.mark.slow
def test_same_inputs_give_identical_findings_and_manifest(hostile, tmp_path):  # noqa: F811
    logs, secrets = hostile
    a = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    b = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert a.run_dir != b.run_dir
    assert (a.run_dir / "findings.json").read_bytes() == (b.run_dir / "findings.json").read_bytes()
    assert (a.run_dir / "findings.csv").read_bytes() == (b.run_dir / "findings.csv").read_bytes()
    volatile = {"run_id", "started", "ended", "duration_s", "trend"}
    ma, mb = (json.loads((r.run_dir / "manifest.json").read_text()) for r in (a, b))
    assert {k: v for k, v in ma.items() if k not in volatile} == {
        k: v for k, v in mb.items() if k not in volatile
    }


@pytest.mark.slow
def test_html_has_header_title_remediation_and_a_trend_on_the_next_period(
    hostile,  # noqa: F811
    tmp_path,
):
    logs, secrets = hostile
    out = tmp_path / "r"
    october = _run(tmp_path, logs, secrets, out_dir=out)
    page = october.html.read_text()
    run_id = october.run_dir.name
    title = re.search(r"<title>(.*?)</title>", page, re.S)[1]
    assert "Webhook delivery compliance report" in title and "2026-10" in title and run_id in title
    for field in ("Client", "Period", "Judged as of", "Run id", "Generated at",
                  "Toolkit version", "Input files"):  # fmt: skip
        assert f"<dt>{field}</dt>" in page
    assert f"<dd>{run_id}</dd>" in page and "2026-11-01 00:00 UTC" in page
    findings = json.loads((october.run_dir / "findings.json").read_text())
    failing = [f for f in findings if f["status"] == "fail"]
    assert failing
    cards = re.split(r"<div class=.finding.>", page)[1:]
    assert len(cards) == len(failing)
    for f in failing:
        card = next(c for c in cards if f["finding_uid"] in c)
        assert "Remediation" in card and f["remediation"][:40] in card.replace("&#x27;", "'")
    assert "No completed run of the previous period" in page
    # November: no new records; the two incidents still wait on the client at as_of.
    november = run_report([logs], secrets_path=secrets, period=parse_period("2026-11"), out_dir=out)
    trend = json.loads((november.run_dir / "trend.json").read_text())
    assert trend["previous"]["run_id"] == run_id
    persisting = {r["check_id"]: r for r in trend["persisting"]}
    assert "TKD-03" in persisting
    oct_uid = next(f["finding_uid"] for f in failing if f["check_id"] == "TKD-03")
    assert persisting["TKD-03"]["previous_uid"] == oct_uid
    assert persisting["TKD-03"]["finding_uid"] != oct_uid  # the uid encodes the period
    npage = november.html.read_text()
    assert "Trend against the previous period" in npage and run_id in npage
    assert "Persisting failures" in npage
    index = (out / "index.html").read_text()
    assert "vs 2026-10" in index


# --- parameters are checked before anything starts (issue 9 section 5) --------------------------


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("thresholds:\n  ttt_median_h: !!binary aGVsbG8=\n", "must be a number, not binary data"),
        ("as_of: !!binary aGVsbG8=\n", "as_of must be an ISO 8601 time, not binary data"),
        ("thresholds:\n  ttt_median_h: 12h\n", "must be a number, not str"),
        ("thresholds:\n  ttt_median_h: .nan\n", "must be a number"),
        ("as_of: 2262-04-12T00:00:00Z\n", "years 1678 to 2261 only"),
        ("as_of: 2262-04-12\n", "years 1678 to 2261 only"),
        ("as_of: 99999-01-01T00:00:00Z\n", "is not an ISO 8601 time"),
        ("thresholds: [1, 2]\n", "thresholds must map parameter names to numbers"),
        ("client_id: 7\n", "client_id must be text"),
    ],
)
def test_bad_params_are_one_line_and_create_no_run_folder(tmp_path, capsys, params, message):
    logs = tmp_path / "log.jsonl"
    logs.write_text("")
    secrets = tmp_path / "s.json"
    secrets.write_text('{"wh_1": [{"secret": "whsec_x"}]}')
    path = tmp_path / "p.yaml"
    path.write_text(params)
    out = tmp_path / "r"
    code = main(_args(logs, secrets, out, "--params", str(path)))
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("audit: error: ") and message in err
    assert "internal error" not in err
    assert not out.exists()


@pytest.mark.parametrize("text", ["２０２６-10", "2026-١٠", "2026-W٤٤", "2026-10-01..2026-10-1５"])
def test_period_accepts_ascii_digits_only(text):
    with pytest.raises(ParameterError, match="ASCII digits"):
        parse_period(text)


def test_bad_period_or_notebook_creates_nothing(tmp_path, capsys):
    secrets = tmp_path / "s.json"
    secrets.write_text("{}")
    secrets.chmod(0o600)  # a group-readable secrets file adds a warning line (issue 9)
    out = tmp_path / "r"
    assert main(_args(secrets, secrets, out, period="２０２６-10")) == 3
    assert main(_args(secrets, secrets, out, "--notebook", str(tmp_path / "no.ipynb"))) == 3
    assert main(_args(tmp_path / "missing.jsonl", secrets, out)) == 3
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("audit: error: ") for line in err)
    assert not out.exists()


# --- lock, stale folders, index ------------------------------------------------------------------


def test_the_lock_file_is_not_followed_nor_truncated(tmp_path):
    out = tmp_path / "r"
    out.mkdir()
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    (out / ".lock").symlink_to(victim)
    with pytest.raises(ReportError, match="symlink"), lock(out):
        pass
    assert victim.read_text() == "keep me"
    (out / ".lock").unlink()
    (out / ".lock").write_text("note left by an operator")
    with lock(out):
        pass
    assert (out / ".lock").read_text() == "note left by an operator"


def test_a_second_holder_of_the_lock_is_refused(tmp_path):
    with lock(tmp_path), pytest.raises(ReportError, match="holds the lock"), lock(tmp_path):
        pass


def _descriptors_of(path: Path) -> list[int]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                out.append(int(fd))
        except OSError:  # the listing's own descriptor, closed meanwhile
            pass
    return out


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs Linux /proc")
def test_a_process_forked_under_the_lock_closes_its_copy_of_it(tmp_path):
    """The figures' process is forked under the run lock: it must not hold the lock (after a
    kill -9 of the report, a copy kept by a child would refuse every later run)."""
    from audit.ingest.side import aside

    with lock(tmp_path):
        assert _descriptors_of(tmp_path / ".lock")
        pending = aside(lambda: _descriptors_of(tmp_path / ".lock"), rerun=False)
        assert pending is not None and pending.result() == []
    with lock(tmp_path):  # released: taken again
        pass


def test_stale_tmp_folders_are_marked_failed_and_indexed_without_dead_links(tmp_path):
    stale = tmp_path / "2026-10" / ".tmp-20261101T060000Z-abcdef"
    (stale / "tables").mkdir(parents=True)
    (stale / "findings.csv").write_text("x\n")
    (stale / ".figures").mkdir()  # a run killed while it rendered
    (stale / ".figures" / "takedown.html").write_text("<p>kept</p>")
    moved = mark_stale(tmp_path, "20261201T060000Z-123456")
    assert [p.name for p in moved] == ["20261101T060000Z-abcdef.failed"]
    assert not (moved[0] / ".figures").exists()
    assert not list(tmp_path.glob("*/.tmp-*"))
    manifest = json.loads((moved[0] / "manifest.json").read_text())
    assert "interrupted" in manifest["message"] and manifest["exit_status"] == 3
    page = build_index(tmp_path).read_text()
    assert "20261101T060000Z-abcdef" in page and "no report (failed)" in page
    assert "report.html" not in page  # the folder has no report: no link to one
    for href in re.findall(r'href="([^"]+)"', page):
        assert (tmp_path / href).is_file(), href


@pytest.mark.parametrize("blob", [b"{not json", b"\xff\xfe\x00garbage", b"[1, 2]"])
def test_an_unreadable_manifest_is_listed_and_breaks_nothing(tmp_path, blob):
    good = tmp_path / "2026-09" / "20261001T060000Z-aaaaaa"
    good.mkdir(parents=True)
    (good / "manifest.json").write_text(
        json.dumps({"run_id": good.name, "period": {"label": "2026-09"}, "exit_status": 0,
                    "started": "2026-10-01T06:00:00+00:00", "findings": {"status": {"pass": 3}}})
    )  # fmt: skip
    (good / "report.html").write_text("<html></html>")
    bad = tmp_path / "2026-10" / "20261101T060000Z-bbbbbb"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_bytes(blob)
    page = build_index(tmp_path).read_text()
    assert "unreadable manifest" in page and bad.name in page
    assert f'href="2026-09/{good.name}/report.html"' in page
    assert "PASS 3" in page


@pytest.mark.parametrize("where", ["aside", "thread"])
def test_the_frames_are_freed_before_the_notebook_renders(hostile, tmp_path, monkeypatch, where):  # noqa: F811
    """The kernel reads the run folder; the parent must not hold the analysis beside it (at
    1M deliveries 1.7 GB, as much as the kernel itself). With the figures drawn aside, the
    kernel reads none of the large tables, which go once written, while it runs."""
    import gc
    import time
    import weakref

    import audit.ingest.side as side
    import audit.report.pipeline as pipeline

    logs, secrets = hostile
    alive = {}
    real_compute = pipeline.compute
    if where == "thread":
        monkeypatch.setattr(side, "aside", lambda fn, rerun=True: None)

    def compute(inputs, params, period, **kw):
        computed = real_compute(inputs, params, period, **kw)
        alive["deliveries"] = weakref.ref(computed.analysis.deliveries)
        alive["tables"] = weakref.ref(computed.tables["deliveries"])
        return computed

    def fake_render(nb_path, run_dir, *, title, timeout_s, kernel=None, ahead=(), drawn_from=None):
        gc.collect()
        alive["at render"] = {k: ref() is not None for k, ref in list(alive.items())}
        for _ in range(200):  # the late writes end meanwhile
            gc.collect()
            alive["soon"] = {k: alive[k]() is not None for k in ("deliveries", "tables")}
            if not any(alive["soon"].values()):
                break
            time.sleep(0.05)
        (run_dir / "report.html").write_text("<html></html>", encoding="utf-8")

    monkeypatch.setattr(pipeline, "compute", compute)
    monkeypatch.setattr(pipeline, "render", fake_render)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.exit_code == 1 and result.html is not None
    assert alive["soon"] == {"deliveries": False, "tables": False}
    if where == "thread":
        assert alive["at render"] == {"deliveries": False, "tables": False}


@pytest.mark.parametrize("where", ["aside", "thread"])
def test_figures_a_late_kernel_kept_are_not_renamed_into_the_run(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
    where,
):
    """A cell that timed out may keep drawing until the kernel is shut down, after the figures'
    folder was first removed: the run folder is renamed into place without it. The packaged
    notebook's figures are drawn ahead: by a forked process from the moment the tables exist
    (``aside``), or, where no process may be forked, by a thread while the kernel runs."""
    import audit.ingest.side as side
    import audit.report.pipeline as pipeline
    from audit.report.drawing import FOLDER

    logs, secrets = hostile
    given = {}
    if where == "thread":
        monkeypatch.setattr(side, "aside", lambda fn, rerun=True: None)

    def late_render(nb_path, run_dir, *, title, timeout_s, kernel=None, ahead=(), drawn_from=None):
        given["ahead"], given["drawn"] = ahead, drawn_from
        given["folder"] = (run_dir / FOLDER).is_dir()
        (run_dir / FOLDER).mkdir(exist_ok=True)
        (run_dir / FOLDER / "takedown.html").write_text("<p>late</p>")
        raise ReportError("notebook execution failed: CellTimeoutError")

    monkeypatch.setattr(pipeline, "render", late_render)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.rendering_failed and not (result.run_dir / FOLDER).exists()
    if where == "aside":  # the figures' folder made and being filled before rendering
        assert given == {"ahead": (), "drawn": None, "folder": True}
    else:
        assert given["ahead"] == figures.FIGURES and not given["folder"]  # drawn in a thread,
        assert set(given["drawn"].tables) >= {"deliveries", "takedown_km"}  # from the frames
    _run(tmp_path, logs, secrets, out_dir=tmp_path / "r2", notebook=DATA / "broken_report.ipynb")
    assert given == {"ahead": (), "drawn": None, "folder": False}  # a template: none


def test_a_figures_folder_that_cannot_be_made_only_costs_the_figures_drawn_aside(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Found in review: a link planted where the figures' folder goes ended the run with
    "File exists" (exit 3, findings lost). The child is stopped and the run goes on as without
    it; the link is never followed."""
    import audit.report.drawing as drawing
    import audit.report.pipeline as pipeline

    real = drawing.figures_folder
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def planted(run_dir):
        (run_dir / drawing.FOLDER).symlink_to(elsewhere)
        return real(run_dir)

    monkeypatch.setattr(pipeline, "figures_folder", planted)
    logs, secrets = hostile
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.exit_code == 1 and len(result.manifest["findings"]["status"])
    assert (result.run_dir / "findings.json").is_file()
    # The kernel drew every figure, outside the link (second review: the thread's own
    # folder failed on it, and the link stayed in the run folder).
    assert result.manifest["rendering"] == {"status": "ok"} and result.html is not None
    assert not os.path.lexists(result.run_dir / drawing.FOLDER)
    assert list(elsewhere.iterdir()) == []


def test_a_link_planted_at_the_tables_lock_only_costs_the_late_writes(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Found in review: a link at ``.figures/tables.lock`` ended the run with a raw "Too many
    levels of symbolic links" (findings lost). The tables only the figures read are written
    before rendering then; the link is never followed."""
    import audit.report.drawing as drawing
    import audit.report.pipeline as pipeline

    real = drawing.figures_folder
    victim = tmp_path / "victim"
    victim.write_text("keep")

    def planted(run_dir):
        folder = real(run_dir)
        (folder / drawing.TABLES_LOCK).symlink_to(victim)
        return folder

    monkeypatch.setattr(pipeline, "figures_folder", planted)
    logs, secrets = hostile
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.exit_code == 1 and result.manifest["rendering"] == {"status": "ok"}
    for name in ("deliveries", "events"):
        assert len(pd.read_parquet(result.run_dir / "tables" / f"{name}.parquet"))
    assert victim.read_text() == "keep"


def test_nothing_is_written_into_a_failed_run_once_its_lock_is_released(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Found in review: a ^C while the late writes ran left their thread writing; the next run
    marked the folder failed, then the thread made ``tables/`` again and wrote into it."""
    import threading
    import time

    import audit.report.pipeline as pipeline
    import audit.report.rundir as rundir

    real = rundir.write_tables
    ended = []

    def slow(tables, folder, **kw):
        if tables and set(tables) <= set(rundir.FIGURE_ONLY_TABLES):  # the late writes
            time.sleep(1.0)
        out = real(tables, folder, **kw)
        ended.append(time.monotonic())
        return out

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(rundir, "write_tables", slow)
    monkeypatch.setattr(pipeline, "render", interrupted)
    logs, secrets = hostile
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, logs, secrets, out_dir=out)
    returned = time.monotonic()
    assert not [t for t in threading.enumerate() if t.name == "audit-late"]
    assert ended and max(ended) <= returned
    with lock(out):  # released
        pass


def test_the_tables_only_the_figures_read_are_written_beside_the_rendering(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """With the figures drawn aside, the tables only they read are written while the notebook
    runs; a failure to write them (a full disk) fails the run, as for the CSV copies, and no
    run folder is renamed into place."""
    import audit.report.rundir as rundir
    from audit.errors import OutputError
    from audit.ingest.load import default_workers

    if default_workers() < 2:
        pytest.skip("the figures are drawn aside on two CPUs only")
    real = rundir.write_tables
    late = []

    def full_disk(tables, folder, **kw):
        if kw.get("make", True):  # written before rendering
            return real(tables, folder, **kw)
        late.append(sorted(tables))
        if "events" in tables:
            raise OutputError(
                f"{folder / 'events.parquet'}: cannot write (No space left on device)"
            )
        return real(tables, folder, **kw)

    monkeypatch.setattr(rundir, "write_tables", full_disk)
    logs, secrets = hostile
    out = tmp_path / "r"
    with pytest.raises(OutputError, match=r"events\.parquet: cannot write \(No space"):
        _run(tmp_path, logs, secrets, out_dir=out)
    assert late == [sorted(rundir.FIGURE_ONLY_TABLES)]
    assert all(p.name.startswith(".tmp-") for p in (out / "2026-10").iterdir())
    monkeypatch.setattr(rundir, "write_tables", real)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "ok")
    for name in rundir.FIGURE_ONLY_TABLES:  # written whole, before the rename
        assert len(pd.read_parquet(result.run_dir / "tables" / f"{name}.parquet"))


def test_csv_copies_are_written_beside_the_rendering_and_their_failure_fails_the_run(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    import audit.report.rundir as rundir
    from audit.errors import OutputError

    real = rundir.write_csv
    written = []

    def full_disk(frame, path):
        written.append(path.name)
        if path.name == "incidents.csv":
            raise OutputError(f"{path}: cannot write (No space left on device)")
        return real(frame, path)

    monkeypatch.setattr(rundir, "write_csv", full_disk)
    logs, secrets = hostile
    out = tmp_path / "r"
    with pytest.raises(OutputError, match="No space left"):
        _run(tmp_path, logs, secrets, out_dir=out)
    assert "incidents.csv" in written
    left = [p.name for p in (out / "2026-10").iterdir()]
    assert all(name.startswith(".tmp-") for name in left)  # no run renamed into place
    monkeypatch.setattr(rundir, "write_csv", real)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "ok")
    for name in rundir.CSV_TABLES:  # every CSV copy there, each the table it copies
        if (result.run_dir / "tables" / f"{name}.parquet").is_file():
            csv_text = (result.run_dir / "tables" / f"{name}.csv").read_text()
            frame = pd.read_parquet(result.run_dir / "tables" / f"{name}.parquet")
            assert csv_text.count("\n") >= len(frame) + 1, name


def test_the_csv_copies_are_written_while_the_late_parquet_files_are(tmp_path, monkeypatch):
    """At the end of a rendering both cores are free: the CSV copies no longer wait for the
    Parquet files of the tables only the figures read (a thread each); a failure of either is
    still raised by ``wait``."""
    import threading

    import audit.report.rundir as rundir

    started = threading.Event()
    real_csv, real_tables = rundir.write_csv, rundir.write_tables

    def csv(frame, path):
        started.set()
        return real_csv(frame, path)

    def parquet(tables, folder, **kw):
        assert started.wait(30), "the CSV copies waited for the Parquet files"
        return real_tables(tables, folder, **kw)

    monkeypatch.setattr(rundir, "write_csv", csv)
    monkeypatch.setattr(rundir, "write_tables", parquet)
    frame = pd.DataFrame({"incident_id": ["inc_1", "=HYPERLINK(1)"], "n": [1, 2]})
    folder = tmp_path / "tables"
    folder.mkdir()
    tables = {"deliveries": frame, "incidents": frame}
    rundir.LateWrites(tables, folder, parquet=["deliveries"]).wait()
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "deliveries.parquet"), frame)
    assert "'=HYPERLINK(1)" in (folder / "incidents.csv").read_text()

    def full(tables, folder, **kw):
        raise rundir.OutputError(f"{folder}: cannot write (No space left on device)")

    monkeypatch.setattr(rundir, "write_tables", full)
    writes = rundir.LateWrites({"deliveries": frame}, folder, parquet=["deliveries"])
    with pytest.raises(rundir.OutputError, match="No space left"):
        writes.wait()


@pytest.mark.skipif(sys.platform != "linux", reason="per-thread priority is Linux's")
def test_the_late_writes_run_behind_the_figures_process(tmp_path, monkeypatch):
    """The late Parquet files (by a pool of threads) and the CSV copies are written at a
    lower CPU priority (nice 10): the figures' process, which the kernel waits for, takes the
    core first. The caller's own priority is unchanged."""
    import os
    import threading

    import audit.report.rundir as rundir

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before, seen = nice(), {}
    real_csv = rundir.write_csv

    def csv(frame, path):
        seen["csv"] = nice()
        return real_csv(frame, path)

    def parquet(self, path, **kw):
        seen["parquet"] = nice()
        return real_parquet(self, path, **kw)

    real_parquet = pd.DataFrame.to_parquet
    monkeypatch.setattr(rundir, "write_csv", csv)
    monkeypatch.setattr(pd.DataFrame, "to_parquet", parquet)
    frame = pd.DataFrame({"incident_id": ["inc_1"], "n": [1]})
    folder = tmp_path / "tables"
    folder.mkdir()
    rundir.LateWrites(
        {"deliveries": frame, "incidents": frame}, folder, parquet=["deliveries"]
    ).wait()
    assert seen == {"csv": max(before, 10), "parquet": max(before, 10)}
    assert nice() == before
