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
from audit.report import build_index, parse_period, run_report
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
                  "Toolkit version", "Inputs"):  # fmt: skip
        assert f"<dt>{field}</dt>" in page
    assert f"<dd>{run_id}</dd>" in page and "2026-11-01 00:00 UTC" in page
    findings = json.loads((october.run_dir / "findings.json").read_text())
    failing = [f for f in findings if f["status"] == "fail"]
    assert failing
    cards = re.split(r"<div class=.finding [a-z]+. id=", page)[1:]
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
    # an empty log is noted as such (a quiet day?); the error is the one other line
    err = "".join(
        f"{line}\n"
        for line in capsys.readouterr().err.splitlines()
        if not line.startswith("audit: note: ")
    )
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
    moved = mark_stale(tmp_path, "20261201T060000Z-123456")
    assert [p.name for p in moved] == ["20261101T060000Z-abcdef.failed"]
    assert not list(tmp_path.glob("*/.tmp-*"))
    manifest = json.loads((moved[0] / "manifest.json").read_text())
    assert "interrupted" in manifest["message"] and manifest["exit_status"] == 3
    page = build_index(tmp_path).read_text()
    assert "20261101T060000Z-abcdef" in page and "no report (failed)" in page
    assert "report.html" not in page  # the folder has no report: no link to one
    for href in re.findall(r'href="([^"]+)"', page):
        assert (tmp_path / href).is_file(), href


def test_the_frames_are_freed_before_the_notebook_renders(hostile, tmp_path, monkeypatch):  # noqa: F811
    """The kernel reads the run folder; the report process must not hold the analysis beside
    it (at 1M deliveries 1.7 GB, as much as the kernel itself)."""
    import gc
    import weakref

    import audit.report.pipeline as pipeline

    logs, secrets = hostile
    alive = {}
    real_compute = pipeline.compute

    def compute(inputs, params, period):
        computed = real_compute(inputs, params, period)
        alive["deliveries"] = weakref.ref(computed.analysis.deliveries)
        alive["tables"] = weakref.ref(computed.tables["deliveries"])
        return computed

    def fake_render(nb_path, run_dir, *, title, timeout_s):
        gc.collect()
        alive["at render"] = {k: ref() is not None for k, ref in list(alive.items())}
        (run_dir / "report.html").write_text("<html></html>", encoding="utf-8")

    monkeypatch.setattr(pipeline, "compute", compute)
    monkeypatch.setattr(pipeline, "render", fake_render)
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.exit_code == 1 and result.html is not None
    assert alive["at render"] == {"deliveries": False, "tables": False}


def _fake_render(nb_path, run_dir, *, title, timeout_s):
    (run_dir / "report.html").write_text("<html><body>report</body></html>", encoding="utf-8")


# --- a failed run says why ----------------------------------------------------------------------


def _enospc_on(name: str, monkeypatch) -> list[str]:
    """Make the run folder's CSV writer fail on ``name`` as a full disk does; the names it
    was asked to write."""
    import errno

    import audit.report.rundir as rundir

    real, asked = rundir.write_csv, []

    def full_disk(frame, path):
        asked.append(path.name)
        if path.name == name:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(frame, path)

    monkeypatch.setattr(rundir, "write_csv", full_disk)
    return asked


def test_a_full_disk_marks_the_run_failed_with_its_cause(hostile, tmp_path, monkeypatch, capsys):  # noqa: F811
    """Found in review (issue 36): a run that failed on a full disk was labelled "interrupted"
    by the next run. Its folder is now <run id>.failed at once, its manifest saying where and
    why it failed; the CLI says so in one line, exit 3; a later run keeps that cause."""
    import audit.report.pipeline as pipeline

    monkeypatch.setattr(pipeline, "render", _fake_render)
    asked = _enospc_on("incidents.csv", monkeypatch)
    logs, secrets = hostile
    out = tmp_path / "r"
    assert main(_args(logs, secrets, out)) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0] and "marked failed" in err[0]
    assert "incidents.csv" in asked
    [failed] = (out / "2026-10").iterdir()
    assert failed.name.endswith(".failed")
    manifest = json.loads((failed / "manifest.json").read_text())
    assert manifest["failure"]["stage"] == "writing the run folder"
    assert manifest["failure"]["cause"].startswith("No space left on device")
    assert manifest["exit_status"] == 3
    monkeypatch.undo()
    monkeypatch.setattr(pipeline, "render", _fake_render)
    later = _run(tmp_path, logs, secrets, out_dir=out)
    assert later.exit_code == 1
    again = json.loads((failed / "manifest.json").read_text())
    assert again["failure"] == manifest["failure"]  # not relabelled "interrupted"


