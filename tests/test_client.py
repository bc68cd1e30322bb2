"""The service API client, driven through ``httpx.MockTransport`` (no socket, no sleeping)."""

from __future__ import annotations

import json
import logging
import tracemalloc
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email import policy
from email.parser import BytesParser

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from audit.errors import (
    InputError,
    LimitError,
    PayloadTooLarge,
    RetryableError,
    ServiceError,
    TerminalError,
)
from audit.service.client import (
    REDACTED,
    IssuedSecret,
    RetryPolicy,
    ServiceClient,
    check_events,
    parse_retry_after,
    redact_secrets,
)

KEY = "ak_live_9f8e7d6c5b4a"
SECRET = "whsec_created_1111"
ROTATED = "whsec_rotated_2222"
BASE = "https://api.example"
NOW = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)
LIMIT = 10_485_760  # spec section 8


class MaxRng:
    """A jitter source that always draws the top of the range, and remembers the ranges."""

    def __init__(self) -> None:
        self.ranges: list[tuple[float, float]] = []

    def uniform(self, a: float, b: float) -> float:
        self.ranges.append((a, b))
        return b


class Service:
    """A scripted handler: answers in turn, then ``default``; records every request."""

    def __init__(self, *answers: httpx.Response | Exception | Callable, default=None):
        self.answers = list(answers)
        self.default = default
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if self.answers else self.default
        if answer is None:
            raise AssertionError(f"unexpected request {request.method} {request.url}")
        if callable(answer) and not isinstance(answer, httpx.Response):
            answer = answer(request)
        if isinstance(answer, Exception):
            raise answer
        return answer


def ok(data, status=200, **kw) -> httpx.Response:
    return httpx.Response(status, json={"data": data, "message": "Success"}, **kw)


def client_for(service: Service, **kw) -> tuple[ServiceClient, list[float]]:
    sleeps: list[float] = []
    kw.setdefault("rng", MaxRng())
    c = ServiceClient(
        base_url=kw.pop("base_url", BASE),
        api_key=KEY,
        transport=httpx.MockTransport(service),
        sleep=sleeps.append,
        clock=lambda: NOW,
        **kw,
    )
    return c, sleeps


def sub(i: int, **extra) -> dict:
    return {"id": f"wh_{i}", "clientId": "client_1", "url": f"https://hooks.example/{i}", **extra}


# -- every operation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        [sub(1), sub(2)],
        {"data": [sub(1), sub(2)], "message": "Success"},
        {"data": {"webhooks": [sub(1), sub(2)]}, "message": "Success"},
    ],
)
def test_list_webhooks_accepts_each_listing_shape(body):
    service = Service(httpx.Response(200, json=body))
    c, _ = client_for(service)
    assert [s["id"] for s in c.list_webhooks()] == ["wh_1", "wh_2"]
    (req,) = service.requests
    assert (req.method, str(req.url)) == ("GET", "https://api.example/v1/webhooks")
    assert req.headers["x-api-key"] == KEY


def test_requests_name_the_installed_version_in_the_user_agent():
    import audit

    service = Service(ok([]))
    client_for(service)[0].list_webhooks()
    assert service.requests[0].headers["user-agent"] == f"audit/{audit.__version__}"


def test_unrecognised_listing_is_a_service_error():
    c, _ = client_for(Service(ok({"a": [], "b": []})))
    with pytest.raises(ServiceError, match="unrecognised listing"):
        c.list_webhooks()


def test_fetch_listing_keeps_the_body_as_received_and_its_time():
    body = {"data": {"items": [sub(1)]}, "message": "Success"}
    c, _ = client_for(Service(httpx.Response(200, json=body)))
    listing = c.fetch_listing()
    assert listing.body == body
    assert listing.received_at == NOW
    assert listing.items == [sub(1)]


def test_create_webhook_lists_then_posts_and_returns_the_secret():
    created = sub(3, events=["incident.created"], active=True, secret=SECRET, message="Save it")
    service = Service(ok([sub(1)]), ok(created, status=201))
    c, _ = client_for(service)
    issued = c.create_webhook(
        "https://hooks.example/3", ["incident.created", "incident.created"], "prod"
    )
    assert isinstance(issued, IssuedSecret)
    assert (issued.subscription_id, issued.secret, issued.issued_at) == ("wh_3", SECRET, NOW)
    assert issued.message == "Save it"
    assert "secret" not in issued.subscription
    listing, post = service.requests
    assert listing.method == "GET"
    assert (post.method, post.url.path) == ("POST", "/v1/webhooks")
    assert post.headers["content-type"] == "application/json"
    assert json.loads(post.content) == {
        "url": "https://hooks.example/3",
        "events": ["incident.created"],  # repeats dropped
        "description": "prod",
    }


