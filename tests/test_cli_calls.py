"""The CLI is thin: each command hands its arguments to one library call (papermill's style).

A recording client stands in for ``ServiceClient`` through the CLI's client factory
(``main(argv, obj={"client_factory": ...})``); no server, no socket, no HTTP. The data
commands are checked the same way by replacing the library function they call.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from audit.cli import cli, main
from audit.service.client import IssuedSecret, Listing

NOW = datetime(2026, 10, 1, 12, 0, tzinfo=UTC)
SECRET = "whsec_recorded_0123456789abcdef"


class Recorder:
    """Stands in for ServiceClient: keeps its constructor's arguments and every call."""

    def __init__(self, calls: list, **kw):
        self.calls, self.kw = calls, kw
        self.base_url, self.deadline_at = kw["base_url"], None
        calls.append(("__init__", kw))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.calls.append(("close",))

    def _record(self, name, *args, **kw):
        self.calls.append((name, args, kw))

    def list_webhooks(self):
        self._record("list_webhooks")
        return [{"id": "wh_1", "url": "https://hooks.example/1", "events": ["incident.created"]}]

    def create_webhook(self, *args, **kw):
        self._record("create_webhook", *args, **kw)
        return IssuedSecret("wh_9", NOW, SECRET, {"id": "wh_9"})

    def update_webhook(self, *args, **kw):
        self._record("update_webhook", *args, **kw)

    def delete_webhook(self, *args, **kw):
        self._record("delete_webhook", *args, **kw)

    def test_webhook(self, *args, **kw):
        self._record("test_webhook", *args, **kw)
        return {"sent": True}

    def rotate_secret(self, *args, **kw):
        self._record("rotate_secret", *args, **kw)
        return IssuedSecret(args[0], NOW, SECRET)

    def fetch_listing(self):
        self._record("fetch_listing")
        return Listing(body={"data": []}, received_at=NOW)


@pytest.fixture
def calls(monkeypatch):
    monkeypatch.setenv("AUDIT_API_KEY", "ak_recorded_key_1234")
    monkeypatch.delenv("AUDIT_BASE_URL", raising=False)
    monkeypatch.delenv("AUDIT_DEADLINE_S", raising=False)
    return []


def run(calls: list, *args: str) -> int:
    return main(
        ["--help"] if not args else list(args),
        obj={"client_factory": lambda **kw: Recorder(calls, **kw)},
    )


BASE = ("--base-url", "https://api.example")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["webhooks", "list"], ("list_webhooks", (), {})),
        (
            ["webhooks", "create", "--url", "https://hooks.example/a", "--event",
             "incident.created", "--event", "webhook.test", "--description", "siem"],
            ("create_webhook",
             ("https://hooks.example/a", ["incident.created", "webhook.test"], "siem"), {}),
        ),
        (
            ["webhooks", "update", "wh_1", "--url", "https://hooks.example/b", "--event",
             "incident.created", "--inactive", "--description", "new"],
            ("update_webhook", ("wh_1",), {"url": "https://hooks.example/b",
             "events": ["incident.created"], "active": False, "description": "new"}),
        ),
        (
            ["webhooks", "update", "wh_1", "--active"],
            ("update_webhook", ("wh_1",),
             {"url": None, "events": None, "active": True, "description": None}),
        ),
        (["webhooks", "delete", "wh_1", "--yes"], ("delete_webhook", ("wh_1",), {})),
        (["webhooks", "test", "wh_2"], ("test_webhook", ("wh_2",), {})),
        (["webhooks", "rotate-secret", "wh_3", "--new-secrets-file"],
         ("rotate_secret", ("wh_3",), {})),
        (["snapshot"], ("fetch_listing", (), {})),
    ],
    ids=lambda v: " ".join(v[:3]) if isinstance(v, list) else "",
)  # fmt: skip
def test_each_service_command_makes_one_library_call(calls, tmp_path, argv, expected):
    if argv[1:2] in (["create"], ["rotate-secret"]):
        argv = [*argv, "--secrets", str(tmp_path / "secrets.json")]
    if argv == ["snapshot"]:
        argv = [*argv, "--out", str(tmp_path / "snaps")]
    assert run(calls, *argv, *BASE) == 0
    made = [c for c in calls if c[0] not in ("__init__", "close")]
    assert made == [expected]
    assert calls[-1] == ("close",)


def test_service_options_reach_the_client(calls, monkeypatch):
    monkeypatch.setenv("OTHER_KEY", "ak_other_key_5678")
    monkeypatch.setenv("AUDIT_DEADLINE_S", "30")
    argv = ["webhooks", "list", *BASE, "--api-key-env", "OTHER_KEY", "--timeout", "2.5"]
    assert run(calls, *argv, "--max-attempts", "2") == 0
    (_, kw) = calls[0]
    assert kw["base_url"] == "https://api.example"
    assert kw["api_key"] == "ak_other_key_5678"
    assert (kw["timeout"], kw["deadline_s"], kw["retry"].max_attempts) == (2.5, 30.0, 2)


