"""``audit webhooks ...`` and ``audit snapshot`` against the fake: in-process through the CLI's
client factory (no socket), and once over a real socket on 127.0.0.1 (the acceptance scenario).
"""

from __future__ import annotations

import json
import logging
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from audit.analysis.subscriptions import load_snapshots
from audit.cli import cli, connect, main
from audit.cli import client as cli_client
from audit.ingest.secrets import read_secrets
from audit.ingest.secrets_file import HeldSecrets
from audit.ingest.signatures import sign, verify
from audit.service.client import ServiceClient
from audit.service.fake import FakeService

KEY = "ak_cli_test_5e4d3c2b1a"


@pytest.fixture
def fake():
    return FakeService(api_keys={KEY: "client_1"})


@pytest.fixture
def served(fake, monkeypatch):
    """The fake behind every command, over ``httpx.MockTransport``: no socket, no server."""
    base_url = "http://127.0.0.1:9"

    def factory(**kw):
        return ServiceClient(**kw, transport=fake.transport())

    monkeypatch.setattr(connect, "CLIENT_FACTORY", factory)
    monkeypatch.setenv("AUDIT_BASE_URL", base_url)
    monkeypatch.setenv("AUDIT_API_KEY", KEY)
    return SimpleNamespace(base_url=base_url)


@pytest.fixture
def served_socket(fake, monkeypatch):
    with fake.serve() as s:
        monkeypatch.setenv("AUDIT_BASE_URL", s.base_url)
        monkeypatch.setenv("AUDIT_API_KEY", KEY)
        yield s


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def create(capsys, secrets: Path, n: int = 1) -> tuple[int, str, str]:
    return run(
        capsys, "webhooks", "create", "--url", f"https://hooks.example/{n}",
        "--event", "incident.created", "--event", "incident.status_changed",
        "--secrets", str(secrets),
    )  # fmt: skip


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text)


# -- the acceptance scenario -----------------------------------------------------------------------


def test_create_list_snapshot_rotate_then_verify_with_the_new_secret(
    served_socket, fake, tmp_path, capsys, caplog
):
    caplog.set_level(logging.DEBUG)
    secrets = tmp_path / "secrets.json"
    snaps = tmp_path / "snaps"

    t0 = datetime.now(UTC)
    code, out, err = create(capsys, secrets)
    assert (code, err) == (0, f"audit: created a new secrets file: {secrets}\n")
    assert out.startswith("created wh_1: https://hooks.example/1")
    first = fake.current_secret("wh_1")
    t1 = datetime.now(UTC)

    code, out, _ = run(capsys, "webhooks", "list")
    assert code == 0
    assert "wh_1" in out and "https://hooks.example/1" in out

    code, out, _ = run(capsys, "snapshot", "--out", str(snaps))
    assert code == 0
    (snap_file,) = snaps.glob("webhooks-*.json")
    assert out == f"wrote {snap_file} (1 subscription)\n"

    t2 = datetime.now(UTC)
    code, out, err = run(capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(secrets))
    assert (code, err) == (0, "")
    assert "previous one no longer works" in out
    second = fake.current_secret("wh_1")
    t3 = datetime.now(UTC)
    assert second != first

    # The secrets file holds both secrets, in order, each valid from the time of its response:
    # the answer's Date header (whole seconds; a rotation in the same second as the creation
    # goes 1 microsecond after it, so the order stays the service's).
    assert stat.S_IMODE(os.stat(secrets).st_mode) == 0o600
    raw = json.loads(secrets.read_text())
    entries = raw["wh_1"]
    assert [e["secret"] for e in entries] == [first, second]
    created_at, rotated_at = fake.secret_issue_times("wh_1")
    vf1, vf2 = (_utc(e["valid_from"]) for e in entries)
    assert t0 <= created_at <= t1 and t2 <= rotated_at <= t3
    assert vf1.microsecond == 0 and created_at.replace(microsecond=0) <= vf1 <= t1
    assert vf2.microsecond == 0 or vf2 == vf1 + timedelta(microseconds=1)
    assert vf1 < vf2 and rotated_at.replace(microsecond=0) <= vf2 <= t3
    assert entries[1]["valid_from"].endswith("Z")

    # A delivery signed by the service with the new secret verifies as valid.
    store = read_secrets(secrets)
    candidate = store.by_subscription["wh_1"][-1].key
    ts = int(datetime.now(UTC).timestamp())
    headers, body = fake.deliver(
        "wh_1", "incident.status_changed", {"incidentId": "inc_9", "status": "closed"}, timestamp=ts
    )
    check = verify(
        body,
        headers["X-PhishFort-Signature"],
        headers["X-PhishFort-Timestamp"],
        [candidate],
        now=ts,
    )
    assert check.verdict == "valid"
    # ...and the old secret no longer matches it.
    old = store.by_subscription["wh_1"][0].key
    assert (
        verify(body, headers["X-PhishFort-Signature"], str(ts), [old], now=ts).verdict
        == "signature_mismatch"
    )
    assert headers["X-PhishFort-Signature"] == sign(second, ts, body)

    # The snapshot loads, and nothing printed, logged or written holds the key or a secret.
    df = load_snapshots([snaps])
    assert list(df["subscription_id"]) == ["wh_1"]
    everything = caplog.text + snap_file.read_text() + out + err
    for value in (KEY, first, second):
        assert value not in everything