def test_create_without_a_secret_in_the_answer_says_what_to_do():
    c, _ = client_for(Service(ok([]), ok(sub(3), status=201)))
    with pytest.raises(ServiceError, match=r"wh_3 was created .* rotate its secret"):
        c.create_webhook("https://hooks.example/3", ["incident.created"])


def test_update_sends_only_the_given_fields():
    service = Service(ok(sub(1, active=False)))
    c, _ = client_for(service)
    assert c.update_webhook("wh_1", active=False)["active"] is False
    (req,) = service.requests
    assert (req.method, req.url.path) == ("PATCH", "/v1/webhooks/wh_1")
    assert json.loads(req.content) == {"active": False}


def test_update_needs_a_change_and_checks_it_before_sending():
    service = Service()
    c, _ = client_for(service)
    with pytest.raises(InputError, match="nothing to update"):
        c.update_webhook("wh_1")
    with pytest.raises(InputError, match="HTTPS"):
        c.update_webhook("wh_1", url="http://hooks.example/1")
    with pytest.raises(InputError, match=r"unknown event type 'incident.deleted'"):
        c.update_webhook("wh_1", events=["incident.deleted"])
    assert service.requests == []


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ok({"id": "wh_1", "deleted": True}), {"id": "wh_1", "deleted": True}),
        (httpx.Response(204), None),
        (httpx.Response(200, json={"deleted": "wh_1"}), {"deleted": "wh_1"}),  # not wrapped
    ],
)
def test_delete_webhook_answers_of_unpublished_shape(answer, expected):
    service = Service(answer)
    c, _ = client_for(service)
    assert c.delete_webhook("wh_1") == expected
    assert (service.requests[0].method, service.requests[0].url.path) == (
        "DELETE",
        "/v1/webhooks/wh_1",
    )


def test_test_webhook_posts_without_a_body():
    service = Service(ok({"id": "evt_1", "event": "webhook.test"}))
    c, _ = client_for(service)
    assert c.test_webhook("wh_1") == {"id": "evt_1", "event": "webhook.test"}
    (req,) = service.requests
    assert (req.method, req.url.path, req.content) == ("POST", "/v1/webhooks/wh_1/test", b"")


def test_rotate_secret_returns_the_new_secret_with_the_response_time():
    service = Service(ok({"secret": ROTATED, "message": "Store it"}))
    c, _ = client_for(service)
    issued = c.rotate_secret("wh_1")
    assert (issued.subscription_id, issued.secret, issued.issued_at) == ("wh_1", ROTATED, NOW)
    assert service.requests[0].url.path == "/v1/webhooks/wh_1/rotate-secret"


def test_rotate_answer_without_secret_is_an_error():
    c, _ = client_for(Service(ok({"message": "done"})))
    with pytest.raises(ServiceError, match="holds no secret"):
        c.rotate_secret("wh_1")


def test_path_segments_are_escaped():
    service = Service(ok(None))
    c, _ = client_for(service)
    c.delete_webhook("../incident/x")
    assert service.requests[0].url.raw_path == b"/v1/webhooks/..%2Fincident%2Fx"


def _parts(request: httpx.Request) -> list[tuple[str, str | None, bytes]]:
    head = b"Content-Type: " + request.headers["content-type"].encode() + b"\r\n\r\n"
    msg = BytesParser(policy=policy.HTTP).parsebytes(head + request.content)
    out = []
    for p in msg.iter_parts():
        name = p.get_param("name", header="content-disposition")
        out.append((name, p.get_filename(), p.get_payload(decode=True)))
    return out


def test_upload_attachments_repeats_the_attachments_field(tmp_path):
    shot = tmp_path / "shot.png"
    shot.write_bytes(b"\x89PNG fake")
    service = Service(ok({"incidentId": "inc_1"}))
    c, _ = client_for(service)
    c.upload_attachments("inc_1", [shot, ("note.txt", b"seen at 09:30")], fields={"kind": "ev"})
    (req,) = service.requests
    assert (req.method, req.url.path) == ("POST", "/v1/incident/inc_1/attach")
    assert req.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert _parts(req) == [
        ("kind", None, b"ev"),
        ("attachments", "shot.png", b"\x89PNG fake"),
        ("attachments", "note.txt", b"seen at 09:30"),
    ]