def test_base_url_comes_from_the_environment_when_not_given(calls, monkeypatch):
    monkeypatch.setenv("AUDIT_BASE_URL", "https://env.example")
    assert run(calls, "webhooks", "list") == 0
    assert calls[0][1]["base_url"] == "https://env.example"


def test_an_issued_secret_goes_to_the_secrets_file_not_the_terminal(calls, tmp_path, capsys):
    secrets = tmp_path / "s.json"
    argv = ["webhooks", "rotate-secret", "wh_3", "--secrets", str(secrets), "--new-secrets-file"]
    assert run(calls, *argv, *BASE) == 0
    assert SECRET in secrets.read_text() and SECRET not in capsys.readouterr().out


def test_snapshot_writes_what_the_client_fetched(calls, tmp_path):
    assert run(calls, "snapshot", "--out", str(tmp_path), *BASE) == 0
    (path,) = tmp_path.glob("webhooks-*.json")
    assert path.name == "webhooks-20261001T120000Z.json"


# -- the data commands: arguments reach the one library function ----------------------------------


def test_analyze_hands_its_arguments_to_analysis_analyze(monkeypatch, tmp_path):
    from audit.cli import analysis as module

    seen = {}

    class Done(Exception):
        pass

    def fake(logs, secrets_path, **kw):
        seen.update(logs=logs, secrets_path=secrets_path, **kw)
        raise Done

    monkeypatch.setattr(module, "analyze_logs", fake)  # audit.analysis.analyze.analyze
    log = tmp_path / "a.jsonl"
    log.write_text("")
    argv = ["analyze", str(log), "--secrets", "s.json", "--subscriptions", "snaps"]
    argv += ["--as-of", "2026-10-31T00:00:00Z", "--clock-start", "burn", "--out", str(tmp_path)]
    with pytest.raises(Done):
        cli.main(args=argv, standalone_mode=False)
    assert seen == {
        "logs": (str(log),),
        "secrets_path": "s.json",
        "snapshots": ("snaps",),
        "as_of": "2026-10-31T00:00:00Z",
        "header_prefix": "X-PhishFort",
        "clock_start": "burn",
    }


def test_analyze_with_a_store_hands_its_arguments_to_analyze_store(monkeypatch, tmp_path):
    from audit.cli import analysis as module

    seen = {}

    class Done(Exception):
        pass

    def fake(store, out, **kw):
        seen.update(store=store, out=out, **kw)
        raise Done

    monkeypatch.setattr(module, "analyze_store", fake)
    argv = ["analyze", "--store", str(tmp_path / "st"), "--engine", "duckdb", "--format", "csv"]
    argv += ["--as-of", "2026-10-31T00:00:00Z", "--out", str(tmp_path / "o")]
    with pytest.raises(Done):
        cli.main(args=argv, standalone_mode=False)
    assert seen == {
        "store": tmp_path / "st",
        "out": tmp_path / "o",
        "logs": (),
        "secrets_path": None,
        "snapshots": (),
        "as_of": "2026-10-31T00:00:00Z",
        "header_prefix": "X-PhishFort",
        "clock_start": "created",
        "fmt": "csv",
        "on": "duckdb",
    }


def test_the_engine_without_a_store_is_a_usage_error(tmp_path, capsys):
    log = tmp_path / "a.jsonl"
    log.write_text("")
    argv = ["analyze", str(log), "--secrets", "s.json", "--engine", "spark"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 3  # bad input
    assert "--engine needs --store" in capsys.readouterr().err


def test_report_hands_its_arguments_to_report_run_report(monkeypatch, tmp_path):
    from audit.cli import report

    seen = {}

    class Done(Exception):
        pass

    def fake(logs, **kw):
        seen.update(logs=logs, **kw)
        raise Done

    monkeypatch.setattr(report, "run_report", fake)
    argv = ["report", "a.jsonl", "b/", "--secrets", "s.json", "--subscriptions", "snaps"]
    argv += ["--period", "2026-10", "--out", str(tmp_path), "--fail-on", "high", "--quiet"]
    with pytest.raises(Done):
        cli.main(args=argv, standalone_mode=False)
    assert seen["logs"] == ["a.jsonl", "b/"]
    assert (seen["secrets_path"], seen["snapshots"]) == ("s.json", ["snaps"])
    assert (seen["period"].start.isoformat(), seen["period"].end.isoformat()) == (
        "2026-10-01T00:00:00+00:00",
        "2026-11-01T00:00:00+00:00",
    )
    assert (seen["out_dir"], seen["fail_on"], seen["progress"]) == (tmp_path, "high", None)
