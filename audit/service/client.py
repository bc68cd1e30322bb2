"""Client for the incident service's API: webhook subscriptions and attachment uploads.

Every operation of the webhook spec (section 4) plus ``POST /incident/{id}/attach``. The rules
it follows, each from the spec:

* Base URL without ``/v1``; the client adds the version prefix (section 9). The API key travels
  in the ``x-api-key`` header (section 5) and only there: it is added to each request, never
  stored on the underlying :class:`httpx.Client`, and never written to a log, a repr or an
  exception message. Redirects are not followed, so the key never goes to another host.
* 429, 5xx and connection failures are retried with bounded exponential backoff and full jitter,
  honouring ``Retry-After`` (seconds or an HTTP date); 400, 401, 403, 404, 413 and 422 are
  terminal (section 7). A request that may have reached the service before the connection
  failed is not repeated when repeating it could create something twice (a subscription, an
  attachment). The rules are in :mod:`audit.service.retry`.
* Published limits are checked before a byte is sent (section 8): 5 subscriptions per client,
  12 files and under 10485760 bytes per attachment request. Delivery URLs must be HTTPS and
  event types known ones. The checks are in :mod:`audit.service.request_checks`.
* Answers are unwrapped from ``{data, message}``; the listing shape is not published, so
  :func:`audit.analysis.subscriptions.unwrap_listing` accepts every plausible one.

Errors all derive from :class:`audit.errors.ServiceError` (refusals on bad arguments from
:class:`audit.errors.InputError`)::

    ServiceError          any other unexpected answer (e.g. 409, a body that is not JSON)
    ├── TerminalError     400/401/403/404/422: fix the request
    │   └── PayloadTooLarge  413, with the server's ``error`` and ``message``
    ├── RetryableError    429/5xx/connection failure that outlived the retries
    └── LimitError        refused before sending
"""

from __future__ import annotations

import email.utils
import logging
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

import httpx

from audit.analysis.subscriptions import unwrap_listing
from audit.errors import InputError, RetryableError, ServiceError, TerminalError
from audit.redaction import REDACTED, redact_secrets
from audit.service.request_checks import (
    FileSpec,
    check_attachment_count,
    check_attachment_sizes,
    check_delivery_url,
    check_description,
    check_events,
    check_request_size,
    check_subscription_room,
    path_segment,
)
from audit.service.retry import RetryPolicy, parse_retry_after
from audit.service.transport import Transport, json_body, unwrap
from audit.spec import API_VERSION_PATH

log = logging.getLogger(__name__)  # scrubbed: audit.service.transport installs the filter

__all__ = [
    "MAX_DATE_SKEW_S",
    "PROBABLY_ROTATED",
    "REDACTED",
    "IssuedSecret",
    "Listing",
    "RetryPolicy",
    "ServiceClient",
    "check_delivery_url",
    "check_events",
    "parse_retry_after",
    "redact_secrets",
]


@dataclass(frozen=True)
class IssuedSecret:
    """A signing secret the service just issued (creation or rotation).

    The value is hidden from ``repr``; save it (e.g. with
    :func:`audit.ingest.secrets_file.add_secret`) because the service never shows it again.

    Attributes
    ----------
    subscription_id : str
    issued_at : datetime
        When the service answered (UTC), the secret's ``valid_from``: the answer's ``Date``
        header (whole seconds, the service's clock), else the client's clock when the answer
        arrived (also when the ``Date`` cannot be read or lies more than
        :data:`MAX_DATE_SKEW_S` from the client's clock).
    secret : str
    subscription : dict or None
        The created subscription's fields without the secret (None for a rotation).
    message : str or None
        The service's note that came with the secret.
    """

    subscription_id: str
    issued_at: datetime
    secret: str = field(repr=False)
    subscription: dict[str, Any] | None = None
    message: str | None = None


@dataclass(frozen=True)
class Listing:
    """A ``GET /webhooks`` answer as received, with the time it arrived.

    ``body`` may hold secret values if the service exposes them: use :func:`redact_secrets`
    before showing or storing it.
    """

    body: Any = field(repr=False)
    received_at: datetime

    @property
    def items(self) -> list[dict[str, Any]]:
        """The listed subscriptions (see :func:`audit.analysis.subscriptions.unwrap_listing`)."""
        return unwrap_listing(self.body)