# -- base URL and key ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given_url", "request_url"),
    [
        ("https://api.example", "https://api.example/v1/webhooks"),
        ("https://api.example/", "https://api.example/v1/webhooks"),
        ("https://api.example/incidents", "https://api.example/incidents/v1/webhooks"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/v1/webhooks"),
        ("http://localhost:8765", "http://localhost:8765/v1/webhooks"),
    ],
)
def test_the_client_adds_v1(given_url, request_url):
    service = Service(ok([]))
    c, _ = client_for(service, base_url=given_url)
    c.list_webhooks()
    assert str(service.requests[0].url) == request_url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://api.example/v1", "without /v1"),
        ("https://api.example/v1/", "without /v1"),
        ("http://api.example", "plain HTTP"),
        ("https://user:pw@api.example", "credentials"),
        ("ftp://api.example", "https://host"),
        ("https://api.example/?x=1", "query"),
        ("", "no base URL"),
    ],
)
def test_bad_base_urls_are_refused(url, reason):
    with pytest.raises(InputError, match=reason):
        ServiceClient(base_url=url, api_key=KEY)


@pytest.mark.parametrize("key", ["", "  ", "ab\ncd", " ab"])
def test_bad_api_keys_are_refused_without_quoting_them(key):
    with pytest.raises(InputError) as err:
        ServiceClient(base_url=BASE, api_key=key)
    assert key.strip() == "" or key.strip() not in str(err.value)


def test_redirects_are_not_followed_so_the_key_stays_with_the_service():
    service = Service(httpx.Response(302, headers={"location": "https://elsewhere.example/"}))
    c, _ = client_for(service)
    with pytest.raises(ServiceError, match="unexpected 302") as err:
        c.list_webhooks()
    assert not isinstance(err.value, RetryableError | TerminalError)
    assert len(service.requests) == 1


# -- retry rules -----------------------------------------------------------------------------------


def test_429_without_retry_after_backs_off_with_full_jitter():
    service = Service(httpx.Response(429), httpx.Response(429), ok([]))
    rng = MaxRng()
    c, sleeps = client_for(service, rng=rng)
    assert c.list_webhooks() == []
    # Full jitter draws from [0, min(30, 0.5 * 2**(n-1))]: [0, 0.5] then [0, 1.0].
    assert rng.ranges == [(0.0, 0.5), (0.0, 1.0)]
    assert sleeps == [0.5, 1.0]
    assert len(service.requests) == 3


def test_429_with_retry_after_seconds_waits_exactly_that():
    service = Service(httpx.Response(429, headers={"Retry-After": "7"}), ok([]))
    rng = MaxRng()
    c, sleeps = client_for(service, rng=rng)
    c.list_webhooks()
    assert sleeps == [7.0]
    assert rng.ranges == []  # no jitter drawn when the service says how long


def test_429_with_retry_after_http_date():
    # NOW is 2026-01-15 09:30:00 UTC, a Thursday; 42 s later by hand.
    service = Service(
        httpx.Response(429, headers={"Retry-After": "Thu, 15 Jan 2026 09:30:42 GMT"}), ok([])
    )
    c, sleeps = client_for(service)
    c.list_webhooks()
    assert sleeps == [42.0]


def test_retry_after_longer_than_the_policy_stops_at_once():
    service = Service(httpx.Response(429, headers={"Retry-After": "3600"}), ok([]))
    c, sleeps = client_for(service, retry=RetryPolicy(max_retry_after_s=120))
    with pytest.raises(RetryableError, match="asked to wait 3600 s") as err:
        c.list_webhooks()
    assert err.value.status == 429
    assert sleeps == []
    assert len(service.requests) == 1


def test_503_then_success():
    service = Service(httpx.Response(503, json={"message": "maintenance"}), ok([sub(1)]))
    c, sleeps = client_for(service)
    assert c.list_webhooks() == [sub(1)]
    assert sleeps == [0.5]


def test_retry_after_is_honoured_on_5xx_too():
    service = Service(httpx.Response(503, headers={"Retry-After": "3"}), ok([]))
    c, sleeps = client_for(service)
    c.list_webhooks()
    assert sleeps == [3.0]


@pytest.mark.parametrize(
    "error",
    [
        httpx.ConnectError("refused"),
        httpx.ConnectTimeout("slow connect"),
        httpx.ReadTimeout("slow answer"),
        httpx.RemoteProtocolError("dropped"),
    ],
)
def test_connection_error_then_success(error):
    service = Service(error, ok([]))
    c, sleeps = client_for(service)
    assert c.list_webhooks() == []
    assert len(service.requests) == 2
    assert sleeps == [0.5]


