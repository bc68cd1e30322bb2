"""The HTTP side of :class:`~audit.service.client.ServiceClient`: one request with the spec's
retry rules, a deadline, a response size limit, and errors that never quote the API key.

:class:`Transport` holds the connection and the rules; the client's operations (webhooks,
attachments) call :meth:`Transport._request` and read answers with :func:`json_body` and
:func:`unwrap`. The retry rules are in :mod:`audit.service.retry`.
"""

from __future__ import annotations

import json
import logging
import random
import time
import zlib
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Self

import httpx

from audit.analysis.subscriptions import RepeatedKey, unique_keys
from audit.errors import (
    InputError,
    PayloadTooLarge,
    RetryableError,
    ServiceError,
    TerminalError,
)
from audit.redaction import (
    HTTP_LOGGERS,
    for_terminal,
    install_log_filter,
    register_sensitive,
    scrub,
)
from audit.service.exchange import (
    ACCEPT_ENCODING,
    BodyTooLarge,
    UnsupportedEncoding,
    deadline_scope,
    install_deadline,
    read_body,
)
from audit.service.request_checks import (
    check_api_key,
    check_base_url,
    check_deadline,
    check_max_response_bytes,
)
from audit.service.retry import (
    MAYBE_SENT_ERRORS,
    NOT_SENT_ERRORS,
    RetryPolicy,
    is_retryable_status,
    parse_retry_after,
)
from audit.spec import API_VERSION_PATH, TERMINAL_STATUSES
from audit.text import NOT_TEXT, holds_lone_surrogate
from audit.version import package_version

__all__ = ["Transport", "json_body", "unwrap", "user_agent"]

#: Records of the client (``audit.service.client``) and of httpx are scrubbed of secrets.
LOGGER = "audit.service.client"
log = logging.getLogger(LOGGER)
install_log_filter([LOGGER, *HTTP_LOGGERS])


def user_agent() -> str:
    """``audit/<installed version>`` (:func:`audit.version.package_version`)."""
    return f"audit/{package_version()}"


