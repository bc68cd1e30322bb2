"""Send the conformance checks to a receiver and judge its answers (``audit probe``).

One request per check, no retries, no redirects followed, each built just before it is sent so
its timestamp is fresh. A check that expects acceptance passes on a 2xx within the delivery
timeout (5 s, spec 6); one that expects rejection passes on 401 (spec 5.2 rule 5);
``within_timeout`` passes when every answer came within the timeout. When no request reaches
the receiver at all (connection refused, DNS, TLS) :class:`~audit.errors.UnreachableError` is
raised instead of a result.

The receiver's certificate is verified against the CAs of ``ca_file`` (``audit probe --ca``)
when given, else those named by ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` when set, else certifi's
bundle (:func:`tls_verify`).
"""

from __future__ import annotations

import os
import ssl
import stat
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import NamedTuple

import httpx

from audit.errors import InputError, UnreachableError
from audit.ingest.secrets import read_secrets
from audit.receiver.probe_plan import (
    ACCEPT,
    Check,
    Prepared,
    ProbeContext,
    check_by_id,
    prepare,
    select_checks,
)
from audit.service.exchange import deadline_scope, install_deadline
from audit.service.request_checks import require_https_unless_loopback
from audit.spec import DEFAULT_HEADER_PREFIX, DELIVERY_TIMEOUT_S
from audit.version import package_version

__all__ = [
    "USER_AGENT",
    "CheckResult",
    "ProbeResult",
    "check_target",
    "plan",
    "run_probe",
    "shown_url",
    "tls_verify",
]

