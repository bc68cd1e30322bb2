"""CLI commands that talk to the service's API (``audit webhooks ...``, ``audit snapshot``).

Every command takes the base URL from ``--base-url`` or ``AUDIT_BASE_URL`` and the API key from
the environment variable named by ``--api-key-env`` (default ``AUDIT_API_KEY``). No option takes
a key or a secret value, and no command prints one: a new secret goes straight into the secrets
file given with ``--secrets``.

How a command connects (options, environment, the client factory): :mod:`audit.cli.connect`.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import click

from audit.analysis.subscriptions import secret_exposed
from audit.atomic import real_target
from audit.cli.connect import service_client, service_options
from audit.cli.params import NonEmptyPath
from audit.errors import AuditError, SecretsError, ServiceError
from audit.ingest.secrets_file import HeldSecrets, held_secrets
from audit.redaction import (
    REDACTED,
    for_terminal,
    json_for_terminal,
    redact_secrets,
    register_sensitive,
    scrub,
)
from audit.service.client import IssuedSecret
from audit.service.snapshots import write_snapshot
from audit.spec import EVENTS

__all__ = ["snapshot", "webhooks", "write_snapshot"]


def _check_secrets_target(path: Path, *, must_exist: bool) -> None:
    """Before the lock is taken: fail if the path is not the secrets file meant, or if the new
    secret could not be saved there afterwards.

    With ``must_exist`` (a rotation), a path that does not exist is refused before anything is
    created: a mistyped path would get the new secret while the real file keeps the one the
    rotation made invalid. Then every step of the save short of writing, in its order and for
    real: the link resolved (a loop refused), the folder created, a file created and removed in
    it. The lock file and the file's content are checked under the lock (:func:`_check_held`).
    """
    target = real_target(path)
    if target.exists() and not target.is_file():
        raise SecretsError(f"{path}: not a file")
    if must_exist and not target.exists():
        raise SecretsError(f"{path}: {_NO_SUCH_FILE}")
    try:  # what the save does first; then a file beside the target, as the atomic write makes
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise SecretsError(
            f"{path}: cannot write in {target.parent} ({e.strerror or type(e).__name__})"
        ) from None


#: Why a rotation refuses a --secrets path that does not exist.
_NO_SUCH_FILE = (
    "no such secrets file; check the path (the rotation makes the secret saved in the real "
    "file invalid), or give --new-secrets-file to start a new file"
)


def _check_held(
    held: HeldSecrets, path: Path, subscription_id: str | None, *, new_file: bool
) -> None:
    """Under the lock, before calling the service: the file as read is one the save can merge
    into, and, for a rotation of ``subscription_id``, it holds that subscription (unless
    ``new_file``) and a dry-run merge passes (its entries, their ``valid_from``, the rule
    against a clock that is behind)."""
    data = held.data
    if not all(isinstance(v, list) for v in data.values()):
        raise SecretsError(f"{path}: expected an object mapping subscription id to a list")
    register_sensitive(  # known secrets are cut from every message of this command
        e["secret"]
        for entries in data.values()
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("secret"), str)
    )
    if held.existed and not os.access(held.target, os.W_OK):
        raise SecretsError(f"{path}: secrets file is not writable")
    if subscription_id is None:
        return
    if not held.holds(subscription_id) and not new_file:
        if not held.existed:  # removed between the first check and the lock
            raise SecretsError(f"{path}: {_NO_SUCH_FILE}")
        named = ", ".join(sorted(data)[:5]) + (", ..." if len(data) > 5 else "")
        raise SecretsError(
            f"{path}: holds no secret of {subscription_id} (it holds {named or 'none'}); check "
            f"the path, or give --new-secrets-file to add {subscription_id} to it"
        )
    held.check_add(subscription_id, datetime.now(UTC))


def _save_secret(held: HeldSecrets, path: Path, issued: IssuedSecret, *, rotated: bool) -> str:
    """Add the issued secret as the subscription's newest and write the file (lock held)."""
    fresh = not held.holds(issued.subscription_id)
    try:
        valid_from = held.add(issued.subscription_id, issued.secret, issued.issued_at, newest=True)
        held.write()
    except Exception as e:  # the secret is already issued: never lose it to a traceback
        what = "the new secret" if rotated else "the secret"
        raise SecretsError(
            f"{path}: {what} of {issued.subscription_id} could not be saved ({_reason(e, path)}) "
            f"and is lost; fix the file, then run: "
            f"{_rotate_command(issued.subscription_id, path, new_file=fresh)}"
        ) from None
    return valid_from


def _rotate_command(subscription_id: str, path: Path, *, new_file: bool) -> str:
    """The command that rotates again into ``path``."""
    extra = " --new-secrets-file" if new_file else ""
    return (
        f"audit webhooks rotate-secret {shlex.quote(subscription_id)} "
        f"--secrets {shlex.quote(str(path))}{extra}"
    )


def _waiting(path: Path) -> Callable[[], None]:
    def say() -> None:
        click.echo(
            f"audit: waiting for another command that is writing {for_terminal(str(path))}",
            err=True,
        )

    return say


