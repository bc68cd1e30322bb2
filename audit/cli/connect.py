"""How a service command connects: the shared options, the API key from the environment, one
deadline for the whole command, and the client factory.

The commands build their client with :data:`CLIENT_FACTORY` (``ServiceClient``), unless the
click context object holds another under ``"client_factory"``:
``main(argv, obj={"client_factory": f})`` lets a test check what reaches the library without a
server (papermill's style), or hand the commands a client over ``httpx.MockTransport``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import click

from audit.errors import InputError
from audit.redaction import register_sensitive
from audit.service.client import RetryPolicy, ServiceClient

__all__ = ["CLIENT_FACTORY", "ClientFactory", "client_factory", "service_client", "service_options"]


def service_options(f: Any) -> Any:
    """Add ``--base-url``, ``--api-key-env``, ``--timeout`` and ``--max-attempts`` to a command."""
    options = [
        click.option(
            "--base-url",
            envvar="AUDIT_BASE_URL",
            metavar="URL",
            help="Service address without /v1 [env: AUDIT_BASE_URL].",
        ),
        click.option(
            "--api-key-env",
            default="AUDIT_API_KEY",
            show_default=True,
            metavar="NAME",
            help="Environment variable that holds the API key.",
        ),
        click.option(
            "--timeout",
            type=click.FloatRange(min=0, min_open=True, max=3600),
            callback=_a_number,  # click's range lets NaN through
            default=10.0,
            show_default=True,
            help="Seconds per connect/read/write.",
        ),
        click.option(
            "--max-attempts",
            type=click.IntRange(1, 10),
            default=4,
            show_default=True,
            help="Attempts per request; 429, 5xx and connection failures are retried.",
        ),
    ]
    for option in reversed(options):
        f = option(f)
    return f


#: Builds a command's client from keyword arguments (those of :class:`ServiceClient`).
ClientFactory = Callable[..., ServiceClient]
#: What the commands build their client with, unless the click context object names another.
CLIENT_FACTORY: ClientFactory = ServiceClient


def client_factory() -> ClientFactory:
    """The factory of the running command: ``obj["client_factory"]`` if given, else
    :data:`CLIENT_FACTORY`."""
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict) and obj.get("client_factory") is not None:
        return obj["client_factory"]
    return CLIENT_FACTORY


def service_client(
    base_url: str | None, api_key_env: str, timeout: float, max_attempts: int
) -> ServiceClient:
    """The command's client, from :func:`client_factory`: the key read from ``api_key_env``,
    limits from ``AUDIT_DEADLINE_S`` and ``AUDIT_MAX_RESPONSE_BYTES``, one deadline for all."""
    if not base_url:
        raise InputError("no base URL: give --base-url or set AUDIT_BASE_URL")
    key = os.environ.get(api_key_env)
    if not key:
        raise InputError(
            f"environment variable {api_key_env} is not set (it must hold the API key)"
        )
    register_sensitive(key)
    deadline_s = _env_number("AUDIT_DEADLINE_S", 120.0, float)
    client = client_factory()(
        base_url=base_url,
        api_key=key,
        timeout=timeout,
        deadline_s=deadline_s,
        max_response_bytes=_env_number("AUDIT_MAX_RESPONSE_BYTES", 10_000_000, int),
        retry=RetryPolicy(max_attempts=max_attempts),
    )
    client.deadline_at = time.monotonic() + deadline_s  # one deadline for the whole command
    return client


def _a_number(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    if value != value:
        raise click.BadParameter("not a number")
    return value


def _env_number(name: str, default: float, kind: type) -> Any:
    """A positive number from the environment (limits overridable without new options)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise InputError(f"environment variable {name} is not a number") from None
    if not value > 0 or value == float("inf"):  # NaN and inf too (inf: no deadline at all)
        raise InputError(f"environment variable {name} must be a positive finite number")
    return value