USER_AGENT = (
    f"audit-probe/{package_version()} (webhook receiver conformance probe; sends webhook.test "
    "events with test_ incident ids only)"
)


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check (the fields of ``probe.json``'s ``checks``).

    ``passed`` is None when the check was skipped; ``status`` is None when no answer came;
    ``ms`` is the time to the answer (or to giving up).
    """

    id: str
    passed: bool | None
    expected: str
    status: int | None
    ms: float | None
    detail: str
    event_id: str | None = None
    delivery_id: str | None = None


@dataclass(frozen=True)
class ProbeResult:
    """Everything one probe run found; no secret in it."""

    target: str
    subscription_id: str
    started_at: datetime
    finished_at: datetime
    timeout_s: float
    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        """True when no check failed (skipped checks do not fail)."""
        return all(c.passed is not False for c in self.checks)

    @property
    def exit_code(self) -> int:
        """0 when every check passed or was skipped, 1 when one failed."""
        return 0 if self.passed else 1

    def to_json(self) -> dict:
        """The content of ``probe.json``."""
        return {
            "target": self.target,
            "subscription_id": self.subscription_id,
            "started_at": self.started_at.isoformat(),
            "finished_at": self.finished_at.isoformat(),
            "user_agent": USER_AGENT,
            "timeout_s": self.timeout_s,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
        }


def check_target(url: object) -> str:
    """The receiver URL, if the probe may send to it; InputError otherwise.

    HTTPS, or HTTP to a loopback host (the API client's rule), with a host and no credentials.
    Takes any object: callers without type checking may pass None.

    >>> check_target("http://127.0.0.1:8000/hook")
    'http://127.0.0.1:8000/hook'
    """
    if not isinstance(url, str) or not url.strip():
        raise InputError("no receiver URL given")
    try:
        u = httpx.URL(url.strip())
    except (httpx.InvalidURL, ValueError):
        raise InputError(f"not a valid URL: {url!r}") from None
    if u.scheme not in ("https", "http") or not u.host:
        raise InputError(f"the receiver URL must be https://host/path: {url!r}")
    if u.userinfo:
        raise InputError("the receiver URL must not hold credentials")
    require_https_unless_loopback(u, "send signed requests")
    return url.strip()


def shown_url(url: str) -> str:
    """The URL as outputs show it: query values (often a token) replaced by ``REDACTED``, a
    query item without ``=`` (the token itself) and a fragment too.

    >>> shown_url("https://hooks.example/wh?token=s3cr3t&x=1")
    'https://hooks.example/wh?token=REDACTED&x=REDACTED'
    >>> shown_url("https://hooks.example/wh?s3cr3tTOKEN&x=1#also")
    'https://hooks.example/wh?REDACTED&x=REDACTED#REDACTED'
    >>> shown_url("http://127.0.0.1:8000/hook")
    'http://127.0.0.1:8000/hook'
    """
    u = httpx.URL(url)
    if not u.query and not u.fragment:
        return url
    items = u.query.split(b"&") if u.query else []
    query = b"&".join(
        i.split(b"=", 1)[0] + b"=REDACTED" if b"=" in i else b"REDACTED" for i in items if i
    )
    return str(u.copy_with(query=query or None, fragment="REDACTED" if u.fragment else None))


#: The variables OpenSSL reads for its default trust store, honoured when no ``--ca`` is given.
CA_ENV = ("SSL_CERT_FILE", "SSL_CERT_DIR")


def tls_verify(
    ca_file: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None
) -> ssl.SSLContext | bool:
    """What the probe verifies the receiver's certificate with (httpx's ``verify``).

    ``ca_file`` (a PEM bundle, ``--ca``): only its CAs are trusted. Without it,
    ``SSL_CERT_FILE`` (a PEM bundle) and ``SSL_CERT_DIR`` (a folder of hashed certificates,
    as ``openssl rehash`` makes) are honoured as OpenSSL does: the CAs they name replace the
    default ones. With none of them, True: certifi's bundle, httpx's default. (The probe's
    client ignores the environment otherwise, proxies included, so httpx would not read these
    variables itself.)

    Raises InputError (one line) when the file or folder named is missing, unreadable or
    holds no PEM certificate.

    >>> tls_verify(None, {})
    True
    >>> tls_verify("/no/ca.pem")
    Traceback (most recent call last):
    audit.errors.InputError: /no/ca.pem: cannot read the CA file (No such file or directory)
    """
    environ = os.environ if environ is None else environ
    if ca_file is not None:
        return _ca_context(os.fspath(ca_file), None, "the CA file")
    cafile, capath = (environ.get(name) or None for name in CA_ENV)
    if cafile is None and capath is None:
        return True
    if cafile is not None:
        what = "the CA file named by SSL_CERT_FILE"
        return _ca_context(cafile, capath, what)
    return _ca_context(None, capath, "SSL_CERT_DIR")


def _ca_context(cafile: str | None, capath: str | None, what: str) -> ssl.SSLContext:
    """A client context trusting ``cafile`` and/or ``capath``; InputError saying why not."""
    if capath is not None and not os.path.isdir(capath):
        raise InputError(f"{capath}: SSL_CERT_DIR is not a folder")
    if cafile is not None:
        try:
            mode = os.stat(cafile).st_mode
        except OSError as e:
            raise InputError(f"{cafile}: cannot read {what} ({e.strerror or e})") from None
        if not stat.S_ISREG(mode):  # a folder, or a FIFO that would hold the probe
            raise InputError(f"{cafile}: {what} is not a regular file")
    name = cafile or capath
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except ssl.SSLError:
        raise InputError(f"{name}: {what} holds no readable PEM certificate") from None
    except OSError as e:
        raise InputError(f"{name}: cannot read {what} ({e.strerror or e})") from None


def plan(
    secrets_path: str | os.PathLike,
    subscription_id: str,
    *,
    only: Iterable[str] | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    now: float | None = None,
) -> list[tuple[Check, str | None]]:
    """The checks a run would send, in order, each with the reason it would be skipped (or
    None); reads and checks the secrets file like a run, sends nothing (``--dry-run``)."""
    checks = select_checks(only)
    now = time.time() if now is None else now
    ctx = _context(secrets_path, subscription_id, now, header_prefix)
    out: list[tuple[Check, str | None]] = []
    for c in checks:
        skip = None
        if c.id == "old_secret_rejected" and ctx.previous is None:
            skip = "the subscription has no previous secret"
        out.append((c, skip))
    return out


def _context(
    secrets_path: str | os.PathLike, subscription_id: str, now: float, prefix: str
) -> ProbeContext:
    store = read_secrets(secrets_path)
    items = store.by_subscription.get(subscription_id)
    if not items:
        raise InputError(f"{secrets_path}: no secret for subscription {subscription_id!r}")
    t_ns = round(now * 1e9)
    at = next((i for i, s in enumerate(items) if s.current_at(t_ns)), None)
    if at is None:
        raise InputError(f"{secrets_path}: subscription {subscription_id!r} has no current secret")
    previous = items[at - 1].key if at > 0 else None
    return ProbeContext(secret=items[at].key, previous=previous, header_prefix=prefix)


class _Sent(NamedTuple):
    """What came of sending one check's request."""

    response: httpx.Response | None  # None when no usable answer came
    ms: float  # to the answer, or to giving up
    error: str | None  # why no answer came
    connected: bool  # False when the request never reached the receiver


def _send(client: httpx.Client, url: str, p: Prepared, timeout_s: float) -> _Sent:
    """Send ``p`` to ``url`` and wait at most ``timeout_s`` for the status and headers."""
    request = client.build_request("POST", url, headers=p.headers, content=p.body)
    started = time.perf_counter()
    try:
        # Status and headers are judged; the body is never read (a huge or endless body
        # must not fill memory or hold the probe). The whole exchange, headers trickled one
        # line at a time included, ends at the delivery timeout.
        with deadline_scope(time.monotonic() + timeout_s):
            response = client.send(request, stream=True)
            response.close()
    except httpx.TimeoutException as e:
        ms = (time.perf_counter() - started) * 1000
        connected = not isinstance(e, httpx.ConnectTimeout)
        return _Sent(None, ms, f"no answer within {timeout_s:g} s", connected)
    except httpx.ConnectError as e:
        ms = (time.perf_counter() - started) * 1000
        bad = _cause(e, ssl.SSLCertVerificationError)
        unknown_ca = isinstance(bad, ssl.SSLCertVerificationError) and bad.verify_code in _NO_ISSUER
        hint = "; a private CA: give --ca FILE or set SSL_CERT_FILE" if unknown_ca else ""
        return _Sent(None, ms, f"could not connect ({_one_line(e)}){hint}", False)
    except httpx.RequestError as e:  # closed mid-answer, bad HTTP, undecodable body
        ms = (time.perf_counter() - started) * 1000
        return _Sent(None, ms, f"no usable answer ({type(e).__name__}: {_one_line(e)})", True)
    ms = (time.perf_counter() - started) * 1000
    return _Sent(response, ms, None, True)


#: Checks whose outcome depends on the receiver's clock agreeing with the probe's.
_CLOCK_CHECKS = frozenset({"boundary_accepted", "stale_past_rejected", "stale_future_rejected"})


def clock_offset_s(response: httpx.Response, now: float) -> float | None:
    """The receiver's clock minus ``now`` from its ``Date`` header (1 s resolution), or None.

    >>> r = httpx.Response(204, headers={"Date": "Sun, 01 Nov 2026 12:00:10 GMT"})
    >>> clock_offset_s(r, datetime(2026, 11, 1, 12, 0, tzinfo=UTC).timestamp())
    10.0
    """
    value = response.headers.get("date")
    if not value:
        return None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp() - now


def _clock_note(check: Check, passed: bool, offset: float | None) -> str:
    """A hint when a time-window check failed and the receiver's clock is visibly off."""
    if passed or check.id not in _CLOCK_CHECKS or offset is None or abs(offset) < 2:
        return ""
    return f"; the receiver's Date header is {offset:+.0f} s off the probe's clock"


#: OpenSSL's verify codes for a chain that ends at a CA not trusted (unable to get the issuer
#: certificate, locally or at all; self-signed, alone or in the chain): a private CA's mark.
#: An expired certificate or a wrong host name gets no hint about --ca.
_NO_ISSUER = frozenset({2, 18, 19, 20})


def _cause(e: BaseException, kind: type[BaseException]) -> BaseException | None:
    """``e`` or the first exception in its chain of causes that is a ``kind``, else None."""
    seen: BaseException | None = e
    for _ in range(20):  # a chain is short; a cycle must not hang
        if seen is None or isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _one_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:200] or type(e).__name__