def _announce_new(held: HeldSecrets, path: Path) -> None:
    if not held.existed:
        click.echo(f"audit: created a new secrets file: {for_terminal(str(path))}", err=True)


def _reason(e: BaseException, path: Path) -> str:
    """Why a save failed, in a few words: the system's reason (``No space left on device``),
    else the toolkit's message without its file name, else the error's class."""
    cause: BaseException | None = e
    while cause is not None:
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
        cause = cause.__cause__ or cause.__context__
    if isinstance(e, AuditError) and str(e):
        text = str(e).splitlines()[0]
        for name in (str(path), str(real_target_or(path))):
            text = text.removeprefix(f"{name}: ")
        return text[:200]
    return type(e).__name__


def real_target_or(path: Path) -> Path:
    """``path`` with its links resolved, or ``path`` itself when they cannot be."""
    try:
        return real_target(path)
    except OSError:
        return path


def _warn(message: str) -> None:
    click.echo(f"audit: warning: {for_terminal(scrub(message))}", err=True)


def _show(text: object) -> str:
    """Service data for one terminal line: secrets cut, control characters escaped."""
    return for_terminal(scrub(str(text)))


def _warn_exposed(count: int) -> None:
    if count:
        _warn(
            f"the listing exposed {count} secret value{'s' if count > 1 else ''} (the service "
            f"should show a secret only once); shown as {REDACTED!r}"
        )


_secrets_option = click.option(
    "--secrets",
    "secrets_file",
    required=True,
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Secrets file that receives the new secret (written atomically, mode 0600).",
)
_events_option = click.option(
    "--event",
    "events",
    multiple=True,
    type=click.Choice(EVENTS),
    metavar="EVENT",
    help=f"Event type to subscribe to, repeat for several: {', '.join(EVENTS)}.",
)


@click.group()
def webhooks() -> None:
    """Manage webhook subscriptions (list, create, update, delete, test, rotate-secret)."""


@webhooks.command("list")
@service_options
@click.option("--json", "as_json", is_flag=True, help="Print the listed subscriptions as JSON.")
def list_cmd(
    base_url: str | None, api_key_env: str, timeout: float, max_attempts: int, as_json: bool
) -> None:
    """List the client's subscriptions (GET /webhooks); secrets are never shown."""
    with service_client(base_url, api_key_env, timeout, max_attempts) as client:
        items = client.list_webhooks()
        key = os.environ[api_key_env]
    shown, exposed = redact_secrets(items, also=[key])
    _warn_exposed(exposed)
    if as_json:
        click.echo(json_for_terminal(json.dumps(shown, indent=2, ensure_ascii=False)))
        return
    if not shown:
        click.echo("no subscriptions")
        return
    rows = [("ID", "ACTIVE", "LAST DELIVERY", "EVENTS", "URL")]
    for s in shown:
        active = s.get("active")
        events = s.get("events")
        events = events if isinstance(events, list) else [events] if events else []
        rows.append(
            (
                _show(s.get("id", "?")),
                "-" if active is None else _show(active).lower(),
                _show(s.get("lastDeliveryStatus") or "-"),
                _show(",".join(str(e) for e in events) or "-"),
                _show(s.get("url", "?")) + ("  [secret exposed]" if secret_exposed(s) else ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)) + "  " + r[4])


@webhooks.command("create")
@service_options
@click.option("--url", required=True, help="HTTPS URL that receives the deliveries.")
@_events_option
@click.option("--description", default=None, help="Optional label.")
@_secrets_option
def create_cmd(
    base_url: str | None,
    api_key_env: str,
    timeout: float,
    max_attempts: int,
    url: str,
    events: tuple[str, ...],
    description: str | None,
    secrets_file: Path,
) -> None:
    """Register a subscription (POST /webhooks) and save its secret into --secrets.

    Refused before sending when the URL is not HTTPS or the client already has 5 subscriptions.
    """
    if not events:
        raise click.UsageError("give at least one --event")
    _check_secrets_target(secrets_file, must_exist=False)
    with held_secrets(secrets_file, on_wait=_waiting(secrets_file)) as held:
        _check_held(held, secrets_file, None, new_file=True)
        with service_client(base_url, api_key_env, timeout, max_attempts) as client:
            issued = client.create_webhook(url, list(events), description)
        valid_from = _save_secret(held, secrets_file, issued, rotated=False)
    _announce_new(held, secrets_file)
    click.echo(_show(f"created {issued.subscription_id}: {url} ({', '.join(events)})"))
    click.echo(f"secret saved to {secrets_file} (valid_from {valid_from}); it is not shown again")


