"""`audit verify`: outputs, one-line errors, and no secret anywhere in what it writes or prints."""

from __future__ import annotations

import csv
import json

import pytest

from audit.cli import main
from audit.ingest.signatures import sign
from tests.builders import capture, write_jsonl, write_secrets

SECRET = "whsec_do_not_leak_0123456789"
ENV_SECRET = "whsec_env_value_do_not_leak"
BODY = '{"id":"evt_1","event":"incident.created","data":{"incidentId":"inc_1"}}'


@pytest.fixture
def inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("WH2_SECRET", ENV_SECRET)
    good = sign(SECRET, "1790812800", BODY.encode())
    env_signed = sign(ENV_SECRET, "1790812800", BODY.encode())
    log = write_jsonl(
        tmp_path / "log.jsonl",
        [
            capture(BODY, signature=good),
            capture(BODY, signature=env_signed, subscription_id="wh_2"),
            capture(BODY, signature=good, received_at="2026-10-01T01:00:00Z"),
            capture(BODY, signature="sha256=" + "0" * 64),
            "{truncated",
        ],
    )
    secrets = write_secrets(
        tmp_path / "secrets.json",
        {"wh_1": [{"secret": SECRET}], "wh_2": [{"secret_env": "WH2_SECRET"}]},
    )
    return log, secrets


def test_verify_writes_every_record_and_prints_counts(tmp_path, inputs, capsys):
    log, secrets = inputs
    out = tmp_path / "out" / "verdicts.csv"
    assert main(["verify", str(log), "--secrets", str(secrets), "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["verdict"] for r in rows] == [
        "valid",
        "valid",
        "stale_timestamp",
        "signature_mismatch",
        "unreadable",
    ]
    required = "source,line,delivery_id,event_id,subscription_id,verdict,hmac_ok,skew_s,detail"
    assert set(required.split(",")) <= set(rows[0])
    printed = capsys.readouterr().out
    assert "valid" in printed and "total" in printed and str(out) in printed
    for line in printed.splitlines():
        if line.startswith("valid "):
            assert line.split()[1] == "2"


def test_no_secret_value_in_outputs(tmp_path, inputs, capsys):
    log, secrets = inputs
    out = tmp_path / "v.csv"
    main(["verify", str(log), "--secrets", str(secrets), "--out", str(out)])
    captured = capsys.readouterr()
    for secret in (SECRET, ENV_SECRET):
        assert secret not in out.read_text()
        assert secret not in captured.out + captured.err


@pytest.mark.parametrize(
    ("secrets_text", "message"),
    [
        (None, "secrets file not found"),
        ('{"wh_1": [{"secret": "' + SECRET + '"', "not valid JSON"),
        ('{"wh_1": [{"secret_env": "UNSET_VAR_FOR_TEST"}]}', "UNSET_VAR_FOR_TEST is not set"),
        ('{"wh_1": [{"secret": "' + SECRET + '", "secret_env": "X"}]}', "exactly one of"),
        ('{"wh_1": [{"secret": "a"}, {"secret": "' + SECRET + '"}]}', "'valid_from' is required"),
        ('{"wh_1": [{"secret": "' + SECRET + '", "valid_from": "soon"}]}', "not an ISO 8601"),
        ('["' + SECRET + '"]', "expected an object"),
    ],
)
def test_bad_secrets_file_is_one_line_without_the_secret(
    tmp_path, inputs, capsys, secrets_text, message
):
    log, _ = inputs
    path = tmp_path / "bad.json"
    if secrets_text is not None:
        path.write_text(secrets_text)
        path.chmod(0o600)
    assert main(["verify", str(log), "--secrets", str(path), "--out", str(tmp_path / "v.csv")]) == 3
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and SECRET not in err


def test_missing_log_is_one_line(tmp_path, inputs, capsys):
    _, secrets = inputs
    assert main(["verify", str(tmp_path / "nope.jsonl"), "--secrets", str(secrets)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("audit: error:") and len(err.strip().splitlines()) == 1


def test_missing_required_option_is_usage_error(tmp_path, inputs, capsys):
    log, _ = inputs
    assert main(["verify", str(log)]) == 3
    assert "--secrets" in capsys.readouterr().err


def test_csv_cells_are_neutralised(tmp_path, inputs, capsys):
    log, secrets = inputs
    body = json.dumps({"id": '=HYPERLINK("http://evil")', "data": {"incidentId": "@SUM(1)"}})
    write_jsonl(log, [capture(body, headers={"X-PhishFort-Delivery-Id": "+cmd"})])
    out = tmp_path / "v.csv"
    main(["verify", str(log), "--secrets", str(secrets), "--out", str(out)])
    row = next(csv.DictReader(out.open()))
    assert row["event_id"].startswith("'=")
    assert row["incident_id"] == "'@SUM(1)"
    assert row["delivery_id"] == "'+cmd"


def test_an_unwritable_output_is_one_line_exit_3(tmp_path, inputs, capsys):
    log, secrets = inputs
    code = main(["verify", str(log), "--secrets", str(secrets), "--out", "/proc/nope/v.csv"])
    err = capsys.readouterr().err
    assert code == 3 and err.startswith("audit: error:") and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("prefix", ["", "X Service", "X-Service:"])
def test_a_bad_header_prefix_is_refused(tmp_path, inputs, capsys, prefix):
    log, secrets = inputs
    args = ["verify", str(log), "--secrets", str(secrets), "--header-prefix", prefix]
    assert main([*args, "--out", str(tmp_path / "v.csv")]) == 3
    assert "header prefix" in capsys.readouterr().err