class Transport:
    """The connection, the API key and the retry rules (the parameters of ``ServiceClient``)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        transport: httpx.BaseTransport | None = None,
        timeout: float | httpx.Timeout = 10.0,
        deadline_s: float = 120.0,
        max_response_bytes: int = 10_000_000,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: random.Random | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.base_url = check_base_url(base_url)
        self._api_key = check_api_key(api_key)
        register_sensitive(api_key)
        self.deadline_s = check_deadline(deadline_s)
        #: Optional absolute end (``time.monotonic()``) for every request of this client.
        self.deadline_at: float | None = None
        self.max_response_bytes = check_max_response_bytes(max_response_bytes)
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._clock = clock or (lambda: datetime.now(UTC))
        self._http = httpx.Client(
            base_url=self.base_url + API_VERSION_PATH,
            transport=transport,
            timeout=timeout,
            follow_redirects=False,
            # A proxy from the environment (HTTP_PROXY, ALL_PROXY) would get a plain-HTTP
            # request, API key included, in clear: only HTTPS (tunnelled) may go through one.
            trust_env=httpx.URL(self.base_url).scheme == "https",
            headers={
                "accept": "application/json",
                "accept-encoding": ACCEPT_ENCODING,
                "user-agent": user_agent(),
            },
        )
        install_deadline(self._http)  # the deadline also cuts a trickle of header lines

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        files: Any = None,
        data: Any = None,
        repeatable: bool = True,
    ) -> tuple[httpx.Response, datetime]:
        """Send with the retry rules; return the 2xx response and the time it arrived."""
        if holds_lone_surrogate([path, json, data]):  # an argument in another encoding than UTF-8
            raise InputError(f"{method} {API_VERSION_PATH}: a value given is not UTF-8 text")
        where = f"{method} {API_VERSION_PATH}{path}"
        policy = self.retry
        deadline = time.monotonic() + self.deadline_s
        if self.deadline_at is not None:
            deadline = min(deadline, self.deadline_at)
        for attempt in range(1, policy.max_attempts + 1):
            request = self._http.build_request(
                method,
                path,
                json=json,
                files=files,
                data=data,
                headers={"x-api-key": self._api_key},
            )
            try:
                response = self._send(request, where, deadline, repeatable)
            except httpx.TransportError as e:
                failure = f"{type(e).__name__}: {self._scrub(str(e)) or 'connection failed'}"
                if isinstance(e, MAYBE_SENT_ERRORS) and not repeatable:
                    raise ServiceError(f"{where}: {failure}{_NOT_REPEATED}") from None
                if not isinstance(e, NOT_SENT_ERRORS + MAYBE_SENT_ERRORS):
                    raise ServiceError(f"{where}: {failure}") from None
                status, server_message, wait = None, None, None
            else:
                received_at = self._clock()
                status = response.status_code
                log.debug("%s -> %d (attempt %d)", where, status, attempt)
                if 200 <= status < 300:
                    return response, received_at
                server_message = self._server_message(response)
                if status not in TERMINAL_STATUSES and not is_retryable_status(status):
                    raise ServiceError(
                        f"{where}: unexpected {_describe(response, server_message)}",
                        status=status,
                        server_message=server_message,
                    )
                if status in TERMINAL_STATUSES:
                    gone = attempt > 1 and method == "DELETE"  # an unanswered attempt deleted?
                    raise self._terminal(where, response, server_message, retried_delete=gone)
                failure = _describe(response, server_message)
                if status != 429 and not repeatable:  # a 5xx may come after the work was done
                    raise ServiceError(
                        f"{where}: {failure}{_NOT_REPEATED}",
                        status=status,
                        server_message=server_message,
                    )
                wait = parse_retry_after(response.headers.get("retry-after"), received_at)
                if wait is not None and wait > policy.max_retry_after_s:
                    asked = f"{wait:.0f} s" if wait < 1e12 else "an absurdly long time"
                    raise RetryableError(
                        f"{where}: {failure}; the service asked to wait {asked} "
                        f"(Retry-After), longer than the {policy.max_retry_after_s:.0f} s this "
                        "client waits",
                        status=status,
                        server_message=server_message,
                    )
            if attempt == policy.max_attempts:
                raise RetryableError(
                    f"{where}: {failure}, after {attempt} attempt{'s' if attempt > 1 else ''}",
                    status=status,
                    server_message=server_message,
                )
            if wait is None or wait < policy.backoff_cap_s(attempt):
                # the jittered backoff is a lower bound: "Retry-After: 0" is no license to hammer
                wait = max(wait or 0.0, policy.backoff_s(attempt, self._rng))
            if time.monotonic() + wait > deadline:
                raise RetryableError(
                    f"{where}: {failure}; no time left for another attempt within the "
                    f"{self.deadline_s:.0f} s deadline",
                    status=status,
                    server_message=server_message,
                )
            log.warning(  # server text: no escape sequence reaches the terminal
                "%s: %s; retrying in %.2f s (attempt %d of %d)",
                where,
                for_terminal(failure),
                wait,
                attempt + 1,
                policy.max_attempts,
            )
            self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(
        self, request: httpx.Request, where: str, deadline: float, repeatable: bool = True
    ) -> httpx.Response:
        """Send one request and read its body within the size limit and the deadline.

        The deadline covers the whole exchange: connecting, sending, the status line and
        headers, and the body (:func:`audit.service.exchange.install_deadline`).
        """
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceError(f"{where}: the {self.deadline_s:.0f} s deadline passed")
        timeout = self._http.timeout
        request.extensions["timeout"] = httpx.Timeout(
            connect=_min(timeout.connect, left),
            read=_min(timeout.read, left),
            write=_min(timeout.write, left),
            pool=_min(timeout.pool, left),
        ).as_dict()
        status = None
        try:
            with deadline_scope(deadline):
                response = self._http.send(request, stream=True)
                status = response.status_code
                try:
                    read_body(response, self.max_response_bytes, deadline)
                finally:
                    response.close()
        except httpx.TimeoutException:
            if time.monotonic() < deadline - 0.01:
                raise  # the per-read timeout, before the deadline: the retry rules decide
            maybe = "" if repeatable else _NOT_REPEATED
            raise ServiceError(
                f"{where}: the answer did not arrive within the {self.deadline_s:.0f} s "
                f"deadline{maybe}",
                status=status,
            ) from None
        except BodyTooLarge:
            raise ServiceError(
                f"{where}: response body larger than {self.max_response_bytes} bytes "
                "(after decompression); abandoned",
                status=status,
            ) from None
        except (UnsupportedEncoding, zlib.error) as e:
            what = str(e) if isinstance(e, UnsupportedEncoding) else "a corrupt compressed body"
            raise ServiceError(
                f"{where}: {_status_text(response)} with {what}", status=status
            ) from None
        return response

    def _scrub(self, text: str) -> str:
        return scrub(text, [self._api_key])

    def _server_message(self, response: httpx.Response) -> str | None:
        """The error body's message: scrubbed of the key and secrets first, then shortened."""
        try:
            body = response.json()
        except (ValueError, UnicodeDecodeError, RecursionError):
            text = self._scrub(" ".join(response.content.decode("utf-8", "replace").split()))
            return text[:200] or None
        if isinstance(body, dict):
            for key in ("message", "error"):
                v = body.get(key)
                if isinstance(v, str) and v:
                    return self._scrub(" ".join(v.split()))[:500]
                if isinstance(v, dict) and isinstance(v.get("message"), str):
                    return self._scrub(" ".join(v["message"].split()))[:500]
        return None

    def _terminal(
        self,
        where: str,
        response: httpx.Response,
        server_message: str | None,
        retried_delete: bool = False,
    ) -> TerminalError:
        status = response.status_code
        if status == 413:
            error = None
            try:
                body = response.json()
            except (ValueError, UnicodeDecodeError):
                body = None
            if isinstance(body, dict) and isinstance(body.get("error"), str):
                error = self._scrub(body["error"])
            return PayloadTooLarge(
                f"{where}: 413 {error or _reason(response) or 'Request Entity Too Large'}"
                f"{_suffix(server_message)}",
                status=status,
                server_message=server_message,
            )
        gone = status == 404 and retried_delete  # the lost answer's attempt most likely did it
        note = (
            ", on a retry: an attempt that got no answer most likely deleted it; list the "
            "subscriptions to confirm"
        )
        return TerminalError(
            f"{where}: {_describe(response, server_message)}{note if gone else ''}",
            status=status,
            server_message=server_message,
        )


