"""The local stand-in for the service: state, documented shapes, faults, signed deliveries."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from audit.service.fake import TOO_LARGE_MESSAGE, FakeService, main

KEY = "fake-key-1"
OTHER_KEY = "fake-key-2"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make_fake(**kw) -> FakeService:
    ticks = itertools.count()
    kw.setdefault("clock", lambda: T0 + timedelta(seconds=next(ticks)))
    kw.setdefault("api_keys", {KEY: "client_1", OTHER_KEY: "client_2"})
    return FakeService(**kw)


def http(fake: FakeService, key: str | None = KEY, timeout: float = 5.0) -> httpx.Client:
    headers = {"x-api-key": key} if key else {}
    return httpx.Client(
        transport=fake.transport(), base_url="http://fake/v1", headers=headers, timeout=timeout
    )


def create(c: httpx.Client, n: int = 1, **body) -> httpx.Response:
    body = {"url": f"https://hooks.example/{n}", "events": ["incident.created"], **body}
    return c.post("/webhooks", json=body)


# -- state and documented shapes -------------------------------------------------------------------


def test_create_answers_201_with_the_documented_fields():
    fake = make_fake()
    r = create(http(fake), description="prod")
    assert r.status_code == 201
    body = r.json()
    assert body["message"] == "Success"
    data = body["data"]
    assert set(data) == {
        "id", "clientId", "url", "events", "active", "description", "createdAt", "secret", "message"
    }  # fmt: skip
    assert data["active"] is True
    assert data["clientId"] == "client_1"
    assert data["createdAt"] == "2026-01-01T00:00:00.000Z"
    assert data["secret"] == fake.current_secret(data["id"])


def test_listing_never_shows_the_secret_and_is_per_client():
    fake = make_fake()
    mine, theirs = http(fake), http(fake, OTHER_KEY)
    create(mine, 1)
    create(theirs, 2)
    listed = mine.get("/webhooks").json()["data"]
    assert [s["url"] for s in listed] == ["https://hooks.example/1"]
    assert "secret" not in listed[0]
    # another client's subscription is invisible and untouchable
    other_id = theirs.get("/webhooks").json()["data"][0]["id"]
    assert mine.delete(f"/webhooks/{other_id}").status_code == 404


@pytest.mark.parametrize(
    ("shape", "unwrap"),
    [
        ("data", lambda b: b["data"]),
        ("list", lambda b: b),
        ("nested", lambda b: b["data"]["webhooks"]),
    ],
)
def test_listing_shapes(shape, unwrap):
    fake = make_fake(listing_shape=shape)
    c = http(fake)
    create(c)
    assert [s["id"] for s in unwrap(c.get("/webhooks").json())] == ["wh_1"]


def test_exposing_fake_shows_the_current_secret_in_the_listing():
    fake = make_fake(expose_secrets_in_listing=True)
    c = http(fake)
    sub_id = create(c).json()["data"]["id"]
    assert c.get("/webhooks").json()["data"][0]["secret"] == fake.current_secret(sub_id)


def test_five_per_client_limit():
    fake = make_fake()
    c = http(fake)
    for n in range(5):
        assert create(c, n).status_code == 201
    r = create(c, 6)
    assert r.status_code == 400
    assert r.json() == {
        "statusCode": 400,
        "error": "Bad Request",
        "message": "Webhook limit reached: at most 5 per client",
    }
    assert create(http(fake, OTHER_KEY), 6).status_code == 201  # the limit is per client


def test_rotation_issues_a_new_secret_and_keeps_the_history():
    fake = make_fake()
    c = http(fake)
    sub_id = create(c).json()["data"]["id"]
    first = fake.current_secret(sub_id)
    r = c.post(f"/webhooks/{sub_id}/rotate-secret")
    assert r.status_code == 200
    data = r.json()["data"]
    assert set(data) == {"secret", "message"}
    assert data["secret"] == fake.current_secret(sub_id) != first
    assert fake.secret_issue_times(sub_id) == [T0, T0 + timedelta(seconds=1)]


def test_update_delete_and_test():
    fake = make_fake()
    c = http(fake)
    sub_id = create(c).json()["data"]["id"]
    r = c.patch(f"/webhooks/{sub_id}", json={"active": False, "description": "paused"})
    assert (r.json()["data"]["active"], r.json()["data"]["description"]) == (False, "paused")
    r = c.post(f"/webhooks/{sub_id}/test")
    assert r.json()["data"]["event"] == "webhook.test"
    (sent_to, headers, body) = fake.outbox[0]
    assert sent_to == sub_id
    assert b'"incidentId":"test_' in body
    assert headers["X-PhishFort-Event"] == "webhook.test"
    assert c.delete(f"/webhooks/{sub_id}").json()["data"] == {"id": sub_id, "deleted": True}
    assert c.get("/webhooks").json()["data"] == []
    assert c.post(f"/webhooks/{sub_id}/test").status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/webhooks", {"url": "http://h/a", "events": ["incident.created"]}, 400),
        ("POST", "/webhooks", {"url": "https://hooks.example/a", "events": ["nope"]}, 400),
        ("POST", "/webhooks", {"url": "https://hooks.example/a", "events": []}, 400),
        ("POST", "/webhooks", {"url": "https://hooks.example/a"}, 400),
        ("POST", "/webhooks", {"url": "https://h/a", "events": ["incident.created"], "x": 1}, 400),
        ("PATCH", "/webhooks/wh_1", {"active": "no"}, 400),
        ("PATCH", "/webhooks/wh_1", {}, 400),
        ("PATCH", "/webhooks/wh_404", {"active": False}, 404),
        ("GET", "/nowhere", None, 404),
    ],
)  # fmt: skip
def test_bad_requests(method, path, body, status):
    fake = make_fake()
    c = http(fake)
    create(c)
    r = c.request(method, path, json=body)
    assert r.status_code == status
    assert set(r.json()) == {"statusCode", "error", "message"}


@pytest.mark.parametrize("key", [None, "wrong"])
def test_missing_or_wrong_key_is_401(key):
    fake = make_fake()
    r = http(fake, key).get("/webhooks")
    assert r.status_code == 401
    assert fake.requests[-1].authorised is False
    assert "wrong" not in repr(fake.requests)  # the fake does not keep keys


def test_attachments_are_counted_and_limited():
    fake = make_fake()
    c = http(fake)
    files = [("attachments", (f"{i}.txt", b"abc", "text/plain")) for i in range(3)]
    r = c.post("/incident/inc_1/attach", files=files, data={"kind": "evidence"})
    assert r.json()["data"]["attachments"] == [
        {"filename": f"{i}.txt", "size": 3} for i in range(3)
    ]
    files = [("attachments", (f"{i}.txt", b"x", "text/plain")) for i in range(13)]
    assert c.post("/incident/inc_1/attach", files=files).status_code == 400
    assert len(fake.attachments["inc_1"]) == 3


def test_request_over_the_limit_gets_the_documented_413():
    fake = make_fake()
    r = http(fake).post(
        "/incident/inc_1/attach",
        files=[("attachments", ("big.bin", b"x" * 10_485_760, "application/octet-stream"))],
    )
    assert r.status_code == 413
    # spec section 7: statusCode 413, error "Request Entity Too Large", message with the limit
    assert r.json() == {
        "statusCode": 413,
        "error": "Request Entity Too Large",
        "message": TOO_LARGE_MESSAGE,
    }
    assert TOO_LARGE_MESSAGE.endswith("10485760")


# -- faults ----------------------------------------------------------------------------------------


def test_fail_next_429_with_and_without_retry_after_then_normal():
    fake = make_fake()
    fake.fail_next(status=429, retry_after="2")
    fake.fail_next(status=429)
    c = http(fake)
    first, second, third = (c.get("/webhooks") for _ in range(3))
    assert (first.status_code, first.headers["retry-after"]) == (429, "2")
    assert second.status_code == 429 and "retry-after" not in second.headers
    assert third.status_code == 200


def test_fail_next_times_and_path():
    fake = make_fake()
    fake.fail_next(status=503, times=2, path="/webhooks/wh_1")
    c = http(fake)
    create(c)
    assert c.get("/webhooks").status_code == 200  # not matched by the path
    assert [c.post("/webhooks/wh_1/test").status_code for _ in range(3)] == [503, 503, 200]


def test_fail_next_413_answers_the_documented_body():
    fake = make_fake()
    fake.fail_next(status=413)
    r = http(fake).get("/webhooks")
    assert r.json()["message"] == TOO_LARGE_MESSAGE


@pytest.mark.parametrize(
    ("error", "exc"), [("connect", httpx.ConnectError), ("disconnect", httpx.RemoteProtocolError)]
)
def test_connection_faults_in_process(error, exc):
    fake = make_fake()
    fake.fail_next(error=error)
    c = http(fake)
    with pytest.raises(exc):
        c.get("/webhooks")
    assert c.get("/webhooks").status_code == 200
    assert fake.requests[0].status is None


def test_slow_answer_in_process_times_out_only_past_the_read_timeout():
    fake = make_fake()
    fake.fail_next(delay_s=10)
    with pytest.raises(httpx.ReadTimeout):
        http(fake, timeout=5).get("/webhooks")
    fake.fail_next(delay_s=2)  # slower than usual but within the timeout: answered
    assert http(fake, timeout=5).get("/webhooks").status_code == 200


@pytest.mark.parametrize("kw", [{}, {"delay_s": -1}, {"status": 200}, {"error": "boom"}])
def test_fail_next_refuses_nonsense(kw):
    with pytest.raises(ValueError):
        FakeService().fail_next(**kw)


# -- signed deliveries -----------------------------------------------------------------------------


def test_deliver_signs_like_the_service():
    fake = make_fake(secret_factory=lambda: "whsec_test")
    create(http(fake))
    headers, body = fake.deliver(
        "wh_1",
        "incident.created",
        {"incidentId": "inc_1", "status": "pending_review"},
        timestamp=1767225600,
        event_id="evt_00000000-0000-0000-0000-000000000001",
    )
    assert body == (
        b'{"id":"evt_00000000-0000-0000-0000-000000000001","event":"incident.created",'
        b'"timestamp":"2026-01-01T00:00:00.000Z","data":{"clientId":"client_1",'
        b'"incidentId":"inc_1","status":"pending_review"}}'
    )
    # Known answer from outside the code: printf '%s' "1767225600.<body>" |
    #   openssl dgst -sha256 -hmac whsec_test
    assert headers["X-PhishFort-Signature"] == (
        "sha256=3114cfa4761b45cd690688435fa1f2fcf3f2b9976ccec80623d6435471f06038"
    )
    assert headers["X-PhishFort-Timestamp"] == "1767225600"
    assert headers["X-PhishFort-Event"] == "incident.created"
    assert headers["X-PhishFort-Delivery-Id"]


def test_deliver_refuses_unknown_events_and_missing_incident_id():
    fake = make_fake()
    create(http(fake))
    with pytest.raises(ValueError, match="unknown event"):
        fake.deliver("wh_1", "incident.deleted", {"incidentId": "i"}, timestamp=1)
    with pytest.raises(ValueError, match="incidentId"):
        fake.deliver("wh_1", "incident.created", {}, timestamp=1)


def test_repr_shows_no_secret_or_key():
    fake = make_fake()
    create(http(fake))
    text = repr(fake) + repr(fake._secrets)
    assert fake.current_secret("wh_1") not in text
    assert KEY not in repr(fake)


# -- on a real socket ------------------------------------------------------------------------------


def test_served_on_loopback():
    fake = make_fake()
    with fake.serve() as served, httpx.Client(base_url=served.base_url + "/v1") as c:
        assert served.base_url.startswith("http://127.0.0.1:")
        r = c.post(
            "/webhooks",
            json={"url": "https://hooks.example/a", "events": ["incident.created"]},
            headers={"x-api-key": KEY},
        )
        assert r.status_code == 201
        assert r.json()["data"]["secret"] == fake.current_secret("wh_1")
        assert c.get("/webhooks").status_code == 401
        fake.fail_next(error="disconnect")
        with pytest.raises(httpx.RemoteProtocolError):
            c.get("/webhooks", headers={"x-api-key": KEY})


def test_served_slow_answer_times_out_and_close_releases_it():
    fake = make_fake()
    with fake.serve() as served:
        fake.fail_next(delay_s=30)
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(served.base_url + "/v1/webhooks", headers={"x-api-key": KEY}, timeout=0.05)
    # leaving the block returned although the fake was still "slow" (close() ends the wait)


def test_module_entry_point_needs_the_key_variable(monkeypatch, capsys):
    monkeypatch.delenv("FAKE_TEST_KEY_VAR", raising=False)
    assert main(["--api-key-env", "FAKE_TEST_KEY_VAR", "--port", "0"]) == 3
    assert "set FAKE_TEST_KEY_VAR" in capsys.readouterr().err


@pytest.mark.slow
def test_python_dash_m_runs_the_fake_command_line():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "audit.service.fake", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: python -m audit.service.fake")
    assert "--listing-shape {data,list,nested}" in out.stdout