def _judge(
    check: Check, status: int | None, ms: float, error: str | None, limit_ms: float
) -> tuple[bool, str]:
    """(passed, detail) for one check's answer."""
    if status is None:
        return False, error or "no answer"
    if check.expected == ACCEPT:
        if not 200 <= status < 300:
            why = (
                " (a receiver must not answer 401 to a correct signature)" if status == 401 else ""
            )
            return False, f"answered {status}, expected 2xx{why}"
        if ms > limit_ms:
            return False, f"answered {status} after {ms:.0f} ms, over the {limit_ms:.0f} ms limit"
        return True, f"answered {status}"
    if status == 401:
        return True, "answered 401"
    if 200 <= status < 300:
        return False, f"accepted ({status}): the receiver must reject this request with 401"
    return False, f"answered {status}, expected 401"


def run_probe(
    url: str,
    secrets_path: str | os.PathLike,
    subscription_id: str,
    *,
    only: Iterable[str] | None = None,
    header_prefix: str = DEFAULT_HEADER_PREFIX,
    timeout_s: float = DELIVERY_TIMEOUT_S,
    ca_file: str | os.PathLike | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> ProbeResult:
    """Probe the receiver at ``url`` with every selected check and judge its answers.

    Parameters
    ----------
    url
        The receiver's webhook URL (HTTPS, or HTTP on a loopback host).
    secrets_path, subscription_id
        The secrets file and the subscription whose current (and previous) secret sign.
    only
        Check ids to run (default: all, in the order of :data:`CHECKS`).
    timeout_s
        The delivery timeout the answers are judged against (spec: 5 s).
    ca_file
        A PEM bundle of the CAs to trust (a private CA); without it ``SSL_CERT_FILE`` /
        ``SSL_CERT_DIR``, else certifi (:func:`tls_verify`).
    transport, clock
        Injected for tests.

    Raises
    ------
    InputError
        Bad URL, secrets file, CA file or check id.
    UnreachableError
        No request reached the receiver.

    Examples
    --------
    A receiver that accepts everything (here an in-process stand-in) fails the rejections:

    >>> import tempfile
    >>> from pathlib import Path
    >>> from audit.ingest.secrets_file import add_secret
    >>> accept_all = httpx.MockTransport(lambda request: httpx.Response(204))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     secrets = Path(folder, "secrets.json")
    ...     _ = add_secret(secrets, "wh_main", "whsec_demo", datetime(2025, 1, 1, tzinfo=UTC))
    ...     result = run_probe("http://127.0.0.1:8000/", secrets, "wh_main", transport=accept_all)
    >>> result.passed, result.exit_code
    (False, 1)
    >>> [c.id for c in result.checks if c.passed][:3]
    ['valid_accepted', 'uppercase_hex_accepted', 'unicode_body_accepted']
    >>> [c.id for c in result.checks if c.passed is False][:3]
    ['missing_signature_rejected', 'bad_prefix_rejected', 'short_hex_rejected']
    """
    target = check_target(url)
    checks = select_checks(only)
    started_at = datetime.fromtimestamp(clock(), UTC)
    ctx = _context(secrets_path, subscription_id, clock(), header_prefix)
    verify = tls_verify(ca_file)
    limit_ms = timeout_s * 1000
    results: list[CheckResult] = []
    answered: list[tuple[str, int | None, float]] = []
    reached = False
    unreachable: str | None = None
    with httpx.Client(
        timeout=httpx.Timeout(timeout_s),
        follow_redirects=False,
        headers={"User-Agent": USER_AGENT},
        transport=transport,
        verify=verify,
        trust_env=False,  # no proxy, no .netrc: the probe talks to the URL directly
    ) as client:
        install_deadline(client)
        for check in checks:
            p = prepare(check, ctx, int(clock()))
            if p.skip is not None:
                if check.id != "within_timeout":
                    results.append(CheckResult(check.id, None, check.expected, None, None, p.skip))
                continue
            response, ms, error, connected = _send(client, target, p, timeout_s)
            status = None if response is None else response.status_code
            reached = reached or connected
            if not connected and unreachable is None:
                unreachable = error
            passed, detail = _judge(check, status, ms, error, limit_ms)
            if response is not None:
                detail += _clock_note(check, passed, clock_offset_s(response, clock()))
            answered.append((check.id, status, ms))
            results.append(
                CheckResult(
                    check.id,
                    passed,
                    check.expected,
                    status,
                    round(ms, 1),
                    detail,
                    p.event_id,
                    p.delivery_id,
                )
            )
    if answered and not reached:
        raise UnreachableError(f"cannot reach the receiver at {shown_url(target)}: {unreachable}")
    if any(c.id == "within_timeout" for c in checks):
        results.append(_within_timeout(answered, limit_ms))
    return ProbeResult(
        target=shown_url(target),  # outputs never carry a token from the query
        subscription_id=subscription_id,
        started_at=started_at,
        finished_at=datetime.fromtimestamp(clock(), UTC),
        timeout_s=timeout_s,
        checks=results,
    )


def _within_timeout(answered: list[tuple[str, int | None, float]], limit_ms: float) -> CheckResult:
    check = check_by_id("within_timeout")
    if not answered:
        return CheckResult(check.id, None, check.expected, None, None, "no request was sent")
    slow = [(cid, ms) for cid, status, ms in answered if status is None or ms > limit_ms]
    worst = max(ms for _, _, ms in answered)
    if slow:
        names = ", ".join(f"{cid} ({ms:.0f} ms)" for cid, ms in slow)
        detail = (
            f"{len(slow)} of {len(answered)} answers missing or over {limit_ms:.0f} ms: {names}"
        )
        return CheckResult(check.id, False, check.expected, None, round(worst, 1), detail)
    detail = f"all {len(answered)} answers within {limit_ms:.0f} ms (slowest {worst:.0f} ms)"
    return CheckResult(check.id, True, check.expected, None, round(worst, 1), detail)