def test_on_a_full_disk_the_partial_tables_make_room_for_the_cause(hostile, tmp_path, monkeypatch):  # noqa: F811
    import errno

    import audit.report.pipeline as pipeline

    _enospc_on("incidents.csv", monkeypatch)
    real, calls = pipeline.write_json, []

    def full_until_freed(path, data):
        calls.append(path.parent / "tables")
        if (path.parent / "tables").exists():
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)

    monkeypatch.setattr(pipeline, "write_json", full_until_freed)
    logs, secrets = hostile
    with pytest.raises(ReportError, match="No space left on device"):
        _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    [failed] = (tmp_path / "r" / "2026-10").iterdir()
    assert failed.name.endswith(".failed") and not (failed / "tables").exists()
    assert len(calls) == 2
    manifest = json.loads((failed / "manifest.json").read_text())
    assert "No space left on device" in manifest["failure"]["cause"]


def test_ctrl_c_while_rendering_marks_the_run_failed_and_releases_the_lock(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    import audit.report.pipeline as pipeline

    def interrupted(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "render", interrupted)
    logs, secrets = hostile
    out = tmp_path / "r"
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path, logs, secrets, out_dir=out)
    [failed] = (out / "2026-10").iterdir()
    manifest = json.loads((failed / "manifest.json").read_text())
    assert failed.name.endswith(".failed")
    assert manifest["failure"] == {"stage": "rendering", "cause": "interrupted (KeyboardInterrupt)"}
    with lock(out):  # released
        pass


def test_a_stale_folder_keeps_a_recorded_cause(tmp_path):
    recorded = tmp_path / "2026-10" / ".tmp-20261101T060000Z-aaaaaa"
    recorded.mkdir(parents=True)
    failure = {"stage": "writing the run folder", "cause": "No space left on device"}
    (recorded / "manifest.json").write_text(json.dumps({"run_id": "x", "failure": failure}))
    silent = tmp_path / "2026-10" / ".tmp-20261101T070000Z-bbbbbb"
    silent.mkdir()
    (silent / "manifest.json").symlink_to("/dev/zero")  # never read
    moved = mark_stale(tmp_path, "20261201T060000Z-123456")
    got = {p.name: json.loads((p / "manifest.json").read_text()) for p in moved}
    assert got["20261101T060000Z-aaaaaa.failed"]["failure"] == failure
    assert got["20261101T070000Z-bbbbbb.failed"]["failure"] == {
        "stage": "unknown",
        "cause": "interrupted (no cause recorded)",
    }


