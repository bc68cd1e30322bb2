"""Files whose JSON escapes half a UTF-16 pair ("\\ud800"): refused in one line, naming the file.

``json.loads`` and YAML turn such an escape into a ``str`` that is not text. From a snapshot (the
service's text: one bad description broke every scheduled report), a mutes, parameters or
secrets file, or a secret's environment variable, it ended in "internal error" far away.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_text_inputs_1"
BODY = '{"id":"evt_t","event":"incident.created","data":{"incidentId":"inc_1"}}'
HALF = "\\ud800"  # as the file holds it: backslash, u, d800


@pytest.fixture
def captures(tmp_path: Path) -> Path:
    folder = tmp_path / "caps"
    folder.mkdir()
    rec = capture(BODY, signature=sign(SECRET, 1790812800, BODY.encode()))
    write_jsonl(folder / "log.jsonl", [rec])
    return folder


def _refused(capsys, args: list[str], path: Path) -> None:
    assert main(args) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"audit: error: {path}") and "half a UTF-16 pair" in err, err
    assert err.count("\n") == 1 and "internal error" not in err


def test_a_snapshot(captures, tmp_path, capsys):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    snap = tmp_path / "snap.json"
    snap.write_text(
        '{"fetched_at": "2026-10-01T00:00:00Z", "base_url": "https://x", "response": '
        f'{{"data": [{{"id": "wh_1", "description": "{HALF}"}}]}}}}'
    )
    out = str(tmp_path / "out")
    args = ["analyze", str(captures), "--secrets", str(secrets), "--subscriptions", str(snap)]
    _refused(capsys, [*args, "--out", out], snap)


@pytest.mark.parametrize("option", ["--mutes", "--params"])
def test_a_mutes_or_parameters_file(captures, tmp_path, capsys, option):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    given = tmp_path / "given.json"
    if option == "--mutes":
        given.write_text(
            f'[{{"check_id": "SIG-04", "resource": "*", "reason": "{HALF}", '
            '"expires": "2027-01-01"}]'
        )
    else:
        given.write_text(f'{{"client_id": "{HALF}"}}')
    args = ["report", str(captures), "--secrets", str(secrets), "--period", "2026-10"]
    _refused(capsys, [*args, option, str(given), "--out", str(tmp_path / "r"), "--quiet"], given)


def test_a_secret_in_the_file(captures, tmp_path, capsys):
    secrets = tmp_path / "s.json"
    secrets.write_text(f'{{"wh_1": [{{"secret": "abc123{HALF}"}}]}}')
    secrets.chmod(0o600)
    _refused(capsys, ["verify", str(captures), "--secrets", str(secrets)], secrets)


def test_a_secret_in_an_environment_variable_that_is_not_utf8(
    captures, tmp_path, capsys, monkeypatch
):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret_env": "AUDIT_T_SECRET"}]})
    monkeypatch.setenv("AUDIT_T_SECRET", "a\udcff")  # the byte 0xff, as os.environ holds it
    assert main(["verify", str(captures), "--secrets", str(secrets)]) == 3
    err = capsys.readouterr().err
    assert err == (
        f"audit: error: {secrets}: 'wh_1' entry 1: environment variable AUDIT_T_SECRET "
        "is not UTF-8 text\n"
    )


def test_a_pair_that_is_whole_is_text(captures, tmp_path):
    # The check refuses half a pair only: an escaped emoji (a whole pair) is read as text.
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": SECRET}]})
    params = tmp_path / "p.json"
    params.write_text(json.dumps({"client_id": "acme \U0001f600"}))  # json escapes the pair
    assert "\\ud83d\\ude00" in params.read_text()
    args = ["report", str(captures), "--secrets", str(secrets), "--period", "2026-10"]
    assert main([*args, "--params", str(params), "--out", str(tmp_path / "r"), "--quiet"]) in (0, 1)