class ServiceClient(Transport):
    """Synchronous client for the service's webhook and attachment operations.

    Parameters
    ----------
    base_url
        The service address without ``/v1``. HTTPS, or HTTP to a loopback host (the local
        fake); no credentials, query or fragment.
    api_key
        The client's API key; sent in ``x-api-key`` and nowhere else.
    transport
        An :mod:`httpx` transport, e.g. ``httpx.MockTransport(handler)`` or
        :meth:`audit.service.fake.FakeService.transport` in tests.
    timeout
        Seconds (or an :class:`httpx.Timeout`) for connect, read, write and pool.
    deadline_s
        Overall limit for one request with all its retries, waits and reads (default 120 s):
        a server that trickles its answer cannot hold a call longer than this. Set
        :attr:`deadline_at` (a :func:`time.monotonic` value) to bound several calls together,
        as the CLI does for a whole command.
    max_response_bytes
        Largest response body accepted, counted after decompression (default 10 MB,
        :data:`DEFAULT_MAX_RESPONSE_BYTES`); a larger one is abandoned with a ServiceError.
    retry
        The :class:`RetryPolicy`; the default makes at most 4 attempts.
    sleep, rng, clock
        Injected for tests: the wait between attempts, the jitter source and the UTC clock that
        stamps responses (and resolves ``Retry-After`` dates).

    Examples
    --------
    Against the service it is ``ServiceClient(base_url="https://api.example", api_key=key)``;
    here, against the local fake (:class:`audit.service.fake.FakeService`), in-process:

    >>> from audit.service.fake import FakeService
    >>> fake = FakeService(api_keys={"demo-key": "client_1"})
    >>> client = ServiceClient(
    ...     base_url="http://127.0.0.1", api_key="demo-key", transport=fake.transport()
    ... )
    >>> client
    ServiceClient(base_url='http://127.0.0.1', max_attempts=4)
    >>> issued = client.create_webhook("https://hooks.example/a", ["incident.created"])
    >>> issued.subscription_id, issued.secret == fake.current_secret("wh_1")
    ('wh_1', True)
    >>> [(s["id"], s["url"], s["active"]) for s in client.list_webhooks()]
    [('wh_1', 'https://hooks.example/a', True)]
    >>> client.update_webhook("wh_1", active=False)["active"]
    False
    >>> client.test_webhook("wh_1")["event"]
    'webhook.test'
    >>> client.rotate_secret("wh_1").secret == fake.current_secret("wh_1")
    True
    >>> client.upload_attachments("inc_1", [("note.txt", b"seen at 09:30")])
    {'incidentId': 'inc_1', 'attachments': [{'filename': 'note.txt', 'size': 13}]}
    >>> client.delete_webhook("wh_1")
    {'id': 'wh_1', 'deleted': True}
    >>> client.close()
    """

    def __repr__(self) -> str:
        return f"ServiceClient(base_url={self.base_url!r}, max_attempts={self.retry.max_attempts})"

    # -- webhook operations (spec 4.1-4.6)

    def fetch_listing(self) -> Listing:
        """``GET /webhooks``, the body kept as received (for snapshots).

        Raises ServiceError when the body is not a recognisable listing.
        """
        response, received_at = self._request("GET", "/webhooks")
        body = json_body(response, f"GET {API_VERSION_PATH}/webhooks")
        try:
            unwrap_listing(body)
        except ValueError as e:
            raise ServiceError(
                f"GET {API_VERSION_PATH}/webhooks: unrecognised listing: {e}",
                status=response.status_code,
            ) from None
        return Listing(body=body, received_at=received_at)

    def list_webhooks(self) -> list[dict[str, Any]]:
        """The client's subscriptions (``GET /webhooks``), each a dict as the service sent it.

        See the example of :class:`ServiceClient`.
        """
        return self.fetch_listing().items

    def create_webhook(
        self, url: str, events: Sequence[str], description: str | None = None
    ) -> IssuedSecret:
        """Register a subscription (``POST /webhooks``) and return its secret.

        Before sending: ``url`` must be HTTPS, ``events`` known event types, and the client must
        have fewer than 5 subscriptions (one ``GET /webhooks`` counts them).

        Raises
        ------
        InputError
            Bad URL, events or description.
        LimitError
            The client already has 5 subscriptions.

        Save the secret at once, e.g. with :func:`audit.ingest.secrets_file.add_secret`
        (``add_secret(path, issued.subscription_id, issued.secret, issued.issued_at)``): the
        service never shows it again. See the example of :class:`ServiceClient`.
        """
        payload: dict[str, Any] = {"url": check_delivery_url(url), "events": check_events(events)}
        if description is not None:
            payload["description"] = check_description(description)
        existing = self.list_webhooks()
        check_subscription_room(len(existing))
        response, received_at = self._request("POST", "/webhooks", json=payload, repeatable=False)
        data = unwrap(json_body(response, f"POST {API_VERSION_PATH}/webhooks"))
        if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
            raise ServiceError(
                "POST /v1/webhooks: the creation response has no subscription id; list the "
                "subscriptions to see whether one was created",
                status=response.status_code,
            )
        secret = data.get("secret")
        if not _plausible_secret(secret):
            raise ServiceError(
                f"POST /v1/webhooks: subscription {data['id']} was created but the response "
                f"holds {_no_secret(secret)}; rotate its secret to obtain one",
                status=response.status_code,
            )
        note = data.get("message")
        return IssuedSecret(
            subscription_id=data["id"],
            issued_at=_answered_at(response, received_at),
            secret=secret,
            subscription={k: v for k, v in data.items() if k != "secret"},
            message=note if isinstance(note, str) else None,
        )

    def update_webhook(
        self,
        subscription_id: str,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        active: bool | None = None,
        description: str | None = None,
    ) -> Any:
        """Change a subscription (``PATCH /webhooks/:id``); returns the unwrapped answer.

        Only the fields given are sent; at least one is required. See the example of
        :class:`ServiceClient`.
        """
        payload: dict[str, Any] = {}
        if url is not None:
            payload["url"] = check_delivery_url(url)
        if events is not None:
            payload["events"] = check_events(events)
        if active is not None:
            if not isinstance(active, bool):
                raise InputError("active must be true or false")
            payload["active"] = active
        if description is not None:
            payload["description"] = check_description(description)
        if not payload:
            raise InputError("nothing to update: give a URL, events, active or a description")
        path = f"/webhooks/{path_segment(subscription_id)}"
        response, _ = self._request("PATCH", path, json=payload)
        return unwrap(json_body(response, f"PATCH {API_VERSION_PATH}{path}", allow_empty=True))

    def delete_webhook(self, subscription_id: str) -> Any:
        """Delete a subscription (``DELETE /webhooks/:id``); returns the unwrapped answer."""
        path = f"/webhooks/{path_segment(subscription_id)}"
        response, _ = self._request("DELETE", path)
        return unwrap(json_body(response, f"DELETE {API_VERSION_PATH}{path}", allow_empty=True))

    def test_webhook(self, subscription_id: str) -> Any:
        """Ask for a ``webhook.test`` delivery (``POST /webhooks/:id/test``)."""
        path = f"/webhooks/{path_segment(subscription_id)}/test"
        response, _ = self._request("POST", path)
        return unwrap(json_body(response, f"POST {API_VERSION_PATH}{path}", allow_empty=True))

    def rotate_secret(self, subscription_id: str) -> IssuedSecret:
        """Rotate the signing secret (``POST /webhooks/:id/rotate-secret``).

        The previous secret stops working at once (spec 4.6): save the new one before anything
        else. A retry after a lost answer issues another secret, and only the newest one
        counts. When no attempt was answered, the error says the previous secret may already
        be invalid; when a 2xx came whose body cannot be read (or holds no usable secret), it
        says the service has probably rotated, so the previous secret no longer works, and to
        rotate again.
        """
        sub = path_segment(subscription_id)
        path = f"/webhooks/{sub}/rotate-secret"
        where = f"POST {API_VERSION_PATH}{path}"
        try:
            response, received_at = self._request("POST", path)
        except RetryableError as e:  # an attempt whose answer was lost may have rotated
            raise RetryableError(
                f"{e}; the service may have rotated the secret, so the previous one may "
                "already be invalid: rotate again once the service answers",
                status=e.status,
                server_message=e.server_message,
            ) from None
        except TerminalError:
            raise  # the service refused: nothing rotated
        except ServiceError as e:
            if e.status is not None and 200 <= e.status < 300:  # answered, body unreadable
                raise ServiceError(f"{e}{PROBABLY_ROTATED}", status=e.status) from None
            if e.status is None:  # no answer at all (the deadline, a broken connection)
                raise ServiceError(
                    f"{e}; the service may have rotated the secret, so the previous one may "
                    "already be invalid: rotate again once the service answers"
                ) from None
            raise
        try:
            data = unwrap(json_body(response, where))
        except ServiceError as e:
            raise ServiceError(f"{e}{PROBABLY_ROTATED}", status=e.status) from None
        secret = data.get("secret") if isinstance(data, dict) else None
        if not _plausible_secret(secret):
            raise ServiceError(
                f"{where}: the rotation response holds {_no_secret(secret)}{PROBABLY_ROTATED}",
                status=response.status_code,
            )
        note = data.get("message")
        return IssuedSecret(
            subscription_id=subscription_id,
            issued_at=_answered_at(response, received_at),
            secret=secret,
            message=note if isinstance(note, str) else None,
        )

    # -- attachments (spec 4.7, 8)

    def upload_attachments(
        self,
        incident_id: str,
        files: Sequence[FileSpec],
        *,
        fields: Mapping[str, str] | None = None,
    ) -> Any:
        """Upload files to an incident (``POST /incident/{id}/attach``, multipart).

        Each file is a path, ``(filename, bytes)`` or ``(filename, bytes, content_type)``; every
        file part is named ``attachments``. ``fields`` are extra form fields (not published).

        Refused before sending (LimitError) when there are more than 12 files, or when the
        multipart body would reach 10485760 bytes (a file size sum that already does is refused
        before any file is read). See the example of :class:`ServiceClient`.
        """
        path = f"/incident/{path_segment(incident_id, what='incident id')}/attach"
        check_attachment_count(files)
        form = {str(k): str(v) for k, v in (fields or {}).items()}
        check_attachment_sizes(files)
        parts = [("attachments", _file_part(f)) for f in files]
        probe = self._http.build_request("POST", path, files=parts, data=form)
        check_request_size(int(probe.headers.get("content-length", "0")))
        response, _ = self._request("POST", path, files=parts, data=form, repeatable=False)
        return unwrap(json_body(response, f"POST {API_VERSION_PATH}{path}", allow_empty=True))


