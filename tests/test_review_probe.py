"""Review of issue 13: the probe never reads a receiver's answer body (a huge or endless body
filled memory: 22 GB before the probe was killed), and adversarial inputs give one-line errors."""

from __future__ import annotations

import httpx
import pytest

from audit.cli import main
from audit.receiver.probe import run_probe
from tests.builders import write_secrets


def test_probe_does_not_read_a_huge_answer_body(tmp_path):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_probe_1"}]})
    chunks_read = []

    def body():
        for _ in range(2000):  # stands for an endless body
            chunks_read.append(1)
            yield b"x" * 1024

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())

    result = run_probe(
        "http://127.0.0.1:9/",
        secrets,
        "wh_1",
        only=["valid_accepted", "missing_signature_rejected"],
        transport=httpx.MockTransport(handler),
    )
    assert [c.passed for c in result.checks] == [True, False]
    assert chunks_read == []


def test_unknown_check_id_is_a_one_line_error(tmp_path, capsys):
    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_probe_2"}]})
    args = ["probe", "http://127.0.0.1:9/", "--secrets", str(secrets), "--subscription", "wh_1"]
    assert main([*args, "--only", "valid_accepted,no_such_check", "--dry-run"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("audit: error:") and "no_such_check" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("?token=tok3n-value", "?token=REDACTED"),
        # A token that is the query item itself (no "="), or a fragment: the item's name was
        # kept as it was, and with it the token.
        ("?tok3n-value", "?REDACTED"),
        ("?a=1&tok3n-value#tok3n-frag", "?a=REDACTED&REDACTED#REDACTED"),
    ],
)
def test_a_token_in_the_target_query_reaches_the_receiver_but_no_output(tmp_path, query, shown):
    # Before: the target URL was written as given, so ?token=... landed in probe.json,
    # findings, junit.xml and probe.html.
    from audit.receiver.probe_report import write_outputs

    secrets = write_secrets(tmp_path / "s.json", {"wh_1": [{"secret": "whsec_review_probe_3"}]})
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(204)

    result = run_probe(
        "http://127.0.0.1:9/hook" + query,
        secrets,
        "wh_1",
        only=["valid_accepted"],
        transport=httpx.MockTransport(handler),
    )
    assert seen == ["http://127.0.0.1:9/hook" + query]
    paths = write_outputs(result, tmp_path / "out")
    assert paths
    for path in paths:
        assert "tok3n" not in path.read_text(encoding="utf-8"), path.name
    assert result.target == "http://127.0.0.1:9/hook" + shown