def test_retry_limit_reached():
    service = Service(default=httpx.Response(503, json={"message": "down"}))
    c, sleeps = client_for(service, retry=RetryPolicy(max_attempts=4, max_delay_s=1.5))
    with pytest.raises(RetryableError) as err:
        c.list_webhooks()
    assert len(service.requests) == 4
    assert sleeps == [0.5, 1.0, 1.5]  # the third cap would be 2.0, bounded by max_delay_s
    assert err.value.status == 503
    assert err.value.server_message == "down"
    assert str(err.value) == "GET /v1/webhooks: 503 Service Unavailable: down, after 4 attempts"


def test_retry_limit_reached_on_connection_errors():
    service = Service(default=httpx.ConnectError("refused"))
    c, sleeps = client_for(service, retry=RetryPolicy(max_attempts=2))
    with pytest.raises(RetryableError, match="ConnectError: refused, after 2 attempts") as err:
        c.list_webhooks()
    assert err.value.status is None
    assert len(sleeps) == 1


def test_max_attempts_one_disables_retries():
    service = Service(default=httpx.Response(500))
    c, sleeps = client_for(service, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(RetryableError, match=r"after 1 attempt$"):
        c.list_webhooks()
    assert (len(service.requests), sleeps) == (1, [])


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, TerminalError),
        (401, TerminalError),
        (403, TerminalError),
        (404, TerminalError),
        (413, PayloadTooLarge),
        (422, TerminalError),
    ],
)
def test_terminal_statuses_are_never_retried(status, cls):
    service = Service(default=httpx.Response(status, json={"message": "fix it"}))
    c, sleeps = client_for(service)
    with pytest.raises(cls) as err:
        c.list_webhooks()
    assert type(err.value) is cls
    assert (len(service.requests), sleeps) == (1, [])
    assert (err.value.status, err.value.server_message) == (status, "fix it")


@pytest.mark.parametrize("status", [405, 409, 418])
def test_other_4xx_are_not_retried_either(status):
    service = Service(default=httpx.Response(status))
    c, sleeps = client_for(service)
    with pytest.raises(ServiceError) as err:
        c.list_webhooks()
    assert not isinstance(err.value, RetryableError | TerminalError)
    assert (len(service.requests), sleeps) == (1, [])


def test_413_body_is_parsed():
    body = {
        "statusCode": 413,
        "error": "Request Entity Too Large",
        "message": "Payload content length greater than maximum allowed: 10485760",
    }
    c, _ = client_for(Service(httpx.Response(413, json=body)))
    with pytest.raises(PayloadTooLarge) as err:
        c.upload_attachments("inc_1", [("a.txt", b"x")])
    assert err.value.status == 413
    assert err.value.server_message == body["message"]
    assert str(err.value) == (
        "POST /v1/incident/inc_1/attach: 413 Request Entity Too Large: "
        "Payload content length greater than maximum allowed: 10485760"
    )


def test_error_bodies_that_are_not_json_give_a_short_message():
    c, _ = client_for(Service(httpx.Response(403, text="<html>\n<b>denied</b>\n</html>")))
    with pytest.raises(TerminalError) as err:
        c.list_webhooks()
    assert err.value.server_message == "<html> <b>denied</b> </html>"
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("error", [httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("dropped")])
def test_create_is_not_repeated_when_the_post_may_have_arrived(error):
    service = Service(ok([]), error, ok(sub(1, secret=SECRET), status=201))
    c, sleeps = client_for(service)
    with pytest.raises(ServiceError, match="may have reached the service") as err:
        c.create_webhook("https://hooks.example/1", ["incident.created"])
    assert not isinstance(err.value, RetryableError)
    assert [r.method for r in service.requests] == ["GET", "POST"]
    assert sleeps == []


def test_create_is_repeated_when_the_post_never_left():
    service = Service(ok([]), httpx.ConnectError("refused"), ok(sub(1, secret=SECRET), status=201))
    c, _ = client_for(service)
    assert c.create_webhook("https://hooks.example/1", ["incident.created"]).secret == SECRET
    assert [r.method for r in service.requests] == ["GET", "POST", "POST"]


def test_success_body_that_is_not_json_is_an_error():
    c, _ = client_for(Service(httpx.Response(200, text="<html>")))
    with pytest.raises(ServiceError, match="200 OK with a body that is not JSON"):
        c.list_webhooks()


def test_a_body_with_half_a_utf16_pair_is_refused_as_not_text():
    # json.loads turns "\ud800" into a str that no report, table or request can hold: the
    # service's text then ended in an internal error far from here.
    body = b'{"data": [{"id": "wh_1", "description": "x\\ud800"}]}'
    c, _ = client_for(Service(httpx.Response(200, content=body)))
    with pytest.raises(ServiceError, match="200 OK with a body that is not text"):
        c.list_webhooks()


