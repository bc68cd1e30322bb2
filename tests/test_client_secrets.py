"""``audit webhooks create`` / ``rotate-secret``: every reason the new secret could not be saved
is found before the service is asked (it issues a secret only once), and a save that still
fails says why in words (against the fake, in-process through the CLI's client factory)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from audit.atomic import output_error
from audit.cli import client as cli_client
from audit.cli import connect, main
from audit.errors import SecretsError
from audit.ingest.secrets_file import HeldSecrets, held_secrets
from audit.service.client import ServiceClient
from audit.service.fake import FakeService

KEY = "ak_cli_secrets_test_7f6e5d4c"
OLD = "whsec_old_secret_value_123456"


@pytest.fixture
def fake(monkeypatch):
    fake = FakeService(api_keys={KEY: "client_1"})
    monkeypatch.setattr(
        connect, "CLIENT_FACTORY", lambda **kw: ServiceClient(**kw, transport=fake.transport())
    )
    monkeypatch.setenv("AUDIT_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AUDIT_API_KEY", KEY)
    return fake


def _run(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    return code, capsys.readouterr().err


def _created(fake, capsys, tmp_path: Path) -> str:
    """Create wh_1 (its secret saved elsewhere); the fake's current secret of it."""
    code, err = _run(
        capsys, "webhooks", "create", "--url", "https://hooks.example/1",
        "--event", "incident.created", "--secrets", str(tmp_path / "first.json"),
    )  # fmt: skip
    assert code == 0, err
    return fake.current_secret("wh_1")


def _entry(valid_from: object) -> str:
    return json.dumps({"wh_1": [{"secret": OLD, "valid_from": valid_from}]})


def _loop(tmp_path: Path) -> Path:
    p = tmp_path / "loop.json"
    p.symlink_to(p.name)
    return p


def _dangling_under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "plain").write_text("x")
    p = tmp_path / "dangling.json"
    p.symlink_to(tmp_path / "plain" / "sub" / "s.json")  # its folder can never be made
    return p


def _garbage_valid_from(tmp_path: Path) -> Path:
    p = tmp_path / "badvf.json"
    p.write_text(_entry("garbage"))
    return p


def _future_entry(tmp_path: Path) -> Path:
    p = tmp_path / "future.json"
    p.write_text(_entry("2099-01-01T00:00:00Z"))  # far ahead: the local clock looks behind
    return p


def _lock_unopenable(tmp_path: Path) -> Path:
    p = tmp_path / "lk.json"
    p.write_text('{"wh_1": []}')
    (tmp_path / "lk.json.lock").symlink_to("/nonexistent")  # the lock is never followed
    return p


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (_loop, "symbolic link loop"),
        (_dangling_under_a_file, "no such secrets file"),
        (_garbage_valid_from, "bad 'valid_from'"),
        (_future_entry, "is the clock behind?"),
        (_lock_unopenable, "cannot open the lock file"),
    ],
)
def test_rotation_is_refused_before_the_service_rotates(make, said, fake, tmp_path, capsys):
    first = _created(fake, capsys, tmp_path)
    path = make(tmp_path)
    code, err = _run(capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(path))
    assert code == 3
    assert said in err and err.count("\n") == 1 and "internal error" not in err
    assert fake.current_secret("wh_1") == first  # the service was not asked to rotate
    assert not any(r.path.endswith("/rotate-secret") for r in fake.requests)


@pytest.mark.parametrize("make", [_loop, _dangling_under_a_file, _lock_unopenable])
def test_creation_is_refused_before_the_service_creates(make, fake, tmp_path, capsys):
    path = make(tmp_path)
    code, err = _run(
        capsys, "webhooks", "create", "--url", "https://hooks.example/1",
        "--event", "incident.created", "--secrets", str(path),
    )  # fmt: skip
    assert code == 3 and err.count("\n") == 1
    assert fake.subscriptions == {}


def test_a_rotation_into_a_good_file_still_works(fake, tmp_path, capsys):
    _created(fake, capsys, tmp_path)
    path = tmp_path / "ok.json"
    path.write_text(_entry("2026-01-01T00:00:00Z"))
    code, err = _run(capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(path))
    assert code == 0, err
    entries = json.loads(path.read_text())["wh_1"]
    assert [e["secret"] for e in entries] == [OLD, fake.current_secret("wh_1")]


def test_the_dry_run_leaves_the_secrets_file_as_it_was(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(_entry("2026-01-01T00:00:00Z"))
    before = path.read_bytes()
    cli_client._check_secrets_target(path, must_exist=True)
    with held_secrets(path) as held:
        cli_client._check_held(held, path, "wh_1", new_file=False)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["s.json", "s.json.lock"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError(28, "No space left on device"), "No space left on device"),
        ("output", "No space left on device"),  # OutputError raised from an OSError
        ("secrets", "'wh_1' entry 1: bad 'valid_from')"),  # the message, without the path
        (RuntimeError("boom"), "RuntimeError"),
    ],
)
def test_a_save_that_fails_says_why(error, reason, fake, tmp_path, capsys, monkeypatch):
    def fail(held) -> None:
        path = held.target
        if error == "secrets":
            raise SecretsError(f"{path}: 'wh_1' entry 1: bad 'valid_from'")
        if error != "output":
            raise error
        try:
            raise OSError(28, "No space left on device")
        except OSError as e:
            raise output_error(Path(path), e) from None

    first = _created(fake, capsys, tmp_path)
    monkeypatch.setattr(HeldSecrets, "write", fail)
    path = tmp_path / "first.json"  # holds wh_1
    code, err = _run(capsys, "webhooks", "rotate-secret", "wh_1", "--secrets", str(path))
    assert code == 3
    assert f"could not be saved ({reason}" in err and "OutputError" not in err
    assert f"audit webhooks rotate-secret wh_1 --secrets {path}\n" in err  # it holds wh_1
    assert fake.current_secret("wh_1") != first and fake.current_secret("wh_1") not in err
