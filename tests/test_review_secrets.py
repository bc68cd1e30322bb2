"""Review of issue 9: a secret value never reaches a message, even when the secrets file is bad."""

from __future__ import annotations

import json
import uuid

import pytest

from audit.cli import main
from tests.builders import capture, write_jsonl, write_secrets


def _secret(tail: str = "") -> str:
    # a fresh value per test: the registry of known values is process-wide
    return f"whsec_{uuid.uuid4().hex}{tail}"


def _run(tmp_path, raw_text: str, capsys) -> tuple[int, str]:
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    secrets = tmp_path / "s.json"
    secrets.write_text(raw_text, encoding="utf-8")
    secrets.chmod(0o600)
    code = main(["verify", str(logs), "--secrets", str(secrets), "--out", str(tmp_path / "v.csv")])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize(
    "shape",
    [
        # a secret pasted as a subscription id, next to a good entry that declares it
        lambda s: {"wh_ok": [{"secret": s}], s: 5},
        lambda s: {"wh_ok": [{"secret": s}], s: [{"nosecret": 1}]},
        # a secret used as a field name of its own entry
        lambda s: {"wh_ok": [{"secret": s, s: 1}]},
    ],
)
def test_secret_used_as_a_json_key_is_scrubbed_from_the_error(shape, tmp_path, capsys):
    value = _secret()
    code, text = _run(tmp_path, json.dumps(shape(value)), capsys)
    assert code == 3
    assert "audit: error:" in text and "[redacted]" in text
    assert value not in text


def test_secret_with_quotes_and_backslashes_is_scrubbed_in_its_escaped_form(tmp_path, capsys):
    value = _secret("'b\\\\c")
    code, text = _run(tmp_path, json.dumps({"wh_ok": [{"secret": value}], value: 1}), capsys)
    assert code == 3 and "[redacted]" in text
    assert value not in text and repr(value)[1:-1] not in text


def test_good_secrets_file_still_verifies(tmp_path, capsys):
    write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": _secret()}]})
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    args = ["verify", str(logs), "--secrets", str(tmp_path / "s.json")]
    assert main([*args, "--out", str(tmp_path / "v.csv")]) == 0


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_params_file_with_an_escaped_secret_is_refused(suffix, tmp_path, capsys):
    value = _secret()
    write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": value}]})
    logs = write_jsonl(tmp_path / "c.jsonl", [capture("{}", signature="sha256=" + "0" * 64)])
    if suffix == ".json":  # JSON \u escapes
        text = '{{"client_id": "{}"}}'.format("".join(f"\\u{ord(c):04x}" for c in value))
    else:  # YAML \x escapes in a double-quoted scalar
        text = 'client_id: "{}"\n'.format("".join(f"\\x{ord(c):02x}" for c in value))
    params = tmp_path / f"p{suffix}"
    params.write_text(text, encoding="utf-8")
    out = tmp_path / "reports"
    args = ["report", str(logs), "--secrets", str(tmp_path / "s.json"), "--period", "2026-10"]
    assert main([*args, "--params", str(params), "--out", str(out), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "holds the value of a known secret" in err and value not in err
    assert not out.exists()