def test_an_argument_in_another_encoding_is_an_input_error_before_anything_is_sent():
    service = Service(ok(sub(1)))
    c, _ = client_for(service)
    with pytest.raises(InputError, match="a value given is not UTF-8 text"):
        c.update_webhook("wh_1", description="bad\udcff")  # $'bad\xff' on a command line
    assert service.requests == []


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("120", 120.0),
        (" 0 ", 0.0),
        # RFC 9110 section 10.2.3's example date; NOW - 10 s by hand below.
        ("Sun, 06 Nov 1994 08:49:37 GMT", 0.0),  # in the past: no wait
        ("Thu, 15 Jan 2026 09:31:00 GMT", 60.0),
        ("-5", None),
        ("1.5", None),
        ("soon", None),
        ("", None),
        (None, None),
    ],
)
def test_parse_retry_after(value, seconds):
    assert parse_retry_after(value, NOW) == seconds


@given(st.integers(min_value=1, max_value=60))
def test_backoff_cap_is_bounded_and_doubles(n):
    p = RetryPolicy(base_delay_s=0.25, max_delay_s=8.0)
    assert p.backoff_cap_s(n) == min(8.0, 0.25 * 2 ** (n - 1))
    assert 0 < p.backoff_cap_s(n) <= 8.0


@pytest.mark.parametrize(
    "kw", [{"max_attempts": 0}, {"base_delay_s": -1}, {"max_delay_s": float("inf")}]
)
def test_retry_policy_validation(kw):
    with pytest.raises(InputError):
        RetryPolicy(**kw)


# -- limits enforced before sending ----------------------------------------------------------------


def test_sixth_subscription_is_refused_before_posting():
    service = Service(ok([sub(i) for i in range(1, 6)]))
    c, _ = client_for(service)
    with pytest.raises(LimitError, match=r"already has 5 .* allows 5 per client"):
        c.create_webhook("https://hooks.example/6", ["incident.created"])
    assert [r.method for r in service.requests] == ["GET"]


def test_fifth_subscription_is_allowed():
    service = Service(ok([sub(i) for i in range(1, 5)]), ok(sub(5, secret=SECRET), status=201))
    c, _ = client_for(service)
    assert c.create_webhook("https://hooks.example/5", ["incident.created"]).subscription_id == (
        "wh_5"
    )


@pytest.mark.parametrize(
    ("url", "events", "reason"),
    [
        ("http://hooks.example/a", ["incident.created"], "must be HTTPS"),
        ("hooks.example/a", ["incident.created"], "must be HTTPS"),
        ("https:///a", ["incident.created"], "no host"),
        ("https://hooks.example/a", ["incident.deleted"], "unknown event type"),
        ("https://hooks.example/a", [], "at least one event"),
    ],
)
def test_create_checks_url_and_events_before_anything_is_sent(url, events, reason):
    service = Service()
    c, _ = client_for(service)
    with pytest.raises(InputError, match=reason):
        c.create_webhook(url, events)
    assert service.requests == []


def test_known_events_are_the_published_ones():
    assert check_events("incident.created") == ["incident.created"]
    assert check_events(["webhook.test"]) == ["webhook.test"]


def test_thirteen_files_are_refused_before_sending():
    service = Service(default=ok({}))
    c, _ = client_for(service)
    with pytest.raises(LimitError, match="13 files, the service accepts at most 12"):
        c.upload_attachments("inc_1", [(f"{i}.txt", b"x") for i in range(13)])
    assert service.requests == []
    c.upload_attachments("inc_1", [(f"{i}.txt", b"x") for i in range(12)])
    assert len(_parts(service.requests[0])) == 12


def test_request_size_limit_is_checked_on_the_multipart_body_before_sending():
    service = Service(default=ok({}))
    c, _ = client_for(service)
    # Measure the multipart overhead of one file on the wire (the boundary has a fixed length).
    c.upload_attachments("inc_1", [("big.bin", b"x")])
    overhead = len(service.requests[0].content) - 1
    assert overhead > 0
    # A body of exactly 10485760 bytes would reach the limit: refused, nothing sent.
    with pytest.raises(LimitError, match=f"would be {LIMIT} bytes"):
        c.upload_attachments("inc_1", [("big.bin", b"x" * (LIMIT - overhead))])
    assert len(service.requests) == 1
    # One byte less is sent, and the service receives exactly 10485759 bytes.
    c.upload_attachments("inc_1", [("big.bin", b"x" * (LIMIT - overhead - 1))])
    assert len(service.requests) == 2
    assert len(service.requests[1].content) == LIMIT - 1


