"""A log that holds no capture record is refused in one line, exit 3, by verify, ingest,
analyze and report, before anything is written; an empty log is a note; a real log with some
unreadable lines is read as before (audit.ingest.capture_check)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main
from audit.errors import InputError
from audit.ingest.capture_check import check_captures
from audit.ingest.signatures import sign
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_capture_check_0123456789"
BODY = '{"id":"evt_1","event":"incident.created","data":{"incidentId":"inc_1"}}'


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    secrets = write_secrets(tmp_path / "secrets.json", {"wh_1": [{"secret": SECRET}]})
    pretty = tmp_path / "secrets-pretty.json"
    pretty.write_text(json.dumps({"wh_1": [{"secret": SECRET}]}, indent=2))
    pretty.chmod(0o600)
    csv = tmp_path / "verdicts.csv"
    csv.write_text("source,line,verdict\nlog.jsonl,1,valid\nlog.jsonl,2,valid\n")
    listing = tmp_path / "webhooks-20261001T000000Z.json"
    doc = {"fetched_at": "2026-10-01T00:00:00Z", "response": {"data": [{"id": "wh_1"}]}}
    listing.write_text(json.dumps(doc, indent=1))
    good = sign(SECRET, "1790812800", BODY.encode())
    log = write_jsonl(tmp_path / "log.jsonl", ["{truncated", capture(BODY, signature=good)])
    empty = tmp_path / "quiet.jsonl"
    empty.write_text("\n\n")
    return {
        "secrets": secrets,
        "pretty": pretty,
        "csv": csv,
        "listing": listing,
        "log": log,
        "empty": empty,
    }


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _argv(command: str, log: Path, secrets: Path, out: Path) -> list[str]:
    if command == "verify":
        return ["verify", str(log), "--secrets", str(secrets), "--out", str(out / "v.csv")]
    if command == "ingest":
        return ["ingest", str(log), "--secrets", str(secrets), "--store", str(out / "store")]
    if command == "analyze":
        return ["analyze", str(log), "--secrets", str(secrets), "--out", str(out / "tables")]
    return [
        "report",
        str(log),
        "--secrets",
        str(secrets),
        "--period",
        "2026-10",
        "--out",
        str(out / "reports"),
        "--quiet",
    ]


@pytest.mark.parametrize("command", ["verify", "ingest", "analyze", "report"])
@pytest.mark.parametrize("wrong", ["csv", "secrets", "pretty", "listing"])
def test_a_file_without_capture_records_is_refused_before_anything_is_written(
    inputs, tmp_path, capsys, command, wrong
):
    out = tmp_path / "out"
    out.mkdir()
    before = _tree(tmp_path)
    code = main(_argv(command, inputs[wrong], inputs["secrets"], out))
    err = capsys.readouterr().err
    assert code == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"audit: error: {inputs[wrong]}: holds no capture record")
    assert "give capture logs" in lines[0]
    assert SECRET not in err
    assert _tree(tmp_path) == before  # no table, no store, no report, no index


def test_the_refusal_names_the_first_unreadable_line_and_its_reason(inputs):
    # The CSV's first line is not JSON; the one-line secrets file is JSON without received_at.
    with pytest.raises(InputError, match=r"\(3 line\(s\), none readable; line 1: not valid JSON"):
        check_captures([inputs["csv"]])
    with pytest.raises(InputError, match=r"\(1 line\(s\), none readable; line 1: no received_at"):
        check_captures([inputs["secrets"]])
    # one bad file among good ones is refused too
    with pytest.raises(InputError, match=r"verdicts\.csv: holds no capture record"):
        check_captures([inputs["log"], inputs["csv"]])


def test_an_empty_log_is_a_note_not_a_refusal(inputs):
    assert check_captures([inputs["empty"]]) == [
        f"{inputs['empty']}: empty, no capture record (a quiet day?)"
    ]
    assert check_captures([inputs["log"], inputs["empty"]]) != []


@pytest.mark.parametrize("command", ["verify", "ingest", "analyze"])
def test_a_real_log_with_an_unreadable_line_still_works(inputs, tmp_path, capsys, command):
    out = tmp_path / "out"
    out.mkdir()
    code = main(_argv(command, inputs["log"], inputs["secrets"], out))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "holds no capture record" not in captured.err
    if command == "verify":  # both lines counted: one valid, one unreadable
        rows = (out / "v.csv").read_text().splitlines()
        assert len(rows) == 3
        assert "unreadable" in captured.out and "valid" in captured.out
    if command == "ingest":
        assert "records: 2 stored (1 unreadable)" in captured.out


def test_an_empty_log_with_a_real_one_is_read_with_a_note(inputs, tmp_path, capsys):
    out = tmp_path / "v.csv"
    argv = ["verify", str(inputs["log"]), str(inputs["empty"]), "--secrets", str(inputs["secrets"])]
    assert main([*argv, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"audit: note: {inputs['empty']}: empty, no capture record" in err
    assert len(out.read_text().splitlines()) == 3


@pytest.mark.parametrize("command", ["verify", "ingest", "report"])
def test_a_daily_file_of_one_torn_line_is_an_unreadable_line_not_a_refused_folder(
    inputs, tmp_path, capsys, command
):
    # Before: "holds no capture record", exit 3, and the whole folder was refused.
    folder = tmp_path / "captures"
    folder.mkdir()
    good = sign(SECRET, "1790812800", BODY.encode())
    write_jsonl(folder / "receiver-2026-10-01.jsonl", [capture(BODY, signature=good)])
    torn = folder / "receiver-2026-10-02.jsonl"
    torn.write_bytes(json.dumps(capture(BODY, signature=good)).encode()[:40])  # a crash mid-write
    assert torn.read_bytes().startswith(b'{"received_at": "2026-10-01T00:00:0')
    out = tmp_path / "out"
    out.mkdir()
    code = main(_argv(command, folder, inputs["secrets"], out))
    captured = capsys.readouterr()
    assert code in (0, 1), captured.err  # report: 1 when a control fails on so little data
    assert "holds no capture record" not in captured.err
    note = f"audit: note: {torn}: no readable capture record: 1 torn line(s)"
    assert note in captured.err
    if command == "verify":
        assert captured.out.split()[3:6] == ["unreadable", "1", "50.00%"]
    if command == "ingest":
        assert "records: 2 stored (1 unreadable)" in captured.out


@pytest.mark.parametrize(
    "text",
    [
        '{"wh_1": [{"secret": "whsec_cut',  # a secrets file cut short
        '{"data": [{"id": "wh_1"',  # a listing cut short
        '{"received_at": "2026-10-01T00:00:00Z"}',  # whole, not torn: no headers, no body
        '{"received_at": "2026-10-01T00:00:00Z"} trailing',  # not cut: something else
        "received_at,subscription_id\n2026-10-01T00:00:00Z,wh_1\n",  # a CSV
        '{"receivedAt": "2026',  # not a capture record's field
    ],
)
def test_a_torn_line_that_is_no_capture_record_is_still_refused(tmp_path, text):
    path = tmp_path / "x.jsonl"
    path.write_text(text)
    with pytest.raises(InputError, match="holds no capture record"):
        check_captures([path])


def test_a_file_of_torn_records_only_is_a_note(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"rec\n{"headers": {"X-A": "1"}, "body": "{\\"id\n')
    assert check_captures([path]) == [
        f"{path}: no readable capture record: 2 torn line(s), capture records cut short, "
        "read as unreadable lines"
    ]