#: The end of the error for a rotation answered 2xx whose secret cannot be had.
PROBABLY_ROTATED = (
    ": the service has probably rotated the secret, so the previous one no longer works; "
    "rotate again to get a new one"
)

#: A ``Date`` header further than this (seconds) from the client's clock is not used for a
#: secret's ``valid_from``: the client's clock is (a hostile or broken ``Date`` of year 9999
#: would leave the secret never valid).
MAX_DATE_SKEW_S = 600


def _answered_at(response: httpx.Response, received_at: datetime) -> datetime:
    """When the service answered: its ``Date`` header (RFC 9110, whole seconds, UTC), else
    ``received_at`` (the client's clock), also for a date unreadable or too far from it."""
    raw = response.headers.get("date")
    if not raw:
        return received_at
    try:
        answered = email.utils.parsedate_to_datetime(raw)
        if answered.tzinfo is None:  # "-0000": UTC, as HTTP dates always are
            answered = answered.replace(tzinfo=UTC)
        answered = answered.astimezone(UTC)
        skew = abs((answered - received_at).total_seconds())
    except (TypeError, ValueError, IndexError, OverflowError):
        log.warning("the service's Date header is not a date; valid_from is this machine's time")
        return received_at
    if skew > MAX_DATE_SKEW_S:
        log.warning(
            "the service's Date header is %.0f s from this machine's clock (more than %d s); "
            "valid_from is this machine's time",
            skew,
            MAX_DATE_SKEW_S,
        )
        return received_at
    return answered