def test_files_too_large_on_disk_are_refused_before_being_read(tmp_path, monkeypatch):
    huge = tmp_path / "huge.bin"
    with huge.open("wb") as f:
        f.truncate(LIMIT)  # sparse: no disk used
    read = []
    monkeypatch.setattr(type(huge), "read_bytes", lambda self: read.append(self) or b"")
    service = Service()
    c, _ = client_for(service)
    with pytest.raises(LimitError, match=f"the files hold {LIMIT} bytes"):
        c.upload_attachments("inc_1", [huge])
    assert (read, service.requests) == ([], [])


def test_upload_input_errors():
    c, _ = client_for(Service())
    with pytest.raises(InputError, match="no file"):
        c.upload_attachments("inc_1", [])
    with pytest.raises(InputError, match="cannot read"):
        c.upload_attachments("inc_1", ["/nonexistent/file.png"])
    with pytest.raises(InputError, match="incident id is empty"):
        c.upload_attachments("", [("a", b"x")])


# -- no key or secret in logs, reprs, exceptions --------------------------------------------------


def test_key_and_secrets_appear_in_no_log_repr_or_exception(caplog):
    caplog.set_level(logging.DEBUG)  # everything: audit, httpx, httpcore
    echo = httpx.Response(401, json={"message": f"key {KEY} is not valid"})
    service = Service(
        ok([]),
        httpx.Response(429),
        ok(sub(1, secret=SECRET), status=201),
        httpx.Response(503),
        ok({"secret": ROTATED}),
        echo,
        httpx.ConnectError(f"failed sending {KEY}"),
        httpx.ConnectError(f"failed sending {KEY}"),
    )
    c, _ = client_for(service, retry=RetryPolicy(max_attempts=2))
    issued = c.create_webhook("https://hooks.example/1", ["incident.created"])
    rotated = c.rotate_secret("wh_1")
    errors = []
    for call in (c.list_webhooks, c.list_webhooks):
        with pytest.raises(ServiceError) as err:
            call()
        errors.append(err.value)
    assert errors[0].server_message == f"key {REDACTED} is not valid"
    texts = [
        caplog.text,
        repr(c),
        repr(issued),
        str(issued),
        repr(rotated),
        *(str(e) for e in errors),
        *(repr(e) for e in errors),
        *(str(e.server_message) for e in errors),
    ]
    for text in texts:
        for value in (KEY, SECRET, ROTATED):
            assert value not in text
    assert "retrying" in caplog.text  # the retries were logged, without the key


def test_redact_secrets_at_any_depth():
    body = {
        "data": {"webhooks": [{"id": "wh_1", "Secret": "s1", "nested": {"secret": "s2"}}]},
        "note": f"key={KEY}",
        "empty": {"secret": None},
    }
    red, n = redact_secrets(body, also=[KEY])
    assert n == 2
    assert red == {
        "data": {"webhooks": [{"id": "wh_1", "Secret": REDACTED, "nested": {"secret": REDACTED}}]},
        "note": f"key={REDACTED}",
        "empty": {"secret": None},
    }
    assert body["data"]["webhooks"][0]["Secret"] == "s1"  # the input is not changed


def test_client_is_a_context_manager():
    service = Service(ok([]))
    with client_for(service)[0] as c:
        c.list_webhooks()
    with pytest.raises(RuntimeError):
        c.list_webhooks()


def test_clock_is_used_for_issue_times():
    times = iter([NOW, NOW + timedelta(seconds=5)])
    service = Service(ok([]), ok(sub(1, secret=SECRET), status=201))
    c = ServiceClient(
        base_url=BASE,
        api_key=KEY,
        transport=httpx.MockTransport(service),
        clock=lambda: next(times),
    )
    assert c.create_webhook("https://hooks.example/1", ["incident.created"]).issued_at == (
        NOW + timedelta(seconds=5)
    )


# -- review: bounded bodies, non-repeatable requests, terminal-safe warnings, keys, backoff -----