# -- responses


def unwrap(body: Any) -> Any:
    """``data`` of a ``{data, message}`` answer; other shapes (not published) as they are."""
    if isinstance(body, dict) and "data" in body:
        return body["data"]
    return body


#: The end of the error for a request that is not repeated (it could create something twice).
_NOT_REPEATED = (
    "; not repeated because the request may have reached the service: list before trying again"
)


def _min(value: float | None, left: float) -> float:
    return left if value is None else min(value, left)


def json_body(response: httpx.Response, where: str, *, allow_empty: bool = False) -> Any:
    if not response.content.strip():
        if allow_empty:
            return None
        raise ServiceError(
            f"{where}: {_status_text(response)} with an empty body", status=response.status_code
        )
    try:  # NaN, Infinity and 1e400 are not JSON numbers: a snapshot would not be JSON either
        body = json.loads(
            response.content,
            parse_constant=_not_json,
            parse_float=_finite,
            object_pairs_hook=unique_keys,  # a key named twice is refused, never read last-wins
        )
    except RepeatedKey as e:
        raise ServiceError(
            f"{where}: {_status_text(response)} with a JSON body that {e}",
            status=response.status_code,
        ) from None
    except (ValueError, UnicodeDecodeError):
        raise ServiceError(
            f"{where}: {_status_text(response)} with a body that is not JSON",
            status=response.status_code,
        ) from None
    except RecursionError:
        raise ServiceError(
            f"{where}: {_status_text(response)} with a JSON body nested too deeply to read",
            status=response.status_code,
        ) from None
    if holds_lone_surrogate(body):
        raise ServiceError(
            f"{where}: {_status_text(response)} with a body that is not text ({NOT_TEXT})",
            status=response.status_code,
        )
    return body


def _not_json(text: str) -> float:
    raise ValueError(f"{text} is not a JSON number")


def _finite(text: str) -> float:
    if (value := float(text)) in (float("inf"), float("-inf")):
        raise ValueError(f"{text} is out of range")
    return value


def _reason(response: httpx.Response) -> str:
    """The reason phrase, with every known secret and the API key cut out (servers echo)."""
    return scrub(" ".join(response.reason_phrase.split()))[:200]


def _status_text(response: httpx.Response) -> str:
    reason = _reason(response)
    return f"{response.status_code} {reason}" if reason else str(response.status_code)


def _describe(response: httpx.Response, server_message: str | None) -> str:
    """``"503 Service Unavailable: <message>"``, without a message that repeats the reason."""
    same = server_message and server_message.lower() == _reason(response).lower()
    return _status_text(response) + ("" if same else _suffix(server_message))


def _suffix(server_message: str | None) -> str:
    return f": {server_message}" if server_message else ""