# -- request bodies


def _file_part(f: FileSpec) -> tuple[str, bytes, str]:
    if isinstance(f, tuple):
        name, content = f[0], f[1]
        ctype = f[2] if len(f) > 2 else None
    else:
        p = Path(f)
        name, ctype = p.name, None
        try:
            content = p.read_bytes()
        except OSError as e:
            raise InputError(f"{p}: cannot read ({e.strerror or type(e).__name__})") from None
    if not isinstance(content, bytes):
        raise InputError(f"{name}: file content must be bytes")
    ctype = ctype or mimetypes.guess_type(name)[0] or "application/octet-stream"
    return (name, content, ctype)


#: The longest secret saved from an answer: a secrets file holds every secret of a client,
#: and its reader refuses files over 16 MiB (an answer of 9 MB "secrets" made it unreadable).
MAX_SECRET_CHARS = 1024


def _plausible_secret(secret: object) -> TypeGuard[str]:
    """A non-empty string of printable ASCII without spaces, at most :data:`MAX_SECRET_CHARS`."""
    return (
        isinstance(secret, str)
        and 0 < len(secret) <= MAX_SECRET_CHARS
        and secret.isascii()
        and secret.isprintable()
        and " " not in secret
    )


def _no_secret(secret: object) -> str:
    """What an answer holds instead of a secret (never the value)."""
    if not isinstance(secret, str) or not secret:
        return "no secret"
    if len(secret) > MAX_SECRET_CHARS:
        return f"a secret of {len(secret):,} characters (at most {MAX_SECRET_CHARS:,}), not saved"
    return "a secret with characters other than printable ASCII, not saved"