# -- each command ----------------------------------------------------------------------------------


def test_every_command_has_help():
    runner = CliRunner()
    names = [("webhooks", c) for c in cli_client.webhooks.commands] + [("snapshot",)]
    for path in names:
        result = runner.invoke(cli, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Usage:" in result.output
    assert [c.name for c in (cli_client.webhooks, cli_client.snapshot)] == ["webhooks", "snapshot"]
    assert set(cli_client.webhooks.commands) == {
        "list", "create", "update", "delete", "test", "rotate-secret"
    }  # fmt: skip


def test_no_option_takes_a_key_or_secret_value():
    def options(cmd):
        yield from cmd.params
        for sub in getattr(cmd, "commands", {}).values():
            yield from options(sub)

    for cmd in (cli_client.webhooks, cli_client.snapshot):
        for p in options(cmd):
            names = " ".join(getattr(p, "opts", []))
            if "key" in names or "secret" in names:
                assert names in ("--api-key-env", "--secrets", "--new-secrets-file"), names
                assert names != "--new-secrets-file" or p.is_flag


def test_list_update_test_delete(served, fake, tmp_path, capsys):
    create(capsys, tmp_path / "s.json")
    assert run(capsys, "webhooks", "list", "--json")[1].count('"id": "wh_1"') == 1
    code, out, _ = run(capsys, "webhooks", "update", "wh_1", "--inactive", "--description", "x")
    assert (code, out) == (0, 'updated wh_1: description="x", active=false\n')
    assert fake.subscriptions["wh_1"]["active"] is False
    code, out, _ = run(capsys, "webhooks", "test", "wh_1")
    assert code == 0 and out.startswith("test delivery requested for wh_1")
    assert len(fake.outbox) == 1
    code, out, _ = run(capsys, "webhooks", "delete", "wh_1", "--yes")
    assert (code, out) == (0, "deleted wh_1\n")
    assert run(capsys, "webhooks", "list")[1] == "no subscriptions\n"


def test_delete_asks_first(served, fake, tmp_path, capsys):
    create(capsys, tmp_path / "s.json")
    result = CliRunner().invoke(cli, ["webhooks", "delete", "wh_1"], input="n\n")
    assert result.exit_code != 0
    assert "wh_1" in fake.subscriptions
    result = CliRunner().invoke(cli, ["webhooks", "delete", "wh_1"], input="y\n")
    assert result.exit_code == 0
    assert fake.subscriptions == {}


def test_secret_is_never_printed(served, fake, tmp_path, capsys):
    code, out, err = create(capsys, tmp_path / "s.json")
    assert code == 0
    assert fake.current_secret("wh_1") not in out + err
    code, out, err = run(
        capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(tmp_path / "s.json")
    )
    assert fake.current_secret("wh_1") not in out + err


def test_exposed_secrets_are_redacted_in_snapshot_and_list(served, fake, tmp_path, capsys):
    fake.expose_secrets_in_listing = True
    create(capsys, tmp_path / "s.json")
    secret = fake.current_secret("wh_1")
    code, _, err = run(capsys, "snapshot", "--out", str(tmp_path / "snaps"))
    assert code == 0
    assert "exposed 1 secret value" in err
    (f,) = (tmp_path / "snaps").glob("*.json")
    text = f.read_text()
    assert secret not in text
    assert json.loads(text)["response"]["data"][0]["secret"] == "[redacted]"
    assert bool(load_snapshots([f]).loc[0, "secret_exposed"])
    code, out, err = run(capsys, "webhooks", "list", "--json")
    assert secret not in out + err
    assert "[redacted]" in out and "exposed 1 secret value" in err


def test_snapshot_document_and_name(served, tmp_path, capsys):
    run(capsys, "snapshot", "--out", str(tmp_path))
    (f,) = tmp_path.glob("webhooks-*.json")
    doc = json.loads(f.read_text())
    assert set(doc) == {"fetched_at", "base_url", "response"}
    assert doc["base_url"] == served.base_url
    assert doc["response"] == {"data": [], "message": "Success"}  # the body as received
    fetched = _utc(doc["fetched_at"])
    assert f.name == f"webhooks-{fetched:%Y%m%dT%H%M%SZ}.json"


def test_write_snapshot_never_overwrites(tmp_path):
    t = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
    names = [
        cli_client.write_snapshot(tmp_path, [], base_url="https://a", fetched_at=t)[0].name
        for _ in range(3)
    ]
    assert names == [
        "webhooks-20260115T093000Z.json",
        "webhooks-20260115T093000Z-2.json",
        "webhooks-20260115T093000Z-3.json",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temporary left


# -- refusals: one line on stderr, exit 3 ----------------------------------------------------------


def test_http_delivery_url_refused_before_sending(served, fake, tmp_path, capsys):
    code, _, err = run(
        capsys, "webhooks", "create", "--url", "http://hooks.example/a",
        "--event", "incident.created", "--secrets", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert code == 3
    assert err == "audit: error: delivery URLs must be HTTPS (spec 4.1): 'http://hooks.example/a'\n"
    assert fake.requests == []
    assert not (tmp_path / "s.json").exists()


def test_sixth_subscription_refused(served, fake, tmp_path, capsys):
    for n in range(5):
        assert create(capsys, tmp_path / "s.json", n)[0] == 0
    code, _, err = create(capsys, tmp_path / "s.json", 6)
    assert code == 3
    assert "already has 5 webhook subscriptions" in err
    assert [r.method for r in fake.requests].count("POST") == 5
    assert len(json.loads((tmp_path / "s.json").read_text())) == 5


def test_unknown_event_is_a_usage_error(served, fake, tmp_path, capsys):
    code, _, err = run(
        capsys, "webhooks", "create", "--url", "https://h.example/a", "--event", "incident.deleted",
        "--secrets", str(tmp_path / "s.json"),
    )  # fmt: skip
    assert code == 3
    assert "incident.deleted" in err
    assert fake.requests == []


def test_broken_secrets_file_is_refused_before_creating(served, fake, tmp_path, capsys):
    bad = tmp_path / "s.json"
    bad.write_text("{not json")
    code, _, err = create(capsys, bad)
    assert code == 3
    assert err.startswith(f"audit: error: {bad}: not valid JSON")
    assert fake.subscriptions == {}


def test_secret_that_cannot_be_saved_says_how_to_recover(
    served, fake, tmp_path, capsys, monkeypatch
):
    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(HeldSecrets, "write", fail)
    code, _, err = create(capsys, tmp_path / "s.json")
    assert code == 3
    assert "could not be saved (No space left on device) and is lost" in err
    assert (
        f"audit webhooks rotate-secret wh_1 --secrets {tmp_path / 's.json'} --new-secrets-file"
        in err
    )
    assert fake.current_secret("wh_1") not in err


@pytest.mark.parametrize(
    ("env", "args", "message"),
    [
        ({"AUDIT_BASE_URL": None}, [], "no base URL: give --base-url or set AUDIT_BASE_URL"),
        ({"AUDIT_API_KEY": None}, [], "environment variable AUDIT_API_KEY is not set"),
        ({}, ["--api-key-env", "OTHER_KEY_VAR"], "environment variable OTHER_KEY_VAR is not set"),
        ({"AUDIT_API_KEY": "wrong-key"}, [], "401 Unauthorized"),
        ({"AUDIT_BASE_URL": "http://example.com"}, [], "refusing to send the API key over plain"),
    ],
)
def test_configuration_errors(served, monkeypatch, capsys, env, args, message):
    for k, v in env.items():
        if v is None:
            monkeypatch.delenv(k)
        else:
            monkeypatch.setenv(k, v)
    code, out, err = run(capsys, "webhooks", "list", *args)
    assert code == 3
    assert out == ""
    assert err.startswith("audit: error: ") and message in err
    assert err.count("\n") == 1
    assert KEY not in err


def test_api_key_from_another_variable(served, monkeypatch, capsys):
    monkeypatch.delenv("AUDIT_API_KEY")
    monkeypatch.setenv("MY_SERVICE_KEY", KEY)
    assert run(capsys, "webhooks", "list", "--api-key-env", "MY_SERVICE_KEY")[0] == 0


def test_base_url_option_wins_over_the_environment(served, monkeypatch, capsys):
    monkeypatch.setenv("AUDIT_BASE_URL", "https://unreachable.invalid")
    assert run(capsys, "webhooks", "list", "--base-url", served.base_url)[0] == 0


def test_retries_exhausted_on_the_command_line(served, fake, capsys):
    fake.fail_next(status=503, times=2)
    code, _, err = run(capsys, "webhooks", "list", "--max-attempts", "1")
    assert code == 3
    assert err == "audit: error: GET /v1/webhooks: 503 Service Unavailable, after 1 attempt\n"


def test_secrets_file_of_the_wrong_shape_is_refused_before_rotating(served, fake, tmp_path, capsys):
    good = tmp_path / "good.json"
    create(capsys, good)
    first = fake.current_secret("wh_1")
    bad = tmp_path / "bad.json"
    bad.write_text('{"wh_1": "not a list"}')
    code, _, err = run(capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(bad))
    assert code == 3
    assert "expected an object mapping subscription id to a list" in err
    assert fake.current_secret("wh_1") == first  # the service was not asked to rotate


def test_a_timeout_or_deadline_that_is_not_a_finite_number_is_refused(monkeypatch, capsys):
    # --timeout nan ended in "internal error" (click's range lets NaN through); a deadline of
    # inf meant none at all.
    monkeypatch.setenv("AUDIT_API_KEY", "ak_test_finite_1")
    args = ["webhooks", "list", "--base-url", "http://127.0.0.1:9"]
    assert main([*args, "--timeout", "nan"]) == 3
    assert "Invalid value for '--timeout': not a number" in capsys.readouterr().err
    monkeypatch.setenv("AUDIT_DEADLINE_S", "inf")
    assert main(args) == 3
    assert "AUDIT_DEADLINE_S must be a positive finite number" in capsys.readouterr().err
