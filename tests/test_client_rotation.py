"""``audit webhooks rotate-secret`` (issue 37): the secrets file's order is the service's order of
rotations, each ``valid_from`` comes from the service's answer, a --secrets path that is not the
real file is refused before the service rotates, and a 2xx whose body cannot be read says what
probably happened."""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import httpx
import pytest

from audit.cli import main
from audit.errors import ServiceError
from audit.ingest.secrets import read_secrets
from audit.service.client import ServiceClient
from audit.service.fake import FakeService

KEY = "ak_rotation_test_0a1b2c3d4e"
ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 10, 1, 12, 0, 0, 250000, tzinfo=UTC)


def _numbered() -> FakeService:
    """A fake whose secrets are numbered in the order the service issues them."""
    count = itertools.count()
    return FakeService(
        api_keys={KEY: "client_1"}, secret_factory=lambda: f"whsec_issued_{next(count):04d}"
    )


def _run(capsys, fake: FakeService, *args: str, handler=None, clock=None) -> tuple[int, str, str]:
    """The CLI in-process against ``fake`` (or ``handler``), through the client factory."""

    def factory(**kw):
        extra = {"clock": clock} if clock is not None else {}
        transport = httpx.MockTransport(handler or fake.handle)
        return ServiceClient(**kw, transport=transport, **extra)

    argv = [*args, "--base-url", "http://127.0.0.1:9", "--api-key-env", "ROTATION_TEST_KEY"]
    code = main(argv, obj={"client_factory": factory})
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _key(monkeypatch):
    monkeypatch.setenv("ROTATION_TEST_KEY", KEY)


def _create(capsys, fake: FakeService, secrets: Path, **kw) -> None:
    args = ["webhooks", "create", "--url", "https://hooks.example/a", "--event", "incident.created"]
    code, _, err = _run(capsys, fake, *args, "--secrets", str(secrets), **kw)
    assert code == 0, err


#: Seconds after which a rotation process is taken for hung: a guard against hangs, never a
#: bound on speed (twelve interpreters starting at once on two busy cores take tens of seconds).
HANG_S = 300


def _finished(proc: subprocess.Popen) -> bytes:
    """``proc``'s stderr once it ends; a process still running after HANG_S is killed and the
    test fails saying so."""
    try:
        return proc.communicate(timeout=HANG_S)[1]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"a rotation still ran after {HANG_S} s: hung (the lock never released?)")


def _rotations(fake: FakeService) -> int:
    return sum(r.path.endswith("/rotate-secret") for r in fake.requests)


# -- 1. the file's order is the service's ------------------------------------------------------


