"""Progress where a person waits (issue 35, point 7): `audit ingest`, `verify` and `simulate`
draw one line on a terminal (files, records, rate), nothing when stderr is not a terminal or
with --quiet; the counts come from where the work is done."""

from __future__ import annotations

import io
import json
import os
import pty
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import audit.cli.report as report_cli
from audit.cli import main
from audit.demo import simulate
from audit.ingest.signatures import sign
from audit.ingest.store import ingest
from audit.ingest.verdicts import verdict_table
from audit.progress import Progress, TerminalProgress, on_terminal
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_progress_0123456789"
BODY = '{"id":"evt_1","event":"incident.created","data":{"incidentId":"inc_1"}}'
#: Records per capture file of ``logs`` (7 + 5 + 3 = 15, one of them unreadable).
SIZES = (7, 5, 3)


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    """What a terminal was sent."""

    def isatty(self) -> bool:
        return True


class Recorder(Progress):
    """A Progress that keeps (files done, records) at every count."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[tuple[int, int]] = []

    def changed(self) -> None:
        self.steps.append((self.files_done, self.records))


@pytest.fixture
def logs(tmp_path):
    good = sign(SECRET, "1790812800", BODY.encode())
    paths = []
    for i, n in enumerate(SIZES):
        recs: list[object] = [capture(BODY + " " * (10 * i + k), signature=good) for k in range(n)]
        if i == 2:
            recs[1] = "{truncated"
        paths.append(write_jsonl(tmp_path / f"day{i}.jsonl", recs))
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    return paths, secrets


# -- the reporter --------------------------------------------------------------------------


def test_counts_in_words():
    clock = Clock()
    p = Progress(clock)
    assert p.line() == "0 records, 0.0 s"
    p.expect_files(31)
    p.file_done(12)
    p.add_records(48_210)
    clock.now += 2.0
    assert p.line() == "12/31 files, 48,210 records, 24,105 records/s, 2.0 s"
    p.files_finished(11)  # never backwards
    p.files_finished(14)
    assert p.files_done == 14


def test_terminal_line_is_redrawn_in_place_a_few_times_a_second_and_ended():
    clock, out = Clock(), Terminal()
    p = TerminalProgress(out, "audit: ingest", every_s=0.25, clock=clock)
    p.expect_files(2)
    p.add_records(10)
    assert out.getvalue() == ""  # nothing in the first quarter second
    clock.now += 0.3
    p.add_records(1_000)
    first = "\raudit: ingest: 0/2 files, 1,010 records, 3,367 records/s, 0.3 s"
    assert out.getvalue() == first
    for _ in range(50):  # 50 counts within 0.1 s: not drawn
        clock.now += 0.002
        p.add_records(1)
    assert out.getvalue() == first
    clock.now += 0.2
    p.file_done(2)
    second = "\raudit: ingest: 2/2 files, 1,060 records, 1,767 records/s, 0.6 s"
    assert out.getvalue() == first + second
    p.close()
    p.close()  # once
    assert out.getvalue() == first + second + second + "\n"


def test_shorter_line_covers_the_longer_one():
    clock, out = Clock(), Terminal()
    p = TerminalProgress(out, "x", every_s=0.0, clock=clock)
    clock.now += 1
    p.add_records(1_000_000)
    clock.now += 99
    p.add_records(0)
    first, second = out.getvalue().split("\r")[1:]
    assert first == "x: 1,000,000 records, 1,000,000 records/s, 1.0 s"
    shorter = "x: 1,000,000 records, 10,000 records/s, 100.0 s"
    assert second == shorter + " " * (len(first) - len(shorter)) and len(shorter) < len(first)
    p.clear()
    assert out.getvalue().endswith("\r" + " " * len(shorter) + "\r")


def test_on_terminal_only_on_a_terminal_and_not_quiet():
    piped = io.StringIO()
    with on_terminal("audit: verify", stream=piped) as p:
        assert p is None
    with on_terminal("audit: verify", stream=Terminal(), quiet=True) as p:
        assert p is None
    assert piped.getvalue() == ""
    out = Terminal()
    with on_terminal("audit: verify", stream=out) as p:
        assert isinstance(p, TerminalProgress)
        p.add_records(3)
    assert out.getvalue().startswith("\raudit: verify: 3 records") and out.getvalue()[-1] == "\n"


def test_a_warning_takes_the_line_off_first(monkeypatch):
    out = Terminal()
    said: list[str] = []  # what the terminal showed when each warning was shown
    monkeypatch.setattr(warnings, "showwarning", lambda *a, **k: said.append(out.getvalue()))
    shown = warnings.showwarning
    with on_terminal("audit: verify", stream=out, every_s=0.0) as p:
        assert p is not None
        p.add_records(1)
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("careful", UserWarning, stacklevel=1)
    line = out.getvalue().split("\r")[1]
    assert line.startswith("audit: verify: 1 records")
    assert said == ["\r" + line + "\r" + " " * len(line) + "\r"]
    assert warnings.showwarning is shown and out.getvalue().endswith("\n")  # put back


def test_an_error_before_any_line_adds_nothing():
    out = Terminal()
    with pytest.raises(OSError), on_terminal("audit: verify", stream=out):
        raise OSError("no such file")
    assert out.getvalue() == ""


# -- the counts come from the work ---------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_ingest_counts_files_and_records_as_pieces_finish(tmp_path, logs, workers):
    paths, secrets = logs
    p = Recorder()
    r = ingest(paths, secrets, tmp_path / "store", workers=workers, chunk_bytes=512, progress=p)
    assert (p.files_total, p.files_done, p.records) == (3, 3, sum(SIZES))
    assert r.records == sum(SIZES)
    # records counted piece by piece (pieces of ~512 bytes), before the first file was done
    before_first = [records for files, records in p.steps if files == 0 and records]
    assert len(before_first) >= 2 and before_first[-1] == SIZES[0]
    again = Recorder()  # nothing new: files still counted, no record read
    ingest(paths, secrets, tmp_path / "store", workers=workers, progress=again)
    assert (again.files_done, again.records) == (3, 0)


def test_records_verified_again_after_a_secrets_change_are_counted(tmp_path, logs):
    paths, secrets = logs
    store = tmp_path / "store"
    ingest(paths, secrets, store)
    rotated = write_secrets(
        tmp_path / "rotated.json",
        {
            "wh_1": [
                {"secret": SECRET},
                {"secret": "whsec_next", "valid_from": "2027-01-01T00:00:00Z"},
            ]
        },
    )
    p = Recorder()
    r = ingest([], rotated, store, progress=p)
    assert r.reverified == sum(SIZES) - 1  # the unreadable record has no subscription
    assert p.records == sum(SIZES) - 1  # the parts read again, part by part (not month=none's)
    assert len([s for s in p.steps if s[1]]) >= 2


@pytest.mark.parametrize("workers", [1, 2])
def test_verify_counts_files_and_records_as_pieces_finish(logs, workers):
    paths, secrets = logs
    p = Recorder()
    table = verdict_table(paths, secrets, workers=workers, piece_bytes=512, progress=p)
    assert table.num_rows == sum(SIZES)
    assert (p.files_total, p.files_done, p.records) == (3, 3, sum(SIZES))
    assert (0, SIZES[0]) in p.steps or (1, SIZES[0]) in p.steps
    assert any(0 < records < SIZES[0] for _, records in p.steps)  # a piece, not the file


def test_verify_counts_a_har_file(tmp_path, logs):
    paths, secrets = logs
    entry = {
        "startedDateTime": "2026-10-01T00:00:05Z",
        "request": {"method": "POST", "url": "https://h.example/", "headers": []},
        "response": {"status": 204},
    }
    har = tmp_path / "c.har"
    har.write_text(json.dumps({"log": {"version": "1.2", "entries": [entry, entry]}}))
    p = Recorder()
    verdict_table([paths[0], har], secrets, workers=1, progress=p)
    assert p.steps[-1] == (2, SIZES[0] + 2)


def test_simulate_counts_records_as_made_and_files_as_written(tmp_path):
    p = Recorder()
    r = simulate(tmp_path / "demo", days=7, incidents=20, progress=p)
    lines = sum(len(f.read_text().splitlines()) for f in r.captures)
    assert (p.files_total, p.files_done, p.records) == (len(r.captures), 6, lines)
    assert lines == r.records == 464  # the figures of simulate's own example
    made = [records for files, records in p.steps if files == 0]
    assert len(set(made)) > 100  # counted as the deliveries are made, not at the end


# -- the commands ----------------------------------------------------------------------------


def _run(args, monkeypatch, *, terminal: bool) -> tuple[int, str]:
    err = Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    code = main(args)
    return code, err.getvalue()


@pytest.mark.parametrize("quiet", [False, True])
def test_commands_draw_on_a_terminal_unless_quiet(tmp_path, logs, monkeypatch, quiet):
    paths, secrets = logs
    logs_args = [str(p) for p in paths]
    extra = ["--quiet"] if quiet else []
    runs = {
        "ingest": ["ingest", *logs_args, "--secrets", str(secrets), "--store", str(tmp_path / "s")],
        "verify": [
            "verify",
            *logs_args,
            "--secrets",
            str(secrets),
            "--out",
            str(tmp_path / "v.csv"),
        ],
        "simulate": [
            "simulate",
            "--out",
            str(tmp_path / "sim"),
            "--days",
            "7",
            "--incidents",
            "20",
        ],
    }
    final = {"ingest": "3/3 files, 15 records", "verify": "3/3 files, 15 records"}
    final["simulate"] = "6/6 files, 464 records"
    for name, args in runs.items():
        code, err = _run([*args, *extra], monkeypatch, terminal=True)
        assert code == 0
        if quiet:
            assert err == ""
            continue
        assert err.startswith(f"\raudit: {name}: ") and err.endswith("\n")
        last = err.rstrip("\n").split("\r")[-1]
        assert last.startswith(f"audit: {name}: {final[name]}, "), last
        assert err.count("\n") == 1  # one line, redrawn in place


def test_commands_piped_say_what_they_said_before(tmp_path, logs, monkeypatch):
    paths, secrets = logs
    store = tmp_path / "s"
    args = [*map(str, paths), "--secrets", str(secrets)]
    assert _run(["ingest", *args, "--store", str(store)], monkeypatch, terminal=False) == (0, "")
    out = str(tmp_path / "v.csv")
    assert _run(["verify", *args, "--out", out], monkeypatch, terminal=False) == (0, "")
    sim = ["simulate", "--out", str(tmp_path / "sim"), "--days", "7", "--incidents", "20"]
    assert _run(sim, monkeypatch, terminal=False) == (0, "")
    # a warning is said as before, on its own line; on a terminal the line is cleared first
    naive = write_jsonl(
        tmp_path / "naive.jsonl", [capture(BODY, received_at="2026-10-01T00:00:05")]
    )
    warning = "audit: warning: 1 received_at value(s) had no UTC offset and were read as UTC\n"
    verify = ["verify", str(naive), "--secrets", str(secrets), "--out", out]
    assert _run(verify, monkeypatch, terminal=False) == (0, warning)
    code, err = _run(verify, monkeypatch, terminal=True)
    assert code == 0 and err.startswith(warning)
    assert err.split("\n")[1].startswith("\raudit: verify: 1/1 files, 1 records, ")


@pytest.mark.slow
def test_ingest_under_a_real_terminal(tmp_path, logs):
    """The script itself, its stderr a pseudo-terminal: the line ends in the final counts."""
    paths, secrets = logs
    primary, secondary = pty.openpty()
    args = ["ingest", *map(str, paths), "--secrets", str(secrets), "--store", str(tmp_path / "s")]
    proc = subprocess.run(
        [sys.executable, "-m", "audit.cli", *args],
        stdout=subprocess.PIPE,
        stderr=secondary,
        cwd=Path(__file__).parents[1],
        timeout=60,
        check=False,
    )
    os.close(secondary)
    seen = b""
    while True:
        try:
            block = os.read(primary, 65536)
        except OSError:  # the terminal's other end closed: all read
            break
        if not block:
            break
        seen += block
    os.close(primary)
    assert proc.returncode == 0, seen
    assert proc.stdout.decode().splitlines()[-1].startswith("records: 15 stored (1 unreadable)")
    text = seen.decode().replace("\r\n", "\n")
    assert text.startswith("\raudit: ingest: ") and text.endswith("\n")
    assert text.rstrip("\n").split("\r")[-1].startswith("audit: ingest: 3/3 files, 15 records, ")


def test_simulate_without_progress_writes_the_same_bytes(tmp_path):
    a = simulate(tmp_path / "a", days=7, incidents=20)
    b = simulate(tmp_path / "b", days=7, incidents=20, progress=Progress())
    for x, y in zip(a.captures, b.captures, strict=True):
        assert x.read_bytes() == y.read_bytes()


def test_demo_draws_the_simulation_on_a_terminal(tmp_path, monkeypatch):
    def no_report(*args, **kwargs):  # the simulation is what is drawn; the report is not run
        raise KeyboardInterrupt

    monkeypatch.setattr(report_cli, "run_report", no_report)
    code, err = _run(["demo", "--out", str(tmp_path / "demo")], monkeypatch, terminal=True)
    assert code == 3  # stopped where the report would start
    assert err.startswith("\raudit: simulate: ")
    drawn = err.split("\n")[0].split("\r")[-1]
    assert drawn.startswith("audit: simulate: ") and " records" in drawn