def test_a_link_planted_in_a_stale_folder_is_never_written_through(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("DATA")
    stale = tmp_path / "r" / "2026-10" / ".tmp-evil"
    stale.mkdir(parents=True)
    (stale / ".manifest.json.tmp").symlink_to(victim)  # the name an earlier release wrote
    moved = mark_stale(tmp_path / "r", "20261201T060000Z-123456")
    assert victim.read_text() == "DATA"
    assert [p.name for p in moved] == ["evil.failed"]


def test_a_stale_folder_that_cannot_be_marked_is_left_and_stops_nothing(tmp_path):
    stale = tmp_path / "2026-10" / ".tmp-x"
    (stale / "manifest.json").mkdir(parents=True)  # a folder where the manifest goes
    other = tmp_path / "2026-09" / ".tmp-y"
    other.mkdir(parents=True)
    with pytest.warns(UserWarning, match=r"\.tmp-x: left as it is, not marked failed"):
        moved = mark_stale(tmp_path, "20261201T060000Z-123456")
    assert [p.name for p in moved] == ["y.failed"] and stale.is_dir()


# --- what the run folder holds ---------------------------------------------------------------


def test_every_listed_table_is_written_whole_as_csv_and_parquet(hostile, tmp_path, monkeypatch):  # noqa: F811
    import csv

    import audit.report.pipeline as pipeline
    from audit.report.rundir import PARQUET_ONLY

    monkeypatch.setattr(pipeline, "render", _fake_render)
    logs, secrets = hostile
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    folder = result.run_dir / "tables"
    names = {p.stem for p in folder.glob("*.parquet")}
    assert {"not_valid_requests", "incidents", "waiting_on_client", "undelivered_events"} <= names
    for name in sorted(names - set(PARQUET_ONLY)):
        frame = pd.read_parquet(folder / f"{name}.parquet")
        with open(folder / f"{name}.csv", newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
        assert rows[0] == list(frame.columns) and len(rows) == len(frame) + 1, name
    assert not [n for n in PARQUET_ONLY if (folder / f"{n}.csv").exists()]
    # every table the report lists (and may cut) is there as CSV
    listed = {
        "verdict_counts",
        "not_valid_requests",
        "latency",
        "event_outcomes",
        "undelivered_events",
        "success_by_subscription",
        "success_by_event",
        "off_schedule_attempts",
        "retried_after_success",
        "takedown_summary",
        "waiting_on_client",
        "subscriptions_latest",
        "inputs",
        "incidents",
        "subscriptions",
    }
    assert {p.stem for p in folder.glob("*.csv")} >= listed


def test_the_manifest_says_what_the_period_covered_and_what_was_skipped(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    """Known answers: the hostile month's two requests (5 and 6 October), a file of another
    name in the captures folder, and the newest listing snapshot's own time."""
    import audit.report.pipeline as pipeline

    monkeypatch.setattr(pipeline, "render", _fake_render)
    logs, secrets = hostile
    folder = tmp_path / "captures"
    folder.mkdir()
    os.replace(logs, folder / "receiver.jsonl")
    (folder / "notes.txt").write_text("not a capture log\n")
    snapshot = DATA / "snapshots"
    result = run_report(
        [folder],
        secrets_path=secrets,
        snapshots=[snapshot],
        period=parse_period("2026-10"),
        out_dir=tmp_path / "r",
    )
    m = json.loads((result.run_dir / "manifest.json").read_text())
    assert m["coverage"]["deliveries"] == 2 and m["coverage"]["valid"] == 2
    assert m["coverage"]["first_received"].startswith("2026-10-05T10:00:30")
    assert m["coverage"]["last_received"].startswith("2026-10-06T10:00:30")
    assert m["skipped_inputs"] == [
        {"path": str(folder / "notes.txt"), "reason": "not a capture log name"}
    ]
    assert m["snapshots"]["newest_taken_at"].startswith("2026-01-03T00:00:00")


def test_no_skipped_input_is_an_empty_list(hostile, tmp_path, monkeypatch):  # noqa: F811
    import audit.report.pipeline as pipeline

    monkeypatch.setattr(pipeline, "render", _fake_render)
    logs, secrets = hostile
    m = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r").manifest
    assert m["skipped_inputs"] == []
    assert m["snapshots"] == {"newest_taken_at": None, "covers_period": False}  # no listing


@pytest.mark.slow
def test_the_run_folders_notebook_runs_again_with_papermill(hostile, tmp_path):  # noqa: F811
    """The notebook left in the run folder names no temporary path: after the folder is
    renamed into place (and moved elsewhere), papermill runs it again as it is."""
    logs, secrets = hostile
    result = _run(tmp_path, logs, secrets, out_dir=tmp_path / "r")
    assert result.html is not None, result.message
    text = (result.run_dir / "report.ipynb").read_text(encoding="utf-8")
    assert ".tmp-" not in text  # the inputs' paths are named, the run folder's never
    moved = tmp_path / "elsewhere"
    os.replace(result.run_dir, moved)
    again = subprocess.run(
        [sys.executable, "-m", "papermill", "report.ipynb", str(tmp_path / "again.ipynb")],
        cwd=moved,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, again.stderr[-2000:]
    rerun = nbformat.read(tmp_path / "again.ipynb", as_version=4)
    errors = [o for c in rerun.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert errors == [] and len(rerun.cells) > 10


# --- --pdf ------------------------------------------------------------------------------------


def _pdf_args(hostile, tmp_path):  # noqa: F811
    logs, secrets = hostile
    return _args(logs, secrets, tmp_path / "r", "--pdf")


def test_pdf_without_chromium_says_so_in_one_line_and_keeps_the_exit_code(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    import audit.report.pipeline as pipeline

    monkeypatch.setattr(pipeline, "render", _fake_render)
    monkeypatch.setattr(pipeline, "find_chromium", lambda: None)
    assert main(_pdf_args(hostile, tmp_path)) == 1  # the findings' exit code
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "audit: --pdf: no Chromium found (chromium, chromium-browser, google-chrome on PATH);"
        " report.pdf not written"
    ]
    [run] = (tmp_path / "r" / "2026-10").iterdir()
    assert not (run / "report.pdf").exists()
    assert json.loads((run / "manifest.json").read_text())["pdf"]["status"] == "skipped"


def test_a_pdf_that_fails_keeps_the_exit_code_and_is_recorded(
    hostile,  # noqa: F811
    tmp_path,
    monkeypatch,
    capsys,
):
    import audit.report.pipeline as pipeline

    def fails(html, pdf):
        raise ReportError(f"Chromium exited 1 printing {html}")

    monkeypatch.setattr(pipeline, "render", _fake_render)
    monkeypatch.setattr(pipeline, "find_chromium", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(pipeline, "print_pdf", fails)
    assert main(_pdf_args(hostile, tmp_path)) == 1
    [line] = capsys.readouterr().err.splitlines()
    [run] = (tmp_path / "r" / "2026-10").iterdir()
    assert line == (
        f"audit: --pdf: Chromium exited 1 printing {run / 'report.html'}; report.pdf not written"
    )
    pdf = json.loads((run / "manifest.json").read_text())["pdf"]
    assert pdf["status"] == "failed" and ".tmp-" not in pdf["reason"]


def test_pdf_is_written_beside_the_html(hostile, tmp_path, monkeypatch, capsys):  # noqa: F811
    import audit.report.pipeline as pipeline

    printed = []

    def prints(html, pdf):
        printed.append(html.name)
        pdf.write_bytes(b"%PDF-1.4 fake")

    monkeypatch.setattr(pipeline, "render", _fake_render)
    monkeypatch.setattr(pipeline, "find_chromium", lambda: "/usr/bin/chromium")
    monkeypatch.setattr(pipeline, "print_pdf", prints)
    assert main(_pdf_args(hostile, tmp_path)) == 1
    out = capsys.readouterr()
    [run] = (tmp_path / "r" / "2026-10").iterdir()
    assert printed == ["report.html"] and (run / "report.pdf").read_bytes().startswith(b"%PDF")
    assert f"pdf:       {run / 'report.pdf'}" in out.out and out.err == ""
    assert json.loads((run / "manifest.json").read_text())["pdf"] == {"status": "ok"}


def test_a_period_folder_that_is_a_link_is_refused(hostile, tmp_path, capsys):  # noqa: F811
    logs, secrets = hostile
    out, elsewhere = tmp_path / "r", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "2026-10").symlink_to(elsewhere)
    assert main(_args(logs, secrets, out)) == 3
    err = capsys.readouterr().err
    assert (
        err.startswith(f"audit: error: {out / '2026-10'}: a symbolic link;")
        and err.count("\n") == 1
    )
    assert list(elsewhere.iterdir()) == []