@pytest.mark.slow
def test_twelve_concurrent_rotations_save_in_the_services_order(tmp_path, capsys):
    # Before: each rotation saved when its answer arrived, so with answers taking 0-300 ms the
    # file's newest secret was not the service's current one (3 of 3 rounds).
    fake = _numbered()
    fake.latency_s = (0.0, 0.3)
    secrets = tmp_path / "secrets.json"
    with fake.serve() as served:
        env = {**os.environ, "AUDIT_API_KEY": KEY, "AUDIT_BASE_URL": served.base_url}
        cli = [sys.executable, "-m", "audit.cli", "webhooks"]
        create = [*cli, "create", "--url", "https://h.example/a", "--event", "incident.created"]
        done = subprocess.run(
            [*create, "--secrets", str(secrets)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            timeout=HANG_S,
        )
        assert done.returncode == 0, done.stderr
        rotate = [*cli, "rotate-secret", "wh_1", "--secrets", str(secrets)]
        # Two rounds of twelve: about 3 s each on two idle cores, minutes on a loaded machine; no
        # bound on the time (a slow machine is no fault), HANG_S only ends a hang.
        for round_ in (1, 2):
            procs = [
                subprocess.Popen(
                    rotate, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
                for _ in range(12)
            ]
            errors = [_finished(p) for p in procs]
            assert [p.returncode for p in procs] == [0] * 12, errors
            saved = [e["secret"] for e in json.loads(secrets.read_text())["wh_1"]]
            issued = [f"whsec_issued_{i:04d}" for i in range(1 + 12 * round_)]
            assert saved == issued, f"round {round_}"  # every secret, in the service's order
            assert saved[-1] == fake.current_secret("wh_1")
            store = read_secrets(secrets)  # and the reader takes it: valid_from increasing
            assert len(store.by_subscription["wh_1"]) == len(issued)


def test_the_lock_is_held_while_the_service_rotates(tmp_path, capsys):
    # Before: the lock was taken only to write, after the answer.
    fake = _numbered()
    secrets = tmp_path / "s.json"
    _create(capsys, fake, secrets)
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/rotate-secret"):
            fd = os.open(f"{secrets}.lock", os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                seen.append("free")
            except BlockingIOError:
                seen.append("held")
            finally:
                os.close(fd)
        return fake.handle(request)

    code, _, err = _run(
        capsys,
        fake,
        "webhooks",
        "rotate-secret",
        "wh_1",
        "--secrets",
        str(secrets),
        handler=handler,
    )
    assert code == 0, err
    assert seen == ["held"]


def test_valid_from_is_the_date_header_of_the_answer(tmp_path, capsys):
    fake = _numbered()
    secrets = tmp_path / "s.json"
    dates = iter([NOW + timedelta(seconds=3), NOW + timedelta(seconds=9)])

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake.handle(request)
        if request.method == "POST":  # the creation and the rotation
            response.headers["Date"] = format_datetime(
                next(dates).replace(microsecond=0), usegmt=True
            )
        return response

    _create(capsys, fake, secrets, handler=handler, clock=lambda: NOW)
    code, out, err = _run(
        capsys, fake, "webhooks", "rotate-secret", "wh_1", "--secrets", str(secrets),
        handler=handler, clock=lambda: NOW,
    )  # fmt: skip
    assert code == 0, err
    entries = json.loads(secrets.read_text())["wh_1"]
    assert [e["valid_from"] for e in entries] == [
        "2026-10-01T12:00:03.000000Z",  # the service's time, whole seconds
        "2026-10-01T12:00:09.000000Z",
    ]
    assert "(valid_from 2026-10-01T12:00:09.000000Z)" in out


@pytest.mark.parametrize(
    ("date", "why"),
    [
        (None, "no Date header"),
        ("yesterday at noon", "not a date"),
        (format_datetime(NOW + timedelta(hours=2), usegmt=True), "2 h from the local clock"),
        ("Fri, 31 Dec 9999 23:59:59 GMT", "year 9999"),
    ],
)
def test_valid_from_falls_back_to_the_local_clock_at_the_answer(date, why, caplog):
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"data": {"secret": "whsec_new_value_1234", "message": "Save it"}}
        headers = {"Date": date} if date else {}
        return httpx.Response(200, json=body, headers=headers)

    client = ServiceClient(
        base_url="http://127.0.0.1:9",
        api_key=KEY,
        transport=httpx.MockTransport(handler),
        clock=lambda: NOW,
    )
    assert client.rotate_secret("wh_1").issued_at == NOW, why
    warned = [r.getMessage() for r in caplog.records if "Date header" in r.getMessage()]
    assert len(warned) == (0 if date is None else 1), warned
    assert all(w.endswith("valid_from is this machine's time") for w in warned)


def test_a_rotation_cut_by_the_deadline_says_the_secret_may_have_changed():
    def handler(request: httpx.Request) -> httpx.Response:
        time.sleep(0.3)  # the request went out; no answer before the deadline
        raise httpx.ReadTimeout("timed out", request=request)

    client = ServiceClient(
        base_url="http://127.0.0.1:9",
        api_key=KEY,
        transport=httpx.MockTransport(handler),
        deadline_s=0.2,
    )
    with pytest.raises(ServiceError) as got:
        client.rotate_secret("wh_1")
    said = str(got.value)
    assert said.startswith("POST /v1/webhooks/wh_1/rotate-secret: the answer did not arrive")
    assert said.endswith(
        "deadline; the service may have rotated the secret, so the previous one may already be "
        "invalid: rotate again once the service answers"
    )


def test_a_date_in_the_same_second_as_the_previous_secret_goes_one_microsecond_after(
    tmp_path, capsys
):
    # The Date has whole seconds: two rotations within one second must not swap places.
    fake = _numbered()
    secrets = tmp_path / "s.json"
    secrets.write_text(
        json.dumps(
            {"wh_1": [{"secret": "whsec_old_1", "valid_from": "2026-10-01T12:00:05.500000Z"}]}
        )
    )
    _create(capsys, fake, tmp_path / "other.json")

    def handler(request: httpx.Request) -> httpx.Response:
        response = fake.handle(request)
        response.headers["Date"] = "Thu, 01 Oct 2026 12:00:05 GMT"
        return response

    code, _, err = _run(
        capsys, fake, "webhooks", "rotate-secret", "wh_1", "--secrets", str(secrets),
        handler=handler, clock=lambda: NOW,
    )  # fmt: skip
    assert code == 0, err
    entries = json.loads(secrets.read_text())["wh_1"]
    assert [(e["secret"], e["valid_from"]) for e in entries] == [
        ("whsec_old_1", "2026-10-01T12:00:05.500000Z"),
        ("whsec_issued_0001", "2026-10-01T12:00:05.500001Z"),
    ]


# -- 2. a --secrets path that is not the real file ---------------------------------------------


def test_a_secrets_path_that_does_not_exist_is_refused_before_any_request(tmp_path, capsys):
    fake = _numbered()
    missing = tmp_path / "typo" / "secrets.json"
    code, out, err = _run(
        capsys, fake, "webhooks", "rotate-secret", "wh_1", "--secrets", str(missing)
    )
    assert (code, out) == (3, "")
    assert err == (
        f"audit: error: {missing}: no such secrets file; check the path (the rotation makes the "
        "secret saved in the real file invalid), or give --new-secrets-file to start a new file\n"
    )
    assert fake.requests == []  # nothing reached the service
    assert not (tmp_path / "typo").exists()  # and nothing was created


def test_a_secrets_file_without_the_subscription_is_refused(tmp_path, capsys):
    fake = _numbered()
    _create(capsys, fake, tmp_path / "real.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"wh_7": [{"secret": "whsec_other_77"}]}))
    before = other.read_bytes()
    code, _, err = _run(capsys, fake, "webhooks", "rotate-secret", "wh_1", "--secrets", str(other))
    assert code == 3
    assert err == (
        f"audit: error: {other}: holds no secret of wh_1 (it holds wh_7); check the path, or "
        "give --new-secrets-file to add wh_1 to it\n"
    )
    assert _rotations(fake) == 0 and fake.current_secret("wh_1") == "whsec_issued_0000"
    assert other.read_bytes() == before


def test_new_secrets_file_creates_the_file_and_says_so(tmp_path, capsys):
    fake = _numbered()
    _create(capsys, fake, tmp_path / "real.json")
    new = tmp_path / "fresh" / "secrets.json"
    code, out, err = _run(
        capsys,
        fake,
        "webhooks",
        "rotate-secret",
        "wh_1",
        "--secrets",
        str(new),
        "--new-secrets-file",
    )
    assert code == 0
    assert err == f"audit: created a new secrets file: {new}\n"
    assert json.loads(new.read_text())["wh_1"][0]["secret"] == "whsec_issued_0001"
    assert oct(new.stat().st_mode & 0o777) == "0o600"
    assert "rotated the secret of wh_1" in out


def test_new_secrets_file_adds_the_subscription_to_an_existing_file(tmp_path, capsys):
    fake = _numbered()
    _create(capsys, fake, tmp_path / "real.json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"wh_7": [{"secret": "whsec_other_77"}]}))
    argv = ["webhooks", "rotate-secret", "wh_1", "--secrets", str(other), "--new-secrets-file"]
    code, _, err = _run(capsys, fake, *argv)
    assert (code, err) == (0, "")  # the file existed: nothing to announce
    assert sorted(json.loads(other.read_text())) == ["wh_1", "wh_7"]


def test_create_says_when_it_creates_the_secrets_file(tmp_path, capsys):
    fake = _numbered()
    secrets = tmp_path / "s.json"
    args = ["webhooks", "create", "--url", "https://hooks.example/a", "--event", "incident.created"]
    code, _, err = _run(capsys, fake, *args, "--secrets", str(secrets))
    assert (code, err) == (0, f"audit: created a new secrets file: {secrets}\n")
    code, _, err = _run(capsys, fake, *args, "--secrets", str(secrets))
    assert (code, err) == (0, "")  # the second one adds to it
    assert sorted(json.loads(secrets.read_text())) == ["wh_1", "wh_2"]


# -- 3. a 2xx whose body cannot be read ---------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "what"),
    [
        (
            {"content": b"<html>rotated</html>"},
            "200 OK with a body that is not JSON",
        ),
        (
            {"stream": httpx.ByteStream(b"not gzip"), "headers": {"content-encoding": "gzip"}},
            "200 OK with a corrupt compressed body",
        ),
        (
            {"json": {"data": {"message": "done"}}},
            "the rotation response holds no secret",
        ),
    ],
)
def test_an_unreadable_2xx_says_the_rotation_probably_happened(answer, what, tmp_path, capsys):
    fake = _numbered()
    secrets = tmp_path / "s.json"
    _create(capsys, fake, secrets)
    before = secrets.read_bytes()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/rotate-secret"):
            fake.handle(request)  # the service rotates...
            return httpx.Response(200, **answer)  # ...and its answer cannot be read
        return fake.handle(request)

    code, out, err = _run(
        capsys,
        fake,
        "webhooks",
        "rotate-secret",
        "wh_1",
        "--secrets",
        str(secrets),
        handler=handler,
    )
    assert (code, out) == (3, "")
    assert err == (
        f"audit: error: POST /v1/webhooks/wh_1/rotate-secret: {what}: the service has probably "
        "rotated the secret, so the previous one no longer works; rotate again to get a new one: "
        f"audit webhooks rotate-secret wh_1 --secrets {secrets}\n"
    )
    assert secrets.read_bytes() == before
    assert _rotations(fake) == 1  # not retried: a retry would rotate again