@webhooks.command("update")
@service_options
@click.argument("subscription_id")
@click.option("--url", default=None, help="New HTTPS delivery URL.")
@_events_option
@click.option("--active/--inactive", default=None, help="Enable or disable deliveries.")
@click.option("--description", default=None, help="New label.")
def update_cmd(
    base_url: str | None,
    api_key_env: str,
    timeout: float,
    max_attempts: int,
    subscription_id: str,
    url: str | None,
    events: tuple[str, ...],
    active: bool | None,
    description: str | None,
) -> None:
    """Change a subscription (PATCH /webhooks/:id); only the options given are sent."""
    with service_client(base_url, api_key_env, timeout, max_attempts) as client:
        client.update_webhook(
            subscription_id,
            url=url,
            events=list(events) or None,
            active=active,
            description=description,
        )
    changes = {
        "url": url,
        "events": list(events) or None,
        "description": description,
        "active": active,
    }
    said = ", ".join(f"{k}={json.dumps(v)}" for k, v in changes.items() if v is not None)
    click.echo(f"updated {subscription_id}: {said}")


@webhooks.command("delete")
@service_options
@click.argument("subscription_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete_cmd(
    base_url: str | None,
    api_key_env: str,
    timeout: float,
    max_attempts: int,
    subscription_id: str,
    yes: bool,
) -> None:
    """Delete a subscription (DELETE /webhooks/:id)."""
    if not yes:
        click.confirm(f"Delete subscription {subscription_id}?", abort=True)
    with service_client(base_url, api_key_env, timeout, max_attempts) as client:
        client.delete_webhook(subscription_id)
    click.echo(f"deleted {subscription_id}")


@webhooks.command("test")
@service_options
@click.argument("subscription_id")
def send_test_cmd(
    base_url: str | None, api_key_env: str, timeout: float, max_attempts: int, subscription_id: str
) -> None:
    """Ask the service to send a webhook.test delivery (POST /webhooks/:id/test).

    Success proves connectivity and signature checking for this subscription, not end-to-end
    delivery of incident events.
    """
    with service_client(base_url, api_key_env, timeout, max_attempts) as client:
        answer = client.test_webhook(subscription_id)
        key = os.environ[api_key_env]
    shown, exposed = redact_secrets(answer, also=[key])
    _warn_exposed(exposed)
    text = json_for_terminal(json.dumps(shown, ensure_ascii=False))
    detail = f": {text}" if shown not in (None, {}, []) else ""
    click.echo(f"test delivery requested for {subscription_id}{detail}")


@webhooks.command("rotate-secret")
@service_options
@click.argument("subscription_id")
@_secrets_option
@click.option(
    "--new-secrets-file",
    "new_file",
    is_flag=True,
    help="Accept a --secrets file that does not exist yet (it is created) or holds no secret of "
    "SUBSCRIPTION_ID yet. Without it such a path is refused before the service is called.",
)
def rotate_cmd(
    base_url: str | None,
    api_key_env: str,
    timeout: float,
    max_attempts: int,
    subscription_id: str,
    secrets_file: Path,
    new_file: bool,
) -> None:
    """Rotate the signing secret (POST /webhooks/:id/rotate-secret) and save the new one.

    The previous secret stops working at the service immediately; the new one is appended to
    --secrets, valid from the answer's time (its Date header, else this machine's clock). The
    file stays locked from before the request until the secret is saved, so rotations from
    this machine are saved in the service's order. --secrets must exist and hold the
    subscription, unless --new-secrets-file is given.
    """
    _check_secrets_target(secrets_file, must_exist=not new_file)
    with held_secrets(secrets_file, on_wait=_waiting(secrets_file)) as held:
        _check_held(held, secrets_file, subscription_id, new_file=new_file)
        with service_client(base_url, api_key_env, timeout, max_attempts) as client:
            try:
                issued = client.rotate_secret(subscription_id)
            except ServiceError as e:
                if e.status is None or not 200 <= e.status < 300:
                    raise
                fresh = not held.holds(subscription_id)
                again = _rotate_command(subscription_id, secrets_file, new_file=fresh)
                raise ServiceError(f"{e}: {again}", status=e.status) from None
        valid_from = _save_secret(held, secrets_file, issued, rotated=True)
    _announce_new(held, secrets_file)
    click.echo(f"rotated the secret of {subscription_id}; the previous one no longer works")
    click.echo(f"new secret saved to {secrets_file} (valid_from {valid_from})")


@click.command("snapshot")
@service_options
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Folder that receives webhooks-<UTC timestamp>.json.",
)
def snapshot(
    base_url: str | None, api_key_env: str, timeout: float, max_attempts: int, out_dir: Path
) -> None:
    """Save GET /webhooks as a snapshot file for the subscription analyses.

    The file is {"fetched_at", "base_url", "response"}; any secret value the service exposed is
    replaced by "[redacted]" (so the analyses still see that one was exposed).
    """
    with service_client(base_url, api_key_env, timeout, max_attempts) as client:
        listing = client.fetch_listing()
        key = os.environ[api_key_env]
        service_url = client.base_url
    path, n, exposed = write_snapshot(
        out_dir, listing.body, base_url=service_url, fetched_at=listing.received_at, scrub=[key]
    )
    _warn_exposed(exposed)
    click.echo(f"wrote {path} ({n} subscription{'s' if n != 1 else ''})")