def _gzip_layers(data_mib: int, layers: int) -> bytes:
    """``layers`` gzip layers around ``data_mib`` MiB of zeros, compressed block by block."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"\0" * 2**20
    body = b"".join([*(c.compress(block) for _ in range(data_mib)), c.flush()])
    for _ in range(layers - 1):
        c = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = c.compress(body) + c.flush()
    return body


def _streamed(body: bytes, encoding: str) -> Service:
    """Answers with ``body`` as a stream (not pre-read by httpx) under ``Content-Encoding``."""
    return Service(
        default=lambda r: httpx.Response(
            200, headers={"content-encoding": encoding}, stream=httpx.ByteStream(body)
        )
    )


@pytest.mark.parametrize("encoding", ["gzip, gzip", "gzip,deflate", "deflate, gzip"])
def test_stacked_content_codings_are_refused(encoding):
    c, _ = client_for(_streamed(_gzip_layers(1, 2), encoding))
    with pytest.raises(ServiceError, match="stacked content-codings") as err:
        c.list_webhooks()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("encoding", ["br", "compress", "zstd", "\x1b[31mx"])
def test_unknown_content_codings_are_refused(encoding):
    c, _ = client_for(_streamed(b"{}", encoding))
    with pytest.raises(ServiceError, match="unsupported content-coding") as err:
        c.list_webhooks()
    assert "\x1b" not in str(err.value)


def test_one_gzip_layer_is_decoded_within_the_size_limit_in_memory():
    # 64 MiB of zeros in one gzip layer (64 KB) arrives as a single chunk: httpx's decoder
    # would expand all of it at once; the bounded decoder stops just past the limit.
    service = _streamed(_gzip_layers(64, 1), "gzip")
    c, _ = client_for(service, max_response_bytes=1_000_000)
    tracemalloc.start()
    try:
        with pytest.raises(ServiceError, match="larger than 1000000 bytes"):
            c.list_webhooks()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * 2**20


@pytest.mark.parametrize(
    ("encoding", "encode"),
    [
        ("gzip", lambda b: zlib.compress(b, wbits=31)),
        ("x-gzip", lambda b: zlib.compress(b, wbits=31)),
        ("deflate", lambda b: zlib.compress(b)),  # zlib-wrapped, as RFC 9110 says
        ("deflate", lambda b: zlib.compress(b, wbits=-15)),  # raw, as some servers send
        ("identity", lambda b: b),
        ("GZIP", lambda b: zlib.compress(b, wbits=31)),
    ],
)
def test_compressed_answers_are_decoded(encoding, encode):
    body = json.dumps({"data": [sub(1)], "message": "Success"}).encode()
    service = _streamed(encode(body), encoding)
    c, _ = client_for(service)
    assert [s["id"] for s in c.list_webhooks()] == ["wh_1"]
    assert service.requests[0].headers["accept-encoding"] == "gzip, deflate"


def test_a_corrupt_compressed_body_is_a_one_line_error():
    c, _ = client_for(_streamed(b"\x1f\x8b\x08\x00garbage" * 10, "gzip"))
    with pytest.raises(ServiceError, match="200 OK with a corrupt compressed body"):
        c.list_webhooks()


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_create_is_not_repeated_on_a_5xx_either(status):
    service = Service(
        ok([]), httpx.Response(status, json={"message": "gateway"}), ok(sub(1, secret=SECRET))
    )
    c, sleeps = client_for(service)
    with pytest.raises(ServiceError, match="may have reached the service: list before") as err:
        c.create_webhook("https://hooks.example/1", ["incident.created"])
    assert err.value.status == status
    assert [r.method for r in service.requests] == ["GET", "POST"]
    assert sleeps == []


def test_create_is_still_repeated_on_429():
    service = Service(ok([]), httpx.Response(429), ok(sub(1, secret=SECRET), status=201))
    c, _ = client_for(service)
    assert c.create_webhook("https://hooks.example/1", ["incident.created"]).secret == SECRET
    assert [r.method for r in service.requests] == ["GET", "POST", "POST"]


def test_attachment_upload_is_not_repeated_on_a_5xx():
    service = Service(httpx.Response(504), ok({}))
    c, _ = client_for(service)
    with pytest.raises(ServiceError, match="list before trying again"):
        c.upload_attachments("inc_1", [("a.txt", b"x")])
    assert len(service.requests) == 1


def test_rotation_is_repeated_on_a_5xx():
    service = Service(httpx.Response(503), ok({"secret": ROTATED}))
    c, _ = client_for(service)
    assert c.rotate_secret("wh_1").secret == ROTATED
    assert len(service.requests) == 2


def test_retry_warnings_escape_what_the_server_wrote(caplog):
    hostile = "\x1b[31mRED\x1b]0;title\x07 <b>\u202e"
    service = Service(httpx.Response(500, json={"message": hostile}), ok([]))
    c, _ = client_for(service)
    with caplog.at_level(logging.WARNING, logger="audit.service.client"):
        c.list_webhooks()
    (record,) = [r for r in caplog.records if "retrying" in r.getMessage()]
    text = record.getMessage()
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in text
    assert "\\x1b[31mRED" in text and "\\u202e" in text


@pytest.mark.parametrize("key", ["ключ-1234567890", "key-\u00e9t\u00e9-123", "key\u202e12345"])
def test_non_ascii_api_keys_are_an_input_error(key):
    with pytest.raises(InputError, match="API key contains") as err:
        ServiceClient(base_url=BASE, api_key=key)
    assert key not in str(err.value)


@pytest.mark.parametrize("key", ["KEY-top\tx", "KEY\x01x1234", "KEY top x"])
def test_keys_with_inner_whitespace_or_controls_are_refused(key):
    with pytest.raises(InputError, match="whitespace or control characters"):
        ServiceClient(base_url=BASE, api_key=key)


def test_a_non_ascii_key_is_a_one_line_cli_error(monkeypatch, capsys):
    from audit.cli import main

    monkeypatch.setenv("AUDIT_API_KEY", "ключ-1234567890")
    monkeypatch.setenv("AUDIT_BASE_URL", BASE)
    assert main(["webhooks", "list"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error" not in err and "non-ASCII" in err


@pytest.mark.parametrize("retry_after", ["0", "Thu, 01 Jan 2026 00:00:00 GMT"])
def test_retry_after_zero_or_past_keeps_the_jittered_backoff(retry_after):
    service = Service(
        httpx.Response(503, headers={"Retry-After": retry_after}),
        httpx.Response(503, headers={"Retry-After": retry_after}),
        ok([]),
    )
    rng = MaxRng()
    c, sleeps = client_for(service, rng=rng)
    c.list_webhooks()
    assert sleeps == [0.5, 1.0]
    assert rng.ranges == [(0.0, 0.5), (0.0, 1.0)]


def test_a_short_retry_after_is_raised_to_the_drawn_backoff():
    service = Service(httpx.Response(429, headers={"Retry-After": "1"}), ok([]))
    c, sleeps = client_for(service, retry=RetryPolicy(base_delay_s=4.0))
    c.list_webhooks()
    assert sleeps == [4.0]  # MaxRng draws the top of [0, 4]


@pytest.mark.parametrize(
    ("secret", "said"),
    [
        ("A" * 9_000_000, "a secret of 9,000,000 characters"),  # three made the file unreadable
        ("whsec_\x1b[31mred", "characters other than printable ASCII"),
        ("whsec with space", "characters other than printable ASCII"),
    ],
)
def test_an_implausible_rotated_secret_is_not_handed_over(secret, said):
    c, _ = client_for(Service(ok({"secret": secret, "message": "saved?"})))
    with pytest.raises(ServiceError, match=said) as got:
        c.rotate_secret("wh_1")
    assert "probably rotated the secret, so the previous one no longer works" in str(got.value)
    assert secret[:20] not in str(got.value)


def test_a_rotation_whose_answers_were_all_lost_says_the_secret_may_have_changed():
    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    c, _ = client_for(Service(lost, lost, lost, lost))
    with pytest.raises(RetryableError, match="the service may have rotated the secret"):
        c.rotate_secret("wh_1")


def test_a_delete_retried_after_a_lost_answer_says_a_404_most_likely_means_deleted():
    lost = httpx.RemoteProtocolError("Server disconnected without sending a response.")
    gone = httpx.Response(404, json={"message": "Webhook not found"})
    c, _ = client_for(Service(lost, gone))
    with pytest.raises(TerminalError, match="on a retry: an attempt that got no answer most"):
        c.delete_webhook("wh_1")
    c, _ = client_for(Service(httpx.Response(404, json={"message": "Webhook not found"})))
    with pytest.raises(TerminalError) as first:  # a first answer of 404 is just that
        c.delete_webhook("wh_1")
    assert "retry" not in str(first.value)


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400"])
def test_a_listing_with_a_number_json_has_not_is_not_json(number):
    body = b'{"data": [{"id": "wh_1", "retries": ' + number + b"}]}"
    c, _ = client_for(Service(httpx.Response(200, content=body)))
    with pytest.raises(ServiceError, match="200 OK with a body that is not JSON"):
        c.list_webhooks()


@pytest.mark.parametrize("url", ["https://xn--/", "https://api.example:99999", "https://h:0/"])
def test_a_base_url_no_connection_can_use_is_an_input_error(url):
    with pytest.raises(InputError, match="not a valid base URL"):
        ServiceClient(base_url=url, api_key=KEY)


@pytest.mark.parametrize("deadline", [float("inf"), float("nan"), 0])
def test_a_deadline_must_be_finite(deadline):
    with pytest.raises(InputError, match="positive finite number"):
        ServiceClient(base_url=BASE, api_key=KEY, deadline_s=deadline)
